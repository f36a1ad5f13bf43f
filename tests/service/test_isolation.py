"""A participant token sees its own records in its own sessions, and nothing else, anywhere.

Every read path is tried: the JSON API, filters, export, the live stream, and every page.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest

from envharness.service.search import ORDERS, SORTS, STATUSES
from envharness.service.wire.sessions import RecordOut, SessionPage
from tests.service._support import SessionWriter, World, make_world, write_store

pytestmark = pytest.mark.anyio


async def _sessions_by_roster(world: World) -> dict[str, set[str]]:
    async with world.client("admin") as client:
        found = (await client.get("/api/sessions")).json()["sessions"]
        return {
            summary["id"]: set(
                (await client.get(f"/api/sessions/{summary['id']}")).json()["config"][
                    "participants"
                ]
            )
            for summary in found
        }


async def _others_records(world: World, session_id: str, participant: str) -> list[RecordOut]:
    """Every record of the session that ``participant`` must not see."""
    async with world.client("admin") as client:
        lines = (await client.get(f"/api/sessions/{session_id}/export")).text.splitlines()
    records = [msgspec.json.decode(line, type=RecordOut) for line in lines]
    return [record for record in records if record.participant != participant]


async def test_a_participant_lists_only_its_own_sessions(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    for name in ("alice", "bob"):
        async with world.client(name) as client:
            page = msgspec.json.decode(
                (await client.get("/api/sessions")).content, type=SessionPage
            )
        assert {s.id for s in page.sessions} == {sid for sid, r in rosters.items() if name in r}
        assert all(s.records is None and s.reason is None for s in page.sessions)
        async with world.client(name) as client:
            listed = (await client.get("/sessions", params={"sort": "turns"})).text
            searched = (await client.get("/api/sessions", params={"q": "ses_"})).json()
        shown = set(re.findall(r'<a class="mono" href="/sessions/(ses_\w+)">', listed))
        assert shown == {s.id for s in page.sessions}
        assert {s["id"] for s in searched["sessions"]} == shown


async def test_a_participant_reads_only_its_own_records_everywhere(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    shared = [sid for sid, roster in rosters.items() if {"alice", "bob"} <= roster]
    assert shared
    async with world.client("alice") as client:
        for session_id in shared:
            hidden = await _others_records(world, session_id, "alice")
            assert any(r.participant == "bob" for r in hidden)
            pages = [
                (await client.get(f"/api/sessions/{session_id}/records", params={"limit": 1000})),
                (await client.get(f"/api/sessions/{session_id}/records",
                                  params={"kind": ["observation", "action.attempted"]})),
                (await client.get(f"/api/sessions/{session_id}/records", params={"turn": 1})),
            ]  # fmt: skip
            received = [
                msgspec.json.decode(msgspec.json.encode(item), type=RecordOut)
                for response in pages
                for item in response.json()["records"]
            ]
            export = (await client.get(f"/api/sessions/{session_id}/export")).text.splitlines()
            received += [msgspec.json.decode(line, type=RecordOut) for line in export]
            events = (await client.get(f"/api/sessions/{session_id}/events")).text
            received += [
                msgspec.json.decode(data, type=RecordOut)
                for data in re.findall(r"^data: (\{.*\})$", events, flags=re.M)
                if '"session_id"' in data
            ]
            assert received
            assert {r.participant for r in received} == {"alice"}
            lineage = (await client.get(f"/api/sessions/{session_id}/lineage")).text
            compared = (
                await client.get("/api/compare", params={"left": session_id, "right": session_id})
            ).text
            detail = (await client.get(f"/api/sessions/{session_id}")).json()
            assert detail["config"] is None
            assert detail["scores"] == detail["findings"] == []
            assert detail["session"]["records"] is None
            bodies = [response.text for response in pages] + [events, "\n".join(export)]
            bodies += [lineage, compared]
            bodies.append(msgspec.json.encode(detail).decode())
            for path in ("", "/turns", "/turns?turn=2"):
                page = await client.get(f"/sessions/{session_id}{path}")
                assert page.status_code == 200
                bodies.append(page.text)
            for body in bodies:
                # A visible record's `prev` is its predecessor's digest, which the visible
                # record's own digest covers: that one link is the whole trace of the others.
                body = re.sub(r'"prev":"[0-9a-f]{64}"', "", body)
                for record in hidden:
                    assert record.digest not in body
                assert "bob" not in body
                assert "carol" not in body
            turns = bodies[-2]
            for record in hidden:
                assert f'id="r{record.seq}"' not in turns


async def test_asking_for_another_participant_is_a_404_like_a_missing_one(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    shared = next(sid for sid, roster in rosters.items() if {"alice", "bob"} <= roster)
    without_alice = next(sid for sid, roster in rosters.items() if "alice" not in roster)
    async with world.client("alice") as client:
        for params in ({"participant": "bob"}, {"participant": "nobody"}):
            response = await client.get(f"/api/sessions/{shared}/records", params=params)
            assert response.status_code == 404
        for path in ("/records", "/export", "/events", "/lineage", "", "/turns"):
            for prefix in ("/api/sessions/", "/sessions/"):
                if prefix == "/sessions/" and path in (
                    "/records",
                    "/export",
                    "/events",
                    "/lineage",
                ):
                    continue
                hidden = await client.get(f"{prefix}{without_alice}{path}")
                missing = await client.get(f"{prefix}ses_00000000000000000000ff{path}")
                assert hidden.status_code == missing.status_code == 404
                assert hidden.text.replace(without_alice, "X") == missing.text.replace(
                    "ses_00000000000000000000ff", "X"
                )
        bob_seq = next(r.seq for r in await _others_records(world, shared, "alice")
                       if r.participant == "bob")  # fmt: skip
        assert (await client.get(f"/sessions/{shared}/records/{bob_seq}")).status_code == 404


async def test_a_prefix_of_a_session_id_is_not_an_id(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    session_id = next(iter(rosters))
    async with world.client("viewer") as client:
        assert (await client.get(f"/api/sessions/{session_id[:-3]}")).status_code == 404


async def test_a_bound_participant_token_reaches_only_its_sessions(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    alices = [sid for sid, roster in rosters.items() if "alice" in roster]
    issued = await world.service.tokens.issue(
        "participant", participant="alice", sessions=alices[:1]
    )
    headers = {"Authorization": f"Bearer {issued.secret}"}
    async with world.client("none", headers=headers) as client:
        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == alices[:1]
        assert (await client.get(f"/api/sessions/{alices[0]}/records")).status_code == 200
        assert (await client.get(f"/api/sessions/{alices[1]}/records")).status_code == 404
        assert (await client.get(f"/sessions/{alices[1]}")).status_code == 404


@pytest.fixture
def carol_only(tmp_path: Path) -> World:
    store = tmp_path / "store"
    write_store(store, [(SessionWriter(["carol"]), 2)])
    return make_world(store)


async def test_a_participant_named_in_no_session_sees_an_empty_store(carol_only: World) -> None:
    async with carol_only.client("alice") as client:
        assert (await client.get("/api/sessions")).json() == {"sessions": [], "next_after": None}
        overview = await client.get("/")
        assert overview.status_code == 200
        assert "No sessions yet" in overview.text
        # Searching for carol, or by the start of every id, finds nothing and counts nothing.
        for query in ({"q": "carol"}, {"q": "ses_"}, {"status": "completed"}):
            listed = await client.get("/sessions", params=query)
            assert listed.status_code == 200
            assert "0 of 0 sessions" in listed.text
            assert "/sessions/ses_" not in listed.text
            assert (await client.get("/api/sessions", params=query)).json()["sessions"] == []


# -- the crawl: every page and filter, as a participant --------------------------------------

_NAMES = ("alice", "bob", "carol", "dana")
_MISSING_SESSION = "ses_00000000000000000000ff"
_MISSING_EXPERIMENT = "exp_00000000000000000000ff"


def _listing_urls(experiment: str | None, scenarios: set[str]) -> list[str]:
    """The Sessions page and ``GET /api/sessions`` under every search, filter, sort and page."""
    searches: list[dict[str, str]] = [{}, {"q": "ses_"}, {"q": "synthetic"}, {"q": "quickstart"}]
    searches += [{"q": name} for name in _NAMES]
    searches += [{"q": scenario} for scenario in sorted(scenarios)[:2]]
    searches += [{"status": status} for status in STATUSES]
    searches += [{"experiment": experiment}] if experiment else []
    searches += [{"page": "1"}, {"q": "far", "status": "completed", "sort": "updated"}]
    searches += [{"sort": sort, "order": order} for sort in SORTS for order in ORDERS]
    urls = []
    for params in searches:
        query = "&".join(f"{key}={value}" for key, value in params.items())
        urls.append(f"/sessions?{query}")
        if "page" not in params:
            urls.append(f"/api/sessions?{query}")
    return urls


async def test_a_participant_s_crawl_of_every_page_and_filter_shows_only_its_own(
    world: World,
) -> None:
    """alice (in most sessions) and dana (in one of its own, in no experiment) crawl the lists with
    every search, filter, sort and page, compare-selected, the experiments and their results,
    and the sign-in pages: they list only their own sessions and name no one else; a hidden
    session or experiment answers exactly as one that does not exist."""
    rosters = await _sessions_by_roster(world)
    async with world.client("admin") as client:
        sessions = (await client.get("/api/sessions")).json()["sessions"]
        [experiment] = (await client.get("/api/experiments")).json()["experiments"]
    scenarios = {session["scenario_id"] for session in sessions}
    dana = await world.service.tokens.issue("participant", participant="dana")
    crawlers = {"alice": {}, "dana": {"Authorization": f"Bearer {dana.secret}"}}
    for participant, headers in crawlers.items():
        mine = {sid for sid, roster in rosters.items() if participant in roster}
        hidden = sorted(set(rosters) - mine)
        assert mine
        assert hidden
        role = participant if participant in world.secrets else "none"
        async with world.client(role, headers=headers) as client:
            urls = _listing_urls(experiment["id"] if participant != "dana" else None, scenarios)
            urls += ["/", "/experiments", "/api/experiments", "/trajectories"]
            if participant != "dana":
                urls += [f"/experiments/{experiment['id']}", f"/api/experiments/{experiment['id']}"]
            for url in urls:
                response = await client.get(url)
                assert response.status_code == 200, (participant, url, response.text[:300])
                asked = parse_qs(urlsplit(url).query).get("q", [""])[0]
                body = response.text.replace(asked, "") if asked else response.text  # echoed
                _assert_shows_only_own(body, participant, mine, set(hidden), url)
            # A hidden session or experiment, wherever it is named, answers as a missing one.
            own = sorted(mine)[0]
            pairs = [
                (f"/compare?left={own}&right={{}}", hidden[0], _MISSING_SESSION),
                (f"/api/compare?left={{}}&right={own}", hidden[0], _MISSING_SESSION),
                ("/sessions?compare={}&compare=" + own, hidden[0], _MISSING_SESSION),
                ("/sessions?compare={}", hidden[0], _MISSING_SESSION),
                ("/sessions?experiment={}", experiment["id"], _MISSING_EXPERIMENT),
                ("/api/sessions?experiment={}", experiment["id"], _MISSING_EXPERIMENT),
                ("/sessions/{}/turns?follow=1", hidden[0], _MISSING_SESSION),
            ]
            if participant == "dana":
                pairs += [
                    ("/experiments/{}", experiment["id"], _MISSING_EXPERIMENT),
                    ("/api/experiments/{}", experiment["id"], _MISSING_EXPERIMENT),
                    ("/api/experiments/{}/events", experiment["id"], _MISSING_EXPERIMENT),
                ]
            for template, secret, missing in pairs:
                if "?experiment=" in template and participant != "dana":
                    continue  # the experiment is theirs: listed above
                seen = await client.get(template.format(secret))
                absent = await client.get(template.format(missing))
                assert seen.status_code == absent.status_code, (participant, template)
                assert seen.headers.get("location", "").replace(secret, "X") == absent.headers.get(
                    "location", ""
                ).replace(missing, "X")
                assert seen.text.replace(secret, "X") == absent.text.replace(missing, "X")
                if seen.status_code == 303:  # compare-selected: the Compare page then decides
                    followed = await client.get(seen.headers["location"])
                    assert followed.status_code == 404, (participant, template)
            # Following its own session live shows its own view; the snapshots and datasets
            # made from an experiment (which name every session) are not a participant's.
            followed = await client.get(f"/sessions/{own}/turns", params={"follow": "1"})
            assert followed.status_code == 200, (participant, followed.text[:300])
            assert 'id="live-banner"' in followed.text
            _assert_shows_only_own(followed.text, participant, mine, set(hidden), "follow")
            if participant != "dana":
                page = await client.get(f"/experiments/{experiment['id']}")
                assert 'id="frozen"' not in page.text
            # Paging walks its own sessions only, a page at a time.
            paged: list[str] = []
            after: str | None = None
            while True:
                params = {"limit": "2", "sort": "turns", **({"after": after} if after else {})}
                page = (await client.get("/api/sessions", params=params)).json()
                paged += [session["id"] for session in page["sessions"]]
                if (after := page["next_after"]) is None:
                    break
            assert sorted(paged) == sorted(mine)
    # The sign-in pages name no session, experiment or participant, signed in or not.
    async with world.client("none") as client:
        for response in (
            await client.get("/login"),
            await client.get("/login", params={"code": "not-a-code"}),
            await client.post("/login", data={"code": "not-a-code"}),
        ):
            assert "ses_" not in response.text
            assert "exp_" not in response.text
            assert not any(name in response.text for name in _NAMES)
        expired = await client.post("/login", data={"code": "not-a-code"})
        assert "Link expired" in expired.text


def _assert_shows_only_own(
    body: str, participant: str, mine: set[str], hidden: set[str], url: str
) -> None:
    listed = set(re.findall(r"ses_[0-9a-f]{22}", body))
    assert listed <= mine, (participant, url, listed - mine)
    assert not listed & hidden
    for other in set(_NAMES) - {participant}:
        assert other not in body, (participant, url, other)
