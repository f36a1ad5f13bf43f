"""The control_requests table: asked, read by the runner it names, taken or withdrawn once."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness.errors import ConfigurationError, NotFoundError
from envharness.records import RunnerRef, SegmentStarted, SessionChain, SessionCreated
from envharness.store import open_store
from envharness.store.control import ControlRequests, runner_key, runner_of_key
from tests.store._support import config

pytestmark = pytest.mark.anyio

HERE = RunnerRef(host="host-a", pid=10, started="boot:1")
THERE = RunnerRef(host="host-b", pid=10, started="boot:1")


@pytest.fixture
async def requests(store_path: Path) -> ControlRequests:
    async with open_store(store_path):
        pass
    return ControlRequests(store_path)


async def test_a_runner_reads_only_its_own_pending_requests_and_takes_each_once(
    requests: ControlRequests,
) -> None:
    first = await requests.ask("ses_a", "pause", HERE, "me")
    elsewhere = await requests.ask("ses_b", "stop", THERE, "me")
    assert [r.id for r in await requests.pending(HERE)] == [first.id]
    assert first.pending
    assert first.runner == runner_key(HERE)
    [taken] = await requests.take([first.id, elsewhere.id + 1000])
    assert taken.id == first.id
    assert taken.taken_at is not None
    assert not taken.pending
    assert await requests.take([first.id]) == []  # never twice
    assert await requests.pending(HERE) == []
    assert [r.id for r in await requests.pending(THERE)] == [elsewhere.id]
    assert await requests.take([]) == []


async def test_a_withdrawn_request_is_never_taken_and_a_taken_one_stays_taken(
    requests: ControlRequests,
) -> None:
    asked = await requests.ask("ses_a", "stop", HERE, "me")
    withdrawn = await requests.withdraw(asked.id)
    assert withdrawn.withdrawn_at is not None
    assert withdrawn.taken_at is None
    assert await requests.take([asked.id]) == []
    assert await requests.pending(HERE) == []
    other = await requests.ask("ses_a", "stop", HERE, "me")
    await requests.take([other.id])
    kept = await requests.withdraw(other.id)
    assert kept.taken_at is not None
    assert kept.withdrawn_at is None
    assert (await requests.get(other.id)) == kept


async def test_bad_requests_are_refused_by_name(requests: ControlRequests) -> None:
    with pytest.raises(ConfigurationError, match="one of: stop, pause; not 'kill'"):
        await requests.ask("ses_a", "kill", HERE, "me")
    with pytest.raises(ConfigurationError, match="needs the id"):
        await requests.ask("", "stop", HERE, "me")
    with pytest.raises(NotFoundError, match="no control request 99"):
        await requests.get(99)
    with pytest.raises(NotFoundError, match="no control request 99"):
        await requests.withdraw(99)
    assert runner_of_key("not json") is None
    assert runner_of_key(runner_key(HERE)) == HERE


async def test_the_runner_of_a_session_is_the_one_its_index_names(store_path: Path) -> None:
    chain = SessionChain("ses_running")
    async with open_store(store_path) as store:
        await store.append(
            [
                chain.seal(SessionCreated(config=config())),
                chain.seal(SegmentStarted(segment=0, state="0" * 64, runner=HERE)),
            ]
        )
    requests = ControlRequests(store_path)
    assert await requests.runner("ses_running") == HERE
    assert await requests.runner("ses_unknown") is None
