"""A participant's conversation in a trajectory, read from its checked evidence.

What the participant was shown becomes ``user`` messages and what its policy answered
``assistant`` messages (the roles TRL's conversational format uses); blocked actions and hints
are ``user`` messages saying so. Beside the messages, the participant's per-step rewards (from
``action.executed`` and ``outcome.participant`` records), one per answer. Of an imported
trajectory only ``message`` records and OpenTelemetry GenAI model calls say what was said.
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

__all__ = ["Conversation", "Message", "conversations"]


class Message(msgspec.Struct, frozen=True):
    role: str
    content: str


_observation = msgspec.json.Decoder(Observation)
_attempted = msgspec.json.Decoder(ActionAttempted)
_blocked = msgspec.json.Decoder(ActionBlocked)
_hint = msgspec.json.Decoder(Hint)
_message_decoder = msgspec.json.Decoder(Message)
_NATIVE_CONVERSATION = frozenset({"observation", "action.attempted", "action.blocked", "hint"})
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
    left out; the evidence keeps it.
    """

    __slots__ = ("messages", "rewarded", "rewards", "unknown")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.rewards: list[float | None] = []
        self.unknown: set[int] = set()
        """Answers whose reward was recorded as null (not a number)."""
        self.rewarded = False

    @property
    def answered(self) -> bool:
        return any(message.role == "assistant" for message in self.messages)

    def add(self, message: Message) -> None:
        self.messages.append(message)
        if message.role == "assistant":
            self.rewards.append(None)

    def reward(self, value: float | None) -> None:
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
            return _message_decoder.decode(row.payload)
        except msgspec.DecodeError as exc:
            raise TrajectoryError(
                f'record {row.seq} is a \'message\' but not {{"role": ..., "content": ...}}'
                f" with text values: {exc}"
            ) from exc
    if row.kind == "observation":
        return Message("user", _text(_observation.decode(row.payload).observation))
    if row.kind == "action.attempted":
        return Message("assistant", _text(_attempted.decode(row.payload).action))
    if row.kind == "action.blocked":
        blocked = _blocked.decode(row.payload)
        return Message("user", f"Your action was blocked ({blocked.by}): {blocked.reason}")
    hint = _hint.decode(row.payload)
    return Message("user", f"Hint: {hint.text}")


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
