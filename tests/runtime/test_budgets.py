"""Budgets in the runtime: a session's, an experiment's and an agent's own stop what runs
cleanly (``stopped``, a ``budget:`` reason, resumable), and a resume counts what was spent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from envharness import (
    AgentReply,
    AsyncEnvironmentHarness,
    CommandAgent,
    ConfigurationError,
    Cost,
    EnvironmentHarness,
    Record,
    Scenario,
)
from envharness.contracts.budget import Budget
from envharness.errors import BudgetExhausted
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import (
    ActionAttempted,
    Checkpoint,
    ExperimentStatus,
    Score,
    SessionStatus,
)
from envharness.runtime import budgets
from envharness.runtime.resume import find_resume_point
from envharness.store import read_store

pytestmark = pytest.mark.anyio

PILE = Scenario(id="pile", input=SyntheticScenarioInput(starting_total=0))


class Spender:
    """Adds one each turn and says it cost 7 + 3 tokens and one cent."""

    implementation = "spender@1"
    runs_inline = True

    def act(self, observation: Any) -> AgentReply:
        return AgentReply({"value": 1}, Cost(input_tokens=7, output_tokens=3, usd=0.01))


class Frugal:
    """Like :class:`Spender`, but runs out of its own budget at the third call it makes."""

    implementation = "spender@1"  # the same code as far as the evidence can tell
    allowance: ClassVar[list[int]] = []
    """Calls each new agent may make (the test sets it); none left: it raises."""

    def __init__(self) -> None:
        self.calls = 0
        self.limit = self.allowance[0] if self.allowance else 1_000

    def act(self, observation: Any) -> AgentReply:
        self.calls += 1
        if self.calls > self.limit:
            raise BudgetExhausted(f"no money left for call {self.calls}")
        return AgentReply({"value": 1}, Cost(input_tokens=7, output_tokens=3, usd=0.01))


def harness(store_path: Path, **options: Any) -> AsyncEnvironmentHarness:
    agents = options.pop("agents", {"alice": Spender})
    return AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents=agents, **options
    )


async def records_of(h: AsyncEnvironmentHarness, session_id: str) -> list[Record]:
    return [record async for record in h.records(session_id)]


def payloads(records: list[Record], kind: type[Any]) -> list[Any]:
    return [r.payload for r in records if isinstance(r.payload, kind)]


# -- a session's budget ----------------------------------------------------------------------------


async def test_a_spent_session_budget_stops_it_cleanly_at_a_turn_boundary(
    store_path: Path,
) -> None:
    h = harness(store_path, budget=Budget(tokens=25))
    session = await h.run(PILE, turns=6)
    assert session.status == "stopped"
    assert session.reason == "budget: used 30 tokens of a 25-token budget"
    assert session.turns_completed == 3  # the third turn was finished, not thrown away
    records = await records_of(h, session.id)
    (checkpoint,) = payloads(records, Checkpoint)
    assert (checkpoint.label, checkpoint.turn) == ("budget", 3)  # the resume goes on from here
    assert not payloads(records, Score)
    assert payloads(records, SessionStatus)[-1].status == "stopped"


async def test_a_resume_counts_what_was_spent_and_goes_on_with_a_larger_budget(
    store_path: Path,
) -> None:
    h = harness(store_path, budget=Budget(usd=0.025))
    first = await h.run(PILE, turns=5)
    assert first.reason == "budget: spent $0.0300 of a $0.0250 budget"
    again = await h.resume(first.id)  # the harness's budget, already spent: no turn is played
    assert (again.status, again.turns_completed) == ("stopped", 3)
    assert again.reason == first.reason
    async with h.writable_store() as store:
        point = await find_resume_point(store, first.id)
    assert (point.spent.tokens, point.spent.calls) == (30, 3)
    assert point.spent.usd == pytest.approx(0.03)
    done = await h.resume(first.id, budget=Budget(usd=0.10))
    assert (done.status, done.turns_completed) == ("completed", 5)
    more = await h.continue_(first.id, turns=10, budget=Budget(usd=0.065))
    assert (more.status, more.turns_completed) == ("stopped", 7)  # 5 earlier + 2 more turns
    records = await records_of(h, first.id)
    assert len(payloads(records, Cost)) == 7


async def test_a_call_s_budget_replaces_the_harness_s(store_path: Path) -> None:
    h = harness(store_path, budget=Budget(tokens=1))
    assert h.budget == Budget(tokens=1)
    session = await h.run(PILE, turns=4, budget=Budget(tokens=1_000))
    assert session.status == "completed"


async def test_a_wall_time_budget_counts_the_session_s_own_clock(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Clock:
        """Ten seconds pass between any two looks at it."""

        now = 0.0

        def monotonic(self) -> float:
            self.now += 10.0
            return self.now

    monkeypatch.setattr(budgets, "time", Clock())
    session = await harness(store_path, budget=Budget(seconds=25)).run(PILE, turns=6)
    assert session.status == "stopped"
    assert session.reason == "budget: ran 30.0 s of a 25.0 s budget"
    assert session.turns_completed == 2


async def test_the_spent_wall_time_is_read_back_from_the_segments(store_path: Path) -> None:
    h = harness(store_path, budget=Budget(tokens=15))
    session = await h.run(PILE, turns=4)
    await h.resume(session.id)  # a second segment, stopped at once
    records = await records_of(h, session.id)
    segments: list[float] = []
    for record in records:
        if record.kind == "segment.started":
            start = record.at
        elif record.kind == "segment.ended":
            segments.append((record.at - start).total_seconds())
    async with h.writable_store() as store:
        point = await find_resume_point(store, session.id)
    assert len(segments) == 2
    assert point.spent.seconds == pytest.approx(sum(segments))


async def test_without_a_budget_a_session_does_no_budget_work(store_path: Path) -> None:
    """The hot path: no budget, no counting wrapper around the record function."""
    from envharness.runtime.session import SessionRunner

    h = harness(store_path)
    async with h.writable_store() as store:
        plan = h._template.plan(PILE, PILE.input, turns=1, seed=0)
        runner = SessionRunner(store, plan)
        assert runner._budgets is None
        assert runner._player._record == runner._record
        budgeted = SessionRunner(store, h._template.plan(PILE, PILE.input, turns=1, seed=0,
                                                         budget=Budget(usd=1)))  # fmt: skip
        assert budgeted._budgets is not None
        assert budgeted._player._record != budgeted._record


# -- an agent's own budget -------------------------------------------------------------------------


async def test_an_agent_out_of_budget_stops_the_session_not_fails_it(store_path: Path) -> None:
    Frugal.allowance[:] = [2]
    h = harness(store_path, agents={"alice": Frugal})
    session = await h.run(PILE, turns=5)
    assert session.status == "stopped"
    assert session.reason == "budget: no money left for call 3 (agent 'alice')"
    assert session.turns_completed == 2
    assert session.error is None
    Frugal.allowance[:] = [100]  # a larger budget: the resumed agent can go on
    resumed = await h.resume(session.id)
    assert (resumed.status, resumed.turns_completed) == ("completed", 5)


async def test_what_the_others_answered_in_that_step_is_recorded(store_path: Path) -> None:
    Frugal.allowance[:] = [1]
    h = harness(store_path, agents={"alice": Frugal, "bob": Spender})
    session = await h.run(PILE, turns=3)
    assert session.status == "stopped"
    records = await records_of(h, session.id)
    second = [r for r in records if r.turn == 2]
    assert [(r.kind, r.participant) for r in second if r.kind != "observation"] == [
        ("action.attempted", "bob"),
        ("cost", "bob"),  # bob's answer was paid for: its cost counts on resume
    ]
    assert len(payloads(records, ActionAttempted)) == 3


# -- a program's reported cost ---------------------------------------------------------------------

PROGRAM = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "hello":
        print(json.dumps({"type": "ready", "protocol": 1, "implementation": "paid@1"}))
    elif message["type"] == "act":
        cost = {"input_tokens": 100, "output_tokens": 20, "usd": 0.5}
        reply = {"type": "action", "id": message["id"], "action": {"value": 1}, "cost": cost}
        print(json.dumps(reply))
    elif message["type"] == "shutdown":
        break
    sys.stdout.flush()
"""


