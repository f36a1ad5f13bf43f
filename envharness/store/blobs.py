"""State blobs: how each is kept in the ``blobs`` table (compressed with zlib when that is
smaller), and read back.

A blob's digest is the sha256 of its canonical bytes, uncompressed, and stays so: records cite
that digest, exports and trajectories carry it, and it must not depend on how a store keeps
the bytes. Each row says how its ``data`` is kept (``codec``), so rows kept raw by an older
schema, or by a writer that inserts raw bytes (``codec`` defaults to :data:`RAW`), sit beside
compressed ones and read the same.

Why compress at all: an adapter that replays (``envharness.adapters.replay``) stores its seed
and every move so far at every turn, so its states grow with the episode and their bytes in
all as its square; they are also highly repetitive. Measured on Taxi-v4 (``tools/bench/
storage.py``), zlib keeps a 1,000-turn episode's states in ~39 B per event instead of
~1,280 B. Level 6 (zlib's default) is as small as level 9 and 10-25% smaller than level 1 on
long states, for about the same time. The window is sized to the blob (a window larger than
the input finds nothing more): setting up zlib's full 32 KiB window and its hash tables is
most of the cost of compressing a blob of a few hundred bytes; so is zeroing zlib's hash
table, which is sized to the window too. Blobs under :data:`SMALLEST_PACKED` bytes are kept raw
without trying, and any blob that compression would not make smaller is kept raw.

Every reader goes through :func:`unpack` (the store's readers through :func:`read_blob`,
``verify`` directly): it decompresses, then checks the bytes against the digest,
and names what is wrong instead of letting a zlib error out.
"""

from __future__ import annotations

import hashlib
import sqlite3
import zlib

from envharness.errors import NotFoundError, StoreError

__all__ = [
    "LEVEL",
    "RAW",
    "SMALLEST_PACKED",
    "ZLIB",
    "SELECT_BLOB",
    "BlobDamage",
    "add_sql_functions",
    "pack",
    "read_blob",
    "unpack",
]

RAW = 0
"""``codec`` of a blob kept as its canonical bytes."""
ZLIB = 1
"""``codec`` of a blob kept as a zlib stream (RFC 1950) of its canonical bytes."""
LEVEL = 6
SMALLEST_PACKED = 128
"""Blobs shorter than this are kept raw without trying to compress them: zlib adds 6 bytes of
its own, such a state shrinks by 0-25 bytes when it shrinks at all (measured on small game
states), and each try costs the journal's thread two hand-backs of the GIL to the event loop
(``compress`` and ``flush`` release it), which the loop's thread pays for too."""

_SQL_TYPES = {str: "text", int: "an integer", float: "a real number", type(None): "null"}
_LARGEST_WINDOW_BITS = 15
_SMALLEST_WINDOW_BITS = 9
_HASH_BITS_OVER_MEMORY = 7
"""zlib's hash table has ``2 ** (memLevel + 7)`` slots."""


class BlobDamage(Exception):
    """A stored blob that cannot give back the bytes its digest names; the message says why.

    Never leaves the store: readers turn it into a ``StoreError``, ``verify`` into a problem
    reported against the records that cite the blob."""


def pack(data: bytes) -> tuple[int, bytes]:
    """``(codec, stored)`` for a blob's canonical bytes: compressed when that is smaller."""
    if len(data) < SMALLEST_PACKED:
        return RAW, data
    window = min(_LARGEST_WINDOW_BITS, max(_SMALLEST_WINDOW_BITS, len(data).bit_length()))
    # zlib's hash table (2 ** (memLevel + 7) slots) sized to the window, not to its default
    # 32k slots: setting those up cost more than the rest of compressing a small state (the
    # journal packs every state of every turn), and a table larger than the window finds no
    # more matches (the same sizes, measured from 100 B to 170 KB; from 32 KB up, the default).
    memory = max(1, window - _HASH_BITS_OVER_MEMORY)
    compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, window, memory)
    stored = compressor.compress(data) + compressor.flush()
    return (ZLIB, stored) if len(stored) < len(data) else (RAW, data)


def unpack(digest: str, codec: object, stored: object) -> bytes:
    """The canonical bytes of the blob ``digest`` from its row; raises :class:`BlobDamage`
    when they cannot be had or are not the bytes the digest names."""
    if not isinstance(stored, bytes):
        kind = _SQL_TYPES.get(type(stored), type(stored).__name__)
        raise BlobDamage(f"state blob {digest} holds {kind}, not bytes")
    if codec == RAW:
        data = stored
    elif codec == ZLIB:
        try:
            data = zlib.decompress(stored)
        except zlib.error as exc:
            raise BlobDamage(f"state blob {digest} does not decompress ({exc})") from None
    else:
        raise BlobDamage(
            f"state blob {digest} is kept with codec {codec!r}, which this envharness does "
            f"not know ({RAW}: raw, {ZLIB}: zlib)"
        )
    if hashlib.sha256(data).hexdigest() != digest:
        raise BlobDamage(f"state blob {digest} was modified")
    return data


def add_sql_functions(connection: sqlite3.Connection) -> None:
    """Give ``connection`` ``envharness_zlib(data)``, which the migration to schema 10 calls:
    the blob as kept compressed, or NULL when it is kept raw (see :func:`pack`)."""
    connection.create_function("envharness_zlib", 1, _zlib_or_null, deterministic=True)


def _zlib_or_null(data: object) -> bytes | None:
    if not isinstance(data, bytes):
        return None  # copied as it is, for verify to report
    codec, stored = pack(data)
    return stored if codec == ZLIB else None


SELECT_BLOB = "SELECT codec, data FROM blobs WHERE digest = ?"


def read_blob(connection: sqlite3.Connection, digest: str) -> bytes:
    """The canonical bytes of the blob ``digest``: :class:`NotFoundError` when the store has
    none, :class:`StoreError` naming the damage when its row cannot give them back."""
    found = connection.execute(SELECT_BLOB, (digest,)).fetchone()
    if found is None:
        raise NotFoundError(f"no state blob {digest} in the store")
    try:
        return unpack(digest, *found)
    except BlobDamage as exc:
        raise StoreError(
            f"{exc}: the store is corrupt there; run `envharness verify` to see what else is"
        ) from None
