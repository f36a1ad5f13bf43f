"""The hooks' notebook: a per-session scratch space that survives checkpoints and resumes.

It holds JSON values only (so it can be checkpointed, recorded and sent to a sandbox) and has a
size cap (so a hook cannot grow it without bound). The runtime checks both after every hook
call; a hook that breaks either is a failed hook call, and the notebook keeps its previous value.
"""

from __future__ import annotations

from typing import Any

import msgspec

from envharness.errors import ConfigurationError

__all__ = ["NOTEBOOK_LIMIT_BYTES", "checked_notebook"]

NOTEBOOK_LIMIT_BYTES = 64 * 1024


def checked_notebook(value: Any, limit: int = NOTEBOOK_LIMIT_BYTES) -> dict[str, Any]:
    """A deep, JSON-only copy of ``value``; raises naming the problem when it is not one."""
    if not isinstance(value, dict):
        raise ConfigurationError(f"the hooks' notebook must be a JSON object, not {value!r}")
    try:
        data = msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigurationError(f"the hooks' notebook holds a non-JSON value: {exc}") from None
    if len(data) > limit:
        raise ConfigurationError(
            f"the hooks' notebook is {len(data)} bytes as JSON, over its {limit}-byte cap"
        )
    copy: dict[str, Any] = msgspec.json.decode(data)
    return copy
