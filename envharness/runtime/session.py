"""The session runner: the turn loop that turns agent decisions into evidence.

One runner drives one session through its life: the start (or a resume), segments, the turns
with their checkpoints and feedback, the score and the terminal status; what happens *within* a
turn is :mod:`envharness.runtime.turn`'s. Subclasses interleave operations with the turns
through :meth:`SessionRunner.before_turn`, :meth:`SessionRunner.after_turn` and
:meth:`SessionRunner.operate`. Each turn's records are sealed into the session's hash chain and
handed to the journal at turn boundaries (:mod:`envharness.runtime.recorder` decides when; the
journal merges concurrent sessions' commits).
Whatever goes wrong inside the session — an agent that raises, times out or returns garbage, an
environment whose state cannot be encoded — ends the session ``failed`` with the diagnosis
recorded; cancellation (``stop()``, Ctrl-C) ends it ``stopped`` with every record up to then
committed. A spent budget — the session's or its experiment's, checked at each turn boundary,
or an agent's own (it raises ``BudgetExhausted``) — ends it ``stopped`` too, with a reason
that begins ``budget:``; a resume goes on from there. Only a store that cannot be written is
raised to the caller.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from random import Random
from typing import Any

import anyio
import msgspec

from envharness.contracts.agent import AgentCapabilities, AgentContext, LogLevel, provides
from envharness.contracts.environment import HoldsResources
from envharness.contracts.operations import OperationResult, operation_ref
from envharness.errors import StoreError
from envharness.records import (
    Checkpoint,
    ErrorInfo,
    Intervention,
    Log,
    OperationReceipt,
    ProtocolViolation,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionCreated,
    SessionStatus,
    Status,
)
from envharness.runtime.budgets import BUDGET_PREFIX, BudgetWatch, counting, over_budget
from envharness.runtime.checks import (
    SessionFailure,
    as_evidence,
    awaited,
    call_environment,
    encodable,
    error_info,
    interruption,
    invoke,
    is_pending,
)
from envharness.runtime.hook_memory import HookMemory
from envharness.runtime.hooking import HookRunner
from envharness.runtime.participants import AgentFailure, OutOfBudget, running
from envharness.runtime.plan import (
    EpisodeEnd,
    PauseRequest,
    ProgressCallback,
    Resumption,
    SessionPlan,
    SessionResult,
)
from envharness.runtime.recorder import SessionRecorder
from envharness.runtime.score_records import score_payloads, score_report
from envharness.runtime.turn import TurnPlayer, action_check
from envharness.store.locate import AnyStore
from envharness.store.owners import this_process

__all__ = [
    "PauseRequest",
    "ProgressCallback",
    "Resumption",
    "SessionPlan",
    "SessionResult",
    "SessionRunner",
]


class SessionRunner:
    """Drives one session from ``session.created`` (or a resume) to a terminal status."""

    def __init__(
        self,
        store: AnyStore,
        plan: SessionPlan,
        progress: ProgressCallback | None = None,
        resumption: Resumption | None = None,
    ) -> None:
        self._store = store
        self._plan = plan
        self._progress = progress
        self._resumption = resumption
        self._outcome_seqs: dict[int, list[int]] = {}
        self._turns_completed = 0
        self._ended_by: EpisodeEnd | None = None
        self._segment = 0
        if resumption is None:
            chain = SessionChain(plan.session_id)
        else:
            chain = SessionChain(
                plan.session_id, next_seq=resumption.head_seq + 1, prev=resumption.head_digest
            )
            self._segment = resumption.previous_segment + 1
            self._turns_completed = resumption.turn
            self._outcome_seqs = {t: list(s) for t, s in resumption.outcome_seqs.items()}
        evidence = SessionRecorder(store, chain)
        # Bound once: these run for every record and every turn.
        self._record = evidence.record
        self._keep_state = evidence.keep_state
        self._keep_blob = evidence.keep_blob
        self._flush = evidence.flush
        self._holding = evidence.holding
        self._take_in_flight = evidence.take_in_flight
        self._capabilities = {
            name: AgentCapabilities.of(agent) for name, agent in plan.agents.items()
        }
        """What each agent can do beyond ``act``, found once for the session."""
        self._external = False
        """Whether an agent has a lifespan (a program to start, which may act on the session
        existing: its start is committed first)."""
        for found in self._capabilities.values():
            if found.lifespan is not None:
                self._external = True
        self._current_turn: int | None = None
        """The turn being played; logs from an agent outside any turn carry no turn."""
        self._checkpointed = 0
        """The last turn this segment checkpointed."""
        self._first_turn = self._turns_completed + 1
        watches: list[BudgetWatch] = []
        if plan.budget is not None:
            spent = resumption.spent if resumption is not None else None
            watches.append(BudgetWatch(plan.budget, spent))
        if plan.shared_budget is not None:
            watches.append(plan.shared_budget)
        self._budgets = tuple(watches) or None
        """The budgets this session watches (its own, its experiment's); ``None`` without,
        so a session without a budget does no budget work at all."""
        self._over_budget: str | None = None
        """Why a budget stopped the turns, once one has."""
        self._paused = False
        """Whether a pause request stopped the turns."""
        self._ended: SessionResult | None = None
        """How the session ended, once its terminal status is recorded: an interruption that
        comes while that status is being committed must not record a second one."""
        validate = action_check(plan.environment)
        self._hooking: HookRunner | None = None
        if plan.hooks is not None:
            self._hooking = HookRunner(
                plan.hooks,
                session_id=plan.session_id,
                roster={name: plan.roster[name] for name in plan.agents},
                environment=plan.environment,
                budget=plan.hook_budget,
                max_blocks=plan.max_blocks,
                memory=(resumption.memory if resumption is not None else None) or HookMemory(),
                record=self._record,
                keep_blob=self._keep_blob,
                validate=validate,
            )
        self._player = TurnPlayer(
            store,
            plan,
            evidence,
            self._capabilities,
            hooking=self._hooking,
            validate=validate,
            outcome_seqs=self._outcome_seqs,
            record=counting(evidence.record, watches) if watches else None,
        )
        """Plays each turn (observations, answers, hooks, resolution, outcomes) and keeps the
        digest of the state the evidence last named (:attr:`TurnPlayer.last_state`)."""
        # Bound once: these run every turn.
        self._play = self._player.play
        self._send_feedback = self._player.send_feedback
        runner = type(self)
        self._before_turn = (
            None if runner.before_turn is SessionRunner.before_turn else self.before_turn
        )
        self._after_turn = (
            None if runner.after_turn is SessionRunner.after_turn else self.after_turn
        )
        """The subclass's ``before_turn`` and ``after_turn``; ``None`` where it keeps ours, which
        change nothing (then no turn awaits them)."""

    async def run(self) -> SessionResult:
        plan = self._plan
        resumption = self._resumption
        if resumption is None:
            self._record(SessionCreated(config=plan.config()))
            self._record(SessionStatus(status="running"))
        else:
            self._record(SessionStatus(status="running", reason="resumed"))
        for watch in self._budgets or ():
            watch.start()
        try:
            if provides(plan.environment, HoldsResources):
                async with _holding(plan.environment):
                    reason = await self._episode(resumption)
            else:  # no lifespan: no context manager to enter and leave
                reason = await self._episode(resumption)
            if self._paused:
                return await self._finish("paused", reason)
            if self._over_budget is not None:
                return await self._finish("stopped", self._over_budget)
            return await self._finish("completed", reason)
        except OutOfBudget as stop:  # an agent could not afford to answer: stopped, not failed
            return await self._finish("stopped", f"{BUDGET_PREFIX}{stop.reason}")
        except AgentFailure as failure:
            await self._record_violation(failure)
            return await self._finish("failed", failure.reason, error_info(failure.cause))
        except SessionFailure as failure:
            return await self._finish("failed", failure.reason, failure.error)
        except StoreError:
            raise
        except BaseException as exc:  # every way out leaves a terminal status
            status, reason = interruption(exc)
            asked = self._plan.pause.stop_reason if self._plan.pause is not None else None
            if status == "stopped" and asked is not None:
                reason = asked  # cancelled on someone's request, who is named
            error = None if status == "stopped" else error_info(exc)
            with anyio.CancelScope(shield=True):
                result = await self._finish(status, reason, error, interrupted=True)
            if isinstance(exc, Exception) and not isinstance(exc, BaseExceptionGroup):
                return result  # a bug in envharness, recorded; the caller still gets a result
            raise

    async def _episode(self, resumption: Resumption | None) -> str | None:
        """From the start (or the resumed state) through the last turn and the score (unless
        the session paused or ran out of budget): why the turns stopped early, if they did."""
        plan = self._plan
        if resumption is None:
            state = invoke(
                plan.environment, "initialize", plan.input, Random(plan.seed), plan.roster
            )
            if is_pending(state):
                state = await awaited(state, "initialize")
            segment = SegmentStarted(
                segment=self._segment, state=self._keep_state(state), runner=this_process()
            )
        else:
            state = resumption.state
            segment = SegmentStarted(
                segment=self._segment,
                cause=resumption.cause,
                previous=resumption.previous_segment,
                until=resumption.until,
                state=self._keep_state(state),
                turn=resumption.turn,
                runner=this_process(),
                changes=resumption.changes,
            )
        self._record(segment)
        if self._hooking is not None and resumption is None:
            await self._hooking.on_init(state, lambda p: self._observe(state, p))
        # A caller told the session's id (progress), or an agent process about to start,
        # may act on the session existing: commit the start first. Otherwise it goes out
        # with the first turns, in one commit (without a yield here: the turn boundaries
        # yield when another task is ready, see runtime/recorder.py).
        external = self._external
        if (self._progress is not None and not plan.progress_follows_commits) or external:
            await self._flush()
        elif self._progress is not None:  # told only once committed: handed over, not waited for
            await self._flush(durable=False, hold=False)
        elif not self._holding():
            await self._flush(durable=False)
        if self._progress is not None:
            self._progress(plan.session_id, self._turns_completed, plan.turns)
        restoring = resumption.agent_states if resumption is not None else None
        if external:  # only an agent with a lifespan is given a context (before its 1st turn)
            async with running(self._capabilities, self._agent_contexts()):
                if restoring:
                    await self._restore_agents(restoring)
                state, reason = await self._turns(state)
        else:  # no lifespan: no context manager to enter and leave
            if restoring:
                await self._restore_agents(restoring)
            state, reason = await self._turns(state)
        if not self._paused and self._over_budget is None:
            await self._score(state)
        return reason

    async def _observe(self, state: Any, participant: str) -> Any:
        """What ``participant`` sees of ``state``, as JSON (for an ``on_init`` context)."""
        observation = await call_environment(self._plan.environment, "observe", state, participant)
        return encodable(observation, f"observation for {participant!r}")

    # -- turns ---------------------------------------------------------------------------------

    async def _turns(self, state: Any) -> tuple[Any, str | None]:
        """Run the planned turns; returns the final state and why it stopped early, if it did."""
        plan = self._plan
        pause = plan.pause
        budgets = self._budgets
        play, flush, progress = self._play, self._flush, self._progress
        listens, every = self._player.listens, plan.checkpoint_every
        for turn in range(self._turns_completed + 1, plan.turns + 1):
            if pause is not None and pause.requested:
                # Keep what the agents and hooks know now, so the resume goes on from it.
                if self._turns_completed > max(self._checkpointed, self._first_turn - 1):
                    await self._checkpoint(self._turns_completed, state, "paused")
                self._paused = True
                return state, pause.reason
            if budgets is not None and (spent := over_budget(budgets)) is not None:
                # Between turns, like a pause: a turn once begun is finished (its cost is not
                # thrown away to be paid again on resume), and the resume goes on from here.
                if self._turns_completed > max(self._checkpointed, self._first_turn - 1):
                    await self._checkpoint(self._turns_completed, state, "budget")
                self._over_budget = spent
                return state, spent
            self._current_turn = turn
            if self._before_turn is not None:
                state = await self._before_turn(turn, state)
            state, done = await play(turn, state)
            if self._after_turn is not None:
                resolved = state
                state = await self._after_turn(turn, state)
                if state is not resolved:
                    self._record_state_change(turn, state)
            await flush(durable=False)
            self._turns_completed = turn
            if listens:
                await self._send_feedback(turn)
            if every and turn % every == 0 and not done:
                await self._checkpoint(turn, state)
            self._current_turn = None
            if progress is not None:
                progress(plan.session_id, turn, plan.turns)
            if done:
                if self._player.truncated:
                    self._ended_by = "truncated"
                    return state, f"the environment truncated the episode at turn {turn}"
                self._ended_by = "done"
                return state, f"the environment reported done at turn {turn}"
        self._ended_by = "turn_limit"
        return state, None

    def _record_state_change(self, turn: int, state: Any) -> None:
        """``after_turn`` left another state than the evidence last named: record it (as an
        ``intervention``), so that a resume restores exactly what the turn ended with."""
        digest = self._keep_state(state)
        if digest != self._player.last_state:
            self._record(
                Intervention(
                    intervention={"kind": "after_turn"},
                    reason=f"{type(self).__name__}.after_turn changed the state",
                    state=digest,
                ),
                turn=turn,
            )
            self._player.last_state = digest

    async def _checkpoint(self, turn: int, state: Any, label: str | None = None) -> None:
        """A checkpoint at this turn boundary, with each agent's own state where it can give
        one (an external agent that declared ``snapshot``)."""
        snapshots: dict[str, Any] = {}
        for participant, found in self._capabilities.items():
            if found.snapshots is not None and found.snapshots.can_snapshot:
                try:
                    snapshots[participant] = await found.snapshots.snapshot()
                except Exception as exc:
                    raise AgentFailure(
                        participant,
                        f"agent {participant!r} failed to give its state for a checkpoint: {exc}",
                        exc,
                    ) from exc
        self._checkpointed = turn
        self._record(
            Checkpoint(
                label=label or f"turn {turn}",
                state=self._keep_state(state),
                agents=snapshots,
                notebook=self._hooking.notebook if self._hooking is not None else None,
                turn=turn,
            ),
            turn=turn,
        )

    async def _restore_agents(self, states: Mapping[str, Any]) -> None:
        """Give each agent the state a checkpoint recorded for it (a branch's first turn), when
        it can take one; an agent that cannot is told in a ``log`` record, and starts afresh."""
        for participant, agent_state in states.items():
            found = self._capabilities.get(participant)
            if found is None:
                continue
            if found.snapshots is None or not found.snapshots.can_snapshot:
                self._record(
                    Log(
                        message=f"agent {participant!r} cannot restore the state its checkpoint "
                        "recorded (no snapshot capability); it starts afresh",
                        level="warning",
                    ),
                    participant=participant,
                )
                continue
            try:
                restored = found.snapshots.restore(agent_state)
                if inspect.isawaitable(restored):
                    await restored
            except Exception as exc:
                raise AgentFailure(
                    participant,
                    f"agent {participant!r} failed to restore its checkpointed state: {exc}",
                    exc,
                ) from exc
            self._record(
                Log(message="restored the agent's state from the checkpoint", level="info"),
                participant=participant,
            )

    # -- the seam: subclass SessionRunner to interleave operations with turns ------------------

    async def before_turn(self, turn: int, state: Any) -> Any:
        """Called before each turn with the current state; returns the state to play on."""
        return state

    async def after_turn(self, turn: int, state: Any) -> Any:
        """Called after each turn is resolved (before its commit); returns the state to keep."""
        return state

    async def operate(self, name: str, request: Any, state: Any) -> tuple[Any, Any]:
        """Call the session's operation ``name``; returns ``(result, state)``.

        The call is recorded as an ``operation.receipt`` with its request, result and the new
        state's digest. A sync operation runs in a worker thread (it usually does I/O). An
        operation that raises fails the session with the receipt — and its error — recorded.
        """
        operation = self._plan.operations.get(name)
        if operation is None:
            raise SessionFailure(
                f"no operation {name!r} in this session; it has {sorted(self._plan.operations)}"
            )
        reference = operation_ref(operation)
        started = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(operation.run):
                outcome = await operation.run(state, request)
            else:
                outcome = await anyio.to_thread.run_sync(operation.run, state, request)
        except Exception as exc:
            self._record(
                OperationReceipt(
                    operation=reference.name,
                    version=reference.version,
                    request=as_evidence(request),
                    error=error_info(exc),
                    seconds=time.perf_counter() - started,
                ),
                turn=self._current_turn,
            )
            raise SessionFailure(
                f"operation {name!r} raised {type(exc).__name__}: {exc}", exc
            ) from exc
        if not isinstance(outcome, OperationResult):
            outcome = OperationResult(result=outcome)
        new_state = outcome.state if outcome.changed_state else state
        digest = self._keep_state(new_state) if outcome.changed_state else None
        if digest is not None:
            self._player.last_state = digest
        self._record(
            OperationReceipt(
                operation=reference.name,
                version=reference.version,
                request=as_evidence(request),
                result=encodable(outcome.result, f"result of operation {name!r}"),
                state=digest,
                seconds=time.perf_counter() - started,
            ),
            turn=self._current_turn,
        )
        return outcome.result, new_state

    # -- scoring and the end -------------------------------------------------------------------

    async def _score(self, state: Any) -> None:
        plan = self._plan
        report = await score_report(plan.environment, state, plan.scenario)
        if report is not None:
            for payload in score_payloads(
                report, plan.environment, plan.agents, self._outcome_seqs
            ):
                self._record(payload)

    def _agent_contexts(self) -> dict[str, AgentContext]:
        plan = self._plan
        environment = plan.environment.spec.reference()
        told = msgspec.json.encode(plan.scenario.reference_record(plan.input).input)

        def logger(participant: str) -> Callable[[str, LogLevel, str | None], None]:
            def log(message: str, level: LogLevel = "info", stream: str | None = None) -> None:
                self._record(
                    Log(message=message, level=level, stream=stream),
                    turn=self._current_turn, participant=participant,
                )  # fmt: skip

            return log

        return {
            name: AgentContext(
                session_id=plan.session_id,
                participant=name,
                role=plan.roster[name],
                seed=plan.seed,
                turns=plan.turns,
                environment=environment,
                first_turn=self._turns_completed + 1,
                log=logger(name),
                current_turn=lambda: self._current_turn,
                scenario_id=plan.scenario.id,
                input=msgspec.json.decode(told),  # each agent its own copy
            )
            for name in plan.agents
        }

    async def _record_violation(self, failure: AgentFailure) -> None:
        """Keep what an external agent sent that broke the protocol, bytes and all."""
        violation = failure.violation
        if violation is None:
            return
        sha256 = (
            await self._store.put_artifact(violation.offending) if violation.offending else None
        )
        self._record(
            ProtocolViolation(
                problem=f"{violation.code}: {violation.problem}",
                artifact=sha256,
                excerpt=violation.offending[:200].decode("utf-8", "replace"),
            ),
            turn=self._current_turn, participant=failure.participant,
        )  # fmt: skip

    async def _finish(
        self,
        status: Status,
        reason: str | None,
        error: ErrorInfo | None = None,
        *,
        interrupted: bool = False,
    ) -> SessionResult:
        """Record the end and commit it: waited for here, or, for a session that ended
        rather than being interrupted, by whoever the plan hands its last commits to (an
        interrupted session's caller reads how it ended from the store, so it waits here)."""
        if self._ended is not None:  # ended already; interrupted while committing that end
            await self._flush()
            return self._ended
        self._record(SessionStatus(status=status, reason=reason, error=error))
        self._record(SegmentEnded(segment=self._segment, status=status))
        self._ended = SessionResult(
            id=self._plan.session_id,
            status=status,
            turns_completed=self._turns_completed,
            reason=reason,
            error=error,
            ended_by=self._ended_by if status == "completed" else None,
        )
        commits_to = None if interrupted else self._plan.commits_to
        if commits_to is not None:  # its caller waits for the commits: the session ends here
            await self._flush(durable=False, hold=False)
            commits_to(self._take_in_flight())
            return self._ended
        settling = self._plan.settling
        if settling is not None:
            await self._flush(durable=False, hold=False)
            settling()
        await self._flush()
        return self._ended


@asynccontextmanager
async def _holding(environment: HoldsResources) -> AsyncIterator[None]:
    """The environment's ``lifespan()`` around the session, when it has one (a program it
    talks to runs for exactly this long); a lifespan that cannot start fails the session."""
    async with AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(environment.lifespan())
        except Exception as exc:
            raise SessionFailure(
                f"environment lifespan() raised {type(exc).__name__}: {exc}", exc
            ) from exc
        yield
