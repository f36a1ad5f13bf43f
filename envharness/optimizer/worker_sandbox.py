"""A candidate's sandbox when its rerun's sessions run in an executor's workers (issue 14).

A candidate's hooks are an :class:`~envharness.optimizer.patches.executable.ExecutableHarness`
bound to a sandbox the optimizer opened in the driver, whose processes cannot travel. The patch
is data and travels as it is; the sandbox travels as what it is — its kind and its limits — and
each worker opens a sandbox of that kind for the experiment and runs the hooks there. In the
driver, :class:`WorkerSandbox` is the driver's own sandbox.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, final

from envharness.hooks import HookName
from envharness.optimizer.patches.sandbox import (
    HookOutcome,
    HookProgram,
    LocalSandbox,
    Sandbox,
    SandboxLimits,
    SubprocessSandbox,
)

__all__ = ["WorkerSandbox", "opened_sandbox"]


@final
class WorkerSandbox:
    """``sandbox`` here; in a worker, a fresh sandbox of the same kind and limits."""

    __slots__ = ("_sandbox",)

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    @property
    def name(self) -> str:
        return self._sandbox.name

    @property
    def limits(self) -> SandboxLimits:
        return self._sandbox.limits

    async def run(
        self,
        program: HookProgram,
        hook: HookName,
        ctx: Mapping[str, Any],
        notebook: Mapping[str, Any],
    ) -> HookOutcome:
        return await self._sandbox.run(program, hook, ctx, notebook)

    def __reopened_in_worker__(self) -> Callable[[], AbstractAsyncContextManager[Sandbox]]:
        """How a worker re-makes it (see :mod:`envharness.runtime.executors.recipe`)."""
        return functools.partial(opened_sandbox, self.name, self.limits)


@asynccontextmanager
async def opened_sandbox(kind: str, limits: SandboxLimits) -> AsyncIterator[Sandbox]:
    """A fresh sandbox of ``kind`` (``"local"`` or ``"subprocess"``), open for the block."""
    made = LocalSandbox(limits) if kind == "local" else SubprocessSandbox(limits)
    async with made:
        yield made
