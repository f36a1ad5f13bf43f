"""Import OpenTelemetry GenAI spans from OTLP JSON files (format ``otel-genai``).

The input is what the OpenTelemetry file exporters write (the Collector's ``file`` exporter, the
Python ``opentelemetry-exporter-otlp-json-file``): one ``ExportTraceServiceRequest`` in OTLP/JSON
per line — ``{"resourceSpans": [{"resource": …, "scopeSpans": [{"scope": …, "spans": […]}]}]}``.
A single such document spread over many lines (a trace saved from a UI) is read too. Parsing is
our own: nothing of OpenTelemetry is imported.

Each span becomes one source record, in the order the file holds them (the order spans ended
in): its episode is the trace id, its kind ``gen_ai.<operation>`` from the
``gen_ai.operation.name`` attribute of the GenAI semantic conventions (``gen_ai.chat``,
``gen_ai.execute_tool``, ``gen_ai.invoke_agent``, …) or ``otel.span`` for any other span, its
participant the ``gen_ai.agent.name`` it carries, its time its end. The payload keeps the span
whole: ids, kind, times, status, attributes (values as JSON), events, links, scope and resource.
Two records are added where the spans say so:

- after a span that dropped attributes, events or links, a ``capture.failed`` record (the
  exporter lost data — source health counts them);
- after a trace's root span (no parent), an ``episode.ended`` record: the trace is over,
  ``failed`` when the root's status is an error, ``completed`` otherwise.

Each record depends only on its own span, and positions follow the file from 0, so importing a
file again is an idempotent retry, and importing it again after the exporter appended to it
stores only what is new. Another file goes into its own source (``otel/host-b``).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from envharness.store.sources import CAPTURE_FAILED, SourceFormatError, SourceRow
from envharness.trajectories.sources.format import SourceChain, encoding_problem
from envharness.trajectories.sources.kinds import EPISODE_ENDED

__all__ = ["FORMAT", "IMPORTER", "OtelGenAIImporter"]

FORMAT = "otel-genai"
IMPORTER = "envharness.otel-genai/1"

_SPAN_KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
_STATUS_CODES = ("unset", "ok", "error")
_OPERATION = re.compile(r"[^a-z0-9_]+")
_LATEST = 253_402_300_799_999_999_999
"""9999-12-31T23:59:59.999999999Z in unix nanoseconds: the last time RFC 3339 can write."""


class OtelGenAIImporter:
    """Turns OTLP JSON lines into records of one source (the :class:`Importer` protocol)."""

    format = FORMAT
    importer = IMPORTER
    checks_chain = False  # its records are sealed here; the spool checks them

    def records(self, source: str, lines: Iterable[bytes], *, origin: str) -> Iterator[SourceRow]:
        chain = SourceChain(source)
        for where, request in _requests(source, lines, origin):
            for span, scope, resource in _spans(source, request, where):
                yield from _span_records(chain, source, span, scope, resource, where)


def _requests(
    source: str, lines: Iterable[bytes], origin: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each ``ExportTraceServiceRequest`` with where it was read."""
    iterator = iter(lines)
    first = True
    for number, text in enumerate(iterator, start=1):
        if not text.strip():
            continue
        try:
            request = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            encoding = encoding_problem(text)
            if encoding is not None:
                raise SourceFormatError(
                    f"{origin} line {number}: {encoding}", source=source, position=None
                ) from None
            if first and text.strip().startswith(b"{"):
                # Not one request per line but one document over many lines: read it whole.
                yield origin, _document(source, b"".join([text, *iterator]), origin)
                return
            raise SourceFormatError(
                f"{origin} line {number}: not JSON ({exc}); an OTLP JSON file holds one "
                'ExportTraceServiceRequest ({"resourceSpans": [...]}) per line',
                source=source,
                position=None,
            ) from None
        first = False
        where = f"{origin} line {number}"
        yield where, _request(source, request, where)


