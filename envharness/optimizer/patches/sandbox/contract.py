"""The seam between an executable harness and whatever runs its code: the :class:`Sandbox`.

A sandbox runs a :class:`HookProgram` (the code hooks of one patch, already through the AST
policy) for one hook call and returns a :class:`HookOutcome` of plain JSON; it raises
``PatchFailure`` when the patch's code failed and ``SandboxInfrastructureError`` when it could
not run the call at all. Two exist: ``LocalSandbox`` (in-process, fast, cannot stop CPU or
memory spent inside one C call) and ``SubprocessSandbox`` (a worker process under resource
limits; the default for untrusted patches). Both derive from :class:`SandboxBase`, which holds
what they share: the limits, ``async with``, and :meth:`~SandboxBase.run` handing each call on
as one :class:`HookCall`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import msgspec

from envharness.errors import ConfigurationError
from envharness.hooks import NOTEBOOK_LIMIT_BYTES, HookName
from envharness.optimizer.patches.errors import (
    FailureKind,
    PatchFailure,
    SandboxInfrastructureError,
)
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.sandbox import _hookrt

__all__ = ["HookCall", "HookOutcome", "HookProgram", "Sandbox", "SandboxBase", "SandboxLimits"]

_PATCH_KINDS: frozenset[str] = frozenset(
    {"exception", "timeout", "lines", "cpu", "memory", "recursion", "result", "notebook", "crash"}
)


class SandboxLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What one hook call may spend (all code hooks of that name together).

    ``timeout_s``: wall-clock seconds; ``max_lines``: lines of hook code executed;
    ``notebook_bytes``: the notebook's size as JSON; ``result_bytes``: the returned effect's.
    """

    timeout_s: float = 1.0
    max_lines: int = 100_000
    notebook_bytes: int = NOTEBOOK_LIMIT_BYTES
    result_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ConfigurationError(f"SandboxLimits.timeout_s must be > 0, not {self.timeout_s}")
        for name in ("max_lines", "notebook_bytes", "result_bytes"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"SandboxLimits.{name} must be at least 1")

    def runtime(self) -> _hookrt.Limits:
        return _hookrt.Limits(
            timeout_s=self.timeout_s,
            max_lines=self.max_lines,
            notebook_bytes=self.notebook_bytes,
            result_bytes=self.result_bytes,
        )


@dataclass(frozen=True, slots=True)
class HookProgram:
    """A patch's code, as a sandbox loads it: ``digest`` names it (a worker compiles it once)."""

    digest: str
    hooks: tuple[tuple[HookName, str], ...]

    @classmethod
    def from_patch(cls, patch: HarnessPatch) -> HookProgram:
        return cls(patch.digest(), tuple((hook.hook, hook.code) for hook in patch.hooks))


@dataclass(frozen=True, slots=True)
class HookCall:
    """One call a sandbox is asked to run: every code hook named ``hook`` of ``program``, on
    ``ctx`` (JSON of a ``HookContext``) and a copy of ``notebook``."""

    program: HookProgram
    hook: HookName
    ctx: Mapping[str, Any]
    notebook: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """One successful call: the effect's JSON (or ``None``), the notebook as the hooks left it,
    the lines of hook code run and the call's wall-clock seconds."""

    effect: dict[str, Any] | None
    notebook: dict[str, Any]
    lines: int
    seconds: float


@runtime_checkable
class Sandbox(Protocol):
    """Runs hook code for :class:`~envharness.optimizer.patches.executable.ExecutableHarness`."""

    @property
    def name(self) -> str:
        """``local`` or ``subprocess`` (recorded with the optimizer's configuration)."""
        ...

    @property
    def limits(self) -> SandboxLimits: ...

    async def run(
        self,
        program: HookProgram,
        hook: HookName,
        ctx: Mapping[str, Any],
        notebook: Mapping[str, Any],
    ) -> HookOutcome:
        """Run every code hook named ``hook`` on ``ctx`` (JSON of a ``HookContext``) and a copy
        of ``notebook``; raises ``PatchFailure`` or ``SandboxInfrastructureError``."""
        ...


class SandboxBase(ABC):
    """What :class:`~envharness.optimizer.patches.sandbox.LocalSandbox` and
    :class:`~envharness.optimizer.patches.sandbox.SubprocessSandbox` share: their limits,
    ``async with`` (opening is theirs to do; leaving calls :meth:`_close`), and :meth:`run`,
    which hands each call to :meth:`_call` as one :class:`HookCall`."""

    def __init__(self, limits: SandboxLimits | None) -> None:
        self._limits = limits or SandboxLimits()

    @property
    def limits(self) -> SandboxLimits:
        return self._limits

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._close(exc)

    async def _close(self, exc: BaseException | None) -> None:
        """Release what the sandbox holds (``exc``: the error that ends its block, if any)."""
        return None

    async def run(
        self,
        program: HookProgram,
        hook: HookName,
        ctx: Mapping[str, Any],
        notebook: Mapping[str, Any],
    ) -> HookOutcome:
        """See :meth:`Sandbox.run`."""
        return await self._call(HookCall(program, hook, ctx, notebook))

    @abstractmethod
    async def _call(self, call: HookCall) -> HookOutcome:
        """Run ``call``; raises ``PatchFailure`` or ``SandboxInfrastructureError``."""


def failure(hook: str, kind: str, message: str) -> PatchFailure | SandboxInfrastructureError:
    """The error for a failure the runtime reported as ``kind``."""
    if kind in _PATCH_KINDS:
        patch_kind: FailureKind = kind  # type: ignore[assignment]
        return PatchFailure(hook, message, kind=patch_kind)
    return SandboxInfrastructureError(f"{kind}: {message}", hook=hook)
