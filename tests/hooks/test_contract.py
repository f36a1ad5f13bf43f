"""Hooks as Python functions: the trusted implementation of HarnessHooks."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from envharness.errors import ConfigurationError
from envharness.hooks import (
    HOOK_NAMES,
    AddHint,
    BlockAndPrompt,
    HarnessHooks,
    HookContext,
    HookFailure,
    Hooks,
)

pytestmark = pytest.mark.anyio

CONTEXT = HookContext(
    hook="on_before_action", session_id="ses_1", participant="alice", role="agent", step=1
)


def test_hooks_name_what_they_define() -> None:
    hooks = Hooks("v@1", on_before_action=lambda ctx, nb: None, make_pre_hint=None)
    assert isinstance(hooks, HarnessHooks)
    assert hooks.version == "v@1"
    assert hooks.defined == frozenset({"on_before_action"})
    assert Hooks("v@1").defined == frozenset()
    assert HOOK_NAMES == ("on_init", "make_pre_hint", "on_before_action", "on_post_step")


def test_bad_hooks_are_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match="non-empty version"):
        Hooks("")
    with pytest.raises(ConfigurationError, match=r"unknown hook.*on_befor_action"):
        Hooks("v@1", on_befor_action=lambda ctx, nb: None)
    with pytest.raises(ConfigurationError, match="hook on_init must be callable"):
        Hooks("v@1", on_init="not a function")  # type: ignore[arg-type]


async def test_a_call_returns_the_effect_and_the_notebook() -> None:
    def hook(ctx: HookContext, nb: dict[str, Any]) -> Any:
        nb["seen"] = ctx.step
        return {"effect": "block_and_prompt", "message": "look first"}

    effect, notebook = await Hooks("v@1", on_before_action=hook).call(
        "on_before_action", CONTEXT, {}
    )
    assert effect == BlockAndPrompt(message="look first")
    assert notebook == {"seen": 1}


async def test_async_hooks_are_awaited_and_missing_ones_do_nothing() -> None:
    async def hook(ctx: HookContext, nb: dict[str, Any]) -> Any:
        await anyio.lowlevel.checkpoint()
        return AddHint(text="hi")

    hooks = Hooks("v@1", make_pre_hint=hook)
    assert (await hooks.call("make_pre_hint", CONTEXT, {}))[0] == AddHint(text="hi")
    assert await hooks.call("on_post_step", CONTEXT, {"a": 1}) == (None, {"a": 1})


async def test_every_failure_is_a_hook_failure_naming_the_hook() -> None:
    def raises(ctx: HookContext, nb: dict[str, Any]) -> Any:
        raise ValueError("bad predicate")

    with pytest.raises(HookFailure, match="hook on_init failed: ValueError: bad predicate"):
        await Hooks("v@1", on_init=raises).call("on_init", CONTEXT, {})
    with pytest.raises(HookFailure, match="which is not an effect"):
        await Hooks("v@1", on_init=lambda ctx, nb: "block").call("on_init", CONTEXT, {})
