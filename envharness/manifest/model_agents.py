"""Model agents named by text — ``--agent alice=model:gpt-4o-mini`` on a command line, or
``model = "gpt-4o-mini"`` in a manifest's ``[agents.alice]`` — built the same way from both.

What the text names is only the model and a few settings; the endpoint and the key come from
the environment, as the OpenAI SDK takes them: the API root from ``base_url``, else
``$OPENAI_BASE_URL``, else OpenAI's; the key from the variable ``api_key_env`` names
(``OPENAI_API_KEY`` by default), never from the text itself, so neither a shell history nor a
manifest in version control nor the evidence ever holds it. A loopback endpoint (a local vLLM,
llama.cpp or ``research/serve_openai.py``) may have no key; a hosted one without its key is
refused here, before anything is recorded or spent.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import httpx

from envharness.agents import ActionFormat, AgentTemplate, ModelAgent, load_template
from envharness.contracts.budget import Budget
from envharness.errors import ConfigurationError
from envharness.llm import OpenAICompatibleProvider, Price
from envharness.llm.openai_compatible import BASE_URL_ENV, DEFAULT_BASE_URL

__all__ = [
    "ACTION_FORMATS",
    "DEFAULT_KEY_ENV",
    "MODEL_SCHEME",
    "ModelAgentSpec",
    "build_model_agent",
    "endpoint",
    "implementation",
    "is_loopback",
    "model_agent",
    "model_name",
    "model_provider",
    "template_reference",
]

MODEL_SCHEME = "model:"
"""How an ``--agent`` value names a model agent: ``model:NAME`` (the name may hold ``:`` and
``/``, as ``model:llama3.1:8b`` and ``model:Qwen/Qwen2.5-7B-Instruct`` do)."""
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
ACTION_FORMATS: tuple[str, ...] = get_args(ActionFormat)


@dataclass(frozen=True, slots=True)
class ModelAgentSpec:
    """Everything that describes one model agent except the key: what the command line and a
    manifest table both reduce to."""

    model: str
    base_url: str | None = None
    """The API root; ``None``: ``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1``."""
    api_key_env: str | None = DEFAULT_KEY_ENV
    """The variable holding the key; ``None`` (or ``""``) sends none."""
    temperature: float = 0.0
    max_tokens: int | None = None
    template: str | None = None
    """A packaged template's name or a template file's path (relative to ``base``)."""
    system: str | None = None
    action_format: ActionFormat = "auto"
    price: Price | None = None
    """The model's price, for an endpoint that reports none (what a ``usd`` budget counts)."""
    budget: Budget | None = None
    """What the agent may spend in each session it plays; it stops before a call it cannot
    afford (the session's own budget, ``budget=`` of the harness, counts all its agents)."""


def model_name(value: str) -> str | None:
    """The model's name when ``value`` is ``model:NAME``, else ``None``."""
    if not value.startswith(MODEL_SCHEME):
        return None
    return value[len(MODEL_SCHEME) :].strip()


def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_model_agent(spec: ModelAgentSpec) -> ModelAgent:
    """The :class:`~envharness.agents.ModelAgent` ``spec`` describes, its endpoint and key
    checked now; :class:`ConfigurationError` names what is wrong (the caller says where)."""
    return model_agent(spec, model_provider(spec))


def model_provider(spec: ModelAgentSpec) -> OpenAICompatibleProvider:
    """The provider for ``spec``'s model and endpoint; a hosted endpoint without its key, or
    an endpoint that is no http(s) URL, is refused."""
    if not spec.model:
        raise ConfigurationError(
            "name the model after model:, e.g. model:gpt-4o-mini (or the name a local server "
            "serves)"
        )
    root = endpoint(spec.base_url)
    return OpenAICompatibleProvider(
        root,
        spec.model,
        api_key_env=_key_variable(root, spec.api_key_env),
        prices={spec.model: spec.price} if spec.price is not None else None,
    )


def model_agent(spec: ModelAgentSpec, provider: OpenAICompatibleProvider) -> ModelAgent:
    """The agent over ``provider`` with ``spec``'s settings, its template loaded now."""
    template = load_template(spec.template)
    return ModelAgent(
        provider,
        system=spec.system,
        template=template,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        budget=spec.budget,
        action_format=spec.action_format,
        implementation=implementation(spec, provider, template),
    )


def implementation(
    spec: ModelAgentSpec, provider: OpenAICompatibleProvider, template: AgentTemplate
) -> str:
    """What the evidence freezes for a model agent: the template's version, the model, the
    endpoint, and each setting that differs from its default (the system text as a digest) —
    so a resume with another model, endpoint, prompt or sampling is a declared change. Never
    the key."""
    root = provider.url.removesuffix("/chat/completions")
    text = f"model-agent@{template.version}:{provider.name}/{provider.model} via {root}"
    settings = []
    if spec.temperature:
        settings.append(f"temperature={spec.temperature:g}")
    if spec.max_tokens is not None:
        settings.append(f"max_tokens={spec.max_tokens}")
    if spec.action_format != "auto":
        settings.append(f"format={spec.action_format}")
    if spec.system:
        digest = hashlib.sha256(spec.system.encode("utf-8")).hexdigest()[:12]
        settings.append(f"system@{digest}")
    return f"{text} ({', '.join(settings)})" if settings else text


def endpoint(base_url: str | None) -> str:
    """The API root: ``base_url``, else ``$OPENAI_BASE_URL``, else OpenAI's."""
    if base_url is not None and base_url.strip():
        return base_url.strip()
    return os.environ.get(BASE_URL_ENV, "").strip() or DEFAULT_BASE_URL


def _key_variable(root: str, variable: str | None) -> str | None:
    """The variable to read the key from: ``variable`` when it is set; none for a loopback
    endpoint without it; otherwise an error naming the variable, since the call would fail."""
    if not variable:
        return None
    if os.environ.get(variable, "").strip():
        return variable
    if is_loopback(root):
        return None
    raise ConfigurationError(
        f"the endpoint {root} needs an API key and ${variable} is not set: export "
        f"{variable}=... (or name the variable that holds it); an endpoint on 127.0.0.1 "
        "needs none"
    )


def template_reference(template: str, base: Path) -> str:
    """A template's name as given, or its path made absolute against ``base`` (a manifest's
    folder): a path has a ``/`` or ends in ``.md``."""
    if (template.endswith(".md") or "/" in template) and not Path(template).is_absolute():
        return str(base / template)
    return template
