"""Environment operations: imperative work beside the rules (drive a simulator, call an engine).

An operation has a stable ``name``, a ``version`` and a JSON ``config``; only those are frozen
into a session's evidence — never its clients or credentials, which stay on the Python object.
A session calls operations through the :class:`~envharness.runtime.SessionRunner` seam
(``await runner.operate(name, request, state)`` from ``before_turn``/``after_turn``), and every
call leaves an ``operation.receipt`` record with the request, the result, and the new state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from envharness.errors import ConfigurationError
from envharness.records import OperationRef

__all__ = ["EnvironmentOperation", "OperationResult", "operation_ref"]


@dataclass(frozen=True, slots=True)
class OperationResult:
    """What an operation returns: its JSON ``result`` and, when it changed it, the new state."""

    result: Any = None
    state: Any = None
    changed_state: bool = field(default=False)


@runtime_checkable
class EnvironmentOperation(Protocol):
    """``run(state, request)`` may be sync or async; it returns an :class:`OperationResult`."""

    name: str
    version: str
    config: Mapping[str, Any]

    def run(self, state: Any, request: Any) -> Any: ...


def operation_ref(operation: object) -> OperationRef:
    """The operation as evidence, or a clear error naming what it lacks."""
    name = getattr(operation, "name", None)
    version = getattr(operation, "version", None)
    config = getattr(operation, "config", {})
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        raise ConfigurationError(
            f"operation {operation!r} needs a `name` and a `version` (non-empty strings)"
        )
    if not callable(getattr(operation, "run", None)):
        raise ConfigurationError(f"operation {name!r} has no run(state, request) method")
    if not isinstance(config, Mapping):
        raise ConfigurationError(f"operation {name!r}: config must be a mapping of JSON values")
    return OperationRef(name=name, version=version, config=dict(config))
