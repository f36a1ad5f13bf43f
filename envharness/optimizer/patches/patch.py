"""A harness patch: hook functions written as code, and the JSON an engineer writes them in.

An engineer's patch is a list of operations; today there is one, ``add_code_hook``::

    [{"op": "add_code_hook", "hook": "on_before_action",
      "code": "def on_before_action(ctx, nb):\\n    ...", "description": "why"}]

(``{"ops": [...]}`` and a single operation object are accepted too; ``to_dict`` writes the
``{"ops": [...]}`` form, which ``from_dict`` reads back.) A :class:`HarnessPatch` is the parsed,
immutable result: its code hooks in order. Accepted patches stack across iterations
(:meth:`HarnessPatch.stacked`): when several code hooks share a name, all of them run, in order,
on the same context; the notebook threads through them (each sees what the previous one wrote);
the first one that intervenes (an effect other than ``None`` or ``allow()``) decides the effect.
``docs/patches.md`` is the reference.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from envharness.hooks import HOOK_NAMES, HookName
from envharness.optimizer.patches.errors import PatchSchemaError

__all__ = [
    "MAX_CODE_CHARS",
    "MAX_CODE_HOOKS",
    "OPERATIONS",
    "CodeHook",
    "HarnessPatch",
]

MAX_CODE_CHARS = 20_000
"""The longest source one code hook may have; a hook is a small function, not a program."""
MAX_CODE_HOOKS = 16
"""The most code hooks one engineer answer may add (stacked patches may hold more)."""
OPERATIONS = ("add_code_hook",)
"""The patch operations this version understands."""

_OP_KEYS = frozenset({"op", "hook", "code", "description"})


class CodeHook(msgspec.Struct, frozen=True, kw_only=True):
    """The source of one function ``def <hook>(ctx, nb): ...`` and why it was written."""

    hook: HookName
    code: str
    description: str = ""


class HarnessPatch(msgspec.Struct, frozen=True, kw_only=True):
    """Code hooks, in the order they run; an empty patch is the unpatched harness."""

    hooks: tuple[CodeHook, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> HarnessPatch:
        """Read a patch from its JSON: ``{"ops": [...]}``, a list of operations, or one.

        Raises :class:`PatchSchemaError` naming the operation and field that is wrong.
        """
        if isinstance(data, Mapping) and "op" not in data:
            unknown = sorted(str(key) for key in data if key != "ops")
            if unknown:
                raise PatchSchemaError(
                    f"the patch object has unknown key(s) {', '.join(unknown)}; write "
                    '{"ops": [{"op": "add_code_hook", ...}]} or just the list of operations'
                )
            if "ops" not in data:
                raise PatchSchemaError(
                    'the patch object has no "ops"; write {"ops": [...]} or the list itself'
                )
            ops = data["ops"]
        elif isinstance(data, Mapping):
            ops = [data]
        else:
            ops = data
        if not isinstance(ops, list | tuple):
            raise PatchSchemaError(
                f"a patch is a list of operations, not {_kind(ops)}; write "
                '[{"op": "add_code_hook", "hook": "on_before_action", "code": "def ..."}]'
            )
        return cls(hooks=tuple(_code_hook(op, f"ops[{index}]") for index, op in enumerate(ops)))

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form, ``{"ops": [...]}``; :meth:`from_dict` reads it back."""
        return {
            "ops": [
                {
                    "op": "add_code_hook",
                    "hook": hook.hook,
                    "code": hook.code,
                    "description": hook.description,
                }
                for hook in self.hooks
            ]
        }

    def digest(self) -> str:
        """sha256 of the canonical JSON (keys sorted): the patch's identity, descriptions and
        order included (stacking order changes which hook's effect wins)."""
        return hashlib.sha256(msgspec.json.encode(self.to_dict(), order="sorted")).hexdigest()

    def code_digest(self) -> str:
        """sha256 of the hooks' names and code only: equal for patches that differ only in
        their descriptions, so they behave the same (a cache may key on it)."""
        body = [[hook.hook, hook.code] for hook in self.hooks]
        return hashlib.sha256(msgspec.json.encode(body)).hexdigest()

    def stacked(self, other: HarnessPatch) -> HarnessPatch:
        """This patch with ``other``'s hooks after its own.

        Stack the newer patch on top of the accepted one (``accepted.stacked(candidate)``): the
        accepted hooks run first, so where both intervene the accepted one's effect wins, and the
        candidate's hooks still run for their notebook bookkeeping.
        """
        if not isinstance(other, HarnessPatch):
            raise TypeError(f"only a HarnessPatch can be stacked, not {type(other).__name__}")
        return HarnessPatch(hooks=self.hooks + other.hooks)

    @property
    def hook_names(self) -> frozenset[HookName]:
        """The hooks the patch defines."""
        return frozenset(hook.hook for hook in self.hooks)


def _code_hook(op: Any, where: str) -> CodeHook:
    if not isinstance(op, Mapping):
        raise PatchSchemaError(
            f'{where} is {_kind(op)}; each operation is an object like {{"op": "add_code_hook", '
            '"hook": "on_before_action", "code": "def on_before_action(ctx, nb): ..."}'
        )
    name = op.get("op")
    if name is None:
        raise PatchSchemaError(f'{where} has no "op"; the operations are {", ".join(OPERATIONS)}')
    if name not in OPERATIONS:
        raise PatchSchemaError(
            f"{where}.op: unknown operation {name!r}{_suggest(name, OPERATIONS)}; the operations "
            f"are {', '.join(OPERATIONS)}"
        )
    unknown = sorted(str(key) for key in op if key not in _OP_KEYS)
    if unknown:
        raise PatchSchemaError(
            f"{where} ({name}) has unknown key(s) {', '.join(unknown)}; its keys are "
            "op, hook, code and description"
        )
    hook = op.get("hook")
    if not isinstance(hook, str) or hook not in HOOK_NAMES:
        shown = repr(hook) if hook is not None else "missing"
        raise PatchSchemaError(
            f"{where}.hook: {shown} is not a hook{_suggest(hook, HOOK_NAMES)}; the hooks are "
            f"{', '.join(HOOK_NAMES)}"
        )
    code = op.get("code")
    if not isinstance(code, str):
        raise PatchSchemaError(
            f"{where}.code must be the source of `def {hook}(ctx, nb): ...` as one JSON string "
            f"(newlines written \\n), not {_kind(code)}"
        )
    if not code.strip():
        raise PatchSchemaError(f"{where}.code is empty; write `def {hook}(ctx, nb): ...`")
    if len(code) > MAX_CODE_CHARS:
        raise PatchSchemaError(
            f"{where}.code is {len(code)} characters, over the {MAX_CODE_CHARS}-character limit "
            "for one hook; keep hooks small"
        )
    description = op.get("description", "")
    if not isinstance(description, str):
        raise PatchSchemaError(f"{where}.description must be a string, not {_kind(description)}")
    return CodeHook(hook=hook, code=code, description=description)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def _suggest(value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
