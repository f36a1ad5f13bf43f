"""The JSON API: paging, filters, errors that name the parameter, export, verify, tokens.

Answers are decoded with the service's own wire types, so a field that drifts from the
published schema fails here.
"""

from __future__ import annotations

import msgspec
import pytest

from envharness.records import digest_of
from envharness.service.wire.sessions import (
    KINDS,
    Health,
    NewToken,
    Problem,
    RecordOut,
    RecordPage,
    SessionDetail,
    SessionPage,
    VerifyOut,
)
from envharness.store.tokens import TokenInfo
from tests.service._support import TRIO, World

pytestmark = pytest.mark.anyio


async def _all_sessions(world: World) -> list[str]:
    async with world.client("viewer") as client:
        page = msgspec.json.decode((await client.get("/api/sessions")).content, type=SessionPage)
    return [summary.id for summary in page.sessions]


async def test_health_needs_no_credential(world: World) -> None:
    async with world.client("none") as client:
        health = msgspec.json.decode((await client.get("/api/health")).content, type=Health)
    assert health.status == "ok"
    assert health.schema_version >= 2


async def test_sessions_page_through_every_session_once(world: World) -> None:
    everything = await _all_sessions(world)
    assert len(everything) == 14
    seen: list[str] = []
    after: str | None = None
    async with world.client("viewer") as client:
        while True:
            params = {"limit": 5} | ({"after": after} if after else {})
            response = await client.get("/api/sessions", params=params)
            page = msgspec.json.decode(response.content, type=SessionPage)
            seen += [summary.id for summary in page.sessions]
            if page.next_after is None:
                break
            after = page.next_after
        assert seen == everything
        failed = (await client.get("/api/sessions", params={"status": "failed"})).json()
        assert [s["status"] for s in failed["sessions"]] == ["failed"]
        scenario = (await client.get("/api/sessions", params={"scenario": "overshoot"})).json()
        assert len(scenario["sessions"]) == 2  # two trials in the experiment
        assert {s["scenario_id"] for s in scenario["sessions"]} == {"overshoot"}
        none = (await client.get("/api/sessions", params={"experiment": "exp_x"})).json()
        assert none == {"sessions": [], "next_after": None}


async def test_records_page_by_seq_with_no_gap_and_no_duplicate(world: World) -> None:
    session_id = (await _all_sessions(world))[TRIO]
    async with world.client("viewer") as client:
        whole = (await client.get(f"/api/sessions/{session_id}/export")).text.splitlines()
        seqs: list[int] = []
        after = -1
        while True:
            response = await client.get(
                f"/api/sessions/{session_id}/records", params={"after": after, "limit": 7}
            )
            page = msgspec.json.decode(response.content, type=RecordPage)
            seqs += [record.seq for record in page.records]
            if page.next_after is None:
                break
            after = page.next_after
    assert seqs == list(range(len(whole)))


async def test_records_filter_by_kind_participant_and_turn(world: World) -> None:
    session_id = (await _all_sessions(world))[TRIO]
    url = f"/api/sessions/{session_id}/records"
    async with world.client("viewer") as client:
        blocked = (await client.get(url, params={"kind": "action.blocked"})).json()["records"]
        assert blocked
        assert {r["kind"] for r in blocked} == {"action.blocked"}
        both = (await client.get(url, params={"kind": ["score", "finding"]})).json()["records"]
        assert {r["kind"] for r in both} == {"score", "finding"}
        bobs = (await client.get(url, params={"participant": "bob"})).json()["records"]
        assert bobs
        assert {r["participant"] for r in bobs} == {"bob"}
        second = (await client.get(url, params={"turn": 2})).json()["records"]
        assert second
        assert {r["turn"] for r in second} == {2}


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"limit": "abc"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": 5000}, "limit"),
        ({"after": -5}, "after"),
        ({"turn": -1}, "turn"),
        ({"turn": "first"}, "turn"),
        ({"kind": "observations"}, "kind"),
        ({"colour": "blue"}, "colour"),
        ({"participant": ["a", "b"]}, "participant"),
    ],
)
async def test_a_malformed_parameter_is_a_422_that_names_it(
    world: World, params: dict[str, object], parameter: str
) -> None:
    session_id = (await _all_sessions(world))[0]
    async with world.client("viewer") as client:
        response = await client.get(f"/api/sessions/{session_id}/records", params=params)
    problem = msgspec.json.decode(response.content, type=Problem)
    assert response.status_code == problem.status == 422
    assert problem.parameter == parameter
    assert repr(parameter) in problem.message


async def test_sessions_refuse_an_unknown_cursor_and_status(world: World) -> None:
    async with world.client("viewer") as client:
        cursor = await client.get("/api/sessions", params={"after": "ses_nope"})
        assert cursor.status_code == 422
        assert cursor.json()["parameter"] == "after"
        status = await client.get("/api/sessions", params={"status": "done"})
        assert status.status_code == 422
        assert status.json()["parameter"] == "status"


