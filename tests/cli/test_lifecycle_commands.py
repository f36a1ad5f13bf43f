"""``checkpoint``, ``branch``, ``continue`` and ``compare`` from the command
line: what only Python could do before, on a store of one completed session."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envharness.cli import app
from envharness.fixtures import SyntheticEnvironment
from tests.cli._support import ROOT, Invoke, command, environment, listed_sessions

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
AGENT = "agent=envharness.fixtures:SyntheticAgent"
INPUT = '{"starting_total": 0, "target": 50}'


class RenamedEnvironment(SyntheticEnvironment):
    """The synthetic rules under another name: a session of another environment."""

    spec = dataclasses.replace(SyntheticEnvironment.spec, name="renamed")


@pytest.fixture(scope="module")
def one_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding one completed three-turn session, and its id."""
    store = tmp_path_factory.mktemp("lifecycle") / "store"
    runner = CliRunner()
    ran = runner.invoke(
        app, ["--store", str(store), "run", SYNTHETIC, "--agent", AGENT, "--turns", "3",
              "--input", INPUT],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    listed = runner.invoke(app, ["--store", str(store), "sessions", "--json"])
    return store, json.loads(listed.stdout.splitlines()[0])["id"]


@pytest.fixture
def store(one_session: tuple[Path, str], tmp_path: Path) -> Path:
    return Path(shutil.copytree(one_session[0], tmp_path / "store"))


@pytest.fixture
def session(one_session: tuple[Path, str]) -> str:
    return one_session[1]


def sessions(invoke: Invoke, store: Path) -> list[dict[str, object]]:
    listed = invoke("--store", store, "sessions", "--json")
    return [json.loads(line) for line in listed.stdout.splitlines()]


def test_checkpoint_branch_continue_and_compare(invoke: Invoke, store: Path, session: str) -> None:
    taken = invoke("--store", store, "checkpoint", session[:10], "--label", "before")
    assert taken.exit_code == 0, taken.stderr
    first = taken.stdout.splitlines()[0]
    assert first.startswith(f"checkpoint {session}@")
    assert first.endswith("at turn 3 (before)")
    name = first.split()[1]

    branched = invoke(
        "--store", store, "branch", name, SYNTHETIC,
        "--intervention", '{"kind": "reset-total", "value": 40}', "--reason", "try higher",
    )  # fmt: skip
    assert branched.exit_code == 0, branched.stderr
    child = branched.stdout.split()[1]
    assert branched.stdout.startswith(f"branched {child} from {name} at turn 3")
    assert {s["id"]: s["status"] for s in sessions(invoke, store)}[child] == "paused"

    continued = invoke(
        "--store", store, "continue", child, SYNTHETIC, "--agent", AGENT, "--turns", "2"
    )
    assert continued.exit_code == 0, continued.stderr
    assert continued.stdout.strip() == f"continued {child}: completed after 5 turns"

    compared = invoke("--store", store, "compare", session, child)
    assert compared.exit_code == 1  # they differ
    assert compared.stdout.splitlines()[0] == f"compare {session}  vs  {child}"
    assert compared.stdout.splitlines()[-1].startswith("different: ")
    as_json = invoke("--store", store, "compare", session, child, "--json")
    assert json.loads(as_json.stdout)["right"] == child
    assert invoke("--store", store, "compare", session, session).stdout.endswith("identical\n")
    assert invoke("--store", store, "verify").exit_code == 0


def test_branch_by_session_and_turn(invoke: Invoke, store: Path, session: str) -> None:
    invoke("--store", store, "checkpoint", session)
    branched = invoke(
        "--store", store, "branch", session, "--turn", "3", SYNTHETIC,
        "--intervention", '{"kind": "reset-total"}',
    )  # fmt: skip
    assert branched.exit_code == 0, branched.stderr
    assert "at turn 3" in branched.stdout


def test_branch_refuses_bad_input(invoke: Invoke, store: Path, session: str) -> None:
    no_checkpoint = invoke("--store", store, "branch", session, "--turn", "2", SYNTHETIC)
    assert no_checkpoint.exit_code == 2
    assert f"no checkpoint {session} at turn 2; it has: none" in no_checkpoint.stderr
    assert f"`envharness checkpoint {session}`" in no_checkpoint.stderr

    invoke("--store", store, "checkpoint", session)
    bad_json = invoke("--store", store, "branch", session, SYNTHETIC, "--intervention", "{x")
    assert bad_json.exit_code == 2
    assert "--intervention is not valid JSON" in bad_json.stderr
    no_environment = invoke("--store", store, "branch", session)
    assert no_environment.exit_code == 2
    assert "branch needs the environment that ran the session" in no_environment.stderr
    both = invoke("--store", store, "branch", f"{session}@1", "--turn", "3", SYNTHETIC)
    assert "names one checkpoint; give --turn only with a SESSION" in both.stderr
    malformed = invoke("--store", store, "branch", f"{session}@x", SYNTHETIC)
    assert "is not SESSION@SEQ" in malformed.stderr
    rejected = invoke(
        "--store", store, "branch", session, SYNTHETIC, "--intervention", '{"kind": "nope"}'
    )
    assert rejected.exit_code != 0
    assert "the environment rejected the intervention" in rejected.stderr
    assert "no branch made" in rejected.stderr
    assert len(sessions(invoke, store)) == 1


def test_continue_needs_the_code(invoke: Invoke, store: Path, session: str) -> None:
    refused = invoke("--store", store, "continue", session, "--turns", "2")
    assert refused.exit_code == 2
    assert "continue needs the code that ran it: ENVIRONMENT and --agent" in refused.stderr
    zero = invoke("--store", store, "continue", session, SYNTHETIC, "--agent", AGENT, "--turns", 0)
    assert zero.exit_code == 2


def test_commands_on_a_missing_store_create_nothing(invoke: Invoke, tmp_path: Path) -> None:
    missing = tmp_path / "none"
    for args in (("checkpoint", "ses_x"), ("compare", "ses_a", "ses_b"), ("stop", "ses_x")):
        result = invoke("--store", missing, *args)
        assert result.exit_code == 2
        assert "no evidence store" in result.stderr
    assert not missing.exists()


def test_a_continue_interrupted_where_it_runs_is_stopped_with_the_resume_command(
    invoke: Invoke, store: Path, session: str
) -> None:
    """Ctrl-C where ``continue`` runs records the session stopped and prints the ``resume``
    command (``stop`` from another process: tests/cli/test_control.py)."""

    def turns() -> int:
        return next(
            int(str(s["turns_completed"])) for s in listed_sessions(store) if s["id"] == session
        )

    before = turns()
    slow = "agent=tests.cli.agents:SlowAgent"
    with subprocess.Popen(
        command(store, "continue", session, SYNTHETIC, "--agent", slow, "--turns", "5000",
                "--declare-changes", "a slower agent"),
        cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while turns() <= before:
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "no turn was committed in 20 s"
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 130, err
    assert f"interrupted: {session} was recorded as stopped" in err
    hint = (
        f"go on from there: envharness --store {store} resume {session} {SYNTHETIC} --agent {slow}"
    )
    assert hint in err


def test_compare_across_environments_says_what_aligns(
    invoke: Invoke, store: Path, session: str
) -> None:
    other = "tests.cli.test_lifecycle_commands:RenamedEnvironment"
    ran = invoke("--store", store, "run", other, "--agent", AGENT, "--turns", 3, "--input", INPUT)
    assert ran.exit_code == 0, ran.stderr
    renamed = next(s["id"] for s in sessions(invoke, store) if s["id"] != session)
    compared = invoke("--store", store, "compare", session, renamed)
    assert compared.exit_code == 0  # the same rules played the same way, under two names
    assert compared.stderr.startswith("note: A ran synthetic-total@1 and B ran renamed@1: ")
    assert "align by name only" in compared.stderr
    same = invoke("--store", store, "compare", session, session)
    assert same.stderr == ""
