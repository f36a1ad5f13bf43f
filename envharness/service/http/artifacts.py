"""Recorded artifacts, served: the file a record references, under the record's own access.

An artifact is addressed through the record that references it —
``/api/sessions/{id}/records/{seq}/artifact`` — so the question "may this token have these
bytes?" is the question "may it read that record?", which :class:`Access` already answers in
the SQL of the read. An ``artifact`` record is session level (an environment's file), so a
participant token never reads one and gets the same 404 as for a record that does not exist;
a ``protocol.violation`` record is its participant's own, and so are the offending bytes it
keeps. Nothing here has a rule of its own about who may see what.

What is sent is checked against the sha256 the record names (a modified or missing file is a
409 that says to run ``envharness verify``), with a content type from the artifact's name.
Only passive types are shown inline (images, plain text, JSON, CSV); anything a browser would
run — HTML, SVG, XML, scripts — is sent as a download of ``application/octet-stream``, and
every answer carries ``nosniff`` and a sandboxing Content-Security-Policy, so an artifact can
never act on the viewer's origin.
"""

from __future__ import annotations

import mimetypes
import re
import unicodedata
from contextlib import aclosing
from dataclasses import dataclass
from urllib.parse import quote

from starlette.responses import Response

from envharness.errors import DamagedStoreError, NotFoundError
from envharness.records import Artifact, ProtocolViolation, Record, decode_record
from envharness.service.access import Access
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem, not_found
from envharness.service.routing import ANYONE, Call, Endpoint
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore

