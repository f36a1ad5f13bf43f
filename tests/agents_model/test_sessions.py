"""ModelAgent in real sessions (both backends): evidence, failures, budgets, hooks, checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import (
    AddHint,
    AsyncEnvironmentHarness,
    BlockAndPrompt,
    HookContext,
    Hooks,
    Scenario,
)
from envharness.agents import ModelAgent
from envharness.contracts.budget import Budget
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.llm import Completion, ProviderError, ScriptedCall, ScriptedProvider
from envharness.records import ActionExecuted, Cost, Log, Record, SessionCreated
from tests.agents_model._support import priced, tool_call

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


def always(value: int, usd: float | None = None) -> Any:
    """A scripted reply for every call: a tool call adding ``value``, with a fresh call id."""

    def reply(call: ScriptedCall) -> Completion:
        return tool_call(
            f'{{"value": {value}}}', id=f"call_{id(call)}", usd=usd, input_tokens=5, output_tokens=2
        )

    return reply


async def records(harness: AsyncEnvironmentHarness, session_id: str) -> list[Record]:
    return [record async for record in harness.records(session_id)]


def executed(found: list[Record]) -> list[Any]:
    return [r.payload.action for r in found if isinstance(r.payload, ActionExecuted)]


async def test_a_model_agent_plays_a_session(store_path: Path) -> None:
    provider = ScriptedProvider([always(1)] * 3)
    agent = ModelAgent(provider, system="Reach the target.")
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": agent}
    )
    session = await harness.run(START, turns=3)
    assert session.status == "completed"
    found = await records(harness, session.id)
    assert executed(found) == [{"value": 1}] * 3
    [created] = [r.payload for r in found if isinstance(r.payload, SessionCreated)]
    assert created.config.participants["alice"].implementation == agent.implementation
    costs = [r.payload for r in found if isinstance(r.payload, Cost)]
    assert [(c.input_tokens, c.output_tokens) for c in costs] == [(5, 2)] * 3
    # The last call saw the whole conversation: two earlier exchanges and their outcomes.
    last = provider.calls[-1].messages
    assert [m.role for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "tool",
        "user",
    ]
    assert last[-1].content.startswith(
        'Since your last answer:\n- turn 2: you did {"value": 1}; outcome: {"total": 2, "added": 1}'
    )
    assert await harness.verify()


async def test_no_valid_action_fails_the_session_with_every_answer_recorded(
    store_path: Path,
) -> None:
    provider = ScriptedProvider(["I pass.", '{"value": 99}'])
    agent = ModelAgent(provider, attempts=2)
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": agent}
    )
    session = await harness.run(START, turns=2)
    assert session.status == "failed"
    assert session.reason is not None
    assert "NoValidActionError: the model gave no valid action in 2 asks" in session.reason
    assert "$.value must be at most 10, not 99" in session.reason
    logs = [r.payload for r in await records(harness, session.id) if isinstance(r.payload, Log)]
    assert [(log.level, log.stream) for log in logs] == [("warning", "model-agent")] * 2
    assert logs[0].message.endswith("): I pass.")
    assert logs[1].message.endswith('): {"value": 99}')


async def test_what_the_failed_asks_cost_is_recorded_and_counted(store_path: Path) -> None:
    provider = ScriptedProvider([priced("I pass.", usd=0.01), priced("no", usd=0.02)])
    agent = ModelAgent(provider, attempts=2)
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": agent}
    )
    session = await harness.run(START, turns=2)
    assert session.status == "failed"
    [cost] = [r for r in await records(harness, session.id) if isinstance(r.payload, Cost)]
    assert (cost.turn, cost.participant) == (1, "alice")
    assert cost.payload.usd == pytest.approx(0.03)
    assert (cost.payload.input_tokens, cost.payload.output_tokens) == (20, 20)


async def test_an_endpoint_that_keeps_refusing_fails_the_session_clearly(store_path: Path) -> None:
    too_many = ProviderError(
        "POST http://127.0.0.1:9/v1/chat/completions failed after 4 attempts: "
        "429 Too Many Requests: slow down",
        status=429,
        attempts=4,
    )
    agent = ModelAgent(ScriptedProvider([too_many]))
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": agent}
    )
    session = await harness.run(START, turns=2)
    assert session.status == "failed"
    assert session.reason is not None
    assert "ProviderError" in session.reason
    assert "failed after 4 attempts: 429 Too Many Requests" in session.reason


async def test_its_own_budget_stops_the_session_and_a_larger_one_resumes_it(
    store_path: Path,
) -> None:
    provider = ScriptedProvider([always(1, usd=0.01)] * 5)
    small = ModelAgent(provider, budget=Budget(usd=0.025))
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": small}, checkpoint_every=1
    )
    session = await harness.run(START, turns=5)
    assert session.status == "stopped"
    assert session.reason is not None
    assert "the model agent spent $0.0300 of a $0.0250 budget" in session.reason
    assert session.turns_completed == 3
    assert len(provider.calls) == 3  # the fourth call was never made

    larger = ModelAgent(provider, budget=Budget(usd=0.035))
    again = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": larger}, checkpoint_every=1
    )
    resumed = await again.resume(session.id)
    # The spending came back with the conversation: $0.03 spent, one more call affordable.
    assert resumed.status == "stopped"
    assert resumed.turns_completed == 4
    assert len(provider.calls) == 4
    assert provider.calls[3].messages[-1].content.startswith("Since your last answer:\n- turn 3")


def hinter(ctx: HookContext, notebook: dict[str, Any]) -> AddHint:
    return AddHint(text="Move by one at most.")


def guard(ctx: HookContext, notebook: dict[str, Any]) -> BlockAndPrompt | None:
    if isinstance(ctx.action, dict) and abs(ctx.action.get("value", 0)) > 1:
        return BlockAndPrompt(message="steps bigger than one are not allowed")
    return None


async def test_hints_and_vetoes_from_hooks_reach_the_model(store_path: Path) -> None:
    provider = ScriptedProvider([always(5), always(1)])
    agent = ModelAgent(provider)
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": agent},
        hooks=Hooks("guard@1", make_pre_hint=hinter, on_before_action=guard),
    )
    session = await harness.run(START, turns=1)
    assert session.status == "completed"
    first, second = provider.calls
    assert "Hints:\n- Move by one at most.\n\nCall act" in first.messages[-1].content
    assert "hints:" not in first.messages[-1].content
    assert second.messages[-1].content.startswith(
        "Since your last answer:\n"
        '- turn 1: your action {"value": 5} was vetoed: steps bigger than one'
    )
    assert executed(await records(harness, session.id)) == [{"value": 1}]


async def test_a_branch_and_a_resume_continue_the_same_conversation(store_path: Path) -> None:
    provider = ScriptedProvider([always(1)] * 6)
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": ModelAgent(provider, window=5)},
        checkpoint_every=1,
    )
    parent = await harness.run(START, turns=2)
    assert len(provider.calls) == 2
    first_turn = next(c for c in await harness.checkpoints(parent.id) if c.turn == 1)
    child = await harness.branch(first_turn, intervention={"kind": "reset-total", "value": 7})
    child = await harness.continue_(child.id, turns=1)
    assert (child.status, child.turns_completed) == ("completed", 2)
    branched = provider.calls[2].messages
    # The branch remembers turn 1 (its parent's first exchange), not the parent's turn 2 ...
    assert [m.role for m in branched] == ["system", "user", "assistant", "tool", "user"]
    assert branched[:3] == provider.calls[1].messages[:3]
    # ... and sees its own turn: the total the intervention set.
    assert "Turn 2. You observe:\ntotal: 7" in branched[-1].content

    resumed = await harness.continue_(parent.id, turns=1)
    assert (resumed.status, resumed.turns_completed) == ("completed", 3)
    continued = provider.calls[3].messages
    assert continued[:5] == provider.calls[1].messages
    assert "Turn 3. You observe:\ntotal: 2" in continued[-1].content


class Silent:
    """An endpoint that never answers: only a deadline ends the call."""

    name = "silent"
    model = "never"

    async def complete(self, messages: Any, **options: Any) -> Completion:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_call_cut_by_the_action_timeout_fails_the_session_cleanly(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": ModelAgent(Silent())},
        action_timeout=0.05,
    )
    session = await harness.run(START, turns=2)
    assert session.status == "failed"
    assert session.reason == "agent 'alice' did not answer within 0.05s (action_timeout)"
