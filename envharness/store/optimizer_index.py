"""The index of optimizer runs and the harness versions they accepted.

Like the experiment index, these tables are derived from records (``optimizer.started``,
``optimizer.status``, ``optimizer.accepted``) by the journal's writer in the same transaction,
and are not evidence: the run's chain is. They let ``envharness harness list`` answer without
reading every chain.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

__all__ = [
    "HARNESS_VERSIONS_QUERY",
    "OPTIMIZER_RUNS_QUERY",
    "HarnessVersionInfo",
    "OptimizerRunInfo",
    "harness_version_info",
    "optimizer_run_info",
]


class OptimizerRunInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An optimizer run as listed (the derived index; its chain holds the evidence)."""

    id: str
    name: str
    status: str
    reason: str | None
    created_at: str
    updated_at: str
    head_seq: int
    head_digest: str


class HarnessVersionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An accepted harness version: where its ``optimizer.accepted`` record lies."""

    version: str
    run_id: str
    seq: int
    parent: str | None
    digest: str
    created_at: str


OPTIMIZER_RUNS_QUERY = (
    "SELECT id, name, status, reason, created_at, updated_at, head_seq, head_digest"
    " FROM optimizer_runs"
)
HARNESS_VERSIONS_QUERY = (
    "SELECT version, run_id, seq, parent, digest, created_at FROM harness_versions"
)

_RUN_FIELDS = OptimizerRunInfo.__struct_fields__
_VERSION_FIELDS = HarnessVersionInfo.__struct_fields__


def optimizer_run_info(row: Sequence[object]) -> OptimizerRunInfo:
    return msgspec.convert(dict(zip(_RUN_FIELDS, row, strict=True)), OptimizerRunInfo)


def harness_version_info(row: Sequence[object]) -> HarnessVersionInfo:
    return msgspec.convert(dict(zip(_VERSION_FIELDS, row, strict=True)), HarnessVersionInfo)
