"""The quickstart store: synthetic sessions that show what evidence looks like.

Nothing here measures anything. The agents are a few lines each and behave badly on purpose,
so that a first look at a store meets every common kind of record and every viewer page has
data: an experiment (five scenarios x two trials, one roster), three standalone sessions with
other rosters, blocked actions, a finding, a score that passed and one that did not, a session
that failed with its reason, an artifact (a plain-text board of the final state), and a
checkpoint with a branch made from it under a declared intervention, both then continued, so
that lineage and comparison have something to show. Then the experiment's trajectories are
frozen into a snapshot (declared fit for training: it is synthetic data made for this demo) and
a dataset is made from it, and a small source is imported — two episodes written the way
another tool would send them (:data:`REPLAY`) — so that every trajectory page has content.

The store is a directory or a PostgreSQL database (a ``postgresql://`` URL): the same steps,
through the same functions, record the same evidence into either.

The plan is data (:data:`EXPERIMENT`, :data:`STANDALONE` and :data:`BRANCH`): a later feature
adds a step after :func:`write_quickstart`'s runs rather than a second demo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from envharness.api.harness import AsyncEnvironmentHarness, Session
from envharness.api.sources import AsyncSources
from envharness.contracts.agent import AgentFactory
from envharness.contracts.environment import Resolution
from envharness.contracts.scenario import Scenario
from envharness.fixtures import (
    SyntheticAction,
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticObservation,
    SyntheticScenarioInput,
    SyntheticState,
)
from envharness.store import RecordFilter, read_store
from envharness.store.database import DATABASE_NAME
from envharness.store.locate import opening_store, postgres_url, reading_store, without_password
from envharness.store.sources import SourceRow
from envharness.trajectories import Entitlement, create_dataset, freeze
from envharness.trajectories.sources import SourceChain

__all__ = [
    "BRANCH",
    "ENTITLEMENT",
    "EXPERIMENT",
    "REPLAY",
    "SCENARIOS",
    "STANDALONE",
    "BoardEnvironment",
    "Frozen",
    "BranchStep",
    "Branched",
    "Plan",
    "QuickstartSummary",
    "replay_records",
    "rerun_note",
    "write_quickstart",
]

BOARD = "board.txt"
"""The artifact every session that reaches its end keeps: the final state as plain text."""


class OverreachingAgent:
    """Asks for 99 every third turn — outside the environment's -10..10, so it is blocked."""

    implementation = "quickstart-overreacher@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        return {"value": 99 if observation.turn % 3 == 0 else 2}


class DownhillAgent:
    """Subtracts three every turn, dragging shared totals below zero (a finding)."""

    implementation = "quickstart-downhill@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        return {"value": -3}


class FlakyAgent:
    """Raises on its third turn, so one session ends ``failed`` with the reason recorded."""

    implementation = "quickstart-flaky@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if observation.turn == 2:
            raise RuntimeError("the flaky quickstart agent gave up (on purpose)")
        return {"value": 1}


def _scenario(scenario_id: str, starting_total: int, target: int | None) -> Scenario[Any]:
    return Scenario(
        id=scenario_id,
        input=SyntheticScenarioInput(starting_total=starting_total, target=target),
        metadata={"synthetic": True},
    )


SCENARIOS: tuple[Scenario[Any], ...] = (
    _scenario("warm-up", 0, 3),
    _scenario("count-down", 6, None),
    _scenario("far-target", 0, 40),
    _scenario("below-zero", -5, None),
    _scenario("overshoot", 9, 2),
)


class BoardEnvironment(SyntheticEnvironment):
    """The synthetic rules, plus a plain-text board of the final state kept as an artifact.

    The board is written on the session's last turn (the planned one, or the one that reaches
    the target), so an artifact record sits in the evidence of every session that got there.
    """

    def __init__(self, turns: int) -> None:
        self.turns = turns

    def resolve(self, state: SyntheticState, actions: Mapping[str, SyntheticAction]) -> Resolution:
        resolution = super().resolve(state, actions)
        final: SyntheticState = resolution.state
        if not resolution.done and final.turn < self.turns:
            return resolution
        return dataclasses.replace(resolution, artifacts={BOARD: _board(final)})


