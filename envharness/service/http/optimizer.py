"""The JSON API of harness versions and optimizer runs.

Every handler calls the functions the command line calls — :func:`~envharness.optimizer.
versions.harness_version` and :func:`~envharness.optimizer.versions.diff_versions` (``envharness
harness show/diff``) — and reads a run through :func:`~envharness.optimizer.history.run_history`,
which derives iterations, verdicts, versions and the regression ledger from the run's chain.

Versions and runs describe every scenario's outcome under every candidate, so they are for
admin and viewer tokens: a participant gets 403 whatever it names, as for snapshots and
datasets (the routing layer refuses it before anything is looked up). URLs name one run or
version exactly, never a prefix.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.errors import EnvharnessError, NotFoundError
from envharness.optimizer import CodeHook, PatchError
from envharness.optimizer.history import RunHistory, VersionRecord, run_history
from envharness.optimizer.versions import HarnessVersion, diff_versions, harness_version
from envharness.service.http.paging import ListQuery, page_of
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem, from_error, not_found
from envharness.service.routing import READERS, Call, Endpoint, json_response
from envharness.service.wire.optimizer import (
    HarnessDiff,
    HarnessVersionDetail,
    HarnessVersionPage,
    HarnessVersionSummary,
    OptimizerRunPage,
    OptimizerRunSummary,
    figure,
)
from envharness.store.locate import AnyStore

__all__ = [
    "HARNESS_API_ENDPOINTS",
    "DiffQuery",
    "Versions",
    "code_hooks",
    "exact_run",
    "exact_version",
    "harness_problem",
    "run_summary",
    "version_detail",
]

VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class DiffQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    old: Annotated[
        str,
        msgspec.Meta(pattern=VERSION_PATTERN, max_length=200,
                     description="The older version, e.g. harness-v1."),
    ]  # fmt: skip
    new: Annotated[
        str,
        msgspec.Meta(pattern=VERSION_PATTERN, max_length=200,
                     description="The newer version, e.g. harness-v2."),
    ]  # fmt: skip


def harness_problem(error: EnvharnessError) -> HTTPProblem:
    """A recorded patch that no longer reads as a patch, or a run chain without its
    configuration, is a conflict with what is stored (409); the rest as everywhere."""
    if isinstance(error, NotFoundError):
        return from_error(error)
    if isinstance(error, PatchError):
        return HTTPProblem(409, f"the recorded patch cannot be read: {error}")
    if type(error) is EnvharnessError:
        return HTTPProblem(409, str(error))
    return from_error(error)


async def exact_version(store: AnyStore, name: str) -> HarnessVersion:
    """The version called exactly ``name``; 404 otherwise."""
    try:
        return await harness_version(store, name)
    except NotFoundError:
        raise not_found(f"harness version {name!r}") from None
    except EnvharnessError as error:
        raise harness_problem(error) from None


async def exact_run(store: AnyStore, run_id: str) -> RunHistory:
    """The optimizer run with exactly this id, read from its chain; 404 otherwise."""
    try:
        info = await store.optimizer_run(run_id)
        if info.id != run_id:
            raise not_found(f"optimizer run {run_id!r}")
        return await run_history(store, info.id)
    except NotFoundError:
        raise not_found(f"optimizer run {run_id!r}") from None
    except EnvharnessError as error:
        raise harness_problem(error) from None


def code_hooks(version: HarnessVersion) -> list[CodeHook]:
    """The version's stacked patch as its code hooks, in the order they run."""
    try:
        return list(version.harness_patch().hooks)
    except PatchError as error:
        raise harness_problem(error) from None


def run_summary(history: RunHistory) -> OptimizerRunSummary:
    return OptimizerRunSummary(
        id=history.id, name=history.name, status=history.status, reason=history.reason,
        created_at=history.created_at, updated_at=history.updated_at,
        environment=history.environment, engineer=history.engineer,
        iterations=sum(1 for i in history.iterations if i.decided),
        candidates=sum(len(i.candidates) for i in history.iterations),
        versions=[v.version for v in history.versions],
        baseline=figure(history.baseline) if history.baseline is not None else None,
        final=figure(history.final) if history.final is not None else None,
    )  # fmt: skip


class Versions:
    """The store's versions with their runs, each run's chain read once per request."""

    def __init__(self, store: AnyStore) -> None:
        self.store = store
        self._runs: dict[str, RunHistory] = {}

    async def run(self, run_id: str) -> RunHistory:
        if run_id not in self._runs:
            self._runs[run_id] = await exact_run(self.store, run_id)
        return self._runs[run_id]

    async def evidence(self, version: str, run_id: str) -> VersionRecord:
        history = await self.run(run_id)
        found = next((v for v in history.versions if v.version == version), None)
        if found is None:
            raise HTTPProblem(409, f"optimizer run {run_id} has no acceptance record of {version}")
        return found

    async def summaries(self) -> list[HarnessVersionSummary]:
        """Every version, oldest first."""
        found = []
        for info in await self.store.harness_versions():
            version = await exact_version(self.store, info.version)
            history = await self.run(info.run_id)
            evidence = await self.evidence(info.version, info.run_id)
            found.append(
                HarnessVersionSummary(
                    version=version.version, parent=version.parent, run_id=version.run_id,
                    run_name=history.name, environment=history.environment,
                    digest=version.digest, created_at=version.created_at,
                    iteration=version.iteration, candidate=version.candidate,
                    hooks=len(code_hooks(version)), experiment_id=version.experiment_id,
                    before=figure(evidence.before),
                    after=figure(evidence.after) if evidence.after is not None else None,
                    mean_reward=version.mean_reward, interval=version.interval,
                    p_value=version.p_value, engineer_tokens=version.engineer_tokens,
                    rerun_tokens=version.rerun_tokens, seconds=version.seconds,
                )
            )  # fmt: skip
        return found


