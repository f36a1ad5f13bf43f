"""What the session runner checks and keeps of users' values before it seals them.

Struct constructors do not validate, and a record with a wrong type would be evidence nobody
can read back, forever; so every value from an environment or an agent is checked (naming the
field) or turned into a JSON form here, and an environment method that raises is named
(:func:`call_environment`). A failure inside a session is a :class:`SessionFailure` — recorded,
never raised to the caller.
"""

from __future__ import annotations

import hashlib
import inspect
import traceback
from collections.abc import Awaitable, Mapping
from types import GeneratorType
from typing import Any, TypeVar

import anyio
import msgspec
from msgspec import UNSET

from envharness.contracts.environment import Environment, Resolution
from envharness.records import ErrorInfo, Payload, Score, Status

__all__ = [
    "SessionFailure",
    "as_evidence",
    "awaited",
    "call_environment",
    "checked",
    "checked_resolution",
    "checked_score",
    "checked_signals",
    "encodable",
    "environment_failure",
    "error_info",
    "interruption",
    "invoke",
    "is_pending",
    "leaves",
    "private_copy",
    "sha256",
]

TRACEBACK_LIMIT = 16_000
"""Characters of a traceback kept in evidence (its end: where it failed)."""


class SessionFailure(Exception):
    """Something inside the session went wrong; recorded, never raised to the caller."""

    def __init__(self, reason: str, cause: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error_info(cause) if cause is not None else None


def interruption(exc: BaseException) -> tuple[Status, str]:
    """How a session ended that was left by an exception the runner does not expect."""
    found = leaves(exc)
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in found):
        return "stopped", "interrupted by the user (Ctrl-C)"
    cancelled = anyio.get_cancelled_exc_class()
    if all(isinstance(leaf, cancelled) for leaf in found):
        return "stopped", "the run was cancelled"
    first = next(leaf for leaf in found if not isinstance(leaf, cancelled))
    if isinstance(first, Exception):
        return "failed", f"internal error: {first!r}"
    return "failed", f"{type(first).__name__} raised inside the session: {first}"


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


async def call_environment(environment: Environment[Any, Any], method: str, *args: Any) -> Any:
    """``environment.method(*args)``, awaited when the method is ``async`` (an environment in
    another process answers over a pipe); whatever it raises fails the session, naming the
    method."""
    result = invoke(environment, method, *args)
    if is_pending(result):
        result = await awaited(result, method)
    return result


def invoke(environment: Environment[Any, Any], method: str, *args: Any) -> Any:
    """:func:`call_environment` without its coroutine, for the calls every turn makes: the
    method's value, or the awaitable an ``async`` method returned (then :func:`is_pending`,
    and :func:`awaited` gives the value)."""
    try:
        return getattr(environment, method)(*args)
    except Exception as exc:
        raise environment_failure(method, exc) from exc


def environment_failure(method: str, exc: Exception) -> SessionFailure:
    """The failure of a session whose environment's ``method`` raised ``exc`` (for the turn's
    calls, which are bound once and made without :func:`invoke`)."""
    return SessionFailure(f"environment {method}() raised {type(exc).__name__}: {exc}", exc)


def is_pending(result: Any) -> bool:
    """Whether :func:`invoke` gave an awaitable rather than a value."""
    kind = type(result)
    if kind in _SETTLED:  # one lookup for what nearly every call returns
        return False
    if inspect.isawaitable(result):
        return True
    if kind is not GeneratorType:  # a generator's answer is its own, not its type's
        if len(_SETTLED) >= _SETTLED_MAX:  # bounded, for types made at run time
            _SETTLED.intersection_update(_PLAIN)
        _SETTLED.add(kind)
    return False


async def awaited(result: Awaitable[Any], method: str) -> Any:
    """The value of an ``async`` environment method; what it raises fails the session."""
    try:
        return await result
    except Exception as exc:
        raise environment_failure(method, exc) from exc


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode

