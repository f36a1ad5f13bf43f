"""The async client: one method per API endpoint, decoded into the service's wire types."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Self, TypeVar

import anyio
import httpx
import msgspec

from envharness.client.wire import (
    RECONNECT_LIMIT,
    ExperimentEvent,
    Params,
    dataset_row,
    dataset_segment,
    decode,
    every,
    experiment_event_decoders,
    query_params,
    raise_for,
    record_line,
    response_lines,
    segment,
)
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
    TokenRequest,
    VerifyOut,
)
from envharness.service.wire.trajectories import (
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

_T = TypeVar("_T")


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
        params = query_params(
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
        return every(
            lambda after: self.sessions(
                status=status, experiment=experiment, scenario=scenario, after=after, limit=500
            ),
            lambda page: page.sessions,
        )

    async def experiments(
        self, *, status: str | None = None, after: str | None = None, limit: int = 100
    ) -> ExperimentPage:
        params = query_params(status=status, after=after, limit=limit)
        return await self._get("/api/experiments", ExperimentPage, params)

    def iter_experiments(
        self, *, status: str | None = None
    ) -> AsyncGenerator[ExperimentSummary, None]:
        """Every matching experiment, fetching pages as it goes."""
        return every(
            lambda after: self.experiments(status=status, after=after, limit=500),
            lambda page: page.experiments,
        )

    async def experiment(self, experiment_id: str) -> ExperimentDetail:
        return await self._get(f"/api/experiments/{segment(experiment_id)}", ExperimentDetail)

    async def experiment_events(
        self, experiment_id: str, *, after: int = -1, reconnect: bool = True
    ) -> AsyncGenerator[ExperimentEvent, None]:
        """The experiment's sessions as they start and change status, and its own status
        changes, until it ends; resumed after a dropped connection like :meth:`events`.
        ``after`` is an event id (a store position), -1 for everything."""
        url = f"/api/experiments/{segment(experiment_id)}/events"
        async with aclosing(self._follow(url, after, reconnect)) as stream:
            async for event, data in stream:
                decoder = experiment_event_decoders.get(event)
                if decoder is not None:
                    yield decoder.decode(data)

    async def session(self, session_id: str) -> SessionDetail:
        return await self._get(f"/api/sessions/{segment(session_id)}", SessionDetail)

    async def lineage(self, session_id: str) -> LineageOut:
        """Where the session was branched from (parent, checkpoint, intervention), and the
        branches made from it."""
        return await self._get(f"/api/sessions/{segment(session_id)}/lineage", LineageOut)

    async def compare(self, left: str, right: str) -> ComparisonOut:
        """Two sessions aligned by turn and participant: what differs, and their scores."""
        return await self._get("/api/compare", ComparisonOut, query_params(left=left, right=right))

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
        params = query_params(after=after, limit=limit, participant=participant, turn=turn)
        params += [("kind", kind) for kind in kinds]
        return await self._get(f"/api/sessions/{segment(session_id)}/records", RecordPage, params)

    def iter_records(
        self,
        session_id: str,
        *,
        kinds: Sequence[str] = (),
        participant: str | None = None,
        turn: int | None = None,
    ) -> AsyncGenerator[RecordOut, None]:
        """Every matching record of the session, in order, fetching pages as it goes."""
        return every(
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
            "GET", f"/api/sessions/{segment(session_id)}/export"
        ) as response:
            await raise_for(response)
            async with aclosing(response_lines(response)) as lines:
                async for line in lines:
                    if line:
                        yield line.encode()

    async def events(
        self, session_id: str, *, after: int = -1, reconnect: bool = True
    ) -> AsyncGenerator[RecordOut, None]:
        """Records as they commit, until the session ends. A dropped connection is resumed
        from the last record received (``Last-Event-ID``): nothing is missed or repeated."""
        url = f"/api/sessions/{segment(session_id)}/events"
        async with aclosing(self._follow(url, after, reconnect)) as stream:
            async for event, data in stream:
                if event == "record":
                    yield record_line.decode(data)

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
            await raise_for(response)
            event, data, event_id = "message", list[str](), None
            async with aclosing(response_lines(response)) as lines:
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

    async def verify(self, *, full: bool = False) -> VerifyOut:
        """Re-check the whole store: as long as that takes (no read timeout). ``full`` also
        checks every index against its table (SQLite's ``integrity_check``)."""
        params = {"full": "true"} if full else None
        return await decode(
            await self._http.get("/api/verify", params=params, timeout=None), VerifyOut
        )

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
        params = query_params(
            origin=origin, execution=execution, collection=collection, termination=termination,
            outcome=outcome, experiment=experiment, source=source, after=after, limit=limit,
        )  # fmt: skip
        return await self._get("/api/trajectories", TrajectoryPage, params)

    def iter_trajectories(self, **filters: str | None) -> AsyncGenerator[TrajectorySummary, None]:
        """Every matching trajectory, fetching pages as it goes."""
        return every(
            lambda after: self.trajectories(**filters, after=after, limit=500),
            lambda page: page.trajectories,
        )

    async def trajectory(self, trajectory_id: str, *, check: bool = True) -> TrajectoryDetail:
        """One trajectory (``ses_…`` or ``SOURCE:EPISODE``), with its digest check unless
        ``check`` is false; as long as the check takes (no read timeout)."""
        path = f"/api/trajectories/{segment(trajectory_id, safe=':/')}"
        params = query_params(check=str(check).lower())
        response = await self._http.get(path, params=params, timeout=None)
        return await decode(response, TrajectoryDetail)

    async def snapshots(self, *, after: str | None = None, limit: int = 100) -> SnapshotPage:
        return await self._get(
            "/api/snapshots", SnapshotPage, query_params(after=after, limit=limit)
        )

    async def snapshot(
        self, snapshot_id: str, *, check: bool = False, after: int = -1, limit: int = 100
    ) -> SnapshotDetail:
        """A snapshot and a page of its trajectories; ``check`` verifies it first."""
        params = query_params(check=str(check).lower(), after=after, limit=limit)
        response = await self._http.get(
            f"/api/snapshots/{segment(snapshot_id)}", params=params, timeout=None
        )
        return await decode(response, SnapshotDetail)

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
        path = f"/api/snapshots/{segment(snapshot_id)}/export"
        async with aclosing(self._stream_lines(path)) as lines:
            async for line in lines:
                yield line

    async def datasets(self, *, after: str | None = None, limit: int = 100) -> DatasetPage:
        return await self._get("/api/datasets", DatasetPage, query_params(after=after, limit=limit))

    async def dataset(self, name: str) -> DatasetDetail:
        return await self._get(f"/api/datasets/{dataset_segment(name)}", DatasetDetail)

    async def create_dataset(
        self,
        name: str,
        snapshots: Sequence[str],
        *,
        reward: str | None = None,
        participants: Sequence[str] | None = None,
        shared_reward: bool = False,
    ) -> Dataset:
        """A dataset of these snapshots (admin); refused (422) naming every trajectory that
        is not complete, terminal, training-entitled and rewarded."""
        request = DatasetRequest(
            name=name,
            snapshots=list(snapshots),
            reward=reward,
            participants=list(participants) if participants is not None else None,
            shared_reward=shared_reward,
        )
        return await self._post("/api/datasets", msgspec.json.encode(request), Dataset)

    async def export_dataset(self, name: str) -> AsyncGenerator[DatasetRow, None]:
        """The dataset's rows (TRL's conversational format), as the service streams them."""
        path = f"/api/datasets/{dataset_segment(name)}/export"
        async with aclosing(self._stream_lines(path)) as lines:
            async for line in lines:
                yield dataset_row.decode(line)

    async def sources(self, source: str | None = None) -> SourcePage:
        """Each imported source's health (or one source's)."""
        return await self._get("/api/sources", SourcePage, query_params(source=source))

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
        params = query_params(source=source, format=format, training=str(training).lower())
        response = await self._http.post(
            "/api/imports", content=body, params=params,
            headers={"Content-Type": "application/x-ndjson"}, timeout=None,
        )  # fmt: skip
        return await decode(response, ImportReceipt)

    # -- harness versions and optimizer runs ----------------------------------------------------

    async def harness_versions(
        self, *, after: str | None = None, limit: int = 100
    ) -> HarnessVersionPage:
        """Accepted harness versions, oldest first, with before/after figures and reward."""
        return await self._get(
            "/api/harness/versions", HarnessVersionPage, query_params(after=after, limit=limit)
        )

    async def harness_version(self, version: str) -> HarnessVersionDetail:
        """One version: ``harness show``'s figures, its code hooks, its run and evidence."""
        return await self._get(f"/api/harness/versions/{segment(version)}", HarnessVersionDetail)

    async def harness_diff(self, old: str, new: str) -> HarnessDiff:
        """A unified diff of two versions' code, as ``envharness harness diff`` prints it."""
        return await self._get("/api/harness/diff", HarnessDiff, query_params(old=old, new=new))

    async def optimizer_runs(
        self, *, after: str | None = None, limit: int = 100
    ) -> OptimizerRunPage:
        return await self._get(
            "/api/optimizer/runs", OptimizerRunPage, query_params(after=after, limit=limit)
        )

    async def optimizer_run(self, run_id: str) -> RunHistory:
        """A run read back from its chain: iterations, every candidate's verdict, versions."""
        return await self._get(f"/api/optimizer/runs/{segment(run_id)}", RunHistory)

    async def _post(self, path: str, body: bytes, kind: type[_T]) -> _T:
        response = await self._http.post(
            path, content=body, headers={"Content-Type": "application/json"}, timeout=None
        )
        return await decode(response, kind)

    async def _stream_lines(self, path: str) -> AsyncGenerator[bytes, None]:
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        async with self._http.stream("GET", path, timeout=timeout) as response:
            await raise_for(response)
            async with aclosing(response_lines(response)) as lines:
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
        return await decode(response, NewToken)

    async def revoke_token(self, token_id: str) -> TokenInfo:
        return await decode(await self._http.delete(f"/api/tokens/{segment(token_id)}"), TokenInfo)

    # -- plumbing ------------------------------------------------------------------------------

    async def _get(self, path: str, kind: type[_T], params: Params | None = None) -> _T:
        return await decode(await self._http.get(path, params=params), kind)
