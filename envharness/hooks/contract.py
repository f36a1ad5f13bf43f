"""The seam between the runtime and whatever implements hooks.

The runtime holds one :class:`HarnessHooks` per session and calls :meth:`HarnessHooks.call`;
it never runs hook code itself. Two implementations exist: :class:`Hooks`, plain Python
callables for people who write their own hooks (trusted code, run in-process), and the
optimizer's ``ExecutableHarness``, which runs untrusted patch code in a sandbox. Whatever goes
wrong inside a call is raised as :class:`HookFailure`; the runtime records it and carries on as
if the hook had returned nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from envharness.errors import ConfigurationError, EnvharnessError
from envharness.hooks.context import HOOK_NAMES, HookContext, HookName
from envharness.hooks.effects import Effect, effect_from_json

__all__ = ["HarnessHooks", "HookFailure", "HookFunction", "Hooks"]

HookFunction = Callable[[HookContext, dict[str, Any]], Any]
"""``hook(ctx, nb)``: returns an effect, its JSON form, or ``None``; may be async."""


class HookFailure(EnvharnessError):
    """A hook raised, overran its budget or returned something that is not an effect."""

    def __init__(self, hook: str, problem: str) -> None:
        super().__init__(f"hook {hook} failed: {problem}")
        self.hook = hook
        self.problem = problem


@runtime_checkable
class HarnessHooks(Protocol):
    """Up to four hooks around a participant's frozen policy, under one version.

    ``version`` is recorded in each session's frozen configuration (``harness_version``), so the
    evidence of every run says which hooks ran. ``call`` returns the effect (or ``None``) and
    the notebook as the hook left it; it raises :class:`HookFailure` for any failure.

    The runtime hands ``call`` a fresh copy of the notebook every time (an implementation may
    change it in place), runs it under a per-call time budget (``hook_budget``), and checks
    the effect and the notebook that come back; anything wrong is recorded and treated as no
    intervention. It calls only the hooks named in ``defined``.
    """

    @property
    def version(self) -> str: ...

    @property
    def defined(self) -> frozenset[HookName]:
        """The hooks that exist; the runtime skips building a context for the others."""
        ...

    async def call(
        self, hook: HookName, ctx: HookContext, notebook: dict[str, Any]
    ) -> tuple[Effect | None, dict[str, Any]]: ...


class Hooks:
    """Hooks written as ordinary Python functions (trusted code: no sandbox).

    ``Hooks("support-desk-v1", on_before_action=check_order)``. Each function gets the frozen
    context and a private copy of the notebook it may change, and returns an effect, its JSON
    form or ``None``. A plain function runs on the event loop (like environment code: keep it
    quick — the budget cannot interrupt it, only refuse its late answer); an ``async`` one can
    be cut off at its budget.
    """

    def __init__(self, version: str, **hooks: HookFunction | None) -> None:
        if not isinstance(version, str) or not version:
            raise ConfigurationError(f"Hooks needs a non-empty version string, not {version!r}")
        unknown = sorted(set(hooks) - set(HOOK_NAMES))
        if unknown:
            raise ConfigurationError(
                f"unknown hook(s) {', '.join(unknown)}; hooks are {', '.join(HOOK_NAMES)}"
            )
        self._version = version
        self._hooks: dict[str, HookFunction] = {k: f for k, f in hooks.items() if f is not None}
        for name, function in self._hooks.items():
            if not callable(function):
                raise ConfigurationError(f"hook {name} must be callable, not {function!r}")

    @property
    def version(self) -> str:
        return self._version

    @property
    def defined(self) -> frozenset[HookName]:
        return frozenset(name for name in HOOK_NAMES if name in self._hooks)

    async def call(
        self, hook: HookName, ctx: HookContext, notebook: dict[str, Any]
    ) -> tuple[Effect | None, dict[str, Any]]:
        function = self._hooks.get(hook)
        if function is None:
            return None, notebook
        try:
            value = function(ctx, notebook)
            if inspect.isawaitable(value):
                value = await _awaited(value)
            return effect_from_json(value), notebook
        except Exception as exc:
            raise HookFailure(hook, f"{type(exc).__name__}: {exc}") from exc


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
