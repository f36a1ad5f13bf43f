"""Stored bytes per event: what a store holds for each record, on the demo and on Gymnasium.

Issue 20, item 5: at most 1 KB per event (the reference system stores ~4.7 KB). Two runs, each
into a fresh store:

- the synthetic demo: what ``envharness quickstart`` records (``write_quickstart``, its
  experiment, standalone sessions and branch; no snapshot, no import) at ``--demo-turns``;
- a Gymnasium toy-text run: ``--sessions`` Taxi-v4 episodes of each length in ``--turns``,
  driven by a scripted agent that only moves, so every episode lasts as long as asked. Taxi's
  state is the seed and every move so far (``envharness.adapters.replay``), and each turn's
  state is stored: raw, its bytes per event would grow with the episode's length (they did
  until schema 10: 2.26 KB per event at 1,000 turns); kept compressed
  (``envharness.store.blobs``), they stay near 40 B per event.

A store's bytes are its database's pages in use after a checkpoint (``page_count`` less
``freelist_count``, times ``page_size``) plus its ``artifacts/`` files; an event is a record.
The pages are broken down by table and index (SQLite's ``dbstat``), so what dominates is seen,
and the state blobs' bytes per event are printed raw (decompressed) and as kept.

Run it from the repository root::

    .venv/bin/python tools/bench/storage.py
    .venv/bin/python tools/bench/storage.py --turns 50 200 1000 2000

It writes into a temporary directory (``--directory`` to choose one) and removes it afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import anyio

from envharness import EnvironmentHarness, Scenario
from envharness.adapters.gymnasium import GymnasiumEnvironment
from envharness.cli.quickstart import write_quickstart
from envharness.store.blobs import unpack
from envharness.store.database import DATABASE_NAME

TARGET_BYTES = 1024
REFERENCE_BYTES = 4700


class Driver:
    """Moves by the observation alone (south, north, east, west); never ends an episode."""

    implementation = "driver@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, int]:
        return {"action": (int(observation["observation"]) * 7 + 3) % 4}


def measure(store: Path) -> tuple[int, int, dict[str, int]]:
    """(records, stored bytes, bytes by table or index) of a store no one has open; the last
    two entries are the state blobs' bytes, ``raw`` and ``kept``."""
    connection = sqlite3.connect(store / DATABASE_NAME)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw = kept = 0
        for digest, codec, data in connection.execute("SELECT digest, codec, data FROM blobs"):
            raw, kept = raw + len(unpack(digest, codec, data)), kept + len(data)
        (records,) = connection.execute("SELECT count(*) FROM records").fetchone()
        (pages,) = connection.execute("PRAGMA page_count").fetchone()
        (free,) = connection.execute("PRAGMA freelist_count").fetchone()
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
        parts = dict(connection.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
    finally:
        connection.close()
    artifacts = sum(f.stat().st_size for f in (store / "artifacts").rglob("*") if f.is_file())
    if artifacts:
        parts["artifacts/"] = artifacts
    parts["raw"], parts["kept"] = raw, kept
    return records, (pages - free) * page_size + artifacts, parts


def report(label: str, store: Path) -> None:
    records, stored, parts = measure(store)
    raw, kept = parts.pop("raw"), parts.pop("kept")
    per_event = stored / records
    verdict = "within" if per_event <= TARGET_BYTES else "OVER"
    print(f"{label}: {records:,} records, {stored / 1024:,.0f} KiB stored, "
          f"{per_event:,.0f} B per event ({verdict} {TARGET_BYTES} B)")  # fmt: skip
    largest = sorted(parts.items(), key=lambda item: -item[1])[:4]
    print("    " + ", ".join(f"{name} {size / records:,.0f} B" for name, size in largest))
    print(f"    state blobs: {raw / records:,.0f} B raw, {kept / records:,.0f} B as kept")


def demo(store: Path, turns: int) -> None:
    anyio.run(lambda: write_quickstart(store, turns=turns, freeze_and_import=False))


def taxi(store: Path, sessions: int, turns: int) -> None:
    environment = GymnasiumEnvironment("Taxi-v4", max_episode_steps=turns + 1)
    harness = EnvironmentHarness(store, environment=environment, agents={"driver": Driver})
    for seed in range(sessions):
        session = harness.run(Scenario(id=f"taxi-{seed}", input={"seed": seed}), turns=turns)
        assert session.turns_completed == turns, session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-turns", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--turns", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--directory", type=Path, default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="envharness-bench-storage-", dir=args.directory))
    print(f"target: at most {TARGET_BYTES} B per event (the reference stores ~{REFERENCE_BYTES})")
    try:
        demo(base / "demo", args.demo_turns)
        report(f"synthetic demo, {args.demo_turns} turns", base / "demo")
        for turns in args.turns:
            store = base / f"taxi-{turns}"
            taxi(store, args.sessions, turns)
            report(f"Taxi-v4, {args.sessions} x {turns} turns", store)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
