"""Harness hooks: up to four functions around a participant's frozen policy.

``on_init`` (once per session), ``make_pre_hint`` (before the participant is asked),
``on_before_action`` (after it answered, before the environment sees the action) and
``on_post_step`` (after the step resolved) each get a frozen :class:`HookContext` and the
session's notebook, and return an effect or ``None``. The runtime interprets the effect and
records it; a hook never acts on the environment. ``docs/hooks.md`` is the guide.
"""

from envharness.hooks.context import HOOK_NAMES, HookContext, HookName, HookView, StepSummary
from envharness.hooks.contract import HarnessHooks, HookFailure, HookFunction, Hooks
from envharness.hooks.effects import (
    AddHint,
    Allow,
    BlockAndPrompt,
    Effect,
    Rewrite,
    effect_from_json,
)
from envharness.hooks.notebook import NOTEBOOK_LIMIT_BYTES, checked_notebook

__all__ = [
    "HOOK_NAMES",
    "NOTEBOOK_LIMIT_BYTES",
    "AddHint",
    "Allow",
    "BlockAndPrompt",
    "Effect",
    "HarnessHooks",
    "HookContext",
    "HookFailure",
    "HookFunction",
    "HookName",
    "HookView",
    "Hooks",
    "Rewrite",
    "StepSummary",
    "checked_notebook",
    "effect_from_json",
]
