"""What the API hands back about one session: how it ended, or a run ready to start.

:class:`Session` is a finished (or ended) run. :class:`PreparedSession` is a standalone run
whose arguments are checked and whose id is fixed, not yet started: ``harness.run`` awaits one
at once, and the blocking ``harness.start`` runs one in the background.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import anyio

from envharness._portal import call_blocking
from envharness.api.remote_control import RemoteControl
from envharness.errors import ConfigurationError
from envharness.records import ErrorInfo, Status
from envharness.runtime import ProgressCallback, SessionPlan, SessionResult
from envharness.runtime.plan import EpisodeEnd
from envharness.runtime.template import SessionPauses, SessionTemplate
from envharness.store.locate import AnyStore, reading_store
from envharness.trajectories import Entitlement, Snapshot, Trajectory, freeze, project

__all__ = ["PreparedSession", "Session", "ended_session", "snapshot", "trajectory"]

OpenStore = Callable[[], AbstractAsyncContextManager[AnyStore]]
"""Opens the store a harness writes to (its open one, or one for the block)."""


@dataclass(frozen=True, slots=True)
class Session:
    """A finished (or ended) session run: its id, how it ended, and why."""

    id: str
    status: Status
    turns_completed: int
    store: Path | str
    """The store it is in: a SQLite store's directory, or a PostgreSQL URL without its
    password."""
    reason: str | None = None
    error: ErrorInfo | None = field(default=None, repr=False)
    ended_by: EpisodeEnd | None = None
    """For a completed session: ``done``, ``truncated`` (the environment cut the episode
    short) or ``turn_limit`` (its ``turns`` ran out)."""

    @property
    def truncated(self) -> bool:
        """Cut short rather than over (RL's ``truncated`` as against ``terminated``)."""
        return self.ended_by in ("truncated", "turn_limit")

    @classmethod
    def of(cls, result: SessionResult, store: Path | str) -> Session:
        return cls(
            result.id,
            result.status,
            result.turns_completed,
            store,
            result.reason,
            result.error,
            result.ended_by,
        )

    def trajectory(self) -> Trajectory:
        """The session's trajectory now: a digest-bound projection of its journal (blocking;
        in async code, ``await harness.trajectory(session.id)``)."""
        return call_blocking(lambda: trajectory(self.store, self.id))

    def snapshot(
        self, *, label: str = "", entitlement: Entitlement | str | None = None
    ) -> Snapshot:
        """Freeze this session's trajectory as a content-addressed snapshot (blocking; in
        async code, ``await harness.snapshot([session.id])``)."""
        return call_blocking(
            lambda: snapshot(self.store, [self.id], label=label, entitlement=entitlement)
        )


class PreparedSession:
    """A standalone session, checked and named, that runs when :meth:`run` is awaited."""

    __slots__ = (
        "_open_store",
        "_pauses",
        "_plan",
        "_progress",
        "_remote",
        "_store_path",
        "_template",
    )

    def __init__(
        self,
        plan: SessionPlan,
        template: SessionTemplate,
        open_store: OpenStore,
        store_path: Path | str,
        pauses: SessionPauses,
        progress: ProgressCallback | None,
        remote: RemoteControl | None = None,
    ) -> None:
        self._remote = remote
        """Where ``envharness stop`` / ``pause`` from another process reach it."""
        self._plan = plan
        self._template = template
        self._open_store = open_store
        self._store_path = store_path
        self._pauses = pauses
        self._progress = progress

    @property
    def id(self) -> str:
        return self._plan.session_id

    def pause(self) -> None:
        """Pause at the next turn boundary (callable from any thread, before or while it
        runs: it only sets a flag)."""
        if self._plan.pause is not None:
            self._plan.pause.request()

    async def run(self) -> Session:
        """Run the session to its end; how it ended (failures end it ``failed``, and a stop
        from ``envharness stop`` ``stopped``)."""
        remote = self._remote or RemoteControl(self._store_path)
        stop = anyio.CancelScope()
        async with (
            self._open_store() as store,
            self._pauses.holding(self.id, self._plan.pause) as pause,
            remote.reachable(self.id, pause=pause, stop=stop.cancel),
        ):
            plan = dataclasses.replace(self._plan, pause=pause)
            with stop:
                return Session.of(
                    await self._template.runner(store, plan, self._progress).run(),
                    self._store_path,
                )
            return await ended_session(store, self.id, self._store_path)


async def ended_session(store: AnyStore, session_id: str, path: Path | str) -> Session:
    """How a session that was stopped (its run cancelled) ended, as its index records it."""
    info = await store.session(session_id)
    return Session(info.id, cast(Status, info.status), info.turns_completed, path, info.reason)


async def trajectory(location: Path | str, trajectory_id: str) -> Trajectory:
    """The trajectory of a session (or imported episode) in the store at ``location``: a
    SQLite store's directory, or a PostgreSQL URL (a session's, without its password, reaches
    the database when libpq finds the password in ``~/.pgpass`` or ``PGPASSWORD``)."""
    async with reading_store(location) as store:
        return await project(store, trajectory_id)


async def snapshot(
    location: Path | str,
    session_ids: Sequence[str],
    *,
    label: str,
    entitlement: Entitlement | str | None,
) -> Snapshot:
    """Freeze these sessions' trajectories in the store at ``location`` as one snapshot."""
    if isinstance(session_ids, str):
        raise ConfigurationError(
            f"session_ids must be a list of session ids, e.g. [{session_ids!r}]"
        )
    if isinstance(entitlement, str):
        entitlement = Entitlement(basis=entitlement)
    async with reading_store(location) as store:
        return await freeze(store, session_ids, label=label, entitlement=entitlement)
