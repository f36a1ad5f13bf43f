"""Inject real storage faults into real envharness stores, and count what each one did.

Run it from the repository root (as root for the tmpfs disk-full case)::

    .venv/bin/python tools/faults.py            # the full sweep, a few minutes
    .venv/bin/python tools/faults.py --quick    # fewer of each, about a minute
    .venv/bin/python tools/faults.py --only flips,wal --flips 1000

Every store is written by envharness itself (``EnvironmentHarness`` and the synthetic fixtures,
two participants per session); every fault is real:

``flips``      one byte of a checkpointed store's main database file XOR 0xFF, at ``--flips``
               offsets spread over the whole file, each in a fresh copy;
``wal``        a store whose writer was SIGKILLed after its last acknowledgement, so the recent
               commits live only in its write-ahead log: one byte of the WAL flipped at
               ``--wal-flips`` offsets, and the WAL truncated at several lengths;
``kill``       ``kill -9`` of a writer process (one session at a time, or four at once) at
               ``--kills`` moments, the same store reopened by the next writer each time;
``disk-full``  a writer (sessions one by one, then an experiment) on a 2 MiB tmpfs until the
               disk is full; without the right to mount, RLIMIT_FSIZE in the writer instead;
``reader``     a slow external reader holding a read transaction (pinning the WAL) while a
               writer writes, then the writer SIGKILLed; the WAL's size is compared with
               the same writing unread, and the writer's warnings counted.

After each injection ``envharness verify`` runs (in-process for the byte sweeps, as a real
process otherwise), then the records every acknowledgement promised are read back. Each
injection is counted once:

harmless   verify said OK and every acknowledged record (for ``flips``: every read a user makes)
           came back intact;
detected   verify reported breaks (exit 1), or the store was refused with a clear error;
silent     verify said OK but something acknowledged was lost or read back wrong;
crashed    a traceback (or a writer that hung past its timeout) instead of an error.

``lost`` counts acknowledged records that did not read back intact, ``silently`` those of them
lost while verify said OK. The exit status is 1 when anything was silent or crashed, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "evidence.sqlite3"
WAL = f"{DATABASE}-wal"
AGENTS = ("alice", "bob")
WRITER_TIMEOUT_S = 120.0
EXIT_WRITER_ERROR = 3
READER_SESSIONS = 100
"""Sessions written while the slow reader pins the WAL: enough to pass the journal's warning."""


# -- what each injection did -------------------------------------------------------------------


@dataclass
class Tally:
    """The figures of one kind of fault."""

    fault: str
    injected: int = 0
    acked: int = 0
    lost: int = 0
    silently: int = 0
    harmless: int = 0
    detected: int = 0
    silent: int = 0
    crashed: int = 0
    notes: list[str] = field(default_factory=list)

    def count(self, outcome: str, *, acked: int = 0, lost: int = 0, example: str = "") -> None:
        self.injected += 1
        self.acked += acked
        self.lost += lost
        if outcome == "silent":
            self.silently += lost
        setattr(self, outcome, getattr(self, outcome) + 1)
        if example and outcome in ("silent", "crashed") and len(self.notes) < 6:
            self.notes.append(f"{outcome}: {example}")


COLUMNS = ("injected", "acked", "lost", "silently", "harmless", "detected", "silent", "crashed")


def table(tallies: Sequence[Tally]) -> Iterator[str]:
    width = max(len(t.fault) for t in tallies)
    yield f"{'fault':<{width}}  " + "  ".join(f"{c:>8}" for c in COLUMNS)
    for t in tallies:
        yield f"{t.fault:<{width}}  " + "  ".join(f"{getattr(t, c):>8}" for c in COLUMNS)


# -- verify and read back, as a user would ----------------------------------------------------


@dataclass
class Verdict:
    code: int | None
    output: str
    traceback: str | None = None

    @property
    def said_ok(self) -> bool:
        return self.code == 0 and self.traceback is None


def verify_in_process(store: Path) -> Verdict:
    """``envharness --store STORE verify`` through the console script's own ``main``."""
    from envharness.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["envharness", "--store", str(store), "verify"]
    code: int | None = None
    trace = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever escapes is the traceback being counted
        trace = traceback.format_exc()
    finally:
        sys.argv = argv
    return Verdict(code, out.getvalue() + err.getvalue(), trace)