__all__ = [
    "ARTIFACT_ENDPOINTS",
    "IMAGE_TYPES",
    "INLINE_TYPES",
    "ArtifactRef",
    "artifact_url",
    "media_type_of",
    "read_artifact",
    "read_prefix",
    "referenced_artifact",
    "visible_artifact",
]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Images a browser draws without running anything: served inline, previewed as ``<img>``."""
TEXT_TYPES = frozenset(
    {"text/plain", "text/csv", "text/markdown", "application/json", "application/x-ndjson"}
)
"""Passive text: served inline, previewed as text."""
INLINE_TYPES = IMAGE_TYPES | TEXT_TYPES
ACTIVE_TYPES = frozenset(
    {
        "text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml",
        "text/xsl", "application/javascript", "text/javascript", "application/ecmascript",
        "text/ecmascript", "application/x-javascript",
    }
)  # fmt: skip
"""Types a browser runs or renders as a document: never sent as themselves."""
DOWNLOAD = "application/octet-stream"
ARTIFACT_CSP = "default-src 'none'; sandbox"
"""An artifact opened in a tab of its own can run nothing and reach nothing."""

_types = mimetypes.MimeTypes()  # Python's built-in table only: the same answer on every machine
for _type, _suffix in (
    ("image/webp", ".webp"), ("text/markdown", ".md"), ("text/plain", ".log"),
    ("text/plain", ".ansi"), ("application/x-ndjson", ".jsonl"),
    ("application/x-ndjson", ".ndjson"), ("application/xhtml+xml", ".xhtml"),
):  # fmt: skip
    _types.add_type(_type, _suffix)
_COMPRESSED = {"gzip": "application/gzip", "bzip2": "application/x-bzip2", "xz": "application/x-xz"}


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """The artifact one record references: its file name, sha256 and (when known) size."""

    seq: int
    name: str
    sha256: str
    size: int | None
    recorded_type: str | None = None

    @property
    def media_type(self) -> str:
        return media_type_of(self.name, self.recorded_type)


def referenced_artifact(record: Record) -> ArtifactRef | None:
    """The artifact ``record`` references, if any: an ``artifact`` record's file, or the
    offending bytes a ``protocol.violation`` kept."""
    payload = record.payload
    if isinstance(payload, Artifact):
        return ArtifactRef(
            record.seq, payload.name, payload.sha256, payload.size, payload.media_type
        )
    if isinstance(payload, ProtocolViolation) and payload.artifact:
        return ArtifactRef(record.seq, f"offending-bytes-{record.seq}.bin", payload.artifact, None)
    return None


def media_type_of(name: str, recorded: str | None = None) -> str:
    """The type a file called ``name`` is sent as: from its name, else the recorded type;
    active types (HTML, SVG, scripts) and unknown ones as ``application/octet-stream``."""
    guessed, encoding = _types.guess_type(name, strict=False)
    if encoding is not None:
        guessed = _COMPRESSED.get(encoding, DOWNLOAD)
    if guessed is None and recorded and recorded != DOWNLOAD:
        guessed = recorded.split(";")[0].strip().lower()
    if guessed is None or guessed in ACTIVE_TYPES:
        return DOWNLOAD
    return guessed


def artifact_url(session_id: str, seq: int) -> str:
    return f"/api/sessions/{quote(session_id, safe='')}/records/{seq}/artifact"


async def visible_artifact(access: Access, session_id: str, seq: int) -> ArtifactRef:
    """The artifact record ``seq`` references, read as ``access`` may read it: 404 for a
    record it may not see exactly as for one that does not exist."""
    selection = access.records(RecordFilter(after=seq - 1, limit=1))
    record: Record | None = None
    async with aclosing(access.service.store.rows(session_id, selection)) as rows:
        async for row in rows:
            record = decode_record(row) if row.seq == seq else None
    if record is None:
        raise not_found(f"record {seq} in session {session_id!r}")
    found = referenced_artifact(record)
    if found is None:
        raise HTTPProblem(
            404, f"record {seq} is a {record.kind} record, which references no artifact; the "
            "artifact and protocol.violation records of a session do",
        )  # fmt: skip
    return found


async def read_artifact(store: AnyStore, sha256: str) -> bytes:
    """The artifact's bytes, checked against its sha256 by the store's backend (off the event
    loop); a 409 when they are missing or changed."""
    try:
        return await store.backend.artifact(sha256)
    except NotFoundError:
        raise _damaged(sha256, "is missing from the store") from None
    except DamagedStoreError:
        raise _damaged(sha256, "was modified (its content no longer has that sha256)") from None


async def read_prefix(store: AnyStore, sha256: str, limit: int) -> bytes | None:
    """The first ``limit`` bytes of an artifact for a preview, or ``None`` if it is gone
    (the page still shows the record; ``verify`` reports the loss)."""
    return await store.backend.artifact_prefix(sha256, limit)


def _damaged(sha256: str, what: str) -> HTTPProblem:
    return HTTPProblem(
        409, f"artifact {sha256} {what}; run `envharness verify` to see what else is damaged"
    )


def content_disposition(name: str, media_type: str) -> str:
    """``inline`` for a passive type, ``attachment`` for anything else; the file name as
    ASCII (RFC 6266) and exactly (``filename*``, RFC 5987)."""
    disposition = "inline" if media_type in INLINE_TYPES else "attachment"
    base = re.split(r"[/\\]", name)[-1] or "artifact"
    base = "".join(char if unicodedata.category(char)[0] != "C" else "_" for char in base)
    ascii_name = base.encode("ascii", "replace").decode().replace("?", "_")
    ascii_name = re.sub(r'["\\;]', "_", ascii_name)
    return f"{disposition}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


async def get_artifact(call: Call[NoParameters]) -> Response:
    access = call.access
    info = await access.session(call.path("session_id"))
    found = await visible_artifact(access, info.id, call.path("seq"))
    data = await read_artifact(call.service.store, found.sha256)
    media_type = found.media_type
    served = f"{media_type}; charset=utf-8" if media_type.startswith("text/") else media_type
    return Response(
        data,
        media_type=served,
        headers={
            "Content-Disposition": content_disposition(found.name, media_type),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": ARTIFACT_CSP,
            "Cache-Control": "no-store",
        },
    )


ARTIFACT_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/api/sessions/{session_id}/records/{seq:int}/artifact",
        handler=get_artifact, operation="getArtifact", tag="records",
        summary="The file a record references: an artifact, or a protocol violation's bytes",
        description=(
            "Served under the record's own access: a token that may not read record `seq` "
            "gets a 404, as for a record that does not exist (artifact records are session "
            "level, so a participant token gets their files only through its own "
            "protocol.violation records). The content type follows the artifact's name; "
            "images, plain text, CSV and JSON are sent inline, anything else as a download, "
            "and HTML, SVG, XML and scripts as application/octet-stream. The bytes are "
            "checked against the recorded sha256 first: a missing or modified file is a 409."
        ),
        roles=ANYONE, media_type=DOWNLOAD,
        other_media_types=(
            "text/plain", "text/csv", "text/markdown", "application/json",
            "application/x-ndjson", *sorted(IMAGE_TYPES), "*/*",
        ),
        errors=(404, 409),
    ),
)  # fmt: skip
"""Listed in :data:`envharness.service.app.ENDPOINTS`."""
