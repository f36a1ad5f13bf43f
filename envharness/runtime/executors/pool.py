"""The process pool: ``workers`` child Python processes on this machine, no cluster needed.

Each worker is ``sys.executable -m envharness.runtime.executors.pool_worker`` speaking frames
over its end of a Unix socket pair (never stdout or stderr, which agents print to). It starts in
a session of its own, so a Ctrl-C in the terminal reaches only the driver, which stops the
sessions through their workers. A worker's stderr goes to a file, so that a worker that dies
is reported with its last lines.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import IO, final

import anyio
from anyio.abc import Process

from envharness.errors import ConfigurationError
from envharness.runtime.executors.driver import CLOSE_GRACE, RemoteExecutor
from envharness.runtime.executors.seam import ExperimentWork, PlanSession, SessionRuns
from envharness.runtime.executors.streams import StreamChannel, socket_channel

__all__ = ["STDERR_TAIL", "ProcessPoolExecutor"]

STDERR_TAIL = 4000
"""Characters of a dead worker's stderr quoted in the error."""
_ENTRY = "envharness.runtime.executors.pool_worker"


@final
class ProcessPoolExecutor:
    """Runs sessions in ``workers`` processes on this machine (one per core is the usual
    choice), each running many sessions at once; evidence is committed by this process.

    Each experiment gets workers of its own, started for it. Opened with ``async with``, the
    pool also keeps ``spares`` workers (default: ``workers``) started ahead, so that the next
    experiment finds them ready — what many short experiments in a row want (the optimizer's
    reruns): a worker's start, a fresh Python importing envharness, is then paid while the
    previous experiment runs.
    """

    def __init__(self, workers: int = 2, *, spares: int | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigurationError(
                f"workers must be a positive integer (processes to run sessions in), not "
                f"{workers!r}; this machine has {os.cpu_count() or 1} cores"
            )
        if spares is not None and (
            isinstance(spares, bool) or not isinstance(spares, int) or spares < 0
        ):
            raise ConfigurationError(
                f"spares must be a number of workers to keep started (0 or more), not {spares!r}"
            )
        self.workers = workers
        self.spares = workers if spares is None else spares
        self._open: tuple[AsyncExitStack, _Spares] | None = None
        self._remote = RemoteExecutor(self._spawner, workers, "process pool")

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        self._remote.check(plan_session, parts)

    def serving(self, work: ExperimentWork) -> AbstractAsyncContextManager[SessionRuns]:
        return self._remote.serving(work)

    def _spawner(self) -> _PoolSpawner:
        return _PoolSpawner(self._open[1] if self._open is not None else None)

    async def __aenter__(self) -> ProcessPoolExecutor:
        if self._open is not None:
            raise ConfigurationError("this ProcessPoolExecutor is already open")
        stack = AsyncExitStack()
        try:
            folder = await anyio.to_thread.run_sync(
                lambda: tempfile.TemporaryDirectory(prefix="envharness-spares-")
            )
            stack.push_async_callback(anyio.to_thread.run_sync, folder.cleanup)
            spares = _Spares(self.spares, Path(folder.name))
            stack.push_async_callback(spares.aclose)
            await spares.fill()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            raise
        self._open = (stack, spares)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            with anyio.CancelScope(shield=True):
                await opened[0].aclose()

    @property
    def spare_pids(self) -> tuple[int, ...]:
        """The process ids of the workers started ahead and not yet taken (for diagnosis)."""
        return self._open[1].pids if self._open is not None else ()

    def __repr__(self) -> str:
        return f"ProcessPoolExecutor(workers={self.workers})"


async def _launch(index: int, stderr_path: Path) -> tuple[_Worker, socket.socket]:
    """A fresh worker process and this process's end of its socket pair."""
    ours, theirs = socket.socketpair()
    try:
        stderr = await anyio.to_thread.run_sync(stderr_path.open, "wb")
        try:
            process = await anyio.open_process(
                [sys.executable, "-m", _ENTRY, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=None,
                stderr=stderr,
                pass_fds=[theirs.fileno()],
                start_new_session=True,
            )
        finally:
            stderr.close()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return _Worker(index, process, stderr_path), ours


@final
class _Spares:
    """Workers started ahead of the experiments that will take them (an open pool's): each
    one taken is replaced at once, so the next experiment finds its workers already importing.
    """

    def __init__(self, count: int, folder: Path) -> None:
        self._count = count
        self._folder = folder
        self._ready: list[tuple[_Worker, socket.socket]] = []
        self._numbers = itertools.count()
        self._filling = anyio.Lock()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(worker.process.pid for worker, _ in self._ready)

    async def fill(self) -> None:
        async with self._filling:
            while len(self._ready) < self._count:
                number = next(self._numbers)
                path = self._folder / f"spare-{number}.stderr"
                self._ready.append(await _launch(number, path))

    async def take(self) -> tuple[_Worker, socket.socket] | None:
        """A worker started ahead (``None`` when none is kept), replaced before it returns."""
        taken = self._ready.pop(0) if self._ready else None
        if taken is not None:
            await self.fill()
        return taken

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            for worker, ours in self._ready:
                ours.close()  # the spare reads the end of its channel and exits
                await worker.stop()
            self._ready.clear()


@final
class _PoolSpawner:
    """Starts one experiment's pool workers: spares when an open pool has them, else fresh
    ones, each one's stderr in a file of its own in a temporary folder."""

    def __init__(self, spares: _Spares | None) -> None:
        self._spares = spares
        self._started: list[_Worker] = []
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._making_folder = anyio.Lock()

    @property
    def kind(self) -> str:
        return "process pool"

    async def start(self, index: int) -> _ProcessChannel:
        taken = await self._spares.take() if self._spares is not None else None
        if taken is None:
            async with self._making_folder:  # workers start side by side: make it once
                if self._folder is None:
                    self._folder = await anyio.to_thread.run_sync(
                        lambda: tempfile.TemporaryDirectory(prefix="envharness-pool-")
                    )
            taken = await _launch(index, Path(self._folder.name) / f"worker-{index}.stderr")
        worker, ours = taken
        worker.index = index
        self._started.append(worker)
        return _ProcessChannel(await socket_channel(ours), worker)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            for worker in self._started:
                await worker.stop()
            if self._folder is not None:
                await anyio.to_thread.run_sync(self._folder.cleanup)


@final
class _Worker:
    __slots__ = ("index", "process", "stderr_path")

    def __init__(self, index: int, process: Process, stderr_path: Path) -> None:
        self.index = index
        self.process = process
        self.stderr_path = stderr_path

    async def stop(self) -> None:
        """Let it exit (it does once its channel closes), then terminate, then kill."""
        process = self.process
        with anyio.move_on_after(CLOSE_GRACE):
            await process.wait()
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(CLOSE_GRACE):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()

    async def death(self) -> str:
        """How the worker ended, with the end of its stderr."""
        with anyio.move_on_after(CLOSE_GRACE):
            await self.process.wait()
        code = self.process.returncode
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        tail = await anyio.to_thread.run_sync(_tail, self.stderr_path)
        said = f"; its stderr ended with:\n{tail}" if tail.strip() else " (its stderr is empty)"
        return f"worker {self.index} (pid {self.process.pid}) {how}{said}"


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as file:
            return _last(file).decode("utf-8", "replace")
    except OSError:
        return ""


def _last(file: IO[bytes]) -> bytes:
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(max(0, size - STDERR_TAIL))
    return file.read()


@final
class _ProcessChannel:
    """A pool worker's channel: its socket, and its process to say how it died."""

    __slots__ = ("_frames", "_worker")

    def __init__(self, frames: StreamChannel, worker: _Worker) -> None:
        self._frames = frames
        self._worker = worker

    async def send(self, frame: bytes) -> None:
        try:
            await self._frames.send(frame)
        except (anyio.BrokenResourceError, OSError) as exc:
            raise anyio.BrokenResourceError(await self._worker.death()) from exc

    async def receive(self) -> bytes:
        try:
            return await self._frames.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
            with anyio.CancelScope(shield=True):
                death = await self._worker.death()
            if isinstance(exc, anyio.EndOfStream) and self._worker.process.returncode == 0:
                raise
            raise anyio.BrokenResourceError(death) from exc

    async def aclose(self) -> None:
        await self._frames.aclose()
