"""Where the command line meets the library: exit statuses, errors, Ctrl-C and progress.

A user of a command should see a one-line ``error: ...`` for anything they can fix, never a
traceback, and an exit status a script can branch on::

    0    it worked
    1    it ran, and the answer is "no": verify found breaks, a session did not complete, a
         source is unhealthy, a snapshot cannot be read
    2    it could not run: bad arguments, a missing store, an unknown session, a failed import
    130  interrupted (Ctrl-C)
    141  the reader of stdout went away (``| head``), as a SIGPIPE death would report

A genuine bug in envharness still shows its traceback: that is what a bug report needs.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TypeVar

import anyio
import typer
from anyio.abc import TaskStatus

from envharness.cli.render import printable
from envharness.errors import EnvharnessError, distinct_leaves
from envharness.store.locate import describe

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_NO",
    "EXIT_USAGE",
    "CliError",
    "ProgressLine",
    "closing",
    "interruptible",
    "resume_hint",
    "translate_errors",
]

EXIT_NO = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

_T = TypeVar("_T")


class CliError(Exception):
    """A bad argument the user can fix; shown like an :class:`EnvharnessError`, exit status 2."""


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn what the library raises into the exit statuses above.

    Exception groups are looked through: a task group may wrap the one error that matters,
    and the same error met by many tasks (every session on one full disk) is printed once.
    """
    try:
        yield
    except typer.Exit:
        raise
    except BaseException as exc:
        leaves = distinct_leaves(exc)
        if all(isinstance(leaf, EnvharnessError | CliError) for leaf in leaves):
            # Plain echo, never rich: messages quote values with [brackets] and must print as is.
            for leaf in leaves:
                typer.echo(f"error: {printable(str(leaf))}", err=True)
                for note in getattr(leaf, "__notes__", ()):  # what errors.collapse folded in
                    typer.echo(f"  {printable(str(note))}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
            typer.echo("interrupted", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if all(isinstance(leaf, BrokenPipeError) for leaf in leaves):
            _silence_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        raise


def _silence_stdout() -> None:
    """Point stdout at the null device so the interpreter's final flush cannot fail again.

    This is the recipe from the Python docs' note on SIGPIPE; without it Python prints
    "Exception ignored ... BrokenPipeError" on its way out.
    """
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test runner's capture): nothing will flush to a pipe
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)


def resume_hint(store: Path | str, target: str, code: Sequence[str]) -> str:
    """The command that goes on after an interruption: ``resume`` with the same store and
    the same code (``code``: the environment and agent arguments as given, or the manifest),
    ready to paste; a PostgreSQL URL without its password."""
    words = ["envharness", "--store", describe(store), "resume", target, *code]
    return f"go on from there: {printable(shlex.join(words))}"


async def interruptible(work: Callable[[], Awaitable[_T]]) -> _T | None:
    """Run ``work``; the first Ctrl-C cancels it and returns ``None``.

    Cancelling (instead of letting ``KeyboardInterrupt`` land wherever the main thread happens
    to be) lets the runtime write its final records under a shielded scope. Further Ctrl-Cs
    while that happens are acknowledged and ignored, so an impatient second press cannot
    interrupt the evidence being closed. Where signals cannot be watched (not the main
    thread, Windows), Ctrl-C arrives as ``KeyboardInterrupt`` and :func:`translate_errors`
    still exits 130.
    """
    work_scope = anyio.CancelScope()
    results: list[_T] = []

    async def watch(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with contextlib.ExitStack() as stack:
            try:
                signals = stack.enter_context(anyio.open_signal_receiver(signal.SIGINT))
            except (NotImplementedError, RuntimeError, ValueError):
                task_status.started()
                return
            task_status.started()
            async for _ in signals:
                if work_scope.cancel_called:
                    typer.echo("still stopping: writing the last records", err=True)
                else:
                    work_scope.cancel()

    try:
        async with anyio.create_task_group() as group:
            await group.start(watch)
            with work_scope:
                results.append(await work())
            group.cancel_scope.cancel()
    except BaseExceptionGroup as failure:
        # The watcher never fails, so the one error is the work's: raise it as itself, so the
        # caller's `except SomeError` still works.
        if len(failure.exceptions) == 1:
            raise failure.exceptions[0] from None
        raise
    return results[0] if results else None


@contextlib.asynccontextmanager
async def closing(iterator: AsyncIterator[_T]) -> AsyncIterator[AsyncIterator[_T]]:
    """Close a paged async generator when the body stops early (an error, a closed pipe).

    ``Store.rows`` and ``Store.records`` are typed as plain async iterators, which have no
    ``aclose`` to hand to :func:`contextlib.aclosing`; left to the garbage collector, their
    read connection would be closed outside any event loop.
    """
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


class ProgressLine:
    """One updating line on stderr while something long runs; silent unless stderr is a TTY.

    Logs and pipes get nothing: a stream of carriage returns is noise there.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else typer.get_text_stream("stderr")
        self._live = self._stream.isatty()
        self._shown = False

    def show(self, text: str) -> None:
        if self._live:
            self._stream.write(f"\r\x1b[2K{text}")
            self._stream.flush()
            self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._shown = False

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.clear()
