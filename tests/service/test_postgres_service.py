"""The viewer and the API on a PostgreSQL store (issue 14): the same readers, participant
isolation, tokens, artifacts and live streams as on SQLite, with a real server.

One database for the module, written once: a session of alice and bob with an artifact, a
session of carol alone, and tokens for each principal. Tests that write more (a live stream,
a token issued or revoked) name their own sessions and tokens.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import httpx
import msgspec
import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner, Result

from envharness.cli import app as cli_app
from envharness.errors import ConfigurationError, StoreError
from envharness.records import Artifact, RecordRow, SegmentStarted
from envharness.service.access import Access
from envharness.service.app import create_app
from envharness.service.auth import Principal
from envharness.service.http import events
from envharness.service.http.events import experiment_events, record_events
from envharness.service.link_codes import issue_stored_code, service_directory
from envharness.service.state import Address, Service
from envharness.store import RecordFilter, SessionInfo
from envharness.store.owners import this_process
from envharness.store.postgres import open_postgres_store, read_postgres_store
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.postgres.named_reads import PostgresReads
from envharness.store.read_ahead import ReadAhead
from envharness.store.tokens import TokenInfo, TokenStore
from tests import _engines
from tests.service._browser import stop
from tests.service._support import BASE, ExperimentWriter, SessionWriter
from tests.store.postgres._support import password_role_on

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

ARTIFACT = b"a report kept beside the evidence\n"
ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "postgresql.md"


@dataclass
class Evidence:
    """The module's database, what was written to it, and a token per principal."""

    url: str
    pair: str
    solo: str
    artifact_seq: int
    secrets: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's own state directory, where a PostgreSQL store's sign-in codes go."""
    home = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def evidence(postgres_server: _engines.PostgresServer, state_home: Path) -> Iterator[Evidence]:
    with _engines.fresh_database(postgres_server, "pgserve") as url:
        yield anyio.run(_write, url)


async def _write(url: str) -> Evidence:
    pair, solo = SessionWriter(["alice", "bob"], turns=2), SessionWriter(["carol"], turns=1)
    async with open_postgres_store(url) as store:
        for writer, turns in ((pair, 2), (solo, 1)):
            rows, blobs = writer.start()
            await store.append(rows, blobs)
            for turn in range(1, turns + 1):
                rows, blobs = writer.turn(turn)
                await store.append(rows, blobs)
            if writer is pair:
                sha256 = await store.put_artifact(ARTIFACT)
                kept = Artifact(name="report.txt", sha256=sha256, size=len(ARTIFACT),
                                media_type="text/plain")  # fmt: skip
                row = writer.chain.seal(kept)
                artifact_seq = row.seq
                await store.append([row])
            await store.append(writer.finish())
    found = Evidence(url, pair.id, solo.id, artifact_seq)
    tokens = TokenStore(PostgresBackend(url))
    for name, options in {
        "admin": {"role": "admin"},
        "viewer": {"role": "viewer"},
        "alice": {"role": "participant", "participant": "alice"},
        "carol": {"role": "participant", "participant": "carol"},
    }.items():
        found.secrets[name] = (await tokens.issue(**options)).secret  # type: ignore[arg-type]
    return found


@asynccontextmanager
async def serving(evidence: Evidence) -> AsyncIterator[tuple[Service, httpx.AsyncClient]]:
    """The app over the store, as ``serve`` builds it, and a client without a credential."""
    async with read_postgres_store(evidence.url) as store:
        service = Service(
            store=store, address=Address("127.0.0.1", 8765), tokens=TokenStore(store.backend)
        )
        transport = httpx.ASGITransport(create_app(service))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            yield service, client


def bearer(evidence: Evidence, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {evidence.secrets[name]}"}


async def test_records_and_sessions_are_read_from_postgresql(evidence: Evidence) -> None:
    async with serving(evidence) as (_, client):
        listed = (await client.get("/api/sessions", headers=bearer(evidence, "viewer"))).json()
        records = await client.get(
            f"/api/sessions/{evidence.pair}/records", headers=bearer(evidence, "viewer")
        )
        one = await client.get(f"/api/sessions/{evidence.solo}", headers=bearer(evidence, "viewer"))
        nobody = await client.get("/api/sessions")
    ids = {session["id"] for session in listed["sessions"]}
    assert {evidence.pair, evidence.solo} <= ids
    assert records.status_code == 200, records.text
    seqs = [record["seq"] for record in records.json()["records"]]
    assert seqs == list(range(len(seqs)))
    assert one.json()["session"]["status"] == "completed"
    assert nobody.status_code == 401


async def test_a_participant_sees_only_its_own_observations(evidence: Evidence) -> None:
    async with serving(evidence) as (_, client):
        alice = bearer(evidence, "alice")
        listed = (await client.get("/api/sessions", headers=alice)).json()
        mine = await client.get(f"/api/sessions/{evidence.pair}/records", headers=alice)
        theirs = await client.get(f"/api/sessions/{evidence.solo}/records", headers=alice)
        bobs = await client.get(
            f"/api/sessions/{evidence.pair}/records", params={"participant": "bob"}, headers=alice
        )
    assert [session["id"] for session in listed["sessions"]] == [evidence.pair]
    records = mine.json()["records"]
    assert records
    assert {record["participant"] for record in records} == {"alice"}
    assert theirs.status_code == 404  # another's session answers as one that does not exist
    assert bobs.status_code == 404


async def test_a_session_whose_runner_is_gone_shows_as_interrupted(evidence: Evidence) -> None:
    """Its owner lock is free: the same answer on any host, read without writing."""
    writer = SessionWriter(["alice"], turns=1)
    async with open_postgres_store(evidence.url) as store:
        rows, blobs = writer.start()
        owned = writer.chain.seal(SegmentStarted(segment=1, cause="resume", runner=this_process()))
        await store.append([*rows, owned], blobs)
        async with serving(evidence) as (_, client):
            running = await client.get(
                f"/api/sessions/{writer.id}", headers=bearer(evidence, "viewer")
            )
    async with serving(evidence) as (_, client):
        gone = await client.get(f"/api/sessions/{writer.id}", headers=bearer(evidence, "viewer"))
    assert running.json()["session"]["status"] == "running"
    assert gone.json()["session"]["status"] == "interrupted"


class _Counted:
    """The psycopg connection the named reads run on, counting the statements sent on it."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.statements: list[str] = []

    def execute(self, query: str, arguments: Any = None) -> Any:
        self.statements.append(query)
        return self.connection.execute(query, arguments)

    def cursor(self, **options: Any) -> Any:
        cursor, statements = self.connection.cursor(**options), self.statements

        class Counted:
            def execute(self, query: str, arguments: Any = None) -> Any:
                statements.append(query)
                return cursor.execute(query, arguments)

        return Counted()


