"""``check-env``: one line per check, the fix under a failure, exit 1 on a failure and 2 when
there is nothing to check."""

from __future__ import annotations

import shlex
import sys

import pytest

from tests.cli._support import ROOT, Invoke

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
PAIR = ("--participant", "alice", "--participant", "bob")
NIM = shlex.join([sys.executable, str(ROOT / "environments" / "python" / "nim.py")])


def not_an_environment() -> int:
    return 42


def _check(invoke: Invoke, *args: str) -> tuple[int, str, str]:
    result = invoke("check-env", *args)
    return result.exit_code, result.stdout, result.stderr


def test_an_environment_that_keeps_the_contract_exits_0(invoke: Invoke) -> None:
    code, out, err = _check(
        invoke, SYNTHETIC, "--input", '{"starting_total": 1}', "--turns", "3", *PAIR
    )

    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0] == f"checking {SYNTHETIC}"
    assert [line.split()[:2] for line in lines[1:7]] == [
        ["PASS", name]
        for name in (
            "spec",
            "encoding",
            "determinism",
            "checkpoint",
            "observe-private",
            "resolve-failure",
        )
    ]
    assert lines[7].startswith("mean time per call: initialize ")
    assert " us x" in lines[7]
    assert lines[8] == "synthetic-total@1: 6 passed, 0 failed"


def test_a_failure_prints_its_fix_and_exits_1(invoke: Invoke) -> None:
    code, out, _ = _check(invoke, "tests.adapters.test_conformance:Shuffled", "--turns", "3", *PAIR)

    assert code == 1
    [failed] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith("FAIL  determinism      two sessions with seed 0 differ: turn 1")
    after = out.splitlines()[out.splitlines().index(failed) + 1]
    assert after.strip().startswith("fix: draw every random choice from the rng")
    assert "SKIP  checkpoint       needs sessions that the same seed repeats" in out
    assert out.splitlines()[-1] == "cards@1: 4 passed, 1 failed, 1 skipped"


def test_a_single_participant_environment_skips_the_privacy_check(invoke: Invoke) -> None:
    code, out, _ = _check(invoke, "gymnasium:FrozenLake-v1", "--input", '{"seed": 2}')

    assert code == 0, out
    assert "SKIP  observe-private  one participant" in out
    assert out.splitlines()[-1].endswith(": 5 passed, 0 failed, 1 skipped")


def test_an_environment_program_is_checked(invoke: Invoke) -> None:
    code, out, _ = _check(
        invoke, "--command", NIM, "--participant", "a=player", "--participant", "b", "--turns", "4"
    )

    assert code == 0, out
    assert out.splitlines()[0] == f"checking --command {shlex.quote(NIM)}"
    assert out.splitlines()[-1] == "nim@1: 6 passed, 0 failed"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("tests.cli.test_check_env:not_an_environment",),
         "not an environment: not_an_environment() returned int 42"),
        (("envharness.fixtures:SyntheticEnvironmnt",),
         "envharness.fixtures has no attribute 'SyntheticEnvironmnt'; did you mean "
         "SyntheticEnvironment"),
        (("gymnasium:Taxi-v9",), "unknown Gymnasium environment id 'Taxi-v9'; did you mean"),
        ((), "give the environment either as ENVIRONMENT"),
        ((SYNTHETIC, "--command", "python env.py"), "not both"),
        (("node my_env.js",), "looks like a command line"),
        ((SYNTHETIC,), "starting_total"),
        ((SYNTHETIC, "--input", "[1]"), "--input must be a JSON object"),
        ((SYNTHETIC, "--input", '{"starting_total": 1}', "--participant", "=x"),
         "--participant '=x' is not NAME or NAME=ROLE"),
        ((SYNTHETIC, "--input", '{"starting_total": 1}', "--participant", "a=boss"),
         "participant 'a' has role 'boss', which environment 'synthetic-total' does not have"),
        (("--command", "no-such-program-4c1e"), "no-such-program-4c1e"),
    ],
)  # fmt: skip
def test_nothing_to_check_exits_2_naming_why(
    invoke: Invoke, arguments: tuple[str, ...], message: str
) -> None:
    code, out, err = _check(invoke, *arguments)

    assert code == 2, out + err
    assert out == ""
    assert err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err


def test_a_missing_extra_is_named(invoke: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)

    code, _, err = _check(invoke, "gymnasium:Taxi-v4")

    assert code == 2
    assert 'pip install "envharness[gymnasium]"' in err


def test_the_command_is_listed_in_help(invoke: Invoke) -> None:
    listed = invoke("--help").stdout
    helped = invoke("check-env", "--help").stdout

    assert "check-env" in listed
    assert "--command COMMAND" in helped
    assert "--participant NAME[=ROLE]" in helped
