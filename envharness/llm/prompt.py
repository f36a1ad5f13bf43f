"""Versioned prompt files, and the failure packet rendered into one.

A prompt is a Markdown file with two marked parts, ``<!-- envharness:system -->`` and
``<!-- envharness:user -->``; text before the first marker is a note for maintainers and is not
sent. The system part is sent as written; the user part is a :class:`string.Template`
(``$name`` / ``${name}``; ``$$`` for a dollar sign) filled from the packet, so JSON braces in the
prompt need no escaping. A prompt's version
is its name plus a digest of its bytes: editing a file in place cannot pass for the old version.

The packaged prompts live in ``envharness/llm/prompts/``; ``load_prompt`` also takes a path, so
a user can version their own prompt next to their environment.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
import string
from pathlib import Path
from typing import Any

import msgspec

from envharness.errors import ConfigurationError
from envharness.llm.provider import Message
from envharness.optimizer import (
    FailureExample,
    FailurePacket,
    FailureStep,
    HarnessPatch,
    PatchSchemaError,
)

__all__ = [
    "PACKAGED_PROMPTS",
    "PromptTemplate",
    "RenderLimits",
    "load_prompt",
    "packaged_prompts",
    "render_packet",
]

PACKAGED_PROMPTS = "envharness.llm.prompts"
"""The package whose ``*.md`` files are the prompts shipped with envharness."""
SYSTEM_MARK = "<!-- envharness:system -->"
USER_MARK = "<!-- envharness:user -->"
PLACEHOLDERS = frozenset(
    {
        "environment",
        "task",
        "hooks",
        "state_keys",
        "predicate_keys",
        "action_examples",
        "clusters",
        "passing",
        "current_patch",
        "forbidden_terms",
    }
)
"""What a user template may use; any other ``$name`` is refused when the prompt is loaded."""


class RenderLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How much of a packet goes into a prompt (a compact prompt is cheaper and reads better).

    Steps beyond ``steps_per_example`` keep the last ones (failures show at the end); values
    longer than ``value_chars`` characters of JSON are cut.
    """

    clusters: int = 6
    passing: int = 2
    steps_per_example: int = 12
    value_chars: int = 240
    action_examples: int = 8
    show_forbidden_terms: bool = False
    """Forbidden terms are answers: by default the prompt says how many there are, not what
    they are (a model that saw them could smuggle them past the policy's literal check, e.g.
    by concatenating pieces)."""


class PromptTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """A loaded prompt: its ``name``, ``version`` (name@digest), and the two parts."""

    name: str
    version: str
    system: str
    user: str


def packaged_prompts() -> list[str]:
    """Names of the prompts shipped with envharness."""
    return packaged_names(PACKAGED_PROMPTS)


def load_prompt(name_or_path: str | Path) -> PromptTemplate:
    """A packaged prompt by name (``"engineer-v1"``) or a prompt file by path."""
    name, text, source = read_markdown(name_or_path, PACKAGED_PROMPTS, "prompt")
    return parse_prompt(name, text, source=source)


def packaged_names(package: str) -> list[str]:
    """The names of the ``*.md`` files shipped in ``package`` (prompts, agent templates)."""
    root = importlib.resources.files(package)
    return sorted(
        entry.name.removesuffix(".md") for entry in root.iterdir() if entry.name.endswith(".md")
    )


