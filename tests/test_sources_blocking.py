"""The blocking face of ``harness.sources()``: async streams read from blocking code."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from anyio.from_thread import start_blocking_portal

from envharness._portal import iterate as iterate_blocking
from envharness.api.sources import AsyncSources, Sources
from envharness.errors import NotFoundError
from envharness.store.sources import SourceChainError
from envharness.trajectories.sources import SourceChain
from tests.trajectories.sources._support import SOURCE, episode


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


def test_blocking_code_reads_which_sources_are_unhealthy(tmp_path: Path) -> None:
    chain = SourceChain(SOURCE)
    first, second = episode(chain, "run-1"), episode(chain, "run-2")
    sources = Sources(AsyncSources(tmp_path))
    sources.import_records(SOURCE, first)
    assert sources.problems() == {}
    with pytest.raises(SourceChainError):
        sources.import_records(SOURCE, second[1:])  # skips the first record of run-2
    assert sources.problems() == {
        SOURCE: [
            "position(s) 5 were never imported (a refused import skipped them); import them, "
            "then the refused records again"
        ]
    }
    with pytest.raises(NotFoundError, match="no source 'acme/other'"):
        sources.problems("acme/other")
