"""Shared by the patch, sandbox, executable and red-team tests: small patches and contexts."""

from __future__ import annotations

import textwrap
from typing import Any

import msgspec

from envharness.hooks import HookContext, HookName
from envharness.optimizer import CodeHook, HarnessPatch
from envharness.optimizer.patches.sandbox import HookProgram


def hook_code(body: str, hook: HookName = "on_before_action") -> str:
    """``def <hook>(ctx, nb):`` with ``body`` (dedented) as its body."""
    return f"def {hook}(ctx, nb):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")


def patch_of(*bodies: str, hook: HookName = "on_before_action") -> HarnessPatch:
    return HarnessPatch(hooks=tuple(CodeHook(hook=hook, code=hook_code(b, hook)) for b in bodies))


def program_of(*bodies: str, hook: HookName = "on_before_action") -> HookProgram:
    return HookProgram.from_patch(patch_of(*bodies, hook=hook))


def context(hook: HookName = "on_before_action", **fields: Any) -> HookContext:
    base: dict[str, Any] = {
        "session_id": "s1",
        "participant": "alice",
        "role": "player",
        "step": 1,
        "state": {"looked_up": False},
        "predicates": {"looked_up": False},
        "action": {"tool": "issue_refund", "order": "A1"},
    }
    base.update(fields)
    return HookContext(hook=hook, **base)


def ctx_json(hook: HookName = "on_before_action", **fields: Any) -> dict[str, Any]:
    value: dict[str, Any] = msgspec.to_builtins(context(hook, **fields))
    return value
