"""Any OpenAI-compatible ``chat/completions`` endpoint, over httpx (asyncio or trio).

Hosted APIs, vLLM, llama.cpp's server, Ollama and most gateways speak this wire format, so one
client covers them. What it adds to a bare POST is what an unattended optimizer run needs:

- **retries** on 429, 408, 409, 5xx, connection errors, timeouts and garbage answers, with
  exponential backoff and jitter, honouring ``Retry-After``; a refusal (any other 4xx) fails at
  once with the status and an excerpt of the answer, since asking again cannot help;
- **a deadline per attempt** (``timeout``) that covers connecting, waiting and reading the body,
  and a cap on the body's size, so a stuck or babbling endpoint cannot hang a run;
- **cost accounting**: the endpoint's token counts, and a price from the endpoint or from an
  optional price table;
- **the key stays secret**: read once from an environment variable, sent only as the
  ``Authorization`` header, never stored in evidence, never in a message or ``repr`` (any text
  that might echo it is redacted).
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import math
import os
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.lowlevel
import httpx
import msgspec

from envharness.errors import ConfigurationError
from envharness.llm.prices import published_price
from envharness.llm.provider import Completion, Message, Price, ProviderError, ToolCall

__all__ = [
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "MAX_BODY_BYTES",
    "OpenAICompatibleProvider",
    "RetryNotice",
    "retry_after_seconds",
]

logger = logging.getLogger("envharness.llm")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"
"""The variable :meth:`OpenAICompatibleProvider.from_env` reads the API root from (the same one
the official OpenAI SDK reads)."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Answers larger than this are garbage for a chat completion; reading stops there."""
EXCERPT_CHARS = 400
"""How much of a refused or malformed answer an error message quotes."""
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""Statuses worth asking again for (besides any other 5xx)."""


class RetryNotice(msgspec.Struct, frozen=True, kw_only=True):
    """One retry about to happen: after ``attempt`` failed, wait ``delay`` seconds."""

    attempt: int
    delay: float
    reason: str
    status: int | None = None


class _Function(msgspec.Struct, frozen=True):
    name: str = ""
    # The standard is a JSON string; a few servers send the object itself.
    arguments: str | dict[str, Any] | list[Any] | None = None


class _ToolCall(msgspec.Struct, frozen=True):
    function: _Function
    id: str | None = None


class _ResponseMessage(msgspec.Struct, frozen=True):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct, frozen=True):
    message: _ResponseMessage
    finish_reason: str | None = None


class _Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None  # some gateways (OpenRouter, LiteLLM) report the price


class _ChatResponse(msgspec.Struct, frozen=True):
    choices: list[_Choice]
    model: str | None = None
    usage: _Usage | None = None


_decode_response = msgspec.json.Decoder(_ChatResponse)


class _Retryable(Exception):
    """Internal: this attempt failed in a way worth another; never escapes ``complete``."""

    def __init__(self, reason: str, status: int | None = None, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.wait = wait


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date), if valid."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class OpenAICompatibleProvider:
    """A chat model behind an OpenAI-compatible endpoint.

    ``base_url`` is the API root (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``);
    the key is read from the environment variable ``api_key_env`` (``None`` for a local server
    that needs none). ``timeout`` bounds each attempt; ``retries`` more attempts follow a
    retryable failure, waiting ``backoff * 2**n`` seconds (capped at ``max_backoff``, with
    jitter) or what ``Retry-After`` asks, up to ``max_retry_after``. ``prices`` maps model names
    to :class:`Price` for endpoints that report no price; without one, a call to OpenAI's own API
    is priced from :data:`~envharness.llm.prices.OPENAI_PRICES`. ``extra_body`` is merged into every
    request (e.g. ``{"chat_template_kwargs": {"enable_thinking": False}}`` for a vLLM server).
    ``supports_tools`` says whether a caller should offer the model tools (a model agent then
    asks for its action as a tool call, and falls back to plain text if the endpoint refuses).
    ``max_concurrency`` caps the requests in flight through this provider at once — one
    provider serves every session of a model agent, so it is a cap per endpoint — and a
    ``Retry-After`` one caller is given holds back every caller of the provider until then.

    Used as ``async with provider:`` it keeps one connection pool for its calls; otherwise each
    call opens and closes its own connection.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_retry_after: float = 120.0,
        prices: Mapping[str, Price] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_tokens_field: str = "max_tokens",
        on_retry: Callable[[RetryNotice], None] | None = None,
        name: str = "openai",
        supports_tools: bool = True,
        max_concurrency: int | None = None,
    ) -> None:
        self._url = _chat_url(base_url)
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("model must name the model to ask for, e.g. 'gpt-4o-mini'")
        for label, value, minimum in (
            ("timeout", timeout, 0.0),
            ("backoff", backoff, 0.0),
            ("max_backoff", max_backoff, 0.0),
            ("max_retry_after", max_retry_after, 0.0),
        ):
            if not isinstance(value, int | float) or not value >= minimum or value == math.inf:
                raise ConfigurationError(f"{label} must be a finite number >= 0, not {value!r}")
        if timeout <= 0:
            raise ConfigurationError(f"timeout must be more than 0 seconds, not {timeout!r}")
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ConfigurationError(f"retries must be an integer >= 0, not {retries!r}")
        if max_concurrency is not None and (
            not isinstance(max_concurrency, int)
            or isinstance(max_concurrency, bool)
            or max_concurrency < 1
        ):
            raise ConfigurationError(
                f"max_concurrency must be an integer >= 1 or None, not {max_concurrency!r}"
            )
        self._key = _read_key(api_key_env)
        self._key_env = api_key_env
        self._model = model
        self._name = name
        self._timeout = float(timeout)
        self._retries = retries
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._max_retry_after = float(max_retry_after)
        self._prices = dict(prices or {})
        self._extra_body = dict(extra_body or {})
        self._max_tokens_field = max_tokens_field
        self._on_retry = on_retry
        self._supports_tools = bool(supports_tools)
        self._max_concurrency = max_concurrency
        self._slots: tuple[object, anyio.CapacityLimiter] | None = None
        """The limiter of ``max_concurrency``, with the event loop it belongs to."""
        self._quiet_until = 0.0
        """Until when (``time.monotonic()``) the endpoint asked every caller to wait."""
        self._random = random.Random()
        # Built once: creating an SSL context reads the CA bundle, which would block the loop.
        self._ssl = httpx.create_ssl_context() if self._url.startswith("https:") else None
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_env(cls, model: str, *, base_url: str | None = None, **options: Any) -> Self:
        """A provider for ``model`` at ``base_url``, else ``$OPENAI_BASE_URL``, else OpenAI's API.

        ``options`` are the constructor's keyword arguments (``api_key_env``, ``timeout``, …).
        """
        root = base_url or os.environ.get(BASE_URL_ENV, "").strip() or DEFAULT_BASE_URL
        return cls(root, model, **options)

    def __repr__(self) -> str:
        key = f"${self._key_env}" if self._key_env else "no key"
        return f"OpenAICompatibleProvider({self._url!r}, model={self._model!r}, key={key})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def supports_tools(self) -> bool:
        return self._supports_tools

    @property
    def url(self) -> str:
        """The ``chat/completions`` URL requests go to."""
        return self._url

    async def __aenter__(self) -> Self:
        if self._client is not None:
            raise RuntimeError("this provider is already open; enter it once")
        self._client = self._new_client()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> Completion:
        """One completion, retried as the class describes; :class:`ProviderError` on failure.

        ``tools``, ``tool_choice`` and ``response_format`` are sent as given when not ``None``.
        """
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [_wire_message(m) for m in messages],
            "temperature": temperature,
            "top_p": top_p,
        }
        if max_tokens is not None:
            body[self._max_tokens_field] = max_tokens
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)
        if tools is not None:
            body["tools"] = [dict(tool) for tool in tools]
        if tool_choice is not None:
            body["tool_choice"] = tool_choice if isinstance(tool_choice, str) else dict(tool_choice)
        if response_format is not None:
            body["response_format"] = dict(response_format)
        body.update(self._extra_body)
        payload = msgspec.json.encode(body)
        started = anyio.current_time()
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._quiet()
                async with self._slot():
                    message, finish, response = await self._attempt(payload, attempt)
            except _Retryable as failure:
                reason = self._redact(failure.reason)
                if attempt > self._retries:
                    raise ProviderError(
                        f"POST {self._url} failed after {attempt} attempt"
                        f"{'s' if attempt > 1 else ''}: {reason}",
                        status=failure.status,
                        attempts=attempt,
                    ) from None
                delay = failure.wait if failure.wait is not None else self._backoff_delay(attempt)
                if failure.wait is not None and delay > self._max_retry_after:
                    raise ProviderError(
                        f"POST {self._url} failed ({reason}) and the endpoint asked to wait "
                        f"{delay:.0f} s, more than max_retry_after={self._max_retry_after:g} s",
                        status=failure.status,
                        attempts=attempt,
                    ) from None
                if failure.wait is not None:  # the endpoint asked everyone to slow down
                    self._quiet_until = max(self._quiet_until, time.monotonic() + delay)
                notice = RetryNotice(
                    attempt=attempt, delay=delay, reason=reason, status=failure.status
                )
                logger.info("retrying %s in %.2f s: %s", self._url, delay, reason)
                if self._on_retry is not None:
                    self._on_retry(notice)
                await anyio.sleep(delay)
                continue
            return self._completion(
                message, finish, response, anyio.current_time() - started, attempt
            )

    async def _quiet(self) -> None:
        """Wait out a ``Retry-After`` the endpoint gave any caller of this provider: a rate
        limit is the endpoint's, so every session asking through it holds back, not only the
        one that was told (only this call's task waits; other sessions' turns go on)."""
        remaining = self._quiet_until - time.monotonic()
        if remaining > 0:
            await anyio.sleep(remaining)

    def _slot(self) -> anyio.CapacityLimiter | contextlib.nullcontext[None]:
        """One of ``max_concurrency`` request slots (a no-op without a limit). A limiter
        belongs to one event loop, and a blocking harness may run each call on a new one, so
        a new loop gets a new limiter."""
        if self._max_concurrency is None:
            return contextlib.nullcontext()
        loop = anyio.lowlevel.current_token()
        if self._slots is None or self._slots[0] != loop:
            self._slots = (loop, anyio.CapacityLimiter(self._max_concurrency))
        return self._slots[1]

    def _completion(
        self,
        message: _ResponseMessage,
        finish: str | None,
        response: _ChatResponse,
        seconds: float,
        attempts: int,
    ) -> Completion:
        model = response.model or self._model
        usage = response.usage or _Usage()
        usd = usage.cost
        if usd is None:
            price = (
                self._prices.get(model)
                or self._prices.get(self._model)
                or published_price(self._url, model)
            )
            if price is not None:
                usd = price.usd(usage.prompt_tokens, usage.completion_tokens)
        return Completion(
            text=message.content or "",
            tool_calls=_tool_calls(message),
            model=model,
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            usd=usd,
            seconds=seconds,
            finish_reason=finish,
            attempts=attempts,
        )

    async def _attempt(
        self, payload: bytes, attempt: int
    ) -> tuple[_ResponseMessage, str | None, _ChatResponse]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            with anyio.fail_after(self._timeout):
                if self._client is not None:
                    status, reason, answer_headers, raw = await self._post(
                        self._client, payload, headers
                    )
                else:
                    async with self._new_client() as client:
                        status, reason, answer_headers, raw = await self._post(
                            client, payload, headers
                        )
        except (TimeoutError, httpx.TimeoutException):
            raise _Retryable(f"no complete answer within timeout={self._timeout:g} s") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        if status == 429 or status in RETRY_STATUSES or status >= 500:
            raise _Retryable(
                f"{status} {reason}: {_excerpt(raw)}",
                status=status,
                wait=retry_after_seconds(answer_headers.get("retry-after")),
            )
        if not 200 <= status < 300:
            location = answer_headers.get("location")
            advice = (
                f" (the endpoint redirects to {location}; pass that API root as base_url)"
                if 300 <= status < 400 and location
                else self._advice(status)
            )
            raise ProviderError(
                f"POST {self._url} was refused: {status} {reason}: "
                f"{self._redact(_excerpt(raw))}{advice}",
                status=status,
                attempts=attempt,
            )
        return self._parse(raw, status)

    async def _post(
        self, client: httpx.AsyncClient, payload: bytes, headers: dict[str, str]
    ) -> tuple[int, str, httpx.Headers, bytes]:
        async with client.stream("POST", self._url, content=payload, headers=headers) as response:
            code = response.status_code
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
                raise _Retryable(f"{code} answer larger than {MAX_BODY_BYTES} bytes", status=code)
            # Read to the end even past the cap (keeping nothing): leaving httpx's stream half
            # read makes trio warn about its unclosed generators. The deadline still bounds it.
            chunks = bytearray()
            oversized = False
            async for chunk in response.aiter_raw():
                if not oversized:
                    chunks += chunk
                    if len(chunks) > MAX_BODY_BYTES:
                        oversized = True
                        chunks.clear()
            if oversized:
                raise _Retryable(f"{code} answer larger than {MAX_BODY_BYTES} bytes", status=code)
            return code, response.reason_phrase, response.headers, bytes(chunks)

    def _parse(self, raw: bytes, status: int) -> tuple[_ResponseMessage, str | None, _ChatResponse]:
        try:
            response = _decode_response.decode(raw)
        except msgspec.DecodeError as exc:
            raise _Retryable(
                f"{status} answer is not a chat completion ({exc}): {_excerpt(raw)}", status=status
            ) from None
        if not response.choices:
            raise _Retryable(f"{status} answer has no choices: {_excerpt(raw)}", status=status)
        choice = response.choices[0]
        if choice.message.content is None and not choice.message.tool_calls:
            raise _Retryable(
                f"{status} answer has no text (finish_reason={choice.finish_reason!r}): "
                f"{_excerpt(raw)}",
                status=status,
            )
        return choice.message, choice.finish_reason, response

    def _new_client(self) -> httpx.AsyncClient:
        verify: ssl.SSLContext | bool = self._ssl if self._ssl is not None else True
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self._timeout), verify=verify, follow_redirects=False
        )

    def _backoff_delay(self, attempt: int) -> float:
        """Equal jitter: half the exponential step, plus up to the other half at random."""
        step = min(self._max_backoff, self._backoff * 2.0 ** (attempt - 1))
        return step / 2 + self._random.uniform(0, step / 2)

    def _redact(self, text: str) -> str:
        if self._key:
            text = text.replace(self._key, "[redacted]")
        return text

    def _advice(self, status: int) -> str:
        if status in (401, 403):
            where = f"${self._key_env}" if self._key_env else "api_key_env (none is set)"
            return f" (check the API key in {where} and that it may use {self._model!r})"
        if status == 404:
            return f" (check base_url ({self._url}) and the model name {self._model!r})"
        if status in (400, 413, 422):
            return (
                f" (the endpoint rejected the request; check the model {self._model!r} "
                "and its limits)"
            )
        return ""


