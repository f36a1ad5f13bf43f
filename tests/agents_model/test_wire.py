"""Tools, tool calls and JSON mode on the wire: the OpenAI-compatible provider over real HTTP
on loopback, and a ModelAgent driving it (both backends)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from envharness.agents import ModelAgent
from envharness.llm import (
    Message,
    OpenAICompatibleProvider,
    ProviderError,
    StructuredProvider,
    ToolCall,
)
from tests.agents_model._support import Context
from tests.llm._support import FakeEndpoint, Reply, completion, status

pytestmark = pytest.mark.anyio

TOOL = {"type": "function", "function": {"name": "act", "parameters": {"type": "object"}}}


def called(*calls: dict[str, Any], content: str | None = None) -> Reply:
    body = {
        "id": "chatcmpl-1",
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": list(calls)},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 4},
    }
    return Reply(body=json.dumps(body).encode())


def provider(url: str, **options: Any) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(url, "fake-model", api_key_env=None, backoff=0.0, **options)


async def test_tools_and_tool_messages_go_out_and_tool_calls_come_back(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, url = endpoint
    fake.queue(
        called(
            {
                "id": "c9",
                "type": "function",
                "function": {"name": "act", "arguments": '{"value": 1}'},
            },
            {"type": "function", "function": {"name": "act", "arguments": {"value": 2}}},
        )
    )
    client = provider(url)
    assert isinstance(client, StructuredProvider)
    assert client.supports_tools
    history = [
        Message("user", "go"),
        Message("assistant", "", tool_calls=(ToolCall(id="c1", name="act", arguments="{}"),)),
        Message("tool", "Received.", tool_call_id="c1"),
    ]
    answer = await client.complete(
        history, tools=[TOOL], tool_choice={"type": "function", "function": {"name": "act"}}
    )
    assert answer.text == ""
    assert answer.finish_reason == "tool_calls"
    assert answer.tool_calls == (
        ToolCall(id="c9", name="act", arguments='{"value": 1}'),
        ToolCall(id="call_2", name="act", arguments='{"value":2}'),
    )
    body = fake.requests[0].body
    assert body["tools"] == [TOOL]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "act"}}
    assert "response_format" not in body
    assert body["messages"] == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "act", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "Received.", "tool_call_id": "c1"},
    ]


async def test_json_mode_is_a_response_format(endpoint: tuple[FakeEndpoint, str]) -> None:
    fake, url = endpoint
    fake.queue(completion('{"value": 3}'))
    answer = await provider(url).complete(
        [Message("user", "go")], response_format={"type": "json_object"}
    )
    assert answer.text == '{"value": 3}'
    assert answer.tool_calls == ()
    assert fake.requests[0].body["response_format"] == {"type": "json_object"}
    assert "tools" not in fake.requests[0].body
    assert not provider(url, supports_tools=False).supports_tools


async def test_a_model_agent_falls_back_to_text_when_the_endpoint_refuses_tools(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, url = endpoint
    fake.queue(
        status(400, '{"error": {"message": "tools are not supported by this server"}}'),
        completion('Adding one.\n```json\n{"value": 1}\n```'),
        completion('{"value": 2}'),
    )
    agent = ModelAgent(provider(url))
    context = Context()
    async with agent.lifespan(context.context):
        first = await agent.act({"total": 0})
        context.turn = 2
        second = await agent.act({"total": 1})
    assert (first.action, second.action) == ({"value": 1}, {"value": 2})
    assert ["tools" in request.body for request in fake.requests] == [True, False, False]
    assert first.cost is not None
    assert (first.cost.input_tokens, first.cost.output_tokens) == (11, 7)
    assert agent.spending.tokens == 36
    [(message, _, _)] = context.logs
    assert "400 Bad Request" in message
    assert "tools are not supported" in message


async def test_a_model_agent_plays_through_tool_calls_over_http(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, url = endpoint
    fake.queue(
        called(
            {
                "id": "a",
                "type": "function",
                "function": {"name": "act", "arguments": '{"value": 50}'},
            }
        ),
        called(
            {
                "id": "b",
                "type": "function",
                "function": {"name": "act", "arguments": '{"value": 5}'},
            }
        ),
    )
    agent = ModelAgent(provider(url))
    context = Context()
    async with agent.lifespan(context.context):
        reply = await agent.act({"total": 0})
    assert reply.action == {"value": 5}
    retry = fake.requests[1].body["messages"]
    assert retry[-1] == {
        "role": "tool",
        "content": (
            "That is not a valid action: $.value must be at most 10, not 50. "
            "Call act with your action."
        ),
        "tool_call_id": "a",
    }
    assert retry[-2]["tool_calls"][0]["id"] == "a"


async def test_a_refusal_still_fails_in_tools_mode(endpoint: tuple[FakeEndpoint, str]) -> None:
    fake, url = endpoint
    fake.queue(status(400, "no tools here"))
    agent = ModelAgent(provider(url), action_format="tools")
    with pytest.raises(ProviderError, match="was refused: 400"):
        await agent.act({"total": 0})
