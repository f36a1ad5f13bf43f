"""Model-backed parts of envharness: a provider contract, an OpenAI-compatible client, a scripted
fake, versioned prompts and the model engineer of the harness optimizer.

``docs/llm.md`` is the guide: providers, environment variables, retries and timeouts, cost
accounting, pointing at any OpenAI-compatible endpoint, and prompt versioning.
"""

from envharness.llm.engineer import ModelEngineer
from envharness.llm.openai_compatible import OpenAICompatibleProvider, RetryNotice
from envharness.llm.prompt import (
    PromptTemplate,
    RenderLimits,
    load_prompt,
    packaged_prompts,
    render_packet,
)
from envharness.llm.provider import (
    Completion,
    Message,
    Price,
    Provider,
    ProviderError,
    StructuredProvider,
    ToolCall,
    total_cost,
)
from envharness.llm.scripted import ScriptedCall, ScriptedProvider

__all__ = [
    "Completion",
    "Message",
    "ModelEngineer",
    "OpenAICompatibleProvider",
    "Price",
    "PromptTemplate",
    "Provider",
    "ProviderError",
    "RenderLimits",
    "RetryNotice",
    "ScriptedCall",
    "ScriptedProvider",
    "StructuredProvider",
    "ToolCall",
    "load_prompt",
    "packaged_prompts",
    "render_packet",
    "total_cost",
]