def _board(state: SyntheticState) -> bytes:
    width = max(len(name) for name in state.contributions) if state.contributions else 4
    lines = [
        "synthetic-total board (quickstart: these numbers measure nothing)",
        f"after turn {state.turn}: total {state.total}"
        + (f", target {state.target}" if state.target is not None else ""),
        "",
    ]
    for name, values in state.contributions.items():
        added = " ".join(f"{value:+d}" for value in values) or "(nothing executed)"
        lines.append(f"{name:<{width}}  {added}  = {sum(values):+d}")
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True, slots=True)
class Plan:
    """One roster, run by one harness: over scenarios x trials (an experiment) or once."""

    name: str
    agents: Mapping[str, AgentFactory]
    scenarios: tuple[Scenario[Any], ...]
    trials: int = 1


EXPERIMENT = Plan(
    "quickstart sweep", {"alice": SyntheticAgent, "bob": OverreachingAgent}, SCENARIOS, trials=2
)
"""Grouped sessions: every scenario, two trials each, under one frozen configuration."""
STANDALONE: tuple[Plan, ...] = (
    Plan(
        "trio",
        {"alice": SyntheticAgent, "bob": OverreachingAgent, "carol": DownhillAgent},
        (SCENARIOS[2],),
    ),
    Plan("solo", {"alice": SyntheticAgent}, (SCENARIOS[0],)),
    Plan("flaky", {"dana": FlakyAgent}, (SCENARIOS[0],)),
)
"""Ungrouped sessions, each with a roster of its own."""
EXPERIMENT_SEED = 42


@dataclass(frozen=True, slots=True)
class BranchStep:
    """Checkpoint a standalone session where it ended, branch it with a declared intervention,
    then continue the session and its branch for ``turns`` more turns each."""

    plan: str
    """The name of the standalone :class:`Plan` whose session is branched."""
    intervention: Mapping[str, Any]
    reason: str
    turns: int = 2


BRANCH = BranchStep(
    "trio", {"kind": "reset-total", "value": 0}, "what if the total were reset", turns=2
)
"""The trio (blocked actions, a finding) is checkpointed and branched with its total reset."""


@dataclass(frozen=True, slots=True)
class Branched:
    """What the branch step wrote: a checkpoint on ``parent`` and the branch ``child``."""

    parent: str
    child: str
    checkpoint_seq: int
    checkpoint_turn: int
    intervention: Mapping[str, Any]
    reason: str
    turns: int
    """Turns completed by the parent and by its branch once both were continued."""


REPLAY = "quickstart/replay"
"""The imported source: what another tool might have logged of two games of its own."""
ENTITLEMENT = Entitlement(
    basis="synthetic quickstart data, made for this demo: it measures nothing",
    declared_by="envharness quickstart",
)
"""The snapshot's training declaration: the quickstart's own synthetic data."""


def replay_records() -> list[SourceRow]:
    """Two episodes of :data:`REPLAY`, hash-chained as docs/imports.md describes: one scored
    and completed, one that lost a record and was stopped. Fixed times, so importing them
    again (a second quickstart into the same store) stores nothing new."""
    chain = SourceChain(REPLAY)
    at = "2026-01-05T09:00:00Z"
    started = {"environment": "synthetic-total@1", "scenario_id": "warm-up",
               "participants": {"alice": "replayed-bot@1"}}  # fmt: skip
    rows = [chain.seal("game-1", "episode.started", started, at=at)]
    shown = chain.seal("game-1", "observation", {"total": 0, "target": 3}, at=at, turn=1,
                       participant="alice")  # fmt: skip
    acted = chain.seal("game-1", "action", {"value": 3}, at=at, turn=1, participant="alice")
    score = {"scorer": "replay-score@1", "metrics": {"total": 3.0}, "passed": True,
             "cites": [shown.position, acted.position]}  # fmt: skip
    rows += [
        shown,
        acted,
        chain.seal("game-1", "score", score, at=at),
        chain.seal("game-1", "episode.ended", {"status": "completed"}, at=at),
        chain.seal("game-2", "episode.started", started, at=at),
        chain.seal(
            "game-2", "observation", {"total": 0, "target": 3}, at=at, turn=1, participant="alice"
        ),
        chain.seal(
            "game-2", "capture.failed", {"detail": "the exporter dropped a span", "lost": 1}, at=at
        ),
        chain.seal(
            "game-2",
            "episode.ended",
            {"status": "stopped", "reason": "stopped by the replaying tool"},
            at=at,
        ),
    ]
    return rows


