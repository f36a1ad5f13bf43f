"""Every message round-trips, unknown fields are ignored, and refusals are classified."""

from __future__ import annotations

import msgspec
import pytest

from envharness.protocol import (
    AGENT_MESSAGE_TYPES,
    HOST_MESSAGE_TYPES,
    Act,
    Action,
    ActionCost,
    AgentMessage,
    ErrorMessage,
    Feedback,
    Hello,
    HostMessage,
    Limits,
    LogMessage,
    MessageWriter,
    ProtocolViolationError,
    Ready,
    Restore,
    Restored,
    Shutdown,
    Snapshot,
    State,
    decode_agent_message,
    decode_host_message,
    encode_message,
    message_type,
)
from envharness.protocol.errors import OFFENDING_LIMIT
from tests.protocol._support import ENVIRONMENT, make_hello

HOST_MESSAGES: list[HostMessage] = [
    make_hello(
        protocols=(1, 2),
        turns=5,
        capabilities=("snapshot",),
        limits=Limits(max_line_bytes=4096, act_timeout=2.5, shutdown_grace=1.0),
    ),
    Act(id="1", turn=1, observation={"grid": [[0, 1], [1, 0]]}, actions=({"move": "n"},)),
    Act(id="2", turn=2, observation="line one\nline two"),
    Feedback(turn=1, act_id="1", status="executed", action={"move": "n"}, outcome={"r": 1}),
    Feedback(turn=1, act_id="2", status="blocked", action={"move": "x"}, reason="no such move"),
    Snapshot(id="3"),
    Restore(id="4", state={"memory": ["é", None]}),
    Shutdown(reason="done"),
]
AGENT_MESSAGES: list[AgentMessage] = [
    Ready(protocol=1, implementation="echo@1", capabilities=("snapshot",)),
    Action(id="1", action={"move": "n"}),
    Action(id="2", action={}, cost=ActionCost(input_tokens=3, usd=0.5, model="m")),
    State(id="3", state=[1, "two", {"3": 3.5}]),
    Restored(id="4"),
    ErrorMessage(message="quota", id="5"),
    ErrorMessage(message="giving up"),
    LogMessage(message="hi 🚀", level="warning"),
]


@pytest.mark.parametrize("message", HOST_MESSAGES, ids=message_type)
def test_host_messages_round_trip(message: HostMessage) -> None:
    line = encode_message(message)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_host_message(line[:-1]) == message


@pytest.mark.parametrize("message", AGENT_MESSAGES, ids=message_type)
def test_agent_messages_round_trip(message: AgentMessage) -> None:
    line = encode_message(message)
    assert line.count(b"\n") == 1
    assert decode_agent_message(line[:-1]) == message


def test_the_type_tag_comes_first_and_every_type_is_covered() -> None:
    assert encode_message(Shutdown()).startswith(b'{"type":"shutdown"')
    assert {message_type(m) for m in HOST_MESSAGES} == HOST_MESSAGE_TYPES
    assert {message_type(m) for m in AGENT_MESSAGES} == AGENT_MESSAGE_TYPES
    assert not HOST_MESSAGE_TYPES & AGENT_MESSAGE_TYPES


def test_hello_carries_the_environment_summary() -> None:
    hello = decode_host_message(encode_message(make_hello()).rstrip())
    assert isinstance(hello, Hello)
    assert hello == make_hello()
    assert hello.environment == ENVIRONMENT


def test_unknown_fields_are_ignored_in_both_directions() -> None:
    assert decode_agent_message(b'{"type":"restored","id":"1","new":[1]}') == Restored(id="1")
    assert decode_host_message(b'{"type":"snapshot","id":"1","new":{}}') == Snapshot(id="1")


def test_the_writer_reuses_its_buffer_but_never_hands_it_out() -> None:
    writer = MessageWriter(None)  # type: ignore[arg-type]
    first = writer.encode(Act(id="1", turn=1, observation="x" * 1000))
    second = writer.encode(Restored(id="2"))
    assert first == encode_message(Act(id="1", turn=1, observation="x" * 1000))
    assert second == b'{"type":"restored","id":"2"}\n'


def test_unencodable_values_fail_on_the_host_not_on_the_wire() -> None:
    with pytest.raises(TypeError):
        encode_message(Act(id="1", turn=1, observation=object()))


@pytest.mark.parametrize(
    ("line", "code", "words"),
    [
        (b"not json", "invalid_json", "stderr"),
        (b'{"type":"log","message":"\xff"}', "invalid_utf8", "UTF-8"),
        (b"[1]", "not_an_object", "array"),
        (b'{"id":"1"}', "missing_type", "ready"),
        (b'{"type":"act","id":"1"}', "unknown_type", "other way"),
        (b'{"type":"action","id":1,"action":{}}', "invalid_field", "$.id"),
    ],
)
def test_refusals_name_the_rule_and_keep_the_line(line: bytes, code: str, words: str) -> None:
    with pytest.raises(ProtocolViolationError) as caught:
        decode_agent_message(line)
    assert caught.value.code == code
    assert words in caught.value.problem
    assert caught.value.offending == line
    assert str(caught.value).startswith(f"{code}: ")


def test_offending_bytes_are_truncated_but_measured() -> None:
    line = b"x" * (OFFENDING_LIMIT * 3)
    with pytest.raises(ProtocolViolationError) as caught:
        decode_agent_message(line)
    assert len(caught.value.offending) == OFFENDING_LIMIT
    assert caught.value.offending_size == len(line)


def test_decoders_are_strict_about_types_not_about_presence_of_optionals() -> None:
    assert decode_agent_message(b'{"type":"ready","protocol":1,"implementation":null}') == Ready(
        protocol=1
    )
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"type": "ready", "protocol": "1"}, Ready)


@pytest.mark.parametrize(
    ("line", "where"),
    [
        # msgspec skips a field it does not know without reading its bytes: checked anyway.
        (b'{"type":"action","id":"1","action":{},"note":"caf\xe9"}', "(byte 49, in field `note`)"),
        (b'{"type":"action","id":"1","action":{"k":[1,"\xff"]}}', "in field `action.k[1]`"),
        (b'{"type":"action","id":"1","action":{"\xc3":1}}', "in a key of `action`"),
        (b'{"type":"log","message":"hi","\xff":1}', "(byte 30, in a key of the message)"),
        (b'{"type":"log","message":"ok"}\xff', "(byte 29)"),
    ],
)
def test_a_line_that_is_not_utf8_is_refused_naming_byte_and_field(line: bytes, where: str) -> None:
    with pytest.raises(ProtocolViolationError) as caught:
        decode_agent_message(line)
    assert caught.value.code == "invalid_utf8"
    assert where in caught.value.problem
    assert caught.value.offending == line


def test_the_host_side_decoder_checks_utf8_the_same_way() -> None:
    with pytest.raises(ProtocolViolationError, match=r"invalid_utf8: .*field `extra`"):
        decode_host_message(b'{"type":"shutdown","extra":"\xff"}')
    assert decode_host_message('{"type":"shutdown","reason":"fin ☕"}'.encode()) == Shutdown(
        reason="fin ☕"
    )
