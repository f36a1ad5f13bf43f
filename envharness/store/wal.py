"""The acknowledged high-water mark, and the checks that a store's write-ahead log lost nothing.

Whatever was committed since the last checkpoint lives only in ``evidence.sqlite3-wal``, and
SQLite's recovery of that log drops every commit after a damaged frame without a word; the
session index rolls back with the records, so chains and heads still agree. A log that lost its
end (cut short, copied halfway) looks like a shorter one. Two checks make either loss a
:class:`~envharness.errors.WalDamageError` instead:

- :func:`~envharness.store.walscan.scan_wal` reads the log as SQLite's recovery does, and finds
  the complete commits of the same log past the frame where recovery would stop;
- the journal keeps a high-water mark beside the database (``evidence.sqlite3-acked``): after
  each commit, the highest record position and the heads of the chains it touched (written, not
  synced: a process killed after its commit leaves it in the page cache). Records that end below
  the mark are acknowledged records lost, whichever way they went; the chains named in the mark
  say which sessions lost what.

Both checks run before a read-write connection opens the store (:func:`check_before_open`):
closing one checkpoints what recovery kept and deletes the log, which would destroy the damaged
frames and, with them, every trace of the loss. A read-only connection changes nothing, so the
checks themselves read through one. They run when recovery will: when no process has the store
open (:func:`in_use`) — after a crash, on a copy — since a connection that joins open ones
uses the index they keep and drops nothing. :func:`check_after_open` compares the records with
the mark on every open; :func:`wal_breaks` gives ``verify`` both checks, whoever has the store
open. ``docs/evidence.md`` says what is detected and what is not.
"""

from __future__ import annotations

import os
import sqlite3
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from envharness.errors import WalDamageError
from envharness.store.handles import lock_holders, open_connection
from envharness.store.walscan import WalScan, scan_wal

__all__ = [
    "MARK_SUFFIX",
    "Loss",
    "Mark",
    "MarkWriter",
    "check_after_open",
    "check_before_open",
    "in_use",
    "lost_records",
    "read_mark",
    "wal_breaks",
]

MARK_SUFFIX = "-acked"
MARK_CHAINS = 32
"""Chains (sessions, experiments, runs) the mark names: those of the most recent commits."""
MARK_SIZE = 4096

_MARK_TAG = b"envharness-acked/1"
_SHOWN_CHAINS = 8


def in_use(database: Path) -> bool:
    """Whether some process has the database open now (Linux: a lock on its ``-shm`` file in
    ``/proc/locks``; every SQLite connection in WAL mode holds one while it is open).

    Then the log is not recovered when another connection opens: that connection joins the
    index the open ones keep, and SQLite drops nothing. ``False`` where it cannot be told."""
    try:
        status = os.stat(f"{database}-shm")
    except OSError:
        return False
    return bool(lock_holders(status))


# -- the acknowledged high-water mark --------------------------------------------------------------


class Mark(msgspec.Struct, frozen=True):
    """The highest record position acknowledged, when, and the heads of recent chains."""

    position: int
    at: str
    chains: list[tuple[str, int]] = []


_mark_encoder = msgspec.json.Encoder()
_mark_decoder = msgspec.json.Decoder(Mark)


def mark_path(database: Path) -> Path:
    return Path(f"{database}{MARK_SUFFIX}")


def read_mark(database: Path) -> Mark | None:
    """The mark, or ``None`` when there is none or it does not read whole (a write torn by a
    crash, another program's file): a mark that cannot be trusted never reports a loss."""
    try:
        data = mark_path(database).read_bytes()
    except OSError:
        return None
    tag, _, rest = data.partition(b" ")
    check, _, body = rest.partition(b" ")
    body = body.rstrip(b" \n")
    if tag != _MARK_TAG or check != b"%08x" % zlib.crc32(body):
        return None
    try:
        return _mark_decoder.decode(body)
    except msgspec.DecodeError:
        return None


