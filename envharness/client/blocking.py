"""The blocking client: the async client's methods called through a portal."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any, Self, TypeVar

import httpx

from envharness._portal import Portal
from envharness.client.aio import AsyncClient
from envharness.client.wire import ExperimentEvent
from envharness.service.wire.optimizer import (
    HarnessDiff,
    HarnessVersionDetail,
    HarnessVersionPage,
    OptimizerRunPage,
    RunHistory,
)
from envharness.service.wire.sessions import (
    ComparisonOut,
    ExperimentDetail,
    ExperimentPage,
    ExperimentSummary,
    Health,
    LineageOut,
    NewToken,
    RecordOut,
    RecordPage,
    SessionDetail,
    SessionPage,
    SessionSummary,
    VerifyOut,
)
from envharness.service.wire.trajectories import (
    DatasetDetail,
    DatasetPage,
    ImportReceipt,
    SnapshotDetail,
    SnapshotPage,
    SourcePage,
    TrajectoryDetail,
    TrajectoryPage,
    TrajectorySummary,
)
from envharness.store.tokens import TokenInfo
from envharness.trajectories import Dataset, DatasetRow, SnapshotMetadata

_T = TypeVar("_T")


class Client:
    """The blocking face of :class:`AsyncClient` (one event loop in a helper thread)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._portal = Portal()
        self._portal.open()
        self.aio = AsyncClient(base_url, token, transport=transport, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._portal.call(self.aio.aclose)
        finally:
            self._portal.close()

    def health(self) -> Health:
        return self._portal.call(self.aio.health)

    def sessions(self, **filters: Any) -> SessionPage:
        return self._portal.call(lambda: self.aio.sessions(**filters))

    def iter_sessions(self, **filters: Any) -> Iterator[SessionSummary]:
        return self._iterate(lambda: self.aio.iter_sessions(**filters))

    def experiments(self, **filters: Any) -> ExperimentPage:
        return self._portal.call(lambda: self.aio.experiments(**filters))

    def iter_experiments(self, **filters: Any) -> Iterator[ExperimentSummary]:
        return self._iterate(lambda: self.aio.iter_experiments(**filters))

    def experiment(self, experiment_id: str) -> ExperimentDetail:
        return self._portal.call(self.aio.experiment, experiment_id)

    def experiment_events(
        self, experiment_id: str, *, after: int = -1
    ) -> Iterator[ExperimentEvent]:
        return self._iterate(lambda: self.aio.experiment_events(experiment_id, after=after))

    def session(self, session_id: str) -> SessionDetail:
        return self._portal.call(self.aio.session, session_id)

    def lineage(self, session_id: str) -> LineageOut:
        return self._portal.call(self.aio.lineage, session_id)

    def compare(self, left: str, right: str) -> ComparisonOut:
        return self._portal.call(self.aio.compare, left, right)

    def records(self, session_id: str, **filters: Any) -> RecordPage:
        return self._portal.call(lambda: self.aio.records(session_id, **filters))

    def iter_records(self, session_id: str, **filters: Any) -> Iterator[RecordOut]:
        return self._iterate(lambda: self.aio.iter_records(session_id, **filters))

    def export(self, session_id: str) -> Iterator[bytes]:
        return self._iterate(lambda: self.aio.export(session_id))

    def events(self, session_id: str, *, after: int = -1) -> Iterator[RecordOut]:
        return self._iterate(lambda: self.aio.events(session_id, after=after))

    def verify(self, *, full: bool = False) -> VerifyOut:
        return self._portal.call(self.aio.verify, full=full)

    def tokens(self) -> list[TokenInfo]:
        return self._portal.call(self.aio.tokens)

    def issue_token(self, role: str, **options: Any) -> NewToken:
        return self._portal.call(lambda: self.aio.issue_token(role, **options))

    def revoke_token(self, token_id: str) -> TokenInfo:
        return self._portal.call(self.aio.revoke_token, token_id)

    def trajectories(self, **filters: Any) -> TrajectoryPage:
        return self._portal.call(lambda: self.aio.trajectories(**filters))

    def iter_trajectories(self, **filters: Any) -> Iterator[TrajectorySummary]:
        return self._iterate(lambda: self.aio.iter_trajectories(**filters))

    def trajectory(self, trajectory_id: str, *, check: bool = True) -> TrajectoryDetail:
        return self._portal.call(lambda: self.aio.trajectory(trajectory_id, check=check))

    def snapshots(self, **options: Any) -> SnapshotPage:
        return self._portal.call(lambda: self.aio.snapshots(**options))

    def snapshot(self, snapshot_id: str, **options: Any) -> SnapshotDetail:
        return self._portal.call(lambda: self.aio.snapshot(snapshot_id, **options))

    def create_snapshot(self, sessions: Sequence[str] = (), **options: Any) -> SnapshotMetadata:
        return self._portal.call(lambda: self.aio.create_snapshot(sessions, **options))

    def export_snapshot(self, snapshot_id: str) -> Iterator[bytes]:
        return self._iterate(lambda: self.aio.export_snapshot(snapshot_id))

    def datasets(self, **options: Any) -> DatasetPage:
        return self._portal.call(lambda: self.aio.datasets(**options))

    def dataset(self, name: str) -> DatasetDetail:
        return self._portal.call(self.aio.dataset, name)

    def create_dataset(self, name: str, snapshots: Sequence[str], **options: Any) -> Dataset:
        return self._portal.call(lambda: self.aio.create_dataset(name, snapshots, **options))

    def export_dataset(self, name: str) -> Iterator[DatasetRow]:
        return self._iterate(lambda: self.aio.export_dataset(name))

    def sources(self, source: str | None = None) -> SourcePage:
        return self._portal.call(self.aio.sources, source)

    def import_lines(
        self, source: str, lines: bytes | Sequence[bytes], **options: Any
    ) -> ImportReceipt:
        return self._portal.call(lambda: self.aio.import_lines(source, lines, **options))

    def harness_versions(self, **options: Any) -> HarnessVersionPage:
        return self._portal.call(lambda: self.aio.harness_versions(**options))

    def harness_version(self, version: str) -> HarnessVersionDetail:
        return self._portal.call(self.aio.harness_version, version)

    def harness_diff(self, old: str, new: str) -> HarnessDiff:
        return self._portal.call(self.aio.harness_diff, old, new)

    def optimizer_runs(self, **options: Any) -> OptimizerRunPage:
        return self._portal.call(lambda: self.aio.optimizer_runs(**options))

    def optimizer_run(self, run_id: str) -> RunHistory:
        return self._portal.call(self.aio.optimizer_run, run_id)

    def _iterate(self, make: Callable[[], AsyncGenerator[_T, None]]) -> Iterator[_T]:
        """An async iterator stepped through the portal; closed even when left early."""
        iterator = self._portal.call(_start, make)
        try:
            while True:
                try:
                    yield self._portal.call(iterator.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            self._portal.call(iterator.aclose)


async def _start(make: Callable[[], AsyncGenerator[_T, None]]) -> AsyncGenerator[_T, None]:
    return make()