async def version_detail(store: AnyStore, name: str) -> HarnessVersionDetail:
    version = await exact_version(store, name)
    versions = Versions(store)
    history = await versions.run(version.run_id)
    return HarnessVersionDetail(
        version=version,
        hooks=code_hooks(version),
        run=run_summary(history),
        evidence=await versions.evidence(version.version, version.run_id),
    )


async def diff(store: AnyStore, old: str, new: str) -> HarnessDiff:
    """``envharness harness diff OLD NEW``."""
    before, after = await exact_version(store, old), await exact_version(store, new)
    try:
        lines = diff_versions(before, after)
    except PatchError as error:
        raise harness_problem(error) from None
    return HarnessDiff(
        old=before.version, new=after.version, old_digest=before.digest,
        new_digest=after.digest, same=not lines, lines=lines,
    )  # fmt: skip


# -- handlers --------------------------------------------------------------------------------


async def list_versions(call: Call[ListQuery]) -> Response:
    found = await Versions(call.service.store).summaries()
    page, next_after = page_of(found, lambda v: v.version, call.query.after, call.query.limit)
    return json_response(HarnessVersionPage(versions=page, next_after=next_after))


async def get_version(call: Call[NoParameters]) -> Response:
    return json_response(await version_detail(call.service.store, call.path("version")))


async def diff_endpoint(call: Call[DiffQuery]) -> Response:
    return json_response(await diff(call.service.store, call.query.old, call.query.new))


async def list_runs(call: Call[ListQuery]) -> Response:
    store = call.service.store
    found = [run_summary(await exact_run(store, info.id)) for info in await store.optimizer_runs()]
    page, next_after = page_of(found, lambda r: r.id, call.query.after, call.query.limit)
    return json_response(OptimizerRunPage(runs=page, next_after=next_after))


async def get_run(call: Call[NoParameters]) -> Response:
    return json_response(await exact_run(call.service.store, call.path("run_id")))


HARNESS_API_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/api/harness/versions", handler=list_versions,
        operation="listHarnessVersions", tag="harnesses",
        summary="Accepted harness versions, oldest first, with the figures that justified them",
        description=(
            "What `envharness harness list` lists, with each version's run, the harness it "
            "was compared with (`before`: the baseline or its parent) and its own rerun "
            "(`after`) over the run's training scenarios, and its reward: the mean paired "
            "difference, its bootstrap interval and the sign test's p-value."
        ),
        roles=READERS, query=ListQuery, response=HarnessVersionPage, errors=(409, 422),
    ),
    Endpoint(
        method="GET", path="/api/harness/versions/{version}", handler=get_version,
        operation="getHarnessVersion", tag="harnesses",
        summary="One harness version: its code hooks, its run, and the evidence behind it",
        description=(
            "What `envharness harness show VERSION --json` prints (`version`: parent, run, "
            "the rerun experiment that justified it, reward, interval, p-value, score, the "
            "scenarios it improved and the cost line — the same object the optimizer writes "
            "as `versions/harness-vN.json`), its stacked patch as code hooks in the order they "
            "run, and "
            "`evidence`: the measurement it was compared with, its own rerun (with the hooks "
            "that fired), its regression-suite and held-out checks, the scenarios it improved "
            "and the regression ledger of the iterations since its parent."
        ),
        roles=READERS, response=HarnessVersionDetail, errors=(404, 409),
    ),
    Endpoint(
        method="GET", path="/api/harness/diff", handler=diff_endpoint,
        operation="diffHarnessVersions", tag="harnesses",
        summary="A unified diff of two versions' code (`envharness harness diff OLD NEW`)",
        roles=READERS, query=DiffQuery, response=HarnessDiff, errors=(404, 409),
    ),
    Endpoint(
        method="GET", path="/api/optimizer/runs", handler=list_runs,
        operation="listOptimizerRuns", tag="harnesses",
        summary="Optimizer runs, oldest first: status, baseline and final figures, versions",
        roles=READERS, query=ListQuery, response=OptimizerRunPage, errors=(409, 422),
    ),
    Endpoint(
        method="GET", path="/api/optimizer/runs/{run_id}", handler=get_run,
        operation="getOptimizerRun", tag="harnesses",
        summary="One optimizer run: its iterations, every candidate's verdict, its versions",
        description=(
            "The run read back from its chain (`opt_…`, exact): the frozen configuration, "
            "baseline and final measurements, each iteration's candidates — the engineer's "
            "answer, the candidate's patch, its rerun and gate checks, and its verdict with "
            "the reason — each accepted version with what it was compared with, and the "
            "regression ledger. A run still going shows the iterations decided so far."
        ),
        roles=READERS, response=RunHistory, errors=(404, 409),
    ),
)  # fmt: skip
"""Ordered so that a more specific path comes before the one it would also match."""
