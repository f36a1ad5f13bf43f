"""Inline previews of a turn's artifacts: an image as ``<img>``, text as its first few KB.

The page reads the first :data:`PREVIEW_BYTES` of each text artifact itself (off the event
loop) and links every image to the API's artifact route, which the browser fetches with the
viewer's own cookie under the same access checks (:mod:`envharness.service.http.artifacts`).
Only artifact records get a preview: a protocol violation's bytes are linked, not shown.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from envharness.records import Artifact, Record
from envharness.service.http.artifacts import (
    IMAGE_TYPES,
    INLINE_TYPES,
    artifact_url,
    read_prefix,
    referenced_artifact,
)
from envharness.service.pages.html import Html, html
from envharness.service.pages.text_view import text_view
from envharness.store.locate import AnyStore

__all__ = ["IMAGE_PREVIEW_LIMIT", "PREVIEW_BYTES", "artifact_previews"]

PREVIEW_BYTES = 4096
"""Bytes of a text artifact shown on the Turns page; the link opens it whole."""
IMAGE_PREVIEW_LIMIT = 4 * 1024 * 1024
"""Images larger than this are linked, not drawn (a page of 20 turns stays light)."""


async def artifact_previews(
    store: AnyStore, session_id: str, records: Iterable[Record]
) -> dict[int, Html]:
    """Previews of the artifact records among ``records``, by seq."""
    previews: dict[int, Html] = {}
    for record in records:
        found = referenced_artifact(record)
        if found is None or not isinstance(record.payload, Artifact):
            continue
        media_type = found.media_type
        if media_type in IMAGE_TYPES:
            if found.size is None or found.size <= IMAGE_PREVIEW_LIMIT:
                previews[record.seq] = html(
                    '<div class="artifact-preview"><img src="{url}" alt="{name}" '
                    'loading="lazy"></div>',
                    url=artifact_url(session_id, record.seq), name=found.name,
                )  # fmt: skip
        elif media_type in INLINE_TYPES:
            data = await read_prefix(store, found.sha256, PREVIEW_BYTES)
            if data is None:
                previews[record.seq] = Html(
                    '<div class="artifact-preview missing">the file is missing from the store '
                    "(run <code>envharness verify</code>)</div>"
                )
                continue
            text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)
            size = found.size if found.size is not None else len(data)
            more = Html("")
            if size > len(data):
                more = html(
                    '<div class="cut">the first {n} of {size} bytes</div>',
                    n=f"{len(data):,}", size=f"{size:,}",
                )  # fmt: skip
            previews[record.seq] = html(
                '<div class="artifact-preview">{text}{more}</div>',
                text=text_view(text, limit=None), more=more,
            )  # fmt: skip
    return previews
