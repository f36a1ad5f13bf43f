"""A typed client for the local service's API, over httpx.

:class:`AsyncClient` is the one implementation (asyncio or trio); :class:`Client` is its
blocking face, a thin portal like :class:`~envharness.EnvironmentHarness`. Answers decode into
the service's own wire types (:mod:`envharness.service.schemas`), so a response that does not
match the published schema fails loudly here instead of somewhere downstream.

    async with AsyncClient("http://127.0.0.1:8765", token) as client:
        async for summary in client.iter_sessions(status="completed"):
            page = await client.records(summary.id, kinds=["action.blocked"])
        async for record in client.events(session_id):   # live, resumes by itself
            ...
        detail = await client.experiment(experiment_id)   # config, sessions by scenario/trial
        async for event in client.experiment_events(experiment_id):
            ...                                           # sessions starting and ending
        lineage = await client.lineage(session_id)        # parent and checkpoint, branches
        diff = await client.compare(parent_id, branch_id) # per-turn and score differences
        detail = await client.trajectory(session_id)      # states, segments, digest check
        async for line in client.export_snapshot(snapshot_id):
            ...                                           # checked first, then streamed
        version = await client.harness_version("harness-v2")   # code, reruns, reward

Errors the service answers with raise :class:`ServiceError` (status, message, and the bad
parameter when there is one); a service that cannot be reached raises httpx's own error.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, aclosing
from typing import Any, Protocol, Self, TypeVar, cast
from urllib.parse import quote

import anyio
import httpx
import msgspec
from anyio.from_thread import BlockingPortal, start_blocking_portal

from envharness.errors import EnvharnessError
from envharness.service.harness_schemas import (
    HarnessDiff,
    HarnessVersionDetail,
    HarnessVersionPage,
    OptimizerRunPage,
    RunHistory,
)
from envharness.service.schemas import (
    ComparisonOut,
    ExperimentDetail,
    ExperimentPage,
    ExperimentStatusEvent,
    ExperimentSummary,
    Health,
    LineageOut,
    NewToken,
    Problem,
    RecordOut,
    RecordPage,
    SessionCreatedEvent,
    SessionDetail,
    SessionPage,
    SessionStatusEvent,
    SessionSummary,
    TokenRequest,
    VerifyOut,
)
from envharness.service.trajectory_schemas import (
    DatasetDetail,
    DatasetPage,
    DatasetRequest,
    ImportReceipt,
    SnapshotDetail,
    SnapshotPage,
    SnapshotRequest,
    SourcePage,
    TrajectoryDetail,
    TrajectoryPage,
    TrajectorySummary,
)
from envharness.store.tokens import TokenInfo
from envharness.trajectories import Dataset, DatasetRow, Entitlement, SnapshotMetadata

__all__ = ["AsyncClient", "Client", "ExperimentEvent", "ServiceError"]

_T = TypeVar("_T")
_dataset_row = msgspec.json.Decoder(DatasetRow)
_record = msgspec.json.Decoder(RecordOut)
_problem = msgspec.json.Decoder(Problem)
ExperimentEvent = SessionCreatedEvent | SessionStatusEvent | ExperimentStatusEvent
"""What an experiment's stream reports: a session started, one changed status, or the
experiment did."""
_experiment_events: dict[str, msgspec.json.Decoder[Any]] = {
    "session.created": msgspec.json.Decoder(SessionCreatedEvent),
    "session.status": msgspec.json.Decoder(SessionStatusEvent),
    "experiment.status": msgspec.json.Decoder(ExperimentStatusEvent),
}

_Params = list[tuple[str, str | int | float | bool | None]]

RECONNECT_LIMIT = 5
"""Consecutive failed reconnects after which :meth:`AsyncClient.events` gives up."""


class ServiceError(EnvharnessError):
    """The service answered with an error (``status`` 4xx or 5xx)."""

    def __init__(self, status: int, message: str, parameter: str | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.parameter = parameter


class _Paged(Protocol):
    @property
    def next_after(self) -> Any: ...


_Page = TypeVar("_Page", bound=_Paged)


async def _every(
    fetch: Callable[[Any], Awaitable[_Page]], items: Callable[[_Page], Iterable[_T]]
) -> AsyncGenerator[_T, None]:
    """Every item of a paged listing: ``fetch(after)`` gets a page (``after`` is ``None`` for
    the first), ``items`` picks its entries, and its ``next_after`` says where the next starts."""
    after: Any = None
    while True:
        page = await fetch(after)
        for item in items(page):
            yield item
        if page.next_after is None:
            return
        after = page.next_after


class AsyncClient:
    """The API of one running service. ``token`` is a bearer token (``eht_…``).

    ``transport`` replaces the network (``httpx.ASGITransport(app)`` in tests).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, transport=transport, timeout=timeout
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- reading -------------------------------------------------------------------------------

    async def health(self) -> Health:
        return await self._get("/api/health", Health)

    async def sessions(
        self,
        *,
        status: str | None = None,
        experiment: str | None = None,
        scenario: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> SessionPage:
        params = _params(
            status=status, experiment=experiment, scenario=scenario, after=after, limit=limit
        )
        return await self._get("/api/sessions", SessionPage, params)

    def iter_sessions(
        self,
        *,
        status: str | None = None,
        experiment: str | None = None,
        scenario: str | None = None,
    ) -> AsyncGenerator[SessionSummary, None]:
        """Every matching session, fetching pages as it goes."""
        return _every(
            lambda after: self.sessions(
                status=status, experiment=experiment, scenario=scenario, after=after, limit=500
            ),
            lambda page: page.sessions,
        )

    async def experiments(
        self, *, status: str | None = None, after: str | None = None, limit: int = 100
    ) -> ExperimentPage:
        params = _params(status=status, after=after, limit=limit)
        return await self._get("/api/experiments", ExperimentPage, params)

    def iter_experiments(
        self, *, status: str | None = None
    ) -> AsyncGenerator[ExperimentSummary, None]:
        """Every matching experiment, fetching pages as it goes."""
        return _every(
            lambda after: self.experiments(status=status, after=after, limit=500),
            lambda page: page.experiments,
        )

    async def experiment(self, experiment_id: str) -> ExperimentDetail:
        return await self._get(f"/api/experiments/{_segment(experiment_id)}", ExperimentDetail)

    async def experiment_events(
        self, experiment_id: str, *, after: int = -1, reconnect: bool = True
    ) -> AsyncGenerator[ExperimentEvent, None]:
        """The experiment's sessions as they start and change status, and its own status
        changes, until it ends; resumed after a dropped connection like :meth:`events`.
        ``after`` is an event id (a store position), -1 for everything."""
        url = f"/api/experiments/{_segment(experiment_id)}/events"
        async with aclosing(self._follow(url, after, reconnect)) as stream:
            async for event, data in stream:
                decoder = _experiment_events.get(event)
                if decoder is not None:
                    yield decoder.decode(data)

    async def session(self, session_id: str) -> SessionDetail:
        return await self._get(f"/api/sessions/{_segment(session_id)}", SessionDetail)

    async def lineage(self, session_id: str) -> LineageOut:
        """Where the session was branched from (parent, checkpoint, intervention), and the
        branches made from it."""
        return await self._get(f"/api/sessions/{_segment(session_id)}/lineage", LineageOut)

    async def compare(self, left: str, right: str) -> ComparisonOut:
        """Two sessions aligned by turn and participant: what differs, and their scores."""
        return await self._get("/api/compare", ComparisonOut, _params(left=left, right=right))

    async def records(
        self,
        session_id: str,
        *,
        after: int = -1,
        limit: int = 100,
        kinds: Sequence[str] = (),
        participant: str | None = None,
        turn: int | None = None,
    ) -> RecordPage:
        params = _params(after=after, limit=limit, participant=participant, turn=turn)
        params += [("kind", kind) for kind in kinds]
        return await self._get(f"/api/sessions/{_segment(session_id)}/records", RecordPage, params)

    def iter_records(
        self,
        session_id: str,
        *,
        kinds: Sequence[str] = (),
        participant: str | None = None,
        turn: int | None = None,
    ) -> AsyncGenerator[RecordOut, None]:
        """Every matching record of the session, in order, fetching pages as it goes."""
        return _every(
            lambda after: self.records(
                session_id,
                after=-1 if after is None else after,
                limit=1000,
                kinds=kinds,
                participant=participant,
                turn=turn,
            ),
            lambda page: page.records,
        )

    async def export(self, session_id: str) -> AsyncGenerator[bytes, None]:
        """The session's JSON lines, each exactly as the service streamed it (no newline)."""
        async with self._http.stream(
            "GET", f"/api/sessions/{_segment(session_id)}/export"
        ) as response:
            await _raise_for(response)
            async with aclosing(_lines(response)) as lines:
                async for line in lines:
                    if line:
                        yield line.encode()

    async def events(
        self, session_id: str, *, after: int = -1, reconnect: bool = True
    ) -> AsyncGenerator[RecordOut, None]:
        """Records as they commit, until the session ends. A dropped connection is resumed
        from the last record received (``Last-Event-ID``): nothing is missed or repeated."""
        url = f"/api/sessions/{_segment(session_id)}/events"
        async with aclosing(self._follow(url, after, reconnect)) as stream:
            async for event, data in stream:
                if event == "record":
                    yield _record.decode(data)

    async def _follow(
        self, url: str, after: int, reconnect: bool
    ) -> AsyncGenerator[tuple[str, bytes], None]:
        """The events of a stream with ids, until its ``end``; reconnects after a dropped
        connection with the last id received as ``Last-Event-ID``."""
        last = after
        failures = 0
        while True:
            ended = False
            try:
                async with aclosing(self._event_stream(url, last)) as stream:
                    # Read on after `end` until the server closes: leaving httpx's stream
                    # early strands its inner generators (trio warns about each of them).
                    async for event, data, event_id in stream:
                        failures = 0
                        if event == "end":
                            ended = True
                        elif not ended:
                            if event_id is not None:
                                last = int(event_id)
                            yield event, data
                return  # ended, or the server is stopping
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError):
                failures += 1
                if not reconnect or failures > RECONNECT_LIMIT:
                    raise
                await anyio.sleep(min(0.2 * 2**failures, 5.0))

    async def _event_stream(
        self, url: str, last: int
    ) -> AsyncGenerator[tuple[str, bytes, str | None], None]:
        headers = {"Last-Event-ID": str(last), "Accept": "text/event-stream"}
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        async with self._http.stream("GET", url, headers=headers, timeout=timeout) as response:
            await _raise_for(response)
            event, data, event_id = "message", list[str](), None
            async with aclosing(_lines(response)) as lines:
                async for line in lines:
                    if not line:
                        if data:
                            yield event, "\n".join(data).encode(), event_id
                        event, data, event_id = "message", [], None
                        continue
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "event":
                        event = value
                    elif name == "data":
                        data.append(value)
                    elif name == "id":
                        event_id = value

    async def verify(self) -> VerifyOut:
        """Re-check the whole store: as long as that takes (no read timeout)."""
        return await _decode(await self._http.get("/api/verify", timeout=None), VerifyOut)

    # -- trajectories, snapshots, datasets, sources ---------------------------------------------

    async def trajectories(
        self,
        *,
        origin: str | None = None,
        execution: str | None = None,
        collection: str | None = None,
        termination: str | None = None,
        outcome: str | None = None,
        experiment: str | None = None,
        source: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> TrajectoryPage:
        """Trajectories with their four states, filtered by any of them (docs/api.md)."""
        params = _params(
            origin=origin, execution=execution, collection=collection, termination=termination,
            outcome=outcome, experiment=experiment, source=source, after=after, limit=limit,
        )  # fmt: skip
        return await self._get("/api/trajectories", TrajectoryPage, params)

    def iter_trajectories(self, **filters: str | None) -> AsyncGenerator[TrajectorySummary, None]:
        """Every matching trajectory, fetching pages as it goes."""
        return _every(
            lambda after: self.trajectories(**filters, after=after, limit=500),
            lambda page: page.trajectories,
        )

    async def trajectory(self, trajectory_id: str, *, check: bool = True) -> TrajectoryDetail:
        """One trajectory (``ses_…`` or ``SOURCE:EPISODE``), with its digest check unless
        ``check`` is false; as long as the check takes (no read timeout)."""
        path = f"/api/trajectories/{_segment(trajectory_id, safe=':/')}"
        params = _params(check=str(check).lower())
        response = await self._http.get(path, params=params, timeout=None)
        return await _decode(response, TrajectoryDetail)

    async def snapshots(self, *, after: str | None = None, limit: int = 100) -> SnapshotPage:
        return await self._get("/api/snapshots", SnapshotPage, _params(after=after, limit=limit))

    async def snapshot(
        self, snapshot_id: str, *, check: bool = False, after: int = -1, limit: int = 100
    ) -> SnapshotDetail:
        """A snapshot and a page of its trajectories; ``check`` verifies it first."""
        params = _params(check=str(check).lower(), after=after, limit=limit)
        response = await self._http.get(
            f"/api/snapshots/{_segment(snapshot_id)}", params=params, timeout=None
        )
        return await _decode(response, SnapshotDetail)

    async def create_snapshot(
        self,
        sessions: Sequence[str] = (),
        *,
        experiment: str | None = None,
        label: str = "",
        entitlement: Entitlement | str | None = None,
    ) -> SnapshotMetadata:
        """Freeze trajectories (admin); the same selection again answers the same snapshot."""
        if isinstance(entitlement, str):
            entitlement = Entitlement(basis=entitlement)
        request = SnapshotRequest(
            sessions=list(sessions), experiment=experiment, label=label, entitlement=entitlement
        )
        return await self._post("/api/snapshots", msgspec.json.encode(request), SnapshotMetadata)

    async def export_snapshot(self, snapshot_id: str) -> AsyncGenerator[bytes, None]:
        """The snapshot's JSON lines exactly as streamed (no newline): hash them as they are."""
        path = f"/api/snapshots/{_segment(snapshot_id)}/export"
        async with aclosing(self._stream_lines(path)) as lines:
            async for line in lines:
                yield line

    async def datasets(self, *, after: str | None = None, limit: int = 100) -> DatasetPage:
        return await self._get("/api/datasets", DatasetPage, _params(after=after, limit=limit))

    async def dataset(self, name: str) -> DatasetDetail:
        return await self._get(f"/api/datasets/{_dataset(name)}", DatasetDetail)

    async def create_dataset(
        self, name: str, snapshots: Sequence[str], *, reward: str | None = None
    ) -> Dataset:
        """A dataset of these snapshots (admin); refused (422) naming every trajectory that
        is not complete, terminal, training-entitled and rewarded."""
        request = DatasetRequest(name=name, snapshots=list(snapshots), reward=reward)
        return await self._post("/api/datasets", msgspec.json.encode(request), Dataset)

    async def export_dataset(self, name: str) -> AsyncGenerator[DatasetRow, None]:
        """The dataset's rows (TRL's conversational format), as the service streams them."""
        path = f"/api/datasets/{_dataset(name)}/export"
        async with aclosing(self._stream_lines(path)) as lines:
            async for line in lines:
                yield _dataset_row.decode(line)

    async def sources(self, source: str | None = None) -> SourcePage:
        """Each imported source's health (or one source's)."""
        return await self._get("/api/sources", SourcePage, _params(source=source))

    async def import_lines(
        self,
        source: str,
        lines: bytes | Sequence[bytes],
        *,
        format: str = "envharness",
        training: bool = False,
    ) -> ImportReceipt:
        """Import lines into ``source`` as one all-or-nothing batch (admin)."""
        body = (
            lines
            if isinstance(lines, bytes)
            else b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
        )
        params = _params(source=source, format=format, training=str(training).lower())
        response = await self._http.post(
            "/api/imports", content=body, params=params,
            headers={"Content-Type": "application/x-ndjson"}, timeout=None,
        )  # fmt: skip
        return await _decode(response, ImportReceipt)

    # -- harness versions and optimizer runs ----------------------------------------------------

    async def harness_versions(
        self, *, after: str | None = None, limit: int = 100
    ) -> HarnessVersionPage:
        """Accepted harness versions, oldest first, with before/after figures and reward."""
        return await self._get(
            "/api/harness/versions", HarnessVersionPage, _params(after=after, limit=limit)
        )

    async def harness_version(self, version: str) -> HarnessVersionDetail:
        """One version: ``harness show``'s figures, its code hooks, its run and evidence."""
        return await self._get(f"/api/harness/versions/{_segment(version)}", HarnessVersionDetail)

    async def harness_diff(self, old: str, new: str) -> HarnessDiff:
        """A unified diff of two versions' code, as ``envharness harness diff`` prints it."""
        return await self._get("/api/harness/diff", HarnessDiff, _params(old=old, new=new))

    async def optimizer_runs(
        self, *, after: str | None = None, limit: int = 100
    ) -> OptimizerRunPage:
        return await self._get(
            "/api/optimizer/runs", OptimizerRunPage, _params(after=after, limit=limit)
        )

    async def optimizer_run(self, run_id: str) -> RunHistory:
        """A run read back from its chain: iterations, every candidate's verdict, versions."""
        return await self._get(f"/api/optimizer/runs/{_segment(run_id)}", RunHistory)

    async def _post(self, path: str, body: bytes, kind: type[_T]) -> _T:
        response = await self._http.post(
            path, content=body, headers={"Content-Type": "application/json"}, timeout=None
        )
        return await _decode(response, kind)

    async def _stream_lines(self, path: str) -> AsyncGenerator[bytes, None]:
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        async with self._http.stream("GET", path, timeout=timeout) as response:
            await _raise_for(response)
            async with aclosing(_lines(response)) as lines:
                async for line in lines:
                    if line:
                        yield line.encode()

    # -- tokens (admin) ------------------------------------------------------------------------

    async def tokens(self) -> list[TokenInfo]:
        return await self._get("/api/tokens", list[TokenInfo])

    async def issue_token(
        self,
        role: str,
        *,
        participant: str | None = None,
        sessions: Sequence[str] | None = None,
        label: str = "",
    ) -> NewToken:
        body = msgspec.json.encode(
            TokenRequest(
                role=role,  # type: ignore[arg-type]
                participant=participant,
                sessions=list(sessions) if sessions is not None else None,
                label=label,
            )
        )
        response = await self._http.post(
            "/api/tokens", content=body, headers={"Content-Type": "application/json"}
        )
        return await _decode(response, NewToken)

    async def revoke_token(self, token_id: str) -> TokenInfo:
        return await _decode(
            await self._http.delete(f"/api/tokens/{_segment(token_id)}"), TokenInfo
        )

    # -- plumbing ------------------------------------------------------------------------------

    async def _get(self, path: str, kind: type[_T], params: _Params | None = None) -> _T:
        return await _decode(await self._http.get(path, params=params), kind)


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
        self._stack = ExitStack()
        self._portal: BlockingPortal = self._stack.enter_context(start_blocking_portal())
        self.aio = AsyncClient(base_url, token, transport=transport, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._portal.call(self.aio.aclose)
        finally:
            self._stack.close()

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

    def verify(self) -> VerifyOut:
        return self._portal.call(self.aio.verify)

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


def _lines(response: httpx.Response) -> AsyncGenerator[str, None]:
    """httpx's line iterator, typed as the async generator it is, so it can be closed."""
    return cast(AsyncGenerator[str, None], response.aiter_lines())


def _segment(value: str, *, safe: str = "") -> str:
    """``value`` as the last part of a URL path, naming exactly it.

    Every character a URL gives a meaning to (``%``, ``?``, ``#``, ``/`` unless ``safe``) is
    percent-encoded, and so are the dots of a ``.`` or ``..`` part, which httpx would
    otherwise resolve: an id must never turn into another endpoint or a query string.
    """
    if not value:
        raise ValueError("an id in a URL must not be empty")
    parts = quote(value, safe=safe).split("/")
    return "/".join("%2E" * len(part) if part in {".", ".."} else part for part in parts)


def _dataset(name: str) -> str:
    """A dataset's name or id as a path segment. The server decodes the path before it routes,
    so a name holding ``/`` cannot be one: it is reached by its id (docs/api.md)."""
    if "/" in name:
        raise ValueError(
            f"dataset name {name!r} holds '/', which a URL cannot carry as one part; "
            "name it by its id (dst_…, from datasets())"
        )
    return _segment(name)


def _params(**values: str | int | None) -> _Params:
    return [(name, value) for name, value in values.items() if value is not None]


async def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    await response.aread()
    _raise_problem(response)


async def _decode(response: httpx.Response, kind: type[_T]) -> _T:
    if not response.is_success:
        _raise_problem(response)
    return msgspec.json.decode(response.content, type=kind)


def _raise_problem(response: httpx.Response) -> None:
    try:
        problem = _problem.decode(response.content)
    except msgspec.MsgspecError:
        raise ServiceError(response.status_code, _not_a_problem(response)) from None
    raise ServiceError(problem.status, problem.message, problem.parameter)


def _not_a_problem(response: httpx.Response) -> str:
    """The message of an error answer that is not the service's JSON ``Problem``: a viewer page,
    a redirect, or another server on that port. Says what came back instead of quoting it."""
    request = response.request
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no body"
    where = f"{request.method} {request.url.path}"
    if response.is_redirect:
        target = response.headers.get("location", "")
        return f"{where} answered {response.reason_phrase}, to {target!r}: not an API answer"
    if kind == "text/plain":
        return f"{where}: {response.text[:200]}"
    return (
        f"{where} answered {response.reason_phrase} ({kind}), not a JSON problem: is this "
        "the envharness service, and the path one of its API endpoints?"
    )