class _Answers(NamedTuple):
    token: TokenInfo | None
    session: SessionInfo | None
    roster: frozenset[str] | None
    page: list[RecordRow]


def _answers(connection: _Counted, plan: ReadAhead, *, ahead: bool) -> _Answers:
    """What the named reads answer for ``plan``'s arguments, read ahead or one by one."""
    reads = PostgresReads(connection)
    if ahead:
        reads.read_ahead(plan)
    return _Answers(
        None if plan.token is None else reads.token(plan.token, "2000-01-01T00:00:00"),
        reads.session(plan.session_id),
        None
        if plan.participant is None
        else reads.participant_sessions(plan.participant, [plan.session_id]),
        [] if plan.page is None else reads.page(plan.session_id, plan.page),
    )


async def test_reads_made_ahead_answer_as_the_reads_one_by_one_in_one_statement(
    evidence: Evidence,
) -> None:
    """A GET's token check, session (with its runner's liveness), roster and page, read in
    one statement, answer exactly as each read alone: for a revoked or unknown token, a
    session that is not there, a participant outside the roster, a running session."""
    tokens = TokenStore(PostgresBackend(evidence.url))
    revoked = await tokens.issue("viewer", label="revoked")
    await tokens.revoke(revoked.info.id)
    digest = {
        name: hashlib.sha256(secret.encode()).hexdigest()
        for name, secret in {**evidence.secrets, "revoked": revoked.secret}.items()
    }
    writer = SessionWriter(["alice"], turns=1)
    everything, alices = RecordFilter(limit=5), RecordFilter(participant="alice", after=2)
    plans = [
        ReadAhead(evidence.pair, token=digest["viewer"], page=everything),
        ReadAhead(evidence.pair, token=digest["alice"], participant="alice", page=alices),
        ReadAhead(evidence.solo, token=digest["alice"], participant="alice", page=alices),
        ReadAhead(evidence.pair, token=digest["revoked"], page=everything),
        ReadAhead(evidence.pair, token="0" * 64, participant="nobody"),
        ReadAhead("ses_not_there", token=digest["admin"], participant="alice", page=everything),
        ReadAhead(writer.id, page=RecordFilter(kinds=("segment.started",))),
    ]

    def compare() -> list[_Answers]:
        found = []
        with psycopg.connect(evidence.url, autocommit=True) as raw:
            for plan in plans:
                ahead, alone = _Counted(raw), _Counted(raw)
                answered = _answers(ahead, plan, ahead=True)
                assert answered == _answers(alone, plan, ahead=False), plan
                assert len(ahead.statements) == 1, ahead.statements
                assert len(alone.statements) > 1
                found.append(answered)
        return found

    async with open_postgres_store(evidence.url) as store:
        rows, blobs = writer.start()
        owned = writer.chain.seal(SegmentStarted(segment=1, cause="resume", runner=this_process()))
        await store.append([*rows, owned], blobs)
        running = await anyio.to_thread.run_sync(compare)
        stored = [row async for row in store.rows(evidence.pair, everything)]
    gone = await anyio.to_thread.run_sync(compare)
    viewer, alice, outside, refused, unknown, missing, _ = running
    assert viewer.token is not None
    assert viewer.session is not None
    assert viewer.page == stored  # rows read in binary are the rows the store reads
    assert [row.seq for row in viewer.page] == [0, 1, 2, 3, 4]
    assert alice.roster == frozenset({evidence.pair})
    assert {row.participant for row in alice.page} == {"alice"}
    assert outside.roster == frozenset()
    assert refused.token is None
    assert unknown.token is None
    assert unknown.roster == frozenset()
    assert missing.session is None
    assert missing.page == []
    assert running[-1].session is not None
    assert running[-1].session.status == "running"
    assert gone[-1].session is not None
    assert gone[-1].session.status == "interrupted"
    assert gone[-1].page == running[-1].page
    assert {row.kind for row in gone[-1].page} == {"segment.started"}


