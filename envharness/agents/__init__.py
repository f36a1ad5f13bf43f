"""Agents that envharness provides: a chat model that plays in any environment.

``docs/model-agents.md`` is the guide: the template and how to write one, the conversation
window, budgets as the agent enforces them, and how the harness's hints and vetoes reach the
model.
"""

from envharness.agents.model import ModelAgent, NoValidActionError
from envharness.agents.schema import action_problems
from envharness.agents.settings import ActionFormat
from envharness.agents.template import (
    DEFAULT_TEMPLATE,
    AgentTemplate,
    load_template,
    packaged_templates,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "ActionFormat",
    "AgentTemplate",
    "ModelAgent",
    "NoValidActionError",
    "action_problems",
    "load_template",
    "packaged_templates",
]