class MarkWriter:
    """Keeps the mark up to date from the journal's writer thread, one ``pwrite`` per commit.

    Never synced: the mark only has to outlive a killed process (the page cache does that). A
    mark that power loss leaves behind is older, so it can only miss a loss, never invent one.
    A write that fails (a full disk) is skipped: the commit it follows stands.
    """

    def __init__(self, database: Path) -> None:
        self._path = mark_path(database)
        self._descriptor: int | None = None
        self._chains: OrderedDict[str, int] = OrderedDict()

    def note(self, position: int | None, at: str, heads: Mapping[str, int]) -> None:
        if position is None:
            return
        for chain, seq in heads.items():
            self._chains[chain] = seq
            self._chains.move_to_end(chain)
        while len(self._chains) > MARK_CHAINS:
            self._chains.popitem(last=False)
        recent = list(reversed(self._chains.items()))
        while True:
            body = _mark_encoder.encode(Mark(position, at, recent))
            line = b"%s %08x %s" % (_MARK_TAG, zlib.crc32(body), body)
            if len(line) < MARK_SIZE or not recent:
                break
            recent.pop()  # long chain ids: name fewer chains
        try:
            if self._descriptor is None:
                self._descriptor = _open_private(self._path)
            os.pwrite(self._descriptor, line.ljust(MARK_SIZE - 1) + b"\n", 0)
        except OSError:
            pass

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def _open_private(path: Path) -> int:
    """Open the mark for writing; a new one is the owner's alone (0600), whatever the umask."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return os.open(path, os.O_WRONLY)
    os.fchmod(descriptor, 0o600)
    return descriptor


def forget_mark(database: Path) -> None:
    """A new database starts without a mark: one left by a store deleted before is not its."""
    mark_path(database).unlink(missing_ok=True)


# -- losses ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Loss:
    """Acknowledged records the store no longer holds, by the mark."""

    database: Path
    mark: Mark
    found: int
    chains: tuple[tuple[str, int, int], ...]
    """Each chain of the mark that ends early: its id, first and last missing ``seq``."""

    @property
    def records(self) -> int:
        return self.mark.position - self.found

    def describe(self) -> str:
        text = (
            f"records up to position {self.mark.position} were acknowledged (the last at "
            f"{self.mark.at}), but the store's records end at position {self.found}: "
            f"{_count(self.records, 'acknowledged record')} missing"
        )
        if self.chains:
            shown = ", ".join(
                f"{chain} seq {first}..{last}" for chain, first, last in self.chains[:_SHOWN_CHAINS]
            )
            more = len(self.chains) - _SHOWN_CHAINS
            text += f", among them {shown}" + (f" and {more} more chains" if more > 0 else "")
        return text


def lost_records(connection: sqlite3.Connection, database: Path) -> Loss | None:
    """Acknowledged commits that ``connection`` does not see, by the mark; ``None`` when there
    is no mark or nothing is missing.

    A commit lost from the log takes its records and its index entries with it, so a loss is
    records ending below the mark *and* a chain of the mark whose indexed head is behind it
    (the mark names the chains of the latest commits, which are the first to go). Records
    missing behind an index that still holds their head — deleted by hand, a damaged page —
    are the chain checks' of ``verify`` to report. The mark is read first, so a commit another
    writer makes meanwhile is seen by the queries that follow it.
    """
    mark = read_mark(database)
    if mark is None:
        return None
    try:
        row = connection.execute("SELECT max(pos) FROM records").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        row = (None,)  # not even the tables survived (the log that made them is ignored)
    found = int(row[0]) if isinstance(row[0], int) else 0
    if found >= mark.position:
        return None
    chains = []
    for chain, head in mark.chains:
        indexed = _indexed_head(connection, chain)
        if indexed is None or indexed < head:
            chains.append((chain, 0 if indexed is None else indexed + 1, head))
    return Loss(database, mark, found, tuple(chains)) if chains else None


def _indexed_head(connection: sqlite3.Connection, chain: str) -> int | None:
    for table in ("sessions", "experiments", "optimizer_runs"):
        try:
            row = connection.execute(
                f"SELECT head_seq FROM {table} WHERE id = ?", (chain,)
            ).fetchone()
        except sqlite3.OperationalError:
            continue  # a store from before that table
        if row is not None:
            return row[0] if isinstance(row[0], int) else None
    return None


# -- the checks ------------------------------------------------------------------------------------


def check_before_open(database: Path) -> None:
    """Raise :class:`WalDamageError` when opening ``database`` would lose acknowledged commits.

    Only the log is read, and the database through a read-only connection, so nothing is
    changed whatever is found. A store open in another process (or this one) is not scanned:
    its log is not recovered. A store without a log has nothing to check here;
    :func:`check_after_open` compares its records with the mark.
    """
    if in_use(database):
        return  # its log is not recovered: SQLite drops nothing (verify still scans it)
    scan = scan_wal(database)
    if scan is None:
        return
    if read_mark(database) is None:
        if scan.lost_commits:
            raise _damage(database, scan, None)
        return
    try:
        loss = _loss_read_only(database)
    except sqlite3.Error:
        if scan.lost_commits:  # the mark cannot be compared: taken as damage
            raise _damage(database, scan, None) from None
        return  # busy, say: the check after opening still compares
    if _is_damage(scan, loss, True):
        raise _damage(database, scan, loss)
    if loss is not None:
        raise _damage(database, None, loss)


def check_after_open(connection: sqlite3.Connection, database: Path) -> None:
    """Raise :class:`WalDamageError` when the store holds fewer records than were acknowledged."""
    loss = lost_records(connection, database)
    if loss is not None:
        raise _damage(database, None, loss)


def wal_breaks(connection: sqlite3.Connection) -> list[tuple[str, int | None, str]]:
    """What ``verify`` reports: the log's damage and a loss by the mark as store-level breaks
    (named by the database file, as ``verify.STORE``), and each chain that lost acknowledged
    records as a break of that chain at its first missing ``seq``. Never raises: a log or a
    mark that cannot be read has nothing to report."""
    try:
        database = _database_of(connection)
    except sqlite3.Error:
        return []  # the file as a whole is verify's to report
    if database is None:
        return []
    found: list[tuple[str, int | None, str]] = []
    try:
        scan = scan_wal(database)
    except OSError as exc:
        scan = None
        found.append((database.name, None, f"its write-ahead log cannot be read: {exc}"))
    try:
        loss = lost_records(connection, database)
    except (sqlite3.Error, UnicodeDecodeError):
        loss = None  # the records cannot be read: verify's chain checks say where
    if scan is not None and _is_damage(scan, loss, read_mark(database) is not None):
        found.append((database.name, None, scan.describe()))
    if loss is not None:
        found.append((database.name, None, loss.describe()))
        for chain, first, last in loss.chains:
            found.append(
                (chain, first, f"records seq {first}..{last} were acknowledged but are missing")
            )
    return found


def _is_damage(scan: WalScan, loss: Loss | None, marked: bool) -> bool:
    """Commits past the break are damage when there are two or more of them (the first was
    synced before the second began), or when the mark says records were lost. One commit with
    a sound mark behind it may be the one a power cut tore: the frames of a commit reach the
    disk in any order until it is synced, and it was acknowledged only after. Without a mark
    there is no telling, and the log is taken as damaged."""
    if not scan.lost_commits:
        return False
    return scan.certain or loss is not None or not marked


def _loss_read_only(database: Path) -> Loss | None:
    """The loss a read-only connection sees (raises ``sqlite3.Error`` when it cannot tell)."""
    connection = open_connection(database, f"{database.resolve().as_uri()}?mode=ro")
    try:
        return lost_records(connection, database)
    finally:
        connection.close()


def _database_of(connection: sqlite3.Connection) -> Path | None:
    for _, name, file in connection.execute("PRAGMA database_list").fetchall():
        if name == "main" and isinstance(file, str) and file:
            return Path(file)
    return None


def _damage(database: Path, scan: WalScan | None, loss: Loss | None) -> WalDamageError:
    what = "; ".join(part.describe() for part in (scan, loss) if part is not None)
    mark = mark_path(database).name
    keep = f"every {database.name}* file"
    if scan is not None:
        keep += f" ({scan.path.name} holds the commits SQLite would drop)"
        accept = (
            f"run `sqlite3 {database.name} 'PRAGMA wal_checkpoint(TRUNCATE)'` in the store "
            f"folder (SQLite keeps what precedes the damage), then delete {mark}"
        )
    else:
        accept = f"delete {mark} from the store folder"
    return WalDamageError(
        f"the store at {str(database.parent)!r} has lost acknowledged commits: {what}. Nothing "
        f"was changed. Keep a copy of the store folder as it is, with {keep}, and restore the "
        "store from a backup if there is one; `envharness verify` reads it as it is and lists "
        f"what is missing. To go on with what survives, {accept}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