@dataclass(frozen=True, slots=True)
class Frozen:
    """What the last step wrote: a snapshot of the experiment, a dataset, an imported source."""

    snapshot: str
    trajectories: int
    dataset: str
    source: str
    episodes: int


@dataclass(frozen=True, slots=True)
class QuickstartSummary:
    """What was written, and which session is worth looking at first."""

    store: Path | str
    """The store directory, or the PostgreSQL URL without its password (see
    :attr:`password_left_out`): what the suggested commands name."""
    experiment: str
    """The experiment's id (``exp_…``)."""
    experiment_name: str
    grouped: int
    """Sessions of the experiment; the rest of :attr:`sessions` are standalone."""
    sessions: tuple[Session, ...]
    records: int
    blocked: int
    findings: int
    artifacts: int
    showcase: str
    """A session with a blocked action and a finding, for the suggested ``show``."""
    branch: Branched | None = None
    """The branch made by :data:`BRANCH` (``None`` when the plan has no branch step)."""
    frozen: Frozen | None = None
    """The snapshot, dataset and imported source (``None`` when not asked for)."""
    earlier: int = 0
    """Sessions the store already held: a rerun adds to a store, it never replaces one."""
    password_left_out: bool = False
    """The URL held a password, left out of :attr:`store`: the suggested commands connect
    with the one in ``~/.pgpass`` or ``$PGPASSWORD``."""


def rerun_note(summary: QuickstartSummary) -> str | None:
    """Why a rerun's store holds more than the demo wrote, and how to start afresh instead."""
    if not summary.earlier:
        return None
    total = summary.earlier + len(summary.sessions)
    return (
        f"  added to the {summary.earlier} sessions already here ({total} now);"
        " a new --store starts afresh"
    )


