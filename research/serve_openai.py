"""A local model behind a small OpenAI-compatible server on loopback.

    python research/serve_openai.py --model smollm2 --port 8000
    envharness --store S optimize ... --engineer openai   # OPENAI_BASE_URL=http://127.0.0.1:8000/v1

It exists so that the ``openai`` engineer and provider of :mod:`envharness.llm` are exercised
against a real server answering with a real model, not only a mock, and so a trained engineer
checkpoint can be used by the optimizer unchanged. It implements the part of
``/v1/chat/completions`` an engineer uses — messages, ``temperature``, ``top_p``,
``max_tokens``/``max_completion_tokens``, ``seed``, ``stop``, usage counts — plus ``/v1/models``.
Streaming, ``n > 1`` and ``tools`` are refused with a 400 that says so (a model agent then asks
for its action in text). Generation runs in a worker thread, one request at a time (a CPU has
no spare cores for a second one), so the event loop keeps answering while a request is
generated. It binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``research`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import msgspec
from starlette.responses import Response

__all__ = ["ChatModel", "ChatResult", "create_app", "main", "serving"]

LOOPBACK = "127.0.0.1"
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_CAP = 2048
"""A request may not ask for more new tokens than this (a CPU would take minutes)."""


class _MessageIn(msgspec.Struct, frozen=True):
    role: str
    content: str | None = None


class _ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    messages: list[_MessageIn]
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    tools: list[Any] | None = None


_decode_request = msgspec.json.Decoder(_ChatRequest)


class ChatResult(msgspec.Struct, frozen=True, kw_only=True):
    """One generated answer with the token counts the response reports."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


class ChatModel:
    """A causal LM and its tokenizer, answering chat messages (blocking; call it in a thread)."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self._lock = threading.Lock()

    @classmethod
    def load(cls, spec: str, *, name: str | None = None, dtype: str = "auto") -> ChatModel:
        from research.models import load_model, load_tokenizer, resolve_model

        location = resolve_model(spec)
        return cls(
            load_model(location, dtype=dtype),
            load_tokenizer(location),
            name=name or Path(spec).name or spec,
        )

    def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> ChatResult:
        import torch

        encoded = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        inputs = {key: value.to(self.model.device) for key, value in encoded.items()}
        prompt_tokens = int(inputs["input_ids"].shape[1])
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": temperature, "top_p": top_p}
            if temperature > 0
            else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        )
        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            output = self.model.generate(
                **inputs,
                max_new_tokens=max_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                **sampling,
            )
        new = output[0][prompt_tokens:]
        eos = self.tokenizer.eos_token_id
        ended = bool(len(new)) and int(new[-1]) == eos
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        finish = "stop" if ended else "length"
        for marker in stop:
            if marker and marker in text:
                text = text[: text.index(marker)]
                finish = "stop"
        return ChatResult(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(new) - int(ended),
            finish_reason=finish,
        )


def _error(status: int, message: str, kind: str = "invalid_request_error") -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def create_app(chat: ChatModel, *, api_key: str | None = None) -> Any:
    """The Starlette app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``.

    With ``api_key`` set, every ``/v1`` request must send ``Authorization: Bearer <api_key>``.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def authorised(request: Request) -> bool:
        return api_key is None or request.headers.get("authorization") == f"Bearer {api_key}"

    async def completions(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "missing or wrong bearer token", "authentication_error")
        try:
            body = _decode_request.decode(await request.body())
        except msgspec.ValidationError as exc:
            return _error(400, f"invalid request: {exc}")
        except msgspec.DecodeError:
            return _error(400, "the request body is not JSON")
        if body.model != chat.name:
            return _error(404, f"model {body.model!r} is not served here; ask for {chat.name!r}")
        if body.stream:
            return _error(400, "stream=true is not supported by this server; ask without it")
        if body.tools:  # refused, not ignored: a caller asking for a tool call falls back
            return _error(400, "tools are not supported by this server; ask for JSON in text")
        if body.n != 1:
            return _error(400, f"n={body.n} is not supported; send one request per answer")
        if not body.messages:
            return _error(400, "messages must not be empty")
        roles = {"system", "user", "assistant"}
        for index, message in enumerate(body.messages):
            if message.role not in roles or message.content is None:
                return _error(
                    400, f"messages[{index}] needs a role in {sorted(roles)} and text content"
                )
        wanted = body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS
        if not 1 <= wanted <= MAX_TOKENS_CAP:
            return _error(400, f"max_tokens must be between 1 and {MAX_TOKENS_CAP}, not {wanted}")
        if not 0 <= body.temperature <= 2 or not 0 < body.top_p <= 1:
            return _error(400, "temperature must be in [0, 2] and top_p in (0, 1]")
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        messages = [{"role": m.role, "content": m.content or ""} for m in body.messages]

        def generate() -> ChatResult:
            return chat.complete(
                messages,
                temperature=body.temperature,
                top_p=body.top_p,
                max_tokens=wanted,
                seed=body.seed,
                stop=stop,
            )

        result = await anyio.to_thread.run_sync(generate)  # ChatModel serialises generation
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": chat.name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": result.text},
                        "finish_reason": result.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "total_tokens": result.prompt_tokens + result.completion_tokens,
                },
            }
        )

    async def models(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "missing or wrong bearer token", "authentication_error")
        return JSONResponse({"object": "list", "data": [{"id": chat.name, "object": "model"}]})

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "model": chat.name})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(
            f"cannot listen on {LOOPBACK}:{port} ({exc.strerror}); pass --port 0 for a free port"
        ) from None
    sock.listen(128)
    return sock


def _server(app: Any) -> Any:
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    return uvicorn.Server(config)


@contextlib.contextmanager
def serving(chat: ChatModel, *, port: int = 0, api_key: str | None = None) -> Iterator[str]:
    """Serve ``chat`` on loopback in a background thread; yield the API root (``…/v1``)."""
    sock = _bind(port)
    server = _server(create_app(chat, api_key=api_key))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenAI-compatible server did not start")
            time.sleep(0.01)
        yield f"http://{LOOPBACK}:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="checkpoint dir, .gguf, smollm2, hf:ID")
    parser.add_argument("--name", default=None, help="the model name clients ask for")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU), float32, bfloat16")
    parser.add_argument(
        "--api-key-env", default=None, help="require the key held in this environment variable"
    )
    args = parser.parse_args(argv)
    import os

    from research.models import ModelSpecError

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"--api-key-env {args.api_key_env}: that variable is not set")
    try:
        chat = ChatModel.load(args.model, name=args.name, dtype=args.dtype)
    except ModelSpecError as exc:
        parser.error(str(exc))
    sock = _bind(args.port)
    url = f"http://{LOOPBACK}:{sock.getsockname()[1]}/v1"
    print(f"serving model {chat.name!r} at {url} (Ctrl-C stops)", flush=True)
    _server(create_app(chat, api_key=api_key)).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
