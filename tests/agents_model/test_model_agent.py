"""ModelAgent's logic, branch by branch, against a scripted provider (no model, no network)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec
import pytest

from envharness.agents import ModelAgent, NoValidActionError
from envharness.agents.model import LOG_STREAM, MAX_NOTES, STATE_FORMAT
from envharness.contracts.agent import AgentCapabilities
from envharness.contracts.budget import Budget
from envharness.errors import BudgetExhausted, ConfigurationError
from envharness.fixtures import SyntheticObservation
from envharness.llm import Completion, Message, ProviderError, ScriptedCall, ScriptedProvider
from tests.agents_model._support import Context, priced, tool_call

pytestmark = pytest.mark.anyio

OBSERVATION = {"total": 4, "turn": 3, "target": 9, "my_contributions": [1, 3]}


async def started(agent: ModelAgent, context: Context | None = None) -> Context:
    context = context or Context()
    async with agent.lifespan(context.context):
        pass
    return context


def roles(call: ScriptedCall) -> list[str]:
    return [message.role for message in call.messages]


async def test_a_tool_call_is_the_action_with_its_cost_and_transcript() -> None:
    provider = ScriptedProvider([tool_call('{"value": 2}', input_tokens=30, output_tokens=5)])
    agent = ModelAgent(provider, system="You add numbers.", temperature=0.3, max_tokens=64)
    await started(agent)
    reply = await agent.act(OBSERVATION)
    assert reply.action == {"value": 2}
    assert reply.cost is not None
    assert (reply.cost.input_tokens, reply.cost.output_tokens) == (30, 5)
    [call] = provider.calls
    assert (call.temperature, call.max_tokens) == (0.3, 64)
    assert call.tool_choice == {"type": "function", "function": {"name": "act"}}
    [tool] = call.tools or ()
    assert tool["function"]["name"] == "act"
    assert tool["function"]["parameters"]["properties"] == {
        "value": {"type": "integer", "minimum": -10, "maximum": 10}
    }
    assert call.response_format is None
    system, user = call.messages
    assert system.content.startswith("You add numbers.\n\nYou are alice")
    assert "synthetic-total (version 1)" in system.content
    assert user.content == (
        "Turn 1. You observe:\ntotal: 4\nturn: 3\ntarget: 9\nmy_contributions: [1, 3]\n\n"
        "Call act with your action."
    )
    assert [m["role"] for m in reply.transcript] == ["system", "user", "assistant"]
    assert reply.transcript[2]["tool_calls"][0]["function"]["arguments"] == '{"value": 2}'
    assert agent.spending.tokens == 35
    assert agent.spending.calls == 1
    assert call.seed is not None
    assert 0 <= call.seed < 2**31


async def test_invalid_json_in_a_tool_call_is_asked_again_with_the_reason() -> None:
    provider = ScriptedProvider(
        [
            tool_call('{"value": ', id="c1"),
            tool_call('{"value": 11}', id="c2"),
            tool_call('{"value": 1}', id="c3"),
        ]
    )
    agent = ModelAgent(provider)
    context = await started(agent)
    reply = await agent.act(OBSERVATION)
    assert reply.action == {"value": 1}
    second, third = provider.calls[1].messages, provider.calls[2].messages
    assert second[-1].role == "tool"
    assert second[-1].tool_call_id == "c1"
    assert second[-1].content.startswith(
        "That is not a valid action: the arguments of your act call are not valid JSON"
    )
    assert third[-1].content == (
        "That is not a valid action: $.value must be at most 10, not 11. Call act with your action."
    )
    assert [m["role"] for m in reply.transcript] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert context.logs == []  # an act that succeeds logs nothing: its transcript has it all
    assert provider.calls[0].seed != provider.calls[1].seed


@pytest.mark.parametrize(
    ("answers", "problems"),
    [
        (["I'd rather not play.", "No.", "Still no."], ["no JSON object"] * 3),
        (["", "  ", ""], ["your answer was empty"] * 3),
        (
            ['{"value": "two"}', '{"amount": 2}', '```json\n{"value": -11}\n```'],
            [
                '$.value must be an integer, not a string "two"',
                "$ is missing the required field(s) value",
                "$.value must be at least -10, not -11",
            ],
        ),
    ],
)
async def test_no_valid_action_after_every_attempt_fails_with_each_answer_logged(
    answers: list[str], problems: list[str]
) -> None:
    provider = ScriptedProvider(answers)
    agent = ModelAgent(provider, action_format="text", attempts=3)
    context = await started(agent)
    with pytest.raises(NoValidActionError) as caught:
        await agent.act(OBSERVATION)
    assert str(caught.value).startswith(
        "the model gave no valid action in 3 asks (each answer is in the session's log records)"
    )
    assert caught.value.answers == tuple(answer or "(empty)" for answer in answers)
    assert all(want in got for want, got in zip(problems, caught.value.problems, strict=True))
    assert len(context.logs) == 3
    for number, (message, level, stream) in enumerate(context.logs, start=1):
        assert message.startswith(f"answer {number} of 3 was not a valid action (")
        assert (level, stream) == ("warning", LOG_STREAM)
    # Each re-ask is a user message naming the problem (no tool calls in text mode).
    assert roles(provider.calls[2]) == ["system", "user", "assistant", "user", "assistant", "user"]
    assert provider.calls[1].messages[-1].content.startswith("That is not a valid action: ")
    # Nothing of a failed act is kept: the next act starts from the same conversation.
    assert agent.messages[1:] == []


async def test_one_attempt_means_no_re_ask() -> None:
    provider = ScriptedProvider(["nothing"])
    agent = ModelAgent(provider, action_format="text", attempts=1)
    with pytest.raises(NoValidActionError, match=r"in 1 ask \("):
        await agent.act(OBSERVATION)
    assert len(provider.calls) == 1


async def test_text_mode_shows_the_schema_and_takes_json_from_prose() -> None:
    provider = ScriptedProvider(['Going up by one.\n```json\n{"value": 1}\n```'])
    agent = ModelAgent(provider, action_format="text")
    await started(agent)
    reply = await agent.act(OBSERVATION)
    assert reply.action == {"value": 1}
    [call] = provider.calls
    assert call.tools is None
    assert call.response_format is None
    system = call.messages[0].content
    assert "End your answer with your action: one JSON object that fits this JSON Schema" in system
    assert '"maximum": 10' in system
    assert call.messages[1].content.endswith(
        'End your answer with your action as one JSON object, like {"value": 0}.'
    )
    assert 'For example (any values that fit will do): {"value": 0}' in system


async def test_json_mode_asks_for_a_json_object() -> None:
    provider = ScriptedProvider(['{"value": 0}'])
    agent = ModelAgent(provider, action_format="json")
    await started(agent)
    assert (await agent.act(OBSERVATION)).action == {"value": 0}
    [call] = provider.calls
    assert call.response_format == {"type": "json_object"}
    assert call.tools is None
    assert "Answer with your action only: one JSON object" in call.messages[0].content


async def test_auto_falls_back_to_text_for_the_session_when_tools_are_refused() -> None:
    refusal = ProviderError(
        "POST x was refused: 400 Bad Request: tools are not supported", status=400
    )
    provider = ScriptedProvider([refusal, '{"value": 1}', '{"value": 2}'])
    agent = ModelAgent(provider)
    context = await started(agent)
    before = agent.action_format
    first = await agent.act(OBSERVATION)
    assert first.action == {"value": 1}
    assert (before, agent.action_format) == ("tools", "text")
    refused, retried = provider.calls[:2]
    assert refused.tools is not None
    assert retried.tools is None
    assert "End your answer with your action: one JSON object" in retried.messages[0].content
    assert retried.messages[1].content.endswith('one JSON object, like {"value": 0}.')
    assert first.transcript[0]["content"] == retried.messages[0].content
    [(message, level, stream)] = context.logs
    assert message.startswith("the endpoint refused tools (POST x was refused: 400")
    assert (level, stream) == ("warning", LOG_STREAM)
    await agent.act(OBSERVATION)
    assert provider.calls[2].tools is None  # remembered for the session ...
    fresh = agent()
    await started(fresh)
    assert fresh.action_format == "tools"  # ... not beyond it


async def test_explicit_tools_mode_does_not_fall_back() -> None:
    provider = ScriptedProvider([ProviderError("refused: 400", status=400)])
    agent = ModelAgent(provider, action_format="tools")
    with pytest.raises(ProviderError, match="refused: 400"):
        await agent.act(OBSERVATION)


@pytest.mark.parametrize(
    "failure",
    [
        ProviderError(
            "POST x failed after 4 attempts: 429 Too Many Requests: slow down",
            status=429,
            attempts=4,
        ),
        ProviderError(
            "POST x failed after 4 attempts: no complete answer within timeout=5 s", attempts=4
        ),
        ProviderError("POST x failed after 1 attempt: 500 Internal Server Error", status=500),
    ],
)
async def test_a_provider_that_gives_up_is_raised_with_earlier_answers_logged(
    failure: ProviderError,
) -> None:
    provider = ScriptedProvider(["no idea", failure])
    agent = ModelAgent(provider)
    context = await started(agent)
    with pytest.raises(ProviderError) as caught:
        await agent.act(OBSERVATION)
    assert caught.value is failure
    [(message, _, _)] = context.logs
    assert message.startswith("answer 1 of 1 was not a valid action (your answer has no JSON")


async def test_hints_become_a_section_of_the_prompt() -> None:
    provider = ScriptedProvider([tool_call('{"value": 1}'), tool_call('{"value": 1}')])
    agent = ModelAgent(provider)
    await started(agent)
    await agent.act({**OBSERVATION, "hints": ["Aim for 9.", "Small steps."]})
    user = provider.calls[0].messages[-1].content
    assert "Hints:\n- Aim for 9.\n- Small steps.\n\nCall act" in user
    assert "hints:" not in user
    wrapped = {"observation": SyntheticObservation(5, 4, None, [1]), "hints": ["Stop at 5."]}
    await agent.act(wrapped)
    user = provider.calls[1].messages[-1].content
    shown = "total: 5\nturn: 4\ntarget: null\nmy_contributions: [1]\n\nHints:\n- Stop at 5."
    assert f"You observe:\n{shown}" in user


async def test_a_veto_is_shown_when_the_agent_is_asked_again() -> None:
    provider = ScriptedProvider(
        [
            tool_call('{"value": 9}', id="c1"),
            tool_call('{"value": 1}', id="c2"),
            tool_call('{"value": 0}'),
        ]
    )
    agent = ModelAgent(provider)
    context = await started(agent)
    assert AgentCapabilities.of(agent).vetoes is agent
    await agent.act(OBSERVATION)
    agent.vetoed(1, {"value": 9}, "too big a step")
    reply = await agent.act(OBSERVATION)
    messages = provider.calls[1].messages
    assert messages[-2] == Message("tool", "Received.", tool_call_id="c1")
    assert messages[-1].content.startswith(
        "Since your last answer:\n"
        '- turn 1: your action {"value": 9} was vetoed: too big a step\n\nTurn 1.'
    )
    assert [m["role"] for m in reply.transcript] == ["tool", "user", "assistant"]
    context.turn = 2
    await agent.act(OBSERVATION)
    assert provider.calls[2].messages[-1].content.startswith("Turn 2.")  # a veto is shown once


@pytest.mark.parametrize(
    ("call", "note"),
    [
        ((1, {"total": 6}, None), 'turn 1: you did {"value": 2}; outcome: {"total": 6}'),
        (
            (1, None, "value out of range"),
            'turn 1: your action {"value": 2} was blocked: value out of range',
        ),
        (
            (1, {"total": 5}, None, {"value": 1}),
            'turn 1: your action {"value": 2} was changed to {"value": 1}; outcome: {"total": 5}',
        ),
        ((1, None, None, {"value": 2}), 'turn 1: you did {"value": 2}'),
        ((2, {"winner": "bob"}, None), 'turn 2 (you did not act): {"winner": "bob"}'),
    ],
)
async def test_feedback_is_shown_at_the_next_ask(call: tuple[Any, ...], note: str) -> None:
    provider = ScriptedProvider([tool_call('{"value": 2}'), tool_call('{"value": 0}')])
    agent = ModelAgent(provider)
    await started(agent)
    await agent.act(OBSERVATION)
    turn, outcome, blocked, *action = call
    agent.feedback(turn, outcome, blocked, action=action[0] if action else None)
    await agent.act(OBSERVATION)
    assert (
        provider.calls[1]
        .messages[-1]
        .content.startswith(f"Since your last answer:\n- {note}\n\nTurn")
    )


async def test_nothing_to_say_says_nothing_and_old_notes_are_counted_not_kept() -> None:
    provider = ScriptedProvider([tool_call('{"value": 0}')])
    agent = ModelAgent(provider)
    agent.feedback(1, None, None)
    for turn in range(1, MAX_NOTES + 4):
        agent.feedback(turn, {"turn": turn}, None)
    await agent.act(OBSERVATION)
    lines = provider.calls[0].messages[-1].content.split("\n")
    assert lines[1] == "- (3 earlier events not shown)"
    assert lines[2] == '- turn 4 (you did not act): {"turn": 4}'
    assert len([line for line in lines if line.startswith("- turn")]) == MAX_NOTES


async def test_the_window_trims_what_each_call_sends() -> None:
    provider = ScriptedProvider([tool_call('{"value": 1}', id=f"c{n}") for n in range(4)])
    agent = ModelAgent(provider, window=1)
    context = await started(agent)
    for turn in range(1, 5):
        context.turn = turn
        await agent.act(OBSERVATION)
    assert roles(provider.calls[0]) == ["system", "user"]
    assert roles(provider.calls[1]) == ["system", "user", "assistant", "tool", "user"]
    last = provider.calls[3].messages
    assert roles(provider.calls[3]) == ["system", "user", "assistant", "tool", "user"]
    assert last[1].content.startswith("Turn 3.")  # turn 1 and 2 fell out of the window
    assert last[3].tool_call_id == "c2"


async def test_a_context_token_cap_trims_further() -> None:
    provider = ScriptedProvider([tool_call('{"value": 1}', id=f"c{n}") for n in range(3)])
    agent = ModelAgent(provider, window=10, max_context_tokens=520)
    await started(agent)
    for _ in range(3):
        await agent.act({"board": "x" * 600})
    assert roles(provider.calls[2]) == ["system", "user", "assistant", "tool", "user"]


async def test_without_a_session_the_agent_still_acts_on_any_object() -> None:
    provider = ScriptedProvider(['{"anything": [1, 2]}'])
    agent = ModelAgent(provider, action_format="text")
    reply = await agent.act("a plain text observation")
    assert reply.action == {"anything": [1, 2]}
    [call] = provider.calls
    assert call.seed is None
    assert 'You are the player, playing the role "player"' in call.messages[0].content
    assert "(any JSON object)" in call.messages[0].content
    assert "Turn 1. You observe:\na plain text observation" in call.messages[1].content


async def test_a_union_action_is_wrapped_in_an_action_argument() -> None:
    class Fold(msgspec.Struct, tag="fold"):
        pass

    class Raise(msgspec.Struct, tag="raise"):
        chips: int

    provider = ScriptedProvider(
        [
            tool_call('{"type": "raise", "chips": 5}'),
            tool_call('{"action": {"type": "raise", "chips": 5}}'),
        ]
    )
    agent = ModelAgent(provider)
    context = Context()
    environment = msgspec.structs.replace(
        context.context.environment, action_schema=msgspec.json.schema(Fold | Raise)
    )
    context.context = type(context.context)(**{
        **{f: getattr(context.context, f) for f in context.context.__dataclass_fields__},
        "environment": environment,
    })  # fmt: skip
    await started(agent, context)
    reply = await agent.act({"pot": 10})
    assert reply.action == {"type": "raise", "chips": 5}
    parameters = (provider.calls[0].tools or ())[0]["function"]["parameters"]
    assert parameters["required"] == ["action"]
    assert "$defs" in parameters
    assert "its `action` argument" in provider.calls[0].messages[0].content
    assert "its 'action' argument" in provider.calls[1].messages[-1].content


async def test_several_tool_calls_each_get_a_reply() -> None:
    two = Completion(
        text="",
        model="m",
        tool_calls=(
            *tool_call('{"value": 50}', id="a").tool_calls,
            *tool_call('{"value": 1}', id="b", name="look").tool_calls,
        ),
    )
    provider = ScriptedProvider(
        [two, tool_call('{"value": 1}', name="look", id="c"), tool_call('{"value": 1}', id="d")]
    )
    agent = ModelAgent(provider, attempts=3)
    await started(agent)
    await agent.act(OBSERVATION)
    replies = [m for m in provider.calls[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content[:22]) for m in replies] == [
        ("a", "That is not a valid ac"),
        ("b", "Not taken: call only a"),
    ]
    [reply] = [m for m in provider.calls[2].messages[-1:]]
    assert reply.content.startswith("That is not a valid action: you called look; call act")


# -- budgets -------------------------------------------------------------------------------------


async def test_a_money_budget_stops_before_the_call_it_cannot_afford() -> None:
    provider = ScriptedProvider(
        [priced('{"value": 1}', usd=0.02), priced('{"value": 1}', usd=0.02)]
    )
    agent = ModelAgent(provider, action_format="text", budget=Budget(usd=0.03))
    await agent.act(OBSERVATION)
    await agent.act(OBSERVATION)
    with pytest.raises(BudgetExhausted) as caught:
        await agent.act(OBSERVATION)
    assert str(caught.value) == "the model agent spent $0.0400 of a $0.0300 budget"
    assert len(provider.calls) == 2


async def test_a_token_budget_can_run_out_between_re_asks() -> None:
    provider = ScriptedProvider([priced("no", usd=0.0, tokens=60), priced('{"value": 1}', usd=0.0)])
    agent = ModelAgent(provider, action_format="text", budget=Budget(tokens=100))
    context = await started(agent)
    with pytest.raises(
        BudgetExhausted, match="the model agent used 120 tokens of a 100-token budget"
    ):
        await agent.act(OBSERVATION)
    assert len(provider.calls) == 1
    [(message, _, _)] = context.logs  # the answer it paid for is not lost
    assert message.startswith("answer 1 of 1 was not a valid action")


class Stuck:
    """A provider whose endpoint never answers (the wall-time budget must end the call)."""

    name = "stuck"
    model = "never"

    async def complete(self, messages: Sequence[Message], **options: Any) -> Completion:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_wall_time_budget_bounds_the_call_itself() -> None:
    agent = ModelAgent(Stuck(), budget=Budget(seconds=0.05))
    assert agent.action_format == "text"  # a plain provider is asked in text
    with pytest.raises(BudgetExhausted, match=r"s budget, during a model call$"):
        await agent.act(OBSERVATION)
    assert agent.spending.seconds > 0
    with pytest.raises(BudgetExhausted, match=r"^the model agent ran .* s of a 0\.1 s budget$"):
        await agent.act(OBSERVATION)  # refused before calling


# -- checkpoints -----------------------------------------------------------------------------------


async def test_snapshot_and_restore_continue_the_same_conversation() -> None:
    provider = ScriptedProvider([tool_call('{"value": 1}', id=f"c{n}", usd=0.01) for n in range(4)])
    agent = ModelAgent(provider, budget=Budget(usd=1.0))
    context = await started(agent)
    await agent.act(OBSERVATION)
    context.turn = 2
    agent.feedback(1, {"total": 5}, None, action={"value": 1})
    await agent.act(OBSERVATION)
    agent.feedback(2, {"total": 6}, None, action={"value": 1})
    assert agent.can_snapshot
    state = await agent.snapshot()
    assert state["format"] == STATE_FORMAT
    assert msgspec.json.decode(msgspec.json.encode(state)) == state  # JSON through and through

    resumed = agent()
    await started(resumed, Context(turn=3))
    resumed.restore(state)
    assert resumed.spending.usd == pytest.approx(0.02)
    await resumed.act(OBSERVATION)
    original = provider.calls[1].messages
    continued = provider.calls[2].messages
    assert continued[: len(original)] == original
    assert continued[-1].content.startswith(
        'Since your last answer:\n- turn 2: you did {"value": 1}'
    )
    assert continued[-2] == Message("tool", "Received.", tool_call_id="c1")

    branch = agent()
    await started(branch, Context(session_id="ses_branch", turn=3))
    branch.restore(state)
    assert branch.spending.usd == 0.0  # a branch is another session, with its own budget
    assert branch.messages == agent.messages


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"nothing": 1}, "it was not written by a model agent"),
        ([1, 2], "it was not written by a model agent"),
        ({"format": "other/9", "template": "t", "conversation": {}}, "state of format 'other/9'"),
    ],
)
async def test_a_foreign_state_is_refused_clearly(state: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ModelAgent(ScriptedProvider([])).restore(state)


# -- construction -------------------------------------------------------------------------------


async def test_each_call_gives_a_fresh_copy_sharing_the_settings() -> None:
    provider = ScriptedProvider([tool_call('{"value": 1}'), tool_call('{"value": 1}')])
    factory = ModelAgent(provider, system="S", budget=Budget(tokens=10))
    first, second = factory(), factory()
    assert first is not second
    assert first.implementation == second.implementation == factory.implementation
    assert first.budget is factory.budget
    assert first.provider is provider
    await first.act(OBSERVATION)
    assert [m["role"] for m in first.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages == [first.messages[0]]
    assert repr(first) == f"ModelAgent({factory.implementation!r})"
    capabilities = AgentCapabilities.of(first)
    assert capabilities.is_async
    assert capabilities.lifespan is first
    assert capabilities.feedback_with_action
    assert capabilities.snapshots is first


class PlainProvider:
    name = "plain"
    model = "m"

    async def complete(self, messages: Sequence[Message], **options: Any) -> Completion:
        raise AssertionError("not called")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"temperature": 2.5}, "temperature must be between 0 and 2, not 2.5"),
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"temperature": math.nan}, "temperature must be between 0 and 2"),
        ({"max_tokens": 0}, r"max_tokens must be an integer >= 1 \(or None\), not 0"),
        ({"attempts": 0}, "attempts must be an integer >= 1, not 0"),
        ({"attempts": True}, "attempts must be an integer >= 1, not True"),
        ({"window": -1}, "window must be an integer >= 0, not -1"),
        ({"max_context_tokens": 0}, "max_context_tokens must be an integer >= 1"),
        ({"budget": {"usd": 1}}, r"budget must be an envharness Budget\(usd=..."),
        (
            {"action_format": "xml"},
            "action_format must be one of auto, tools, json, text, not 'xml'",
        ),
        ({"system": 3}, "system must be a string or None, not 3"),
        ({"implementation": " "}, "implementation must be a non-empty string or None"),
    ],
)
async def test_bad_settings_are_refused_naming_the_setting(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ModelAgent(ScriptedProvider([]), **options)


async def test_a_format_the_provider_cannot_do_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="provider must be a Provider"):
        ModelAgent("gpt-4o-mini")  # type: ignore[arg-type]
    with pytest.raises(
        ConfigurationError, match="action_format='tools' needs a provider that offers tools"
    ):
        ModelAgent(ScriptedProvider([], supports_tools=False), action_format="tools")
    with pytest.raises(ConfigurationError, match="action_format='tools' needs a provider"):
        ModelAgent(PlainProvider(), action_format="tools")
    with pytest.raises(
        ConfigurationError,
        match="action_format='json' needs a provider that takes a response_format",
    ):
        ModelAgent(PlainProvider(), action_format="json")
    assert ModelAgent(ScriptedProvider([], supports_tools=False)).action_format == "text"
    with pytest.raises(ConfigurationError, match="can let nothing run"):
        Budget(usd=0)


async def test_fields_the_environment_dropped_or_filled_in_are_not_a_rewrite() -> None:
    provider = ScriptedProvider(
        [tool_call('{"value": 2, "why": "closer"}'), tool_call('{"value": 0}')]
    )
    agent = ModelAgent(provider)
    await started(agent)
    await agent.act(OBSERVATION)
    agent.feedback(1, {"total": 6}, None, action={"value": 2, "note": None})
    await agent.act(OBSERVATION)
    note = provider.calls[1].messages[-1].content.split("\n")[1]
    assert note == '- turn 1: you did {"value": 2, "note": null}; outcome: {"total": 6}'
