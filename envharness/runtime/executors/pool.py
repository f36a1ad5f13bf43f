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
from pathlib import Path
from typing import IO, final

import anyio
from anyio.abc import Process

from envharness.errors import ConfigurationError
from envharness.runtime.executors.counts import is_count
from envharness.runtime.executors.driver import CLOSE_GRACE, KeptWorkers, RemoteExecutor
from envharness.runtime.executors.streams import StreamChannel, socket_channel

__all__ = ["STDERR_TAIL", "ProcessPoolExecutor"]

STDERR_TAIL = 4000
"""Characters of a dead worker's stderr quoted in the error."""
_ENTRY = "envharness.runtime.executors.pool_worker"


@final
class ProcessPoolExecutor(KeptWorkers):
    """Runs sessions in ``workers`` processes on this machine (one per core is the usual
    choice), each running many sessions at once; evidence is committed by this process.

    Each experiment gets workers of its own, started for it. Opened with ``async with``, the
    pool starts its workers once and keeps them for one experiment after another — what many
    short experiments in a row want (the optimizer's reruns): a worker's start, a fresh Python
    importing envharness, is then paid once, not per experiment.
    """

    def __init__(self, workers: int = 2) -> None:
        if not is_count(workers):
            raise ConfigurationError(
                f"workers must be a positive integer (processes to run sessions in), not "
                f"{workers!r}; this machine has {os.cpu_count() or 1} cores"
            )
        self.workers = workers
        self._remote = RemoteExecutor(_PoolSpawner, workers, "process pool")

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
class _PoolSpawner:
    """Starts pool workers, each one's stderr in a file of its own in a temporary folder."""

    def __init__(self) -> None:
        self._started: list[_Worker] = []
        self._numbers = itertools.count()
        """Names the stderr files: an open pool's spawner starts workers for many experiments,
        whose indexes repeat."""
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._making_folder = anyio.Lock()

    @property
    def kind(self) -> str:
        return "process pool"

    async def start(self, index: int) -> _ProcessChannel:
        async with self._making_folder:  # workers start side by side: make it once
            if self._folder is None:
                self._folder = await anyio.to_thread.run_sync(
                    lambda: tempfile.TemporaryDirectory(prefix="envharness-pool-")
                )
        path = Path(self._folder.name) / f"worker-{next(self._numbers)}.stderr"
        worker, ours = await _launch(index, path)
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
