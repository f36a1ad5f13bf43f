"""``/openapi.json`` describes every route the app has, and nothing it lacks; ``/docs`` needs
nothing from outside this server."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Route

from envharness.service.routing import openapi_path
from tests.service._support import World

pytestmark = pytest.mark.anyio


async def _document(world: World) -> dict[str, Any]:
    async with world.client("none") as client:
        response = await client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


async def test_the_document_lists_exactly_the_routes_of_the_app(world: World) -> None:
    document = await _document(world)
    documented = {
        (method.upper(), path) for path, methods in document["paths"].items() for method in methods
    }
    routed = {
        (method, openapi_path(route.path))
        for route in world.app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert documented == routed
    assert {path for _, path in routed} >= {
        "/api/sessions", "/api/sessions/{session_id}", "/api/sessions/{session_id}/records",
        "/api/sessions/{session_id}/export", "/api/sessions/{session_id}/events",
        "/api/verify", "/api/health", "/openapi.json", "/docs", "/api/experiments",
        "/api/experiments/{experiment_id}", "/api/experiments/{experiment_id}/events",
        "/experiments", "/experiments/{experiment_id}", "/api/sessions/{session_id}/lineage",
        "/api/compare", "/compare",
    }  # fmt: skip


async def test_every_operation_is_complete_and_every_reference_resolves(world: World) -> None:
    document = await _document(world)
    schemas = document["components"]["schemas"]
    operation_ids = []
    references: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                references.append(node["$ref"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            operation_ids.append(operation["operationId"])
            assert operation["summary"], (method, path)
            assert operation["responses"], (method, path)
            assert "x-roles" in operation, (method, path)
            assert "security" in operation, (method, path)
            names = [p["name"] for p in operation["parameters"] if p["in"] == "path"]
            assert names == [part[1:-1] for part in path.split("/") if part.startswith("{")]
            if operation["x-roles"]:
                assert "401" in operation["responses"]
    collect(document)
    assert len(operation_ids) == len(set(operation_ids))
    for reference in references:
        assert reference.removeprefix("#/components/schemas/") in schemas
    assert {"RecordOut", "RecordPage", "SessionSummary", "SessionDetail", "Problem",
            "TokenInfo", "Observation", "SessionConfig", "ExperimentPage", "ExperimentDetail",
            "ExperimentSummary", "ExperimentSessionOut", "ExperimentConfig", "SessionCounts",
            "SessionCreatedEvent", "SessionStatusEvent", "ExperimentStatusEvent",
            "ExperimentEnd", "StreamEnd", "LineageOut", "BranchLink", "ComparisonOut",
            "TurnDifference", "ScoreDifference"} <= set(schemas)  # fmt: skip


async def test_query_parameters_come_from_the_endpoint_struct(world: World) -> None:
    document = await _document(world)
    operation = document["paths"]["/api/sessions/{session_id}/records"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert set(parameters) == {"session_id", "after", "limit", "kind", "participant", "turn"}
    assert parameters["kind"]["schema"]["type"] == "array"
    assert "observation" in parameters["kind"]["schema"]["items"]["enum"]
    assert parameters["limit"]["schema"]["maximum"] == 1000
    events = document["paths"]["/api/sessions/{session_id}/events"]["get"]
    assert {p["name"] for p in events["parameters"] if p["in"] == "header"} == {"Last-Event-ID"}
    assert "text/event-stream" in events["responses"]["200"]["content"]
    tokens = document["paths"]["/api/tokens"]["post"]
    assert tokens["x-roles"] == ["admin"]
    assert tokens["security"] == [{"bearer": []}]
    assert tokens["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TokenRequest"
    }


async def test_docs_and_assets_reach_nothing_outside_this_server(world: World) -> None:
    from envharness.service.pages.assets import _ASSETS

    async with world.client("none") as client:
        docs = await client.get("/docs")
        assert docs.status_code == 200
        assert '<script src="/static/docs.js">' in docs.text
        for name in _ASSETS:
            asset = await client.get(f"/static/{name}")
            assert asset.status_code == 200
            text = asset.text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # a name
            assert "http://" not in text
            assert "https://" not in text
        assert (await client.get("/static/../app.py")).status_code == 404
        assert (await client.get("/static/missing.js")).status_code == 404


async def test_experiment_operations_are_described_from_their_wire_types(world: World) -> None:
    document = await _document(world)
    paths = document["paths"]
    ref = "#/components/schemas/{}".format
    listing = paths["/api/experiments"]["get"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": ref("ExperimentPage")
    }
    assert {p["name"] for p in listing["parameters"]} == {"status", "after", "limit"}
    one = paths["/api/experiments/{experiment_id}"]["get"]
    assert one["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": ref("ExperimentDetail")
    }
    assert set(one["responses"]) == {"200", "401", "404"}
    stream = paths["/api/experiments/{experiment_id}/events"]["get"]
    assert stream["responses"]["200"]["x-events"] == {
        "session.created": {"$ref": ref("SessionCreatedEvent")},
        "session.status": {"$ref": ref("SessionStatusEvent")},
        "experiment.status": {"$ref": ref("ExperimentStatusEvent")},
        "end": {"$ref": ref("ExperimentEnd")},
    }
    assert {p["name"] for p in stream["parameters"]} == {"experiment_id", "after", "Last-Event-ID"}
    records = paths["/api/sessions/{session_id}/events"]["get"]["responses"]["200"]["x-events"]
    assert records == {"record": {"$ref": ref("RecordOut")}, "end": {"$ref": ref("StreamEnd")}}
    for operation in (listing, one, stream):
        assert operation["x-roles"] == ["admin", "participant", "viewer"]


async def test_lineage_and_compare_are_described_from_their_wire_types(world: World) -> None:
    document = await _document(world)
    paths = document["paths"]
    schemas = document["components"]["schemas"]
    ref = "#/components/schemas/{}".format
    lineage = paths["/api/sessions/{session_id}/lineage"]["get"]
    assert lineage["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": ref("LineageOut")
    }
    assert set(lineage["responses"]) == {"200", "401", "404"}
    assert lineage["x-roles"] == ["admin", "participant", "viewer"]
    compare = paths["/api/compare"]["get"]
    assert compare["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": ref("ComparisonOut")
    }
    assert set(compare["responses"]) == {"200", "401", "404", "422"}
    parameters = {p["name"]: p for p in compare["parameters"]}
    assert set(parameters) == {"left", "right"}
    assert all(p["required"] and p["in"] == "query" for p in parameters.values())
    page = paths["/compare"]["get"]
    assert {p["name"] for p in page["parameters"]} == {"left", "right", "turn"}
    assert "text/html" in page["responses"]["200"]["content"]
    comparison = schemas["ComparisonOut"]["properties"]
    assert comparison["differences"]["items"] == {"$ref": ref("TurnDifference")}
    assert comparison["scores"]["items"] == {"$ref": ref("ScoreDifference")}
    assert comparison["left"] == {"$ref": ref("SessionSummary")}
    assert set(schemas["TurnDifference"]["properties"]) == {
        "turn", "participant", "kind", "left", "right"
    }  # fmt: skip
    link = schemas["BranchLink"]["properties"]
    assert set(link) == {
        "session", "checkpoint_seq", "checkpoint_turn", "checkpoint_label", "intervention",
        "reason",
    }  # fmt: skip
    assert schemas["LineageOut"]["properties"]["children"]["items"] == {"$ref": ref("BranchLink")}


async def test_a_session_s_costs_are_described_as_the_experiment_s(world: World) -> None:
    document = await _document(world)
    schemas = document["components"]["schemas"]
    ref = "#/components/schemas/{}".format
    one = document["paths"]["/api/sessions/{session_id}"]["get"]
    assert one["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": ref("SessionDetail")
    }
    assert "`costs`" in one["description"]
    detail = schemas["SessionDetail"]["properties"]
    costs = {"anyOf": [{"$ref": ref("CostsOut")}, {"type": "null"}]}
    assert {key: value for key, value in detail["costs"].items() if key != "description"} == {
        **costs,
        "default": None,
    }
    assert detail["participant_costs"]["additionalProperties"] == {"$ref": ref("CostsOut")}
    assert "costs" not in schemas["SessionDetail"].get("required", [])
    experiment = schemas["ExperimentDetail"]["properties"]["costs"]
    assert {key: value for key, value in experiment.items() if key != "description"} == {
        **costs,
        "default": None,
    }