def _wire_message(message: Message) -> dict[str, Any]:
    """A message as the chat API takes it (a plain one is exactly ``{role, content}``)."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None  # the API's form for "only tool calls"
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _tool_calls(message: _ResponseMessage) -> tuple[ToolCall, ...]:
    """The model's calls; a call without an id gets ``call_<n>`` (a reply must name one)."""
    calls = []
    for number, call in enumerate(message.tool_calls or (), start=1):
        arguments = call.function.arguments
        if arguments is None:
            arguments = ""
        elif not isinstance(arguments, str):
            arguments = msgspec.json.encode(arguments).decode()
        calls.append(
            ToolCall(id=call.id or f"call_{number}", name=call.function.name, arguments=arguments)
        )
    return tuple(calls)


def _chat_url(base_url: str) -> str:
    if not isinstance(base_url, str):
        raise ConfigurationError(f"base_url must be a URL string, not {base_url!r}")
    try:
        url = httpx.URL(base_url.strip())
    except httpx.InvalidURL as exc:
        raise ConfigurationError(f"base_url {base_url!r} is not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(
            f"base_url {base_url!r} must be an http(s) URL with a host, "
            "e.g. 'https://api.openai.com/v1' or 'http://127.0.0.1:8000/v1'"
        )
    if url.username or url.password:
        raise ConfigurationError(
            "base_url must not carry credentials; put the key in an environment variable "
            "and name it with api_key_env"
        )
    path = url.path.rstrip("/")
    if path.endswith("/chat/completions"):
        raise ConfigurationError(
            f"base_url {base_url!r} is the endpoint itself; pass the API root "
            f"({str(url.copy_with(path=path.removesuffix('/chat/completions') or '/'))!r})"
        )
    return str(url.copy_with(path=f"{path}/chat/completions"))


def _read_key(env: str | None) -> str | None:
    if env is None:
        return None
    key = os.environ.get(env)
    if key is None or not key.strip():
        raise ConfigurationError(
            f"the environment variable {env} holding the API key is not set; export it "
            f"(export {env}=...), or pass api_key_env=None for an endpoint that needs no key "
            "(e.g. a local vLLM or llama.cpp server)"
        )
    return key.strip()


def _excerpt(raw: bytes) -> str:
    text = raw[: EXCERPT_CHARS * 4].decode("utf-8", "replace")
    text = " ".join(text.split())
    if not text:
        return "(empty body)"
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"