async def test_what_a_program_reports_counts_against_the_budget(
    store_path: Path, tmp_path: Path
) -> None:
    program = tmp_path / "paid.py"
    program.write_text(PROGRAM)
    paid = CommandAgent([sys.executable, str(program)], implementation="paid@1")
    h = harness(store_path, agents={"alice": paid}, budget=Budget(usd=1.0))
    session = await h.run(PILE, turns=5)
    assert session.reason == "budget: spent $1.0000 of a $1.0000 budget"
    assert session.turns_completed == 2


# -- an experiment's budget ------------------------------------------------------------------------

SCENARIOS = [Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(4)]


async def test_a_spent_experiment_budget_stops_it_and_a_larger_one_finishes_it(
    store_path: Path,
) -> None:
    h = harness(store_path, max_concurrency=1)
    experiment = h.experiment("sweep", SCENARIOS, turns=3, budget=Budget(tokens=45))
    result = await experiment.run()
    assert result.status == "stopped"
    assert (result.completed, result.stopped) == (1, 3)  # one stopped, two never started
    reason = "budget: the experiment used 50 tokens of a 45-token budget"
    store = await read_store(store_path)
    statuses = [p async for p in _statuses(store, experiment.id)]
    assert statuses[-1].reason == reason
    [stopped] = [s.result for s in result.sessions if s.result.status == "stopped"]
    assert (stopped.reason, stopped.turns_completed) == (reason, 2)

    again = await h.resume_experiment(experiment.id, budget=Budget(tokens=45))
    assert (again.status, again.completed) == ("stopped", 1)  # 50 were spent: nothing starts

    done = await experiment.resume(budget=Budget(tokens=1_000))
    assert (done.status, done.completed, done.stopped) == ("completed", 4, 0)
    sessions = await store.sessions(experiment_id=experiment.id)
    assert sorted(info.turns_completed for info in sessions) == [3, 3, 3, 3]


