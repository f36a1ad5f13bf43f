"""``Scenario[T]``: an id, a typed input, an optional reference answer, metadata."""

from __future__ import annotations

import difflib
import re
from typing import Any, Generic, TypeVar

import msgspec

from envharness.errors import ScenarioInputError
from envharness.records import ScenarioRef

__all__ = ["Scenario", "validate_input"]

T = TypeVar("T")

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class Scenario(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One case to run. ``input`` is validated against the environment's input type when a
    session or experiment starts, and frozen into the evidence from then on."""

    id: str
    input: T
    reference: Any = None
    metadata: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.match(self.id):
            raise ScenarioInputError(
                f"scenario id {self.id!r} is not valid: use 1-128 letters, digits, '.', '_', "
                "':' or '-', starting with a letter or digit"
            )

    def reference_record(self, validated_input: Any) -> ScenarioRef:
        return ScenarioRef(
            id=self.id,
            input=msgspec.to_builtins(validated_input),
            reference=self.reference,
            metadata=self.metadata,
        )


def validate_input(scenario: Scenario[Any], input_type: type[T]) -> T:
    """Return the scenario's input as a validated ``input_type``, or raise naming the field.

    Structs are not validated when constructed, so an instance is checked by converting its
    builtin form back into the type; dicts (e.g. from JSON on the command line) convert too.
    """
    value = scenario.input
    expected = getattr(input_type, "__qualname__", repr(input_type))
    if isinstance(value, msgspec.Struct) and not isinstance(value, input_type):
        raise ScenarioInputError(
            f"scenario {scenario.id!r}: input is a {type(value).__qualname__}, but the "
            f"environment expects {expected}"
        )
    builtin = msgspec.to_builtins(value)
    if isinstance(builtin, dict):
        _refuse_unknown_fields(scenario.id, builtin, input_type, expected)
    try:
        return msgspec.convert(builtin, input_type)
    except (msgspec.ValidationError, TypeError) as exc:
        raise ScenarioInputError(
            f"scenario {scenario.id!r}: input does not match {expected}: {exc}"
        ) from exc


def _refuse_unknown_fields(
    scenario_id: str, given: dict[str, Any], input_type: type[Any], expected: str
) -> None:
    """A misspelt field would otherwise be dropped silently and its default used instead."""
    if not (isinstance(input_type, type) and issubclass(input_type, msgspec.Struct)):
        return
    known = set(input_type.__struct_fields__)
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; {expected} has {sorted(known)}"
            raise ScenarioInputError(
                f"scenario {scenario_id!r}: input field {name!r} is not a field of {expected}{hint}"
            )
