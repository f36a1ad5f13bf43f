"""The blocking face of ``harness.sources()``: async streams read from blocking code."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest
from anyio.from_thread import start_blocking_portal

from envharness.sources import iterate_blocking


def test_a_stopped_iteration_cancels_its_producer() -> None:
    closed = []

    async def endless() -> AsyncIterator[int]:
        try:
            for number in itertools.count():
                await anyio.lowlevel.checkpoint()
                yield number
        finally:
            closed.append(True)

    with start_blocking_portal() as portal:
        numbers = iterate_blocking(portal, endless, batch=2)
        assert list(itertools.islice(numbers, 5)) == [0, 1, 2, 3, 4]
        numbers.close()
    assert closed == [True]


def test_the_producers_error_reaches_the_consumer_after_its_items() -> None:
    async def failing() -> AsyncIterator[int]:
        yield 1
        raise ValueError("the source broke")

    seen: list[int] = []
    with start_blocking_portal() as portal, pytest.raises(ValueError, match="the source broke"):
        seen.extend(iterate_blocking(portal, failing, batch=10))
    assert seen == [1]
