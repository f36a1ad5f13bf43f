"""Import time and memory against a raw SQLite insert, in the same run, over the same file.

What it measures, each in a fresh subprocess so one phase's peak cannot hide another's:

(a) bare ``sqlite3``: the lines decoded with ``msgspec`` and inserted with ``executemany`` in
    one transaction into a table of the same columns — no check at all: the floor.
(b) raw ``sqlite3``, checked: the same, and each record's sha256 recomputed over its
    canonical JSON (``msgspec``, sorted keys) and compared, and its ``prev`` compared with the
    hash before — the least an import that re-checks every hash costs, and the baseline of
    the target.
(c) the documented recipe: as (b), with the standard library's ``json`` (docs/imports.md).
(d) the import: ``envharness.trajectories.sources.import_file`` — every line decoded and
    checked (fields, kinds' payloads, hash, chain), spooled, then stored in one transaction
    after comparing with what the source holds.

For each: the wall and CPU time (all threads: other processes' load moves the wall time on a
shared machine far more than the CPU time) and the peak resident memory growth during the
phase (``VmHWM`` at the end minus ``VmRSS`` at its start, from ``/proc/self/status``), each
phase run ``--repeat`` times (3) interleaved, keeping the least time and the largest growth;
then the ratios of (d) to each. The targets (issue 20, item 4) are a time at most 2x the
checked raw insert (b) and a growth under 50 MB for 100,000 records, i.e. memory that does not
grow with the file.

Run it from the repository root::

    .venv/bin/python tools/bench/imports.py                   # 100,000 records
    .venv/bin/python tools/bench/imports.py --records 20000   # quicker

It writes into a temporary directory (``--directory`` to choose one) and removes it afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec

from envharness.trajectories.sources import SourceChain, encode_source_row, import_file

SOURCE = "bench/imports"
AT = "2026-01-05T09:00:00Z"


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def write_file(path: Path, records: int) -> None:
    chain = SourceChain(SOURCE)
    with path.open("wb") as out:
        for n in range(records):
            row = chain.seal(
                f"run-{n // 100}", "step", {"move": "up", "n": n}, at=AT, turn=n, participant="bot"
            )
            out.write(encode_source_row(row) + b"\n")


def _dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _table(path: Path) -> sqlite3.Connection:
    path.unlink(missing_ok=True)
    database = sqlite3.connect(path, isolation_level=None)
    database.execute("PRAGMA journal_mode=WAL")
    database.execute("PRAGMA synchronous=FULL")
    database.execute(
        "CREATE TABLE source_records (source TEXT, position INTEGER, schema_version INTEGER,"
        " episode TEXT, kind TEXT, turn INTEGER, participant TEXT, at TEXT, payload BLOB,"
        " prev TEXT, hash TEXT, PRIMARY KEY (source, position))"
    )
    return database


def _insert(database: sqlite3.Connection, rows: Iterator[tuple[object, ...]]) -> None:
    database.execute("BEGIN IMMEDIATE")
    database.executemany(f"INSERT INTO source_records VALUES ({', '.join('?' * 11)})", rows)
    database.execute("COMMIT")
    database.close()


_sorted = msgspec.json.Encoder(order="sorted")


def _columns(record: dict[str, Any], payload: bytes, digest: str) -> tuple[object, ...]:
    return (
        record["source"], record["position"], record["schema_version"], record["episode"],
        record["kind"], record["turn"], record["participant"], record["at"], payload,
        record["prev"], digest,
    )  # fmt: skip


def bare(path: Path, directory: Path) -> None:
    """(a): decode and insert, no check."""

    def rows() -> Iterator[tuple[object, ...]]:
        with path.open("rb") as lines:
            for line in lines:
                record = msgspec.json.decode(line)
                yield _columns(record, _sorted.encode(record["payload"]), record["hash"])

    _insert(_table(directory / "bare.sqlite3"), rows())


def checked(path: Path, directory: Path) -> None:
    """(b): decode, re-hash, check the chain and insert, by hand with ``msgspec``."""

    def rows() -> Iterator[tuple[object, ...]]:
        prev = None
        with path.open("rb") as lines:
            for line in lines:
                record = msgspec.json.decode(line)
                digest = record.pop("hash")
                recomputed = hashlib.sha256(_sorted.encode(record)).hexdigest()
                if recomputed != digest or record["prev"] != prev:
                    raise ValueError(f"position {record['position']} does not chain")
                prev = digest
                yield _columns(record, _sorted.encode(record["payload"]), digest)

    _insert(_table(directory / "checked.sqlite3"), rows())


def raw(path: Path, directory: Path) -> None:
    """(c): parse, re-hash and insert by hand with the standard library (docs/imports.md)."""
    database = _table(directory / "raw.sqlite3")

    def rows() -> Iterator[tuple[object, ...]]:
        prev = None
        with path.open("rb") as lines:
            for line in lines:
                record = json.loads(line)
                digest = record.pop("hash")
                if hashlib.sha256(_dumps(record)).hexdigest() != digest or record["prev"] != prev:
                    raise ValueError(f"position {record['position']} does not chain")
                prev = digest
                yield (
                    record["source"], record["position"], record["schema_version"],
                    record["episode"], record["kind"], record["turn"], record["participant"],
                    record["at"], _dumps(record["payload"]), record["prev"], digest,
                )  # fmt: skip

    _insert(database, rows())


def envharness(path: Path, directory: Path) -> None:
    """(d): the import, into a fresh store."""
    shutil.rmtree(directory / "store", ignore_errors=True)
    receipt = anyio.run(lambda: import_file(directory / "store", SOURCE, path))
    assert receipt.stored > 0


PHASES = {"bare": bare, "checked": checked, "recipe": raw, "envharness": envharness}


def phase(name: str, path: Path, directory: Path) -> None:
    """One phase in this (fresh) process: print its seconds and peak memory growth (MB)."""
    start = _status("VmRSS")
    began, cpu = time.perf_counter(), time.process_time()
    PHASES[name](path, directory)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    print(json.dumps({"seconds": elapsed, "cpu": cpu, "growth_mb": _status("VmHWM") - start}))


def run_phase(name: str, path: Path, directory: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--phase", name, "--file", str(path), "--directory",
         str(directory)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--directory", type=Path)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase (best kept)")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.phase:
        phase(options.phase, options.file, options.directory)
        return
    directory = Path(options.directory or tempfile.mkdtemp(prefix="envharness-bench-imports-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        path = directory / "records.jsonl"
        write_file(path, options.records)
        size = path.stat().st_size / 2**20
        print(f"{options.records:,} records, {size:.1f} MiB of import lines")
        measured: dict[str, dict[str, float]] = {}
        for _ in range(options.repeat):
            for name in PHASES:
                found = run_phase(name, path, directory)
                best = measured.setdefault(name, found)
                best["seconds"] = min(best["seconds"], found["seconds"])
                best["cpu"] = min(best["cpu"], found["cpu"])
                best["growth_mb"] = max(best["growth_mb"], found["growth_mb"])
        ours = measured["envharness"]
        for name, found in measured.items():
            ratio = (
                f"  envharness/{name}: {ours['seconds'] / found['seconds']:.2f}x wall, "
                f"{ours['cpu'] / found['cpu']:.2f}x CPU"
            )
            print(
                f"  {name:>10}: {found['seconds']:6.2f} s ({found['cpu']:5.2f} s CPU), "
                f"peak growth {found['growth_mb']:5.1f} MB"
                + (ratio if name != "envharness" else "")
            )
        for key, what in (("seconds", "wall time"), ("cpu", "CPU time")):
            ratio = ours[key] / measured["checked"][key]
            verdict = "within" if ratio <= 2 else "OVER"
            print(f"  {what}: {ratio:.2f}x the checked raw insert: {verdict} the 2x target")
        verdict = "within" if ours["growth_mb"] <= 50 else "OVER"
        print(f"  memory growth: {ours['growth_mb']:.1f} MB: {verdict} the 50 MB target")
    finally:
        if options.directory is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
