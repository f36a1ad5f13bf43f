"""Imported records: each external source's own hash chain, checked, stored whole or not at all.

A *source* is a namespaced feed (``acme/nightly-evals``) of records another tool produced. Each
source is one hash chain: positions dense from 0, each record's ``hash`` the sha256 of its
canonical bytes, ``prev`` the hash of the record before it — our own digest recipe
(docs/evidence.md) over a source record's fields (:func:`source_hash_of`). The chain is checked
on the way in and again by ``verify``; our session chains do not re-wrap imported records
(docs/architecture.md, "Imported records keep their own chain").

An import is a batch: every record of it is stored in one transaction, or none is. A record at a
position the source already holds is compared by hash: the same hash is an idempotent retry
(nothing written), another hash a conflict that refuses the whole batch. Every import, stored or
refused, is noted in ``source_imports`` (which batch brought which positions, in which format,
with what declaration); refusals are what source health reports as gaps and backlog. Imported
records and the import log are append-only, like the journal.

The error tree this module adds under :class:`~envharness.errors.EnvharnessError`::

    SourceImportError        an import was refused; nothing was stored
    ├── SourceFormatError    a line is not a source record (JSON, a field, the schema version)
    ├── SourceChainError     a hash that does not match, a prev that does not chain, a gap
    └── SourceConflictError  a position already holds a record with another hash
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import sqlite3
from collections.abc import AsyncGenerator, Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

import anyio
import msgspec

from envharness.errors import ConfigurationError, EnvharnessError, NotFoundError, StoreError
from envharness.records import canonical, new_id, utc_now_text
from envharness.store.connections import read_in_thread
from envharness.store.schema import connect, translate_sqlite_error

__all__ = [
    "CAPTURE_FAILED",
    "KNOWN_SCHEMA_VERSIONS",
    "SOURCE_SCHEMA_VERSION",
    "EpisodeInfo",
    "ImportBatch",
    "ImportReceipt",
    "ProblemKind",
    "SourceChainError",
    "SourceConflictError",
    "SourceFormatError",
    "SourceGap",
    "SourceHealth",
    "SourceImportError",
    "SourceRow",
    "SourceStore",
    "chain_problem",
    "check_batch",
    "check_source_id",
    "source_hash_of",
    "verify_sources",
]

SOURCE_SCHEMA_VERSION = 1
"""The import record schema this envharness writes (docs/imports.md)."""
KNOWN_SCHEMA_VERSIONS = frozenset({SOURCE_SCHEMA_VERSION})
"""Every import record schema version this envharness reads."""
CAPTURE_FAILED = "capture.failed"
"""The kind of record in which a source says it failed to capture something."""

ProblemKind = Literal["format", "schema", "hash", "chain", "gap", "conflict"]

_SOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)+")
_MAX_SOURCE_ID = 200
_PAGE = 500
_T = TypeVar("_T")


# -- errors ------------------------------------------------------------------------------------


class SourceImportError(EnvharnessError):
    """An import was refused and nothing of it was stored.

    ``source`` and ``position`` name the record at fault (``position`` is ``None`` when the
    problem is not one record's); ``problem`` says which rule it broke.
    """

    problem: ProblemKind = "format"

    def __init__(self, message: str, *, source: str, position: int | None) -> None:
        super().__init__(message)
        self.source = source
        self.position = position


class SourceFormatError(SourceImportError):
    """A line is not a source record this envharness reads."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        position: int | None,
        problem: Literal["format", "schema"] = "format",
    ) -> None:
        super().__init__(message, source=source, position=position)
        self.problem = problem


