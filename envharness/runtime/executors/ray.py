"""Sessions on a Ray cluster: each worker is an async Ray actor (issue 14, item 2).

The driver's logic (dispatch, commits and acknowledgements, retries) is the same as for the
process pool (:class:`~envharness.runtime.executors.driver.RemoteExecutor`); only the carrier of
the frames changes (:mod:`.ray_channel`). Each worker is an actor of one CPU that runs
:func:`~envharness.runtime.executors.worker.serve` on Ray's asyncio loop, many sessions at once;
:mod:`.ray_cluster` joins the cluster.

Ray binds beyond loopback whatever it is asked; token authentication (Ray's default, which
envharness never turns off) and a firewall are what protect a cluster (``docs/ray.md``).
"""

from __future__ import annotations

import importlib.util
import secrets
from contextlib import AsyncExitStack
from functools import cache
from itertools import count
from typing import TYPE_CHECKING, Any, final

import anyio

from envharness.errors import ConfigurationError
from envharness.runtime.executors.counts import is_count
from envharness.runtime.executors.driver import KeptWorkers, RemoteExecutor
from envharness.runtime.executors.ray_channel import RayChannel, Serve, WorkerActor, first_line
from envharness.runtime.executors.ray_cluster import (
    ACTOR_CPUS,
    RAY_INSTALL,
    connected,
    import_ray,
    parse_address,
)

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = ["ACTOR_PREFIX", "RayExecutor", "RaySpawner"]

ACTOR_PREFIX = "envharness-worker"
"""Worker actors are named ``envharness-worker-<token>-<number>`` (``ray.util.list_named_actors``
shows them)."""


@final
class RayExecutor(KeptWorkers):
    """Runs sessions on Ray: ``workers`` async actors of one CPU each, many sessions per actor;
    the evidence is committed by this process's store, as with every executor.

    ``address`` None uses the Ray this process is already connected to, else the cluster named
    by ``RAY_ADDRESS``, else starts a local one for each experiment (``workers`` CPUs, no
    dashboard) and stops it after; ``"local"`` is the same without looking at ``RAY_ADDRESS``;
    ``"auto"`` joins the cluster running on this machine (``ray start --head``);
    ``"host:port"`` joins the cluster whose head (GCS) listens there.

    Opened with ``async with``, it joins (or starts) the cluster once and keeps its actors for
    one experiment after another, as the optimizer's reruns want.
    """

    def __init__(self, address: str | None = None, workers: int = 2) -> None:
        if not is_count(workers):
            raise ConfigurationError(
                f"workers must be a positive integer (Ray actors to run sessions in, one CPU "
                f"each), not {workers!r}"
            )
        if address is not None:
            parse_address(address)  # refuse a malformed one before anything runs
        if importlib.util.find_spec("ray") is None:
            raise ConfigurationError(
                f"the Ray executor needs Ray, which is not installed: {RAY_INSTALL}"
            )
        self.address = address
        self.workers = workers
        self._remote = RemoteExecutor(RaySpawner, workers, "Ray")

    async def _hold_for_workers(self, stack: AsyncExitStack) -> None:
        await stack.enter_async_context(connected(self.address, self.workers))

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers})"


@final
class RaySpawner:
    """Starts worker actors on the Ray cluster this process is connected to; each runs
    ``serve`` (the worker side of the protocol) on its end of a :class:`RayChannel`."""

    def __init__(self, serve: Serve | None = None) -> None:
        if serve is None:
            from envharness.runtime.executors.worker import serve as serve_driver

            serve = serve_driver
        self._serve = serve
        self._token = secrets.token_hex(4)
        self._numbers = count()
        """Names the actors: a kept spawner starts workers for many experiments, whose indexes
        repeat, and Ray's names must not."""
        self._actors: list[ActorHandle[Any]] = []

    @property
    def kind(self) -> str:
        return "Ray"

    async def start(self, index: int) -> RayChannel:
        name = f"{ACTOR_PREFIX}-{self._token}-{next(self._numbers)}"
        actor, (host, pid) = await anyio.to_thread.run_sync(self._start, name)
        return RayChannel(actor, f"Ray worker {index} ({name}, pid {pid} on {host})", host, pid)

    def _start(self, name: str) -> tuple[ActorHandle[Any], tuple[str, int]]:
        ray = import_ray()
        actor = _actor_class().options(name=name).remote(self._serve)
        self._actors.append(actor)
        try:
            where: tuple[str, int] = ray.get(actor.whereabouts.remote())
            actor.run.remote()  # ends once ``serve`` returns; the pulls report how it ended
        except ray.exceptions.RayError as exc:
            raise anyio.BrokenResourceError(f"{name} did not start: {first_line(exc)}") from exc
        return actor, where

    async def aclose(self) -> None:
        actors, self._actors = self._actors, []
        if actors:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_kill, actors)


def _kill(actors: list[ActorHandle[Any]]) -> None:
    ray = import_ray()
    for actor in actors:
        ray.kill(actor, no_restart=True)


@cache
def _actor_class() -> Any:
    """The Ray actor class, made once (Ray is imported only when it is used)."""
    ray = import_ray()
    return ray.remote(num_cpus=ACTOR_CPUS, max_restarts=0, max_task_retries=0)(WorkerActor)
