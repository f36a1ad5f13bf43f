"""The messages of environment protocol v1: an environment program in any language.

The host calls the program's rules the way the runtime calls a Python environment's methods:
one request per call (``initialize``, ``observe``, ``resolve``, ``intervene`` and, where the
program declares them, ``acting``, ``check_action``, ``render_text``, ``score``), each answered
by a ``result`` whose ``value`` is what the Python method would return. Every request that
needs a state carries it, so a program may be pure (``protocol/environment.md`` says why, and
how a program that keeps a live state uses that).

The framing, limits and violation codes are the agent protocol's (:mod:`.framing`,
:mod:`.errors`); only the message set differs. Fields a newer version adds get defaults, and
unknown fields are ignored on decoding.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

from envharness.protocol.errors import ProtocolError

# The agent protocol's line diagnosis is protocol-neutral (it is told which types each side may
# send): shared within this package rather than written twice.
from envharness.protocol.messages import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_LOG_MESSAGES,
    _diagnose,
    _utf8_violation,
)

__all__ = [
    "ENVIRONMENT_CAPABILITIES",
    "ENVIRONMENT_PROTOCOL_VERSION",
    "HOST_REQUEST_TYPES",
    "PROGRAM_MESSAGE_TYPES",
    "SUPPORTED_ENVIRONMENT_VERSIONS",
    "Acting",
    "CheckAction",
    "EnvironmentReportedError",
    "FindingValue",
    "HostRequest",
    "Initialize",
    "Intervene",
    "Observe",
    "ProgramError",
    "ProgramHello",
    "ProgramLimits",
    "ProgramLog",
    "ProgramMessage",
    "ProgramReady",
    "ProgramShutdown",
    "ProgramSpec",
    "Purpose",
    "RenderText",
    "Resolve",
    "ResolutionValue",
    "Result",
    "ScenarioInfo",
    "ScoreRequest",
    "ScoreValue",
    "decode_program_message",
]

ENVIRONMENT_PROTOCOL_VERSION: Final = 1
SUPPORTED_ENVIRONMENT_VERSIONS: Final = (1,)

ENVIRONMENT_CAPABILITIES: Final = frozenset({"acting", "check_action", "render_text", "score"})
"""The optional requests v1 defines; a program names those it answers in ``ready``."""


Purpose = Literal["describe", "session", "call"]
"""Why a program process was started (``hello.purpose``)."""


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class _Part(msgspec.Struct, frozen=True, kw_only=True):
    """A value nested inside a message."""


class _HostMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the messages the host sends to an environment program."""


class _ProgramMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the messages an environment program sends."""


# -- parts -------------------------------------------------------------------------------------


class ProgramLimits(_Part, frozen=True):
    """What the host enforces on the program; ``None`` timeouts mean no limit of that kind."""

    max_line_bytes: Annotated[
        int, _doc("Longest line, in bytes without the newline, the host accepts.")
    ] = DEFAULT_MAX_LINE_BYTES
    max_log_messages: Annotated[
        int, _doc("Most `log` messages the host accepts while it waits for one answer.")
    ] = DEFAULT_MAX_LOG_MESSAGES
    ready_timeout: Annotated[
        float | None, _doc("Seconds the host waits for `ready` after `hello`.")
    ] = 60.0
    call_timeout: Annotated[
        float | None, _doc("Seconds the host waits for the `result` of any other request.")
    ] = 60.0
    shutdown_grace: Annotated[
        float | None, _doc("Seconds the program has to exit after `shutdown`.")
    ] = 2.0


class ProgramSpec(_Part, frozen=True):
    """What the environment is: the program's ``EnvironmentSpec``, with JSON Schema for types."""

    name: str
    version: str
    roles: tuple[str, ...] = ("agent",)
    turn_order: Literal["simultaneous", "sequential", "environment"] = "simultaneous"
    invalid_actions: Literal["fail", "block"] = "fail"
    input_schema: Annotated[
        dict[str, Any] | None, _doc("JSON Schema of a scenario's input (advisory).")
    ] = None
    action_schema: Annotated[
        dict[str, Any] | None, _doc("JSON Schema of an action; told to agents (advisory).")
    ] = None
    observation_schema: Annotated[
        dict[str, Any] | None, _doc("JSON Schema of an observation (advisory).")
    ] = None
    scoring_version: str | None = None


class ScenarioInfo(_Part, frozen=True):
    """The scenario a session ran, as ``score`` sees it."""

    id: str
    input: Any
    reference: Any = None
    metadata: dict[str, Any] = {}


class FindingValue(_Part, frozen=True):
    """A finding in a ``score`` result; ``turns`` are the turns whose outcomes support it."""

    title: str
    detail: str = ""
    severity: Literal["info", "low", "medium", "high"] = "info"
    turns: tuple[int, ...] = ()


class ResolutionValue(_Part, frozen=True):
    """The ``value`` of a ``resolve`` result: ``Resolution``'s fields, artifacts in base64."""

    state: Any
    outcomes: dict[str, Any] = {}
    done: bool = False
    truncated: bool = False
    signals: dict[str, float | None] = {}
    rewards: dict[str, float] = {}
    artifacts: Annotated[
        dict[str, bytes], _doc("File name to its bytes, base64-encoded (standard alphabet).")
    ] = {}


class ScoreValue(_Part, frozen=True):
    """The ``value`` of a ``score`` result (or ``null``: no score)."""

    metrics: dict[str, float] = {}
    passed: bool | None = None
    findings: tuple[FindingValue, ...] = ()
    uncertainty: dict[str, float] = {}
    version: str | None = None
    per_participant: dict[str, dict[str, float]] = {}


