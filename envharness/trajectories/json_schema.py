"""JSON Schema of the trajectory contract and of a snapshot export, generated from the types.

``tools/gen_protocol_schema.py`` writes these documents to ``protocol/schema/`` beside the agent
protocol's; a test fails when the files there differ, so the published schema cannot drift from
what envharness writes and reads.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from envharness.trajectories.model import SCHEMA_VERSION, Trajectory
from envharness.trajectories.snapshots import ExportLine

__all__ = ["render_trajectory_schemas", "trajectory_schema_documents"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def trajectory_schema_documents() -> dict[str, dict[str, Any]]:
    """One JSON Schema document per file name."""
    trajectory = msgspec.json.schema(Trajectory)
    trajectory["$schema"] = _DIALECT
    trajectory["title"] = f"envharness trajectory, schema version {SCHEMA_VERSION}"
    trajectory["description"] = (
        "A portable, digest-bound projection of one journal (docs/trajectories.md). Readers "
        "must refuse a schema_version they do not know and ignore unknown fields."
    )
    export = msgspec.json.schema(ExportLine)
    export["$schema"] = _DIALECT
    export["title"] = f"envharness snapshot export line, schema version {SCHEMA_VERSION}"
    export["description"] = (
        "One JSON object per line: the snapshot, then each trajectory followed by its records "
        "(docs/trajectories.md). `content`, `trajectory` and each record's `payload` are the "
        "exact bytes that were hashed: recompute ids and digests from them, never re-encode."
    )
    return {"trajectory.json": trajectory, "snapshot-export.json": export}


def render_trajectory_schemas() -> dict[str, str]:
    """The exact file contents: sorted keys, two-space indent, a trailing newline."""
    return {
        name: json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, document in trajectory_schema_documents().items()
    }