async def test_unknown_things_are_404s_in_the_api_format(world: World) -> None:
    async with world.client("viewer") as client:
        for path in ("/api/sessions/ses_nope", "/api/sessions/ses_nope/records",
                     "/api/sessions/ses_nope/export", "/api/sessions/ses_nope/events",
                     "/api/nothing"):  # fmt: skip
            response = await client.get(path)
            assert response.status_code == 404, path
            msgspec.json.decode(response.content, type=Problem)
        wrong = await client.post("/api/sessions")
        assert wrong.status_code == 405
        assert wrong.json()["status"] == 405


async def test_a_session_detail_has_its_configuration_scores_and_findings(world: World) -> None:
    session_id = (await _all_sessions(world))[TRIO]  # below zero: a finding, then continued
    async with world.client("viewer") as client:
        detail = msgspec.json.decode(
            (await client.get(f"/api/sessions/{session_id}")).content, type=SessionDetail
        )
    assert detail.session.id == session_id
    assert detail.session.terminal
    assert detail.config is not None
    assert set(detail.config.participants) == {
        "alice",
        "bob",
        "carol",
    }
    # A report (and a finding) for the first three turns, and again once it was continued.
    assert [score.kind for score in detail.scores] == ["score", "score"]
    assert [finding.kind for finding in detail.findings] == ["finding", "finding"]
    assert detail.lineage == []


async def test_export_streams_every_record_with_digests_that_recompute(world: World) -> None:
    session_id = (await _all_sessions(world))[10]
    async with world.client("viewer") as client:
        response = await client.get(f"/api/sessions/{session_id}/export")
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = response.text.splitlines()
        summary = (await client.get(f"/api/sessions/{session_id}")).json()["session"]
    assert len(lines) == summary["records"]
    previous = None
    for line in lines:
        record = msgspec.json.decode(line, type=RecordOut)
        raw = msgspec.json.decode(line)
        payload = msgspec.json.encode(raw["payload"], order="sorted")
        assert record.prev == previous
        assert record.digest == digest_of(
            record.session_id, record.seq, record.kind, record.turn, record.participant,
            record.at, payload, record.prev,
        )  # fmt: skip
        previous = record.digest


async def test_verify_reports_an_intact_store(world: World) -> None:
    async with world.client("viewer") as client:
        report = msgspec.json.decode((await client.get("/api/verify")).content, type=VerifyOut)
    assert report.ok
    assert report.sessions == 16  # the 14 sessions' chains, the experiment's, the source's
    assert report.breaks == []


async def test_verify_full_runs_the_integrity_check_and_refuses_a_bad_value(world: World) -> None:
    async with world.client("viewer") as client:
        full = await client.get("/api/verify", params={"full": "true"})
        wrong = await client.get("/api/verify", params={"full": "maybe"})
    report = msgspec.json.decode(full.content, type=VerifyOut)
    assert (report.ok, report.sessions, report.breaks) == (True, 16, [])
    assert wrong.status_code == 422
    assert msgspec.json.decode(wrong.content, type=Problem).parameter == "full"


async def test_an_admin_issues_lists_and_revokes_tokens(world: World) -> None:
    session_id = (await _all_sessions(world))[5]
    async with world.client("admin") as client:
        response = await client.post(
            "/api/tokens",
            json={"role": "participant", "participant": "alice", "sessions": [session_id],
                  "label": "for a script"},
        )  # fmt: skip
        assert response.status_code == 201
        issued = msgspec.json.decode(response.content, type=NewToken)
        assert issued.token.startswith("eht_")
        assert issued.info.sessions == (session_id,)
        listed = msgspec.json.decode(
            (await client.get("/api/tokens")).content, type=list[TokenInfo]
        )
        assert issued.info.id in {info.id for info in listed}
        assert issued.token not in (await client.get("/api/tokens")).text
        for body, parameter in [({"role": "root"}, "body"), ({"role": "viewer", "x": 1}, "body")]:
            bad = await client.post("/api/tokens", json=body)
            assert bad.status_code == 422
            assert bad.json()["parameter"] == parameter
        participant_without_name = await client.post("/api/tokens", json={"role": "participant"})
        assert participant_without_name.status_code == 422
        not_json = await client.post("/api/tokens", content=b"role=viewer")
        assert not_json.status_code == 415
        garbage = await client.post(
            "/api/tokens", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert garbage.status_code == 422
        assert (await client.delete("/api/tokens/tok_nope")).status_code == 404
        assert (await client.delete(f"/api/tokens/{issued.info.id}")).status_code == 200
    async with world.client("none", headers={"Authorization": f"Bearer {issued.token}"}) as c:
        assert (await c.get("/api/sessions")).status_code == 401


def test_the_kind_enum_is_every_payload_kind() -> None:
    from typing import get_args

    from envharness.records import Payload

    assert set(KINDS) == {str(member.__struct_config__.tag) for member in get_args(Payload)}
