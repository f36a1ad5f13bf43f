"""Canonical bytes of trajectories and snapshots, and decoding that checks the schema version.

What is hashed is what is stored: a trajectory is encoded once (canonical JSON, sorted keys)
and kept as those bytes; readers decode them but never re-encode them to check anything.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from envharness.records import canonical
from envharness.trajectories.errors import SchemaVersionError, TrajectoryError
from envharness.trajectories.model import SCHEMA_VERSION, Entitlement, SnapshotMetadata, Trajectory

__all__ = [
    "SnapshotContent",
    "decode_content",
    "decode_trajectory",
    "encode",
    "metadata_of",
]

_T = TypeVar("_T")


class SnapshotContent(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """A snapshot's header: what its id hashes before the trajectories (no id, no time)."""

    schema_version: int = SCHEMA_VERSION
    label: str = ""
    trajectories: int
    records: int
    entitlement: Entitlement | None = None


class _Versioned(msgspec.Struct, forbid_unknown_fields=False):
    schema_version: int = SCHEMA_VERSION


_versioned = msgspec.json.Decoder(_Versioned)
_trajectory = msgspec.json.Decoder(Trajectory)
_content = msgspec.json.Decoder(SnapshotContent)


def encode(value: Any) -> bytes:
    """Canonical JSON: the bytes that are stored and hashed."""
    return canonical(value)


def decode_trajectory(data: bytes, *, what: str = "trajectory") -> Trajectory:
    """Decode a stored or exported trajectory; refuse a schema version this program lacks."""
    return _decode(_trajectory, data, what)


def decode_content(data: bytes, *, what: str = "snapshot") -> SnapshotContent:
    return _decode(_content, data, what)


def metadata_of(snapshot_id: str, content: SnapshotContent, created_at: str) -> SnapshotMetadata:
    return SnapshotMetadata(
        schema_version=content.schema_version,
        id=snapshot_id,
        label=content.label,
        trajectories=content.trajectories,
        records=content.records,
        entitlement=content.entitlement,
        created_at=created_at,
    )


def _decode(decoder: msgspec.json.Decoder[_T], data: bytes, what: str) -> _T:
    try:
        version = _versioned.decode(data).schema_version
    except msgspec.DecodeError as exc:
        raise TrajectoryError(f"{what} is not valid trajectory JSON: {exc}") from exc
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{what} has schema version {version}, but this envharness reads version "
            f"{SCHEMA_VERSION} only; "
            + (
                "upgrade envharness to read it"
                if version > SCHEMA_VERSION
                else "re-create it with this envharness"
            )
        )
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise TrajectoryError(f"{what} does not match the trajectory schema: {exc}") from exc