async def test_sessions_stopped_by_their_own_budget_leave_the_experiment_resumable(
    store_path: Path,
) -> None:
    h = harness(store_path, budget=Budget(tokens=15), max_concurrency=2)
    result = await h.experiment("tight", SCENARIOS[:2], turns=3).run()
    assert result.status == "stopped"
    assert all(s.result.turns_completed == 2 for s in result.sessions)
    store = await read_store(store_path)
    last = [p async for p in _statuses(store, result.id)][-1]
    assert last.reason == "budget: 2 sessions stopped at their own budget; resume with a larger one"
    roomier = harness(store_path, budget=Budget(tokens=100))
    done = await roomier.resume_experiment(result.id)
    assert (done.status, done.completed) == ("completed", 2)


async def _statuses(store: Any, experiment_id: str) -> Any:
    async for record in store.records(experiment_id):
        if isinstance(record.payload, ExperimentStatus):
            yield record.payload


# -- bad input -------------------------------------------------------------------------------------


def test_a_zero_budget_is_refused_naming_the_limit(store_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"Budget usd=0 can let nothing run"):
        harness(store_path, budget=Budget(usd=0))
    with pytest.raises(ConfigurationError, match=r"Budget tokens=-5"):
        harness(store_path, budget=Budget(tokens=-5))


async def test_a_budget_that_is_not_a_budget_is_refused_before_anything_runs(
    store_path: Path,
) -> None:
    with pytest.raises(ConfigurationError, match=r"write Budget\(\*\*\{'usd': 0.5\}\)"):
        harness(store_path, budget={"usd": 0.5})
    h = harness(store_path)
    with pytest.raises(ConfigurationError, match=r"budget must be a Budget.*got float 0\.5"):
        await h.run(PILE, turns=1, budget=0.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"budget must be a Budget.*got str"):
        h.experiment("x", [PILE], turns=1, budget="$1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="budget must be a Budget"):
        await h.resume("ses_nothing", budget=1)  # type: ignore[arg-type]
    assert not await anyio.Path(store_path).exists()  # nothing was recorded, not even a store


def test_the_blocking_harness_takes_budgets_too(store_path: Path) -> None:
    with EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Spender}
    ) as h:
        session = h.run(PILE, turns=4, budget=Budget(tokens=10))
        assert (session.status, session.turns_completed) == ("stopped", 1)
        assert h.resume(session, budget=Budget(tokens=100)).status == "completed"
        experiment = h.experiment("sweep", SCENARIOS[:2], turns=2, budget=Budget(tokens=10))
        assert experiment.run().status == "stopped"
        assert experiment.resume(budget=Budget(tokens=100)).status == "completed"
