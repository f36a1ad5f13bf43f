"""The otel-genai importer, on a real trace recorded offline (fixtures/generate_otel_genai.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from envharness.store import read_store
from envharness.store.sources import SourceStore
from envharness.trajectories.sources import (
    SourceConflictError,
    SourceFormatError,
    import_file,
    project_episode,
    read_source_lines,
    verify_imported,
)
from envharness.trajectories.sources.otel import OtelGenAIImporter
from tests.trajectories.sources._support import OTEL_FIXTURE, dump, lines

pytestmark = pytest.mark.anyio

SOURCE = "otel/weather-agent"
TRACE = "54d8d8e585ddee593d47f2a3b0eec622"


def requests() -> list[dict[str, Any]]:
    return [json.loads(line) for line in OTEL_FIXTURE.read_text().splitlines()]


def only_span(request: dict[str, Any]) -> dict[str, Any]:
    [span] = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    return span  # type: ignore[no-any-return]


def write(path: Path, found: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(request) + "\n" for request in found))
    return path


def read(texts: list[bytes]) -> list[Any]:
    return list(OtelGenAIImporter().records(SOURCE, texts, origin="trace.jsonl"))


async def test_a_recorded_trace_imports_as_one_episode(store_path: Path) -> None:
    receipt = await import_file(store_path, SOURCE, OTEL_FIXTURE, format="otel-genai")
    assert (receipt.stored, receipt.format) == (5, "otel-genai")
    rows = [row async for row in SourceStore(store_path).rows(SOURCE)]
    assert [(row.kind, row.participant) for row in rows] == [
        ("gen_ai.chat", None),
        ("gen_ai.execute_tool", None),
        ("gen_ai.chat", None),
        ("gen_ai.invoke_agent", "weather-agent"),
        ("episode.ended", "weather-agent"),
    ]
    assert {row.episode for row in rows} == {TRACE}
    chat = msgspec.json.decode(rows[0].payload)
    assert chat["attributes"]["gen_ai.request.model"] == "gpt-4o-mini"
    assert chat["attributes"]["gen_ai.usage.input_tokens"] == 42  # intValue "42" → 42
    assert chat["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chat["span_kind"] == "client"
    assert chat["parent_span_id"] == "71c8d611c36870e5"
    assert chat["resource"]["service.name"] == "weather-agent"
    assert chat["start_unix_nano"] < chat["end_unix_nano"]
    tool = msgspec.json.decode(rows[1].payload)
    assert tool["attributes"]["gen_ai.tool.call.result"] == '{"temperature_c": 18, "sky": "sunny"}'
    assert rows[0].at.endswith("Z")
    assert rows[0].at.startswith("2026-")
    report = await (await read_store(store_path)).verify()
    assert report.ok, report.breaks


async def test_the_trace_projects_into_the_trajectory_contract(store_path: Path) -> None:
    await import_file(store_path, SOURCE, OTEL_FIXTURE, format="otel-genai", training=True)
    trajectory = await project_episode(store_path, SOURCE, TRACE)
    assert trajectory.session_id == f"{SOURCE}:{TRACE}"
    assert trajectory.provenance.origin == "imported"
    assert trajectory.provenance.format == "otel-genai"
    assert trajectory.provenance.importer == "envharness.otel-genai/1"
    assert trajectory.provenance.training is True
    assert trajectory.participants == {"weather-agent": "gpt-4o-mini"}
    assert (trajectory.collection.state, trajectory.execution.state) == ("complete", "finished")
    assert (trajectory.termination.cause, trajectory.termination.status) == (
        "imported",
        "completed",
    )
    assert trajectory.outcome.state == "unverified"
    await verify_imported(store_path, trajectory)


async def test_importing_the_same_file_again_stores_nothing(store_path: Path) -> None:
    await import_file(store_path, SOURCE, OTEL_FIXTURE, format="otel-genai")
    before = dump(store_path)
    again = await import_file(store_path, SOURCE, OTEL_FIXTURE, format="otel-genai")
    assert (again.stored, again.duplicates) == (0, 5)
    assert dump(store_path) == before


async def test_a_file_the_exporter_appended_to_stores_only_the_new_spans(
    store_path: Path, tmp_path: Path
) -> None:
    found = requests()
    early = write(tmp_path / "trace.jsonl", found[:2])
    first = await import_file(store_path, SOURCE, early, format="otel-genai")
    assert first.stored == 2
    grown = write(tmp_path / "trace.jsonl", found)
    second = await import_file(store_path, SOURCE, grown, format="otel-genai")
    assert (second.stored, second.duplicates) == (3, 2)
    trajectory = await project_episode(store_path, SOURCE, TRACE)
    assert trajectory.journal.records == 5


async def test_another_file_into_the_same_source_is_a_conflict(
    store_path: Path, tmp_path: Path
) -> None:
    await import_file(store_path, SOURCE, OTEL_FIXTURE, format="otel-genai")
    before = dump(store_path)
    other = write(tmp_path / "other.jsonl", list(reversed(requests())))
    with pytest.raises(SourceConflictError, match="position 0 is already imported"):
        await import_file(store_path, SOURCE, other, format="otel-genai")
    assert dump(store_path) == before


def test_dropped_data_becomes_a_capture_failure() -> None:
    found = requests()
    only_span(found[0]).update(droppedAttributesCount=2, droppedEventsCount="1")
    rows = read([json.dumps(request).encode() for request in found])
    assert rows[1].kind == "capture.failed"
    failure = msgspec.json.decode(rows[1].payload)
    assert failure["lost"] == 3
    assert "dropped 2 attributes, 1 events" in failure["detail"]
    assert msgspec.json.decode(rows[0].payload)["dropped"] == {"attributes": 2, "events": 1}


async def test_an_error_root_span_ends_the_episode_failed(store_path: Path, tmp_path: Path) -> None:
    found = requests()
    root = only_span(found[-1])
    root["status"] = {"code": 2, "message": "tool loop exceeded"}
    root["attributes"].append({"key": "error.type", "value": {"stringValue": "LoopError"}})
    await import_file(store_path, SOURCE, write(tmp_path / "t.jsonl", found), format="otel-genai")
    trajectory = await project_episode(store_path, SOURCE, TRACE)
    assert trajectory.termination.status == "failed"
    assert trajectory.termination.error is not None
    assert (trajectory.termination.error.type, trajectory.termination.error.message) == (
        "LoopError",
        "tool loop exceeded",
    )
    assert trajectory.execution.state == "finished"


async def test_a_trace_without_its_root_is_not_ended(store_path: Path, tmp_path: Path) -> None:
    found = requests()[:3]
    await import_file(store_path, SOURCE, write(tmp_path / "t.jsonl", found), format="otel-genai")
    trajectory = await project_episode(store_path, SOURCE, TRACE)
    assert trajectory.termination.cause == "not_ended"
    assert trajectory.collection.state == "partial"


def test_protobuf_json_ids_and_enum_names_are_read() -> None:
    found = requests()
    span = only_span(found[0])
    span["traceId"] = base64.b64encode(bytes.fromhex(span["traceId"])).decode()
    span["spanId"] = base64.b64encode(bytes.fromhex(span["spanId"])).decode()
    span["kind"] = "SPAN_KIND_CLIENT"
    span["startTimeUnixNano"] = int(span["startTimeUnixNano"])
    [row] = read([json.dumps(found[0]).encode()])
    payload = msgspec.json.decode(row.payload)
    assert row.episode == TRACE
    assert payload["span_kind"] == "client"
    assert isinstance(payload["start_unix_nano"], int)


def test_one_document_over_many_lines_is_read() -> None:
    document = {"resourceSpans": [r["resourceSpans"][0] for r in requests()]}
    texts = json.dumps(document, indent=2).encode().splitlines(keepends=True)
    assert [row.kind for row in read(texts)][-1] == "episode.ended"
    assert len(read(texts)) == 5


def test_the_records_reimport_as_envharness_lines() -> None:
    rows = read(OTEL_FIXTURE.read_bytes().splitlines())
    assert list(read_source_lines(SOURCE, lines(rows))) == rows


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        ([b'{"resourceSpans": []}', b"not json"], "trace.jsonl line 2: not JSON"),
        ([b'{"resourceSpans": []}', b'{"resourceSpans": ['], r"line 2: not JSON \(.*truncated"),
        ([b'\xef\xbb\xbf{"resourceSpans": []}'], "trace.jsonl line 1: starts with a byte order"),
        ([b'{"resourceSpans": [], "x": "\xe9"}'], "trace.jsonl line 1: is not UTF-8 \\(byte 0xe9"),
        ([b'{"spans": []}'], r"not an OTLP trace export \(no resourceSpans list"),
        ([b"{broken"], "trace.jsonl: not OTLP JSON"),
        (
            [b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}'],
            "span 'x' lacks a traceId, spanId or name",
        ),
    ],
)
def test_input_that_is_not_otlp_json_is_refused(texts: list[bytes], expected: str) -> None:
    with pytest.raises(SourceFormatError, match=expected):
        read(texts)


@pytest.mark.parametrize("nanos", ["253402300800000000000", "9" * 40])
def test_a_span_ending_after_the_year_9999_is_refused(nanos: str) -> None:
    # No RFC 3339 time can say when it ended (and a larger one overflowed the clock).
    found = requests()
    only_span(found[0])["endTimeUnixNano"] = nanos
    with pytest.raises(SourceFormatError, match=f"ends {nanos} ns after 1970, after the year 9999"):
        read([json.dumps(request).encode() for request in found])
    only_span(found[0])["endTimeUnixNano"] = "253402300799999999999"
    assert read([json.dumps(request).encode() for request in found])[0].at == (
        "9999-12-31T23:59:59.999999Z"
    )