async def test_a_read_ahead_answers_only_its_own_arguments_and_once(evidence: Evidence) -> None:
    def reads() -> list[str]:
        with psycopg.connect(evidence.url, autocommit=True) as raw:
            counted = _Counted(raw)
            named = PostgresReads(counted)
            named.read_ahead(ReadAhead(evidence.pair, participant="alice"))
            assert named.session(evidence.solo) is not None  # another session: read anew
            assert named.session(evidence.pair) is not None  # read ahead
            assert named.session(evidence.pair) is not None  # once only: read anew
            assert named.participant_sessions("bob", [evidence.pair]) == frozenset({evidence.pair})
            return counted.statements

    statements = await anyio.to_thread.run_sync(reads)
    assert len(statements) == 4


async def test_a_revoked_token_is_refused_before_a_missing_session(evidence: Evidence) -> None:
    async with serving(evidence) as (service, client):
        issued = await service.tokens.issue("viewer", label="revoked later")
        token = {"Authorization": f"Bearer {issued.secret}"}
        before = await client.get(f"/api/sessions/{evidence.pair}/records", headers=token)
        await TokenStore(PostgresBackend(evidence.url)).revoke(issued.info.id)
        after = await client.get("/api/sessions/ses_not_there/records", headers=token)
    assert before.status_code == 200
    assert after.status_code == 401  # not the 404 the read made ahead would also allow


