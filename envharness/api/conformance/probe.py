"""The stand-ins ``check-env`` runs an environment with: an agent that answers legal moves
without a model, and an environment wrapper that times (or breaks) the calls it passes on.

The probe agent must behave the same on every run with the same seed, and after a resume as
without one, or the checks that compare runs would blame the environment for its own changes.
So it keeps no memory: each action is a function of the seed, the participant, the turn and the
observation. It picks among the legal moves when the observation lists them (a PettingZoo
``action_mask``, TextWorld's ``admissible_commands``, a list of ``legal_actions``), and
otherwise writes a value that the action's JSON Schema accepts.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from random import Random
from typing import Any

import msgspec

from envharness.contracts.agent import AgentContext

__all__ = ["PROBE_IMPLEMENTATION", "CallTimes", "InjectedFault", "ProbeAgent", "TimedEnvironment"]

PROBE_IMPLEMENTATION = "envharness-check-env-probe@1"

_MASK_KEYS = ("action_mask", "mask")
_LEGAL_KEYS = ("legal_actions", "legal_moves", "valid_actions")
_COMMAND_KEYS = ("admissible_commands", "valid_commands", "commands")
_TIMED = ("initialize", "observe", "resolve", "intervene")
_OPTIONAL = ("acting", "check_action", "render_text")
_PASSED_ON = ("lifespan", "score", "hook_view", "hook_forbidden_terms", "private_state")
_MAX_EXAMPLE_DEPTH = 12


class InjectedFault(Exception):
    """What ``resolve`` raises when the check makes it fail on purpose."""


# -- the probe agent -----------------------------------------------------------------------------


class ProbeAgent:
    """Answers a legal-looking action chosen from the seed, the turn and the observation."""

    implementation = PROBE_IMPLEMENTATION
    runs_inline = True  # a hash and a few dict lookups

    def __init__(self) -> None:
        self._schema: dict[str, Any] | None = None
        self._key = ""
        self._turn: Callable[[], int | None] = lambda: None

    def lifespan(self, context: AgentContext) -> AbstractAsyncContextManager[object]:
        self._schema = context.environment.action_schema
        self._key = f"{context.seed}|{context.participant}"
        self._turn = context.current_turn
        return contextlib.nullcontext()

    def act(self, observation: Any) -> dict[str, Any]:
        try:  # a Struct or dataclass observation is read as the JSON it is recorded as
            plain = msgspec.to_builtins(observation)
            seen = msgspec.json.encode(plain, order="sorted")
        except (TypeError, msgspec.EncodeError):
            plain, seen = observation, repr(observation).encode()
        digest = hashlib.sha256(f"{self._key}|{self._turn()}|".encode() + seen).digest()
        return choose_action(self._schema, plain, Random(digest))


def choose_action(schema: dict[str, Any] | None, observation: Any, rng: Random) -> dict[str, Any]:
    """A legal move named by the observation, put where the schema expects it; else a value
    the schema accepts; else ``{}``."""
    options = _legal_options(observation)
    root = _resolve(schema, schema) if schema else None
    example = _example(root, schema, rng, 0) if root is not None else None
    action: dict[str, Any] = example if isinstance(example, dict) else {}
    if options:
        choice = options[rng.randrange(len(options))]
        wanted = "integer" if isinstance(choice, int) else "string"
        slot = _slot_for(root, schema, wanted) if root is not None else None
        action[slot or ("action" if wanted == "integer" else "command")] = choice
    return action


def _legal_options(observation: Any) -> list[Any]:
    places = [observation]
    if isinstance(observation, Mapping):
        places += [value for value in observation.values() if isinstance(value, Mapping)]
    for place in places:
        if not isinstance(place, Mapping):
            continue
        for key in _MASK_KEYS:
            mask = place.get(key)
            if isinstance(mask, list) and all(isinstance(v, bool | int | float) for v in mask):
                legal = [index for index, allowed in enumerate(mask) if allowed]
                if legal:
                    return legal
        for key in _LEGAL_KEYS:
            value = place.get(key)
            if isinstance(value, list) and value and all(_is_int(v) for v in value):
                return list(value)
        for key in _COMMAND_KEYS:
            value = place.get(key)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return list(value)
    return []


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _resolve(node: Any, root: Any) -> Any:
    """A schema node with its ``$ref`` (``#/$defs/Name``) followed."""
    for _ in range(_MAX_EXAMPLE_DEPTH):
        if not isinstance(node, Mapping) or "$ref" not in node:
            return node
        reference = str(node["$ref"])
        target: Any = root
        for part in reference.removeprefix("#/").split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        node = target
    return node


def _slot_for(node: Any, root: Any, wanted: str) -> str | None:
    """The property a legal move goes in: the first required one of the move's type."""
    if not isinstance(node, Mapping):
        return None
    properties = node.get("properties") or {}
    names = list(node.get("required") or ()) + [
        n for n in properties if n not in node.get("required", ())
    ]
    for name in names:
        kind = _resolve(properties.get(name), root)
        if isinstance(kind, Mapping) and wanted in _types(kind):
            return str(name)
    return None


def _types(node: Mapping[str, Any]) -> list[str]:
    kind = node.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    if isinstance(kind, str):
        return [kind]
    return []


def _example(node: Any, root: Any, rng: Random, depth: int) -> Any:
    """A value ``node`` accepts (simple keywords only: enough for actions)."""
    node = _resolve(node, root)
    if not isinstance(node, Mapping) or depth > _MAX_EXAMPLE_DEPTH:
        return None
    if "const" in node:
        return node["const"]
    if isinstance(node.get("enum"), list) and node["enum"]:
        return node["enum"][rng.randrange(len(node["enum"]))]
    for key in ("anyOf", "oneOf"):
        choices = [c for c in node.get(key) or () if _resolve(c, root) != {"type": "null"}]
        if choices:
            return _example(choices[0], root, rng, depth + 1)
    types = [t for t in _types(node) if t != "null"] or (["object"] if "properties" in node else [])
    kind = types[0] if types else None
    if kind == "object":
        properties = node.get("properties") or {}
        return {
            str(name): _example(properties.get(name), root, rng, depth + 1)
            for name in node.get("required") or ()
        }
    if kind == "array":
        prefix = node.get("prefixItems") or []
        count = max(int(node.get("minItems", 0)), len(prefix))
        return [
            _example(prefix[i] if i < len(prefix) else node.get("items"), root, rng, depth + 1)
            for i in range(count)
        ]
    if kind == "integer":
        low, high = _bounds(node, integer=True)
        return rng.randint(int(low), int(high))
    if kind == "number":
        low, high = _bounds(node, integer=False)
        return low if low == high else rng.uniform(low, high)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        return "a" * int(node.get("minLength", 0))
    return None


def _bounds(node: Mapping[str, Any], *, integer: bool) -> tuple[float, float]:
    step = 1 if integer else 0.0
    low = _number(node.get("minimum"))
    if low is None and _number(node.get("exclusiveMinimum")) is not None:
        low = float(node["exclusiveMinimum"]) + step
    high = _number(node.get("maximum"))
    if high is None and _number(node.get("exclusiveMaximum")) is not None:
        high = float(node["exclusiveMaximum"]) - step
    if low is None:
        low = 0.0 if high is None else min(0.0, high)
    if high is None:
        high = low
    return low, max(low, high)


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


# -- the timed environment -----------------------------------------------------------------------


@dataclass
class CallTimes:
    """Nanoseconds spent in each environment method, over every call the check made."""

    spent: dict[str, list[int]] = field(default_factory=dict)

    def add(self, method: str, nanoseconds: int) -> None:
        self.spent.setdefault(method, []).append(nanoseconds)


class TimedEnvironment:
    """An environment passed through, each call timed; with ``fault``, ``resolve`` raises
    :class:`InjectedFault` instead (as the wrapped method would: sync or async).

    The optional methods are copied onto the instance only when the wrapped environment has
    them, so the runtime's capability checks (``isinstance`` against runtime Protocols, which
    look at attributes statically on Python 3.12+) see exactly what the environment offers.
    """

    def __init__(self, inner: Any, times: CallTimes, *, fault: str | None = None) -> None:
        self._inner = inner
        self._times = times
        self._fault = fault
        self.spec = inner.spec
        for name in _OPTIONAL:
            method = getattr(inner, name, None)
            if callable(method):
                setattr(self, name, self._timed(name, method))
        for name in _PASSED_ON:
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    @property
    def inner(self) -> Any:
        return self._inner

    def initialize(self, *args: Any) -> Any:
        return self._timed("initialize", self._inner.initialize)(*args)

    def observe(self, *args: Any) -> Any:
        return self._timed("observe", self._inner.observe)(*args)

    def resolve(self, *args: Any) -> Any:
        if self._fault is not None:
            return self._raise(self._fault)
        return self._timed("resolve", self._inner.resolve)(*args)

    def intervene(self, *args: Any) -> Any:
        return self._timed("intervene", self._inner.intervene)(*args)

    def __getattr__(self, name: str) -> Any:  # anything else the environment offers
        return getattr(self._inner, name)

    def _raise(self, message: str) -> Any:
        if inspect.iscoroutinefunction(self._inner.resolve):

            async def failing() -> Any:
                raise InjectedFault(message)

            return failing()
        raise InjectedFault(message)

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        times = self._times

        def call(*args: Any) -> Any:
            started = time.perf_counter_ns()
            result = method(*args)
            if inspect.isawaitable(result):
                return _awaited(result, name, started, times)
            times.add(name, time.perf_counter_ns() - started)
            return result

        return call


async def _awaited(result: Awaitable[Any], name: str, started: int, times: CallTimes) -> Any:
    try:
        return await result
    finally:
        times.add(name, time.perf_counter_ns() - started)


def timed_names() -> Sequence[str]:
    """The methods whose times a report shows, in this order."""
    return (*_TIMED, *_OPTIONAL)
