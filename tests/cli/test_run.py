"""``run``: environments and agents by ``module:attribute``, and every way to get them wrong."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from envharness.cli.edge import ProgressLine
from tests.cli._support import Invoke

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
AGENT = "envharness.fixtures:SyntheticAgent"
INPUT = '{"starting_total": 2}'


def _run(invoke: Invoke, store: Path, *args: str) -> tuple[int, str, str]:
    result = invoke("--store", store, "run", *args)
    return result.exit_code, result.stdout, result.stderr


def test_run_completes_and_prints_the_session(invoke: Invoke, store_path: Path) -> None:
    code, out, err = _run(
        invoke, store_path, SYNTHETIC, "--agent", f"alice={AGENT}", "--turns", "5",
        "--input", '{"starting_total": 2, "target": 0}', "--scenario", "to-zero", "--seed", "7",
    )  # fmt: skip

    assert code == 0, err
    assert err == ""  # stderr is not a terminal here: no progress line
    lines = out.splitlines()
    assert lines[0].startswith("session ses_")
    assert lines[1] == "status  completed after 2 turns"
    assert lines[2] == "reason  the environment reported done at turn 2"
    [listed] = [
        json.loads(line)
        for line in invoke("--store", store_path, "sessions", "--json").stdout.splitlines()
    ]
    assert listed["id"] == lines[0].split()[1]
    assert listed["scenario_id"] == "to-zero"


def test_a_failed_session_exits_1_with_its_reason_as_written(
    invoke: Invoke, store_path: Path
) -> None:
    code, out, _ = _run(
        invoke, store_path, SYNTHETIC, "--agent", "alice=tests.cli.agents:RaisingAgent",
        "--turns", "3", "--input", INPUT,
    )  # fmt: skip

    assert code == 1
    assert "status  failed after 0 turns" in out
    assert "reason  agent 'alice' raised RuntimeError: [bold]no[/bold] luck" in out


def test_an_agent_that_is_too_slow_fails_the_session(invoke: Invoke, store_path: Path) -> None:
    code, out, _ = _run(
        invoke, store_path, SYNTHETIC, "--agent", "alice=tests.cli.agents:SlowAgent",
        "--turns", "3", "--input", INPUT, "--action-timeout", "0.05",
    )  # fmt: skip

    assert code == 1
    assert "did not answer within 0.05s" in out


def test_roles_are_given_with_role(invoke: Invoke, store_path: Path) -> None:
    environment = "tests.cli.agents:TwoRoleEnvironment"
    agents = ("--agent", f"alice={AGENT}", "--agent", f"bob={AGENT}")

    missing = _run(invoke, store_path, environment, *agents, "--turns", "1", "--input", INPUT)
    given = _run(
        invoke, store_path, environment, *agents, "--turns", "1", "--input", INPUT,
        "--role", "alice=buyer", "--role", "bob=seller",
    )  # fmt: skip

    assert missing[0] == 2
    assert "error: participant 'alice' needs a role" in missing[2]
    assert given[0] == 0, given[2]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ("--input", '{"starting_total": "two"}'),
            "Expected `int`, got `str` - at `$.starting_total`",
        ),
        ((), "Object missing required field `starting_total`; give the scenario input as --input"),
        (("--input", "[1, 2]"), "--input must be a JSON object"),
        (("--input", "{starting_total: 1}"), "--input is not valid JSON"),
        (("--input", INPUT, "--scenario", "no spaces"), "scenario id 'no spaces' is not valid"),
        (("--input", INPUT, "--role", "alice"), "--role 'alice' is not NAME=VALUE"),
    ],
)
def test_bad_input_is_named_and_writes_nothing(
    invoke: Invoke, store_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    code, out, err = _run(
        invoke, store_path, SYNTHETIC, "--agent", f"alice={AGENT}", "--turns", "2", *arguments
    )

    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err
    assert not store_path.exists()


@pytest.mark.parametrize(
    ("environment", "agent", "message"),
    [
        (SYNTHETIC, "alice", "--agent 'alice' is not NAME=VALUE, e.g. --agent alice=my_agents:"),
        (SYNTHETIC, "=x:Y", "--agent '=x:Y' is not NAME=VALUE"),
        (SYNTHETIC, "alice=envharness.fixtures", "is not module:attribute"),
        (SYNTHETIC, "alice=:SyntheticAgent", "is not module:attribute"),
        (
            SYNTHETIC,
            "alice=envharness.fixtures:SyntheticAgnt",
            "envharness.fixtures has no attribute 'SyntheticAgnt'; did you mean SyntheticAgent",
        ),
        (
            SYNTHETIC,
            "alice=tests.cli.nowhere:Agent",
            "--agent alice: no module named 'tests.cli.nowhere'",
        ),
        (
            "envharness.fixtures:SyntheticEnvironment.nested",
            f"alice={AGENT}",
            "envharness.fixtures:SyntheticEnvironment has no attribute 'nested'",
        ),
        (
            SYNTHETIC,
            "alice=tests.cli.agents:UnbuildableAgent",
            "agent 'alice' (tests.cli.agents:UnbuildableAgent): creating it raised ValueError: "
            "needs an API key (",
        ),
        (SYNTHETIC, "alice=tests.cli.agents:an_instance", "pass the class"),
        ("envharness.fixtures:SyntheticAgent", f"alice={AGENT}", "has no `spec`"),
    ],
)
def test_bad_references_are_named(
    invoke: Invoke, store_path: Path, environment: str, agent: str, message: str
) -> None:
    code, out, err = _run(
        invoke, store_path, environment, "--agent", agent, "--turns", "1", "--input", INPUT
    )

    assert code == 2
    assert out == ""
    assert message in err
    assert err.startswith("error: ")
    assert not store_path.exists()


def test_a_participant_given_twice_is_refused(invoke: Invoke, store_path: Path) -> None:
    code, _, err = _run(
        invoke, store_path, SYNTHETIC, "--agent", f"alice={AGENT}", "--agent", f"alice={AGENT}",
        "--turns", "1", "--input", INPUT,
    )  # fmt: skip

    assert code == 2
    assert "--agent 'alice' is given twice" in err


def test_a_module_that_fails_to_import_is_reported_where_it_failed(
    invoke: Invoke, store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_env.py").write_text("x = 1\nraise RuntimeError('[env] not configured')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the cwd insertion afterwards

    code, _, err = _run(
        invoke, store_path, "broken_env:Environment", "--agent", f"a={AGENT}", "--turns", "1"
    )

    assert code == 2
    assert "error: ENVIRONMENT: importing 'broken_env' failed: RuntimeError: [env] not " in err
    assert f"{tmp_path / 'broken_env.py'}:2)" in err


def test_the_progress_line_only_draws_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        with ProgressLine(stream) as line:
            line.show("ses_1  turn 1/3")
            line.show("ses_1  turn 2/3")

    assert terminal.getvalue() == ("\r\x1b[2Kses_1  turn 1/3\r\x1b[2Kses_1  turn 2/3\r\x1b[2K")
    assert pipe.getvalue() == ""


def test_control_characters_from_agents_never_reach_the_terminal(
    invoke: Invoke, store_path: Path
) -> None:
    code, out, _ = _run(
        invoke, store_path, SYNTHETIC, "--agent", "alice=tests.cli.agents:EscapingAgent",
        "--turns", "1", "--input", INPUT,
    )  # fmt: skip
    session = out.split()[1]

    shown = invoke("--store", store_path, "show", session).stdout

    assert code == 1
    assert "\x1b" not in out
    assert "\x1b" not in shown
    assert "raised RuntimeError: \\x1b[2Jscreen cleared" in shown


def test_an_agent_given_as_a_command_runs_as_an_external_program(
    invoke: Invoke, store_path: Path
) -> None:
    script = Path(__file__).parents[1] / "command_agent" / "scripted_agent.py"
    command = f"{sys.executable} {script} good"
    code, out, err = _run(
        invoke, store_path, SYNTHETIC, "--agent", f"alice={command}", "--agent", f"bob={AGENT}",
        "--turns", "2", "--input", INPUT,
    )  # fmt: skip
    assert code == 0, err
    assert "status  completed after 2 turns" in out
    shown = invoke("--store", store_path, "show", out.split()[1]).stdout
    assert f"command:{command}" in shown
    assert "implementation 'scripted-good'" in shown


def test_an_agent_command_that_does_not_exist_is_refused(invoke: Invoke, store_path: Path) -> None:
    code, _, err = _run(
        invoke, store_path, SYNTHETIC, "--agent", "alice=no-such-program --flag", "--turns", "1",
        "--input", INPUT,
    )  # fmt: skip
    assert code == 2
    assert "error: agent program 'no-such-program' was not found on the PATH" in err
    assert not (store_path / "evidence.sqlite3").exists()
