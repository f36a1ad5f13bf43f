"""``stop`` and ``pause``: reach a session or experiment that another process runs.

Only the process running a session can stop or pause it; these commands leave it a request in
the store (:mod:`envharness.store.control`), addressed to that process, which its harness
takes within a second and carries out as its own ``stop`` or ``pause`` would
(:mod:`envharness.api.remote_control`): the session records ``stopped`` or ``paused``, and
``resume`` goes on from there. The command waits (``--timeout``) and prints how it ended; a
request nobody took in that time is withdrawn, so it can never land later by surprise.

A session inside an experiment is stopped or paused with its experiment, as in Python
(``experiment.stop()``, ``experiment.pause()``): the command says so and names it.
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import anyio
import typer

from envharness.cli.edge import EXIT_NO, CliError
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.records import RunnerRef
from envharness.store.control import ControlRequest, ControlRequests, runner_of_key
from envharness.store.locate import AnyStore, describe, postgres_url, reading_store
from envharness.store.owners import ENDED, is_gone
from envharness.store.postgres.backend import PostgresBackend

__all__ = ["DEFAULT_TIMEOUT_S", "WAIT_STEP_S", "app", "pause_command", "stop_command"]

DEFAULT_TIMEOUT_S = 60.0
"""How long ``stop`` and ``pause`` wait for the runner by default."""
WAIT_STEP_S = 0.1
"""How often the waiting command looks at the store."""

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds these commands to the root."""

Target = Annotated[
    str,
    typer.Argument(
        metavar="SESSION | EXPERIMENT",
        help="A running session's id, or an experiment's (exp_...); a unique prefix will do.",
    ),
]
Wait = Annotated[
    bool,
    typer.Option(
        "--wait/--no-wait",
        help="Wait until it has stopped or paused and print how it ended (default), or "
        "return once the request is left.",
    ),
]
Timeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        min=0,
        help="How long to wait for the runner; a request not taken by then is withdrawn.",
    ),
]


@app.command("stop")
def stop_command(
    ctx: typer.Context, target: Target, wait: Wait = True, timeout: Timeout = DEFAULT_TIMEOUT_S
) -> None:
    """Stop a running session or experiment from any process: it records stopped, with
    every committed turn kept, and resumes later. Exit status 0 once stopped."""
    _control(CliState.of(ctx, postgres=True).location, target, "stop", wait=wait, timeout=timeout)


@app.command("pause")
def pause_command(
    ctx: typer.Context, target: Target, wait: Wait = True, timeout: Timeout = DEFAULT_TIMEOUT_S
) -> None:
    """Pause a running session or experiment from any process, at its next turn boundary;
    `resume` goes on from there. Exit status 0 once paused."""
    _control(CliState.of(ctx, postgres=True).location, target, "pause", wait=wait, timeout=timeout)


@dataclass(frozen=True, slots=True)
class _Found:
    """What the target is now, as the store's index shows it."""

    kind: str
    """``session`` or ``experiment``."""
    id: str
    status: str
    reason: str | None
    experiment_id: str | None = None
    turns: int | None = None


