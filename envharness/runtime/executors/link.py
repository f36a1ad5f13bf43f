"""The driver's end of one worker: it reads the worker's frames, hands each batch to the store's
journal and acknowledges it once committed, in order, and follows the worker's sessions
(:class:`Remote`). A worker that dies ends its sessions as lost; :mod:`.driver` retries them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.errors import ConfigurationError, StoreError
from envharness.records import Cost, RecordRow, RunnerRef, Status, decode_payload
from envharness.runtime.executors.channel import Channel, LazySends, WorkerSpawner
from envharness.runtime.executors.frames import (
    Ack,
    Acks,
    Artifact,
    Batch,
    Close,
    Closed,
    Ended,
    Named,
    News,
    Open,
    Ready,
    Refused,
    Stored,
    Turns,
    decode_worker_frame,
    encode,
)
from envharness.runtime.executors.queueing import send_promptly
from envharness.runtime.executors.retries import WorkerError
from envharness.runtime.executors.seam import ExperimentWork
from envharness.runtime.plan import EpisodeEnd, ProgressCallback, SessionResult
from envharness.store.journal import Pending
from envharness.store.locate import AnyStore

__all__ = ["ACKS_BUFFER", "Link", "Remote"]

ACKS_BUFFER = 64
"""Batches of one worker that may wait for their commit before its link stops reading."""
_SUPERSEDED = "refused: this attempt of the session was given up on (its worker was lost)"


@dataclass(slots=True, eq=False)
class Remote:
    """One session in a worker, as the driver follows it."""

    key: int
    free: Callable[[], None]
    named: Callable[[str], None]
    ended: anyio.Event = field(default_factory=anyio.Event)
    end: Ended | None = None
    lost: str | None = None
    session_id: str | None = None
    last: Pending | None = None
    """The last batch of it handed to the journal."""
    lost_runner: RunnerRef | None = None
    """The worker it was lost with, as the worker said it was when it started."""
    started: bool = False
    """Whether a batch of it is committed: the session exists, so its progress is told."""
    untold: list[Turns] = field(default_factory=list)
    """Its progress that came before that commit (the worker does not wait for it)."""

    def told(self, progress: ProgressCallback) -> None:
        """Its first batch is committed: tell the progress held back until then."""
        self.started = True
        untold, self.untold = self.untold, []
        for turns in untold:
            progress(turns.session_id, turns.turns, turns.planned)

    async def committed(self) -> None:
        """Wait until everything of it that reached the driver is committed."""
        if self.last is not None:
            await self.last.committed()

    def result(self, session_id: str | None) -> SessionResult:
        end = self.end
        if end is None:
            raise WorkerError(self.lost or "the worker ended without reporting the session")
        if end.crash is not None:
            if end.store_error:
                raise StoreError(end.crash)
            if end.configuration:
                raise ConfigurationError(end.crash)
            raise WorkerError(f"session {session_id or '?'} raised in its worker: {end.crash}")
        assert end.status is not None
        return SessionResult(
            id=session_id or "",
            status=cast(Status, end.status),
            turns_completed=end.turns_completed,
            reason=end.reason,
            error=end.error,
            ended_by=cast(EpisodeEnd | None, end.ended_by),
        )


_Committing = tuple[int, Pending, Remote]
"""A batch handed to the journal: its number in the worker, its commit, its session."""


class Link:
    """The driver's end of one worker: reads its frames, commits its batches in order."""

    def __init__(
        self,
        index: int,
        spawner: WorkerSpawner,
        work: ExperimentWork,
        reused: Channel | None = None,
        keep: Callable[[Channel], None] | None = None,
    ) -> None:
        self.index = index
        self._spawner = spawner
        self._work = work
        self._store: AnyStore = work.store
        self._reused = reused
        """A worker an open executor kept from an earlier experiment (replaced by a fresh one
        if it broke meanwhile)."""
        self._keep = keep
        """Where a worker that closed the experiment cleanly goes, when its executor keeps it
        for the next one (else its channel is closed and it exits)."""
        self._finished = False
        self.channel: Channel | None = None
        self.runner: RunnerRef | None = None
        """The worker's process, as it said when it took the experiment."""
        self.sessions: dict[int, Remote] = {}
        self.gone = anyio.Event()
        self.lost: str | None = None
        """Why the worker is gone, when it died."""
        self._closing = False
        self._lazy: LazySends | None = None
        """The channel, when it lets frames ride on its next call (found once it is open)."""
        self.reading = anyio.CancelScope(shield=True)
        """Shielded: a stopped experiment's sessions record ``stopped`` through this link, so
        it keeps reading until the worker closes its end (cancelled only when it does not)."""

    @property
    def name(self) -> str:
        return f"{self._spawner.kind} worker {self.index}"

    async def send(self, frame: Any) -> None:
        """Send to the worker; a dead worker's sessions are already ended as lost."""
        if self.channel is None or self.lost is not None:
            return
        try:
            await self.channel.send(encode(frame))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._lose(f"{self.name} cannot be reached: {exc}")

    async def send_soon(self, frame: Any) -> None:
        """Send what no session needs this instant (an acknowledgement, a session for a worker
        busy with others): a carrier that pays a call per send lets it ride on the next call
        (:class:`~.channel.LazySends`)."""
        lazy = self._lazy
        if lazy is None or self.lost is not None:
            await self.send(frame)
            return
        try:
            await lazy.send_soon(encode(frame))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._lose(f"{self.name} cannot be reached: {exc}")

    async def serve(self, opening: Open, *, task_status: TaskStatus[None]) -> None:
        try:
            await self._serve(opening, task_status)
        finally:
            self.gone.set()
            if self.channel is not None:
                if self._finished and self.lost is None and self._keep is not None:
                    self._keep(self.channel)
                else:
                    with anyio.CancelScope(shield=True):
                        await self.channel.aclose()

    async def _open(self, opening: Open) -> Any:
        """The worker's answer to the experiment's recipe: a kept worker's if it still answers,
        else a fresh one's."""
        if (reused := self._reused) is not None:
            self._reused = None
            try:
                await reused.send(encode(opening))
                return decode_worker_frame(await reused.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                self.channel = None
                with anyio.CancelScope(shield=True):
                    await reused.aclose()  # it broke while it waited: start another
        try:
            channel = self.channel = await self._spawner.start(self.index)
            await channel.send(encode(opening))
            return decode_worker_frame(await channel.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
            raise WorkerError(
                f"{self.name} did not start: {exc or type(exc).__name__}; check that "
                "envharness imports in a fresh Python with the same environment"
            ) from exc

    async def _serve(self, opening: Open, task_status: TaskStatus[None]) -> None:
        self.channel = self._reused
        first = await self._open(opening)
        channel = self.channel
        assert channel is not None
        self._lazy = channel if isinstance(channel, LazySends) else None
        if isinstance(first, Refused):
            raise WorkerError(f"{self.name} refused the experiment: {first.message}")
        if not isinstance(first, Ready):
            raise WorkerError(f"{self.name} answered {type(first).__name__} instead of ready")
        self.runner = first.runner
        task_status.started()
        committing, committed = anyio.create_memory_object_stream[_Committing](ACKS_BUFFER)
        with self.reading:
            async with anyio.create_task_group() as group:
                group.start_soon(self._acknowledge, committed)
                async with committing:
                    await self._read(channel, group, committing)

    async def _read(
        self,
        channel: Channel,
        group: TaskGroup,
        committing: MemoryObjectSendStream[_Committing],
    ) -> None:
        work = self._work
        while True:
            try:
                frame = decode_worker_frame(await channel.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                if not self._closing or self.sessions:
                    why = str(exc) or "its channel closed"
                    self._lose(f"{self.name} died: {why}")
                return
            if isinstance(frame, Batch):
                remote = self.sessions.get(frame.key)
                if remote is None:  # an attempt given up on: fenced off, never committed
                    await self.send(Ack(frame.batch, _SUPERSEDED))
                    continue
                pending = remote.last = await self._store.submit(frame.rows, frame.blobs)
                # no pass of the loop per batch: the next ones join the same commit
                await send_promptly(committing, (frame.batch, pending, remote))
                if work.budget is not None:
                    _count_costs(work, frame.rows)
            elif isinstance(frame, Named):
                if (remote := self.sessions.get(frame.key)) is not None:
                    remote.session_id = frame.session_id
                    remote.named(frame.session_id)
            elif isinstance(frame, News):
                self._heard(frame)
            elif isinstance(frame, Ended):
                if (remote := self.sessions.get(frame.key)) is not None:
                    remote.end = frame
                    remote.ended.set()
            elif isinstance(frame, Artifact):
                group.start_soon(self._keep_artifact, frame)
            elif isinstance(frame, Closed):
                self._finished = True
                if self.sessions:
                    self._lose(f"{self.name} closed the experiment with sessions in it")
                return

    def _heard(self, news: News) -> None:
        """A worker's news: sessions that only wait for their last commit (their slots are
        freed), and progress, told once the session's start is committed — the worker hands
        its start over without waiting for that, so a caller told a session's id can always
        find the session in the store."""
        for key in news.settled:
            if (remote := self.sessions.get(key)) is not None:
                remote.free()
        progress = self._work.progress
        if progress is None:
            return
        for turns in news.progress:
            remote = self.sessions.get(turns.key)
            if remote is None:  # an attempt given up on
                continue
            if remote.started:
                progress(turns.session_id, turns.turns, turns.planned)
            else:
                remote.untold.append(turns)

    async def _acknowledge(self, committed: MemoryObjectReceiveStream[_Committing]) -> None:
        """Acknowledge each batch once committed, in the order they came (the journal's): the
        first one waited for, with every later one whose commit is done by then (one group
        commit holds many) in the same frame."""
        async with committed:
            async for batch, pending, remote in committed:
                done = [(batch, remote)]
                error = await _failure(pending)
                while error is None:
                    try:
                        batch, pending, remote = committed.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):  # none yet, or no more
                        break
                    if not pending.done:
                        await self._acknowledged(done)
                        done = []
                    error = await _failure(pending)
                    done.append((batch, remote))
                if error is not None:
                    failed, _ = done.pop()
                    if done:
                        await self._acknowledged(done)
                    await self.send_soon(Ack(failed, error))
                else:
                    await self._acknowledged(done)

    async def _acknowledged(self, done: list[tuple[int, Remote]]) -> None:
        """Acknowledge committed batches, after telling the progress held back until now of a
        session whose first batch is among them: once acknowledged, the session may end, and
        its progress must not come after its result (a lazy send may wait a while)."""
        if (progress := self._work.progress) is not None:
            for _, remote in done:
                if not remote.started:
                    remote.told(progress)
        await self.send_soon(_acks([batch for batch, _ in done]))

    async def _keep_artifact(self, frame: Artifact) -> None:
        try:
            sha256 = await self._store.put_artifact(frame.data)
        except (StoreError, OSError) as exc:
            await self.send(Stored(frame.request, error=f"{type(exc).__name__}: {exc}"))
        else:
            await self.send(Stored(frame.request, sha256=sha256))

    def _lose(self, why: str) -> None:
        if self.lost is not None:
            return
        self.lost = why
        for remote in self.sessions.values():
            remote.lost = why
            remote.lost_runner = self.runner
            remote.ended.set()

    async def close(self) -> None:
        self._closing = True
        await self.send(Close())


async def _failure(pending: Pending) -> str | None:
    """Why a batch was not committed, once its commit is over (``None``: it was)."""
    try:
        await pending.committed()
    except StoreError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _acks(batches: list[int]) -> Ack | Acks:
    return Ack(batches[0]) if len(batches) == 1 else Acks(batches)


def _count_costs(work: ExperimentWork, rows: Sequence[RecordRow]) -> None:
    """The experiment's budget counts every worker's costs, as the driver sees them pass."""
    assert work.budget is not None
    for row in rows:
        if row.kind == "cost":
            payload = decode_payload(row.payload)
            if isinstance(payload, Cost):
                work.budget.add(payload)