def read_markdown(name_or_path: str | Path, package: str, what: str) -> tuple[str, str, str]:
    """``(name, text, source)`` of a ``.md`` file given by path, or shipped in ``package``
    under a name; ``what`` ("prompt", "template") names it in errors."""
    if isinstance(name_or_path, Path) or name_or_path.endswith(".md") or "/" in name_or_path:
        path = Path(name_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read the {what} file {path}: {exc}") from None
        return path.stem, text, str(path)
    resource = importlib.resources.files(package) / f"{name_or_path}.md"
    if not resource.is_file():
        raise ConfigurationError(
            f"there is no packaged {what} {name_or_path!r}; choose one of "
            f"{', '.join(packaged_names(package))}, or give the path of a .md {what} file"
        )
    return name_or_path, resource.read_text(encoding="utf-8"), name_or_path


def split_parts(text: str, source: str, what: str) -> tuple[str, str]:
    """The system and user parts of a prompt or template file, between their markers."""
    if text.count(SYSTEM_MARK) != 1 or text.count(USER_MARK) != 1:
        raise ConfigurationError(
            f"the {what} {source} must contain exactly one {SYSTEM_MARK} line and one "
            f"{USER_MARK} line, in that order"
        )
    _, _, rest = text.partition(SYSTEM_MARK)
    system, _, user = rest.partition(USER_MARK)
    if USER_MARK in system or SYSTEM_MARK in user or not user.strip():
        raise ConfigurationError(
            f"the {what} {source} must have its {SYSTEM_MARK} part before a non-empty "
            f"{USER_MARK} part"
        )
    return system, user


def parse_prompt(name: str, text: str, *, source: str) -> PromptTemplate:
    """Split a prompt file into its parts and check its placeholders (see the module doc)."""
    system, user = split_parts(text, source, "prompt")
    template = string.Template(user)
    if not template.is_valid():
        raise ConfigurationError(
            f"the prompt {source} has a '$' that is not a placeholder; write '$$' for a dollar sign"
        )
    unknown = sorted(set(template.get_identifiers()) - PLACEHOLDERS)
    if unknown:
        raise ConfigurationError(
            f"the prompt {source} uses unknown placeholder(s) "
            f"{', '.join('$' + name for name in unknown)}; known: {', '.join(sorted(PLACEHOLDERS))}"
        )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return PromptTemplate(
        name=name,
        version=f"{name}@{digest}",
        system=system.strip(),
        user=user.strip(),
    )


def render_packet(
    prompt: PromptTemplate, packet: FailurePacket, limits: RenderLimits | None = None
) -> list[Message]:
    """The system and user messages for one engineer call about ``packet``."""
    limits = limits or RenderLimits()
    values = {
        "environment": packet.environment,
        "task": packet.task or "(not given; see each example's task)",
        "hooks": ", ".join(packet.hooks) or "(none)",
        "state_keys": _keys(packet.state_keys),
        "predicate_keys": _keys(packet.predicate_keys),
        "action_examples": "\n".join(
            f"- {_value(action, limits)}"
            for action in packet.action_examples[: limits.action_examples]
        )
        or "(none recorded)",
        "clusters": _clusters(packet, limits),
        "passing": "\n\n".join(
            _example(example, limits) for example in packet.passing[: limits.passing]
        )
        or "(no passing session to contrast with)",
        "current_patch": _current_patch(packet.current_patch),
        "forbidden_terms": _forbidden(packet.forbidden_terms, limits),
    }
    user = string.Template(prompt.user).substitute(values)
    return [Message("system", prompt.system), Message("user", user)]


def _current_patch(value: dict[str, Any] | None) -> str:
    """The accepted patch as readable code (its JSON would show code as escaped strings)."""
    none = "(none: the harness has no hooks yet)"
    if not value:
        return none
    try:
        patch = HarnessPatch.from_dict(value)
    except PatchSchemaError:
        return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False)
    if not patch.hooks:
        return none
    return "\n\n".join(
        f"{hook.hook}: {hook.description or '(no description)'}\n"
        f"```python\n{hook.code.strip()}\n```"
        for hook in patch.hooks
    )


def _forbidden(terms: tuple[str, ...], limits: RenderLimits) -> str:
    if not terms:
        return "(none)"
    if limits.show_forbidden_terms:
        return ", ".join(json.dumps(term, ensure_ascii=False) for term in terms)
    count = len(terms)
    return (
        f"{count} term{'s' * (count != 1)} the environment marks as answers (not shown); "
        "a patch whose code or messages contain one is rejected"
    )


def _keys(keys: tuple[str, ...]) -> str:
    return ", ".join(f"`{key}`" for key in keys) if keys else "(none exposed)"


def _clusters(packet: FailurePacket, limits: RenderLimits) -> str:
    if not packet.clusters:
        return "(no failure clusters)"
    parts = []
    shown = packet.clusters[: limits.clusters]
    for number, cluster in enumerate(shown, start=1):
        count = len(cluster.sessions)
        parts.append(
            f"### Cluster {number}: {cluster.signature} ({count} session{'s' * (count != 1)})\n"
            f"{cluster.description}\n\n{_example(cluster.example, limits)}"
        )
    hidden = len(packet.clusters) - len(shown)
    if hidden > 0:
        parts.append(f"({hidden} smaller cluster{'s' * (hidden != 1)} not shown)")
    return "\n\n".join(parts)


def _example(example: FailureExample, limits: RenderLimits) -> str:
    verdict = {True: "passed", False: "failed", None: "unscored"}[example.passed]
    reward = "" if example.reward is None else f", reward {example.reward:g}"
    lines = [f"Session {example.session_id} (scenario {example.scenario_id}): {verdict}{reward}"]
    if example.task:
        lines.append(f"Task: {_cut(example.task, limits.value_chars * 2)}")
    steps = example.steps
    if len(steps) > limits.steps_per_example:
        skipped = len(steps) - limits.steps_per_example
        steps = steps[skipped:]
        lines.append(f"({skipped} earlier step{'s' * (skipped != 1)} not shown)")
    lines.extend(_step(step, limits) for step in steps)
    return "\n".join(lines)


def _step(step: FailureStep, limits: RenderLimits) -> str:
    line = f"- step {step.step} [{step.participant}] action={_value(step.action, limits)}"
    if step.blocked is not None:
        line += f" BLOCKED: {_cut(step.blocked, limits.value_chars)}"
    line += f" -> outcome={_value(step.outcome, limits)}"
    if step.predicates:
        line += f"\n  predicates={_value(step.predicates, limits)}"
    if step.state:
        line += f"\n  state={_value(step.state, limits)}"
    if step.admissible is not None:
        line += f"\n  admissible={_value(step.admissible, limits)}"
    return line


def _value(value: Any, limits: RenderLimits) -> str:
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return _cut(text, limits.value_chars)


def _cut(text: str, limit: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
