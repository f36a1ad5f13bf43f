"""JSON Schema for the protocol, generated from the message types (never written by hand).

``tools/gen_protocol_schema.py`` writes these documents to ``protocol/schema/``; a test fails
when the files there differ, so the published schema cannot drift from what the host decodes.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from envharness.protocol.messages import PROTOCOL_VERSION, AgentMessage, HostMessage

__all__ = ["render_schemas", "schema_documents"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_documents() -> dict[str, dict[str, Any]]:
    """One JSON Schema document per direction, keyed by file name."""
    documents: dict[str, dict[str, Any]] = {}
    for name, union, title in (
        ("host-to-agent.json", HostMessage, "messages the host sends to an agent"),
        ("agent-to-host.json", AgentMessage, "messages an agent sends to the host"),
    ):
        document = msgspec.json.schema(union)
        document["$schema"] = _DIALECT
        document["title"] = f"envharness agent protocol v{PROTOCOL_VERSION}: {title}"
        document["description"] = (
            "Each message is one JSON object on one UTF-8 line ending in \\n. Unknown fields "
            "must be ignored. See protocol/README.md for the rules this schema cannot express."
        )
        documents[name] = document
    return documents


def render_schemas() -> dict[str, str]:
    """The exact file contents: sorted keys, two-space indent, a trailing newline."""
    return {
        name: json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, document in schema_documents().items()
    }
