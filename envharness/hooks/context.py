"""What a hook sees: one frozen, JSON-only view of the moment it is called at.

Everything in a :class:`HookContext` is plain JSON (so it can be handed to a sandboxed
subprocess unchanged, and recorded) and frozen (a hook cannot change the session by mutating
its input). The environment decides what hooks may read of its state through the optional
``hook_view(state, participant)`` method (see :class:`HookView`); an environment without it
exposes its state only when the state already is a JSON object, and no predicates.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["HOOK_NAMES", "HookContext", "HookName", "HookView", "StepSummary"]

HookName = Literal["on_init", "make_pre_hint", "on_before_action", "on_post_step"]
HOOK_NAMES: tuple[HookName, ...] = ("on_init", "make_pre_hint", "on_before_action", "on_post_step")
"""In the order they run: once per session; then per turn and participant before it is asked,
when it has answered (and before the action reaches the environment), after the step resolved."""


class HookView(msgspec.Struct, frozen=True, kw_only=True):
    """What an environment exposes to hooks, returned by its optional ``hook_view``.

    ``state``: the keys a hook may read (never secrets, never the answer); ``predicates``: named
    facts about the state (``{"order_looked_up": False}``); ``admissible``: the actions the
    participant may take now, when the environment knows them (a rewritten action must be one);
    ``task``: the task as the participant was given it.
    """

    state: dict[str, Any] = {}
    predicates: dict[str, bool] = {}
    admissible: list[Any] | None = None
    task: str | None = None


class StepSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One past step of this participant, as the recent history shows it."""

    step: int
    action: Any = None
    outcome: Any = None
    blocked: str | None = None
    """Why the action was blocked, when it was."""


class HookContext(msgspec.Struct, frozen=True, kw_only=True):
    """The input of every hook call (``hook(ctx, nb)``).

    ``step`` is the turn; ``action`` the attempted action (``on_before_action``) or the executed
    one (``on_post_step``); ``last_outcome`` this participant's latest outcome; ``history`` its
    most recent steps, oldest first (bounded, see ``HISTORY_STEPS`` in the runtime).
    """

    hook: HookName
    session_id: str
    participant: str
    role: str
    step: int
    observation: Any = None
    state: dict[str, Any] = {}
    predicates: dict[str, bool] = {}
    admissible: list[Any] | None = None
    task: str | None = None
    action: Any = None
    last_outcome: Any = None
    history: tuple[StepSummary, ...] = ()
