"""The model agent's prompt: a versioned template file with a system part and a user part.

A template is Markdown with two marked parts, ``<!-- envharness:system -->`` then
``<!-- envharness:user -->`` (text before the first is a note for maintainers, never sent).
Each part is a :class:`string.Template` (``$name`` or ``${name}``; ``$$`` for a dollar sign),
so the JSON in an observation or a schema needs no escaping. The system part is filled from
what the agent learns when its session starts (:data:`SYSTEM_FIELDS`), the user part once per
ask (:data:`USER_FIELDS`); a template naming any other field is refused when it is loaded,
naming the field and the known ones. Empty sections leave no run of blank lines behind.

A template's version is its name and a digest of its bytes, so an edited file cannot pass for
the old one: the version is part of the agent's ``implementation``, which evidence freezes.
The packaged templates live in ``envharness/agents/prompts/`` and ship in the wheel.
"""

from __future__ import annotations

import functools
import hashlib
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envharness.errors import ConfigurationError
from envharness.llm.prompt import (
    SYSTEM_MARK,
    USER_MARK,
    packaged_names,
    read_markdown,
    split_parts,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "PACKAGED_TEMPLATES",
    "SYSTEM_FIELDS",
    "SYSTEM_MARK",
    "USER_FIELDS",
    "USER_MARK",
    "AgentTemplate",
    "load_template",
    "packaged_templates",
    "parse_template",
]

PACKAGED_TEMPLATES = "envharness.agents.prompts"
DEFAULT_TEMPLATE = "agent-v1"
SYSTEM_FIELDS: Mapping[str, str] = {
    "system": "the text given as ModelAgent(system=...), empty when none was",
    "environment": "the environment's name and version",
    "participant": "the participant's name in the session",
    "role": "the participant's role",
    "observation_type": "the name of the environment's observation type",
    "action_schema": "the action's JSON Schema",
    "action_format": "how to answer: call the tool, or write one JSON object (with the schema)",
}
"""The fields a template's system part may use, and what each holds."""
USER_FIELDS: Mapping[str, str] = {
    "turn": "the turn being played",
    "participant": "the participant's name in the session",
    "role": "the participant's role",
    "observation": "what the participant observes, one field per line",
    "hints": "a 'Hints:' section with the harness's hints, empty when there are none",
    "feedback": "what happened since the last answer (outcomes, blocks, vetoes), or empty",
    "ask": "one line asking for the action in the format in use",
}
"""The fields a template's user part may use, and what each holds."""

_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")


@dataclass(frozen=True, slots=True)
class AgentTemplate:
    """A loaded template; ``version`` is ``name@<12 hex digits of its bytes' SHA-256>``."""

    name: str
    version: str
    system: str
    user: str

    def render_system(self, values: Mapping[str, str]) -> str:
        return _fill(self.system, values)

    def render_user(self, values: Mapping[str, str]) -> str:
        return _fill(self.user, values)


def packaged_templates() -> list[str]:
    """The names of the templates shipped with envharness."""
    return packaged_names(PACKAGED_TEMPLATES)


def load_template(template: str | Path | AgentTemplate | None = None) -> AgentTemplate:
    """A template from a packaged name (``"agent-v1"``), a ``.md`` file's path, the text of a
    template itself (it contains the markers), or an already loaded one; ``None`` is the
    default."""
    if isinstance(template, AgentTemplate):
        return template
    if template is None:
        return _packaged(DEFAULT_TEMPLATE)
    if isinstance(template, str) and SYSTEM_MARK in template:
        return parse_template("inline", template, source="given as text")
    if not isinstance(template, str | Path):
        raise ConfigurationError(
            f"template must be a packaged template's name, a .md file's path, a template's "
            f"text or an AgentTemplate, not {type(template).__name__}"
        )
    if isinstance(template, Path) or template.endswith(".md") or "/" in template:
        name, text, source = read_markdown(template, PACKAGED_TEMPLATES, "template")
        return parse_template(name, text, source=source)
    return _packaged(template)


@functools.cache
def _packaged(name: str) -> AgentTemplate:
    name, text, source = read_markdown(name, PACKAGED_TEMPLATES, "template")
    return parse_template(name, text, source=source)


def parse_template(name: str, text: str, *, source: str) -> AgentTemplate:
    """Split a template into its parts and check its fields (see the module doc)."""
    system, user = split_parts(text, source, "template")
    for part, body, known in (("system", system, SYSTEM_FIELDS), ("user", user, USER_FIELDS)):
        _check_fields(source, part, body, known)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return AgentTemplate(
        name=name, version=f"{name}@{digest}", system=system.strip(), user=user.strip()
    )


def _check_fields(source: str, part: str, body: str, known: Mapping[str, str]) -> None:
    template = string.Template(body)
    if not template.is_valid():
        raise ConfigurationError(
            f"the {part} part of the template {source} has a '$' that is not a field; "
            "write '$$' for a dollar sign"
        )
    unknown = sorted(set(template.get_identifiers()) - set(known))
    if unknown:
        raise ConfigurationError(
            f"the {part} part of the template {source} uses unknown field(s) "
            f"{', '.join('$' + field for field in unknown)}; the {part} part knows "
            f"{', '.join('$' + field for field in sorted(known))}"
        )


def _fill(body: str, values: Mapping[str, str]) -> str:
    text = string.Template(body).substitute(values)
    return _BLANK_RUNS.sub("\n\n", text).strip()