_PLAIN = frozenset({dict, list, tuple, str, int, float, bool, type(None), Resolution})
_SETTLED: set[type] = set(_PLAIN)
"""The types whose values are not awaitable: the plain values a sync method returns, and each
other type once a value of it was found not to be (asked for every call: the full test,
:func:`inspect.isawaitable`, is an abstract-class check, and for a Struct a missing class
attribute raised inside)."""
_SETTLED_MAX = 256


def encodable(value: Any, what: str, participant: str | None = None) -> Any:
    """The JSON form of ``value`` (the ``what`` an environment produced, for ``participant``
    when given), or a named failure. The name is put together only on failure: this runs for
    every observation and outcome."""
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError) as exc:
        if participant is not None:
            what = f"{what} for {participant!r}"
        raise SessionFailure(
            f"the {what} ({type(value).__name__}) is not encodable by msgspec: {exc}", exc
        ) from exc


def as_evidence(value: Any) -> Any:
    """A JSON form of whatever an agent returned, so even garbage is recorded, not lost."""
    try:
        return _json_decode(_json_encode(value))
    except (TypeError, ValueError, msgspec.MsgspecError, RecursionError):
        return {"unencodable": repr(value)[:2000]}


_P = TypeVar("_P", bound=Payload)


def checked(payload: _P, source: str) -> _P:
    """``payload`` if its fields have the declared types; a named failure otherwise.

    Struct constructors do not validate, and a record with a wrong type would be evidence
    nobody can read back, forever: so what users' code supplied is checked before sealing.
    """
    try:
        msgspec.convert(msgspec.to_builtins(payload), type(payload))
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise SessionFailure(f"{source} is not valid: {exc}", exc) from exc
    return payload


def checked_score(score: Score) -> Score:
    """:func:`checked` for the environment's score, which every session records once: what
    nearly every score is — numbers by name, no per-participant metrics — is checked by hand,
    and anything else by the full round trip (which names the field)."""
    passed = score.passed
    if (
        type(score.version) is str
        and (passed is None or type(passed) is bool)
        and score.per_participant is UNSET
        and _numbers_by_name(score.metrics)
        and _numbers_by_name(score.uncertainty)
    ):
        return score
    return checked(score, "the environment's score() report")


def _numbers_by_name(values: Any) -> bool:
    """Whether ``values`` is a plain dict of names to numbers (or ``None``), as a score's
    metrics must be; ``False`` only means the full check decides."""
    if type(values) is not dict:
        return False
    for name, value in values.items():  # a loop, not all(): no generator per call
        if type(name) is not str or (value is not None and not _plain_number(value)):
            return False
    return True


def checked_signals(resolution: Resolution) -> dict[str, float | None]:
    """Signals are numbers by name (checked by hand: this runs every turn)."""
    signals: dict[str, float | None] = dict(resolution.signals)
    for name, value in signals.items():
        if type(value) is float and type(name) is str:  # what nearly every signal is
            continue
        if not isinstance(name, str) or (value is not None and not _recordable_number(value)):
            raise SessionFailure(
                f"the environment's resolve() signals is not valid: signal {name!r} is "
                f"{type(value).__name__} {value!r:.80}; signals map names to numbers a float "
                "can hold"
            )
    return signals