async def write_quickstart(
    store: Path | str,
    *,
    turns: int,
    experiment: Plan = EXPERIMENT,
    standalone: tuple[Plan, ...] = STANDALONE,
    branch: BranchStep | None = BRANCH,
    freeze_and_import: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> QuickstartSummary:
    """Run the experiment, then each standalone session, then the branch step, into
    ``store`` (a directory, or a PostgreSQL URL); then freeze the experiment's trajectories,
    make a dataset of them and import :data:`REPLAY` (``freeze_and_import``); count what was
    recorded. ``progress`` is called with (sessions started, sessions planned)."""
    planned = (
        len(experiment.scenarios) * experiment.trials
        + sum(len(plan.scenarios) for plan in standalone)
        + (branch is not None)
    )
    started: set[str] = set()
    earlier = await _sessions_in(store)

    def on_turn(session_id: str, done: int, total: int) -> None:
        if session_id not in started:
            started.add(session_id)
            if progress is not None:
                progress(len(started), planned)

    def environment() -> BoardEnvironment:
        return BoardEnvironment(turns)

    harness = AsyncEnvironmentHarness(store, environment=environment, agents=experiment.agents)
    result = await harness.experiment(
        experiment.name,
        experiment.scenarios,
        turns=turns,
        trials=experiment.trials,
        seed=EXPERIMENT_SEED,
    ).run(progress=on_turn)
    sessions = [
        Session(
            id=member.result.id,
            status=member.result.status,
            turns_completed=member.result.turns_completed,
            store=harness.store,
            reason=member.result.reason,
            error=member.result.error,
        )
        for member in result.sessions
    ]
    ran: dict[str, Session] = {}
    for plan in standalone:
        harness = AsyncEnvironmentHarness(store, environment=environment, agents=plan.agents)
        for scenario in plan.scenarios:
            session = await harness.run(scenario, turns=turns, seed=len(sessions), progress=on_turn)
            sessions.append(session)
            ran.setdefault(plan.name, session)
    branched = None
    if branch is not None:
        [plan] = [plan for plan in standalone if plan.name == branch.plan]
        branched = await _branch(store, plan, ran[plan.name], branch, turns, sessions, on_turn)
    summary = await _summarise(store, result.id, result.name, len(result.sessions), sessions)
    frozen = None
    if freeze_and_import:
        frozen = await _freeze_and_import(store, [m.result.id for m in result.sessions])
    url = postgres_url(store)
    named, left_out = (store, False) if url is None else without_password(url)
    return dataclasses.replace(
        summary,
        store=named,
        branch=branched,
        frozen=frozen,
        earlier=earlier,
        password_left_out=left_out,
    )


async def _sessions_in(store: Path | str) -> int:
    """Sessions already in ``store``. A database is opened for writing here, so that one
    that cannot be reached, or a role that may not write, is refused before the first run."""
    if isinstance(store, str):
        async with opening_store(store) as opened:
            return len(await opened.sessions())
    if not await anyio.Path(store / DATABASE_NAME).exists():
        return 0
    return len(await (await read_store(store)).sessions())


async def _freeze_and_import(store: Path | str, experiment_sessions: list[str]) -> Frozen:
    """A training-entitled snapshot of the experiment's sessions, a dataset of it, and the
    imported :data:`REPLAY` — the same functions ``snapshot create``, ``dataset create`` and
    ``import`` call."""
    async with reading_store(store) as reader:
        snapshot = await freeze(
            reader, experiment_sessions, label="quickstart sweep", entitlement=ENTITLEMENT
        )
        snapshot_id = snapshot.metadata.id
        # The players share one total (a cooperative game): one reward is rightly both
        # players'.
        dataset = await create_dataset(
            reader,
            f"quickstart-{snapshot_id[4:12]}",
            [snapshot_id],
            reward="total",
            shared_reward=True,
        )
    records = replay_records()
    await AsyncSources(store).import_records(REPLAY, records)
    return Frozen(
        snapshot=snapshot_id,
        trajectories=snapshot.metadata.trajectories,
        dataset=dataset.name,
        source=REPLAY,
        episodes=len({row.episode for row in records}),
    )


async def _branch(
    store: Path | str,
    plan: Plan,
    parent: Session,
    step: BranchStep,
    turns: int,
    sessions: list[Session],
    on_turn: Callable[[str, int, int], None],
) -> Branched:
    """Checkpoint ``parent``, branch it, and continue both; the board moves to the new end."""

    def environment() -> BoardEnvironment:
        return BoardEnvironment(turns + step.turns)

    harness = AsyncEnvironmentHarness(store, environment=environment, agents=plan.agents)
    checkpoint = await harness.checkpoint(parent.id)
    child = await harness.branch(
        checkpoint, intervention=dict(step.intervention), reason=step.reason
    )
    continued = await harness.continue_(parent.id, turns=step.turns, progress=on_turn)
    child = await harness.continue_(child.id, turns=step.turns, progress=on_turn)
    sessions[sessions.index(parent)] = continued
    sessions.append(child)
    return Branched(
        parent=parent.id,
        child=child.id,
        checkpoint_seq=checkpoint.seq,
        checkpoint_turn=checkpoint.turn,
        intervention=step.intervention,
        reason=step.reason,
        turns=child.turns_completed,
    )


async def _summarise(
    store: Path | str, experiment: str, name: str, grouped: int, sessions: list[Session]
) -> QuickstartSummary:
    written = {session.id for session in sessions}
    counts = {"action.blocked": 0, "finding": 0, "artifact": 0}
    showcase: tuple[int, str] | None = None
    notable = RecordFilter(kinds=tuple(counts))
    async with reading_store(store) as reader:
        records = sum(info.records for info in await reader.sessions() if info.id in written)
        for session in sessions:
            kinds = [row.kind async for row in reader.rows(session.id, notable)]
            for kind in counts:
                counts[kind] += kinds.count(kind)
            interest = ("action.blocked" in kinds) + ("finding" in kinds)
            if showcase is None or interest > showcase[0]:
                showcase = (interest, session.id)
    return QuickstartSummary(
        store=store,
        experiment=experiment,
        experiment_name=name,
        grouped=grouped,
        sessions=tuple(sessions),
        records=records,
        blocked=counts["action.blocked"],
        findings=counts["finding"],
        artifacts=counts["artifact"],
        showcase=showcase[1] if showcase is not None else "",
    )