def _document(source: str, document: bytes, origin: str) -> dict[str, Any]:
    try:
        decoded = msgspec.json.decode(document)
    except msgspec.DecodeError as exc:
        raise SourceFormatError(
            f"{origin}: not OTLP JSON ({exc}); expected one ExportTraceServiceRequest "
            '({"resourceSpans": [...]}) per line',
            source=source,
            position=None,
        ) from None
    return _request(source, decoded, origin)


def _request(source: str, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("resourceSpans"), list):
        keys = sorted(value)[:5] if isinstance(value, dict) else type(value).__name__
        raise SourceFormatError(
            f"{where}: not an OTLP trace export (no resourceSpans list; found {keys}); "
            "export traces with an OpenTelemetry file exporter, or use --format envharness "
            "for envharness import lines",
            source=source,
            position=None,
        )
    return value


def _spans(
    source: str, request: dict[str, Any], where: str
) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    for resource_spans in request["resourceSpans"]:
        resource = _attributes(_get(resource_spans, "resource", {}).get("attributes", []))
        for scope_spans in _get(resource_spans, "scopeSpans", []):
            scope = _get(scope_spans, "scope", {})
            for span in _get(scope_spans, "spans", []):
                if not isinstance(span, dict):
                    raise SourceFormatError(
                        f"{where}: a span is not an object", source=source, position=None
                    )
                yield span, scope, resource


def _get(value: Any, key: str, default: Any) -> Any:
    found = value.get(key, default) if isinstance(value, dict) else default
    return default if found is None else found


def _span_records(
    chain: SourceChain,
    source: str,
    span: dict[str, Any],
    scope: dict[str, Any],
    resource: dict[str, Any],
    where: str,
) -> Iterator[SourceRow]:
    trace_id = _id(span.get("traceId"), 16)
    span_id = _id(span.get("spanId"), 8)
    name = span.get("name")
    if not trace_id or not span_id or not isinstance(name, str):
        raise SourceFormatError(
            f"{where}: span {span.get('name')!r} lacks a traceId, spanId or name (OTLP JSON "
            "writes them as hex strings); it cannot be placed in a trajectory",
            source=source,
            position=chain.next_position,
        )
    parent = _id(span.get("parentSpanId"), 8)
    attributes = _attributes(span.get("attributes") or [])
    start, end = _nanos(span.get("startTimeUnixNano")), _nanos(span.get("endTimeUnixNano"))
    status = _get(span, "status", {})
    code = _enum(status.get("code"), _STATUS_CODES, "STATUS_CODE_")
    operation = attributes.get("gen_ai.operation.name")
    kind = (
        f"gen_ai.{_OPERATION.sub('_', operation.lower()).strip('_') or 'operation'}"
        if isinstance(operation, str)
        else "otel.span"
    )
    agent = attributes.get("gen_ai.agent.name")
    participant = agent if isinstance(agent, str) and agent else None
    dropped = {
        what: int(count)
        for what in ("attributes", "events", "links")
        if isinstance(count := span.get(f"dropped{what.capitalize()}Count"), int | str)
        and str(count).isdigit()
        and int(count) > 0
    }
    payload: dict[str, Any] = {
        "name": name,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent,
        "span_kind": _enum(span.get("kind"), _SPAN_KINDS, "SPAN_KIND_"),
        "start_unix_nano": start,
        "end_unix_nano": end,
        "status": {"code": code, "message": status.get("message") or None},
        "attributes": attributes,
        "events": [
            {
                "name": event.get("name"),
                "time_unix_nano": _nanos(event.get("timeUnixNano")),
                "attributes": _attributes(event.get("attributes") or []),
            }
            for event in span.get("events") or []
            if isinstance(event, dict)
        ],
        "links": [
            {
                "trace_id": _id(link.get("traceId"), 16),
                "span_id": _id(link.get("spanId"), 8),
                "attributes": _attributes(link.get("attributes") or []),
            }
            for link in span.get("links") or []
            if isinstance(link, dict)
        ],
        "scope": {"name": scope.get("name"), "version": scope.get("version")},
        "resource": resource,
    }
    if dropped:
        payload["dropped"] = dropped
    if (end or start or 0) > _LATEST:
        raise SourceFormatError(
            f"{where}: span {name!r} ({span_id}) ends {end or start} ns after 1970, after the "
            "year 9999, which no record time can hold; the exporter's clock or the file is "
            "wrong",
            source=source,
            position=chain.next_position,
        )
    at = _time(end or start)
    yield chain.seal(trace_id, kind, payload, at=at, participant=participant)
    if dropped:
        lost = ", ".join(f"{count} {what}" for what, count in dropped.items())
        yield chain.seal(
            trace_id,
            CAPTURE_FAILED,
            {
                "detail": f"span {name!r} ({span_id}) dropped {lost} when it was recorded",
                "lost": sum(dropped.values()),
                "span_id": span_id,
            },
            at=at,
            participant=participant,
        )
    if parent is None:
        ended: dict[str, Any] = {"status": "failed" if code == "error" else "completed"}
        if code == "error":
            message = status.get("message") or ""
            ended["reason"] = f"the root span {name!r} ended with an error status"
            error_type = attributes.get("error.type")
            ended["error"] = {
                "type": error_type if isinstance(error_type, str) else "error",
                "message": message if isinstance(message, str) else str(message),
            }
        model = attributes.get("gen_ai.request.model")
        if participant is not None:
            ended["participants"] = {participant: model if isinstance(model, str) else ""}
        yield chain.seal(trace_id, EPISODE_ENDED, ended, at=at, participant=participant)


