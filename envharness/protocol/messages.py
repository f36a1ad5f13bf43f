"""The messages of agent protocol v1: two tagged unions, one per direction.

Every message is a JSON object with a ``type`` tag, sent as one UTF-8 line. Fields a newer
version adds get defaults, and unknown fields are ignored on decoding, so a v1 reader keeps
working when the other side is newer. The docstrings below become the descriptions in
``protocol/schema/*.json``: they are written for agent authors in any language.

Decoding has a fast path (one typed msgspec decode, then a UTF-8 check of a line that is not
plain ASCII: msgspec skips a field it does not know without reading its bytes) and, only when
that fails, a slow path that works out *which* rule the line broke, so the violation names it
and says how to fix it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from envharness.protocol.errors import ProtocolViolationError

__all__ = [
    "AGENT_MESSAGE_TYPES",
    "CAPABILITIES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_LOG_MESSAGES",
    "HOST_MESSAGE_TYPES",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "Act",
    "Action",
    "ActionCost",
    "AgentMessage",
    "EnvironmentInfo",
    "ErrorMessage",
    "Feedback",
    "Hello",
    "HostMessage",
    "Limits",
    "LogMessage",
    "Ready",
    "Restore",
    "Restored",
    "ScenarioInfo",
    "Shutdown",
    "Snapshot",
    "State",
    "Vetoed",
    "decode_agent_message",
    "decode_host_message",
    "encode_into",
    "encode_message",
    "message_type",
]

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (1,)
DEFAULT_MAX_LINE_BYTES: Final = 1024 * 1024
DEFAULT_MAX_LOG_MESSAGES: Final = 10_000

CAPABILITIES: Final = frozenset({"snapshot"})
"""Capabilities v1 defines; ``snapshot`` covers both the ``snapshot`` and ``restore`` messages."""


class _Part(msgspec.Struct, frozen=True, kw_only=True):
    """A value nested inside a message."""


class _HostMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the messages the host sends."""


class _AgentMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the messages an agent sends."""


# -- parts -------------------------------------------------------------------------------------


def _doc(text: str) -> msgspec.Meta:
    """A field description that reaches the generated JSON Schema."""
    return msgspec.Meta(description=text)


class Limits(_Part, frozen=True):
    """What the host enforces on this agent; a conforming agent stays inside them."""

    max_line_bytes: Annotated[
        int, _doc("Longest line, in bytes without the newline, the host accepts from the agent.")
    ] = DEFAULT_MAX_LINE_BYTES
    max_log_messages: Annotated[
        int, _doc("Most `log` messages the host accepts while it waits for one answer.")
    ] = DEFAULT_MAX_LOG_MESSAGES
    ready_timeout: Annotated[
        float | None, _doc("Seconds the host waits for `ready` after `hello`; null: no limit.")
    ] = None
    act_timeout: Annotated[
        float | None, _doc("Seconds the host waits for `action` after `act`; null: no limit.")
    ] = None
    shutdown_grace: Annotated[
        float | None,
        _doc("Seconds the agent has to exit after `shutdown` before it is terminated."),
    ] = None


class EnvironmentInfo(_Part, frozen=True):
    """The environment the agent plays in: its identity and, when declared, its types."""

    name: str
    version: str
    turn_order: Literal["simultaneous", "sequential", "environment"]
    roles: tuple[str, ...]
    action_schema: Annotated[
        dict[str, Any] | None, _doc("JSON Schema of a valid action, when the environment has one.")
    ] = None
    observation_schema: Annotated[
        dict[str, Any] | None,
        _doc("JSON Schema of an observation, when the environment has one."),
    ] = None


class ActionCost(_Part, frozen=True):
    """What deciding an action cost. Every field is optional: report what you know."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    usd: float | None = None
    seconds: float | None = None
    model: str | None = None


class Vetoed(_Part, frozen=True):
    """Your previous answer in this turn was vetoed by a harness hook (`block_and_prompt`) and
    nothing was executed; the `act` that carries this asks you again."""

    action: Annotated[Any, _doc("The answer that was vetoed, as the host recorded it.")]
    reason: Annotated[str, _doc("The hook's message: why, and usually what to do instead.")]


class ScenarioInfo(_Part, frozen=True):
    """The task this session plays: the scenario's id and input, as the session recorded them
    (never the scenario's reference answer)."""

    id: str
    input: Annotated[Any, _doc("The scenario's input, in its JSON form.")] = None


# -- host to agent -----------------------------------------------------------------------------


class Hello(_HostMessage, tag="hello", frozen=True):
    """The first message of every session. The agent answers `ready`."""

    protocols: Annotated[
        tuple[int, ...], _doc("Protocol versions the host offers; the agent picks one.")
    ]
    session: str
    participant: str
    role: str
    seed: Annotated[int, _doc("The session's seed, for agents that sample.")]
    environment: EnvironmentInfo
    turns: Annotated[
        int | None, _doc("Turns planned for the session (the environment may end it sooner).")
    ] = None
    capabilities: Annotated[
        tuple[str, ...], _doc("Optional features the host may use with this agent.")
    ] = ()
    limits: Limits = Limits()
    scenario: Annotated[
        ScenarioInfo | UnsetType | None,
        _doc(
            "The scenario this session plays: its id and input, for an agent whose policy "
            "depends on the task (an addition within version 1)."
        ),
    ] = UNSET


