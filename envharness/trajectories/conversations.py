"""A participant's conversation in a trajectory, read from its checked evidence.

When the participant's agent recorded its own conversation (a model-backed agent's
``transcript`` records: the messages each answer added), that is the conversation, message for
message: the system prompt as the agent sent it, ``user``, ``assistant`` and ``tool`` messages,
tool calls kept (:class:`ToolCall`). Otherwise one is rebuilt: what the participant was shown
becomes ``user`` messages and what its policy answered ``assistant`` messages (the roles TRL's
conversational format uses); blocked actions and hints are ``user`` messages saying so. Both
are read in one pass, since which one a participant has is known only at the end.

Beside the messages, the participant's per-step rewards (from ``action.executed`` and
``outcome.participant`` records), one per ``assistant`` message. Of an imported trajectory
only ``message`` records and OpenTelemetry GenAI model calls say what was said.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from envharness.records import ActionAttempted, ActionBlocked, Hint, Observation, canonical
from envharness.trajectories.binding import EvidenceReader, EvidenceRow
from envharness.trajectories.errors import TrajectoryError
from envharness.trajectories.model import Trajectory
from envharness.trajectories.sources.genai import CHAT_KINDS, chat_turn, merge

__all__ = ["Conversation", "Message", "ToolCall", "ToolFunction", "conversations"]


class ToolFunction(msgspec.Struct, frozen=True):
    """The function a tool call names, with its arguments: the JSON object the model sent as
    text (TRL's and transformers' chat templates take an object), or that text as it was when
    it is not a JSON object."""

    name: str
    arguments: Any


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str | UnsetType = UNSET
    type: str = "function"
    function: ToolFunction


class Message(msgspec.Struct, frozen=True):
    """One message of a row. Only a recorded conversation has the tool fields, and they are
    left out (not ``null``) where a message has none, so rebuilt rows keep their bytes."""

    role: str
    content: str
    tool_calls: list[ToolCall] | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET
    name: str | UnsetType = UNSET


class _Function(msgspec.Struct, frozen=True):
    name: str
    arguments: Any = None


class _Call(msgspec.Struct, frozen=True):
    function: _Function
    type: str = "function"
    id: str | None = None


class _Said(msgspec.Struct, frozen=True):
    """A message as a ``transcript`` record holds it (OpenAI's chat format; keys beyond these
    are the agent's own and no part of a row)."""

    role: str
    content: str | None = None
    tool_calls: list[_Call] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _Transcript(msgspec.Struct, frozen=True):
    messages: list[_Said]


class _Plain(msgspec.Struct, frozen=True):
    """An imported ``message`` record: its role and text (any other key is the source's)."""

    role: str
    content: str


_observation = msgspec.json.Decoder(Observation)
_attempted = msgspec.json.Decoder(ActionAttempted)
_blocked = msgspec.json.Decoder(ActionBlocked)
_hint = msgspec.json.Decoder(Hint)
_message_decoder = msgspec.json.Decoder(_Plain)
_transcript = msgspec.json.Decoder(_Transcript)
_NATIVE_CONVERSATION = frozenset(
    {"observation", "action.attempted", "action.blocked", "hint", "transcript"}
)
_IMPORTED_CONVERSATION = frozenset({"message"}) | CHAT_KINDS
"""An imported record's kind is the source's word, its payload the source's shape: only a
``message`` record (``{"role", "content"}``) and a GenAI model call say what was said. A
source's ``observation`` is not our Observation and is never decoded as one."""
_REWARDING = frozenset({"action.executed", "outcome.participant"})
"""Native kinds that may carry a participant's per-step reward."""


class _StepReward(msgspec.Struct, frozen=True):
    """The ``reward`` of an ``action.executed`` or ``outcome.participant`` record; the rest of
    the payload (the action, the outcome) is skipped unread."""

    reward: float | UnsetType | None = UNSET


_step_reward = msgspec.json.Decoder(_StepReward)


class Conversation:
    """One participant's messages, and the per-step rewards of its answers.

    ``rewards[i]`` belongs to the ``i``-th assistant message: the reward of the action it
    proposed, plus rewards addressed to the participant until it answers again (PettingZoo's
    cumulative reward). A reward before its first answer rewards no action of its own and is
    left out; the evidence keeps it. In a recorded conversation an answer may hold several
    assistant messages (a tool call, an answer the agent re-asked for): the action's reward
    goes to the last of them, the one that gave the action, and the others earned none.

    ``recorded`` is the conversation the agent recorded itself, when it did; :attr:`chosen`
    is the one a dataset row holds.
    """

    __slots__ = (
        "_awaiting", "answers", "messages", "recorded", "rewarded", "rewards", "transcribed",
        "unknown",
    )  # fmt: skip

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.rewards: list[float | None] = []
        self.unknown: set[int] = set()
        """Answers whose reward was recorded as null (not a number)."""
        self.rewarded = False
        self.recorded: Conversation | None = None
        self.answers = 0
        """Its ``action.attempted`` records."""
        self.transcribed = 0
        """Of those, the ones followed by a ``transcript`` record."""
        self._awaiting = False

    @property
    def answered(self) -> bool:
        return any(message.role == "assistant" for message in self.messages)

    @property
    def chosen(self) -> Conversation:
        """The conversation a row holds: the recorded one when there is one."""
        return self if self.recorded is None else self.recorded

    @property
    def partly_recorded(self) -> bool:
        """Some of its answers have their transcript and some do not: neither conversation
        is whole (a dataset refuses it)."""
        return self.recorded is not None and self.transcribed < self.answers

    def add(self, message: Message) -> None:
        self.messages.append(message)
        if message.role == "assistant":
            self.rewards.append(None)

    def attempted(self, message: Message) -> None:
        """An answer, rebuilt from its ``action.attempted`` record."""
        self.add(message)
        self.answers += 1
        self._awaiting = True

    def transcribe(self, messages: Iterable[Message]) -> None:
        """The messages the last answer added to the agent's own conversation."""
        recorded = self.recorded
        if recorded is None:
            recorded = self.recorded = Conversation()
            recorded.rewarded = self.rewarded
        for message in messages:
            recorded.add(message)
        if self._awaiting:
            self.transcribed += 1
            self._awaiting = False

    def reward(self, value: float | None) -> None:
        if self.recorded is not None:
            self.recorded.reward(value)
        self.rewarded = True
        if not self.rewards:
            return
        last = len(self.rewards) - 1
        if value is None:
            self.unknown.add(last)
        else:
            self.rewards[last] = (self.rewards[last] or 0.0) + value

    def step_rewards(self) -> list[float | None] | None:
        if not self.rewarded:
            return None
        return [
            None if index in self.unknown else value for index, value in enumerate(self.rewards)
        ]


async def conversations(reader: EvidenceReader, trajectory: Trajectory) -> dict[str, Conversation]:
    """Each participant's messages, from the records that count (checked as they are read).

    A resumed segment replays the turns after the one it started from, so what an earlier
    segment recorded of those turns (a half-played turn before a stop) is left out.
    """
    bounds = _replayed_after(trajectory)
    conversations = {name: Conversation() for name in trajectory.participants}
    native = trajectory.provenance.origin == "native"
    kinds = _NATIVE_CONVERSATION | _REWARDING if native else _IMPORTED_CONVERSATION
    # A model-call span often names no agent; in a one-participant episode it is that one's.
    [sole] = trajectory.participants if len(trajectory.participants) == 1 else [None]
    rows = reader.rows(trajectory)
    try:
        async for row in rows:
            if row.kind not in kinds or _superseded(row, bounds):
                continue
            if row.kind in CHAT_KINDS:
                participant = row.participant or sole
                if participant is not None:
                    conversation = conversations.setdefault(participant, Conversation())
                    _merge_chat(conversation.messages, row)
            elif row.participant is None:
                continue
            elif row.kind in _REWARDING:
                reward = _step_reward.decode(row.payload).reward
                if not isinstance(reward, UnsetType):
                    conversations.setdefault(row.participant, Conversation()).reward(reward)
            elif row.kind == "transcript":
                conversations.setdefault(row.participant, Conversation()).transcribe(
                    _transcribed(row)
                )
            elif row.kind == "action.attempted":
                conversations.setdefault(row.participant, Conversation()).attempted(_message(row))
            else:
                conversations.setdefault(row.participant, Conversation()).add(_message(row))
    finally:
        aclose = getattr(rows, "aclose", None)
        if aclose is not None:
            await aclose()
    return conversations


def _replayed_after(trajectory: Trajectory) -> list[tuple[int, int, int]]:
    """``(first_seq, last_seq, turn)``: records of a segment after ``turn`` were replayed."""
    segments = trajectory.segments
    return [
        (segment.first_seq, segment.last_seq, following.start_turn)
        for segment, following in itertools.pairwise(segments)
    ]


def _superseded(row: EvidenceRow, bounds: Iterable[tuple[int, int, int]]) -> bool:
    return any(
        first <= row.seq <= last and row.turn is not None and row.turn > turn
        for first, last, turn in bounds
    )


def _message(row: EvidenceRow) -> Message:
    if row.kind == "message":  # an imported record that already is one: {"role", "content"}
        try:
            plain = _message_decoder.decode(row.payload)
        except msgspec.DecodeError as exc:
            raise TrajectoryError(
                f'record {row.seq} is a \'message\' but not {{"role": ..., "content": ...}}'
                f" with text values: {exc}"
            ) from exc
        return Message(plain.role, plain.content)
    if row.kind == "observation":
        return Message("user", _text(_observation.decode(row.payload).observation))
    if row.kind == "action.attempted":
        return Message("assistant", _text(_attempted.decode(row.payload).action))
    if row.kind == "action.blocked":
        blocked = _blocked.decode(row.payload)
        return Message("user", f"Your action was blocked ({blocked.by}): {blocked.reason}")
    hint = _hint.decode(row.payload)
    return Message("user", f"Hint: {hint.text}")


def _transcribed(row: EvidenceRow) -> list[Message]:
    """A ``transcript`` record's messages as row messages: text as it is (no text is
    ``""``), tool calls with their arguments as the JSON object they spell."""
    try:
        said = _transcript.decode(row.payload).messages
    except msgspec.DecodeError as exc:
        raise TrajectoryError(
            f"record {row.seq} is a transcript whose messages cannot be read: {exc}"
        ) from exc
    return [
        Message(
            message.role,
            message.content or "",
            tool_calls=(
                [
                    ToolCall(
                        id=UNSET if call.id is None else call.id,
                        type=call.type,
                        function=ToolFunction(
                            call.function.name, _arguments(call.function.arguments)
                        ),
                    )
                    for call in message.tool_calls
                ]
                if message.tool_calls
                else UNSET
            ),
            tool_call_id=UNSET if message.tool_call_id is None else message.tool_call_id,
            name=UNSET if message.name is None else message.name,
        )
        for message in said
    ]


def _arguments(arguments: Any) -> Any:
    """OpenAI sends a call's arguments as JSON text; chat templates take the object."""
    if isinstance(arguments, str):
        try:
            parsed = msgspec.json.decode(arguments)
        except msgspec.DecodeError:
            return arguments  # what the model wrote, kept as the text it is
        return parsed if isinstance(parsed, dict) else arguments
    return arguments


def _merge_chat(conversation: list[Message], row: EvidenceRow) -> None:
    try:
        sent, answered = chat_turn(msgspec.json.decode(row.payload))
    except ValueError as exc:  # msgspec's DecodeError is one too
        raise TrajectoryError(
            f"record {row.seq} ({row.kind}) holds messages that cannot be read: {exc}"
        ) from exc
    merge(conversation, [Message(*m) for m in sent], [Message(*m) for m in answered])


def _text(value: Any) -> str:
    """A message's content: text as it is, anything else as canonical JSON."""
    if isinstance(value, str):
        return value
    return canonical(value).decode()
