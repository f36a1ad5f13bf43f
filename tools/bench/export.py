"""Snapshot export memory against a raw SQLite dump, in the same run, over the same records.

What it measures, each in a fresh subprocess so one phase's peak cannot hide another's:

(a) raw ``sqlite3``: every record of the snapshot's sessions selected in one query, iterated
    row by row and written to ``/dev/null`` as the same JSON envelope — no checks, no paging.
(b) the export: ``envharness.trajectories.export_snapshot`` streaming the snapshot to
    ``/dev/null`` — the whole snapshot checked first (content address, every record's digest
    and chain up to each trajectory's bound head), then every line written.

For each: the peak resident memory growth during the phase (peak RSS at the end minus RSS at
its start, ``VmHWM`` and ``VmRSS`` in ``/proc/self/status``) and the wall time; then the ratios
b/a. The export reads every record twice (check, then write) and recomputes each digest, so its
time ratio is well above 1. The target is a memory growth under 50 MB for 100,000 records,
i.e. memory that does not grow with the snapshot.

Run it from the repository root::

    .venv/bin/python tools/bench/export.py                   # 100,000 records
    .venv/bin/python tools/bench/export.py --records 20000   # quicker

It writes into a temporary directory (``--directory`` to choose one) and removes it afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from envharness.records import (
    ActionAttempted,
    ActionExecuted,
    EnvironmentRef,
    Observation,
    Outcome,
    ParticipantRef,
    RecordRow,
    ScenarioRef,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    encode_record,
)
from envharness.store import open_store, read_store
from envharness.store.database import DATABASE_NAME
from envharness.trajectories import export_snapshot, freeze

SESSIONS = 10
TARGET_MB = 50.0


def session_rows(index: int, records: int) -> tuple[list[RecordRow], dict[str, bytes]]:
    """A completed, scored session of about ``records`` records (4 per turn)."""
    chain = SessionChain(f"ses_bench{index:04d}")
    config = SessionConfig(
        environment=EnvironmentRef(
            name="bench", version="1", turn_order="simultaneous", roles=("agent",),
            input_type="bench.Input",
        ),
        participants={"alice": ParticipantRef(role="agent", implementation="bench@1")},
        scenario=ScenarioRef(id=f"scenario-{index}", input={"n": index}),
        seed=index,
        turns=records,
        envharness_version="bench",
    )  # fmt: skip
    rows = [
        chain.seal(SessionCreated(config=config)),
        chain.seal(SessionStatus(status="running")),
        chain.seal(SegmentStarted(segment=0)),
    ]
    blobs: dict[str, bytes] = {}
    turn = 0
    while len(rows) < records - 4:
        turn += 1
        observation = {
            "turn": turn,
            "board": list(range(turn % 7, turn % 7 + 12)),
            "note": "x" * 40,
        }
        action = {"move": turn % 9, "say": "a short reply from the agent"}
        state = f'{{"turn":{turn}}}'.encode()
        digest = hashlib.sha256(state).hexdigest()
        blobs[digest] = state
        rows += [
            chain.seal(Observation(observation=observation), turn=turn, participant="alice"),
            chain.seal(ActionAttempted(action=action), turn=turn, participant="alice"),
            chain.seal(ActionExecuted(action=action), turn=turn, participant="alice"),
            chain.seal(Outcome(state=digest, signals={"turn": float(turn)}), turn=turn),
        ]
    rows += [
        chain.seal(Score(version="bench@1", metrics={"turns": float(turn)}, passed=True)),
        chain.seal(SessionStatus(status="completed")),
        chain.seal(SegmentEnded(segment=0, status="completed")),
    ]
    return rows, blobs


async def prepare(directory: Path, records: int) -> str:
    per_session = records // SESSIONS
    async with open_store(directory) as store:
        for index in range(SESSIONS):
            rows, blobs = session_rows(index, per_session)
            for start in range(0, len(rows), 2000):
                chunk = rows[start : start + 2000]
                await store.append(chunk, {k: v for k, v in blobs.items()} if start == 0 else None)
    store = await read_store(directory)
    sessions = [info.id for info in await store.sessions()]
    snapshot = await freeze(store, sessions, label="bench")
    return snapshot.metadata.id


# -- the phases, each in its own process --------------------------------------------------------


def status_kib(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process, in KiB.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries it over a fork and exec, so a fresh
    phase process would report its parent's peak.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}; this benchmark needs Linux")


def raw_phase(directory: Path) -> int:
    connection = sqlite3.connect(f"file:{directory / DATABASE_NAME}?mode=ro", uri=True)
    lines = 0
    with open(os.devnull, "wb") as sink:
        cursor = connection.execute(
            "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest"
            " FROM records ORDER BY session_id, seq"
        )
        for row in cursor:
            sink.write(encode_record(RecordRow(*row)) + b"\n")
            lines += 1
    connection.close()
    return lines


def export_phase(directory: Path, snapshot_id: str) -> int:
    async def main() -> int:
        store = await read_store(directory)
        lines = 0
        with open(os.devnull, "wb") as sink:  # noqa: ASYNC230 - /dev/null never blocks
            async for line in export_snapshot(store, snapshot_id):
                sink.write(line)
                lines += 1
        return lines

    return anyio.run(main)


def run_phase(phase: str, directory: Path, snapshot_id: str) -> dict[str, float]:
    start_kib = status_kib("VmRSS")
    began = time.perf_counter()
    lines = raw_phase(directory) if phase == "raw" else export_phase(directory, snapshot_id)
    seconds = time.perf_counter() - began
    peak_kib = status_kib("VmHWM")
    return {
        "lines": lines,
        "seconds": seconds,
        "rss_growth_mb": max(peak_kib - start_kib, 0) / 1024,
    }


def measure(phase: str, directory: Path, snapshot_id: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--phase", phase, "--directory", str(directory), snapshot_id],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(result.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--directory", type=Path, default=None)
    parser.add_argument("--phase", choices=("raw", "export"), help=argparse.SUPPRESS)
    parser.add_argument("snapshot", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        print(json.dumps(run_phase(args.phase, args.directory, args.snapshot)))
        return
    base = Path(tempfile.mkdtemp(prefix="envharness-bench-", dir=args.directory))
    try:
        store = base / "store"
        began = time.perf_counter()
        snapshot_id = anyio.run(prepare, store, args.records)
        print(f"wrote {args.records:,} records in {SESSIONS} sessions and froze {snapshot_id}"
              f" in {time.perf_counter() - began:.1f}s")  # fmt: skip
        raw = measure("raw", store, snapshot_id)
        export = measure("export", store, snapshot_id)
        print(f"{'':26}{'raw sqlite dump':>18}{'snapshot export':>18}{'ratio':>8}")
        for key, label in (
            ("lines", "lines written"),
            ("seconds", "wall time (s)"),
            ("rss_growth_mb", "peak RSS growth (MB)"),
        ):
            ratio = export[key] / raw[key] if raw[key] else float("nan")
            print(f"{label:26}{raw[key]:>18,.2f}{export[key]:>18,.2f}{ratio:>8.2f}")
        verdict = "within" if export["rss_growth_mb"] < TARGET_MB else "OVER"
        print(f"export peak RSS growth {export['rss_growth_mb']:.1f} MB: {verdict} the "
              f"{TARGET_MB:.0f} MB target")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
