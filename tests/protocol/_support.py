"""Seams for protocol tests: in-memory byte pipes, a flood source, and scripted agents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.protocol import (
    PROTOCOL_VERSION,
    Act,
    Action,
    AgentChannel,
    EnvironmentInfo,
    Hello,
    HostMessage,
    LogMessage,
    MessageReader,
    Ready,
    Restore,
    Restored,
    Shutdown,
    Snapshot,
    State,
    decode_host_message,
    encode_message,
)

ENVIRONMENT = EnvironmentInfo(
    name="grid", version="1", turn_order="simultaneous", roles=("player",)
)


def make_hello(**fields: Any) -> Hello:
    values: dict[str, Any] = {
        "protocols": (PROTOCOL_VERSION,),
        "session": "s-1",
        "participant": "alice",
        "role": "player",
        "seed": 7,
        "environment": ENVIRONMENT,
    }
    values.update(fields)
    return Hello(**values)


class ByteSender(ByteSendStream):
    """The writing end of an in-memory pipe; each ``send`` is one item in a bounded queue."""

    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(bytes(item))

    async def aclose(self) -> None:
        await self._stream.aclose()


class ByteReceiver(ByteReceiveStream):
    """The reading end: hands out at most ``max_bytes`` at a time, like a real pipe."""

    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._pending:
            self._pending = await self._stream.receive()
        chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def byte_pipe(buffer: int = 16) -> tuple[ByteSender, ByteReceiver]:
    send, receive = anyio.create_memory_object_stream[bytes](buffer)
    return ByteSender(send), ByteReceiver(receive)


class BytesSource(ByteReceiveStream):
    """Fixed bytes, then the end; or, with ``flood``, ``flood`` bytes of ``b"x"`` and no newline.

    ``delivered`` counts what a reader actually took, to prove it stopped early.
    """

    def __init__(self, data: bytes = b"", *, flood: int = 0) -> None:
        self._data = data
        self._flood = flood
        self.delivered = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if self._data:
            chunk, self._data = self._data[:max_bytes], self._data[max_bytes:]
        elif self._flood:
            size = min(max_bytes, self._flood)
            self._flood -= size
            chunk = b"x" * size
        else:
            raise anyio.EndOfStream
        self.delivered += len(chunk)
        return chunk

    async def aclose(self) -> None:
        pass


Reply = Iterable[bytes | None]
"""Lines to write in answer to one message; ``None`` means: exit now (close input and output)."""
Behaviour = Callable[[HostMessage], Reply]


def polite(message: HostMessage) -> Reply:
    """A well-behaved agent: logs, echoes observations as actions, snapshots a constant."""
    match message:
        case Hello():
            yield encode_message(
                Ready(protocol=1, implementation="fake@1", capabilities=("snapshot",))
            )
        case Act(id=act_id, turn=turn, observation=observation):
            yield encode_message(LogMessage(message=f"turn {turn}"))
            yield encode_message(Action(id=act_id, action={"echo": observation}))
        case Snapshot(id=snapshot_id):
            yield encode_message(State(id=snapshot_id, state={"kept": True}))
        case Restore(id=restore_id):
            yield encode_message(Restored(id=restore_id))
        case _:
            pass


async def run_agent(
    receive: ByteReceiveStream, send: ByteSendStream, behaviour: Behaviour
) -> list[HostMessage]:
    """Serve ``behaviour`` until ``shutdown`` or the end of input; returns what it was sent."""
    reader = MessageReader(receive, decode_host_message)
    seen: list[HostMessage] = []
    try:
        while True:
            try:
                message, _ = await reader.receive()
            except anyio.EndOfStream:
                return seen
            seen.append(message)
            for line in behaviour(message):
                if line is None:
                    await receive.aclose()
                    return seen
                await send.send(line)
            if isinstance(message, Shutdown):
                return seen
    finally:
        await send.aclose()


@asynccontextmanager
async def connected(
    behaviour: Behaviour = polite, *, buffer: int = 16, **channel_options: Any
) -> AsyncIterator[tuple[AgentChannel, list[LogMessage]]]:
    """A channel talking to an in-memory fake agent; yields the channel and the logs it saw."""
    to_agent, agent_input = byte_pipe(buffer)
    agent_output, from_agent = byte_pipe(buffer)
    logs: list[LogMessage] = []
    channel_options.setdefault("on_log", logs.append)
    channel = AgentChannel(from_agent, to_agent, **channel_options)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run_agent, agent_input, agent_output, behaviour)
            yield channel, logs
            group.cancel_scope.cancel()
    finally:
        for end in (to_agent, agent_input, agent_output, from_agent):
            await end.aclose()
