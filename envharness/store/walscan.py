"""The write-ahead log read frame by frame, as SQLite's recovery reads it.

Whatever was committed since the last checkpoint lives only in ``evidence.sqlite3-wal``. When a
store is opened, SQLite rebuilds its index of that log and stops at the first frame whose
checksum fails (https://www.sqlite.org/fileformat2.html#walformat): every commit after it is
dropped without a word. :func:`scan_wal` reads the log as that recovery does and, past the frame
where recovery would stop, looks for commit frames of the same log (its salts) whose own
checksum holds. Such a commit was written, whole, after the damaged frame: recovery would drop a
commit that was acknowledged. A torn tail — the frames of a commit that a crash interrupted,
never acknowledged — holds no complete commit frame past its break, and is not damage.

Only the ``-wal`` file is opened here, read-only: SQLite takes no POSIX lock on it (its WAL
locks live in the ``-shm`` file), so closing it drops none (:mod:`envharness.store.handles`).
What the scan means for a store — damage or not, with the acknowledged mark — is
:mod:`envharness.store.wal`'s to say.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from operator import mul
from pathlib import Path

from envharness.store.off_loop import refuse_event_loop

__all__ = ["WAL_SUFFIX", "WalScan", "scan_wal"]

WAL_SUFFIX = "-wal"

_HEADER = struct.Struct(">8I")
_FRAME = struct.Struct(">6I")
_HEADER_SIZE = _HEADER.size
_FRAME_HEADER = _FRAME.size
_MAGIC = 0x377F0682  # | 1: the checksums read big-endian words
_FORMAT = 3007000
_M32 = 0xFFFFFFFF
_CHUNK = 1 << 18
_CONFIRM_PAUSES = (0.005, 0.02, 0.08)

_Seed = tuple[int, int]


# -- the log as SQLite's recovery reads it ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WalScan:
    """What a write-ahead log holds, frame by frame (frames are counted from 1, as SQLite does).

    ``kept`` frames (``kept_commits`` commits) are what SQLite's recovery keeps; it stops at
    frame ``stop`` (``None`` when it reads to the end). ``lost_commits`` complete commits lie
    past that stop in the same log, through frame ``lost_through``: recovery would drop them.
    """

    path: Path
    size: int
    header: bytes
    page_size: int
    frames: int
    kept: int
    kept_commits: int
    stop: int | None
    header_damaged: bool = False
    lost_commits: int = 0
    lost_through: int = 0

    @property
    def certain(self) -> bool:
        """Damage whatever the mark says: two or more complete commits past the break. The
        second began only after the first was synced, so the first was acknowledged."""
        return self.lost_commits >= 2 and not self.header_damaged

    def describe(self) -> str:
        name = self.path.name
        if self.header_damaged:
            return (
                f"the header of its write-ahead log ({name}) is damaged, so SQLite would ignore "
                f"the whole log: {_count(self.lost_commits, 'complete commit')} "
                f"({_count(self.lost_through, 'frame')}) written there would be dropped"
            )
        return (
            f"its write-ahead log ({name}) is damaged at frame {self.stop} of {self.frames}: "
            f"SQLite's recovery would keep the {_count(self.kept, 'frame')} before it "
            f"({_count(self.kept_commits, 'commit')}) and drop "
            f"{_count(self.lost_commits, 'complete commit')} written after it "
            f"(through frame {self.lost_through})"
        )


def scan_wal(database: Path) -> WalScan | None:
    """The database's write-ahead log, scanned; ``None`` when it has none (or an empty one).

    A scan that finds commits past a break is repeated after a short pause, and counts only
    when the break stays where it was: a frame that another process is writing at that moment
    can read torn once, never twice at the same place. The pause blocks: like every opening
    step it runs in a worker thread, and an event loop is refused
    (:func:`~envharness.store.off_loop.refuse_event_loop`).
    """
    refuse_event_loop("scan_wal()")
    path = Path(f"{database}{WAL_SUFFIX}")
    previous: WalScan | None = None
    for pause in (*_CONFIRM_PAUSES, None):
        scan = _scan_once(path)
        if scan is None or not scan.lost_commits:
            return scan
        if previous is not None and (previous.header, previous.stop) == (scan.header, scan.stop):
            return scan
        previous = scan
        if pause is not None:
            time.sleep(pause)
    assert previous is not None
    return replace(previous, lost_commits=0, lost_through=0)  # never stable: writes in flight


def _scan_once(path: Path) -> WalScan | None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(descriptor).st_size
        if size == 0:
            return None
        header = os.pread(descriptor, _HEADER_SIZE, 0)
        geometry = _geometry(header)
        if geometry is None:
            return _scan_damaged_header(path, descriptor, size, header)
        return _scan_log(path, descriptor, size, header, *geometry)
    finally:
        os.close(descriptor)


def _geometry(header: bytes) -> tuple[int, bool] | None:
    """Page size and checksum byte order of a sound header; ``None`` for a damaged one."""
    if len(header) < _HEADER_SIZE:
        return None
    magic, version, page_size, _, _, _, check0, check1 = _HEADER.unpack(header)
    if magic & ~1 != _MAGIC or version != _FORMAT or not _valid_page_size(page_size):
        return None
    big_endian = bool(magic & 1)
    if _checksum(header[:24], (0, 0), big_endian) != (check0, check1):
        return None
    return page_size, big_endian


def _scan_log(
    path: Path, descriptor: int, size: int, header: bytes, page_size: int, big_endian: bool
) -> WalScan:
    salts = header[16:24]
    frame_size = page_size + _FRAME_HEADER
    frames = (size - _HEADER_SIZE) // frame_size
    kept = kept_commits = 0
    seed: _Seed = _HEADER.unpack(header)[6:8]
    stop: int | None = None
    stored = seed  # the checksum the previous frame carries, right or wrong
    lost_commits = lost_through = 0
    for index, frame in _frames(descriptor, frame_size, frames):
        number, commit, _, _, check0, check1 = _FRAME.unpack_from(frame)
        same_log = frame[8:16] == salts
        if stop is None:
            if same_log and number and _frame_checksum(frame, seed, big_endian) == (check0, check1):
                seed = stored = (check0, check1)
                if commit:
                    kept, kept_commits = index + 1, kept_commits + 1
                continue
            stop = index + 1
        # Past the stop: a commit of this log whose own checksum holds was written after it.
        if same_log and commit and _frame_checksum(frame, stored, big_endian) == (check0, check1):
            lost_commits += 1
            lost_through = index + 1
        stored = (check0, check1)
    return WalScan(
        path=path,
        size=size,
        header=header,
        page_size=page_size,
        frames=frames,
        kept=kept,
        kept_commits=kept_commits,
        stop=stop,
        lost_commits=lost_commits,
        lost_through=lost_through,
    )


def _scan_damaged_header(path: Path, descriptor: int, size: int, header: bytes) -> WalScan:
    """A log whose header SQLite refuses (it then ignores every frame): count the complete
    commits it holds anyway, trying each page size and byte order, since the header's may be
    the damaged field. The salts are the first frame's (its header sits at the same offset
    whatever the page size)."""
    best = WalScan(
        path=path,
        size=size,
        header=header,
        page_size=0,
        frames=0,
        kept=0,
        kept_commits=0,
        stop=1,
        header_damaged=True,
    )
    first = os.pread(descriptor, _FRAME_HEADER, _HEADER_SIZE)
    if len(first) < _FRAME_HEADER:
        return best
    salts = first[8:16]
    stated = _HEADER.unpack(header)[2] if len(header) == _HEADER_SIZE else 0
    # The header's own page size first.
    sizes = sorted((1 << shift for shift in range(9, 17)), key=lambda page: page != stated)
    for page_size in sizes:
        frame_size = page_size + _FRAME_HEADER
        frames = (size - _HEADER_SIZE) // frame_size
        for big_endian in (sys.byteorder == "big", sys.byteorder != "big"):
            commits = through = 0
            stored: _Seed | None = None
            for index, frame in _frames(descriptor, frame_size, frames):
                _, commit, _, _, check0, check1 = _FRAME.unpack_from(frame)
                if (
                    stored is not None
                    and commit
                    and frame[8:16] == salts
                    and _frame_checksum(frame, stored, big_endian) == (check0, check1)
                ):
                    commits += 1
                    through = index + 1
                stored = (check0, check1)
            if commits > best.lost_commits:
                best = replace(
                    best,
                    page_size=page_size,
                    frames=frames,
                    lost_commits=commits,
                    lost_through=through,
                )
        if best.lost_commits:
            return best
    return best


def _frames(descriptor: int, frame_size: int, frames: int) -> Iterator[tuple[int, memoryview]]:
    """The first ``frames`` frames, numbered from 0, read a chunk at a time."""
    per_chunk = max(1, _CHUNK // frame_size)
    index = 0
    while index < frames:
        count = min(per_chunk, frames - index)
        chunk = os.pread(descriptor, count * frame_size, _HEADER_SIZE + index * frame_size)
        view = memoryview(chunk)
        for offset in range(0, len(chunk) - frame_size + 1, frame_size):
            yield index, view[offset : offset + frame_size]
            index += 1
        if len(chunk) < count * frame_size:
            return  # the file shrank while being read (a checkpoint truncated it)


def _valid_page_size(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


# -- SQLite's WAL checksum -------------------------------------------------------------------------
#
# SQLite sums 32-bit words pairwise: s0 += x[i] + s1; s1 += x[i+1] + s0 (mod 2**32). That is a
# linear recurrence, so each word's share is a fixed weight: counted from the end (r = 0 for the
# last word), word r adds Fibonacci(r) to s0 and Fibonacci(r + 1) to s1, and the seed enters
# through the n-th power of [[1, 1], [1, 2]]. One weighted sum in C (sum(map(mul, ...))), both
# halves packed 80 bits apart, is ~40% faster than the loop, and gives the same numbers.


@cache
def _weights(words: int) -> tuple[tuple[int, ...], int, int, int]:
    fibonacci = [0, 1]
    while len(fibonacci) < words + 2:
        fibonacci.append((fibonacci[-1] + fibonacci[-2]) & _M32)
    packed = tuple(fibonacci[words - 1 - j] | fibonacci[words - j] << 80 for j in range(words))
    n = words // 2
    return packed, fibonacci[2 * n - 1], fibonacci[2 * n], fibonacci[2 * n + 1]


def _checksum(data: bytes | memoryview, seed: _Seed, big_endian: bool) -> _Seed:
    words = array("I")
    words.frombytes(data)  # array("I", view) would take a memoryview's bytes as the items
    return _sum_words(words, seed, big_endian)


def _frame_checksum(frame: memoryview, seed: _Seed, big_endian: bool) -> _Seed:
    """A frame's checksum covers the first 8 bytes of its header and its page."""
    words = array("I")
    words.frombytes(frame[:8])
    words.frombytes(frame[_FRAME_HEADER:])
    return _sum_words(words, seed, big_endian)


def _sum_words(words: array[int], seed: _Seed, big_endian: bool) -> _Seed:
    if big_endian != (sys.byteorder == "big"):
        words.byteswap()
    packed, a, b, c = _weights(len(words))
    total = sum(map(mul, packed, words))
    s0, s1 = seed
    return (total + a * s0 + b * s1) & _M32, ((total >> 80) + b * s0 + c * s1) & _M32


assert array("I").itemsize == 4, "the WAL checksum reads 32-bit words"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
