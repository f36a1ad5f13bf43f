"""How a recorded session or experiment goes on: resume, continue, and finishing experiments.

A resume re-creates the session's plan from what its evidence recorded (scenario, seed, turns)
with today's code from the :class:`~envharness.runtime.template.SessionTemplate`, refuses when
that code differs from the recorded one unless the change is declared, and runs a new segment
from the last complete turn. Finishing an experiment keeps its completed and failed sessions,
resumes the interrupted, stopped and paused ones, and starts those that never started — each
with the seed derived for it, so the evidence ends as if nothing had happened.

Budgets are the caller's, given again with each resume (or the harness's own); what was spent
before counts against them, read back from the evidence: the ``cost`` records and the wall
time of the earlier segments (of an experiment: of its sessions' costs and its earlier runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgspec

from envharness.contracts.budget import Budget
from envharness.contracts.scenario import Scenario, validate_input
from envharness.errors import ChainConflictError, ConfigurationError
from envharness.hooks import HarnessHooks
from envharness.runtime.budgets import BudgetWatch
from envharness.runtime.executors.seam import Executor
from envharness.runtime.experiment import (
    ExperimentResult,
    ExperimentResumption,
    ExperimentRunner,
)
from envharness.runtime.plan import PauseRequest, ProgressCallback, SessionPlan, SessionResult
from envharness.runtime.resume import (
    CONTINUABLE,
    RESUMABLE,
    differences,
    find_resume_point,
    read_experiment,
    restore_state,
    scenario_input,
)
from envharness.runtime.template import SessionPauses, SessionTemplate, keeping_block_limit
from envharness.store.locate import AnyStore

__all__ = ["resume_experiment", "resume_session"]


async def resume_session(
    store: AnyStore,
    template: SessionTemplate,
    session_id: str,
    *,
    declare_changes: str | None,
    progress: ProgressCallback | None,
    hooks: HarnessHooks | None,
    pauses: SessionPauses | None = None,
    more_turns: int | None = None,
    pause: PauseRequest | None = None,
    settling: Callable[[], None] | None = None,
    budget: Budget | None = None,
    shared_budget: BudgetWatch | None = None,
) -> SessionResult:
    """Run a new segment of ``session_id`` after its last complete turn.

    ``more_turns`` continues a completed (or paused, stopped, interrupted) session by that
    many turns; without it, an unfinished session plays the turns it had left. The session is
    paused by ``pause`` when given (an experiment's), else it is held in ``pauses``. ``budget``
    (default: the template's) counts what the session spent before; ``shared_budget`` is its
    experiment's.
    """
    allowed = RESUMABLE if more_turns is None else CONTINUABLE
    point = await find_resume_point(store, session_id, allowed)
    config = point.config
    environment = template.new_environment()
    scenario: Scenario[Any] = Scenario(
        id=config.scenario.id,
        input=scenario_input(config, environment.spec.input_type),
        reference=config.scenario.reference,
        metadata=config.scenario.metadata,
    )
    plan = template.plan(
        scenario,
        scenario.input,
        turns=(point.until or config.turns) if more_turns is None else point.turn + more_turns,
        seed=config.seed,
        environment=environment,
        session_id=(await store.session(session_id)).id,
        experiment_id=config.experiment_id,
        trial=config.trial,
        hooks=hooks,
        budget=budget,
    )
    plan = keeping_block_limit(plan, config)
    changes = differences(config, plan.config())
    if changes and not declare_changes:
        raise ConfigurationError(
            f"session {plan.session_id} was recorded with different code: "
            f"{'; '.join(changes)}. Resume with the recorded code, or pass "
            "declare_changes='why' to go on anyway (the change is recorded)"
        )
    declared = (*changes, f"declared: {declare_changes}") if declare_changes else ()
    state = restore_state(await store.blob(point.state_digest), environment.spec.state_type)
    until = plan.turns if (more_turns is not None or point.until) else None
    resumption = point.resumption(state, declared, until)
    try:
        if shared_budget is not None:
            plan = dataclasses.replace(plan, shared_budget=shared_budget)
        if pause is not None:
            plan = dataclasses.replace(plan, pause=pause, settling=settling)
            return await template.runner(store, plan, progress, resumption).run()
        async with (pauses or SessionPauses()).holding(plan.session_id) as own:
            plan = dataclasses.replace(plan, pause=own)
            return await template.runner(store, plan, progress, resumption).run()
    except ChainConflictError as exc:
        raise ConfigurationError(
            f"session {plan.session_id} is being resumed by another process; "
            "only one runner may drive a session"
        ) from exc


async def resume_experiment(
    store: AnyStore,
    template: SessionTemplate,
    experiment_id: str,
    *,
    declare_changes: str | None,
    progress: ProgressCallback | None,
    hooks: HarnessHooks | None,
    pause: PauseRequest,
    budget: Budget | None = None,
    executor: Executor | None = None,
) -> ExperimentResult:
    """Finish an interrupted, stopped or paused experiment (see the module doc); ``budget``
    is the whole experiment's, counting what it spent before. ``executor`` is where its
    sessions run (``None``: here)."""
    # A unique prefix names it as in `envharness experiments show`; the chain it continues is
    # the full id's.
    experiment_id = (await store.experiment(experiment_id)).id
    recorded = await read_experiment(store, experiment_id, spending=budget is not None)
    if recorded.status not in RESUMABLE:
        raise ConfigurationError(
            f"experiment {experiment_id} cannot be resumed: it is {recorded.status}"
        )
    config = recorded.config
    environment = template.new_environment()
    input_type = environment.spec.input_type
    check: Scenario[Any] = Scenario(id="check", input=config.scenarios[0].input)
    current = template.plan(
        check,
        validate_input(check, input_type),
        turns=1,
        seed=0,
        environment=environment,
        hooks=hooks,
    ).config()
    changes = differences(config, current)
    if changes and not declare_changes:
        raise ConfigurationError(
            f"experiment {experiment_id} was recorded with different code: "
            f"{'; '.join(changes)}. Resume with the recorded code, or pass "
            "declare_changes='why' to go on anyway (each resumed session records it)"
        )
    scenarios = [
        Scenario(
            id=ref.id,
            input=msgspec.convert(ref.input, input_type),
            reference=ref.reference,
            metadata=ref.metadata,
        )
        for ref in config.scenarios
    ]

    watch = None
    if budget is not None:
        watch = BudgetWatch(budget, recorded.spent, whose="the experiment ")

    plan_session = _ResumedPlanner(template, input_type, config.turns, experiment_id, hooks)
    if executor is not None:
        executor.check(plan_session, ())  # before anything is recorded

    async def resume_one(session_id: str, settling: Callable[[], None]) -> SessionResult:
        return await resume_session(
            store,
            template,
            session_id,
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            pause=pause,
            settling=settling,
            shared_budget=watch,
        )

    resumption = ExperimentResumption(
        head_seq=recorded.head_seq,
        head_digest=recorded.head_digest,
        sessions=recorded.sessions,
        resume_session=resume_one,
        spent=recorded.spent,
        changes=(*changes, f"declared: {declare_changes}") if declare_changes else (),
    )
    runner = ExperimentRunner(
        store,
        experiment_id,
        config,
        scenarios,
        plan_session,
        progress,
        resumption,
        template.runner,
        pause,
        watch,
        executor,
    )
    return await runner.run()


@dataclasses.dataclass(frozen=True, slots=True)
class _ResumedPlanner:
    """Plans the sessions a resumed experiment starts anew; a value, not a closure, so that a
    remote executor can send it to its workers."""

    template: SessionTemplate
    input_type: type[Any]
    turns: int
    experiment_id: str
    hooks: HarnessHooks | None

    def __call__(
        self, scenario: Scenario[Any], trial: int, seed: int, /, session_id: str | None = None
    ) -> SessionPlan:
        return self.template.plan(
            scenario,
            validate_input(scenario, self.input_type),
            turns=self.turns,
            seed=seed,
            session_id=session_id,
            experiment_id=self.experiment_id,
            trial=trial,
            hooks=self.hooks,
        )
