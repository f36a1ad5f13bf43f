"""SFT pairs from a store: the engineer's own prompt, the accepted answer, admitted evidence."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness.api.harness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.hooks import HookView
from envharness.llm import load_prompt, render_packet
from envharness.optimizer import (
    HarnessOptimizer,
    OptimizationConfig,
    ScriptedEngineer,
    parse_answer,
)
from tests.research.conftest import script
from tests.research.test_rerun import PRECONDITION, answer

DESK = "envharness.demos.support_desk:SupportDesk"


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ScriptedEngineer]:
    """A store holding one optimizer run that accepted the precondition patch as harness-v1."""
    store = tmp_path_factory.mktemp("sft") / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )
    engineer = ScriptedEngineer(["no patch here", answer(PRECONDITION)])
    config = OptimizationConfig(candidates=2, iterations=2, turns=8, sandbox="local", alpha=None)
    result = HarnessOptimizer(harness, engineer, config=config).optimize(tickets(4))
    assert result.accepted_version == "harness-v1"
    return store, engineer


def build(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*script("build_sft_dataset.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_pairs_use_the_engineers_prompt_and_the_accepted_answer(
    optimized: tuple[Path, ScriptedEngineer], tmp_path: Path
) -> None:
    store, engineer = optimized
    out = tmp_path / "sft.jsonl"
    done = build("--store", str(store), "--environment", DESK, "--out", str(out),
                 "--entitle-training", "own evaluation data")  # fmt: skip
    assert done.returncode == 0, done.stderr
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    shown = render_packet(load_prompt("engineer-v1"), engineer.packets[0])
    assert row["prompt"] == [{"role": m.role, "content": m.content} for m in shown]
    [message] = row["completion"]
    assert message["role"] == "assistant"
    parsed = parse_answer(message["content"])
    assert parsed.think == "refund needs a lookup"
    assert parsed.patch == parse_answer(answer(PRECONDITION)).patch
    assert row["version"] == "harness-v1"
    assert row["dataset"].startswith("dst_")
    assert row["mean_reward"] == 1.0


def test_the_rows_train_with_sft(optimized: tuple[Path, ScriptedEngineer], tmp_path: Path) -> None:
    from research.conversations import read_rows
    from research.training import SFTSettings, train_sft

    store, _ = optimized
    out = tmp_path / "sft.jsonl"
    assert build("--store", str(store), "--environment", DESK, "--out", str(out),
                 "--entitle-training", "own evaluation data").returncode == 0  # fmt: skip
    record = train_sft("tiny", read_rows(out), tmp_path / "ckpt", SFTSettings(max_steps=1))
    assert record["global_step"] == 1
    assert "rows_too_long" not in record


def test_without_an_entitlement_nothing_is_written(
    optimized: tuple[Path, ScriptedEngineer], tmp_path: Path
) -> None:
    store, _ = optimized
    out = tmp_path / "sft.jsonl"
    done = build("--store", str(store), "--environment", DESK, "--out", str(out))
    assert done.returncode == 2
    assert "--entitle-training BASIS" in done.stderr
    assert not out.exists()


def test_evidence_in_a_snapshot_without_entitlement_is_refused_by_name(
    optimized: tuple[Path, ScriptedEngineer], tmp_path: Path
) -> None:
    import anyio

    from envharness.store import open_store
    from envharness.trajectories.snapshots import freeze

    store, _ = optimized

    async def unentitled() -> tuple[str, list[str]]:
        async with open_store(store) as opened:
            sessions = [info.id for info in await opened.sessions()]
            snapshot = await freeze(opened, sessions, label="no entitlement")
            return snapshot.metadata.id, sessions

    snapshot, sessions = anyio.run(unentitled)
    done = build("--store", str(store), "--environment", DESK, "--out", str(tmp_path / "o.jsonl"),
                 "--snapshot", snapshot)  # fmt: skip
    assert done.returncode == 2
    assert "training-entitled" in done.stderr
    assert any(session in done.stderr for session in sessions)


def test_a_store_without_accepted_patches_has_nothing_to_learn(tmp_path: Path) -> None:
    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )
    config = OptimizationConfig(candidates=1, iterations=1, turns=8, sandbox="local", alpha=None)
    HarnessOptimizer(harness, ScriptedEngineer(["nothing"]), config=config).optimize(tickets(2))
    out = tmp_path / "sft.jsonl"
    done = build("--store", str(store), "--environment", DESK, "--out", str(out))
    assert done.returncode == 0
    assert "nothing to learn from" in done.stderr
    assert out.read_text() == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--environment", "no_such_module:Env"], "no_such_module"),
        (["--environment", DESK, "--run", "opt_missing"], "no optimizer run opt_missing"),
    ],
)
def test_bad_input_is_named(
    optimized: tuple[Path, ScriptedEngineer], tmp_path: Path, args: list[str], message: str
) -> None:
    store, _ = optimized
    done = build("--store", str(store), "--out", str(tmp_path / "o.jsonl"),
                 "--entitle-training", "x", *args)  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_store_is_named(tmp_path: Path) -> None:
    done = build("--store", str(tmp_path / "nope"), "--environment", DESK, "--out", "x.jsonl")
    assert done.returncode == 2
    assert "there is no store" in done.stderr


def test_non_terminal_evidence_is_refused_by_name(tmp_path: Path) -> None:
    """A paused session (not terminal) among the evidence: the datasets layer refuses it."""
    from envharness.store import open_store
    from envharness.trajectories.errors import AdmissionError
    from research.sft_data import admit_evidence

    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )

    def pause_after_one(session_id: str, completed: int, planned: int) -> None:
        if completed == 1:
            harness.pause(session_id)

    async def sessions() -> tuple[str, str]:
        done = await harness.run(tickets(1)[0], turns=8)
        paused = await harness.run(tickets(2)[1], turns=8, progress=pause_after_one)
        assert (done.status, paused.status) == ("completed", "paused")
        return done.id, paused.id

    done, paused = anyio.run(sessions)

    async def admit() -> None:
        async with open_store(store) as opened:
            await admit_evidence(opened, [done, paused], name="sft-test", entitlement="ours")

    with pytest.raises(AdmissionError) as refused:
        anyio.run(admit)
    assert paused in str(refused.value)
    assert "terminal" in str(refused.value)
    assert done not in str(refused.value)


class _RelabelledDesk(SupportDesk):
    """The same environment, its hook view since changed: a packet rebuilt now would differ."""

    def hook_view(self, state: Any, participant: str) -> HookView:
        view = super().hook_view(state, participant)
        return msgspec.structs.replace(view, state={**view.state, "since_renamed": True})


async def _pairs(store: Path, environment: Any) -> tuple[list[Any], list[str]]:
    from envharness.store import open_store
    from research.sft_data import sft_pairs

    async with open_store(store, create=False) as opened:
        return await sft_pairs(opened, environment)


def test_the_recorded_packet_is_the_prompt_not_a_rebuilt_one(
    optimized: tuple[Path, ScriptedEngineer],
) -> None:
    store, engineer = optimized
    [pair], notes = anyio.run(_pairs, store, _RelabelledDesk())
    shown = render_packet(load_prompt("engineer-v1"), engineer.packets[0])
    assert pair.messages == tuple({"role": m.role, "content": m.content} for m in shown)
    assert "since_renamed" not in json.dumps(pair.messages)
    assert notes == []


def test_a_run_recorded_before_packets_were_has_its_packet_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older runs have no ``failure-packet`` artifact: it is rebuilt as the loop built it."""
    from envharness.optimizer.runlog import RunLog
    from envharness.records import Artifact

    async def not_recorded(self: RunLog, iteration: int, packet: Any) -> Artifact:
        return Artifact(name="not recorded", sha256="0" * 64, size=0)

    monkeypatch.setattr(RunLog, "packet", not_recorded)
    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )
    engineer = ScriptedEngineer([answer(PRECONDITION)])
    config = OptimizationConfig(candidates=1, iterations=1, turns=8, sandbox="local", alpha=None)
    assert HarnessOptimizer(harness, engineer, config=config).optimize(tickets(4)).versions
    [pair], _ = anyio.run(_pairs, store, SupportDesk())
    shown = render_packet(load_prompt("engineer-v1"), engineer.packets[0])
    assert pair.messages == tuple({"role": m.role, "content": m.content} for m in shown)
