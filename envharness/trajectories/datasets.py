"""Training datasets: immutable, ordered selections of snapshots, admitted trajectory by trajectory.

A trajectory enters a dataset only when its evidence is

- **complete**: collection ``complete`` (no gaps, nothing still to come);
- **terminal**: its session ended (``completed``, ``failed``, ``stopped`` or ``interrupted``);
- **training-entitled**: its snapshot declares an :class:`~envharness.trajectories.model.
  Entitlement`, and, when imported, its source declared training rights too;
- **rewarded**: its reward chain resolves — a score record with a scorer version, citing
  evidence inside the trajectory, not disputed by another score, with a reward value.

Admission is all or nothing: a dataset with any refused trajectory is not created, and the
:class:`AdmissionError` names every refused trajectory with the condition it misses. A dataset
is named by the sha256 of its content (name, snapshot ids in order, reward metric) and is
immutable.

Rows are in the conversational format TRL's trainers accept, one row per (trajectory,
participant): ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}],
"reward": ..., ...}`` — what the participant was shown becomes ``user`` messages, what its
policy answered ``assistant`` messages. Of an imported trajectory, ``message`` records
(``{"role": ..., "content": ...}``) count as they are, and OpenTelemetry GenAI model calls
(``gen_ai.chat`` records) with captured content give what the model was sent and answered
(:mod:`envharness.trajectories.sources.genai`); other kinds are the source's own.
The evidence is checked against its digest binding as the rows are read.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, Iterable, Sequence
from contextlib import aclosing
from typing import Any

import msgspec

from envharness.errors import ConfigurationError
from envharness.records import (
    TERMINAL_STATUSES,
    ActionAttempted,
    ActionBlocked,
    Hint,
    Observation,
    canonical,
    utc_now_text,
)
from envharness.store import Store
from envharness.store.snapshots import DATASET_PREFIX, SnapshotStore, content_address
from envharness.trajectories.binding import EvidenceReader, EvidenceRow
from envharness.trajectories.errors import AdmissionError, Refusal, TrajectoryError
from envharness.trajectories.model import SCHEMA_VERSION, SnapshotMetadata, Trajectory
from envharness.trajectories.readers import evidence_for
from envharness.trajectories.snapshots import (
    load_snapshot,
    snapshot_trajectories,
    verify_snapshot,
)
from envharness.trajectories.sources.genai import CHAT_KINDS, chat_turn, merge

__all__ = [
    "Dataset",
    "DatasetRow",
    "Message",
    "admission_refusals",
    "create_dataset",
    "dataset_rows",
    "list_datasets",
    "load_dataset",
    "reward_of",
]


class Message(msgspec.Struct, frozen=True):
    role: str
    content: str


class DatasetRow(msgspec.Struct, frozen=True, kw_only=True):
    """One training example: a participant's conversation in one trajectory, and its reward.

    The reward columns say where the reward comes from: the score record (``score_seq``,
    ``score_digest``) of scorer ``scorer_version``, in the journal range bound by
    ``head_digest``.
    """

    messages: list[Message]
    reward: float
    passed: bool | None
    dataset: str
    snapshot_id: str
    session_id: str
    participant: str
    scenario_id: str | None
    environment: str | None
    scorer_version: str
    score_seq: int
    score_digest: str
    head_digest: str


class Dataset(msgspec.Struct, frozen=True, kw_only=True):
    """A dataset as stored: ``id`` is ``dst_`` + the sha256 of the content fields."""

    schema_version: int = SCHEMA_VERSION
    id: str = ""
    name: str
    snapshots: tuple[str, ...]
    reward: str | None = None
    """The score metric used as the reward; ``None``: pass/fail as 1.0/0.0, or the only metric."""
    trajectories: int
    created_at: str = ""


_dataset = msgspec.json.Decoder(Dataset)
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


# -- admission -----------------------------------------------------------------------------------


def reward_of(trajectory: Trajectory, metric: str | None) -> tuple[float | None, str]:
    """The reward value of a trajectory, or ``None`` and why there is none."""
    chain = trajectory.outcome.reward
    if chain is None:
        return None, "it has no score record: nothing rewards it"
    if metric is not None:
        if metric not in chain.metrics:
            names = ", ".join(sorted(chain.metrics)) or "none"
            return None, f"score seq {chain.score_seq} has no metric {metric!r} (it has: {names})"
        value = chain.metrics[metric]
        if value is None:
            return None, f"score seq {chain.score_seq} recorded metric {metric!r} as null"
        return value, ""
    if chain.passed is not None:
        return (1.0 if chain.passed else 0.0), ""
    values = [value for value in chain.metrics.values() if value is not None]
    if len(chain.metrics) == 1 and values:
        return values[0], ""
    names = ", ".join(sorted(chain.metrics)) or "none"
    return None, (
        f"score seq {chain.score_seq} has no pass/fail and several metrics ({names}); "
        "name the reward metric (reward=... / --reward METRIC)"
    )


def admission_refusals(
    snapshot: SnapshotMetadata, trajectory: Trajectory, reward: str | None = None
) -> list[Refusal]:
    """Every condition ``trajectory`` misses to enter a dataset (empty: admitted)."""
    found: list[Refusal] = []

    def refuse(condition: str, detail: str) -> None:
        found.append(
            Refusal(
                snapshot_id=snapshot.id,
                session_id=trajectory.session_id,
                condition=condition,
                detail=detail,
            )
        )

    collection = trajectory.collection
    if collection.state != "complete":
        refuse("complete", f"collection is {collection.state}: {collection.detail}")
    status = trajectory.execution.status
    if status not in TERMINAL_STATUSES:
        refuse("terminal", f"its session is {status} (execution {trajectory.execution.state})")
    if snapshot.entitlement is None:
        refuse(
            "training-entitled",
            f"snapshot {snapshot.id} declares no training entitlement; freeze a snapshot with "
            "entitlement=... (CLI: --entitle-training BASIS)",
        )
    provenance = trajectory.provenance
    if provenance.origin == "imported" and not provenance.training:
        refuse(
            "training-entitled",
            f"imported from source {provenance.source!r}, which did not declare training rights",
        )
    chain = trajectory.outcome.reward
    if trajectory.outcome.state == "disputed":
        refuse("reward", trajectory.outcome.detail)
    elif chain is not None and not chain.resolved:
        refuse(
            "reward",
            f"score seq {chain.score_seq} ({chain.scorer_version or 'no scorer version'}) cites "
            "no evidence inside the trajectory",
        )
    else:
        value, why = reward_of(trajectory, reward)
        if value is None:
            refuse("reward", why)
    return found


async def create_dataset(
    store: Store,
    name: str,
    snapshot_ids: Sequence[str],
    *,
    reward: str | None = None,
    reader: EvidenceReader | None = None,
) -> Dataset:
    """Admit every trajectory of these snapshots (in order) as dataset ``name``, or refuse.

    Each snapshot is verified first (content address and digest bindings). Creating the same
    dataset again returns it; another content under the same name is refused.
    """
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 100:
        raise ConfigurationError(
            f"dataset name {name!r} must be printable text of 1 to 100 characters"
        )
    if name.startswith(DATASET_PREFIX):
        raise ConfigurationError(
            f"dataset name {name!r} starts with {DATASET_PREFIX!r}, which begins dataset ids: "
            "a dataset is found by its name or its id, so choose a name without it"
        )
    if not snapshot_ids:
        raise ConfigurationError(f"dataset {name!r} needs at least one snapshot id")
    if reward is not None and not reward:
        raise ConfigurationError("reward must name a score metric, e.g. reward='accuracy'")
    resolved: list[SnapshotMetadata] = []
    for snapshot_id in snapshot_ids:
        metadata = await verify_snapshot(store, snapshot_id, reader)
        if any(seen.id == metadata.id for seen in resolved):
            raise ConfigurationError(
                f"snapshot {metadata.id} is given twice; a dataset holds each snapshot once"
            )
        resolved.append(metadata)
    refusals: list[Refusal] = []
    holder: dict[str, str] = {}
    count = 0
    for metadata in resolved:
        async for trajectory in snapshot_trajectories(store, metadata.id):
            count += 1
            if trajectory.session_id in holder:
                refusals.append(
                    Refusal(
                        snapshot_id=metadata.id,
                        session_id=trajectory.session_id,
                        condition="unique",
                        detail=f"it is also in snapshot {holder[trajectory.session_id]}",
                    )
                )
                continue
            holder[trajectory.session_id] = metadata.id
            refusals.extend(admission_refusals(metadata, trajectory, reward))
    if refusals:
        raise AdmissionError(name, refusals)
    content = Dataset(
        name=name,
        snapshots=tuple(metadata.id for metadata in resolved),
        reward=reward,
        trajectories=count,
    )
    data = canonical(content)
    dataset_id = content_address(DATASET_PREFIX, data)
    stored = await SnapshotStore(store.directory).put_dataset(
        name, dataset_id, data, utc_now_text()
    )
    return _stored(stored.id, stored.content, stored.created_at)


async def load_dataset(store: Store, name: str) -> Dataset:
    """The dataset named ``name`` (or with this id); its content address is checked."""
    stored = await SnapshotStore(store.directory).dataset(name)
    if content_address(DATASET_PREFIX, stored.content) != stored.id:
        raise TrajectoryError(
            f"dataset {stored.name!r}: its stored content no longer has its id {stored.id}: "
            "it was altered"
        )
    return _stored(stored.id, stored.content, stored.created_at)


async def list_datasets(store: Store) -> list[Dataset]:
    return [
        _stored(stored.id, stored.content, stored.created_at)
        for stored in await SnapshotStore(store.directory).datasets()
    ]


def _stored(dataset_id: str, content: bytes, created_at: str) -> Dataset:
    try:
        decoded = _dataset.decode(content)
    except msgspec.DecodeError as exc:
        raise TrajectoryError(f"dataset {dataset_id} does not decode: {exc}") from exc
    if decoded.schema_version != SCHEMA_VERSION:
        raise TrajectoryError(
            f"dataset {dataset_id} has schema version {decoded.schema_version}; this "
            f"envharness reads version {SCHEMA_VERSION}"
        )
    return msgspec.structs.replace(decoded, id=dataset_id, created_at=created_at)


# -- rows ----------------------------------------------------------------------------------------


async def dataset_rows(
    store: Store, name: str, reader: EvidenceReader | None = None
) -> AsyncGenerator[DatasetRow, None]:
    """The dataset's rows in order: snapshot by snapshot, trajectory by trajectory.

    Each trajectory's records are checked against its digest binding as they are read; one
    trajectory's records are held at a time.
    """
    dataset = await load_dataset(store, name)
    reader = reader or evidence_for(store)
    for snapshot_id in dataset.snapshots:
        metadata = await load_snapshot(store, snapshot_id)
        async with aclosing(snapshot_trajectories(store, snapshot_id)) as frozen:
            async for trajectory in frozen:
                refusals = admission_refusals(metadata, trajectory, dataset.reward)
                if refusals:  # admitted once, so only a changed program can get here
                    raise AdmissionError(dataset.name, refusals)
                conversations = await _conversations(reader, trajectory)
                value, _ = reward_of(trajectory, dataset.reward)
                chain = trajectory.outcome.reward
                assert value is not None  # admission checked it
                assert chain is not None
                for participant, messages in conversations.items():
                    if not any(message.role == "assistant" for message in messages):
                        continue
                    yield DatasetRow(
                        messages=messages,
                        reward=value,
                        passed=chain.passed,
                        dataset=dataset.name,
                        snapshot_id=snapshot_id,
                        session_id=trajectory.session_id,
                        participant=participant,
                        scenario_id=trajectory.scenario_id,
                        environment=trajectory.environment,
                        scorer_version=chain.scorer_version,
                        score_seq=chain.score_seq,
                        score_digest=chain.score_digest,
                        head_digest=trajectory.journal.head_digest,
                    )


async def _conversations(
    reader: EvidenceReader, trajectory: Trajectory
) -> dict[str, list[Message]]:
    """Each participant's messages, from the records that count (checked as they are read).

    A resumed segment replays the turns after the one it started from, so what an earlier
    segment recorded of those turns (a half-played turn before a stop) is left out.
    """
    bounds = _replayed_after(trajectory)
    conversations: dict[str, list[Message]] = {name: [] for name in trajectory.participants}
    kinds = (
        _NATIVE_CONVERSATION if trajectory.provenance.origin == "native" else _IMPORTED_CONVERSATION
    )
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
                    _merge_chat(conversations.setdefault(participant, []), row)
            elif row.participant is not None:
                conversations.setdefault(row.participant, []).append(_message(row))
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