def verify_process(store: Path) -> Verdict:
    """``envharness --store STORE verify`` as a process of its own."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "envharness.cli", "--store", str(store), "verify"],
            capture_output=True, text=True, timeout=WRITER_TIMEOUT_S, cwd=ROOT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Verdict(None, "", "verify hung")
    output = done.stdout + done.stderr
    trace = output if "Traceback (most recent call last)" in output else None
    return Verdict(done.returncode, output, trace)


Readback = dict[str, Any]


async def _readback(store: Path) -> Readback:
    """Everything a user reads: the listing, each session by id, its records, and its records
    of one kind (through the records-by-kind index)."""
    from envharness.store import RecordFilter, read_store

    reader = await read_store(store)
    found: Readback = {}
    for info in await reader.sessions():
        by_id = await reader.session(info.id)
        every = tuple([row.digest async for row in reader.rows(info.id)])
        executed = RecordFilter(kinds=("action.executed",))
        some = tuple([row.digest async for row in reader.rows(info.id, executed)])
        found[info.id] = (info.status, by_id.records, every, some)
    return found


def readback(store: Path) -> tuple[Readback | None, str | None, str | None]:
    """(what was read, the clear error that refused the read, a traceback)."""
    from envharness.errors import EnvharnessError

    try:
        return anyio.run(_readback, store), None, None
    except EnvharnessError as refused:
        return None, str(refused), None
    except BaseException:  # noqa: BLE001 - whatever escapes is the traceback being counted
        return None, None, traceback.format_exc()


@dataclass(frozen=True)
class Ack:
    """A session's records acknowledged to its writer: how many, and the last one's digest."""

    session_id: str
    records: int
    digest: str


def parse_acks(output: str) -> list[Ack]:
    acks = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ack":
            acks.append(Ack(parts[1], int(parts[2]), parts[3]))
    return acks


async def _acked_lost(store: Path, acks: Sequence[Ack]) -> int:
    from envharness.errors import EnvharnessError
    from envharness.records import digest_of
    from envharness.store import read_store

    # As SQLite recovers it: a store refused for a damaged WAL is still read, read-only, so
    # that what it really lost is counted (not everything, as the refusal would have it).
    reader = await read_store(store, damaged=True)
    lost = 0
    for ack in acks:
        try:
            rows = [row async for row in reader.rows(ack.session_id)]
        except EnvharnessError:
            lost += ack.records
            continue
        intact = 0  # the prefix whose digests recompute and link
        previous = None
        for row in rows:
            recomputed = digest_of(
                row.session_id, row.seq, row.kind, row.turn, row.participant, row.at,
                row.payload, row.prev,
            )  # fmt: skip
            if row.seq != intact or row.prev != previous or recomputed != row.digest:
                break
            intact += 1
            previous = row.digest
        if intact >= ack.records and rows[ack.records - 1].digest == ack.digest:
            continue
        lost += max(ack.records - min(intact, ack.records), 1)
    return lost


def acked_lost(store: Path, acks: Sequence[Ack]) -> tuple[int, str | None]:
    """Acknowledged records that did not read back intact (all of them when the store is
    refused), and a traceback if reading crashed."""
    from envharness.errors import EnvharnessError

    try:
        return anyio.run(_acked_lost, store, acks), None
    except EnvharnessError:
        return sum(ack.records for ack in acks), None
    except BaseException:  # noqa: BLE001 - whatever escapes is the traceback being counted
        return sum(ack.records for ack in acks), traceback.format_exc()


def judge(tally: Tally, verdict: Verdict, acks: Sequence[Ack], store: Path, what: str) -> None:
    """Count one injection whose promise is the acknowledged records ``acks``."""
    lost, trace = acked_lost(store, acks)
    acked = sum(ack.records for ack in acks)
    if verdict.traceback or trace:
        tally.count("crashed", acked=acked, lost=lost, example=f"{what}: {_last(verdict, trace)}")
    elif not verdict.said_ok:
        tally.count("detected", acked=acked, lost=lost)
    elif lost:
        tally.count("silent", acked=acked, lost=lost, example=f"{what}: {lost} records lost")
    else:
        tally.count("harmless", acked=acked)


def _last(verdict: Verdict, trace: str | None) -> str:
    text = (verdict.traceback or trace or "").strip().splitlines()
    return text[-1] if text else "?"


# -- writers ----------------------------------------------------------------------------------


def writer_main(argv: Sequence[str]) -> int:
    """The writer process: sessions until told, or killed; ``ack`` once each is committed."""
    parser = argparse.ArgumentParser(prog="faults.py _writer")
    parser.add_argument("store")
    parser.add_argument("--sessions", type=int, default=0, help="0: until killed")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--then-kill", action="store_true", help="SIGKILL itself, store open")
    parser.add_argument("--fsize", type=int, default=0, help="RLIMIT_FSIZE in bytes")
    parser.add_argument("--experiment", type=int, default=0, help="sessions, as one experiment")
    args = parser.parse_args(argv)
    if args.fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, args.fsize))
    from envharness.errors import EnvharnessError

    try:
        if args.experiment:
            _write_experiment(args.store, args.experiment, args.turns)
        else:
            anyio.run(_write_sessions, args)
    except BaseException as error:
        # The writer's own task group wraps what its workers raised: look inside it. Anything
        # but envharness's own errors goes on, as the traceback the report counts.
        leaves = _leaves(error)
        if not all(isinstance(leaf, EnvharnessError) for leaf in leaves):
            raise
        for said in dict.fromkeys(str(leaf) for leaf in leaves):
            print(f"error: {said}", file=sys.stderr, flush=True)
        return EXIT_WRITER_ERROR
    return 0


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def _write_sessions(args: argparse.Namespace) -> None:
    from envharness import AsyncEnvironmentHarness, Scenario
    from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput

    harness = AsyncEnvironmentHarness(
        args.store,
        environment=SyntheticEnvironment,
        agents=dict.fromkeys(AGENTS, SyntheticAgent),
    )
    started = 0

    async def worker(number: int) -> None:
        nonlocal started
        while args.sessions == 0 or started < args.sessions:
            started += 1
            index = started
            scenario = Scenario(
                id=f"w{number}-{index}", input=SyntheticScenarioInput(starting_total=index % 7)
            )
            session = await harness.run(scenario, turns=args.turns, seed=index)
            records = [record async for record in harness.records(session.id)]
            print(f"ack {session.id} {len(records)} {records[-1].digest}", flush=True)

    async with harness:
        print("ready", flush=True)
        async with anyio.create_task_group() as group:
            for number in range(args.workers):
                group.start_soon(worker, number)
        if args.then_kill:
            os.kill(os.getpid(), signal.SIGKILL)  # before closing: the WAL stays as it is


def _write_experiment(store: str, sessions: int, turns: int) -> None:
    from envharness import EnvironmentHarness, Scenario
    from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput

    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents=dict.fromkeys(AGENTS, SyntheticAgent)
    )
    scenarios = [
        Scenario(id=f"e{index}", input=SyntheticScenarioInput(starting_total=index % 7))
        for index in range(sessions)
    ]
    print("ready", flush=True)
    result = harness.experiment("faults", scenarios, turns=turns, max_concurrency=4).run()
    print(f"experiment {result.status} {result.completed}/{result.total}", flush=True)


@dataclass
class Run:
    code: int | None
    output: str
    errors: str
    hung: bool = False

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.errors


def write(store: Path, *options: str, timeout: float = WRITER_TIMEOUT_S) -> Run:
    """Run a writer process to its end (or its timeout: hung)."""
    command = [sys.executable, __file__, "_writer", str(store), *options]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as expired:
        return Run(None, _text(expired.stdout), _text(expired.stderr), hung=True)
    return Run(done.returncode, done.stdout, done.stderr)


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def write_then_kill(store: Path, delay: float, *options: str) -> Run:
    """Start a writer, wait until it has opened the store, let it write for ``delay`` seconds,
    then SIGKILL its process group."""
    command = [sys.executable, __file__, "_writer", str(store), *options]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    first = process.stdout.readline()  # "ready", or nothing if it failed to start
    if first.strip() == "ready":
        time.sleep(delay)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    output, errors = process.communicate()
    return Run(process.returncode, first + output, errors)


# -- the store every byte sweep starts from ---------------------------------------------------


def build_store(store: Path, sessions: int, turns: int) -> None:
    """A real store, closed (so checkpointed: every byte in the main file)."""
    from envharness import EnvironmentHarness, Scenario
    from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput

    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents=dict.fromkeys(AGENTS, SyntheticAgent)
    )
    with harness:
        for index in range(sessions):
            scenario = Scenario(id=f"s{index}", input=SyntheticScenarioInput(starting_total=index))
            harness.run(scenario, turns=turns, seed=index)


def copy_store(source: Path, target: Path) -> Path:
    """Everything in the store folder, as the writer left it (the WAL, the acknowledged-commits
    mark, the artifacts), copied to ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    return target


