"""Trajectories the service has projected, kept while the evidence they fold is unchanged.

A trajectory is a pure function of its records (``envharness.trajectories.project``, the
function ``envharness trajectories`` calls), and records are never rewritten. So a projection
can be reused for as long as its chain has the same head: the key is the session's record
count and status as the session index reports them (an imported episode's last position and
hash). A session that grows gets a new key and is projected again; a tampered store is not
hidden by this, since the digest check reads the stored evidence afresh against the binding of
the projection it is given.

Without it every listing of trajectories would fold every record of every session on each
request (a 10,000-turn session is ~70,000 records, a third of a second); with it a listing
projects each finished session once per server. The cache holds at most :data:`CAPACITY`
trajectories (a few KB each), dropping the least recently used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

from envharness.store import SessionInfo
from envharness.store.locate import AnyStore
from envharness.store.sources import EpisodeInfo, SourcesAt
from envharness.trajectories import Trajectory, project
from envharness.trajectories.sources.projection import project_info

__all__ = ["CAPACITY", "Projections"]

CAPACITY = 4096
"""Trajectories kept; the least recently used goes first."""


class Projections:
    """A bounded cache of projected trajectories, keyed by the head of their evidence."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[Hashable, Trajectory] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    async def native(self, store: AnyStore, info: SessionInfo) -> Trajectory:
        """The trajectory of the session ``info`` describes, up to its head."""
        key = ("native", info.id, info.records, info.status, info.updated_at)
        return await self._get(key, lambda: project(store, info.id))

    async def imported(self, sources: SourcesAt, episode: EpisodeInfo) -> Trajectory:
        """The trajectory of one imported episode, up to its last stored record."""
        key = ("imported", episode.source, episode.episode, episode.last_position,
               episode.head_hash, episode.records, episode.training)  # fmt: skip
        return await self._get(key, lambda: project_info(sources, episode))

    async def _get(
        self, key: Hashable, projected: Callable[[], Awaitable[Trajectory]]
    ) -> Trajectory:
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
            return found
        trajectory = await projected()
        self._kept[key] = trajectory
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)
        return trajectory
