"""Journal throughput against raw SQLite, in the same run, on the same rows.

What it measures, in records per second:

(a) raw ``sqlite3``: the sealed rows inserted with ``executemany`` into the store's own schema,
    with the store's own pragmas (WAL, ``synchronous=FULL``), committed in batches as large as
    the journal's average transaction in (b). No acknowledgement, no index, no event loop.
(b) the journal: ``--sessions`` concurrent producer tasks, each sealing turn-sized batches of
    ``--turn-size`` records with its :class:`SessionChain` and awaiting
    ``Store.append`` — which returns only after the transaction holding them committed. The
    timing includes sealing (canonical encoding and sha256 of every record).

and the ratio b/a (the target is at least 0.5), the number of commits (transactions) each made,
and the database's bytes per record after a checkpoint.

With ``--states``, each turn also stores its state blob, shaped like a replay adapter's
(``envharness.adapters.replay``: the seed, every move so far and a check of each, so it grows
by about a dozen bytes a turn): (a) inserts it as it is, (b) as the store keeps it (compressed,
``envharness.store.blobs``), so the ratio shows what keeping states costs the writer.

Run it from the repository root::

    .venv/bin/python tools/bench/journal.py                  # 100,000 records
    .venv/bin/python tools/bench/journal.py --records 20000  # quicker
    .venv/bin/python tools/bench/journal.py --backend trio
    .venv/bin/python tools/bench/journal.py --states         # and a state blob per turn

It writes into a temporary directory (``--directory`` to choose one on a particular disk) and
removes it afterwards. Numbers depend on the disk's fsync latency: compare the ratio, not the
absolute rates, between machines.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import anyio
import msgspec
from _counting import CommitCounter  # tools/bench/ is sys.path[0] when run as a script

from envharness.records import (
    ActionAttempted,
    ActionExecuted,
    EnvironmentRef,
    Log,
    Observation,
    Outcome,
    ParticipantRef,
    Payload,
    RecordRow,
    ScenarioRef,
    SessionChain,
    SessionConfig,
    SessionCreated,
)
from envharness.store import open_store
from envharness.store.blobs import pack
from envharness.store.database import DATABASE_NAME, connect

INSERT = (
    "INSERT INTO records (session_id, seq, kind, turn, participant, at, payload, prev, digest)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_BLOB = "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)"
PARTICIPANTS = ("alice", "bob")
MOVES = ("north", "south", "east", "west")


def created(index: int) -> SessionCreated:
    return SessionCreated(
        config=SessionConfig(
            environment=EnvironmentRef(
                name="bench",
                version="1",
                turn_order="simultaneous",
                roles=("agent",),
                input_type="bench.Input",
            ),
            participants={
                p: ParticipantRef(role="agent", implementation="bench@1") for p in PARTICIPANTS
            },
            scenario=ScenarioRef(id=f"scenario-{index}", input={"n": index}),
            seed=index,
            turns=1_000_000,
            envharness_version="bench",
        )
    )


def replay_states(session: int, turns: int) -> list[tuple[str, bytes]]:
    """(digest, bytes) of a replay adapter's state after each of ``turns`` turns: its seed,
    every move so far, and the first 8 hex characters of a hash per step, as in
    ``envharness.adapters.replay.Replay`` (whose real checks repeat more, so compress better)."""
    states: list[tuple[str, bytes]] = []
    moves: list[str] = []
    checks = hashlib.sha256(f"{session}".encode()).hexdigest()[:8]
    for turn in range(1, turns + 1):
        moves.append(MOVES[(session * 7 + turn * 3) % 4])
        checks += hashlib.sha256(f"{session}:{turn}".encode()).hexdigest()[:8]
        data = msgspec.json.encode({"replay": {"checks": checks, "moves": moves, "seed": session}})
        states.append((hashlib.sha256(data).hexdigest(), data))
    return states


def turn_payloads(
    turn: int, size: int, state: str | None = None
) -> list[tuple[Payload, str | None]]:
    """About one turn of a two-participant session: observe, attempt, execute, outcome, logs."""
    payloads: list[tuple[Payload, str | None]] = []
    for participant in PARTICIPANTS:
        payloads.append(
            (Observation(observation={"total": turn, "turn": turn, "mine": [1, 2, 3]}), participant)
        )
        payloads.append((ActionAttempted(action={"value": 1}, seconds=0.001), participant))
        payloads.append(
            (ActionExecuted(action={"value": 1}, outcome={"total": turn + 1}), participant)
        )
    state = f"{turn:064x}" if state is None else state
    payloads.append((Outcome(state=state, signals={"total": float(turn)}), None))
    while len(payloads) < size:
        payloads.append((Log(message=f"turn {turn} note {len(payloads)}"), None))
    return payloads[:size]


def plan(records: int, sessions: int, turn_size: int) -> list[int]:
    """Turns per session so that the total is ``records`` (to within one turn's size)."""
    turns, extra = divmod(max(0, records - sessions) // turn_size, sessions)
    return [turns + (1 if index < extra else 0) for index in range(sessions)]


async def journal_run(
    directory: Path, turns: list[int], turn_size: int, states: bool
) -> tuple[float, list[RecordRow], dict[str, tuple[str, bytes]]]:
    """(b): concurrent producers sealing and appending turn-sized batches (with each turn's
    state blob when ``states``); returns seconds, the rows, and each blob by the digest of the
    record that cites it."""
    written: list[RecordRow] = []
    kept: dict[str, tuple[str, bytes]] = {}
    prepared = [turn_payloads(turn, turn_size) for turn in range(1, max(turns, default=0) + 1)]
    blobs = [replay_states(index, count) if states else [] for index, count in enumerate(turns)]

    async with open_store(directory) as store:

        async def produce(index: int, count: int) -> None:
            chain = SessionChain(f"ses_bench_{index:04d}")
            first = [chain.seal(created(index))]
            await store.append(first)
            written.extend(first)
            for turn in range(1, count + 1):
                payloads = prepared[turn - 1]
                blob: dict[str, bytes] = {}
                if states:
                    digest, data = blobs[index][turn - 1]
                    payloads, blob = turn_payloads(turn, turn_size, digest), {digest: data}
                rows = [chain.seal(p, turn=turn, participant=who) for p, who in payloads]
                await store.append(rows, blob)
                written.extend(rows)
                for row in rows if states else ():
                    if row.kind == "outcome":  # (a) inserts the blob with the record citing it
                        kept[row.digest] = (digest, data)

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for index, count in enumerate(turns):
                group.start_soon(produce, index, count)
        seconds = time.perf_counter() - started
    return seconds, written, kept


def raw_run(
    directory: Path, rows: list[RecordRow], blobs: dict[str, tuple[str, bytes]], batch: int
) -> tuple[float, int]:
    """(a): the same rows, executemany in ``batch``-row transactions, each with the state blobs
    its outcomes cite (``blobs``: by the citing record's digest), stored as they are; returns
    seconds, commits."""
    connection = connect(directory, create=True)  # the store's schema and pragmas
    try:
        commits = 0
        started = time.perf_counter()
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            cited = [blobs[row.digest] for row in chunk if row.digest in blobs]
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(INSERT_BLOB, cited)
            connection.executemany(INSERT, chunk)
            connection.execute("COMMIT")
            commits += 1
        seconds = time.perf_counter() - started
    finally:
        connection.close()
    return seconds, commits


def bytes_per_record(directory: Path, records: int) -> float:
    with sqlite3.connect(directory / DATABASE_NAME) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    size = (directory / DATABASE_NAME).stat().st_size
    return size / records


def seal_rate(rows: list[RecordRow], turn_size: int) -> float:
    """Records/s of sealing alone (encoding + sha256), for reference."""
    payloads = turn_payloads(1, turn_size)
    chain = SessionChain("ses_seal")
    count = min(len(rows), 20_000)
    started = time.perf_counter()
    for index in range(count):
        payload, who = payloads[index % turn_size]
        chain.seal(payload, turn=1, participant=who)
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records", type=int, default=100_000, help="records to write (default 100000)"
    )
    parser.add_argument(
        "--sessions", type=int, default=64, help="concurrent producers (default 64)"
    )
    parser.add_argument("--turn-size", type=int, default=8, help="records per append (default 8)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--states", action="store_true", help="store a state blob per turn")
    parser.add_argument(
        "--directory",
        type=Path,
        default=None,
        help="where to write (default: a temporary directory)",
    )
    options = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="envharness-bench-", dir=options.directory))
    try:
        turns = plan(options.records, options.sessions, options.turn_size)
        gc.collect()
        with CommitCounter() as counter:
            journal_seconds, rows, blobs = anyio.run(
                journal_run,
                base / "journal",
                turns,
                options.turn_size,
                options.states,
                backend=options.backend,
            )
        total = len(rows)
        journal_rate = total / journal_seconds
        average_batch = max(1, round(counter.rows / counter.commits))
        journal_bytes = bytes_per_record(base / "journal", total)

        gc.collect()
        raw_seconds, raw_commits = raw_run(base / "raw", rows, blobs, average_batch)
        raw_rate = total / raw_seconds
        raw_bytes = bytes_per_record(base / "raw", total)

        seal = seal_rate(rows, options.turn_size)
        state_bytes = sum(len(data) for _, data in blobs.values())
        journal_batch = counter.rows / counter.commits
        print(
            f"records: {total} in {options.sessions} sessions, {options.turn_size} per append,"
            f" backend {options.backend}"
            + (
                f", a state blob per turn ({state_bytes // len(blobs):,} B on average)"
                if blobs
                else ""
            )
        )
        print(
            f"(a) raw sqlite3 executemany : {raw_rate:>10,.0f} records/s  {raw_commits:>6} commits"
            f" of {average_batch} rows  {raw_bytes:6.0f} bytes/record"
        )
        print(
            f"(b) journal, acknowledged   : {journal_rate:>10,.0f} records/s  {counter.commits:>6}"
            f" commits, {journal_batch:.1f} rows/commit  {journal_bytes:6.0f} bytes/record"
        )
        print(f"ratio b/a                   : {journal_rate / raw_rate:10.2f}  (target >= 0.5)")
        print(f"sealing alone, for reference: {seal:>10,.0f} records/s (included in b)")
        if blobs:
            started = time.perf_counter()
            for _, data in blobs.values():
                pack(data)
            packing = time.perf_counter() - started
            print(
                f"compressing the states alone: {total / packing:>10,.0f} records/s (included in"
                f" b: {packing / journal_seconds:.0%} of its time, in the writer's thread)"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
