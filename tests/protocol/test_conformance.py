"""Every conformance vector in protocol/conformance/ runs against the implementation here.

The vectors are the language-neutral half of the spec; running them keeps the two from ever
disagreeing. The meta-tests at the end make sure the vectors cover every message type and
every violation the host can detect.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness.protocol import (
    AGENT_MESSAGE_TYPES,
    HOST_MESSAGE_TYPES,
    VIOLATION_CODES,
    AgentChannel,
    AgentReportedError,
    ChannelUsageError,
    Feedback,
    HostMessage,
    Limits,
    LogMessage,
    MessageReader,
    ProtocolError,
    ProtocolViolationError,
    decode_agent_message,
    decode_host_message,
    message_type,
)
from tests.protocol._support import BytesSource, byte_pipe, make_hello

CONFORMANCE = Path(__file__).resolve().parents[2] / "protocol" / "conformance"
CALL_SENDS = {
    "handshake": "hello",
    "act": "act",
    "feedback": "feedback",
    "snapshot": "snapshot",
    "restore": "restore",
    "shutdown": "shutdown",
}


def load(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((CONFORMANCE / name).read_text("utf-8"))["cases"]
    return cases


def case_id(case: dict[str, Any]) -> str:
    return str(case["name"])


def stream_bytes(case: dict[str, Any]) -> bytes:
    if "input_base64" in case:
        return base64.b64decode(case["input_base64"])
    return str(case["input"]).encode("utf-8")


async def check_stream(
    case: dict[str, Any], decode: Callable[[bytes], Any], chunk_size: int
) -> None:
    reader = MessageReader(
        BytesSource(stream_bytes(case)),
        decode,
        max_line_bytes=case.get("max_line_bytes", Limits().max_line_bytes),
        chunk_size=chunk_size,
    )
    for expected in case["expect"]:
        if "type" in expected:
            message, _ = await reader.receive()
            assert message_type(message) == expected["type"]
            if "message" in expected:
                assert msgspec.json.decode(msgspec.json.encode(message)) == expected["message"]
        elif "violation" in expected:
            with pytest.raises(ProtocolViolationError) as caught:
                await reader.receive()
            assert caught.value.code == expected["violation"], caught.value.problem
        else:
            assert expected == {"end": True}
            with pytest.raises(anyio.EndOfStream):
                await reader.receive()


@pytest.mark.anyio
@pytest.mark.parametrize("chunk_size", [1, 65536])
@pytest.mark.parametrize("case", load("agent-to-host.json"), ids=case_id)
async def test_agent_to_host(case: dict[str, Any], chunk_size: int) -> None:
    await check_stream(case, decode_agent_message, chunk_size)


@pytest.mark.anyio
@pytest.mark.parametrize("case", load("host-to-agent.json"), ids=case_id)
async def test_host_to_agent(case: dict[str, Any]) -> None:
    await check_stream(case, decode_host_message, 65536)


# -- exchanges ---------------------------------------------------------------------------------


async def scripted_agent(
    receive: Any, send: Any, steps: list[dict[str, Any]], seen: list[HostMessage]
) -> None:
    """Read each step's message, then write its lines; stop (close both ends) at an exit."""
    reader = MessageReader(receive, decode_host_message)
    previous_id = ""
    try:
        for step in steps:
            if step["expect"].get("refused"):
                continue
            message, _ = await reader.receive()
            seen.append(message)
            assert message_type(message) == CALL_SENDS[step["call"]]
            request_id = getattr(message, "id", None) or ""
            for line in step["agent"]:
                text = line.replace("{id}", request_id).replace("{previous_id}", previous_id)
                await send.send(text.encode("utf-8") + b"\n")
            if "agent_raw" in step:
                await send.send(step["agent_raw"].encode("utf-8"))
            if step.get("then") == "exit":
                await receive.aclose()
                return
            if request_id:
                previous_id = request_id
        await anyio.sleep_forever()
    finally:
        await send.aclose()


