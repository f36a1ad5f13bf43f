"""What the model reads: observations, hints and what happened, as text rather than raw JSON.

An observation is shown field by field (``total: 5``), text fields as written (a room's
description keeps its lines), every other value as compact JSON, each cut at
:data:`VALUE_CHARS` so one huge field (an image's pixels) cannot fill the context. The hints a
harness hook adds arrive inside the observation (``with_hints`` in the runtime: a ``hints``
key, or ``{"observation": …, "hints": […]}`` around an observation that is not a dict);
:func:`split_hints` takes them out, so they are shown as a ``Hints:`` section, not as one more
field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

__all__ = [
    "VALUE_CHARS",
    "feedback_section",
    "hints_section",
    "outcome_note",
    "plain",
    "show_observation",
    "show_value",
    "split_hints",
    "veto_note",
]

VALUE_CHARS = 4000
"""The longest one observation field (or one shown value) may be before it is cut."""


def plain(value: Any) -> Any:
    """``value`` as JSON-like builtins (a Struct or dataclass observation as its fields)."""
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def split_hints(observation: Any) -> tuple[Any, list[str]]:
    """The observation as the environment gave it, and the hints the harness added to it."""
    if not isinstance(observation, dict):
        return observation, []
    hints = observation.get("hints")
    if not isinstance(hints, list) or not all(isinstance(hint, str) for hint in hints):
        return observation, []
    if set(observation) == {"observation", "hints"}:
        return observation["observation"], hints
    return {key: value for key, value in observation.items() if key != "hints"}, hints


def show_observation(observation: Any) -> str:
    if isinstance(observation, Mapping) and observation:
        return "\n".join(f"{key}: {_field(value)}" for key, value in observation.items())
    return _field(observation)


def show_value(value: Any) -> str:
    """Compact JSON (or the text itself), cut at :data:`VALUE_CHARS`."""
    if isinstance(value, str):
        return _cut(value)
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    return _cut(text)


def hints_section(hints: Sequence[str]) -> str:
    if not hints:
        return ""
    return "Hints:\n" + "\n".join(f"- {hint}" for hint in hints)


def feedback_section(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return "Since your last answer:\n" + "\n".join(f"- {note}" for note in notes)


def outcome_note(
    turn: int, outcome: Any, blocked: str | None, action: Any, answered: Any
) -> str | None:
    """What one turn's feedback says to the model (``None``: nothing worth saying).

    ``action`` is what was executed, ``answered`` what the model answered this turn (``None``
    when it did not act): they differ when a harness hook rewrote the action.
    """
    if blocked is not None:
        tried = f" {show_value(answered)}" if answered is not None else ""
        return f"turn {turn}: your action{tried} was blocked: {blocked}"
    if action is None and answered is None:
        if outcome is None:
            return None
        return f"turn {turn} (you did not act): {show_value(outcome)}"
    done = action if action is not None else answered
    if answered is not None and action is not None and _rewritten(answered, plain(action)):
        said = f"your action {show_value(answered)} was changed to {show_value(done)}"
    else:
        said = f"you did {show_value(done)}"
    if outcome is None:
        return f"turn {turn}: {said}"
    return f"turn {turn}: {said}; outcome: {show_value(outcome)}"


def _rewritten(answered: Any, executed: Any) -> bool:
    """Whether a hook changed the answer: a field both have differs. Fields the environment's
    action type dropped (unknown ones) or filled in (defaults) are not a change."""
    if isinstance(answered, dict) and isinstance(executed, dict):
        return any(key in answered and answered[key] != executed[key] for key in executed)
    return bool(answered != executed)


def veto_note(turn: int, action: Any, reason: str) -> str:
    return f"turn {turn}: your action {show_value(plain(action))} was vetoed: {reason}"


def _field(value: Any) -> str:
    if isinstance(value, str):
        text = _cut(value)
        return text if "\n" not in text else "\n  " + text.replace("\n", "\n  ")
    return show_value(value)


def _cut(text: str) -> str:
    if len(text) <= VALUE_CHARS:
        return text
    return f"{text[:VALUE_CHARS]}… ({len(text) - VALUE_CHARS} more characters not shown)"
