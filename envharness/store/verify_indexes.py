"""``verify``'s check of the records table against its two indexes.

The chain walk of :mod:`envharness.store.verify` goes through the (session, seq) index, and
SQLite takes the columns an index holds from the index, not the row; reads filtered by kind
(``show --kind``, the API's ``?kind=``, resume, crash recovery) go through the records-by-kind
index. SQLite's ``quick_check`` compares neither with the table, so a damaged entry in either,
or a row whose key columns no longer match its entries, is found here: the three are compared
by order-free sums of their entries (kind, seq, pos), and listed only when the sums differ.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable

__all__ = ["EntrySum", "check_indexes", "why"]

_SHOWN = 10
"""How many entries a break that lists index entries names before it counts the rest."""
_REINDEX = (
    "an index holds no evidence, so rebuild the records' indexes while nothing writes to the"
    " store: `sqlite3 evidence.sqlite3 'REINDEX records'`"
)


class EntrySum:
    """An order-free digest of index entries (kind, seq, pos): equal sets, equal sums."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0

    def add(self, kind: object, seq: object, pos: object) -> None:
        self.count += 1
        self.total = (self.total + hash((kind, seq, pos))) & 0xFFFF_FFFF_FFFF_FFFF

    def value(self) -> tuple[int, int]:
        return self.count, self.total


def why(exc: BaseException) -> str:
    """What SQLite said; a message it could not even spell in UTF-8 is quoted as bytes."""
    if isinstance(exc, UnicodeDecodeError):
        return f"SQLite's message holds bytes that are not UTF-8: {exc.object!r}"
    return str(exc)


def check_indexes(
    connection: sqlite3.Connection,
    where: str,
    arguments: tuple[object, ...],
    in_table: EntrySum | None,
    walked: EntrySum,
    problem: Callable[[int | None, str], None],
) -> None:
    """The records table and both its indexes must hold the same entries (kind, seq, pos) for
    the records of one chain that ``where`` (with ``arguments``) selects: ``in_table`` sums
    the table's own (``None``: not read whole), ``walked`` those the chain walk met through
    the (session, seq) index. Compared by order-free sums first; only when they differ are
    the entries listed, and each disagreement, reported through ``problem``, is blamed on the
    one of the three that differs from the other two."""
    by_kind = f"SELECT kind, seq, pos FROM records INDEXED BY records_by_kind WHERE {where}"
    try:
        indexed = EntrySum()
        for kind, seq, pos in connection.execute(by_kind, arguments):
            indexed.add(kind, seq, pos)
        sums = {indexed.value(), walked.value()}
        if in_table is not None:
            sums.add(in_table.value())
        if len(sums) == 1:
            return
        queries = {
            "table": f"SELECT kind, seq, pos FROM records NOT INDEXED WHERE {where}",
            "(session, seq)": "SELECT kind, seq, pos FROM records"
            f" INDEXED BY sqlite_autoindex_records_1 WHERE {where}",
            "records-by-kind": by_kind,
        }
        held = {
            name: Counter(connection.execute(query, arguments).fetchall())
            for name, query in queries.items()
        }
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        problem(None, f"the indexes of these records cannot be read: {why(exc)}; {_REINDEX}")
        return
    for name, odd in _odd_ones_out(held).items():
        missing, extra = odd
        seqs = [seq for _, seq, _ in (*missing, *extra) if type(seq) is int]
        if name == "table":
            said = [f"both indexes list {_entries(missing)}, which no row holds"] if missing else []
            said += [f"rows hold {_entries(extra)}, which neither index lists"] if extra else []
            problem(
                min(seqs, default=None),
                f"the records table disagrees with both its indexes: {'; '.join(said)} — a"
                " row's session_id, seq or kind column is damaged",
            )
        else:
            said = [f"it lacks {_entries(missing)}"] if missing else []
            said += [f"it lists {_entries(extra)}, which no record is"] if extra else []
            problem(
                min(seqs, default=None),
                f"the {name} index disagrees with the records: {'; '.join(said)} — reads"
                f" through it miss or misplace these records; {_REINDEX}",
            )


_Entry = tuple[object, object, object]


def _odd_ones_out(
    held: dict[str, Counter[_Entry]],
) -> dict[str, tuple[list[_Entry], list[_Entry]]]:
    """For each of the three, the entries it lacks and those it alone has, where the other
    two agree: ``{name: (missing, extra)}``, only names with something to say."""
    odd: dict[str, tuple[list[_Entry], list[_Entry]]] = {}
    everything = set().union(*held.values())
    for name, entries in held.items():
        others = [other for key, other in held.items() if key != name]
        missing = [e for e in everything if e not in entries and all(e in o for o in others)]
        extra = [e for e in everything if e in entries and not any(e in o for o in others)]
        if missing or extra:
            odd[name] = (sorted(missing, key=_by_seq), sorted(extra, key=_by_seq))
    return odd


def _by_seq(entry: tuple[object, object, object]) -> tuple[bool, str]:
    seq = entry[1]
    return (type(seq) is not int, f"{seq:020d}" if type(seq) is int else str(seq))


def _entries(entries: Iterable[tuple[object, object, object]]) -> str:
    listed = list(entries)
    shown = ", ".join(f"seq {seq} ({kind})" for kind, seq, _ in listed[:_SHOWN])
    more = len(listed) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")
