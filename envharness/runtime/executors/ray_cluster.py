"""This process joined to a Ray cluster for an experiment, or a local cluster of its own.

Ray's connection belongs to the whole process, and several experiments may run in one at once
(the optimizer's reruns do), so a connection once made stays open; a local cluster lives only as
long as the thread that started it, so it is held by one. Ray is imported lazily, in a worker
thread: without the ``ray`` extra the rest of envharness works, and asking for Ray says how to
install it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from envharness.errors import ConfigurationError, collapsing

__all__ = [
    "ACTOR_CPUS",
    "PROBE_SECONDS",
    "RAY_INSTALL",
    "chosen_address",
    "connected",
    "import_ray",
    "parse_address",
]

RAY_INSTALL = "pip install 'envharness[ray]'"
ACTOR_CPUS = 1
"""Each worker actor reserves one CPU of the cluster: it runs one event loop, and the turn
loops of its sessions share that core."""
PROBE_SECONDS = 5.0
"""How long an explicit ``host:port`` may take to accept a TCP connection before it is called
unreachable (Ray itself would retry for minutes)."""


def parse_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` for an explicit address, None for ``"auto"`` and ``"local"``; refuses
    the rest."""
    if address in ("auto", "local"):
        return None
    fix = (
        "give 'auto' (the cluster running on this machine), the head's GCS address HOST:PORT "
        "(port 6379 unless `ray start --head --port` said otherwise), or 'local' (or no "
        "address) to start a local cluster"
    )
    if not isinstance(address, str) or not address:
        raise ConfigurationError(f"the Ray address must be a non-empty string: {fix}")
    if "://" in address:
        raise ConfigurationError(
            f"the Ray address {address!r} is a URL; Ray Client (ray://) is not supported: {fix}"
        )
    host, _, port = address.rpartition(":")
    host = host.strip("[]")  # an IPv6 address in brackets
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"the Ray address {address!r} is not HOST:PORT: {fix}")
    return host, int(port)


@asynccontextmanager
async def connected(address: str | None, workers: int) -> AsyncIterator[None]:
    """This process connected to a Ray cluster for the block.

    Ray's connection belongs to the whole process, and experiments may run at once in one (the
    optimizer's reruns do): a connection to a running cluster, once made, stays open for the
    next experiments until the process exits (Ray closes it then). A local cluster, whose
    processes live only as long as the thread that started them, is the block's own: started
    and stopped with it, and refused to a second experiment while it runs.
    """
    ray = await anyio.to_thread.run_sync(import_ray)
    address = chosen_address(address, ray.is_initialized())
    target = parse_address(address)
    if target is not None:
        await _probe(address, *target)
    if _LocalCluster.running:
        raise ConfigurationError(
            "the local Ray cluster this process started for another experiment is still "
            "running, and stops when that experiment ends: to run experiments at once, start "
            "a cluster of their own (`ray start --head`) and give 'auto'"
        )
    if address == "local" and not ray.is_initialized():
        async with _local_cluster(workers):
            yield
        return
    await anyio.to_thread.run_sync(_connect, address)
    await anyio.to_thread.run_sync(_enough_cpus, workers)
    yield


def chosen_address(address: str | None, connected: bool) -> str:
    """The address to join when ``address`` is None: this process's own connection if it has
    one (``"local"`` stands for it), else ``RAY_ADDRESS``, else a new local cluster."""
    if address is not None:
        return address
    if connected:
        return "local"
    address = os.environ.get("RAY_ADDRESS") or "local"
    try:
        parse_address(address)
    except ConfigurationError as exc:
        raise ConfigurationError(f"RAY_ADDRESS: {exc}") from None
    return address


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigurationError(
            f"the Ray executor needs Ray, which is not installed: {RAY_INSTALL}"
        ) from exc
    return ray


def _not_answering(address: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"no Ray cluster answers at {address} ({why}); start one on the head machine with "
        "`ray start --head` and give its address, or give no address (or 'local') to start a "
        "local cluster for the experiment"
    )