async def test_an_artifact_is_served_from_its_table(evidence: Evidence) -> None:
    path = f"/api/sessions/{evidence.pair}/records/{evidence.artifact_seq}/artifact"
    async with serving(evidence) as (service, client):
        served = await client.get(path, headers=bearer(evidence, "viewer"))
        withheld = await client.get(path, headers=bearer(evidence, "alice"))
        preview = await service.store.backend.artifact_prefix(
            hashlib.sha256(ARTIFACT).hexdigest(), 8
        )
        missing = await service.store.backend.artifact_prefix("0" * 64, 8)
    assert served.status_code == 200, served.text
    assert served.content == ARTIFACT
    assert served.headers["content-type"].startswith("text/plain")
    assert withheld.status_code == 404  # a session-level record: not a participant's
    assert preview == ARTIFACT[:8]
    assert missing is None


async def test_the_viewer_pages_show_the_postgresql_store(evidence: Evidence) -> None:
    async with serving(evidence) as (_, client):
        viewer = bearer(evidence, "viewer")
        home = await client.get("/", headers=viewer)
        session = await client.get(f"/sessions/{evidence.pair}", headers=viewer)
        verified = await client.get("/verify", headers=viewer)
        turns = await client.get(f"/sessions/{evidence.pair}/turns", headers=viewer)
    assert home.status_code == 200, home.text[-400:]
    assert evidence.pair in home.text
    assert session.status_code == 200, session.text[-400:]
    assert evidence.pair in session.text
    assert turns.status_code == 200, turns.text[-400:]
    assert verified.status_code == 200, verified.text[-400:]
    where = PostgresBackend(evidence.url).location
    assert where in home.text


def _page_grants(marker: str) -> str:
    """The ``sql`` block of docs/postgresql.md after ``<!-- marker -->``."""
    found = re.search(rf"<!-- {marker} -->\n```sql\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert found, f"docs/postgresql.md lost its {marker} block"
    return found.group(1)


@pytest.fixture(scope="module")
def documented_viewer(evidence: Evidence, postgres_server: _engines.PostgresServer) -> Evidence:
    """The module's evidence reached as a role given exactly the page's viewer and serve
    grants (under a name of this module's own: the server is shared)."""
    suffix = secrets.token_hex(3)
    role, runner = f"envh_viewer_{suffix}", f"envh_runner_{suffix}"
    grants = _page_grants("grants") + _page_grants("serve grants")
    with psycopg.connect(evidence.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(runner)))
        admin.execute(grants.replace("envh_viewer", role).replace("envh_runner", runner))
    url = evidence.url.replace(f"{postgres_server.user}@", f"{role}@")
    return Evidence(url, evidence.pair, evidence.solo, evidence.artifact_seq, evidence.secrets)


async def test_every_view_answers_with_the_documented_grants(documented_viewer: Evidence) -> None:
    evidence = documented_viewer
    pair, solo = evidence.pair, evidence.solo
    pages = [
        "/experiments", "/sessions", "/trajectories", "/snapshots", "/datasets", "/sources",
        "/harnesses", "/harnesses/runs", f"/sessions/{pair}/progression",
        f"/sessions/{pair}/config", f"/sessions/{pair}/trajectory", f"/sessions/{pair}/records/0",
        f"/compare?left={pair}&right={solo}",
    ]  # fmt: skip
    async with serving(evidence) as (service, client):
        await service.tokens.check_grants()
        viewer = bearer(evidence, "viewer")
        answers = {path: (await client.get(path, headers=viewer)).status_code for path in pages}
        checked = await client.get(f"/api/trajectories/{pair}?check=true", headers=viewer)
        reduced = await client.get(f"/api/trajectories/{pair}", headers=bearer(evidence, "alice"))
        refused = await client.get(f"/api/trajectories/{solo}", headers=bearer(evidence, "alice"))
        imported = await client.get("/api/trajectories/acme/tool:episode-1", headers=viewer)
        importing = await client.post(
            "/api/imports", params={"source": "acme/tool"}, content=b"{}\n",
            headers={**bearer(evidence, "admin"), "Content-Type": "application/x-ndjson"},
        )  # fmt: skip
    assert answers == dict.fromkeys(pages, 200)
    assert checked.status_code == 200, checked.text
    assert checked.json()["check"]["ok"] is True
    assert reduced.status_code == 200
    assert refused.status_code == 404
    assert imported.status_code == 404  # no source of that name was imported
    assert importing.status_code == 422, importing.text  # a bad line, refused before any write


