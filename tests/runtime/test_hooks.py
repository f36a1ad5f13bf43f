"""Hooks in the turn loop: every effect, every failure, the notebook, and what agents see."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec
import pytest

from envharness import (
    AddHint,
    Allow,
    AsyncEnvironmentHarness,
    BlockAndPrompt,
    CommandAgent,
    ConfigurationError,
    EnvironmentHarness,
    EnvironmentSpec,
    HookContext,
    Hooks,
    HookView,
    Record,
    Resolution,
    Rewrite,
    Scenario,
)
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.hooks import NOTEBOOK_LIMIT_BYTES, HarnessHooks, HookName
from envharness.protocol import Limits
from envharness.records import (
    ActionBlocked,
    Checkpoint,
    Hint,
    HookCalled,
    Log,
    SessionCreated,
)
from envharness.runtime.hook_memory import HISTORY_STEPS
from envharness.runtime.hooking import with_hints

pytestmark = pytest.mark.anyio

HINTED_AGENT = Path(__file__).parent / "hinted_agent.py"


class DeskInput(msgspec.Struct, frozen=True):
    task: str = "refund order 7"


class Desk:
    """A support desk in miniature: a refund works only after the order was looked up."""

    spec = EnvironmentSpec(name="desk", version="1", input_type=DeskInput, invalid_actions="block")

    def initialize(self, input: DeskInput, rng: Random, roster: Any) -> dict[str, Any]:
        return {"looked_up": False, "refunded": False, "steps": 0, "task": input.task}

    def observe(self, state: dict[str, Any], participant: str) -> dict[str, Any]:
        return {"looked_up": state["looked_up"], "refunded": state["refunded"]}

    def resolve(self, state: dict[str, Any], actions: Mapping[str, Any]) -> Resolution:
        new = {**state, "steps": state["steps"] + 1}
        outcomes = {}
        for name, action in actions.items():
            tool = action.get("tool")
            if tool == "lookup":
                new["looked_up"] = True
                outcomes[name] = "order 7: 20 EUR"
            elif tool == "refund" and state["looked_up"]:
                new["refunded"] = True
                outcomes[name] = "refunded"
            else:
                outcomes[name] = f"error: cannot {tool} now"
        return Resolution(state=new, outcomes=outcomes, done=new["refunded"])

    def intervene(self, state: dict[str, Any], intervention: Mapping[str, Any]) -> dict[str, Any]:
        return {**state, **intervention}


class ViewedDesk(Desk):
    """The desk, telling hooks its predicates and admissible actions."""

    def hook_view(self, state: dict[str, Any], participant: str) -> HookView:
        tools = ["lookup", "reply"] + (["refund"] if state["looked_up"] else [])
        return HookView(
            state={"looked_up": state["looked_up"], "steps": state["steps"]},
            predicates={"looked_up": state["looked_up"]},
            admissible=[{"tool": tool} for tool in tools],
            task=state["task"],
        )


class Hasty:
    """Refunds first; looks the order up only when a hint it was shown says so."""

    implementation = "hasty@1"

    def __init__(self, seen: list[Any] | None = None) -> None:
        self.seen = seen if seen is not None else []

    def act(self, observation: Any) -> dict[str, str]:
        self.seen.append(observation)
        hints = observation.get("hints", []) if isinstance(observation, dict) else []
        return {"tool": "lookup" if any("lookup" in h for h in hints) else "refund"}


class Stubborn:
    """Refunds, whatever it is told."""

    implementation = "stubborn@1"

    def act(self, observation: Any) -> dict[str, str]:
        return {"tool": "refund"}


TASK = Scenario(id="refund-7", input=DeskInput())


def harness_for(
    store: Path, *, environment: Any = ViewedDesk, agent: Any = Hasty, **options: Any
) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=environment, agents={"alice": agent}, **options
    )


async def records_of(harness: AsyncEnvironmentHarness, session_id: str) -> list[Record]:
    return [record async for record in harness.records(session_id)]


def payloads(records: list[Record], kind: type[Any]) -> list[Any]:
    return [r.payload for r in records if isinstance(r.payload, kind)]


def turn_kinds(records: list[Record], turn: int) -> list[str]:
    return [r.kind for r in records if r.turn == turn]


def refund_needs_lookup(ctx: HookContext, nb: dict[str, Any]) -> Any:
    if ctx.action == {"tool": "refund"} and not ctx.predicates["looked_up"]:
        return BlockAndPrompt(message="look the order up first: use lookup")
    return None


# -- configuration and evidence ----------------------------------------------------------------


async def test_without_hooks_nothing_changes(store_path: Path) -> None:
    harness = harness_for(store_path)
    session = await harness.run(TASK, turns=2)
    records = await records_of(harness, session.id)
    created = records[0].payload
    assert isinstance(created, SessionCreated)
    assert created.config.harness_version is None
    assert (created.config.hook_budget, created.config.max_blocks) == (None, None)
    assert not [r for r in records if r.kind in ("hook", "hint")]
    assert turn_kinds(records, 1) == [
        "observation",
        "action.attempted",
        "action.executed",
        "outcome",
    ]


async def test_the_hooks_version_is_the_sessions_harness_version(store_path: Path) -> None:
    hooks = Hooks("desk-hooks@1", on_before_action=refund_needs_lookup)
    harness = harness_for(store_path, hooks=hooks)
    session = await harness.run(TASK, turns=2)
    created = (await records_of(harness, session.id))[0].payload
    assert isinstance(created, SessionCreated)
    assert created.config.harness_version == "desk-hooks@1"
    assert (created.config.hook_budget, created.config.max_blocks) == (10.0, 3), "the limits too"
    # A call's hooks override the harness's.
    other = await harness.run(TASK, turns=1, hooks=Hooks("other@2"))
    created = (await records_of(harness, other.id))[0].payload
    assert isinstance(created, SessionCreated)
    assert created.config.harness_version == "other@2"


async def test_an_experiment_records_its_hooks_version(store_path: Path) -> None:
    harness = harness_for(store_path)
    hooks = Hooks("desk-hooks@3", on_before_action=refund_needs_lookup)
    experiment = harness.experiment("hooked", [TASK], turns=3, trials=2, hooks=hooks)
    result = await experiment.run()
    assert result.completed == 2
    assert experiment.config.harness_version == "desk-hooks@3"
    for session in result.sessions:
        records = await records_of(harness, session.result.id)
        assert payloads(records, SessionCreated)[0].config.harness_version == "desk-hooks@3"
        assert payloads(records, ActionBlocked)[0].by == "hook"


async def test_bad_hooks_are_refused_before_anything_is_recorded(store_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="hooks must implement HarnessHooks"):
        harness_for(store_path, hooks=object())
    harness = harness_for(store_path)
    with pytest.raises(ConfigurationError, match="hooks must implement HarnessHooks"):
        await harness.run(TASK, turns=1, hooks=lambda ctx, nb: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_blocks must be a positive integer"):
        harness_for(store_path, max_blocks=0)
    with pytest.raises(ConfigurationError, match="hook_budget must be positive"):
        harness_for(store_path, hook_budget=0)
    assert not await anyio.Path(store_path).exists()


# -- effects -----------------------------------------------------------------------------------


async def test_block_and_prompt_vetoes_and_asks_again_with_the_message(store_path: Path) -> None:
    seen: list[Any] = []
    hooks = Hooks("desk@1", on_before_action=refund_needs_lookup)
    harness = harness_for(store_path, agent=lambda: Hasty(seen), hooks=hooks)
    session = await harness.run(TASK, turns=3)
    assert (session.status, session.turns_completed) == ("completed", 2)
    records = await records_of(harness, session.id)
    assert turn_kinds(records, 1) == [
        "observation",
        "action.attempted",
        "hook",
        "action.blocked",
        "hint",
        "action.attempted",
        "action.executed",
        "outcome",
    ]
    [blocked] = payloads(records, ActionBlocked)
    assert (blocked.action, blocked.by) == ({"tool": "refund"}, "hook")
    assert blocked.reason == "look the order up first: use lookup"
    [hook] = payloads(records, HookCalled)
    assert (hook.hook, hook.effect, hook.harness_version) == (
        "on_before_action",
        "block_and_prompt",
        "desk@1",
    )
    assert hook.detail == {"effect": "block_and_prompt", "message": blocked.reason}
    # The agent was asked again with the message; the recorded observation is the bare one.
    assert seen[0] == {"looked_up": False, "refunded": False}
    assert seen[1] == {"looked_up": False, "refunded": False, "hints": [blocked.reason]}
    assert seen[2] == {"looked_up": True, "refunded": False}
    [hint] = payloads(records, Hint)
    assert (hint.text, hint.source) == (blocked.reason, "on_before_action")
    executed = [r.payload.action for r in records if r.kind == "action.executed"]
    assert executed == [{"tool": "lookup"}, {"tool": "refund"}]


async def test_repeated_blocks_skip_the_turn_and_never_run_the_action(store_path: Path) -> None:
    hooks = Hooks("desk@1", on_before_action=refund_needs_lookup)
    harness = harness_for(store_path, agent=Stubborn, hooks=hooks, max_blocks=2)
    session = await harness.run(TASK, turns=2)
    assert (session.status, session.turns_completed) == ("completed", 2)
    records = await records_of(harness, session.id)
    assert not [r for r in records if r.kind == "action.executed"]
    blocked = payloads(records, ActionBlocked)
    assert len(blocked) == 4  # two per turn, then the turn is skipped
    assert blocked[0].reason == "look the order up first: use lookup"
    assert "blocked 2 time(s) in a row: this turn is skipped (max_blocks=2)" in blocked[1].reason
    # Only the first block of a turn prompts the agent again.
    assert [h.text for h in payloads(records, Hint)] == [blocked[0].reason] * 2
    assert turn_kinds(records, 1).count("action.attempted") == 2


async def test_a_rewrite_replaces_the_action(store_path: Path) -> None:
    def lookup_instead(ctx: HookContext, nb: dict[str, Any]) -> Any:
        if ctx.action == {"tool": "refund"} and not ctx.predicates["looked_up"]:
            return Rewrite(action={"tool": "lookup"}, reason="refund needs a lookup")
        return Allow()

    harness = harness_for(store_path, hooks=Hooks("desk@1", on_before_action=lookup_instead))
    session = await harness.run(TASK, turns=3)
    assert session.turns_completed == 2
    records = await records_of(harness, session.id)
    assert turn_kinds(records, 1) == [
        "observation",
        "action.attempted",
        "hook",
        "action.executed",
        "outcome",
    ]
    attempted = [r.payload.action for r in records if r.kind == "action.attempted"]
    executed = [r.payload.action for r in records if r.kind == "action.executed"]
    assert attempted == [{"tool": "refund"}, {"tool": "refund"}]
    assert executed == [{"tool": "lookup"}, {"tool": "refund"}]
    effects = [(h.effect, h.detail) for h in payloads(records, HookCalled)]
    assert effects == [
        (
            "rewrite",
            {"effect": "rewrite", "action": {"tool": "lookup"}, "reason": effects[0][1]["reason"]},
        ),
        ("allow", {"effect": "allow"}),
    ]


async def test_an_inadmissible_rewrite_is_a_failed_hook_call(store_path: Path) -> None:
    def escalate(ctx: HookContext, nb: dict[str, Any]) -> Any:
        return Rewrite(action={"tool": "refund", "amount": 1000})

    harness = harness_for(store_path, hooks=Hooks("desk@1", on_before_action=escalate))
    session = await harness.run(TASK, turns=1)
    assert session.status == "completed"
    records = await records_of(harness, session.id)
    [hook] = payloads(records, HookCalled)
    assert hook.effect is None
    assert hook.error is not None
    assert "not admissible now" in hook.error.message
    assert hook.detail == {
        "effect": "rewrite",
        "action": {"tool": "refund", "amount": 1000},
        "reason": "",
    }
    # The agent's own action went ahead, as if the hook had said nothing.
    assert [r.payload.action for r in records if r.kind == "action.executed"] == [
        {"tool": "refund"}
    ]


async def test_a_rewrite_to_an_invalid_action_is_a_failed_hook_call(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    hooks = Hooks("h@1", on_before_action=lambda ctx, nb: Rewrite(action={"value": 99}))
    session = await harness.run(
        Scenario(id="s", input=SyntheticScenarioInput(starting_total=0)), turns=1, hooks=hooks
    )
    records = await records_of(harness, session.id)
    [hook] = payloads(records, HookCalled)
    assert hook.error is not None
    assert "rewrote to an invalid action" in hook.error.message
    assert [r.payload.action for r in records if r.kind == "action.executed"] == [{"value": 0}]


async def test_hints_are_shown_at_the_next_ask_and_recorded(store_path: Path) -> None:
    seen: list[Any] = []

    def pre(ctx: HookContext, nb: dict[str, Any]) -> Any:
        return AddHint(text=f"step {ctx.step}: try lookup") if ctx.step == 1 else None

    def post(ctx: HookContext, nb: dict[str, Any]) -> Any:
        return AddHint(text=f"after step {ctx.step}: the outcome was {ctx.last_outcome}")

    hooks = Hooks("desk@1", make_pre_hint=pre, on_post_step=post)
    harness = harness_for(store_path, agent=lambda: Hasty(seen), hooks=hooks)
    session = await harness.run(TASK, turns=2)
    assert session.turns_completed == 2
    assert seen[0]["hints"] == ["step 1: try lookup"]
    assert seen[1]["hints"] == ["after step 1: the outcome was order 7: 20 EUR"]
    records = await records_of(harness, session.id)
    hints = [(r.turn, r.payload.source, r.payload.text) for r in records if r.kind == "hint"]
    assert hints == [
        (1, "make_pre_hint", "step 1: try lookup"),
        (2, "on_post_step", "after step 1: the outcome was order 7: 20 EUR"),
    ]
    observations = [r.payload.observation for r in records if r.kind == "observation"]
    assert all("hints" not in o for o in observations)


async def test_a_typed_observation_is_wrapped_with_its_hints(store_path: Path) -> None:
    seen: list[Any] = []

    class Watcher(SyntheticAgent):
        implementation = "watcher@1"

        def act(self, observation: Any) -> dict[str, int]:
            seen.append(observation)
            return {"value": 1}

    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Watcher}
    )
    hooks = Hooks("h@1", make_pre_hint=lambda ctx, nb: AddHint(text="slow down"))
    await harness.run(
        Scenario(id="s", input=SyntheticScenarioInput(starting_total=0)), turns=1, hooks=hooks
    )
    [asked] = seen
    assert asked["hints"] == ["slow down"]
    assert asked["observation"].total == 0  # still the environment's own type


async def test_on_init_runs_once_per_participant_and_may_hint(store_path: Path) -> None:
    seen: list[Any] = []
    calls: list[tuple[str, int, Any]] = []

    def init(ctx: HookContext, nb: dict[str, Any]) -> Any:
        calls.append((ctx.participant, ctx.step, ctx.observation))
        nb["task"] = ctx.task
        return AddHint(text="remember: lookup before refund")

    harness = harness_for(store_path, agent=lambda: Hasty(seen), hooks=Hooks("d@1", on_init=init))
    session = await harness.run(TASK, turns=2)
    assert calls == [("alice", 0, {"looked_up": False, "refunded": False})]
    assert seen[0]["hints"] == ["remember: lookup before refund"]
    assert "hints" not in seen[1]
    records = await records_of(harness, session.id)
    [init_record] = [r for r in records if r.kind == "hook"]
    assert (init_record.turn, init_record.participant) == (None, "alice")
    assert isinstance(init_record.payload, HookCalled)
    assert init_record.payload.notebook


async def test_the_context_shows_the_view_the_action_and_recent_history(store_path: Path) -> None:
    contexts: list[HookContext] = []

    def spy(ctx: HookContext, nb: dict[str, Any]) -> None:
        contexts.append(ctx)

    class Replier:
        implementation = "replier@1"

        def act(self, observation: Any) -> dict[str, str]:
            return {"tool": "reply"}

    hooks = Hooks("spy@1", on_before_action=spy, on_post_step=spy)
    harness = harness_for(store_path, agent=Replier, hooks=hooks)
    session = await harness.run(TASK, turns=HISTORY_STEPS + 3)
    first, last = contexts[0], contexts[-1]
    assert (first.hook, first.session_id, first.participant, first.role) == (
        "on_before_action",
        session.id,
        "alice",
        "agent",
    )
    assert (first.step, first.action, first.last_outcome, first.history) == (
        1,
        {"tool": "reply"},
        None,
        (),
    )
    assert first.task == "refund order 7"
    assert first.predicates == {"looked_up": False}
    assert first.admissible == [{"tool": "lookup"}, {"tool": "reply"}]
    assert first.observation == {"looked_up": False, "refunded": False}
    assert last.hook == "on_post_step"
    assert last.state == {"looked_up": False, "steps": HISTORY_STEPS + 3}
    assert last.last_outcome == "error: cannot reply now"
    assert len(last.history) == HISTORY_STEPS
    assert [s.step for s in last.history] == list(range(4, HISTORY_STEPS + 4))
    assert isinstance(first.state, dict)


async def test_without_hook_view_a_dict_state_is_shown_and_nothing_else(store_path: Path) -> None:
    contexts: list[HookContext] = []
    hooks = Hooks("spy@1", make_pre_hint=lambda ctx, nb: contexts.append(ctx))
    harness = harness_for(store_path, environment=Desk, hooks=hooks)
    await harness.run(TASK, turns=1)
    [ctx] = contexts
    assert ctx.state == {
        "looked_up": False,
        "refunded": False,
        "steps": 0,
        "task": "refund order 7",
    }
    assert (ctx.predicates, ctx.admissible, ctx.task) == ({}, None, None)
    # A typed state stays private without a hook_view.
    typed: list[HookContext] = []
    other = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    await other.run(
        Scenario(id="s", input=SyntheticScenarioInput(starting_total=0)),
        turns=1,
        hooks=Hooks("spy@1", make_pre_hint=lambda ctx, nb: typed.append(ctx)),
    )
    assert typed[0].state == {}


async def test_a_hook_cannot_change_the_session_through_its_context(store_path: Path) -> None:
    seen: list[Any] = []

    def meddle(ctx: HookContext, nb: dict[str, Any]) -> None:
        ctx.observation["refunded"] = True
        ctx.state["looked_up"] = True

    harness = harness_for(
        store_path, agent=lambda: Hasty(seen), hooks=Hooks("m@1", make_pre_hint=meddle)
    )
    session = await harness.run(TASK, turns=1)
    assert seen[0] == {"looked_up": False, "refunded": False}
    records = await records_of(harness, session.id)
    assert [r.payload.outcome for r in records if r.kind == "action.executed"] == [
        "error: cannot refund now"
    ]


async def test_a_broken_hook_view_fails_the_session_clearly(store_path: Path) -> None:
    class BrokenView(Desk):
        def hook_view(self, state: Any, participant: str) -> Any:
            return {"predicates": {"looked_up": "maybe"}}

    harness = harness_for(
        store_path, environment=BrokenView, hooks=Hooks("h@1", make_pre_hint=lambda c, n: None)
    )
    session = await harness.run(TASK, turns=1)
    assert session.status == "failed"
    assert session.reason is not None
    assert "hook_view() returned dict, not a valid HookView" in session.reason


# -- failures degrade to no intervention -------------------------------------------------------


async def test_a_hook_that_raises_is_recorded_and_ignored(store_path: Path) -> None:
    def broken(ctx: HookContext, nb: dict[str, Any]) -> Any:
        nb["partial"] = True  # lost: a failed call leaves the notebook as it was
        raise KeyError("no such predicate")

    harness = harness_for(store_path, hooks=Hooks("b@1", on_before_action=broken))
    session = await harness.run(TASK, turns=1)
    assert session.status == "completed"
    records = await records_of(harness, session.id)
    [hook] = payloads(records, HookCalled)
    assert (hook.effect, hook.notebook) == (None, None)
    assert hook.error is not None
    assert hook.error.type == "HookFailure"
    assert "KeyError: 'no such predicate'" in hook.error.message
    assert "KeyError" in (hook.error.traceback or "")
    assert [r.payload.action for r in records if r.kind == "action.executed"] == [
        {"tool": "refund"}
    ]


@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        (42, "is not an effect"),
        ({"effect": "teleport"}, "is not an effect"),
        (Rewrite(action={"tool": "lookup"}), "make_pre_hint may not return"),
        (BlockAndPrompt(message="no"), "make_pre_hint may not return"),
        (AddHint(text="  "), "without a message"),
    ],
)
async def test_a_hook_that_returns_what_it_may_not_has_failed(
    store_path: Path, returned: Any, problem: str
) -> None:
    harness = harness_for(store_path, hooks=Hooks("b@1", make_pre_hint=lambda c, n: returned))
    session = await harness.run(TASK, turns=1)
    assert session.status == "completed"
    [hook] = payloads(await records_of(harness, session.id), HookCalled)
    assert hook.error is not None
    assert problem in hook.error.message


async def test_an_async_hook_over_its_budget_is_cut_off(store_path: Path) -> None:
    async def slow(ctx: HookContext, nb: dict[str, Any]) -> Any:
        await anyio.sleep(30)
        return BlockAndPrompt(message="never")

    harness = harness_for(store_path, hooks=Hooks("s@1", on_before_action=slow), hook_budget=0.05)
    session = await harness.run(TASK, turns=1)
    assert session.status == "completed"
    records = await records_of(harness, session.id)
    [hook] = payloads(records, HookCalled)
    assert hook.error is not None
    assert "overran its budget (0.05s)" in hook.error.message
    assert not payloads(records, ActionBlocked)


async def test_a_sync_hook_over_its_budget_has_its_answer_refused(store_path: Path) -> None:
    def slow(ctx: HookContext, nb: dict[str, Any]) -> Any:
        time.sleep(0.1)  # in-process code that never awaits cannot be interrupted
        return BlockAndPrompt(message="late")

    harness = harness_for(store_path, hooks=Hooks("s@1", on_before_action=slow), hook_budget=0.01)
    session = await harness.run(TASK, turns=1)
    records = await records_of(harness, session.id)
    [hook] = payloads(records, HookCalled)
    assert hook.error is not None
    assert "over its 0.01s budget" in hook.error.message
    assert not payloads(records, ActionBlocked)
    assert session.status == "completed"


class ProtocolBreaker:
    """A HarnessHooks implementation with a bug: it raises something other than HookFailure."""

    version = "breaker@1"
    defined = frozenset({"make_pre_hint"})

    async def call(
        self, hook: HookName, ctx: HookContext, notebook: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        raise RuntimeError("sandbox worker vanished")


async def test_any_harness_hooks_failure_is_contained(store_path: Path) -> None:
    hooks = ProtocolBreaker()
    assert isinstance(hooks, HarnessHooks)
    harness = harness_for(store_path, hooks=hooks)
    session = await harness.run(TASK, turns=1)
    assert session.status == "completed"
    [hook] = payloads(await records_of(harness, session.id), HookCalled)
    assert hook.error is not None
    assert "sandbox worker vanished" in hook.error.message


# -- the notebook ------------------------------------------------------------------------------


async def test_the_notebook_persists_across_calls_and_is_recorded(store_path: Path) -> None:
    counts: list[int] = []

    def count(ctx: HookContext, nb: dict[str, Any]) -> None:
        nb["calls"] = nb.get("calls", 0) + 1
        counts.append(nb["calls"])

    harness = harness_for(store_path, agent=Stubborn, hooks=Hooks("n@1", on_post_step=count))
    session = await harness.run(TASK, turns=3)
    assert counts == [1, 2, 3]
    hooks = payloads(await records_of(harness, session.id), HookCalled)
    assert len({h.notebook for h in hooks}) == 3


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("x" * (NOTEBOOK_LIMIT_BYTES + 1), "over its 65536-byte cap"),
        ((1, 2), "nb['value'] is a tuple (use a list)"),
        ({1, 2}, "nb['value'] is a set"),
        (float("nan"), "nb['value'] is nan"),
        ({3: "x"}, "has the key 3 (int)"),
        (object(), "nb['value'] is a object"),
    ],
)
async def test_a_notebook_over_its_cap_or_not_json_is_a_failed_call(
    store_path: Path, value: Any, problem: str
) -> None:
    seen: list[dict[str, Any]] = []

    def write(ctx: HookContext, nb: dict[str, Any]) -> None:
        seen.append(dict(nb))
        nb["step"] = ctx.step
        if ctx.step == 2:
            nb["value"] = value

    harness = harness_for(store_path, agent=Stubborn, hooks=Hooks("n@1", make_pre_hint=write))
    session = await harness.run(TASK, turns=3)
    assert session.status == "completed"
    assert seen == [{}, {"step": 1}, {"step": 1}]  # the failed call's changes were dropped
    hooks = payloads(await records_of(harness, session.id), HookCalled)
    failed = [h for h in hooks if h.error is not None]
    assert len(failed) == 1
    assert problem in failed[0].error.message


async def test_checkpoints_resumes_and_branches_keep_the_notebook(store_path: Path) -> None:
    def count(ctx: HookContext, nb: dict[str, Any]) -> Any:
        nb["calls"] = nb.get("calls", 0) + 1
        return AddHint(text=f"call {nb['calls']}")

    hooks = Hooks("n@1", on_post_step=count)
    seen: list[Any] = []
    harness = harness_for(store_path, agent=lambda: Hasty(seen), hooks=hooks, checkpoint_every=2)
    session = await harness.run(TASK, turns=3)
    [checkpoint] = payloads(await records_of(harness, session.id), Checkpoint)
    assert checkpoint.notebook == {"calls": 2}
    # A continuation rebuilds the notebook and the hint still to be shown from the evidence.
    more = await harness.continue_(session.id, turns=2)
    assert more.turns_completed == 5
    assert [o.get("hints") for o in seen] == [None, ["call 1"], ["call 2"], ["call 3"], ["call 4"]]
    # A checkpoint by hand records the notebook at the last complete turn.
    manual = await harness.checkpoint(session.id)
    taken = payloads(await records_of(harness, session.id), Checkpoint)[-1]
    assert (manual.turn, taken.notebook) == (5, {"calls": 5})
    # A branch starts from its checkpoint's notebook.
    first, fourth, _ = await harness.checkpoints(session.id)
    assert fourth.turn == 4  # every 2 turns, in the continuation too
    child = await harness.branch(first, intervention={"steps": 100}, reason="what if")
    seen.clear()
    await harness.continue_(child.id, turns=1)
    child_hooks = payloads(await records_of(harness, child.id), HookCalled)
    assert [h.detail["text"] for h in child_hooks] == ["call 3"]
    # ...and with the hint the parent's hooks left to be shown at the next ask.
    assert [o.get("hints") for o in seen] == [["call 2"]]
    assert await harness.verify()


async def test_a_branch_hooks_remember_the_parents_steps(store_path: Path) -> None:
    """The branch references its parent's history instead of copying it; its hooks still see
    the steps played before the checkpoint, through a branch of a branch too."""
    histories: list[list[int]] = []

    def remember(ctx: HookContext, nb: dict[str, Any]) -> None:
        histories.append([step.step for step in ctx.history])

    hooks = Hooks("h@1", on_post_step=remember)
    harness = harness_for(store_path, agent=Stubborn, hooks=hooks, checkpoint_every=2)
    session = await harness.run(TASK, turns=2)
    [checkpoint] = await harness.checkpoints(session.id)
    child = await harness.branch(checkpoint, intervention={"steps": 0}, reason="again")
    await harness.continue_(child.id, turns=2)
    [grandchild_point] = await harness.checkpoints(child.id)
    grandchild = await harness.branch(grandchild_point, intervention={}, reason="and again")
    histories.clear()
    await harness.continue_(grandchild.id, turns=1)
    assert histories == [[1, 2, 3, 4, 5]]


async def test_a_resumed_hooked_session_plays_like_one_never_stopped(store_path: Path) -> None:
    def hinting(ctx: HookContext, nb: dict[str, Any]) -> Any:
        nb.setdefault("outcomes", []).append(ctx.last_outcome)
        return AddHint(text=f"history {len(ctx.history)}")

    hooks = Hooks("r@1", on_post_step=hinting, on_before_action=refund_needs_lookup)
    harness = harness_for(store_path, agent=Stubborn, hooks=hooks, max_blocks=2)
    straight = await harness.run(TASK, turns=4)
    split = await harness.run(TASK, turns=2)
    await harness.continue_(split.id, turns=2)

    def played(records: list[Record]) -> list[tuple[str, int | None, bytes]]:
        kept = {"hint", "action.blocked", "action.executed", "outcome"}
        return [
            (r.kind, r.turn, msgspec.json.encode(r.payload)) for r in records if r.kind in kept
        ] + [
            (
                r.kind,
                r.turn,
                msgspec.json.encode((r.payload.effect, r.payload.detail, r.payload.notebook)),
            )
            for r in records
            if isinstance(r.payload, HookCalled)
        ]

    assert played(await records_of(harness, split.id)) == played(
        await records_of(harness, straight.id)
    )


async def test_a_session_stopped_mid_turn_resumes_with_the_memory_of_its_last_turn(
    store_path: Path,
) -> None:
    def count(ctx: HookContext, nb: dict[str, Any]) -> Any:
        nb["asked"] = nb.get("asked", 0) + 1
        return AddHint(text=f"ask {nb['asked']} at step {ctx.step}")

    hooks = Hooks("m@1", make_pre_hint=count, on_post_step=count)
    harness = harness_for(store_path, agent=Stubborn, hooks=hooks)
    found: list[str] = []
    stopped = anyio.Event()

    def progress(session_id: str, completed: int, planned: int) -> None:
        found.append(session_id)
        if completed == 2:
            stopped.set()

    async with anyio.create_task_group() as group:
        group.start_soon(lambda: harness.run(TASK, turns=5, progress=progress))
        await stopped.wait()
        group.cancel_scope.cancel()
    resumed = await harness.resume(found[0])
    assert (resumed.status, resumed.turns_completed) == ("completed", 5)
    straight = await harness.run(TASK, turns=5)

    def hints(records: list[Record]) -> list[tuple[int | None, str]]:
        # The last complete turn's memory carries on; what a stopped turn did is replayed.
        last: dict[int | None, list[str]] = {}
        for record in records:
            if isinstance(record.payload, Hint):
                last.setdefault(record.turn, []).append(record.payload.text)
            if record.kind == "segment.started":
                last = {t: v for t, v in last.items() if t is None or t <= record.payload.turn}
        return [(turn, text) for turn, texts in sorted(last.items()) for text in texts]

    assert hints(await records_of(harness, found[0])) == hints(
        await records_of(harness, straight.id)
    )


async def test_resume_refuses_other_hooks_unless_declared(store_path: Path) -> None:
    harness = harness_for(store_path, hooks=Hooks("v@1", on_before_action=refund_needs_lookup))
    session = await harness.run(TASK, turns=1)
    with pytest.raises(ConfigurationError, match="harness version was 'v@1', is now 'v@2'"):
        await harness.continue_(session.id, turns=1, hooks=Hooks("v@2"))
    plain = harness_for(store_path)
    with pytest.raises(ConfigurationError, match="harness version was 'v@1', is now None"):
        await plain.continue_(session.id, turns=1)
    more = await harness.continue_(
        session.id, turns=1, hooks=Hooks("v@2"), declare_changes="a better patch"
    )
    assert more.turns_completed == 2


# -- external agents ---------------------------------------------------------------------------


async def test_a_command_agent_sees_hints_in_its_observation(store_path: Path) -> None:
    agent = CommandAgent(
        [sys.executable, str(HINTED_AGENT)],
        implementation="hinted@1",
        limits=Limits(ready_timeout=10.0, act_timeout=10.0, shutdown_grace=0.5),
    )
    hooks = Hooks("desk@1", on_before_action=refund_needs_lookup)
    harness = harness_for(store_path, agent=agent, hooks=hooks)
    session = await harness.run(TASK, turns=3)
    assert (session.status, session.turns_completed) == ("completed", 2)
    records = await records_of(harness, session.id)
    logs = [p.message for p in payloads(records, Log) if p.stream == "stderr"]
    assert [line for line in logs if line.startswith("hint:")] == [
        "hint: look the order up first: use lookup"
    ]
    executed = [r.payload.action for r in records if r.kind == "action.executed"]
    assert executed == [{"tool": "lookup"}, {"tool": "refund"}]


async def test_a_command_agent_is_told_the_rewrite_that_ran(store_path: Path) -> None:
    """Protocol: ``feedback.action`` is what was executed, a harness's rewrite included."""
    agent = CommandAgent(
        [sys.executable, str(HINTED_AGENT)],
        implementation="hinted@1",
        limits=Limits(ready_timeout=10.0, act_timeout=10.0, shutdown_grace=0.5),
    )

    def lookup_instead(ctx: HookContext, nb: dict[str, Any]) -> Any:
        if ctx.action == {"tool": "refund"} and not ctx.predicates["looked_up"]:
            return Rewrite(action={"tool": "lookup"}, reason="refund needs a lookup")
        return Allow()

    harness = harness_for(
        store_path, agent=agent, hooks=Hooks("desk@1", on_before_action=lookup_instead)
    )
    session = await harness.run(TASK, turns=3)
    assert (session.status, session.turns_completed) == ("completed", 2)
    records = await records_of(harness, session.id)
    logs = [p.message for p in payloads(records, Log) if p.stream == "stderr"]
    assert [line for line in logs if line.startswith("feedback:")] == [
        'feedback: executed {"tool": "lookup"}',
        'feedback: executed {"tool": "refund"}',
    ]