async def _probe(address: str, host: str, port: int) -> None:
    """Refuse an address nothing listens on at once: Ray would retry it for minutes."""
    try:
        with anyio.fail_after(PROBE_SECONDS):
            stream = await anyio.connect_tcp(host, port)
    except TimeoutError:
        raise _not_answering(address, f"no answer within {PROBE_SECONDS:g} s") from None
    except OSError as exc:  # anyio's says every attempt failed; its cause says why
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        why = os.strerror(cause.errno) if cause.errno else str(cause) or type(cause).__name__
        raise _not_answering(address, why) from None
    await stream.aclose()


def _same_cluster(ray: Any, address: str) -> None:
    if address in ("auto", "local"):
        return
    current = str(ray.get_runtime_context().gcs_address)
    if current == address:
        return
    host, port = parse_address(address) or ("", 0)
    current_host, _, current_port = current.rpartition(":")
    if str(port) == current_port and host in {current_host, "127.0.0.1", "localhost"}:
        return  # Ray names a local head by the machine's address, not loopback
    raise ConfigurationError(
        f"this process is already connected to the Ray cluster at {current}, not {address}: "
        "a process joins one Ray cluster; give that address, 'auto', or none"
    )


def _enough_cpus(workers: int) -> None:
    """Refuse more workers than the cluster has CPUs: Ray would wait for them forever, and the
    experiment would hang without a word."""
    ray = import_ray()
    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < workers * ACTOR_CPUS:
        raise ConfigurationError(
            f"{workers} workers need {workers * ACTOR_CPUS} CPUs, and the Ray cluster at "
            f"{ray.get_runtime_context().gcs_address} has {cpus:g}: ask for at most "
            f"{int(cpus) // ACTOR_CPUS} workers, or add nodes to the cluster first"
        )


_connecting = threading.Lock()
"""Two experiments starting at once connect this process once."""


class _LocalCluster:
    """Whether a local cluster this process started (for one experiment) runs: Ray's
    connection is the process's, so this is too."""

    running = False


def _connect(address: str) -> None:
    ray = import_ray()
    with _connecting:
        if ray.is_initialized():
            _same_cluster(ray, address)
            return
        try:
            # The workers' output stays in Ray's log files: this process's stdout is for results.
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except ConnectionError as exc:
            raise _not_answering(address, str(exc).split("\n")[0]) from None


@asynccontextmanager
async def _local_cluster(workers: int) -> AsyncIterator[None]:
    """A local Ray cluster for the block.

    Ray ties the processes it starts to the *thread* that started them (Linux's parent-death
    signal follows the thread), so the cluster is started, held and stopped by one worker
    thread that lives exactly as long as the block.
    """
    release = threading.Event()
    _LocalCluster.running = True
    try:
        async with _hold_local_cluster_for(workers, release):
            yield
    finally:
        _LocalCluster.running = False


@asynccontextmanager
async def _hold_local_cluster_for(workers: int, release: threading.Event) -> AsyncIterator[None]:
    with collapsing():  # the experiment's own error, not a group around it
        async with anyio.create_task_group() as group:
            up = anyio.Event()
            group.start_soon(_hold_local_cluster, workers, release, up)
            try:
                await up.wait()  # a cluster that did not start fails the group, and this wait
                yield
            finally:
                release.set()


async def _hold_local_cluster(workers: int, release: threading.Event, up: anyio.Event) -> None:
    def started() -> None:
        anyio.from_thread.run_sync(up.set)

    await anyio.to_thread.run_sync(_run_local_cluster, workers, release, started)


def _run_local_cluster(workers: int, release: threading.Event, started: Callable[[], None]) -> None:
    ray = import_ray()
    try:
        ray.init(
            num_cpus=workers * ACTOR_CPUS,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (RuntimeError, ConnectionError, ValueError) as exc:
        ray.shutdown()
        raise ConfigurationError(
            f"a local Ray cluster did not start: {exc}; start one with `ray start --head` "
            "and give its address"
        ) from exc
    try:
        if not release.is_set():
            started()
            release.wait()
    finally:
        ray.shutdown()
