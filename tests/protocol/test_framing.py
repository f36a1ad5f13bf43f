"""Line framing: limits with bounded memory, clean and unclean ends, cancel safety."""

from __future__ import annotations

import anyio
import pytest

from envharness.protocol import (
    LineReader,
    LogMessage,
    MessageReader,
    MessageWriter,
    ProtocolViolationError,
    decode_agent_message,
    encode_message,
)
from envharness.protocol.errors import OFFENDING_LIMIT
from tests.protocol._support import BytesSource, byte_pipe

pytestmark = pytest.mark.anyio


async def read_all(reader: LineReader) -> list[bytes]:
    lines = []
    while True:
        try:
            lines.append(await reader.receive_line())
        except anyio.EndOfStream:
            return lines


async def test_lines_are_split_across_and_within_chunks() -> None:
    data = b"first\nsecond line\n\nthird\r\n" + b"y" * 50 + b"\n"
    for chunk_size in (1, 3, 7, 64, 4096):
        reader = LineReader(BytesSource(data), chunk_size=chunk_size)
        assert await read_all(reader) == [b"first", b"second line", b"", b"third\r", b"y" * 50]
        assert reader.buffered == 0


async def test_a_line_of_exactly_the_limit_passes_and_one_more_byte_fails() -> None:
    reader = LineReader(BytesSource(b"a" * 10 + b"\n" + b"b" * 11 + b"\n"), max_line_bytes=10)
    assert await reader.receive_line() == b"a" * 10
    with pytest.raises(ProtocolViolationError) as caught:
        await reader.receive_line()
    assert caught.value.code == "line_too_long"
    assert caught.value.offending == b"b" * 11


async def test_a_flood_without_newlines_is_cut_off_with_bounded_memory() -> None:
    """10 MiB without a newline: the reader stops after limit + one chunk, never holding more."""
    limit, chunk = 1024 * 1024, 64 * 1024
    source = BytesSource(flood=10 * 1024 * 1024)
    reader = LineReader(source, max_line_bytes=limit, chunk_size=chunk)
    with pytest.raises(ProtocolViolationError) as caught:
        await reader.receive_line()
    violation = caught.value
    assert violation.code == "line_too_long"
    assert reader.peak <= limit + chunk
    assert source.delivered <= limit + chunk
    assert reader.buffered == 0
    assert len(violation.offending) == OFFENDING_LIMIT
    assert violation.offending_size > limit
    # The reader is finished: it repeats the violation instead of reading any further.
    with pytest.raises(ProtocolViolationError):
        await reader.receive_line()
    assert source.delivered <= limit + chunk


async def test_a_flood_of_short_lines_is_read_line_by_line_without_growth() -> None:
    line = b'{"type":"log","message":"spam"}\n'
    source = BytesSource(line * 20_000)
    reader = LineReader(source, max_line_bytes=64, chunk_size=4096)
    assert len(await read_all(reader)) == 20_000
    assert reader.peak <= 64 + 4096


async def test_a_clean_end_and_an_end_mid_line() -> None:
    reader = LineReader(BytesSource(b"whole\npart"))
    assert await reader.receive_line() == b"whole"
    with pytest.raises(ProtocolViolationError) as caught:
        await reader.receive_line()
    assert caught.value.code == "truncated_line"
    assert caught.value.offending == b"part"
    with pytest.raises(anyio.EndOfStream):
        await LineReader(BytesSource(b"")).receive_line()


async def test_a_cancelled_read_loses_no_bytes() -> None:
    send, receive = byte_pipe()
    reader = LineReader(receive)
    await send.send(b'{"type":"log",')
    with anyio.move_on_after(0.05) as scope:
        await reader.receive_line()
    assert scope.cancelled_caught
    await send.send(b'"message":"x"}\n')
    assert await reader.receive_line() == b'{"type":"log","message":"x"}'
    await send.aclose()
    await receive.aclose()


async def test_message_reader_skips_blank_lines_and_returns_the_raw_line() -> None:
    data = b"\n  \n" + encode_message(LogMessage(message="a"))
    reader = MessageReader(BytesSource(data), decode_agent_message)
    message, line = await reader.receive()
    assert message == LogMessage(message="a")
    assert line == data.strip()
    with pytest.raises(anyio.EndOfStream):
        await reader.receive()


async def test_writer_sends_one_line_per_message_and_closes() -> None:
    send, receive = byte_pipe()
    writer = MessageWriter(send)
    await writer.send(LogMessage(message="one"))
    await writer.send(LogMessage(message="two"))
    await writer.aclose()
    reader = MessageReader(receive, decode_agent_message)
    assert (await reader.receive())[0] == LogMessage(message="one")
    assert (await reader.receive())[0] == LogMessage(message="two")
    with pytest.raises(anyio.EndOfStream):
        await reader.receive()
    await receive.aclose()


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LineReader(BytesSource(), max_line_bytes=0)
