"""What a hook may ask for: a closed set of effects the runtime interprets and records.

A hook never acts on the environment itself; it returns one of these values (or ``None`` for no
intervention). Each effect is a tagged msgspec Struct, so an effect computed in a sandboxed
subprocess crosses the process boundary as plain JSON (``{"effect": "hint", "text": ...}``) and
is decoded back with :func:`effect_from_json`, which names what was wrong.
"""

from __future__ import annotations

from typing import Any

import msgspec

from envharness.errors import ConfigurationError

__all__ = ["AddHint", "Allow", "BlockAndPrompt", "Effect", "Rewrite", "effect_from_json"]


class _Effect(msgspec.Struct, frozen=True, kw_only=True, tag_field="effect"):
    pass


class Allow(_Effect, tag="allow", frozen=True):
    """Let the attempted action through unchanged (the same as returning ``None``)."""


class Rewrite(_Effect, tag="rewrite", frozen=True):
    """Replace the attempted action; checked against the admissible actions when known."""

    action: Any
    reason: str = ""


class BlockAndPrompt(_Effect, tag="block_and_prompt", frozen=True):
    """Veto the attempted action and ask the agent again, showing it ``message``."""

    message: str


class AddHint(_Effect, tag="hint", frozen=True):
    """Show the agent ``text`` with its next observation."""

    text: str


Effect = Allow | Rewrite | BlockAndPrompt | AddHint


def effect_from_json(value: Any) -> Effect | None:
    """An effect from its JSON form; ``None`` stays ``None``; anything else is a clear error."""
    if value is None or isinstance(value, Allow | Rewrite | BlockAndPrompt | AddHint):
        return value
    try:
        effect: Effect = msgspec.convert(value, Effect)
        return effect
    except msgspec.ValidationError as exc:
        raise ConfigurationError(
            f"a hook returned {value!r}, which is not an effect ({exc}); return None, "
            "allow(), rewrite(action), block_and_prompt(message) or hint(text)"
        ) from None