class SourceChainError(SourceImportError):
    """A record's hash does not match its content, its ``prev`` does not chain, or positions
    skip (a gap)."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        position: int | None,
        problem: Literal["hash", "chain", "gap"],
    ) -> None:
        super().__init__(message, source=source, position=position)
        self.problem = problem


class SourceConflictError(SourceImportError):
    """A position already holds a record with another hash: a retry with different content."""

    problem: ProblemKind = "conflict"


# -- the record as stored, and its hash ----------------------------------------------------------


class SourceRow(NamedTuple):
    """One imported record as stored: the payload stays in the bytes its hash covers."""

    source: str
    position: int
    schema_version: int
    episode: str
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: bytes
    prev: str | None
    hash: str


class _Body(msgspec.Struct, frozen=True):
    """The fields a source record's hash covers (every field but ``hash``); keys sorted."""

    source: str
    position: int
    schema_version: int
    episode: str
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: msgspec.Raw
    prev: str | None


def source_hash_of(
    source: str,
    position: int,
    schema_version: int,
    episode: str,
    kind: str,
    turn: int | None,
    participant: str | None,
    at: str,
    payload: bytes,
    prev: str | None,
) -> str:
    """sha256 (hex) of the canonical JSON of a source record without its ``hash``.

    The payload enters as its exact bytes, as in our own digests (docs/evidence.md).
    """
    body = _Body(
        source, position, schema_version, episode, kind, turn, participant, at,
        msgspec.Raw(payload), prev,
    )  # fmt: skip
    return hashlib.sha256(canonical(body)).hexdigest()


def _recomputed(row: SourceRow) -> str:
    return source_hash_of(*row[:10])


def check_source_id(source: str) -> str:
    """``source`` when it is a namespaced source id (``namespace/name``); an error otherwise."""
    if len(source) <= _MAX_SOURCE_ID and _SOURCE_ID.fullmatch(source):
        return source
    raise ConfigurationError(
        f"source {source!r} is not a namespaced source id: give it as NAMESPACE/NAME, e.g. "
        "acme/nightly-evals or otel/weather-agent (letters, digits, '.', '_', '-'; at most "
        f"{_MAX_SOURCE_ID} characters); the namespace keeps one tool's records from another's"
    )


def chain_problem(
    previous: SourceRow | None, row: SourceRow
) -> tuple[Literal["hash", "chain", "gap"], str] | None:
    """What is wrong with ``row`` following ``previous`` in one batch (``None``: nothing).

    ``previous`` is ``None`` for the first record of a batch: its link to what the store
    already holds is checked inside the import transaction.
    """
    if row.position < 0:
        return "chain", f"position {row.position} is negative; positions count from 0"
    recomputed = _recomputed(row)
    if recomputed != row.hash:
        return "hash", (
            f"position {row.position}: its hash {row.hash!r} does not match its content "
            f"(recomputed {recomputed}); the record changed after it was hashed, or the hash "
            "was computed another way: hash the canonical JSON of every other field, with the "
            "payload's exact bytes (docs/imports.md, 'The hash')"
        )
    if row.position == 0 and row.prev is not None:
        return "chain", (
            f"position 0 is the first record of the source: its prev must be null, not {row.prev!r}"
        )
    if previous is None:
        return None
    if row.position != previous.position + 1:
        if row.position <= previous.position:
            return "chain", (
                f"position {row.position} follows position {previous.position}: records "
                "must come in ascending positions, each once; sort the file by position"
            )
        missing = _span(previous.position + 1, row.position - 1)
        return "gap", (
            f"position {row.position} follows position {previous.position}: "
            f"position(s) {missing} are missing; send them in this batch, in order"
        )
    if row.prev != previous.hash:
        return "chain", (
            f"position {row.position}: its prev {row.prev!r} is not the hash of position "
            f"{previous.position} ({previous.hash}); the source's chain is broken there: "
            "re-export from the source, or set prev to the previous record's hash and rehash"
        )
    return None


def check_batch(source: str, rows: Sequence[SourceRow], *, prefix: str = "") -> None:
    """Refuse a batch that is not one unbroken piece of ``source``'s chain (``prefix`` starts
    each message, e.g. the file's name)."""
    previous: SourceRow | None = None
    for row in rows:
        if row.source != source:
            raise SourceFormatError(
                f"{prefix}position {row.position} belongs to source {row.source!r}, not "
                f"{source!r}; import each source's records under its own name",
                source=source,
                position=row.position,
            )
        if row.schema_version not in KNOWN_SCHEMA_VERSIONS:
            raise SourceFormatError(
                prefix + _schema_message(row.schema_version, row.position),
                source=source,
                position=row.position,
                problem="schema",
            )
        found = chain_problem(previous, row)
        if found is not None:
            problem, text = found
            raise SourceChainError(
                f"{prefix}source {source!r} {text}",
                source=source,
                position=row.position,
                problem=problem,
            )
        previous = row


