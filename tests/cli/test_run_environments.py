"""``run`` and ``resume`` with adapted environments: ``--environment gymnasium:ID`` (or as the
argument), ``--environment-command "PROGRAM"``, and the mistakes around them."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.adapters.gymnasium import GymnasiumEnvironment
from tests.cli._support import ROOT, Invoke

NIM = shlex.join([sys.executable, str(ROOT / "environments" / "python" / "nim.py")])
WALKER = "walker=tests.cli.test_run_environments:Walker"


class Walker:
    """Always the same move: right on FrozenLake, south in Taxi."""

    implementation = "walker@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"action": 0 if "action_mask" in observation else 2}


class Taker:
    """Takes one stone from the first heap that has any."""

    implementation = "taker@1"

    def act(self, observation: dict[str, Any]) -> dict[str, int]:
        heap = next(i for i, stones in enumerate(observation["heaps"]) if stones)
        return {"heap": heap, "take": 1}


class Caller:
    """Calls (or checks) whenever it may: the first legal action."""

    implementation = "caller@1"

    def act(self, observation: dict[str, Any]) -> dict[str, int]:
        return {"action": observation["legal_actions"][0]}


def _run(invoke: Invoke, store: Path, *args: str) -> tuple[int, str, str]:
    result = invoke("--store", store, "run", *args)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("how", ["--environment", "argument"])
def test_a_gymnasium_id_runs_until_the_episode_ends(
    invoke: Invoke, store_path: Path, how: str
) -> None:
    given = ("--environment", "gymnasium:FrozenLake-v1") if how != "argument" else (
        "gymnasium:FrozenLake-v1",
    )  # fmt: skip
    code, out, err = _run(
        invoke, store_path, *given, "--agent", WALKER, "--turns", "100", "--input", '{"seed": 1}'
    )

    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("status  completed after ")
    assert lines[2].startswith("reason  the environment ")  # reported done, or truncated it
    assert int(lines[1].split()[3]) < 100


def test_an_environment_program_runs_with_environment_command(
    invoke: Invoke, store_path: Path
) -> None:
    taker = "tests.cli.test_run_environments:Taker"
    code, out, err = _run(
        invoke, store_path, "--environment-command", NIM, "--agent", f"first={taker}",
        "--agent", f"second={taker}", "--turns", "50", "--input", '{"heaps": [2, 1]}',
    )  # fmt: skip

    assert code == 0, err
    assert out.splitlines()[1] == "status  completed after 3 turns"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("gymnasium:Taxi-v4", "--environment", "gymnasium:Taxi-v4"),
         "the environment is given twice"),
        (("gymnasium:Taxi-v4", "--environment-command", NIM), "not both"),
        (("--environment", "gymnasium:Taxee-v4"),
         "--environment 'gymnasium:Taxee-v4': unknown Gymnasium environment id 'Taxee-v4'; did "
         "you mean Taxi-v4?"),
        (("--environment", "pettingzoo:classic.leduc_holdem_v9"), "leduc_holdem_v4"),
        (("--environment", "textworld:nowhere.z8"), "no game file at"),
        (("node my_env.js",), "looks like a command line: give a program that speaks the "
         "environment protocol as --environment-command 'node my_env.js'"),
        (("--environment-command", "no-such-program-4c1e"), "no-such-program-4c1e"),
        ((), "give the environment either as ENVIRONMENT"),
    ],
)  # fmt: skip
def test_environment_mistakes_are_named_and_write_nothing(
    invoke: Invoke, store_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    code, out, err = _run(invoke, store_path, *arguments, "--agent", WALKER, "--turns", "3")

    assert code == 2, out + err
    assert out == ""
    assert err.startswith("error: ")
    assert message in err
    assert not store_path.exists()


def test_a_missing_extra_is_named(
    invoke: Invoke, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pettingzoo", None)

    code, _, err = _run(
        invoke, store_path, "--environment", "pettingzoo:classic.rps_v2", "--agent", WALKER,
        "--turns", "1",
    )  # fmt: skip

    assert code == 2
    assert 'pip install "envharness[pettingzoo]"' in err


def test_a_manifest_names_a_pettingzoo_game(invoke: Invoke, tmp_path: Path) -> None:
    manifest = tmp_path / "poker.toml"
    manifest.write_text(
        'environment = "pettingzoo:classic.leduc_holdem_v4"\n\n'
        '[experiment]\nname = "poker"\nturns = 20\n\n'
        '[agents.player_0]\nfactory = "tests.cli.test_run_environments:Caller"\n\n'
        '[agents.player_1]\nfactory = "tests.cli.test_run_environments:Caller"\n\n'
        '[[scenarios.items]]\nid = "hand"\ninput = { seed = 4 }\n'
    )

    code, out, err = _run(invoke, tmp_path / "store", str(manifest))

    assert code == 0, err
    assert "scenario hand  trial 0" in out
    assert "1 completed, 0 failed of 1" in out.splitlines()


def test_a_manifest_refuses_environment_options(invoke: Invoke, tmp_path: Path) -> None:
    manifest = tmp_path / "experiment.toml"
    manifest.write_text("[experiment]\n")

    code, _, err = _run(invoke, tmp_path / "s", str(manifest), "--environment", "gymnasium:Taxi-v4")

    assert code == 2
    assert "--environment cannot be given with a manifest" in err


def stopped_taxi(store: Path) -> str:
    """A Taxi session stopped after two turns."""

    async def main() -> str:
        harness = AsyncEnvironmentHarness(
            store, environment=GymnasiumEnvironment("Taxi-v4"), agents={"driver": Walker}
        )
        ids: list[str] = []
        two = anyio.Event()

        def progress(session_id: str, completed: int, planned: int) -> None:
            ids.append(session_id)
            if completed == 2:
                two.set()

        scenario = Scenario(id="taxi", input={"seed": 5})
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: harness.run(scenario, turns=8, progress=progress))
            await two.wait()
            group.cancel_scope.cancel()
        return ids[0]

    return anyio.run(main)


def test_resume_takes_the_environment_as_an_option(invoke: Invoke, store_path: Path) -> None:
    session_id = stopped_taxi(store_path)

    result = invoke(
        "--store", store_path, "resume", session_id, "--environment", "gymnasium:Taxi-v4",
        "--agent", "driver=tests.cli.test_run_environments:Walker",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"resumed {session_id}: completed after 8 turns"
    assert invoke("--store", store_path, "verify").exit_code == 0
