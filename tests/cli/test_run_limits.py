"""The limits a run plays under, said out loud: a session cut by ``--turns`` is named on
stderr, and ``--max-blocks`` / ``--on-block-limit`` reach the harness whose hooks they govern
(``run`` and ``optimize``), bad values refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import BlockAndPrompt, HookContext, Hooks, Scenario
from envharness.cli.loading import command_line_harness
from envharness.records import SessionCreated
from envharness.runtime.plan import turn_limit_note
from tests.cli._support import Invoke

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
AGENT = "envharness.fixtures:SyntheticAgent"


def test_the_note_counts_only_sessions_cut_by_the_turn_limit() -> None:
    assert turn_limit_note(["done", "truncated", None], 20) is None
    assert turn_limit_note([], 20) is None
    assert turn_limit_note(["turn_limit", "done"], 20) == (
        "1 session ended by the turn limit (turns=20), not by the environment; "
        "pass --turns to play longer"
    )
    note = turn_limit_note(["turn_limit"] * 3, 5, "raise turns")
    assert (
        note == "3 sessions ended by the turn limit (turns=5), not by the environment; raise turns"
    )


def test_a_run_cut_by_the_turn_limit_says_so(invoke: Invoke, store_path: Path) -> None:
    result = invoke(
        "--store", store_path, "run", SYNTHETIC, "--agent", f"alice={AGENT}", "--turns", "1",
        "--input", '{"starting_total": 5, "target": 0}',
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "note: 1 session ended by the turn limit (turns=1), not by the environment; "
        "pass --turns to play longer\n"
    )


def test_a_manifest_cut_by_its_turns_says_so(invoke: Invoke, tmp_path: Path) -> None:
    manifest = tmp_path / "experiment.toml"
    manifest.write_text(
        '[experiment]\nname = "cut"\nturns = 1\ntrials = 2\n\n'
        f'[environment]\nfactory = "{SYNTHETIC}"\n\n[agents.alice]\nfactory = "{AGENT}"\n\n'
        '[[scenarios.items]]\nid = "far"\ninput = { starting_total = 5, target = 0 }\n'
    )
    result = invoke("--store", tmp_path / "store", "run", manifest)
    assert result.exit_code == 0, result.stderr
    assert "note: 2 sessions ended by the turn limit (turns=1), not by the environment; " in (
        result.stderr
    )
    assert "raise the manifest's turns" in result.stderr


@pytest.mark.parametrize("command", ["run", "optimize"])
def test_a_bad_block_limit_policy_is_refused(
    invoke: Invoke, store_path: Path, command: str
) -> None:
    where = [SYNTHETIC] if command == "run" else ["--environment", SYNTHETIC]
    result = invoke(
        "--store", store_path, command, *where, "--agent", f"alice={AGENT}", "--turns", "1",
        "--on-block-limit", "last",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--on-block-limit 'last' is not one of: skip, run_last" in result.output


def test_max_blocks_must_be_positive(invoke: Invoke, store_path: Path) -> None:
    result = invoke(
        "--store", store_path, "run", SYNTHETIC, "--agent", f"alice={AGENT}", "--turns", "1",
        "--max-blocks", "0",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--max-blocks" in result.output


def test_run_says_the_block_limit_needs_hooks(invoke: Invoke, store_path: Path) -> None:
    result = invoke(
        "--store", store_path, "run", SYNTHETIC, "--agent", f"alice={AGENT}", "--turns", "1",
        "--input", '{"starting_total": 0}', "--on-block-limit", "run_last",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "run with --agent runs no hooks" in result.stderr


def refuse(ctx: HookContext, nb: dict[str, Any]) -> BlockAndPrompt:
    return BlockAndPrompt(message="no")


def test_the_command_line_harness_runs_hooks_under_the_given_policy(store_path: Path) -> None:
    """What ``optimize`` reruns with: the options reach every hooked session's configuration."""
    harness = command_line_harness(
        store_path, SYNTHETIC, [f"alice={AGENT}"], None, max_blocks=2, on_block_limit="run_last"
    )
    hooks = Hooks("refuse@1", on_before_action=refuse)

    async def created() -> Any:
        session = await harness.run(
            Scenario(id="s", input={"starting_total": 0}), turns=1, hooks=hooks
        )
        async for record in harness.records(session.id):
            return record.payload
        raise AssertionError("no records")

    first = anyio.run(created)
    assert isinstance(first, SessionCreated)
    assert (first.config.max_blocks, first.config.on_block_limit) == (2, "run_last")