async def test_tokens_are_issued_checked_and_revoked_in_the_database(evidence: Evidence) -> None:
    async with serving(evidence) as (service, client):
        issued = await service.tokens.issue("participant", participant="alice",
                                            sessions=[evidence.pair], label="bound")  # fmt: skip
        with pytest.raises(ConfigurationError, match="takes no part in session"):
            await service.tokens.issue("participant", participant="alice",
                                       sessions=[evidence.solo])  # fmt: skip
        token = {"Authorization": f"Bearer {issued.secret}"}
        before = await client.get(f"/api/sessions/{evidence.pair}/records", headers=token)
        again = await client.get(f"/api/sessions/{evidence.pair}/records", headers=token)
        await TokenStore(PostgresBackend(evidence.url)).revoke(issued.info.id)  # elsewhere
        after = await client.get(f"/api/sessions/{evidence.pair}/records", headers=token)
        listed = await service.tokens.tokens()
    assert before.status_code == again.status_code == 200
    assert after.status_code == 401
    revoked = next(info for info in listed if info.id == issued.info.id)
    assert revoked.revoked_at is not None
    assert revoked.sessions == (evidence.pair,)


async def test_a_stored_sign_in_code_signs_a_browser_in(
    evidence: Evidence, state_home: Path
) -> None:
    async with serving(evidence) as (service, client):
        backend = service.store.backend
        assert isinstance(backend, PostgresBackend)
        code = await anyio.to_thread.run_sync(issue_stored_code, backend)
        signed_in = await client.post("/login", data={"code": code})
        page = await client.get("/")
        reused = await client.post("/login", data={"code": code})
    assert signed_in.status_code == 303
    assert page.status_code == 200
    assert reused.status_code == 400
    folder = service_directory(backend)
    assert folder.is_relative_to(state_home)  # never in the database, where roles could read it
    for path in (folder.parent, folder, folder / "codes"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_sign_in_folders_are_per_database_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    (tmp_path / "envharness").mkdir(mode=0o755)  # made by hand, readable by others
    (tmp_path / "envharness").chmod(0o755)
    admin = PostgresBackend("postgresql://owner:pw@db.internal:5432/evidence")
    viewer = PostgresBackend("postgresql://envh_viewer@db.internal:5432/evidence")
    other = PostgresBackend("postgresql://owner@db.internal:5432/elsewhere")
    folder = service_directory(admin)
    assert service_directory(viewer) == folder  # serve and login-link may use other roles
    assert service_directory(other) != folder
    assert stat.S_IMODE((tmp_path / "envharness").stat().st_mode) == 0o700
    assert "pw" not in str(folder)
    code = issue_stored_code(viewer)
    assert [path.name for path in (folder / "codes").iterdir()] == [
        hashlib.sha256(code.encode()).hexdigest()
    ]
    assert code not in "".join(path.read_text() for path in tmp_path.rglob("*") if path.is_file())


async def test_a_record_stream_replays_then_ends(evidence: Evidence) -> None:
    async with serving(evidence) as (_, client):
        response = await client.get(
            f"/api/sessions/{evidence.pair}/events", headers=bearer(evidence, "alice")
        )
    blocks = re.findall(r"^data: (.*)$", response.text, flags=re.M)
    records = [msgspec.json.decode(data) for data in blocks[:-1]]
    assert records
    assert {record["participant"] for record in records} == {"alice"}
    assert msgspec.json.decode(blocks[-1])["status"] == "completed"


async def test_a_live_session_streams_with_no_gap(
    evidence: Evidence, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "POLL_INTERVAL", 0.01)
    writer = SessionWriter(["alice"], turns=12)
    async with open_postgres_store(evidence.url) as store, serving(evidence) as (service, _):
        rows, blobs = writer.start()
        await store.append(rows, blobs)
        seen: list[int] = []
        first = anyio.Event()

        async def follow() -> None:
            stream = record_events(service, writer.id, RecordFilter(), -1)
            async for chunk in stream:
                if chunk.startswith(b"event: end"):
                    break
                seen.extend(int(seq) for seq in re.findall(rb'"seq":(\d+)', chunk))
                first.set()
            await stream.aclose()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                await first.wait()  # the stream is open before the turns are written
                for turn in range(1, 13):
                    rows, blobs = writer.turn(turn)
                    await store.append(rows, blobs)
                await store.append(writer.finish())
    assert seen == list(range(writer.chain.next_seq))


_OTHER_RUNNER = """
import sys, anyio
from envharness.store.postgres import open_postgres_store
from tests.store._support import logs, new_session, status_row

async def main():
    chain, created = new_session(experiment_id=sys.argv[2])
    rows = [created, status_row(chain, "running"), *logs(chain, 2), status_row(chain, "completed")]
    async with open_postgres_store(sys.argv[1], create=False) as store:
        await store.append(rows)
    print(chain.session_id)

anyio.run(main)
"""


# A process start is most of this test's time: the other backend's streams are the in-process
# test's above, and nothing here depends on the event loop.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_experiment_stream_follows_a_runner_in_another_process(
    evidence: Evidence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Positions are handed out in commit order across runners, so a viewer following ``pos``
    sees what another process commits while the stream is open."""
    monkeypatch.setattr(events, "POLL_INTERVAL", 0.01)
    experiment = ExperimentWriter(("only",), trials=1, participants=("alice",), name="followed")
    async with open_postgres_store(evidence.url) as store, serving(evidence) as (service, _):
        await store.append(experiment.start())
        principal = await _principal(service, evidence.secrets["viewer"])
        seen: list[tuple[str, dict[str, Any]]] = []
        first = anyio.Event()

        async def follow() -> None:
            stream = experiment_events(Access(service, principal), experiment.id, -1)
            async for chunk in stream:
                for kind, data in re.findall(rb"event: (\S+)\ndata: (.*)\n", chunk):
                    seen.append((kind.decode(), msgspec.json.decode(data)))
                first.set()
                if chunk.startswith(b"event: end"):
                    break
            await stream.aclose()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                await first.wait()
                done = await anyio.run_process(
                    [sys.executable, "-c", _OTHER_RUNNER, evidence.url, experiment.id],
                    cwd=ROOT,
                )
                other = done.stdout.decode().strip()
                await store.append(experiment.finish())
    kinds = [kind for kind, _ in seen]
    assert ("session.created", other) in [(k, d.get("session_id")) for k, d in seen]
    assert kinds.index("session.created") < kinds.index("end")
    statuses = [d["status"] for k, d in seen if k == "session.status" and d["session_id"] == other]
    assert statuses[-1] == "completed"
    assert seen[-1][1]["status"] == "completed"


async def _principal(service: Service, secret: str) -> Principal:
    info = await service.tokens.resolve(secret)
    assert info is not None
    return Principal.of(info, "bearer")


# -- the command line ----------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli_app, list(args), catch_exceptions=False)


def test_token_commands_take_a_postgresql_store(evidence: Evidence) -> None:
    issued = invoke("--store", evidence.url, "token", "issue", "--role", "viewer", "--label", "ci")
    assert issued.exit_code == 0, issued.output
    secret = issued.stdout.strip()
    token_id = re.search(r"(tok_\S+);", issued.stderr)
    assert token_id, issued.stderr
    listed = invoke("--store", evidence.url, "token", "list", "--json")
    revoked = invoke("--store", evidence.url, "token", "revoke", token_id.group(1))
    assert token_id.group(1) in listed.stdout
    assert secret not in listed.stdout  # a secret is shown once
    assert revoked.exit_code == 0, revoked.output
    assert anyio.run(TokenStore(PostgresBackend(evidence.url)).resolve, secret) is None


@pytest.fixture(scope="module")
def select_only(evidence: Evidence, postgres_server: _engines.PostgresServer) -> str:
    """A role that may read the evidence but not the tokens: a viewer's grants alone."""
    role = f"envh_reader_{secrets.token_hex(3)}"
    with psycopg.connect(evidence.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT SELECT ON envharness_schema, sessions, records, tokens TO {}").format(
                sql.Identifier(role)
            )
        )
    return evidence.url.replace(f"{postgres_server.user}@", f"{role}@")