def _schema_message(version: object, position: int | None) -> str:
    where = f"position {position}: " if position is not None else ""
    known = ", ".join(str(known) for known in sorted(KNOWN_SCHEMA_VERSIONS))
    return (
        f"{where}schema_version {version!r} is not one this envharness reads ({known}); "
        "upgrade envharness to import it, or have the source write schema_version "
        f"{SOURCE_SCHEMA_VERSION} (docs/imports.md)"
    )


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


# -- what imports and health report --------------------------------------------------------------


class ImportBatch(msgspec.Struct, frozen=True, kw_only=True):
    """Who sends a batch and how: kept with each import, never hashed (it is ours, not the
    source's)."""

    source: str
    format: str
    """The source's own format: ``envharness`` (import lines) or an importer's (``otel-genai``)."""
    importer: str
    """Name and version of the code that turned the input into source records."""
    origin: str = ""
    """Where the input came from (a file name), for people reading the import log."""
    training: bool = False
    """The sender declares these records may be used to train models."""


class ImportReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """What an import did. ``stored`` new records; ``duplicates`` already held, identical."""

    import_id: str
    source: str
    format: str
    stored: int
    duplicates: int
    first_position: int
    last_position: int
    head_position: int
    head_hash: str


class SourceGap(msgspec.Struct, frozen=True):
    """Positions ``first .. last`` (inclusive) the source has not delivered."""

    first: int
    last: int


class SourceHealth(msgspec.Struct, frozen=True, kw_only=True):
    """Where one source stands.

    ``head_position`` / ``head_hash``: the last acknowledged (stored) record; -1 / ``None``
    before the first. ``offered_position``: the highest position any import offered, stored or
    not; ``backlog`` the positions offered beyond the head. ``gaps``: positions a refused import
    skipped. ``capture_failures``: records in which the source says it lost something.
    ``refused``: imports refused since the last one that stored something.
    """

    source: str
    head_position: int
    head_hash: str | None
    records: int
    episodes: int
    formats: tuple[str, ...]
    offered_position: int
    backlog: int
    gaps: tuple[SourceGap, ...]
    capture_failures: int
    last_capture_failure: str | None
    imports: int
    refused: int
    last_refusal: str | None
    updated_at: str


class EpisodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One episode (run, trace, sample) of a source: where its records lie in the chain.

    ``training`` is true when every import that brought one of its records declared it.
    """

    source: str
    episode: str
    first_position: int
    last_position: int
    records: int
    head_hash: str
    formats: tuple[str, ...]
    importers: tuple[str, ...]
    training: bool


# -- the store side ------------------------------------------------------------------------------

_COLUMNS = (
    "source, position, schema_version, episode, kind, turn, participant, at, payload, prev, hash"
)
_INSERT = f"INSERT INTO source_records ({_COLUMNS}, import_id) VALUES ({', '.join('?' * 12)})"
_INSERT_IMPORT = (
    "INSERT INTO source_imports (id, source, at, format, importer, origin, training,"
    " first_position, last_position, stored, duplicates, status, problem, problem_kind,"
    f" problem_position) VALUES ({', '.join('?' * 15)})"
)


class SourceStore:
    """The imported sources of one store. Each call is one short transaction in a worker
    thread, on a connection of its own (imports are rare and batch-sized: they wait for the
    journal's lock like any other writer, up to the busy timeout)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._ready = False

    async def append(self, batch: ImportBatch, rows: Sequence[SourceRow]) -> ImportReceipt:
        """Store ``rows`` (one piece of ``batch.source``'s chain) whole, or refuse them whole.

        Raises :class:`SourceImportError` naming the position at fault; a refusal is noted in
        the import log (for health) and changes nothing else.
        """
        source = check_source_id(batch.source)
        if not rows:
            raise ConfigurationError(f"nothing to import into {source!r}: the batch has no records")
        try:
            # Every hash is recomputed: in a worker thread, so a large batch cannot stall the loop.
            await anyio.to_thread.run_sync(
                functools.partial(check_batch, source, rows, prefix=_origin(batch))
            )
        except SourceImportError as refused:
            await self.note_refusal(batch, rows, refused)
            raise
        import_id = new_id("imp")

        def run() -> ImportReceipt:
            connection = connect(self.directory, create=True)
            try:
                try:
                    connection.execute("BEGIN IMMEDIATE")
                    receipt = _apply(connection, batch, rows, import_id, utc_now_text())
                    connection.execute("COMMIT")
                    return receipt
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
            except SourceImportError as refused:
                _note(connection, batch, rows, refused)
                raise
            except sqlite3.Error as exc:
                raise translate_sqlite_error(exc, self.directory) from exc
            finally:
                connection.close()

        # Not abandoned on cancel: the caller learns whether the batch was stored.
        return await anyio.to_thread.run_sync(run)

    async def note_refusal(
        self, batch: ImportBatch, rows: Sequence[SourceRow], refused: SourceImportError
    ) -> None:
        """Note in the import log that a batch was refused before it reached the store (a
        line that did not parse), so health can report it. Like an import, this creates the
        store when there is none; it changes no record. Best effort: a store that cannot be
        opened is left alone, and the caller still raises the refusal itself."""

        def run() -> None:
            try:
                connection = connect(self.directory, create=True)
            except StoreError:
                return
            try:
                _note(connection, batch, rows, refused)
            finally:
                connection.close()

        await anyio.to_thread.run_sync(run)

    async def head(self, source: str) -> tuple[int, str | None]:
        """The acknowledged position and hash of ``source``; ``(-1, None)`` before the first."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT head_position, head_hash FROM sources WHERE id = ?", (source,)
            ).fetchall()
        )
        return (int(rows[0][0]), str(rows[0][1])) if rows else (-1, None)

    async def health(self, source: str | None = None) -> list[SourceHealth]:
        """Every source (or the one named), in name order; refused-only sources included."""
        found = await self._read(lambda c: _health(c, source))
        if source is not None and not found:
            raise NotFoundError(
                f"no source {source!r} in the store at {str(self.directory)!r}; "
                "`envharness sources` lists them"
            )
        return found

    async def episodes(self, source: str) -> list[EpisodeInfo]:
        """The episodes of ``source``, in the order their first records were imported."""
        found = await self._read(lambda c: _episodes(c, source))
        if not found:
            raise NotFoundError(
                f"no records of source {source!r} in the store at {str(self.directory)!r}; "
                "`envharness sources` lists the sources"
            )
        return found

    async def rows(
        self, source: str, *, episode: str | None = None, after: int = -1, upto: int | None = None
    ) -> AsyncGenerator[SourceRow, None]:
        """``source``'s records (of one ``episode``, when given) with ``after`` < position
        <= ``upto``, in position order, one short read transaction per page."""
        clauses = ["source = ?", "position > ?"]
        extra: list[object] = []
        if episode is not None:
            clauses.append("episode = ?")
            extra.append(episode)
        if upto is not None:
            clauses.append("position <= ?")
            extra.append(upto)
        query = (
            f"SELECT {_COLUMNS} FROM source_records WHERE {' AND '.join(clauses)}"
            f" ORDER BY position LIMIT {_PAGE}"
        )
        while True:
            arguments = (source, after, *extra)

            def fetch(connection: sqlite3.Connection) -> list[SourceRow]:
                return [SourceRow(*row) for row in connection.execute(query, arguments)]  # noqa: B023 - called at once

            page = await self._read(fetch)
            for row in page:
                yield row
            if len(page) < _PAGE:
                return
            after = page[-1].position

    async def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if not self._ready:
            # Like read_store: refuse a missing or newer store, migrate an older one.
            opened = await anyio.to_thread.run_sync(lambda: connect(self.directory, create=False))
            await anyio.to_thread.run_sync(opened.close)
            self._ready = True

        return await read_in_thread(self.directory, work)


def _apply(
    connection: sqlite3.Connection,
    batch: ImportBatch,
    rows: Sequence[SourceRow],
    import_id: str,
    now: str,
) -> ImportReceipt:
    """Inside the import transaction: compare with what is held, then insert what is new."""
    source = batch.source
    held = connection.execute(
        "SELECT head_position, head_hash FROM sources WHERE id = ?", (source,)
    ).fetchone()
    head, head_hash = (int(held[0]), str(held[1])) if held else (-1, None)
    first, last = rows[0].position, rows[-1].position
    if first > head + 1:
        have = f"it holds positions 0..{head}" if head >= 0 else "it holds no records yet"
        raise SourceChainError(
            f"{_origin(batch)}source {source!r} position {first}: position(s) "
            f"{_span(head + 1, first - 1)} "
            f"were never imported ({have}); import the missing records first, or resend this "
            f"batch starting at position {head + 1}",
            source=source,
            position=first,
            problem="gap",
        )
    duplicates = 0
    if first <= head:
        stored = dict(
            connection.execute(
                "SELECT position, hash FROM source_records WHERE source = ?"
                " AND position BETWEEN ? AND ?",
                (source, first, min(last, head)),
            ).fetchall()
        )
        for row in rows:
            if row.position > head:
                break
            if stored.get(row.position) != row.hash:
                raise SourceConflictError(
                    f"{_origin(batch)}source {source!r} position {row.position} is already "
                    "imported with "
                    f"hash {stored.get(row.position)}, and this batch sends hash {row.hash} "
                    "there: a retry with different content. Nothing was stored. If the "
                    "source rewrote its history, import it as a new source (another NAME); "
                    "stored records are never replaced",
                    source=source,
                    position=row.position,
                )
            duplicates += 1
    new = rows[duplicates:]
    if new and new[0].prev != head_hash:
        raise SourceChainError(
            f"{_origin(batch)}source {source!r} position {new[0].position}: its prev "
            f"{new[0].prev!r} is not "
            f"the hash of the acknowledged position {head} ({head_hash}); the batch does not "
            "continue the source's chain: resend it from the source as it was exported",
            source=source,
            position=new[0].position,
            problem="chain",
        )
    if new:
        connection.executemany(_INSERT, [(*row, import_id) for row in new])
        tail = new[-1]
        if held:
            connection.execute(
                "UPDATE sources SET head_position = ?, head_hash = ?, updated_at = ? WHERE id = ?",
                (tail.position, tail.hash, now, source),
            )
        else:
            connection.execute(
                "INSERT INTO sources (id, created_at, updated_at, head_position, head_hash)"
                " VALUES (?, ?, ?, ?, ?)",
                (source, now, now, tail.position, tail.hash),
            )
        head, head_hash = tail.position, tail.hash
    connection.execute(
        _INSERT_IMPORT,
        (
            import_id, source, now, batch.format, batch.importer, batch.origin,
            int(batch.training), first, last, len(new), duplicates,
            "stored" if new else "duplicate", None, None, None,
        ),
    )  # fmt: skip
    assert head_hash is not None  # a non-empty batch leaves a head
    return ImportReceipt(
        import_id=import_id,
        source=source,
        format=batch.format,
        stored=len(new),
        duplicates=duplicates,
        first_position=first,
        last_position=last,
        head_position=head,
        head_hash=head_hash,
    )


def _origin(batch: ImportBatch) -> str:
    """``"run.jsonl: "`` when the batch says where it came from, so errors name the file."""
    return f"{batch.origin}: " if batch.origin else ""


def _note(
    connection: sqlite3.Connection,
    batch: ImportBatch,
    rows: Sequence[SourceRow],
    refused: SourceImportError,
) -> None:
    """Log a refused batch in a transaction of its own (the batch's was rolled back).

    Best effort: the log feeds health, and failing to write it (a store locked past the busy
    timeout) must not hide the refusal the caller is about to get.
    """
    positions = [row.position for row in rows]
    with contextlib.suppress(sqlite3.Error):
        _insert_refusal(connection, batch, positions, refused)


def _insert_refusal(
    connection: sqlite3.Connection,
    batch: ImportBatch,
    positions: list[int],
    refused: SourceImportError,
) -> None:
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute(
            _INSERT_IMPORT,
            (
                new_id("imp"), batch.source, utc_now_text(), batch.format, batch.importer,
                batch.origin, int(batch.training), min(positions, default=None),
                max(positions, default=None), 0, 0, "refused", str(refused), refused.problem,
                refused.position,
            ),
        )  # fmt: skip
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _health(connection: sqlite3.Connection, only: str | None) -> list[SourceHealth]:
    where, arguments = ("WHERE source = ?", (only,)) if only is not None else ("", ())
    connection.execute("BEGIN")  # one snapshot for every query below
    try:
        names = [
            str(row[0])
            for row in connection.execute(
                f"SELECT DISTINCT source FROM source_imports {where} ORDER BY source", arguments
            )
        ]
        return [_one_health(connection, name) for name in names]
    finally:
        connection.execute("COMMIT")


def _one_health(connection: sqlite3.Connection, source: str) -> SourceHealth:
    held = connection.execute(
        "SELECT head_position, head_hash, updated_at FROM sources WHERE id = ?", (source,)
    ).fetchone()
    head, head_hash = (int(held[0]), str(held[1])) if held else (-1, None)
    records, episodes = connection.execute(
        "SELECT COUNT(*), COUNT(DISTINCT episode) FROM source_records WHERE source = ?",
        (source,),
    ).fetchone()
    imports = connection.execute(
        "SELECT status, format, at, first_position, last_position, problem, problem_kind"
        " FROM source_imports WHERE source = ? ORDER BY at, rowid",
        (source,),
    ).fetchall()
    offered = max((int(row[4]) for row in imports if row[4] is not None), default=-1)
    refused_since: list[tuple[object, ...]] = []
    for row in imports:
        refused_since = [*refused_since, row] if row[0] == "refused" else []
    skipped = [
        int(row[3])
        for row in imports
        if row[0] == "refused" and row[6] == "gap" and row[3] is not None and row[3] > head + 1
    ]
    gaps = (SourceGap(head + 1, min(skipped) - 1),) if skipped else ()
    failure = connection.execute(
        "SELECT COUNT(*), MAX(position) FROM source_records WHERE source = ? AND kind = ?",
        (source, CAPTURE_FAILED),
    ).fetchone()
    last_failure = None
    if failure[0]:
        payload = connection.execute(
            "SELECT payload FROM source_records WHERE source = ? AND position = ?",
            (source, failure[1]),
        ).fetchone()[0]
        last_failure = f"position {failure[1]}: {_detail(payload)}"
    return SourceHealth(
        source=source,
        head_position=head,
        head_hash=head_hash,
        records=int(records),
        episodes=int(episodes),
        formats=tuple(sorted({str(row[1]) for row in imports if row[0] != "refused"})),
        offered_position=max(offered, head),
        backlog=max(offered - head, 0),
        gaps=gaps,
        capture_failures=int(failure[0]),
        last_capture_failure=last_failure,
        imports=len(imports),
        refused=len(refused_since),
        last_refusal=str(refused_since[-1][5]) if refused_since else None,
        updated_at=str(imports[-1][2]) if imports else "",
    )


def _detail(payload: object) -> str:
    """The ``detail`` of a capture-failure payload, or its bytes when it has none."""
    try:
        decoded = msgspec.json.decode(payload) if isinstance(payload, bytes) else None
    except msgspec.DecodeError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("detail"), str):
        return str(decoded["detail"])
    return repr(payload)[:200]


def _episodes(connection: sqlite3.Connection, source: str) -> list[EpisodeInfo]:
    rows = connection.execute(
        "SELECT e.episode, e.first, e.last, e.count, r.hash, e.formats, e.importers, e.training"
        " FROM (SELECT r.episode, MIN(r.position) AS first, MAX(r.position) AS last,"
        " COUNT(*) AS count, json_group_array(DISTINCT i.format) AS formats,"
        " json_group_array(DISTINCT i.importer) AS importers, MIN(i.training) AS training"
        " FROM source_records r JOIN source_imports i ON i.id = r.import_id"
        " WHERE r.source = ? GROUP BY r.episode) AS e"
        " JOIN source_records r ON r.source = ? AND r.position = e.last ORDER BY e.first",
        (source, source),
    ).fetchall()
    names = msgspec.json.Decoder(list[str])
    return [
        EpisodeInfo(
            source=source,
            episode=str(episode),
            first_position=int(first),
            last_position=int(last),
            records=int(count),
            head_hash=str(head_hash),
            formats=tuple(sorted(names.decode(formats))),
            importers=tuple(sorted(names.decode(importers))),
            training=bool(training),
        )
        for episode, first, last, count, head_hash, formats, importers, training in rows
    ]


# -- verify ----------------------------------------------------------------------------------------


class _Break(NamedTuple):
    chain: str
    position: int | None
    problem: str


def verify_sources(connection: sqlite3.Connection) -> tuple[int, int, list[_Break]]:
    """Re-check every source's chain and its acknowledged head, in one read transaction.

    Returns the number of chains and records checked and each problem found, by source and
    position (a tampered row is reported, never raised).
    """
    breaks: list[_Break] = []
    total = 0
    connection.execute("BEGIN")
    try:
        heads = {
            str(row[0]): (row[1], row[2])
            for row in connection.execute("SELECT id, head_position, head_hash FROM sources")
        }
        chains = sorted(
            {*heads, *(str(row[0]) for row in connection.execute(
                "SELECT DISTINCT source FROM source_records"
            ))}
        )  # fmt: skip
        for source in chains:
            total += _verify_source(connection, source, heads.get(source), breaks)
    finally:
        connection.execute("COMMIT")
    return len(chains), total, breaks


def _verify_source(
    connection: sqlite3.Connection,
    source: str,
    head: tuple[object, object] | None,
    breaks: list[_Break],
) -> int:
    previous: SourceRow | None = None
    count = 0
    cursor = connection.execute(
        f"SELECT {_COLUMNS} FROM source_records WHERE source = ? ORDER BY position", (source,)
    )
    while page := cursor.fetchmany(2000):
        for raw in page:
            count += 1
            row = SourceRow(*raw)
            if not _typed(row):
                breaks.append(_Break(source, None, f"a record holds a wrong SQL type: {raw!r}"))
                previous = None
                continue
            expected = 0 if previous is None else previous.position + 1
            if row.position != expected:
                breaks.append(
                    _Break(source, expected, f"position(s) {_span(expected, row.position - 1)}"
                           f" missing before position {row.position}")
                )  # fmt: skip
            found = chain_problem(previous if row.position == expected else None, row)
            if found is not None:
                breaks.append(_Break(source, row.position, found[1]))
            previous = row
    last = previous.position if previous is not None else -1
    if head is None:
        breaks.append(_Break(source, None, "records exist but the sources index has no entry"))
    elif head[0] != last or (previous is not None and head[1] != previous.hash):
        breaks.append(
            _Break(source, last if last >= 0 else None,
                   f"the chain ends at position {last} (hash {previous.hash if previous else None})"
                   f" but the acknowledged head is position {head[0]} (hash {head[1]})")
        )  # fmt: skip
    return count


def _typed(row: SourceRow) -> bool:
    return (
        type(row.position) is int
        and type(row.schema_version) is int
        and isinstance(row.payload, bytes)
        and all(isinstance(value, str) for value in (row.source, row.episode, row.kind, row.at))
        and all(isinstance(value, str) for value in (row.hash,))
        and (row.prev is None or isinstance(row.prev, str))
        and (row.turn is None or type(row.turn) is int)
        and (row.participant is None or isinstance(row.participant, str))
    )
