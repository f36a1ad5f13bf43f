"""The loopback OpenAI-compatible server, spoken to by envharness's own provider and engineer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from envharness.llm import Message, ModelEngineer, OpenAICompatibleProvider, ProviderError
from envharness.optimizer import FailurePacket
from research.serve_openai import ChatModel, serving

pytestmark = pytest.mark.anyio

KEY_ENV = "RESEARCH_TEST_SERVER_KEY"


@pytest.fixture(scope="module")
def tiny_chat(tiny_model: Path) -> ChatModel:
    return ChatModel.load(str(tiny_model), name="tiny-engineer")


@pytest.fixture(scope="module")
def api_root(tiny_chat: ChatModel) -> Iterator[str]:
    with serving(tiny_chat) as root:
        yield root


@pytest.fixture
def provider(api_root: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(api_root, "tiny-engineer", api_key_env=None, retries=0)


async def test_the_provider_gets_a_completion_with_token_counts(
    provider: OpenAICompatibleProvider,
) -> None:
    completion = await provider.complete(
        [Message("user", "Failure 1: issue_refund before lookup_order.")], max_tokens=8, seed=1
    )
    assert completion.model == "tiny-engineer"
    assert completion.input_tokens
    assert completion.input_tokens > 5
    assert completion.output_tokens is not None
    assert 0 < completion.output_tokens <= 8
    assert completion.finish_reason in {"stop", "length"}


async def test_the_same_seed_samples_the_same_answer(provider: OpenAICompatibleProvider) -> None:
    messages = [Message("user", "Failure 2: issue_refund before lookup_order.")]
    first = await provider.complete(messages, temperature=0.7, top_p=0.95, max_tokens=12, seed=7)
    again = await provider.complete(messages, temperature=0.7, top_p=0.95, max_tokens=12, seed=7)
    assert first.text == again.text


async def test_the_model_engineer_proposes_through_the_server(
    provider: OpenAICompatibleProvider,
) -> None:
    engineer = ModelEngineer(provider, max_tokens=16, max_concurrency=2)
    packet = FailurePacket(environment="support-desk", hooks=("on_before_action",))
    proposals = await engineer.propose(packet, 3, seed=0)
    assert len(proposals) == 3
    assert all(p.error is None and p.cost is not None for p in proposals)
    assert all(p.cost and p.cost.output_tokens for p in proposals)


async def test_a_wrong_model_name_is_refused_naming_the_served_one(api_root: str) -> None:
    wrong = OpenAICompatibleProvider(api_root, "gpt-4o", api_key_env=None, retries=0)
    with pytest.raises(ProviderError, match="tiny-engineer"):
        await wrong.complete([Message("user", "hi")], max_tokens=4)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "tiny-engineer", "messages": []}, "messages must not be empty"),
        ({"model": "tiny-engineer", "messages": [{"role": "user"}]}, "text content"),
        ({"model": "tiny-engineer", "messages": [{"role": "user", "content": "x"}], "n": 2},
         "n=2 is not supported"),
        ({"model": "tiny-engineer", "messages": [{"role": "user", "content": "x"}],
          "stream": True}, "stream=true is not supported"),
        ({"model": "tiny-engineer", "messages": [{"role": "user", "content": "x"}],
          "max_tokens": 100000}, "max_tokens must be between"),
        ({"messages": [{"role": "user", "content": "x"}]}, "invalid request"),
    ],
)  # fmt: skip
def test_bad_requests_get_a_400_that_says_why(
    api_root: str, body: dict[str, object], message: str
) -> None:
    answer = httpx.post(f"{api_root}/chat/completions", json=body, timeout=30)
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]


def test_a_body_that_is_not_json_is_refused(api_root: str) -> None:
    answer = httpx.post(f"{api_root}/chat/completions", content=b"{", timeout=30)
    assert answer.status_code == 400
    assert "not JSON" in answer.json()["error"]["message"]


def test_models_lists_the_served_model(api_root: str) -> None:
    answer = httpx.get(f"{api_root}/models", timeout=30)
    assert [m["id"] for m in answer.json()["data"]] == ["tiny-engineer"]


async def test_with_a_key_only_the_right_bearer_gets_in(
    tiny_chat: ChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "local-secret-for-the-test")
    with serving(tiny_chat, api_key="local-secret-for-the-test") as root:
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{root}/models", timeout=30)).status_code == 401
        keyed = OpenAICompatibleProvider(root, "tiny-engineer", api_key_env=KEY_ENV, retries=0)
        completion = await keyed.complete([Message("user", "hi")], max_tokens=4)
        assert completion.output_tokens is not None
