"""The API of harness versions and optimizer runs: what it answers, to whom, and bad input.

The store is written by the real optimizer (``_harness_store``): the coding-shell demo and a
scripted engineer, harness-v1 (iteration 1, after a candidate that broke two solved tasks was
rejected and an answer that was not a patch was refused) and harness-v2 stacked on it.
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest

from envharness.client import AsyncClient, Client, ServiceError
from envharness.optimizer import HarnessPatch
from envharness.optimizer.history import RunHistory
from envharness.optimizer.versions import diff_versions, harness_version
from envharness.service.wire.optimizer import (
    HarnessDiff,
    HarnessVersionDetail,
    HarnessVersionPage,
    OptimizerRunPage,
)
from tests.service._harness_store import SCRIPT
from tests.service._support import BASE, World, api_doc_examples, run_api_doc_example

pytestmark = pytest.mark.anyio

ENDPOINTS = (
    "/api/harness/versions",
    "/api/harness/versions/harness-v1",
    "/api/harness/versions/harness-v9",
    "/api/harness/diff?old=harness-v1&new=harness-v2",
    "/api/optimizer/runs",
    "/api/optimizer/runs/{run}",
    "/api/optimizer/runs/opt_missing",
)
"""Every endpoint, with names that exist and names that do not."""


async def _get(world: World, role: str, path: str, **params: Any) -> httpx.Response:
    async with world.client(role) as client:
        return await client.get(path, params=params or None)


async def _run_id(world: World) -> str:
    [info] = await world.service.store.optimizer_runs()
    return info.id


async def test_versions_are_listed_with_before_after_and_reward(harness_world: World) -> None:
    response = await _get(harness_world, "viewer", "/api/harness/versions")
    assert response.status_code == 200, response.text
    page = msgspec.json.decode(response.content, type=HarnessVersionPage)
    assert page.next_after is None
    first, second = page.versions
    run_id = await _run_id(harness_world)
    assert (first.version, first.parent, second.version, second.parent) == (
        "harness-v1", None, "harness-v2", "harness-v1",
    )  # fmt: skip
    assert {first.run_id, second.run_id} == {run_id}
    assert (first.run_name, first.environment) == ("shell-tune", "coding-shell@1")
    assert (first.iteration, first.candidate, second.iteration, second.candidate) == (1, 1, 2, 0)
    assert (first.hooks, second.hooks) == (1, 2)
    # Before → after over the eighteen tasks: 2 → 10 (tests first), then 10 → 18 (stay inside).
    assert (first.before.passed, first.after and first.after.passed) == (2, 10)
    assert (second.before.passed, second.after and second.after.passed) == (10, 18)
    assert first.after is not None
    assert first.after.experiment_id == first.experiment_id
    assert second.before.experiment_id == first.experiment_id
    assert first.mean_reward == pytest.approx(8 / 18)
    assert first.interval is not None
    assert first.interval[0] > 0
    assert first.p_value == pytest.approx(1 / 256)  # eight improved, none worsened


async def test_the_listings_page_by_cursor(harness_world: World) -> None:
    one = (await _get(harness_world, "admin", "/api/harness/versions", limit=1)).json()
    assert [v["version"] for v in one["versions"]] == ["harness-v1"]
    assert one["next_after"] == "harness-v1"
    rest = (await _get(harness_world, "admin", "/api/harness/versions", after="harness-v1")).json()
    assert [v["version"] for v in rest["versions"]] == ["harness-v2"]
    assert rest["next_after"] is None
    runs = msgspec.json.decode(
        (await _get(harness_world, "viewer", "/api/optimizer/runs", limit=1)).content,
        type=OptimizerRunPage,
    )
    assert runs.next_after is None
    [run] = runs.runs
    assert (run.id, run.name, run.status) == (await _run_id(harness_world), "shell-tune",
                                              "completed")  # fmt: skip
    assert (run.iterations, run.candidates, run.versions) == (2, 4, ["harness-v1", "harness-v2"])
    assert (run.baseline and run.baseline.passed, run.final and run.final.passed) == (2, 18)


async def test_a_version_shows_its_code_evidence_and_cost(harness_world: World) -> None:
    response = await _get(harness_world, "viewer", "/api/harness/versions/harness-v2")
    assert response.status_code == 200, response.text
    detail = msgspec.json.decode(response.content, type=HarnessVersionDetail)
    # The same version `envharness harness show --json` prints.
    assert detail.version == await harness_version(harness_world.service.store, "harness-v2")
    assert detail.hooks == list(HarnessPatch.from_dict(detail.version.patch).hooks)
    assert [hook.hook for hook in detail.hooks] == ["on_before_action", "on_before_action"]
    assert SCRIPT in detail.hooks[0].code  # the JSON carries the code as it is; pages escape it
    evidence = detail.evidence
    assert (evidence.version, evidence.parent, evidence.iteration) == (
        "harness-v2",
        "harness-v1",
        2,
    )
    assert (evidence.before.passed, evidence.before.version) == (10, "harness-v1")
    assert evidence.after is not None
    assert (evidence.after.passed, evidence.after.total) == (18, 18)
    assert evidence.after.experiment_id == detail.version.experiment_id
    assert evidence.after.hooks == {"on_before_action:block_and_prompt": 32}
    assert evidence.after.hook_errors == 0
    assert evidence.improved == tuple(f"cleanup-{i}" for i in range(1, 9))
    assert evidence.ledger == ()  # nothing was broken on the way from v1
    assert (detail.run.name, detail.run.versions) == ("shell-tune", ["harness-v1", "harness-v2"])
    cost = (detail.version.engineer_tokens, detail.version.rerun_tokens)
    assert cost == (0, 0)  # a scripted engineer and scripted agents spend no tokens
    assert detail.version.seconds > 0
    async with harness_world.client("viewer") as client:  # the experiments exist, and are reruns
        for experiment_id in (evidence.before.experiment_id, evidence.after.experiment_id):
            found = await client.get(f"/api/experiments/{experiment_id}")
            assert found.status_code == 200
            assert "shell-tune" in found.json()["experiment"]["name"]

    first = (await _get(harness_world, "admin", "/api/harness/versions/harness-v1")).json()
    ledger = first["evidence"]["ledger"]
    assert [(e["iteration"], e["candidate"], e["scenario"], e["suite"]) for e in ledger] == [
        (1, 0, "tidy-1", "scenarios"),
        (1, 0, "tidy-2", "scenarios"),
    ]
    assert first["evidence"]["before"]["version"] is None  # the unpatched harness


async def test_the_diff_is_the_commands(harness_world: World) -> None:
    store = harness_world.service.store
    response = await _get(
        harness_world, "viewer", "/api/harness/diff", old="harness-v1", new="harness-v2"
    )
    assert response.status_code == 200, response.text
    found = msgspec.json.decode(response.content, type=HarnessDiff)
    old, new = (
        await harness_version(store, "harness-v1"),
        await harness_version(store, "harness-v2"),
    )
    assert found.lines == diff_versions(old, new)
    assert (found.old_digest, found.new_digest, found.same) == (old.digest, new.digest, False)
    assert any(line.startswith("+") and "workspace" in line for line in found.lines)
    same = (
        await _get(harness_world, "viewer", "/api/harness/diff", old="harness-v2", new="harness-v2")
    ).json()
    assert (same["same"], same["lines"]) == (True, [])


async def test_a_run_shows_every_candidate_with_its_verdict(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    response = await _get(harness_world, "viewer", f"/api/optimizer/runs/{run_id}")
    assert response.status_code == 200, response.text
    run = msgspec.json.decode(response.content, type=RunHistory)
    assert (run.id, run.status, run.environment) == (run_id, "completed", "coding-shell@1")
    assert run.engineer == "scripted (scripted@1)"
    assert (run.config.candidates, run.config.iterations, run.config.sandbox) == (3, 2, "local")
    first, second = run.iterations
    assert (first.base_version, first.accepted_version, first.selected) == (None, "harness-v1", 1)
    assert (second.base_version, second.accepted_version) == ("harness-v1", "harness-v2")
    statuses = [(c.candidate, c.verdict and c.verdict.status) for c in first.candidates]
    assert statuses == [(0, "rejected"), (1, "accepted"), (2, "invalid")]
    broken, chosen, invalid = first.candidates
    assert broken.verdict is not None
    assert broken.verdict.reason == "breaks previously solved scenario(s): tidy-1, tidy-2"
    assert broken.rerun is not None
    assert broken.rerun.passed == 8
    assert chosen.rerun is not None
    assert chosen.rerun.experiment_id is not None
    assert invalid.verdict is not None
    assert "not valid JSON" in invalid.verdict.reason
    assert (invalid.patch, invalid.rerun) == (None, None)
    assert "<patch>this is not JSON</patch>" in invalid.answer
    assert [v.version for v in run.versions] == ["harness-v1", "harness-v2"]
    assert {(e.candidate, e.scenario) for e in run.ledger} == {(0, "tidy-1"), (0, "tidy-2")}
    assert run.baseline is not None
    assert run.final is not None
    assert (run.baseline.passed, run.final.passed, run.final.version) == (2, 18, "harness-v2")


async def test_participants_are_refused_whatever_they_name(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    for path in ENDPOINTS:
        path = path.format(run=run_id)
        for role in ("alice", "bob"):
            response = await _get(harness_world, role, path)
            assert response.status_code == 403, (role, path)
            assert response.json()["status"] == 403
        assert (await _get(harness_world, "none", path)).status_code == 401, path
        assert (await _get(harness_world, "revoked", path)).status_code == 401, path
        assert (await _get(harness_world, "admin", path)).status_code in (200, 404), path


async def test_unknown_names_are_404(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    for path, params in (
        ("/api/harness/versions/harness-v9", {}),
        ("/api/harness/versions/harness-v", {}),
        ("/api/optimizer/runs/opt_missing", {}),
        (f"/api/optimizer/runs/{run_id[:-2]}", {}),  # a prefix names no run in a URL
        ("/api/harness/diff", {"old": "harness-v1", "new": "harness-v9"}),
        ("/api/harness/diff", {"old": "harness-v0", "new": "harness-v2"}),
    ):
        response = await _get(harness_world, "viewer", path, **params)
        assert response.status_code == 404, (path, params, response.text)
        assert response.json()["message"].startswith("no "), response.text


@pytest.mark.parametrize(
    ("path", "params", "parameter"),
    [
        ("/api/harness/versions", {"limit": "0"}, "limit"),
        ("/api/harness/versions", {"limit": "many"}, "limit"),
        ("/api/harness/versions", {"after": "harness-v9"}, "after"),
        ("/api/harness/versions", {"verbose": "1"}, "verbose"),
        ("/api/optimizer/runs", {"limit": "1001"}, "limit"),
        ("/api/optimizer/runs", {"after": "opt_missing"}, "after"),
        ("/api/harness/diff", {"old": "harness-v1"}, "new"),
        ("/api/harness/diff", {"old": "../etc", "new": "harness-v2"}, "old"),
        ("/api/harness/versions/harness-v1", {"check": "true"}, "check"),
    ],
)
async def test_malformed_parameters_are_422_naming_them(
    harness_world: World, path: str, params: dict[str, str], parameter: str
) -> None:
    response = await _get(harness_world, "viewer", path, **params)
    assert response.status_code == 422, response.text
    assert response.json()["parameter"] == parameter


async def test_the_store_without_an_optimizer_run_answers_empty(world: World) -> None:
    versions = (await _get(world, "viewer", "/api/harness/versions")).json()
    runs = (await _get(world, "viewer", "/api/optimizer/runs")).json()
    assert versions == {"versions": [], "next_after": None}
    assert runs == {"runs": [], "next_after": None}


async def test_the_typed_client(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    transport = httpx.ASGITransport(harness_world.app)
    async with AsyncClient(BASE, harness_world.secrets["viewer"], transport=transport) as client:
        assert [v.version for v in (await client.harness_versions()).versions] == [
            "harness-v1",
            "harness-v2",
        ]
        assert (await client.harness_versions(limit=1)).next_after == "harness-v1"
        detail = await client.harness_version("harness-v2")
        assert detail.evidence.after is not None
        assert detail.evidence.after.passed == 18
        assert not (await client.harness_diff("harness-v1", "harness-v2")).same
        assert [r.id for r in (await client.optimizer_runs()).runs] == [run_id]
        assert len((await client.optimizer_run(run_id)).iterations) == 2
        with pytest.raises(ServiceError) as missing:
            await client.harness_version("harness-v9")
        assert missing.value.status == 404
    async with AsyncClient(BASE, harness_world.secrets["alice"], transport=transport) as client:
        with pytest.raises(ServiceError) as refused:
            await client.optimizer_run(run_id)
        assert refused.value.status == 403


def test_the_blocking_client_and_the_api_docs_example(
    harness_world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = httpx.ASGITransport(harness_world.app)
    with Client(BASE, harness_world.secrets["viewer"], transport=transport) as client:
        assert len(client.harness_versions(limit=1).versions) == 1
        assert client.harness_version("harness-v1").version.parent is None
        assert client.harness_diff("harness-v1", "harness-v2").lines
        [run] = client.optimizer_runs().runs
        assert client.optimizer_run(run.id).status == "completed"
    [example] = [block for block in api_doc_examples() if "client.harness_versions(" in block]
    run_api_doc_example(example, harness_world, monkeypatch)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "harness-v1 from unpatched: 2/18 -> 10/18, reward +0.444 p=0.00391"
    assert printed[1].startswith("  on_before_action: def on_before_action(ctx, nb):")
    assert any("rejected" in line and "tidy-1, tidy-2" in line for line in printed)


async def test_the_openapi_document_describes_them(harness_world: World) -> None:
    async with harness_world.client("none") as client:
        document = (await client.get("/openapi.json")).json()
    paths = document["paths"]
    for path in (
        "/api/harness/versions",
        "/api/harness/versions/{version}",
        "/api/harness/diff",
        "/api/optimizer/runs",
        "/api/optimizer/runs/{run_id}",
    ):
        operation = paths[path]["get"]
        assert operation["x-roles"] == ["admin", "viewer"], path
        assert {"401", "403"} <= set(operation["responses"]), path
    diff = paths["/api/harness/diff"]["get"]
    assert [(p["name"], p["required"]) for p in diff["parameters"]] == [
        ("old", True),
        ("new", True),
    ]
    assert {"404", "422"} <= set(diff["responses"])
    assert {"HarnessVersionDetail", "RunHistory", "CodeHook", "CandidateVerdict"} <= set(
        document["components"]["schemas"]
    )