def checked_resolution(resolution: Any, roster: Mapping[str, Any]) -> Resolution:
    """``resolution`` if it is a well-formed :class:`Resolution` for ``roster``; otherwise a
    failure naming every problem (an outcome or reward for someone not playing among them)."""
    if not isinstance(resolution, Resolution):
        raise SessionFailure(
            f"environment resolve() returned {type(resolution).__name__}, expected a "
            "Resolution(state=..., outcomes=..., done=...)"
        )
    if _plainly_valid(resolution, roster):
        return resolution
    problems = []
    for flag in ("done", "truncated"):
        if not isinstance(getattr(resolution, flag), bool):
            problems.append(f"{flag} must be True or False, not {getattr(resolution, flag)!r}")
    for name in ("outcomes", "signals", "artifacts", "rewards"):
        if not isinstance(getattr(resolution, name), Mapping):
            problems.append(
                f"{name} must be a mapping, not {type(getattr(resolution, name)).__name__}"
            )
    if not problems:
        problems += [
            f"artifacts[{name!r}] must be bytes, not {type(data).__name__}"
            for name, data in resolution.artifacts.items()
            if not isinstance(data, bytes | bytearray)
        ]
        for name in ("outcomes", "rewards"):
            unknown = [key for key in getattr(resolution, name) if key not in roster]
            if unknown:
                problems.append(
                    f"{name} names {', '.join(map(repr, unknown))}, who is not a participant "
                    f"(participants: {', '.join(roster)})"
                )
        problems += [
            f"rewards[{name!r}] must be a number a float can hold, not {type(value).__name__} "
            f"{value!r:.40}"
            for name, value in resolution.rewards.items()
            if value is not None and not _recordable_number(value)
        ]
    if problems:
        raise SessionFailure(
            f"environment resolve() returned a bad Resolution: {'; '.join(problems)}"
        )
    return resolution


def _plainly_valid(resolution: Resolution, roster: Mapping[str, Any]) -> bool:
    """Whether ``resolution`` is valid on its face — plain dicts, bools and numbers, no bytes
    to check — which is what nearly every turn returns: then the full check, which names each
    problem, need not run. ``False`` only means the full check decides."""
    outcomes, rewards = resolution.outcomes, resolution.rewards
    if not (
        type(resolution.done) is bool
        and type(resolution.truncated) is bool
        and type(outcomes) is dict
        and type(resolution.signals) is dict
        and type(resolution.artifacts) is dict
        and type(rewards) is dict
        and not resolution.artifacts
    ):
        return False
    for name in outcomes:  # loops, not all(): no generator to build every turn
        if name not in roster:
            return False
    for name, value in rewards.items():
        if name not in roster or (value is not None and not _plain_number(value)):
            return False
    return True


_FLOAT_RANGE = 2**1024
"""Records are read back with numbers as floats: an int this large or larger has no float,
so it could be sealed but never read again (the full check refuses it, naming it)."""


def _recordable_number(value: object) -> bool:
    """A number, not a bool, that a float can hold: what a signal, reward or metric may be."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, int) or -_FLOAT_RANGE < value < _FLOAT_RANGE


def _plain_number(value: object) -> bool:
    """A float, or an int a float can hold: the numbers the fast paths may pass unchecked."""
    kind = type(value)
    return kind is float or (kind is int and -_FLOAT_RANGE < value < _FLOAT_RANGE)  # type: ignore[operator]


def private_copy(original: Any, shown: Any) -> Any:
    """A fresh object equal to ``original`` (rebuilt from its recorded JSON form)."""
    kind = type(original)
    if kind in _SHOWN_AS_IS or isinstance(original, _JSON_KINDS):  # a tuple: faster than a union
        return shown
    try:
        return msgspec.convert(shown, kind)
    except (msgspec.ValidationError, TypeError):
        return shown


_JSON_KINDS = (str, int, float, bool, dict, list, tuple)
"""What an observation's JSON form already is (so the JSON form itself is the copy)."""
_SHOWN_AS_IS = frozenset({*_JSON_KINDS, type(None)})


def error_info(exc: BaseException) -> ErrorInfo:
    """The whole diagnosis: message, traceback and, for an external agent, its stderr tail."""
    text = "".join(traceback.format_exception(exc))
    stderr_tail = getattr(exc, "stderr_tail", None)
    return ErrorInfo(
        type=type(exc).__qualname__,
        message=str(exc),
        traceback=text[-TRACEBACK_LIMIT:],
        stderr_tail=stderr_tail if isinstance(stderr_tail, str) else None,
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
