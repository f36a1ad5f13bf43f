"""The hooks' notebook: a per-session scratch space that survives checkpoints and resumes.

It holds JSON values only (so it can be checkpointed, recorded and sent to a sandbox) and has a
size cap (so a hook cannot grow it without bound). The runtime checks both after every hook
call; a hook that breaks either is a failed hook call, and the notebook keeps its previous value.

"JSON only" is strict: a value that JSON would silently change — a tuple (it comes back a
list), a set, a datetime, bytes, a non-string key, NaN — is refused rather than altered, so what
a hook reads after a resume is exactly what it wrote.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from envharness.errors import ConfigurationError

__all__ = ["NOTEBOOK_LIMIT_BYTES", "checked_notebook", "encoded_notebook"]

NOTEBOOK_LIMIT_BYTES = 64 * 1024

_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder()
_SCALARS = (str, int, float, bool, type(None))


def encoded_notebook(value: Any, limit: int = NOTEBOOK_LIMIT_BYTES) -> bytes:
    """The notebook's canonical JSON (keys sorted); raises naming the problem when ``value``
    is not a JSON object of JSON values within ``limit`` bytes."""
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"the hooks' notebook must be a JSON object (a dict), not {type(value).__name__}"
        )
    problem = _not_json(value, "nb")
    if problem is not None:
        raise ConfigurationError(f"the hooks' notebook holds a non-JSON value: {problem}")
    try:
        data = _encoder.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ConfigurationError(f"the hooks' notebook cannot be encoded as JSON: {exc}") from None
    if len(data) > limit:
        raise ConfigurationError(
            f"the hooks' notebook is {len(data)} bytes as JSON, over its {limit}-byte cap; "
            "keep only what later calls need"
        )
    return data


def checked_notebook(value: Any, limit: int = NOTEBOOK_LIMIT_BYTES) -> dict[str, Any]:
    """A deep, JSON-only copy of ``value``; raises naming the problem when it is not one."""
    copy: dict[str, Any] = _decoder.decode(encoded_notebook(value, limit))
    return copy


def _not_json(value: Any, path: str, depth: int = 0) -> str | None:
    """Where ``value`` stops being plain JSON, or ``None``; iterative enough for real data
    and bounded in depth (a self-referencing structure is refused, not recursed forever)."""
    if depth > 64:
        return f"{path} nests deeper than 64 levels"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        return None if type(value) is int else f"{path} is a {type(value).__name__}"
    if isinstance(value, float):
        if type(value) is not float:
            return f"{path} is a {type(value).__name__}"
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot hold"
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has the key {key!r} ({type(key).__name__}); JSON keys are strings"
            found = _not_json(item, f"{path}[{key!r}]", depth + 1)
            if found is not None:
                return found
        return None
    if type(value) is list:
        for index, item in enumerate(value):
            found = _not_json(item, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
        return None
    hint = " (use a list)" if isinstance(value, tuple | set | frozenset) else ""
    return f"{path} is a {type(value).__name__}{hint}; the notebook keeps JSON values only"
