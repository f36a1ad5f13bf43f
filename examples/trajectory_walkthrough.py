"""Trajectories end to end: a multi-segment session, an imported history, a snapshot, a stream.

    python examples/trajectory_walkthrough.py [STORE]

1. Record a native session that is stopped after two turns (as Ctrl-C would stop it) and then
   resumed: one trajectory, two causally linked segments.
2. Import a historical source — an evaluation another tool ran — as hash-chained records.
3. Project both into the same trajectory contract and show their four states.
4. Freeze both into one content-addressed snapshot, declared fit for training.
5. Stream the snapshot out as JSON lines, checked against its digests first.
6. Admit both into a training dataset (TRL's conversational rows, with their rewards).

See docs/trajectories.md.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import anyio
import msgspec

from envharness import AsyncEnvironmentHarness, Entitlement, Scenario, Trajectory
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.trajectories.sources import SourceChain, SourceRow

SCENARIO = Scenario(id="climb", input=SyntheticScenarioInput(starting_total=-6, target=0))
SOURCE = "museum/legacy-evals"


def show(title: str, trajectory: Trajectory) -> None:
    segments = " -> ".join(
        f"#{s.index} {s.cause} (turns {s.start_turn}..{s.end_turn}, {s.status or 'open'})"
        for s in trajectory.segments
    )
    outcome = trajectory.outcome
    print(f"{title}: {trajectory.session_id} [{trajectory.provenance.origin}]")
    print(f"  segments     {segments or '-'}")
    print(f"  collection   {trajectory.collection.state}")
    print(f"  execution    {trajectory.execution.state} ({trajectory.execution.status})")
    print(f"  termination  {trajectory.termination.cause}: {trajectory.termination.reason}")
    print(f"  outcome      {outcome.state} by {outcome.verifier_version} passed={outcome.passed}")
    print(f"  bound to     {trajectory.journal.chain} seq {trajectory.journal.first_seq}.."
          f"{trajectory.journal.last_seq} head {trajectory.journal.head_digest[:16]}…")  # fmt: skip


async def stopped_session(harness: AsyncEnvironmentHarness) -> str:
    """Run a session and cancel it once two turns are committed; it records ``stopped``."""
    two_turns = anyio.Event()
    seen: list[str] = []

    def progress(session_id: str, done: int, planned: int) -> None:
        seen.append(session_id)
        if done == 2:
            two_turns.set()

    async with anyio.create_task_group() as group:
        group.start_soon(lambda: harness.run(SCENARIO, turns=10, progress=progress))
        await two_turns.wait()
        group.cancel_scope.cancel()
    return seen[0]


def historical_records() -> list[SourceRow]:
    """An episode another tool recorded last year, sealed into the source's hash chain."""
    chain = SourceChain(SOURCE)
    at = "2025-03-14T09:26:53.000000Z"
    return [
        chain.seal("run-0042", "episode.started", {
            "environment": "legacy-maze@3", "scenario_id": "maze-7",
            "participants": {"solver": "legacy-planner@0.9"},
        }, at=at),
        chain.seal("run-0042", "message", {"role": "user", "content": "You are at the gate."},
                   at=at, turn=1, participant="solver"),
        chain.seal("run-0042", "message", {"role": "assistant", "content": "go north"},
                   at=at, turn=1, participant="solver"),
        chain.seal("run-0042", "score", {
            "scorer": "maze-judge@2", "metrics": {"solved": 1.0}, "passed": True, "cites": [2],
        }, at=at),
        chain.seal("run-0042", "episode.ended", {"status": "completed", "turns": 1}, at=at),
    ]  # fmt: skip


async def main(store: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )

    # 1. A native session in two segments: stopped, then resumed after its last complete turn.
    session_id = await stopped_session(harness)
    show("stopped", await harness.trajectory(session_id))
    resumed = await harness.resume(session_id)
    native = await harness.trajectory(session_id)
    show("resumed", native)

    # 2. A historical source, imported as one all-or-nothing batch; the source declares that
    #    its records may train models. Importing the same batch again changes nothing.
    sources = harness.sources()
    receipt = await sources.import_records(SOURCE, historical_records(), training=True)
    print(f"imported {SOURCE}: {msgspec.json.encode(receipt).decode()}")

    # 3. The imported episode projects into the same contract, marked by its provenance.
    [imported] = await sources.trajectories(SOURCE)
    show("imported", imported)

    # 4. One frozen, content-addressed snapshot of both; the same selection gets the same id.
    entitlement = Entitlement(basis="own evaluations and licensed history", declared_by="demo")
    snapshot = await harness.snapshot(
        [native.session_id, imported.session_id], label="walkthrough", entitlement=entitlement
    )
    again = await harness.snapshot(
        [imported.session_id, native.session_id], label="walkthrough", entitlement=entitlement
    )
    assert again.metadata.id == snapshot.metadata.id
    print(f"snapshot {snapshot.metadata.id}: {snapshot.metadata.trajectories} trajectories, "
          f"{snapshot.metadata.records} records")  # fmt: skip

    # 5. Stream it: checked first, then one line at a time in constant memory.
    kinds: Counter[str] = Counter()
    async for line in sources.export_snapshot(snapshot.metadata.id):
        kinds[msgspec.json.decode(line)["type"]] += 1
    print(f"streamed {sum(kinds.values())} lines: {dict(sorted(kinds.items()))}")

    # 6. Both are complete, terminal, entitled and rewarded: a training dataset admits them.
    dataset = await harness.create_dataset("walkthrough-sft", [snapshot.metadata.id])
    async for row in harness.dataset_rows(dataset.name):
        roles = "".join(message.role[0] for message in row.messages)
        print(f"  row {row.session_id}/{row.participant}: reward {row.reward}, turns {roles}")
    print(f"the native session {resumed.status} after {resumed.turns_completed} turns")


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1] if len(sys.argv) > 1 else ".local/trajectory-walkthrough"))
