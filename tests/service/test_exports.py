"""A streamed export closes the evidence it reads however its response ends, even before the
first write, instead of leaving that read to the garbage collector."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from envharness.service.http import exports
from envharness.service.http.exports import CHUNK

pytestmark = pytest.mark.anyio

LINES = [b'{"n": %d, "pad": "%s"}\n' % (n, b"x" * 500) for n in range(400)]


class Evidence:
    """Export lines that remember whether they were closed."""

    def __init__(self) -> None:
        self.closed = False

    async def lines(self) -> AsyncGenerator[bytes, None]:
        try:
            for line in LINES:
                yield line
        finally:
            self.closed = True


async def stay_connected() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def test_an_export_whose_client_is_gone_before_the_first_write_closes_its_lines() -> None:
    evidence = Evidence()
    response = await exports.export_response(evidence.lines(), filename="x.jsonl")
    assert not evidence.closed  # its first line was read and checked, the rest waits

    async def gone(message: dict[str, Any]) -> None:
        raise OSError("the client is gone")

    with pytest.RaisesGroup(OSError):
        await response({"type": "http"}, stay_connected, gone)
    assert evidence.closed


async def test_an_export_sends_every_line_in_bounded_writes_and_closes_its_lines() -> None:
    evidence = Evidence()
    response = await exports.export_response(evidence.lines(), filename="x.jsonl")
    writes: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            writes.append(message["body"])

    await response({"type": "http"}, stay_connected, send)
    assert b"".join(writes) == b"".join(LINES)
    assert len(writes) > 2
    assert max(len(write) for write in writes) < CHUNK + 1_000
    assert evidence.closed
