"""Stop and pause requests in a PostgreSQL store: the same statements as on SQLite, through
:class:`PostgresBackend` — asked, read by the runner they name, taken or withdrawn once — and a
database that cannot be reached named without its password."""

from __future__ import annotations

import itertools
import secrets
import traceback
from collections.abc import Iterator

import pytest

from envharness.errors import ConfigurationError, NotFoundError, StoreError
from envharness.records import RunnerRef, SegmentStarted, SessionChain, SessionCreated
from envharness.store.control import ControlRequests
from envharness.store.postgres import open_postgres_store
from envharness.store.postgres.backend import PostgresBackend
from tests import _engines
from tests.store._support import config

pytestmark = pytest.mark.anyio

_pids = itertools.count(1000)


def _runner() -> RunnerRef:
    """A runner of its own per test: the tests share one database."""
    return RunnerRef(host="host-a", pid=next(_pids), started="boot:1")


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "pgcontrol") as url:
        yield url


@pytest.fixture
async def requests(database: str) -> ControlRequests:
    async with open_postgres_store(database):  # the schema, control_requests included
        pass
    return ControlRequests(PostgresBackend(database))


async def test_a_runner_reads_only_its_own_pending_requests_and_takes_each_once(
    requests: ControlRequests,
) -> None:
    here, there = _runner(), _runner()
    first = await requests.ask("ses_a", "pause", here, "me")
    elsewhere = await requests.ask("ses_b", "stop", there, "me")
    assert [r.id for r in await requests.pending(here)] == [first.id]
    [taken] = await requests.take([first.id, elsewhere.id + 1000])
    assert (taken.id, taken.verb, taken.target) == (first.id, "pause", "ses_a")
    assert taken.taken_at is not None
    assert await requests.take([first.id]) == []  # never twice
    assert await requests.pending(here) == []
    assert [r.id for r in await requests.pending(there)] == [elsewhere.id]


async def test_a_withdrawn_request_is_never_taken_and_a_taken_one_stays_taken(
    requests: ControlRequests,
) -> None:
    here = _runner()
    asked = await requests.ask("ses_a", "stop", here, "me")
    withdrawn = await requests.withdraw(asked.id)
    assert (withdrawn.withdrawn_at is not None, withdrawn.taken_at) == (True, None)
    assert await requests.take([asked.id]) == []
    other = await requests.ask("ses_a", "stop", here, "me")
    await requests.take([other.id])
    kept = await requests.withdraw(other.id)
    assert (kept.taken_at is not None, kept.withdrawn_at) == (True, None)
    assert await requests.get(other.id) == kept


async def test_the_runner_of_a_session_is_the_one_its_index_names(
    requests: ControlRequests, database: str
) -> None:
    here = _runner()
    chain = SessionChain(f"ses_{secrets.token_hex(6)}")
    async with open_postgres_store(database) as store:
        await store.append(
            [
                chain.seal(SessionCreated(config=config())),
                chain.seal(SegmentStarted(segment=0, state="0" * 64, runner=here)),
            ]
        )
        assert await requests.runner(chain.session_id) == here
    assert await requests.runner("ses_nobody") is None


async def test_bad_requests_are_refused_by_name(requests: ControlRequests) -> None:
    with pytest.raises(ConfigurationError, match="one of: stop, pause; not 'halt'"):
        await requests.ask("ses_a", "halt", _runner(), "me")
    with pytest.raises(ConfigurationError, match="needs the id"):
        await requests.ask("", "stop", _runner(), "me")
    with pytest.raises(NotFoundError, match="no control request 987654"):
        await requests.get(987654)


async def test_a_database_that_cannot_be_reached_is_named_without_its_password(
    postgres_server: _engines.PostgresServer,
) -> None:
    secret = f"secret-{secrets.token_hex(6)}"
    url = f"postgresql://envh:{secret}@{postgres_server.host}:{postgres_server.port}/missing_db"
    backend = PostgresBackend(url)
    with pytest.raises(StoreError) as caught:
        await ControlRequests(backend).pending(_runner())
    told = "".join(traceback.format_exception(caught.value)) + repr(backend)
    assert "missing_db" in str(caught.value)
    assert secret not in told


async def test_a_kept_connection_serves_every_read_until_it_is_let_go(database: str) -> None:
    backend = PostgresBackend(database, keep=True)

    async def server_process() -> int:
        return int(await backend.read(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0]))

    try:
        first = await server_process()
        assert await server_process() == first
        await backend.aclose()
        assert await server_process() != first
    finally:
        await backend.aclose()
    unkept = PostgresBackend(database)
    assert await unkept.read(lambda c: c.execute("SELECT 1").fetchone()[0]) == 1