async def call(channel: AgentChannel, step: dict[str, Any], last_act: list[str]) -> Any:
    kind = step["call"]
    if kind == "handshake":
        return None
    if kind == "act":
        action = await channel.act(len(last_act) + 1, {"n": len(last_act) + 1})
        last_act.append(action.id)
        return action
    if kind == "feedback":
        await channel.feedback(Feedback(turn=len(last_act), act_id=last_act[-1], status="executed"))
        return None
    if kind == "snapshot":
        return await channel.snapshot()
    if kind == "restore":
        await channel.restore(step["state"])
        return "restored"
    assert kind == "shutdown"
    await channel.shutdown("done")
    return None


def build_hello(overrides: dict[str, Any]) -> Any:
    fields = dict(overrides)
    if "limits" in fields:
        fields["limits"] = Limits(**fields["limits"])
    for key in ("protocols", "capabilities"):
        if key in fields:
            fields[key] = tuple(fields[key])
    return make_hello(**fields)


@pytest.mark.anyio
@pytest.mark.parametrize("case", load("exchanges.json"), ids=case_id)
async def test_exchange(case: dict[str, Any]) -> None:
    to_agent, agent_input = byte_pipe()
    agent_output, from_agent = byte_pipe()
    logs: list[LogMessage] = []
    seen: list[HostMessage] = []
    channel = AgentChannel(from_agent, to_agent, on_log=logs.append)
    hello = build_hello(case.get("hello", {}))
    last_act: list[str] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(scripted_agent, agent_input, agent_output, case["steps"], seen)
            for step in case["steps"]:
                before = len(logs)
                expect = step["expect"]
                failed = await run_step(channel, step, expect, hello, last_act)
                if "logs" in expect:
                    assert len(logs) - before == expect["logs"], step
                if failed:
                    break
            group.cancel_scope.cancel()
    for end in (to_agent, agent_input, agent_output, from_agent):
        await end.aclose()


async def run_step(
    channel: AgentChannel,
    step: dict[str, Any],
    expect: dict[str, Any],
    hello: Any,
    last_act: list[str],
) -> bool:
    """Make the step's call and check ``expect``; True when the call failed (the case ends)."""
    raised: ProtocolError | None = None
    try:
        if step["call"] == "handshake":
            result: Any = await channel.handshake(hello)
        else:
            result = await call(channel, step, last_act)
    except ProtocolError as exc:
        raised = exc
    if isinstance(raised, ProtocolViolationError):
        assert expect.get("violation") == raised.code, raised.problem
        return True
    if isinstance(raised, AgentReportedError):
        assert expect.get("agent_error") == raised.message
        return True
    if raised is not None:
        assert isinstance(raised, ChannelUsageError)
        assert expect.get("refused") is True, raised
        return False
    assert "violation" not in expect
    assert "agent_error" not in expect
    assert "refused" not in expect
    returns = expect["returns"]
    if returns is None:
        assert result is None
    elif returns == "restored":
        assert result == "restored"
    elif returns == "state":
        assert result == expect["state"]
    else:
        assert message_type(result) == returns
    if "protocol" in expect:
        assert channel.protocol == expect["protocol"]
    if "capabilities" in expect:
        assert sorted(channel.capabilities) == expect["capabilities"]
    return False


# -- coverage of the vectors -------------------------------------------------------------------


def outcomes(name: str) -> tuple[set[str], set[str]]:
    types: set[str] = set()
    codes: set[str] = set()
    for case in load(name):
        for expected in case["expect"]:
            types.update([expected["type"]] if "type" in expected else [])
            codes.update([expected["violation"]] if "violation" in expected else [])
    return types, codes


def test_the_vectors_cover_every_message_type_and_violation() -> None:
    agent_types, agent_codes = outcomes("agent-to-host.json")
    host_types, _ = outcomes("host-to-agent.json")
    assert agent_types == AGENT_MESSAGE_TYPES
    assert host_types == HOST_MESSAGE_TYPES
    exchange_codes = {
        step["expect"]["violation"]
        for case in load("exchanges.json")
        for step in case["steps"]
        if "violation" in step["expect"]
    }
    # `timeout` is the caller's (anyio.fail_after), so no vector can show it.
    assert agent_codes | exchange_codes == set(VIOLATION_CODES) - {"timeout"}


def test_case_names_are_unique_per_file() -> None:
    for path in CONFORMANCE.glob("*.json"):
        names = [case["name"] for case in json.loads(path.read_text("utf-8"))["cases"]]
        assert len(names) == len(set(names)), path.name