class Act(_HostMessage, tag="act", frozen=True):
    """Your turn: decide. Answer with an `action` that repeats this `id`."""

    id: str
    turn: int
    observation: Annotated[Any, _doc("What this participant sees now (private to it).")]
    actions: Annotated[
        tuple[Any, ...] | None,
        _doc("The admissible actions when the environment knows them, else null."),
    ] = None
    vetoed: Annotated[
        Vetoed | UnsetType | None,
        _doc(
            "Present only when this `act` asks again in the same turn because a harness hook "
            "vetoed your previous answer: what it was and why (an addition within version 1)."
        ),
    ] = UNSET


class Feedback(_HostMessage, tag="feedback", frozen=True):
    """What became of the action that answered act `act_id` or, with status `outcome`, what
    the environment told a participant that did not act this turn. Never answered."""

    turn: int
    act_id: str
    status: Literal["executed", "blocked", "outcome"]
    action: Annotated[
        Any, _doc("What was executed: your action, or a harness's rewrite of it.")
    ] = None
    outcome: Annotated[Any, _doc("What the environment reported to you (executed only).")] = None
    reason: Annotated[str | None, _doc("Why nothing was executed (blocked only).")] = None


class Snapshot(_HostMessage, tag="snapshot", frozen=True):
    """Capability `snapshot`: answer `state`, repeating this `id`, with everything needed to
    continue later from exactly this point."""

    id: str


class Restore(_HostMessage, tag="restore", frozen=True):
    """Capability `snapshot`: continue from `state` (a value this agent once sent in `state`).
    Answer `restored`, repeating this `id`. Sent only after `ready` and before the first `act`."""

    id: str
    state: Any


class Shutdown(_HostMessage, tag="shutdown", frozen=True):
    """The session is over: flush your output, then exit with status 0. Never answered."""

    reason: str = ""


# -- agent to host -----------------------------------------------------------------------------


class Ready(_AgentMessage, tag="ready", frozen=True):
    """The answer to `hello`."""

    protocol: Annotated[int, _doc("The version chosen, one of those `hello` offered.")]
    implementation: Annotated[
        str | None, _doc("The agent's own versioned id, e.g. `echo@1`; recorded as evidence.")
    ] = None
    capabilities: Annotated[
        tuple[str, ...], _doc("Optional features this agent supports, e.g. `snapshot`.")
    ] = ()


class Action(_AgentMessage, tag="action", frozen=True):
    """The answer to `act`."""

    id: Annotated[str, _doc("The `id` of the `act` this answers.")]
    action: Annotated[
        dict[str, Any], _doc("The decision, a JSON object the environment validates.")
    ]
    cost: ActionCost | None = None


class State(_AgentMessage, tag="state", frozen=True):
    """The answer to `snapshot`."""

    id: Annotated[str, _doc("The `id` of the `snapshot` this answers.")]
    state: Annotated[Any, _doc("Any JSON value; it comes back unchanged in `restore`.")]


class Restored(_AgentMessage, tag="restored", frozen=True):
    """The answer to `restore`."""

    id: Annotated[str, _doc("The `id` of the `restore` this answers.")]


class ErrorMessage(_AgentMessage, tag="error", frozen=True):
    """The agent cannot go on; the host ends the session as failed and records `message`."""

    message: str
    id: Annotated[
        str | None, _doc("The request this answers; null when the agent gives up unasked.")
    ] = None


class LogMessage(_AgentMessage, tag="log", frozen=True):
    """A diagnostic recorded with the evidence. Allowed at any time; never answered."""

    message: str
    level: Literal["debug", "info", "warning", "error"] = "info"


HostMessage = Hello | Act | Feedback | Snapshot | Restore | Shutdown
AgentMessage = Ready | Action | State | Restored | ErrorMessage | LogMessage


def message_type(message: HostMessage | AgentMessage) -> str:
    """The ``type`` tag of a message (``"hello"``, ``"action"``, ...)."""
    tag: str = message.__struct_config__.tag  # type: ignore[assignment]
    return tag


HOST_MESSAGE_TYPES: Final = frozenset(
    str(kind.__struct_config__.tag) for kind in (Hello, Act, Feedback, Snapshot, Restore, Shutdown)
)
AGENT_MESSAGE_TYPES: Final = frozenset(
    str(kind.__struct_config__.tag)
    for kind in (Ready, Action, State, Restored, ErrorMessage, LogMessage)
)

# -- encoding and decoding ---------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_agent_decoder = msgspec.json.Decoder(AgentMessage)
_host_decoder = msgspec.json.Decoder(HostMessage)
_any_decoder = msgspec.json.Decoder()


def encode_message(message: HostMessage | AgentMessage) -> bytes:
    """One protocol line: the message as compact JSON followed by ``\\n``."""
    buffer = bytearray()
    _encoder.encode_into(message, buffer)
    buffer.extend(b"\n")
    return bytes(buffer)


