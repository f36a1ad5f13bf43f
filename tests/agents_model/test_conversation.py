"""The conversation window: what each call sends, and what a checkpoint keeps."""

from __future__ import annotations

from typing import Any

from envharness.agents.conversation import (
    TOOL_CALL_RECEIVED,
    Conversation,
    estimate_tokens,
    to_message,
)
from envharness.llm import Message, ToolCall

SYSTEM = {"role": "system", "content": "rules"}


def exchange(number: int, *, call: bool = False, size: int = 0) -> list[dict[str, Any]]:
    answer: dict[str, Any] = {"role": "assistant", "content": f"a{number}"}
    if call:
        answer = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{number}",
                    "type": "function",
                    "function": {"name": "act", "arguments": "{}"},
                }
            ],
        }
    return [{"role": "user", "content": f"u{number}" + "x" * size}, answer]


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [m.get("content") or m["tool_calls"][0]["id"] for m in messages]


def test_the_window_keeps_the_last_exchanges_and_always_the_system_message() -> None:
    conversation = Conversation(window=2)
    for number in range(1, 5):
        conversation.commit([], exchange(number), [], system_sent=True)
    current = [{"role": "user", "content": "now"}]
    sent = conversation.context(SYSTEM, [], current)
    assert contents(sent) == ["rules", "u3", "a3", "u4", "a4", "now"]
    assert len(conversation.exchanges) == 2  # older ones are not even kept


def test_a_tool_reply_stays_with_its_call_when_the_window_moves() -> None:
    conversation = Conversation(window=1)
    conversation.commit([], exchange(1, call=True), ["c1"], system_sent=True)
    replies = conversation.replies_to_open_calls()
    assert replies == [{"role": "tool", "tool_call_id": "c1", "content": TOOL_CALL_RECEIVED}]
    sent = conversation.context(SYSTEM, replies, [{"role": "user", "content": "u2"}])
    assert contents(sent) == ["rules", "u1", "c1", TOOL_CALL_RECEIVED, "u2"]
    conversation.commit(replies, exchange(2, call=True), ["c2"], system_sent=True)
    [kept] = conversation.exchanges
    assert contents(list(kept)) == ["u2", "c2"]
    # The next call sends exchange 2 closed by its own reply, never a reply without its call.
    sent = conversation.context(SYSTEM, conversation.replies_to_open_calls(), [])
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[-1]["tool_call_id"] == "c2"


def test_a_window_of_zero_sends_only_the_system_message_and_the_current_exchange() -> None:
    conversation = Conversation(window=0)
    conversation.commit([], exchange(1, call=True), ["c1"], system_sent=True)
    replies = conversation.replies_to_open_calls()
    assert contents(conversation.context(SYSTEM, replies, exchange(2))) == ["rules", "u2", "a2"]


def test_the_token_cap_drops_the_oldest_exchanges_first() -> None:
    conversation = Conversation(window=10, max_context_tokens=200)
    for number in range(1, 6):
        conversation.commit([], exchange(number, size=200), [], system_sent=True)  # 58 each
    sent = conversation.context(SYSTEM, [], exchange(6))
    assert [m["content"][:2] for m in sent if m["role"] == "user"] == ["u3", "u4", "u5", "u6"]
    assert estimate_tokens(sent) <= 200
    # The current exchange is sent whole even when it alone is over the cap.
    huge = conversation.context(SYSTEM, [], exchange(7, size=2000))
    assert contents(huge)[0] == "rules"
    assert len(huge) == 3


def test_a_snapshot_restores_the_same_conversation_into_a_smaller_window() -> None:
    conversation = Conversation(window=5)
    for number in range(1, 4):
        conversation.commit([], exchange(number), [], system_sent=True)
    conversation.commit([], exchange(4, call=True), ["c4"], system_sent=True)
    state = conversation.snapshot()
    state.exchanges[0].append({"role": "user", "content": "mutating the snapshot"})
    assert len(conversation.exchanges[0]) == 2  # the snapshot is a copy
    smaller = Conversation(window=2)
    smaller.restore(conversation.snapshot())
    assert [e[0]["content"] for e in smaller.exchanges] == ["u3", "u4"]
    assert smaller.system_sent
    assert smaller.replies_to_open_calls()[0]["tool_call_id"] == "c4"


def test_messages_convert_to_the_provider_contract() -> None:
    [user, call] = exchange(1, call=True)
    assert to_message(user) == Message("user", "u1")
    assert to_message(call) == Message(
        "assistant", "", tool_calls=(ToolCall(id="c1", name="act", arguments="{}"),)
    )
    reply = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    assert to_message(reply) == Message("tool", "ok", tool_call_id="c1")
    assert estimate_tokens([call]) == 4 + len("act{}") // 4
