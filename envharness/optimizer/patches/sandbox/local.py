"""``LocalSandbox``: hook code in this process, in a worker thread, under the runtime's budgets.

Fast (no process per call, no serialisation) and good for patches that already passed
validation, for tests and for loading an accepted patch in production. Its limits are those the
runtime can enforce from Python: the line budget and the wall-clock deadline (checked on every
line by a per-thread trace function, so they work off the main thread and cannot be caught by
the hook), the arithmetic, ``+``, ``%``, ``sum``, ``range`` and size guards, the restricted builtins
and read-only helpers. A C call holds the GIL — the whole process — until it returns, so the one
that can run without bound on a tiny input, a backtracking regex, never runs in this process
when the runtime cannot bound its cost: it goes to a regex worker process
(:mod:`~envharness.optimizer.patches.sandbox.regex_workers`) that is killed at the call's
deadline. Values built up over many lines are bounded where they grow and measured before C
visits them, and an allocation budget counts what the guards see being built. What is left
(memory is accounting, not a kernel limit; no CPU or environment limits: docs/patches.md) is
why ``SubprocessSandbox`` is the sandbox for untrusted code.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread

from envharness.hooks import HookName
from envharness.optimizer.patches.errors import PatchFailure
from envharness.optimizer.patches.sandbox import _hookrt
from envharness.optimizer.patches.sandbox.contract import (
    HookCall,
    HookOutcome,
    HookProgram,
    SandboxBase,
    SandboxLimits,
    failure,
)
from envharness.optimizer.patches.sandbox.regex_workers import RegexWorkers

__all__ = ["ABANDON_GRACE_S", "LocalSandbox"]

ABANDON_GRACE_S = 1.0
"""Seconds past the timeout before a caller stops waiting for a thread stuck in C code."""
_CACHED_PROGRAMS = 64


class LocalSandbox(SandboxBase):
    """Runs hook code in-process. ``async with`` (or :meth:`close`) stops its regex workers,
    which start only when a hook runs a match whose cost the runtime cannot bound; a forgotten
    sandbox stops them when it is collected or the interpreter exits."""

    def __init__(
        self, limits: SandboxLimits | None = None, *, abandon_grace_s: float = ABANDON_GRACE_S
    ) -> None:
        super().__init__(limits)
        self._grace = abandon_grace_s
        self._programs: OrderedDict[str, _hookrt.Program] = OrderedDict()
        self._lock = threading.Lock()
        self._regex = RegexWorkers()
        self._finalizer = weakref.finalize(self, self._regex.close)

    @property
    def name(self) -> str:
        return "local"

    @property
    def regex_pids(self) -> tuple[int, ...]:
        """The running regex workers' process ids (for diagnosis)."""
        return self._regex.pids

    def close(self) -> None:
        """Kill the regex workers (a call still running a match fails); bounded."""
        self._finalizer()

    async def _close(self, exc: BaseException | None) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.close)

    async def _call(self, call: HookCall) -> HookOutcome:
        with anyio.move_on_after(self._limits.timeout_s + self._grace):
            return await anyio.to_thread.run_sync(self._run, call, abandon_on_cancel=True)
        raise PatchFailure(
            call.hook,
            f"ran past its {self._limits.timeout_s:g}s wall-clock timeout inside one call the "
            "line budget cannot interrupt (C code such as a sort of a huge list); LocalSandbox "
            "abandoned the thread, which runs on until that call returns — use "
            "SubprocessSandbox for untrusted patches",
            kind="timeout",
        )

    def run_sync(
        self,
        program: HookProgram,
        hook: HookName,
        ctx: Mapping[str, Any],
        notebook: Mapping[str, Any],
    ) -> HookOutcome:
        """The same call, blocking, in whatever thread calls it (the budgets are per thread)."""
        return self._run(HookCall(program, hook, ctx, notebook))

    def _run(self, call: HookCall) -> HookOutcome:
        started = time.perf_counter()
        try:
            compiled = self._compiled(call.program)
            effect, result, lines = _hookrt.run_call(
                compiled,
                call.hook,
                call.ctx,
                call.notebook,
                self._limits.runtime(),
                self._regex.run,
            )
        except _hookrt.HookError as exc:
            raise failure(call.hook, exc.kind, exc.message) from None
        return HookOutcome(effect, result, lines, time.perf_counter() - started)

    def _compiled(self, program: HookProgram) -> _hookrt.Program:
        with self._lock:
            found = self._programs.get(program.digest)
            if found is not None:
                self._programs.move_to_end(program.digest)
                return found
        compiled = _hookrt.compile_program(program.hooks)
        with self._lock:
            self._programs[program.digest] = compiled
            while len(self._programs) > _CACHED_PROGRAMS:
                self._programs.popitem(last=False)
        return compiled