def test_serve_refuses_a_role_that_may_not_keep_tokens(select_only: str) -> None:
    result = CliRunner().invoke(cli_app, ["--store", select_only, "serve", "--port", "0"])
    assert result.exit_code != 0
    assert "may not INSERT, UPDATE on the table tokens" in result.output
    assert "GRANT SELECT, INSERT, UPDATE ON tokens TO envh_reader_" in result.output


async def test_a_token_write_refused_by_the_server_names_the_role(select_only: str) -> None:
    tokens = TokenStore(PostgresBackend(select_only))
    with pytest.raises(ConfigurationError, match="may not INSERT, UPDATE"):
        await tokens.check_grants()
    with pytest.raises(StoreError, match=r"refused role 'envh_reader_\w+': permission denied"):
        await tokens.issue("viewer")


def test_serve_never_prints_a_wrong_password(
    evidence: Evidence, postgres_server: _engines.PostgresServer
) -> None:
    role, password = password_role_on(postgres_server)
    wrong = f"wrong-{secrets.token_hex(6)}"
    database = evidence.url.rsplit("/", 1)[1]
    url = f"postgresql://{role}:{wrong}@{postgres_server.host}:{postgres_server.port}/{database}"
    result = CliRunner().invoke(cli_app, ["--store", url, "serve", "--port", "0"])
    assert result.exit_code != 0
    assert "password" in result.output
    assert wrong not in result.output
    assert password not in result.output


