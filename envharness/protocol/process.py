"""Agent programs as processes: how they are found, started, and always stopped.

Shared by ``CommandAgent`` (sessions) and the conformance suite (``envharness protocol
check``), so both find programs, build the child's environment and stop it the same way: a
program runs in its own process group with a minimal environment, and stopping it is protocol
``shutdown``, then ``SIGTERM`` to the group, then ``SIGKILL``, then reaping — always complete.
"""

from __future__ import annotations

import collections
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import ByteReceiveStream, Process

from envharness.errors import ConfigurationError
from envharness.protocol.errors import ProtocolError

__all__ = [
    "DEFAULT_INHERITED_ENV",
    "AgentCommand",
    "ShutsDown",
    "StderrTail",
    "agent_command",
    "chunks",
    "signal_group",
    "spawn",
    "stop",
]

DEFAULT_INHERITED_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SYSTEMROOT",
)
"""Variables a program gets from the host's environment; everything else must be passed, so
the host's credentials never reach an agent by accident."""


class ShutsDown(Protocol):
    """A channel that can tell its program to exit (an agent's or an environment program's)."""

    async def shutdown(self, reason: str = "") -> None: ...


_INTERPRETERS = {".py": "python3", ".js": "node", ".mjs": "node", ".sh": "sh", ".rb": "ruby"}


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """A checked command: ``executable`` is the resolved path of ``argv[0]``."""

    argv: tuple[str, ...]
    executable: str
    cwd: Path | None
    env: dict[str, str]

    def __str__(self) -> str:
        return shlex.join(self.argv)


def agent_command(
    argv: Sequence[str],
    *,
    cwd: str | PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    inherit_env: Iterable[str] = DEFAULT_INHERITED_ENV,
    owner: str = "agent",
) -> AgentCommand:
    """Check a command now, so a typo fails with a clear error before anything starts;
    ``owner`` names whose program it is in those errors (an agent, an environment)."""
    if isinstance(argv, str) or not argv:
        raise ConfigurationError(f"give the {owner}'s command as a program and its arguments")
    words = tuple(str(word) for word in argv)
    environment = {name: os.environ[name] for name in inherit_env if name in os.environ}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigurationError(
                f"the {owner}'s env must map strings to strings; {name!r} is {type(value).__name__}"
            )
        environment[name] = value
    directory = Path(cwd) if cwd is not None else None
    if directory is not None and not directory.is_dir():
        raise ConfigurationError(
            f"the {owner}'s working directory {str(directory)!r} does not exist"
        )
    executable = _resolve(words[0], environment.get("PATH", ""), directory, owner)
    return AgentCommand(words, executable, directory, environment)


async def spawn(command: AgentCommand) -> Process:
    """Start the program in a new session (its own process group) with piped stdio."""
    try:
        return await anyio.open_process(
            [command.executable, *command.argv[1:]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=command.cwd,
            env=command.env,
            start_new_session=True,
        )
    except OSError as exc:
        raise ConfigurationError(f"could not start {command}: {exc.strerror or exc}") from exc


async def stop(
    process: Process,
    channel: ShutsDown,
    *,
    shutdown_grace: float,
    terminate_grace: float,
    reason: str,
) -> None:
    """Protocol ``shutdown``, then ``SIGTERM``, then ``SIGKILL`` to the group; reaps the process.

    Call it under a shielded cancel scope: it is bounded by the two grace periods.
    """
    if process.returncode is None:
        with anyio.move_on_after(shutdown_grace):
            with suppress(ProtocolError, OSError, anyio.BrokenResourceError):
                await channel.shutdown(reason)
            await process.wait()
    if process.returncode is None:
        signal_group(process, signal.SIGTERM)
        with anyio.move_on_after(terminate_grace):
            await process.wait()
    # Also after the leader exited on its own: whatever it started in its group goes too.
    signal_group(process, signal.SIGKILL)
    await process.wait()


def signal_group(process: Process, number: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)


async def chunks(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    """The stream's chunks until it ends or is closed under us (both mean: no more output)."""
    while True:
        try:
            yield await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return


class StderrTail:
    """The end of a program's stderr, kept for the diagnosis of a failure: at least ``limit``
    bytes of it (whole chunks), never much more."""

    __slots__ = ("_chunks", "_size", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0

    def keep(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size - len(self._chunks[0]) >= self.limit:
            self._size -= len(self._chunks.popleft())

    @property
    def text(self) -> str:
        """The last ``limit`` characters kept, decoded (bad UTF-8 replaced)."""
        return b"".join(self._chunks).decode("utf-8", "replace")[-self.limit :]


def _resolve(program: str, path: str, cwd: Path | None, owner: str) -> str:
    if os.sep in program or (os.altsep is not None and os.altsep in program):
        candidate = Path(program)
        if cwd is not None and not candidate.is_absolute():
            candidate = cwd / candidate
        if not candidate.is_file():
            raise ConfigurationError(f"{owner} program {program!r} does not exist ({candidate})")
        if not os.access(candidate, os.X_OK):
            interpreter = _INTERPRETERS.get(candidate.suffix)
            how = f"{interpreter} {shlex.quote(program)}" if interpreter else "its interpreter"
            raise ConfigurationError(
                f"{owner} program {program!r} is not executable: chmod +x it, or run it "
                f"through {how}"
            )
        return str(candidate.resolve())
    found = shutil.which(program, path=path)
    if found is None:
        raise ConfigurationError(
            f"{owner} program {program!r} was not found on the PATH the {owner} gets ({path!r}); "
            f"install it, give its full path, or pass PATH in the {owner}'s env"
        )
    return found
