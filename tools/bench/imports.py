"""Import time and memory against a raw SQLite insert, in the same run, over the same file.

What it measures, each in a fresh subprocess so one phase's peak cannot hide another's:

(a) raw ``sqlite3``: the file's lines parsed with ``json.loads``, each record's sha256
    recomputed over its canonical JSON (the recipe of docs/imports.md) and compared, and the
    rows inserted with ``executemany`` in one transaction into a table of the same columns —
    no other check, no spool, the whole file read as it streams.
(b) the import: ``envharness.trajectories.sources.import_file`` — every line decoded and
    checked (fields, kinds' payloads, hash, chain), spooled, then stored in one transaction
    after comparing with what the source holds.

For each: the wall time and the peak resident memory growth during the phase (``VmHWM`` at the
end minus ``VmRSS`` at its start, from ``/proc/self/status``); then the ratios b/a. The targets
(issue 20, item 4) are a time at most 2x the raw insert and a growth under 50 MB for 100,000
records, i.e. memory that does not grow with the file.

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
from pathlib import Path

import anyio

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


def raw(path: Path, directory: Path) -> None:
    """Parse, re-hash and insert by hand: the least an import of these rows costs."""
    database = sqlite3.connect(directory / "raw.sqlite3", isolation_level=None)
    database.execute("PRAGMA journal_mode=WAL")
    database.execute("PRAGMA synchronous=FULL")
    database.execute(
        "CREATE TABLE source_records (source TEXT, position INTEGER, schema_version INTEGER,"
        " episode TEXT, kind TEXT, turn INTEGER, participant TEXT, at TEXT, payload BLOB,"
        " prev TEXT, hash TEXT, PRIMARY KEY (source, position))"
    )

    def rows() -> object:
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

    database.execute("BEGIN IMMEDIATE")
    database.executemany(f"INSERT INTO source_records VALUES ({', '.join('?' * 11)})", rows())  # type: ignore[arg-type]
    database.execute("COMMIT")
    database.close()


def envharness(path: Path, directory: Path) -> None:
    receipt = anyio.run(lambda: import_file(directory / "store", SOURCE, path))
    assert receipt.stored > 0


PHASES = {"raw": raw, "envharness": envharness}


def phase(name: str, path: Path, directory: Path) -> None:
    """One phase in this (fresh) process: print its seconds and peak memory growth (MB)."""
    start = _status("VmRSS")
    began = time.perf_counter()
    PHASES[name](path, directory)
    elapsed = time.perf_counter() - began
    print(json.dumps({"seconds": elapsed, "growth_mb": _status("VmHWM") - start}))


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
        measured = {name: run_phase(name, path, directory) for name in PHASES}
        for name, found in measured.items():
            print(
                f"  {name:>10}: {found['seconds']:6.2f} s, peak growth {found['growth_mb']:6.1f} MB"
            )
        base, ours = measured["raw"], measured["envharness"]
        ratio = ours["seconds"] / base["seconds"]
        print(f"  time ratio envharness/raw: {ratio:.2f}x (target <= 2x)")
        print(
            f"  memory growth: {ours['growth_mb']:.1f} MB against {base['growth_mb']:.1f} MB raw "
            "(target <= 50 MB)"
        )
    finally:
        if options.directory is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