@pytest.mark.slow
def test_serve_and_login_link_on_postgresql(
    evidence: Evidence, state_home: Path, postgres_server: _engines.PostgresServer
) -> None:
    # The test server trusts its users, so a password in the URL is sent nowhere; it must
    # still appear nowhere: not in the banner, a page, a log line or the state directory.
    secret = f"hunter-{secrets.token_hex(6)}"
    user = postgres_server.user
    url = evidence.url.replace(f"//{user}@", f"//{user}:{secret}@")
    command = [sys.executable, "-m", "envharness.cli", "--store", url, "serve", "--port", "0"]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_STATE_HOME": str(state_home)}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            lines = [process.stdout.readline() for _ in range(6)]
            where = PostgresBackend(evidence.url).location
            assert lines[0].strip() == f"envharness viewer for {where}"
            assert f"envharness --store {where} login-link" in lines[3]
            assert re.search(r"http://127\.0\.0\.1:\d+/login\?code=\S+", lines[1]), lines
            fresh = invoke("--store", url, "login-link")
            assert fresh.exit_code == 0, fresh.output
            link = re.search(r"(http://127\.0\.0\.1:\d+)/login\?code=(\S+)", fresh.stdout)
            assert link, fresh.stdout
            with httpx.Client(base_url=link.group(1), timeout=10) as browser:
                sign_in = browser.get(f"/login?code={link.group(2)}")
                assert browser.post("/login", data={"code": link.group(2)}).status_code == 303
                home = browser.get("/")
                listed = browser.get("/sessions")  # the overview shows only the 8 latest
                expired = browser.post("/login", data={"code": link.group(2)})
            assert home.status_code == 200
            assert evidence.pair in listed.text
        finally:
            stop(process)
        printed = "".join(lines) + process.stdout.read()
        errors = process.stderr.read()
    assert process.returncode == 0, errors
    assert "stopped" in errors
    shown = [printed, errors, fresh.output, sign_in.text, home.text, listed.text, expired.text]
    shown += [path.read_text() for path in state_home.rglob("*") if path.is_file()]
    assert not [text for text in shown if secret in text]
    gone = invoke("--store", url, "login-link")  # the address left with the server
    assert gone.exit_code != 0
    assert "no `envharness serve` has recorded an address" in gone.output
    assert secret not in gone.output