async def test_a_python_agent_may_ask_for_the_executed_action(store_path: Path) -> None:
    told: list[tuple[str, Any]] = []

    class Listening(Stubborn):
        def feedback(
            self, turn: int, outcome: Any, blocked: str | None, *, action: Any = None
        ) -> None:
            told.append(("new", action))

    class Plain(Stubborn):
        def feedback(self, turn: int, outcome: Any, blocked: str | None) -> None:
            told.append(("plain", outcome))

    def lookup_instead(ctx: HookContext, nb: dict[str, Any]) -> Any:
        return Rewrite(action={"tool": "lookup"}) if not ctx.predicates["looked_up"] else Allow()

    hooks = Hooks("desk@1", on_before_action=lookup_instead)
    for agent in (Listening, Plain):
        await harness_for(store_path, agent=agent, hooks=hooks).run(TASK, turns=2)
    assert told == [
        ("new", {"tool": "lookup"}),
        ("new", {"tool": "refund"}),
        ("plain", "order 7: 20 EUR"),
        ("plain", "refunded"),
    ]


def test_how_hints_reach_an_agent() -> None:
    assert with_hints({"a": 1}, []) == {"a": 1}
    assert with_hints({"a": 1}, ["h"]) == {"a": 1, "hints": ["h"]}
    # An observation that already says "hints", or is not a dict, is wrapped whole.
    assert with_hints({"hints": 0}, ["h"]) == {"observation": {"hints": 0}, "hints": ["h"]}
    assert with_hints([1, 2], ["h"]) == {"observation": [1, 2], "hints": ["h"]}
    assert with_hints(None, ["h"]) == {"observation": None, "hints": ["h"]}