def _id(value: Any, size: int) -> str | None:
    """A trace or span id as lowercase hex. OTLP/JSON writes hex; protobuf's generic JSON
    mapping writes base64, which some exporters emit: both are read."""
    if not isinstance(value, str) or not value:
        return None
    if len(value) == size * 2 and all(c in "0123456789abcdefABCDEF" for c in value):
        hexadecimal = value.lower()
    else:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) != size:
            return None
        hexadecimal = raw.hex()
    return None if set(hexadecimal) == {"0"} else hexadecimal


def _nanos(value: Any) -> int | None:
    """OTLP/JSON writes 64-bit integers as decimal strings; numbers are read too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _time(nanos: int | None) -> str:
    """RFC 3339 UTC with microseconds, the form of ``at`` in envharness records."""
    if nanos is None:
        return "1970-01-01T00:00:00.000000Z"
    seconds, rest = divmod(nanos, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{stamp}.{rest // 1000:06d}Z"


def _enum(value: Any, names: tuple[str, ...], prefix: str) -> str:
    """An OTLP enum, given as its number (OTLP/JSON) or its name (protobuf JSON)."""
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value.startswith(prefix):
        name = value.removeprefix(prefix).lower()
        if name in names:
            return name
    return names[0]


def _attributes(values: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` list → a JSON object (later keys win, as in the SDKs)."""
    found: dict[str, Any] = {}
    if not isinstance(values, list):
        return found
    for item in values:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            found[item["key"]] = _value(item.get("value"))
    return found


def _value(value: Any) -> Any:
    """OTLP ``AnyValue`` → JSON. Integers arrive as decimal strings, doubles may be ``"NaN"``
    or ``"Infinity"`` (kept as ``null``), bytes as base64 (kept as that text)."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        number = value["intValue"]
        try:
            return int(number)
        except (TypeError, ValueError):
            return None
    if "doubleValue" in value:
        try:
            double = float(value["doubleValue"])
        except (TypeError, ValueError):
            return None
        return double if math.isfinite(double) else None
    if "arrayValue" in value:
        return [_value(item) for item in _get(value["arrayValue"], "values", [])]
    if "kvlistValue" in value:
        return _attributes(_get(value["kvlistValue"], "values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None