def spread(size: int, count: int, start: int = 0) -> list[int]:
    """``count`` offsets over ``[start, size)``, evenly, each nudged off page boundaries."""
    span = max(size - start, 1)
    return sorted({start + (i * span // count + (i * 7919) % max(span // count, 1)) % span
                   for i in range(count)})  # fmt: skip


# -- the faults -------------------------------------------------------------------------------


def main_file_flips(work: Path, count: int) -> Tally:
    from envharness.store.connections import close_idle_readers

    tally = Tally("main-file byte flips")
    base = work / "flips-base"
    build_store(base, sessions=4, turns=25)
    baseline, refused, trace = readback(base)
    assert baseline is not None, refused or trace
    records = sum(len(every) for _, _, every, _ in baseline.values())
    # The base is read, and copied, as files: closing a descriptor of a file would drop the
    # locks of this process's SQLite readers still open on it (envharness.store.handles).
    close_idle_readers(base)
    data = (base / DATABASE).read_bytes()
    for offset in spread(len(data), count):
        store = copy_store(base, work / "flip")
        damaged = bytearray(data)
        damaged[offset] ^= 0xFF
        (store / DATABASE).write_bytes(damaged)
        verdict = verify_in_process(store)
        found, refused, trace = readback(store)
        lost = _lost_against(baseline, found)
        what = f"offset {offset} (page {offset // 4096 + 1})"
        if verdict.traceback or trace:
            tally.count(
                "crashed", acked=records, lost=lost, example=f"{what}: {_last(verdict, trace)}"
            )
        elif not verdict.said_ok:
            tally.count("detected", acked=records, lost=lost)
        elif found != baseline:
            why = refused or f"{lost} records lost or changed"
            tally.count("silent", acked=records, lost=lost, example=f"{what}: {why}")
        else:
            tally.count("harmless", acked=records)
    tally.notes.append(f"{len(data):,}-byte file, {records} records; each flip in a fresh copy")
    return tally


def _lost_against(baseline: Readback, found: Readback | None) -> int:
    """Records of the baseline that a read no longer returns as they were: missing from the
    session's records, or from its records of one kind (all of them when nothing was read)."""
    lost = 0
    for session_id, (_, _, every, some) in baseline.items():
        got = (found or {}).get(session_id)
        if got is None:
            lost += len(every)
            continue
        kept, kept_some = set(got[2]), set(got[3])
        lost += len({d for d in every if d not in kept} | {d for d in some if d not in kept_some})
    return lost


def wal_faults(work: Path, flips: int) -> list[Tally]:
    """A store whose last commits live only in its WAL, as a SIGKILLed writer leaves it."""
    base = work / "wal-base"
    run = write(base, "--sessions", "12", "--turns", "8", "--then-kill")
    acks = parse_acks(run.output)
    wal = base / WAL
    flipped, cut = Tally("WAL byte flips"), Tally("WAL truncation")
    if not wal.exists() or not acks:
        flipped.notes.append(f"no WAL to damage (writer: {run.errors.strip()[-200:]})")
        return [flipped, cut]
    acked = sum(ack.records for ack in acks)
    in_main = _records_in_main_file(base)
    size = wal.stat().st_size
    for offset in spread(size, flips):
        store = copy_store(base, work / "wal")
        damaged = bytearray((store / WAL).read_bytes())
        damaged[offset] ^= 0xFF
        (store / WAL).write_bytes(damaged)
        judge(flipped, verify_in_process(store), acks, store, f"WAL offset {offset}")
    for fraction in (0.25, 0.5, 0.75, 0.9, 0.99):
        store = copy_store(base, work / "wal")
        with open(store / WAL, "r+b") as file:
            file.truncate(int(size * fraction))
        judge(cut, verify_in_process(store), acks, store, f"WAL cut to {fraction:.0%}")
    note = (
        f"{size:,}-byte WAL; {acked} records acknowledged, {acked - in_main} of them only in "
        "the WAL"
    )
    flipped.notes.append(note)
    cut.notes.append(note)
    return [flipped, cut]


def _records_in_main_file(store: Path) -> int:
    """How many records the main database file holds without its WAL."""
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copyfile(store / DATABASE, Path(scratch) / DATABASE)
        connection = sqlite3.connect(Path(scratch) / DATABASE)
        try:
            return int(connection.execute("SELECT count(*) FROM records").fetchone()[0])
        except sqlite3.Error:
            return 0
        finally:
            connection.close()


def kills(work: Path, count: int) -> Tally:
    tally = Tally("kill -9 of a writer")
    store = work / "kill"
    shutil.rmtree(store, ignore_errors=True)
    every: list[Ack] = []
    for index in range(count):
        delay = 0.05 + 2.5 * index / max(count - 1, 1)
        workers = "1" if index % 2 == 0 else "4"
        run = write_then_kill(store, delay, "--workers", workers, "--turns", "6")
        if run.traceback:
            tally.count("crashed", example=f"writer at {delay:.2f}s: {run.errors.strip()[-200:]}")
            continue
        acks = parse_acks(run.output)
        every += acks
        judge(tally, verify_process(store), acks, store, f"kill at {delay:.2f}s")
    lost, _ = acked_lost(store, every)
    tally.notes.append(
        f"{len(every)} sessions acknowledged over {count} kills; at the end {lost} of their "
        f"{sum(ack.records for ack in every)} records missing, every earlier kill included"
    )
    return tally


@contextlib.contextmanager
def small_disk(work: Path, size: str) -> Iterator[tuple[Path, str | None]]:
    """A tmpfs of ``size`` mounted under ``work``, or (when mounting is refused) a plain
    directory and the reason; the caller then limits the writer with RLIMIT_FSIZE."""
    mount = work / "tmpfs"
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        yield mount, (done.stderr.strip() or "mount failed")
        return
    try:
        yield mount, None
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def disk_full(work: Path) -> Tally:
    """A writer fills a small disk, each mode on a disk of its own: sessions one by one, then
    one experiment. What the writer said, whether verify runs on the full disk, and — the store
    copied where there is room — what was lost and whether writing goes on."""
    tally = Tally("disk full")
    limit = 2 * 1024 * 1024
    for mode, options in (
        ("sessions", ("--turns", "10")),
        ("experiment", ("--experiment", "400", "--turns", "10")),
    ):
        with small_disk(work / f"disk-{mode}", "2m") as (disk, refused):
            fsize = () if refused is None else ("--fsize", str(limit))
            how = "2 MiB tmpfs" if refused is None else f"RLIMIT_FSIZE 2 MiB (no tmpfs: {refused})"
            store = disk / "store"
            run = write(store, *options, *fsize, timeout=90)
            acks = parse_acks(run.output)
            said = (run.errors.strip().splitlines() or ["(nothing)"])[-1][:200]
            tally.notes.append(f"{mode} on a {how}: writer exit {run.code}, said {said!r}")
            if run.hung or run.traceback:
                ended = "hung" if run.hung else "traceback"
                tally.count("crashed", example=f"{mode} writer {ended}: {said}")
            if not (store / DATABASE).exists():
                tally.notes.append(f"{mode}: no store was left on the full disk")
                continue
            in_place = verify_process(store)
            tally.notes.append(f"{mode}: verify on the full disk: exit {in_place.code}")
            roomy = copy_store(store, work / f"freed-{mode}")
        judge(tally, verify_process(roomy), acks, roomy, f"{mode} after disk full")
        again = write(roomy, "--sessions", "1", "--turns", "3")
        if again.traceback or again.code != 0:
            tally.notes.append(f"{mode}: writing again with room failed: {again.errors[-200:]}")
    return tally


def slow_reader(work: Path) -> Tally:
    tally = Tally("slow external reader")
    sizes = {}
    for pinned in (False, True):
        store = work / ("reader" if pinned else "no-reader")
        shutil.rmtree(store, ignore_errors=True)
        write(store, "--sessions", "1", "--turns", "2")  # the store exists before the reader
        reader = _hold_a_read(store) if pinned else None
        try:
            run = write(store, "--sessions", str(READER_SESSIONS), "--turns", "20", "--then-kill")
            sizes[pinned] = (store / WAL).stat().st_size if (store / WAL).exists() else 0
            acks = parse_acks(run.output)
            if pinned:
                warned = [line for line in run.errors.splitlines() if "write-ahead log" in line]
                first = f": {warned[0][:110]}…" if warned else ""
                tally.notes.append(f"the writer warned {len(warned)} time(s){first}")
                judge(tally, verify_process(store), acks, store, "kill -9 with a reader")
        finally:
            if reader is not None:
                reader.kill()
                reader.wait()
    tally.notes.append(
        f"WAL after {READER_SESSIONS} sessions: {sizes[True] / 1e6:.1f} MB with the reader, "
        f"{sizes[False] / 1e6:.1f} MB without"
    )
    return tally


def _hold_a_read(store: Path) -> subprocess.Popen[str]:
    """Another process that opens the store read-only, starts a read and never finishes it."""
    code = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], uri=True, isolation_level=None)\n"
        "c.execute('BEGIN'); c.execute('SELECT count(*) FROM records').fetchone()\n"
        "print('reading', flush=True)\n"
        "time.sleep(3600)\n"
    )
    uri = f"{(store / DATABASE).resolve().as_uri()}?mode=ro"
    process = subprocess.Popen([sys.executable, "-c", code, uri], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    process.stdout.readline()
    return process


# -- the command ------------------------------------------------------------------------------

FAULTS = ("flips", "wal", "kill", "disk-full", "reader")


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["_writer"]:
        return writer_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer injections of each kind")
    parser.add_argument("--only", default=",".join(FAULTS), help=f"some of {','.join(FAULTS)}")
    parser.add_argument("--flips", type=int, help="main-file flips (400; --quick 60)")
    parser.add_argument("--wal-flips", type=int, help="WAL flips (60; --quick 20)")
    parser.add_argument("--kills", type=int, help="kill -9s (30; --quick 8)")
    parser.add_argument("--directory", type=Path, help="where the stores go (a temporary one)")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := set(chosen) - set(FAULTS):
        parser.error(f"unknown fault(s) {sorted(unknown)}; choose from {', '.join(FAULTS)}")
    flips = args.flips or (60 if args.quick else 400)
    wal_flips = args.wal_flips or (20 if args.quick else 60)
    kill_count = args.kills or (8 if args.quick else 30)
    work = Path(tempfile.mkdtemp(prefix="envharness-faults-", dir=args.directory))
    tallies: list[Tally] = []
    started = time.monotonic()
    try:
        for name in chosen:
            print(f"injecting: {name} ...", file=sys.stderr, flush=True)
            if name == "flips":
                tallies.append(main_file_flips(work, flips))
            elif name == "wal":
                tallies.extend(wal_faults(work, wal_flips))
            elif name == "kill":
                tallies.append(kills(work, kill_count))
            elif name == "disk-full":
                tallies.append(disk_full(work))
            elif name == "reader":
                tallies.append(slow_reader(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in table(tallies):
        print(line)
    for tally in tallies:
        for note in tally.notes:
            print(f"  {tally.fault}: {note}")
    failed = [t.fault for t in tallies if t.silent or t.crashed]
    verdict = f"FAIL: silent loss or crash in {', '.join(failed)}" if failed else "PASS"
    print(f"{verdict} ({time.monotonic() - started:.0f}s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