def encode_into(message: HostMessage | AgentMessage, buffer: bytearray) -> None:
    """Overwrite ``buffer`` with the line for ``message`` (reusing its allocation)."""
    _encoder.encode_into(message, buffer)
    buffer.extend(b"\n")


def decode_agent_message(line: bytes) -> AgentMessage:
    """Decode one line an agent sent (without its newline), or say precisely what is wrong."""
    try:
        message = _agent_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise _diagnose(line, exc, AGENT_MESSAGE_TYPES, HOST_MESSAGE_TYPES, "an agent") from None
    if not line.isascii() and (violation := _utf8_violation(line)) is not None:
        raise violation
    return message


def decode_host_message(line: bytes) -> HostMessage:
    """Decode one line the host sent (without its newline), or say precisely what is wrong."""
    try:
        message = _host_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise _diagnose(line, exc, HOST_MESSAGE_TYPES, AGENT_MESSAGE_TYPES, "the host") from None
    if not line.isascii() and (violation := _utf8_violation(line)) is not None:
        raise violation
    return message


def _utf8_violation(line: bytes) -> ProtocolViolationError | None:
    """``invalid_utf8`` naming the byte and the field it sits in, if ``line`` is not UTF-8."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        field = _field_at(line, exc.start)
        return ProtocolViolationError(
            "invalid_utf8",
            f"the line is not valid UTF-8 (byte {exc.start}{f', in {field}' if field else ''}); "
            "protocol lines must be UTF-8 encoded JSON throughout, also in fields the host "
            "does not read",
            line,
        )
    return None


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[][{}:,]', re.DOTALL)
"""A JSON string (escapes and all; unterminated at the end of the line) or a structural byte."""


def _field_at(line: bytes, offset: int) -> str | None:
    """Where byte ``offset`` of a JSON line sits: ``field `action.note``` (``items[2]`` in
    arrays) or ``a key of `action```; ``None`` when it is in no string (slow path only)."""
    path: list[str | int] = []
    in_object: list[bool] = []
    expect_key = False
    for token in _TOKEN.finditer(line):
        if token.start() >= offset:
            return None
        text = token.group()
        if text[0] == 0x22:  # a string
            key = expect_key and bool(in_object) and in_object[-1]
            if offset < token.end():
                if key:
                    parent = _dotted(path[:-1])
                    return f"a key of `{parent}`" if parent else "a key of the message"
                return f"field `{_dotted(path)}`" if path else None
            if key:
                path[-1] = _key_text(text)
        elif text in (b"{", b"["):
            in_object.append(text == b"{")
            path.append("" if text == b"{" else 0)
            expect_key = text == b"{"
        elif text in (b"}", b"]") and in_object:
            in_object.pop()
            path.pop()
        elif text == b"," and in_object:
            last = path[-1]
            expect_key = in_object[-1]
            if isinstance(last, int):
                path[-1] = last + 1
        elif text == b":":
            expect_key = False
    return None


def _key_text(token: bytes) -> str:
    try:
        key: str = _any_decoder.decode(token)
    except msgspec.DecodeError:
        return token[1:-1].decode("utf-8", "replace")
    return key


def _dotted(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


def _diagnose(
    line: bytes,
    error: msgspec.DecodeError,
    allowed: frozenset[str],
    other_direction: frozenset[str],
    sender: str,
) -> ProtocolViolationError:
    """Classify a line the typed decoder refused: the first broken rule, in framing order."""
    violation = _utf8_violation(line)
    if violation is not None:
        return violation
    try:
        value = _any_decoder.decode(line)
    except msgspec.DecodeError as exc:
        return ProtocolViolationError(
            "invalid_json",
            f"the line is not valid JSON ({exc}); every line on the protocol stream must be one "
            "JSON object. Write diagnostics to stderr or send them as a `log` message",
            line,
        )
    expected = ", ".join(sorted(allowed))
    if not isinstance(value, dict):
        return ProtocolViolationError(
            "not_an_object",
            f"the line is a JSON {_json_kind(value)}, not an object; every message is a "
            'JSON object with a "type" field',
            line,
        )
    if "type" not in value:
        return ProtocolViolationError(
            "missing_type",
            f'the object has no "type" field; {sender} may send: {expected}',
            line,
        )
    kind = value["type"]
    if kind not in allowed:
        hint = (
            f" ({kind!r} travels the other way)"
            if isinstance(kind, str) and kind in other_direction
            else ""
        )
        return ProtocolViolationError(
            "unknown_type",
            f'"type" is {kind!r}{hint}; {sender} may send: {expected}',
            line,
        )
    if not isinstance(error, msgspec.ValidationError):
        return ProtocolViolationError("invalid_json", f"the line is not valid JSON ({error})", line)
    return ProtocolViolationError(
        "invalid_field",
        f"a {kind!r} message with a missing or mistyped field: {error}; see the schema in "
        "protocol/schema/",
        line,
    )


def _json_kind(value: object) -> str:
    """The JSON name of a decoded value's kind, as an agent author would say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "array"