def _control(store: Path | str, target: str, verb: str, *, wait: bool, timeout: float) -> None:
    done = {"stop": "stopped", "pause": "paused"}[verb]

    async def controlled() -> tuple[_Found, ControlRequest, _Found | None]:
        async with reading_store(store) as reader:  # never creates a store
            return await asking(reader)

    async def asking(reader: AnyStore) -> tuple[_Found, ControlRequest, _Found | None]:
        found = await _look(reader, target)
        url = postgres_url(store)
        requests = ControlRequests(Path(store) if url is None else PostgresBackend(url))
        runner = _refuse_unless_running(found, verb, await requests.runner(found.id), store)
        asked = await requests.ask(found.id, verb, runner, _asker(verb))
        if not wait:
            return found, asked, None
        try:
            with anyio.move_on_after(timeout):
                while True:
                    now = await _look(reader, found.id)
                    if now.status != "running":  # ended; a request not taken never lands
                        return found, await requests.withdraw(asked.id), now
                    await anyio.sleep(WAIT_STEP_S)
        except BaseException:  # Ctrl-C while waiting: nothing may land later by surprise
            with anyio.CancelScope(shield=True):
                await requests.withdraw(asked.id)
            raise
        return found, await requests.withdraw(asked.id), None

    found, request, ended = anyio.run(controlled)
    what = f"{found.kind} {found.id}"
    runner = _runner_words(request.runner)
    if not wait:
        typer.echo(
            f"asked {runner} to {verb} {what}; `envharness {_show(found)}` shows when it has"
        )
        return
    if ended is None and request.taken_at is None:
        typer.echo(
            f"{runner} did not take the request to {verb} {what} within {timeout:g}s, so it "
            "was withdrawn and nothing changed. That process may run an envharness older than "
            "this one, or run the session other than through the harness; stop it where it "
            "runs (Ctrl-C there)",
            err=True,
        )
        raise typer.Exit(EXIT_NO)
    if ended is None:
        typer.echo(
            f"{runner} took the request to {verb} {what} but it has not {done} within "
            f"{timeout:g}s (a turn still playing); `envharness {_show(found)}` shows when it has",
            err=True,
        )
        raise typer.Exit(EXIT_NO)
    reason = f": {printable(ended.reason)}" if ended.reason else ""
    turns = f" after {ended.turns} turns" if ended.turns is not None else ""
    if ended.status != done:
        typer.echo(f"{what} ended {ended.status}{turns}{reason}, before the {verb} took effect")
        if ended.status == "interrupted":
            typer.echo(_resume_words(store, found.id), err=True)
        raise typer.Exit(EXIT_NO)
    typer.echo(f"{what} {done}{turns}{reason}")
    typer.echo(_resume_words(store, found.id))


async def _look(reader: AnyStore, target: str) -> _Found:
    """The session or experiment ``target`` names (an ``exp_`` id is an experiment's)."""
    if target.startswith("exp_"):
        experiment = await reader.experiment(target)
        return _Found("experiment", experiment.id, experiment.status, experiment.reason)
    session = await reader.session(target)
    return _Found(
        "session",
        session.id,
        session.status,
        session.reason,
        experiment_id=session.experiment_id,
        turns=session.turns_completed,
    )


def _refuse_unless_running(
    found: _Found, verb: str, runner: RunnerRef | None, store: Path | str
) -> RunnerRef:
    """The process to ask; a clear refusal when nothing runs the target, or when it is a
    session that only its experiment stops and pauses."""
    what = f"{found.kind} {found.id}"
    if found.status == "interrupted" or (runner is not None and is_gone(runner)):
        raise CliError(
            f"{what} is not running: {printable(found.reason or 'its runner is gone')}, so "
            f"there is nothing to {verb}. {_resume_words(store, found.id)}"
        )
    if found.status in ENDED:
        raise CliError(f"{what} is not running (it is {found.status}); nothing to {verb}")
    if found.status == "paused":
        raise CliError(
            f"{what} is paused; nothing runs it to {verb}. {_resume_words(store, found.id)}"
        )
    if found.experiment_id is not None:
        raise CliError(
            f"{what} runs in experiment {found.experiment_id}, which stops and pauses as a "
            f"whole: `envharness {verb} {found.experiment_id}`"
        )
    if found.status != "running" or runner is None:
        raise CliError(
            f"{what} is {found.status}, not running in any process now; nothing to {verb}"
        )
    return runner


def _asker(verb: str) -> str:
    """Who asked, as the request keeps it: this command, its process and its user."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}"
    return f"`envharness {verb}`, pid {os.getpid()} on {socket.gethostname()}, user {user}"


def _runner_words(runner_json: str) -> str:
    runner = runner_of_key(runner_json)
    if runner is None:
        return "the process running it"
    return f"process {runner.pid} on {printable(runner.host)}"


def _show(found: _Found) -> str:
    return f"{'experiments' if found.kind == 'experiment' else 'sessions'} show {found.id}"


def _resume_words(store: Path | str, target: str) -> str:
    words = shlex.join(["envharness", "--store", describe(store), "resume", target])
    return f"Go on with `{printable(words)} ...` and the code that ran it."