def test_the_hooked_session_example_vetoes_and_reprompts(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "hooked_session.py"
    result = subprocess.run(
        [sys.executable, str(example), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "with hooks:" in result.stdout
    assert "the environment reported done at turn 2" in result.stdout
    assert "'by': 'hook'" in result.stdout


def test_the_example_door_passes_a_turn_a_hook_vetoed_max_blocks_times(tmp_path: Path) -> None:
    """The documented repeated-block policy resolves the turn without the action."""
    example = Path(__file__).resolve().parents[2] / "examples" / "hooked_session.py"
    spec = importlib.util.spec_from_file_location("hooked_session_example", example)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def always(ctx: HookContext, nb: dict[str, Any]) -> BlockAndPrompt:
        return BlockAndPrompt(message="no")

    harness = EnvironmentHarness(tmp_path / "store", environment=module.Door,
                                 agents={"alice": module.Pusher})  # fmt: skip
    session = harness.run(
        Scenario(id="always-vetoed", input=module.DoorInput()),
        turns=2,
        hooks=Hooks("veto-all@1", on_before_action=always),
    )
    assert (session.status, session.turns_completed) == ("completed", 2)


async def test_in_a_simultaneous_turn_only_the_blocked_participant_is_asked_again(
    store_path: Path,
) -> None:
    seen: dict[str, list[Any]] = {"alice": [], "bob": []}

    def no_refund_for_alice(ctx: HookContext, nb: dict[str, Any]) -> Any:
        if ctx.participant == "alice" and ctx.action == {"tool": "refund"}:
            return BlockAndPrompt(message="alice: lookup first")
        return None

    harness = AsyncEnvironmentHarness(
        store_path,
        environment=ViewedDesk,
        agents={"alice": lambda: Hasty(seen["alice"]), "bob": lambda: Hasty(seen["bob"])},
    )
    session = await harness.run(
        TASK, turns=1, hooks=Hooks("two@1", on_before_action=no_refund_for_alice)
    )
    assert session.status == "completed"
    assert len(seen["alice"]) == 2
    assert len(seen["bob"]) == 1
    records = await records_of(harness, session.id)
    executed = {r.participant: r.payload.action for r in records if r.kind == "action.executed"}
    assert executed == {"alice": {"tool": "lookup"}, "bob": {"tool": "refund"}}
