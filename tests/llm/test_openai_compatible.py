"""The OpenAI-compatible provider against a real HTTP server on loopback (both backends)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anyio
import pytest

from envharness.errors import ConfigurationError
from envharness.llm import (
    Message,
    OpenAICompatibleProvider,
    Price,
    Provider,
    ProviderError,
    RetryNotice,
    openai_compatible,
)
from envharness.llm.openai_compatible import retry_after_seconds
from tests.llm._support import KEY, FakeEndpoint, Reply, completion, free_port, status

pytestmark = pytest.mark.anyio

ASK = [Message("system", "You write patches."), Message("user", "Fix it.")]


def provider(url: str, **options: object) -> OpenAICompatibleProvider:
    options.setdefault("backoff", 0.0)
    return OpenAICompatibleProvider(url, "fake-model", **options)  # type: ignore[arg-type]


async def test_a_completion_comes_back_with_its_tokens(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.queue(completion("<think>a</think><patch>[]</patch>", model="fake-model-2024"))
    client = provider(url)
    assert isinstance(client, Provider)
    answer = await client.complete(
        ASK, temperature=0.7, top_p=0.95, max_tokens=300, seed=41, stop=["</patch>"]
    )
    assert answer.text == "<think>a</think><patch>[]</patch>"
    assert answer.model == "fake-model-2024"
    assert (answer.input_tokens, answer.output_tokens) == (11, 7)
    assert answer.finish_reason == "stop"
    assert answer.attempts == 1
    assert answer.usd is None  # no price reported, none configured
    assert answer.seconds > 0
    [request] = fake.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body == {
        "model": "fake-model",
        "messages": [
            {"role": "system", "content": "You write patches."},
            {"role": "user", "content": "Fix it."},
        ],
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 300,
        "seed": 41,
        "stop": ["</patch>"],
    }


async def test_extra_body_and_the_max_tokens_field_are_configurable(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    client = provider(
        url,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        max_tokens_field="max_completion_tokens",
    )
    await client.complete(ASK, max_tokens=50)
    body = fake.requests[0].body
    assert body["max_completion_tokens"] == 50
    assert "max_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_an_endpoint_without_a_key_gets_no_authorization_header(
    endpoint: tuple[FakeEndpoint, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake, url = endpoint
    answer = await provider(url, api_key_env=None).complete(ASK)
    assert answer.text == "default answer"
    assert "authorization" not in fake.requests[0].headers


async def test_429_with_retry_after_is_waited_out_then_succeeds(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.queue(status(429, '{"error": "slow down"}', {"Retry-After": "0"}), completion("done"))
    notices: list[RetryNotice] = []
    # A backoff step of 10 s would be waited if Retry-After were ignored.
    client = provider(url, backoff=10.0, on_retry=notices.append)
    answer = await client.complete(ASK)
    assert answer.text == "done"
    assert answer.attempts == 2
    assert len(fake.requests) == 2
    [notice] = notices
    assert (notice.attempt, notice.status, notice.delay) == (1, 429, 0.0)
    assert "slow down" in notice.reason


async def test_a_retry_after_longer_than_allowed_fails_at_once(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.queue(status(503, "maintenance", {"Retry-After": "3600"}))
    with pytest.raises(ProviderError, match="asked to wait 3600 s, more than max_retry_after=60"):
        await provider(url, max_retry_after=60).complete(ASK)
    assert len(fake.requests) == 1


async def test_server_errors_exhaust_the_retries(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.default = status(500, '{"error": "boom"}')
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        await provider(url, retries=2, on_retry=notices.append).complete(ASK)
    error = caught.value
    assert (error.status, error.attempts) == (500, 3)
    assert len(fake.requests) == 3
    assert [notice.attempt for notice in notices] == [1, 2]
    assert "failed after 3 attempts: 500 Internal Server Error" in str(error)
    assert '{"error": "boom"}' in str(error)
    assert url in str(error)


async def test_a_refusal_is_not_retried_and_says_what_to_check(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    # Some endpoints echo the key they were given: it must be redacted from the message.
    fake.default = status(401, json.dumps({"error": f"Incorrect API key provided: {KEY}"}))
    with pytest.raises(ProviderError) as caught:
        await provider(url, retries=3).complete(ASK)
    message = str(caught.value)
    assert len(fake.requests) == 1
    assert caught.value.status == 401
    assert "was refused: 401 Unauthorized" in message
    assert "Incorrect API key provided: [redacted]" in message
    assert "$OPENAI_API_KEY" in message
    assert KEY not in message


async def test_a_missing_route_names_base_url_and_model(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    _, url = endpoint
    with pytest.raises(ProviderError, match=r"404 Not Found.*check base_url"):
        await provider(url.removesuffix("/v1") + "/v2", retries=3).complete(ASK)


async def test_a_slow_answer_times_out(endpoint: tuple[FakeEndpoint, str], api_key: str) -> None:
    fake, url = endpoint
    fake.default = Reply(body=completion("late").body, delay=30.0)
    with pytest.raises(ProviderError, match=r"failed after 2 attempts: no complete answer within"):
        # Long enough for a loaded machine's server thread to read each request before the
        # client gives up on it, so the count below is what was sent.
        await provider(url, timeout=1.0, retries=1).complete(ASK)
    assert await anyio.to_thread.run_sync(fake.wait_for_requests, 2)
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>gateway says hi</html>", "is not a chat completion"),
        (b'{"choices": "no"}', "is not a chat completion"),
        (b'{"object": "chat.completion"}', "is not a chat completion"),
        (b'{"choices": []}', "has no choices"),
        (
            b'{"choices": [{"message": {"content": null}, "finish_reason": "length"}]}',
            "has no text (finish_reason='length')",
        ),
    ],
)
async def test_garbage_is_retried_then_named(
    endpoint: tuple[FakeEndpoint, str], api_key: str, body: bytes, problem: str
) -> None:
    fake, url = endpoint
    fake.default = Reply(body=body)
    with pytest.raises(ProviderError) as caught:
        await provider(url, retries=1).complete(ASK)
    assert problem in str(caught.value)
    assert caught.value.attempts == 2
    assert len(fake.requests) == 2


async def test_garbage_then_a_good_answer_succeeds(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.queue(Reply(body=b"not json"), completion("fine"))
    assert (await provider(url).complete(ASK)).text == "fine"


@pytest.mark.parametrize("chunked", [False, True])
async def test_an_oversized_answer_is_refused(
    endpoint: tuple[FakeEndpoint, str],
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
    chunked: bool,
) -> None:
    fake, url = endpoint
    monkeypatch.setattr(openai_compatible, "MAX_BODY_BYTES", 1000)
    fake.default = Reply(body=b"x" * 5000, chunked=chunked)
    with pytest.raises(ProviderError, match="answer larger than 1000 bytes"):
        await provider(url, retries=0).complete(ASK)


async def test_an_endpoint_that_is_down_is_retried_then_named(api_key: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ProviderError, match=r"failed after 2 attempts: ConnectError") as caught:
        await provider(url, retries=1).complete(ASK)
    assert caught.value.status is None


async def test_a_price_table_prices_the_tokens(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.queue(
        completion("a", model="fake-model", prompt_tokens=1000, completion_tokens=500),
        completion("b", model="fake-model-2024-01", prompt_tokens=2_000_000, completion_tokens=0),
        completion("c", prompt_tokens=10, completion_tokens=10, extra_usage={"cost": 0.25}),
    )
    client = provider(
        url, prices={"fake-model": Price(input_per_million=2.0, output_per_million=8.0)}
    )
    first, second, third = [await client.complete(ASK) for _ in range(3)]
    assert first.usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    # A dated model name the table does not know falls back to the requested model's price.
    assert second.usd == pytest.approx(4.0)
    # A price the gateway reports wins over the table.
    assert third.usd == 0.25
    cost = first.cost()
    assert (cost.input_tokens, cost.output_tokens, cost.model) == (1000, 500, "fake-model")
    assert cost.usd == first.usd


async def test_an_open_provider_reuses_its_connection_pool(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    async with provider(url) as client:
        answers = [await client.complete(ASK) for _ in range(3)]
        with pytest.raises(RuntimeError, match="already open"):
            await client.__aenter__()
    assert [answer.text for answer in answers] == ["default answer"] * 3
    assert len({request.peer for request in fake.requests}) == 1  # one connection


def test_a_missing_key_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_LLM_KEY", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", "m", api_key_env="MY_LLM_KEY")
    message = str(caught.value)
    assert "MY_LLM_KEY" in message
    assert "api_key_env=None" in message
    monkeypatch.setenv("MY_LLM_KEY", "  ")
    with pytest.raises(ConfigurationError, match="MY_LLM_KEY"):
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", "m", api_key_env="MY_LLM_KEY")


def test_the_key_is_not_in_the_repr(api_key: str) -> None:
    client = OpenAICompatibleProvider("https://api.example.com/v1", "m")
    assert KEY not in repr(client)
    assert KEY not in str(vars(client).get("_url"))
    assert "$OPENAI_API_KEY" in repr(client)


@pytest.mark.parametrize(
    ("base_url", "problem"),
    [
        ("api.openai.com/v1", "must be an http(s) URL with a host"),
        ("ftp://host/v1", "must be an http(s) URL with a host"),
        ("http://user:pw@host/v1", "must not carry credentials"),
        ("http://host/v1/chat/completions", "pass the API root ('http://host/v1')"),
    ],
)
def test_a_bad_base_url_is_named(api_key: str, base_url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAICompatibleProvider(base_url, "m")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"timeout": 0}, "timeout must be more than 0"),
        ({"timeout": float("nan")}, "timeout must be a finite number"),
        ({"retries": -1}, "retries must be an integer >= 0"),
        ({"backoff": -1.0}, "backoff must be a finite number >= 0"),
    ],
)
def test_bad_settings_are_named(api_key: str, options: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", "m", **options)  # type: ignore[arg-type]


def test_a_model_is_required(api_key: str) -> None:
    with pytest.raises(ConfigurationError, match="model must name the model"):
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", " ")


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(" 1.5 ") == 1.5
    assert retry_after_seconds("-4") == 0.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30)), now=now) == 30.0
    assert retry_after_seconds(format_datetime(now - timedelta(seconds=30)), now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("nan") is None
    assert retry_after_seconds(None) is None


def test_from_env_reads_the_api_root(api_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    default = OpenAICompatibleProvider.from_env("m")
    assert default.url == "https://api.openai.com/v1/chat/completions"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1/")
    local = OpenAICompatibleProvider.from_env("m", timeout=5.0)
    assert local.url == "http://127.0.0.1:8000/v1/chat/completions"
    explicit = OpenAICompatibleProvider.from_env("m", base_url="http://10.0.0.2:9000/v1")
    assert explicit.url == "http://10.0.0.2:9000/v1/chat/completions"


async def test_a_redirect_is_refused_naming_where_it_points(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.default = status(308, "", {"Location": "https://elsewhere.example/v1/chat/completions"})
    with pytest.raises(ProviderError) as caught:
        await provider(url, retries=3).complete(ASK)
    assert "308 Permanent Redirect" in str(caught.value)
    assert "redirects to https://elsewhere.example/v1/chat/completions" in str(caught.value)
    assert len(fake.requests) == 1  # never followed: the key must not travel to another host


async def test_max_concurrency_caps_the_requests_in_flight_across_callers(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.default = Reply(body=completion("ok").body, delay=0.05)
    client = provider(url, max_concurrency=2)
    answers: list[str] = []

    async def ask() -> None:
        answers.append((await client.complete(ASK)).text)

    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(ask)
    assert answers == ["ok"] * 6
    assert fake.max_in_flight == 2


async def test_a_retry_after_one_caller_is_given_holds_back_every_caller(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.queue(status(429, "slow down", {"Retry-After": "1"}))
    client = provider(url)
    assert client._quiet_until == 0.0
    await client.complete(ASK)  # told to wait 1 s, waited, answered
    assert client._quiet_until > 0.0, "the endpoint's wait was not kept for the other callers"
    client._quiet_until = float("inf")  # as if the endpoint had just said "wait" to another
    served = len(fake.requests)
    with anyio.move_on_after(0.2) as waiting:
        await client.complete(ASK)
    assert waiting.cancelled_caught
    assert len(fake.requests) == served, "a caller went ahead while the endpoint asked to wait"


def test_max_concurrency_must_be_a_positive_integer() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError, match="max_concurrency must be an integer >= 1"):
            OpenAICompatibleProvider(
                "http://127.0.0.1:9/v1", "m", api_key_env=None, max_concurrency=bad
            )  # type: ignore[arg-type]
