"""Who runs a session, and whether that process still exists.

A segment records its runner (host, pid, and the process's start time). After a crash, the
next process to open the store can tell at once — no lease to wait out — that a runner on this
host is gone: its pid is free, or belongs to a process that started at another time (a reused
pid). A runner on another host, or one whose start time cannot be read, is never presumed dead:
a live owner is never stolen from.

Readers use the same test (:func:`shown_status`): a chain still marked running whose runner is
gone is shown ``interrupted`` — what the next writer to open the store will record — without
writing anything.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

import msgspec

from envharness.records import RunnerRef

__all__ = ["ENDED", "interrupted_reason", "is_gone", "shown_status", "this_process"]

ENDED = frozenset({"completed", "failed", "stopped", "interrupted"})
"""Statuses a chain keeps whatever becomes of its runner."""

_runner_decoder = msgspec.json.Decoder(RunnerRef)

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def this_process() -> RunnerRef:
    """This process as a runner (per pid: a forked child is a runner of its own)."""
    return _runner(os.getpid())


@functools.cache
def _runner(pid: int) -> RunnerRef:
    return RunnerRef(host=socket.gethostname(), pid=pid, started=_started(pid))


def is_gone(runner: RunnerRef) -> bool:
    """``True`` only when the runner certainly no longer runs."""
    if runner.host != socket.gethostname():
        return False
    if runner.pid == os.getpid():
        return runner.started != this_process().started
    try:
        os.kill(runner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    if runner.started is None:
        return False
    now = _started(runner.pid)
    return now is not None and now != runner.started


def interrupted_reason(runner: RunnerRef) -> str:
    return f"its runner (pid {runner.pid} on {runner.host}) is gone"


def shown_status(
    status: str, reason: str | None, owner: object, gone: dict[str, bool] | None = None
) -> tuple[str, str | None]:
    """The status and reason to show for a chain whose index says ``status`` and whose
    recorded runner is ``owner`` (its JSON, or ``None``): ``interrupted`` when it has not
    ended and that runner is certainly gone, as crash recovery will record it. ``gone`` caches
    the answer per runner across the rows of one listing."""
    if not isinstance(owner, str) or status in ENDED:
        return status, reason
    if gone is None:
        gone = {}
    if owner not in gone:
        try:
            gone[owner] = is_gone(_runner_decoder.decode(owner))
        except msgspec.DecodeError:
            gone[owner] = False  # an owner that does not decode is verify's to report
    if not gone[owner]:
        return status, reason
    return "interrupted", interrupted_reason(_runner_decoder.decode(owner))


def _started(pid: int) -> str | None:
    """Boot id and start time in clock ticks (Linux); ``None`` where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return f"{boot}:{fields[19]}"
