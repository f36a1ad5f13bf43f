"""Accepted harness versions, read back from the store: list, show, diff, load.

A version is an ``optimizer.accepted`` record (found through the store's ``harness_versions``
index); its patch is the whole stacked patch, so loading ``harness-v2`` needs nothing else::

    version = await harness_version(store, "harness-v2")
    hooks = ExecutableHarness.from_patch(version.harness_patch(), sandbox=SubprocessSandbox())

:func:`harness_version` is the one place a :class:`~envharness.optimizer.results.HarnessVersion`
is built: the optimizer reads back each version it accepts through it too, so what a run returns
and writes is what ``envharness harness show`` and the service show.
"""

from __future__ import annotations

import difflib
import re

from envharness.errors import NotFoundError
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.results import HarnessVersion
from envharness.records import OptimizerAccepted, OptimizerDecision, OptimizerStarted
from envharness.store import HarnessVersionInfo, RecordFilter
from envharness.store.locate import AnyStore
from envharness.store.postgres import PostgresStore

__all__ = [
    "HarnessVersion",
    "diff_versions",
    "harness_version",
    "next_version_name",
    "numbered_after",
    "patch_text",
]

_NAME = re.compile(r"harness-v(\d+)")


async def harness_version(store: AnyStore, name: str) -> HarnessVersion:
    """The version called ``name``; :class:`NotFoundError` listing the known ones otherwise."""
    known = await store.harness_versions()
    info = next((v for v in known if v.version == name), None)
    if info is None:
        names = ", ".join(v.version for v in known) or "none yet"
        where = store.where if isinstance(store, PostgresStore) else store.directory
        raise NotFoundError(
            f"no harness version {name!r} in the store at {str(where)!r} (versions: {names})"
        )
    return await _read(store, info)


async def next_version_name(store: AnyStore) -> str:
    """``harness-vN`` with N one past the highest the store holds: the name the next accepted
    version asks for (another run may take it first; ``RunLog.accept`` then asks again)."""
    numbers = [
        int(match.group(1))
        for info in await store.harness_versions()
        if (match := _NAME.fullmatch(info.version))
    ]
    return f"harness-v{max(numbers, default=0) + 1}"


def numbered_after(name: str, parent: str | None) -> str:
    """``name`` (a ``harness-vN`` the store offers), numbered past ``parent`` when the parent is
    a ``harness-vM`` with M >= N: a run that builds on a version from another store (or one
    this store has not caught up with) names its version after its parent, never as its parent
    — ``harness-v2 (from harness-v1)``, not ``harness-v1 (from harness-v1)``."""
    own, base = _NAME.fullmatch(name), _NAME.fullmatch(parent or "")
    if own is None or base is None or int(own.group(1)) > int(base.group(1)):
        return name
    return f"harness-v{int(base.group(1)) + 1}"


async def _read(store: AnyStore, info: HarnessVersionInfo) -> HarnessVersion:
    accepted: OptimizerAccepted | None = None
    async for record in store.records(info.run_id, RecordFilter(after=info.seq - 1, limit=1)):
        if isinstance(record.payload, OptimizerAccepted):
            accepted = record.payload
    if accepted is None:
        raise NotFoundError(f"the record of harness version {info.version} is missing")
    environment = None
    improved: tuple[str, ...] = ()
    context = RecordFilter(kinds=("optimizer.started", "optimizer.decision"), until=info.seq)
    async for record in store.records(info.run_id, context):
        payload = record.payload
        if isinstance(payload, OptimizerStarted):
            environment = f"{payload.config.environment.name}@{payload.config.environment.version}"
        elif isinstance(payload, OptimizerDecision) and payload.iteration == accepted.iteration:
            improved = next(
                (v.improved for v in payload.verdicts if v.candidate == accepted.candidate), ()
            )
    return HarnessVersion(
        version=accepted.version,
        run_id=info.run_id,
        seq=info.seq,
        created_at=info.created_at,
        parent=accepted.parent,
        digest=accepted.digest,
        patch=accepted.patch,
        iteration=accepted.iteration,
        candidate=accepted.candidate,
        experiment_id=accepted.experiment_id,
        mean_reward=accepted.mean_reward,
        interval=accepted.interval,
        p_value=accepted.p_value,
        score=accepted.score,
        engineer_tokens=accepted.engineer_tokens,
        rerun_tokens=accepted.rerun_tokens,
        seconds=accepted.seconds,
        environment=environment,
        improved=improved,
    )


def patch_text(patch: HarnessPatch) -> list[str]:
    """The patch as code: each hook's source under a comment naming it and why it is there."""
    lines: list[str] = []
    for number, hook in enumerate(patch.hooks, 1):
        lines.append(
            f"# hook {number}: {hook.hook}" + (f" — {hook.description}" if hook.description else "")
        )
        lines.extend(hook.code.rstrip("\n").splitlines())
        lines.append("")
    return lines


def diff_versions(old: HarnessVersion, new: HarnessVersion) -> list[str]:
    """A unified diff of two versions' code (empty when their hooks are the same)."""
    return list(
        difflib.unified_diff(
            patch_text(old.harness_patch()),
            patch_text(new.harness_patch()),
            fromfile=old.version,
            tofile=new.version,
            lineterm="",
        )
    )