# -- host to program ---------------------------------------------------------------------------


class ProgramHello(_HostMessage, tag="hello", frozen=True):
    """The first message to every program process; it answers `ready`."""

    protocols: Annotated[tuple[int, ...], _doc("Versions the host offers; the program picks.")]
    purpose: Annotated[
        Purpose,
        _doc(
            "`describe`: only the spec is wanted (a `shutdown` follows); `session`: one "
            "session's requests follow; `call`: one request follows (a branch's `intervene`)."
        ),
    ] = "session"
    limits: ProgramLimits = ProgramLimits()


class Initialize(_HostMessage, tag="initialize", frozen=True):
    """A new episode: answer the initial state."""

    id: str
    input: Annotated[Any, _doc("The scenario's input.")]
    seed: Annotated[int, _doc("0 <= seed < 2**32, drawn from the session's seed.")]
    roster: Annotated[dict[str, str], _doc("Each participant's role.")]


class Observe(_HostMessage, tag="observe", frozen=True):
    """What `participant` may see of `state`, and nothing it may not."""

    id: str
    state: Any
    participant: str


class Resolve(_HostMessage, tag="resolve", frozen=True):
    """Apply the actions of the participants who acted; answer a resolution."""

    id: str
    state: Any
    actions: Annotated[dict[str, Any], _doc("Participant to its (JSON object) action.")]


class Intervene(_HostMessage, tag="intervene", frozen=True):
    """Apply a declared outside change (a branch); answer the new state, or `error` to refuse."""

    id: str
    state: Any
    intervention: Any


class Acting(_HostMessage, tag="acting", frozen=True):
    """Capability `acting`: who acts on `state` (a list of participants, maybe empty)."""

    id: str
    state: Any


class CheckAction(_HostMessage, tag="check_action", frozen=True):
    """Capability `check_action`: `null` for a legal action, else why it is not (a string)."""

    id: str
    state: Any
    participant: str
    action: Any


class RenderText(_HostMessage, tag="render_text", frozen=True):
    """Capability `render_text`: `state` as text for `participant` (or `null`)."""

    id: str
    state: Any
    participant: str


class ScoreRequest(_HostMessage, tag="score", frozen=True):
    """Capability `score`: the finished session's score report (or `null`)."""

    id: str
    state: Any
    scenario: ScenarioInfo


class ProgramShutdown(_HostMessage, tag="shutdown", frozen=True):
    """No more requests: flush your output and exit with status 0. Never answered."""

    reason: str = ""


# -- program to host ---------------------------------------------------------------------------


class ProgramReady(_ProgramMessage, tag="ready", frozen=True):
    """The answer to `hello`."""

    protocol: Annotated[int, _doc("The version chosen, one of those `hello` offered.")]
    spec: ProgramSpec
    implementation: Annotated[str | None, _doc("The program's own versioned id, e.g. `nim@1`.")] = (
        None
    )
    capabilities: Annotated[
        tuple[str, ...], _doc("Optional requests this program answers, e.g. `score`.")
    ] = ()


class Result(_ProgramMessage, tag="result", frozen=True):
    """The answer to a request: `value` is what that request asks for."""

    id: Annotated[str, _doc("The `id` of the request this answers.")]
    value: Any = None


class ProgramError(_ProgramMessage, tag="error", frozen=True):
    """The request (or, without `id`, the program) failed; the host records `message`."""

    message: str
    id: str | None = None


class ProgramLog(_ProgramMessage, tag="log", frozen=True):
    """A diagnostic; allowed at any time, never answered."""

    message: str
    level: Literal["debug", "info", "warning", "error"] = "info"


HostRequest = (
    Initialize | Observe | Resolve | Intervene | Acting | CheckAction | RenderText | ScoreRequest
)
ProgramMessage = ProgramReady | Result | ProgramError | ProgramLog

HOST_REQUEST_TYPES: Final = frozenset(
    str(kind.__struct_config__.tag)
    for kind in (
        ProgramHello,
        Initialize,
        Observe,
        Resolve,
        Intervene,
        Acting,
        CheckAction,
        RenderText,
        ScoreRequest,
        ProgramShutdown,
    )
)
PROGRAM_MESSAGE_TYPES: Final = frozenset(
    str(kind.__struct_config__.tag) for kind in (ProgramReady, Result, ProgramError, ProgramLog)
)


class EnvironmentReportedError(ProtocolError):
    """The environment program answered ``error``: it followed the protocol to say it failed
    (an intervention it rejects, a bug it caught).

    ``answered``: the error answered the request (the program is in step and may be asked
    again); otherwise the program gave up on its own.
    """

    def __init__(self, message: str, request: str | None = None, *, answered: bool = False) -> None:
        where = f" answering {request}" if request is not None else ""
        super().__init__(f"the environment program reported an error{where}: {message}")
        self.message = message
        self.request = request
        self.answered = answered


_program_decoder = msgspec.json.Decoder(ProgramMessage)


def decode_program_message(line: bytes) -> ProgramMessage:
    """Decode one line a program sent, or say precisely which rule it broke (the same
    classification, and codes, as an agent's lines)."""
    try:
        message = _program_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise _diagnose(
            line, exc, PROGRAM_MESSAGE_TYPES, HOST_REQUEST_TYPES, "an environment program"
        ) from None
    if not line.isascii() and (violation := _utf8_violation(line)) is not None:
        raise violation
    return message
