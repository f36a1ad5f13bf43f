"""AgentChannel: the request/response discipline against fake agents, in memory and real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from envharness.protocol import (
    Act,
    Action,
    AgentChannel,
    AgentReportedError,
    ChannelUsageError,
    Feedback,
    Hello,
    HostMessage,
    Limits,
    LogMessage,
    ProtocolViolationError,
    Ready,
    Shutdown,
    encode_message,
)
from tests.protocol._support import Reply, connected, make_hello, polite

pytestmark = pytest.mark.anyio

ECHO_AGENT = Path(__file__).with_name("echo_agent.py")


def executed(act_id: str, turn: int = 1) -> Feedback:
    return Feedback(turn=turn, act_id=act_id, status="executed", action={"m": 1}, outcome=None)


async def test_a_whole_session_with_a_polite_agent() -> None:
    async with connected() as (channel, logs):
        ready = await channel.handshake(make_hello(capabilities=("snapshot",)))
        assert ready == Ready(protocol=1, implementation="fake@1", capabilities=("snapshot",))
        assert channel.protocol == 1
        assert channel.capabilities == {"snapshot"}
        for turn in (1, 2):
            action = await channel.act(turn, {"n": turn}, actions=[{"m": 1}])
            assert action.action == {"echo": {"n": turn}}
            await channel.feedback(executed(action.id, turn))
        assert await channel.snapshot() == {"kept": True}
        await channel.shutdown("done")
        assert [log.message for log in logs] == ["turn 1", "turn 2"]
        assert channel.broken is None


async def test_ids_are_fresh_for_every_request() -> None:
    async with connected() as (channel, _):
        await channel.handshake(make_hello(capabilities=("snapshot",)))
        ids = [(await channel.act(1, None)).id for _ in range(3)]
        assert len(set(ids)) == 3


async def test_sending_while_reading_breaks_the_pipe_deadlock() -> None:
    """Pipes that hold one line: the agent writes 200 logs before it reads again. A host that
    only wrote a large act would wait for the agent, which waits for the host to read."""

    def chatty(message: HostMessage) -> Reply:
        yield from polite(message)
        if isinstance(message, Act):
            yield from (encode_message(LogMessage(message=f"after {i}")) for i in range(200))

    async with connected(chatty, buffer=1) as (channel, logs):
        with anyio.fail_after(5):
            await channel.handshake(make_hello())
            first = await channel.act(1, "x" * 100_000)
            await channel.feedback(executed(first.id))
            second = await channel.act(2, "y" * 100_000)
            assert second.action == {"echo": "y" * 100_000}
            await channel.shutdown()
        assert len(logs) == 2 + 400


async def test_a_silent_agent_times_out_and_the_channel_refuses_further_requests() -> None:
    def silent(message: HostMessage) -> Reply:
        return polite(message) if isinstance(message, Hello) else ()

    async with connected(silent) as (channel, _):
        await channel.handshake(make_hello(limits=Limits(act_timeout=0.05)))
        assert channel.limits.act_timeout == 0.05
        with pytest.raises(TimeoutError), anyio.fail_after(channel.limits.act_timeout):
            await channel.act(1, {})
        assert channel.broken == "a call was cancelled or timed out midway"
        with pytest.raises(ChannelUsageError, match="broken"):
            await channel.act(2, {})
        with anyio.fail_after(1):
            await channel.shutdown("timeout")  # still allowed: it only sends and closes


async def test_calls_must_not_overlap() -> None:
    def silent(message: HostMessage) -> Reply:
        return polite(message) if isinstance(message, Hello) else ()

    async with connected(silent) as (channel, _):
        await channel.handshake(make_hello())
        async with anyio.create_task_group() as group:
            group.start_soon(channel.act, 1, {})
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(ChannelUsageError, match="overlap"):
                await channel.act(2, {})
            with pytest.raises(ChannelUsageError, match="in progress"):
                await channel.shutdown()
            group.cancel_scope.cancel()


async def test_calls_out_of_order_are_refused() -> None:
    async with connected() as (channel, _):
        with pytest.raises(ChannelUsageError, match="after a successful handshake"):
            await channel.act(1, {})
        await channel.handshake(make_hello())
        with pytest.raises(ChannelUsageError, match="before the handshake"):
            await channel.handshake(make_hello())
        with pytest.raises(ChannelUsageError, match="not negotiated"):
            await channel.restore({})
        assert channel.broken is None  # refusing a call does not break the channel
        await channel.shutdown()
        await channel.shutdown()  # idempotent
        with pytest.raises(ChannelUsageError):
            await channel.act(1, {})


async def test_an_error_from_the_log_callback_surfaces_as_itself() -> None:
    def boom(log: LogMessage) -> None:
        raise RuntimeError(f"cannot record {log.message}")

    async with connected(on_log=boom) as (channel, _):
        await channel.handshake(make_hello())
        with pytest.raises(RuntimeError, match="cannot record turn 1"):
            await channel.act(1, {})


async def test_an_agent_that_stops_reading_and_exits_is_reported_as_closed() -> None:
    def leaves(message: HostMessage) -> Reply:
        if isinstance(message, Hello):
            yield from polite(message)
        elif isinstance(message, Act):
            yield None  # exit without answering

    async with connected(leaves) as (channel, _):
        await channel.handshake(make_hello())
        with pytest.raises(ProtocolViolationError) as caught:
            await channel.act(1, {})
        assert caught.value.code == "closed"
        assert "act '1'" in caught.value.problem
        assert channel.broken == "protocol violation closed"


async def test_an_agent_gone_between_requests_is_reported_at_the_next_one() -> None:
    def quits_after_feedback(message: HostMessage) -> Reply:
        yield from polite(message)
        if isinstance(message, Feedback):
            yield encode_message(LogMessage(message="I quit"))
            yield None

    async with connected(quits_after_feedback) as (channel, logs):
        await channel.handshake(make_hello())
        action = await channel.act(1, {})
        await channel.feedback(executed(action.id))
        await anyio.wait_all_tasks_blocked()  # let the agent finish leaving
        with pytest.raises(ProtocolViolationError) as caught:
            await channel.act(2, {})
        assert caught.value.code == "closed"
        assert "act '2'" in caught.value.problem
        assert [log.message for log in logs] == ["turn 1", "I quit"]


# -- real processes ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_chatty_process_and_a_large_act_do_not_deadlock_over_os_pipes() -> None:
    """After each action the agent writes 2 MB of logs before reading again; the next act is
    larger than any pipe buffer. Both sides would block without the concurrent read."""
    logs: list[LogMessage] = []
    async with await anyio.open_process([sys.executable, str(ECHO_AGENT), "--chatty"]) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        channel = AgentChannel(process.stdout, process.stdin, on_log=logs.append)
        with anyio.fail_after(20):
            await channel.handshake(make_hello())
            first = await channel.act(1, "x" * 300_000)
            await channel.feedback(executed(first.id))
            second = await channel.act(2, "y" * 300_000)
            assert second.action == {"echo": "y" * 300_000}
            await channel.shutdown()
            assert await process.wait() == 0
    assert len(logs) == 2 + 2 * 2000 + 1


@pytest.mark.slow
async def test_a_stdlib_agent_in_a_subprocess() -> None:
    logs: list[LogMessage] = []
    async with await anyio.open_process(
        [sys.executable, str(ECHO_AGENT)], stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        assert process.stdin is not None

        channel = AgentChannel(process.stdout, process.stdin, on_log=logs.append)
        with anyio.fail_after(10):
            await channel.handshake(make_hello(capabilities=("snapshot",)))
            await channel.restore({"memory": [0]})
            action = await channel.act(1, {"seen": "é"})
            assert action == Action(id=action.id, action={"echo": {"seen": "é"}}, cost=action.cost)
            assert action.cost is not None
            assert action.cost.seconds == 0.0
            await channel.feedback(executed(action.id))
            assert await channel.snapshot() == {"memory": [0, 1]}
            await channel.shutdown()
            assert await process.wait() == 0
        assert process.stderr is not None
        assert b"hello from alice" in await process.stderr.receive()
    assert [log.message for log in logs] == ["turn 1", "bye after 2 turns"]


@pytest.mark.slow
async def test_a_process_that_floods_stdout_is_cut_off() -> None:
    flood = "import sys; sys.stdout.write('x' * (10 << 20)); sys.stdout.flush()"
    async with await anyio.open_process([sys.executable, "-c", flood]) as process:
        assert process.stdout is not None
        assert process.stdin is not None

        channel = AgentChannel(process.stdout, process.stdin)
        with anyio.fail_after(10), pytest.raises(ProtocolViolationError) as caught:
            await channel.handshake(make_hello(limits=Limits(max_line_bytes=256 * 1024)))
        assert caught.value.code == "line_too_long"
        process.kill()


@pytest.mark.slow
async def test_a_process_that_exits_before_ready() -> None:
    async with await anyio.open_process([sys.executable, "-c", "raise SystemExit(3)"]) as process:
        assert process.stdout is not None
        assert process.stdin is not None

        channel = AgentChannel(process.stdout, process.stdin)
        with anyio.fail_after(10), pytest.raises(ProtocolViolationError) as caught:
            await channel.handshake(make_hello())
        assert caught.value.code == "closed"
        assert "'ready'" in caught.value.problem
        assert await process.wait() == 3


def test_shutdown_is_a_plain_message() -> None:
    assert encode_message(Shutdown()) == b'{"type":"shutdown","reason":""}\n'


def test_agent_reported_error_names_the_request() -> None:
    error = AgentReportedError("quota", "4")
    assert "request '4'" in str(error)
    assert error.message == "quota"
