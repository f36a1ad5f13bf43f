"""Training datasets: immutable, ordered selections of snapshots, admitted trajectory by trajectory.

A trajectory enters a dataset only when its evidence is

- **complete**: collection ``complete`` (no gaps, nothing still to come);
- **terminal**: its session ended (``completed``, ``failed``, ``stopped`` or ``interrupted``);
- **training-entitled**: its snapshot declares an :class:`~envharness.trajectories.model.
  Entitlement`, and, when imported, its source declared training rights too;
- **rewarded**: its reward chain resolves — a score record with a scorer version, citing
  evidence inside the trajectory, not disputed by another score, with a reward value for every
  participant it gives rows to (:mod:`envharness.trajectories.rewards`: each participant's own
  reward, or one shared reward only where the dataset declares it shared);
- **transcribed**, where an agent recorded its conversation: every answer of a participant it
  gives rows to has its transcript, or none has (a conversation partly real and partly rebuilt
  would train a model on two prompt formats at once).

Admission is all or nothing: a dataset with any refused trajectory is not created, and the
:class:`AdmissionError` names every refused trajectory with the condition it misses. A dataset
is named by the sha256 of its content (name, snapshot ids in order, reward metric, and the
participants and shared-reward declaration when given) and is immutable.

Rows are in the conversational format TRL's trainers accept, one row per (trajectory,
participant): ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}],
"reward": ..., ...}``. A participant whose agent recorded its conversation (``transcript``
records) has that conversation, as the agent had it: system prompt, tool calls and tool results
included. Otherwise what the participant was shown becomes ``user`` messages, what its policy
answered ``assistant`` messages. ``terminated`` and ``truncated`` say how the episode
ended, and ``step_rewards`` the per-step rewards the environment gave the participant. Of an
imported trajectory, ``message`` records (``{"role": ..., "content": ...}``) count as they
are, and OpenTelemetry GenAI model calls (``gen_ai.chat`` records) with captured content give
what the model was sent and answered (:mod:`envharness.trajectories.sources.genai`); other
kinds are the source's own (:mod:`envharness.trajectories.conversations`). The evidence is
checked against its digest binding as the rows are read.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from envharness.errors import ConfigurationError
from envharness.records import TERMINAL_STATUSES, canonical, utc_now_text
from envharness.store.locate import AnyStore
from envharness.store.snapshots import DATASET_PREFIX, SnapshotStore, content_address
from envharness.trajectories.binding import EvidenceReader
from envharness.trajectories.conversations import Conversation, Message, conversations
from envharness.trajectories.errors import AdmissionError, Refusal, TrajectoryError
from envharness.trajectories.model import (
    SCHEMA_VERSION,
    RewardChain,
    SnapshotMetadata,
    Trajectory,
)
from envharness.trajectories.readers import evidence_for
from envharness.trajectories.rewards import (
    RewardChoice,
    choose_reward,
    names_text,
    participant_reward,
    shared_refusal,
    shared_value,
)
from envharness.trajectories.snapshots import (
    load_snapshot,
    snapshot_trajectories,
    verify_snapshot,
)

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


class DatasetRow(msgspec.Struct, frozen=True, kw_only=True):
    """One training example: a participant's conversation in one trajectory, and its reward.

    The reward columns say where the reward comes from: the score record (``score_seq``,
    ``score_digest``) of scorer ``scorer_version``, in the journal range bound by
    ``head_digest``; ``reward_metric`` names the metric (``None``: pass/fail as 1.0/0.0) and
    ``reward_scope`` whether it is the participant's own (``per_participant`` in the score)
    or the session's shared one.
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
    reward_metric: str | None = None
    reward_scope: Literal["participant", "shared"] = "shared"
    terminated: bool = False
    """The environment declared the episode over (termination ``done``)."""
    truncated: bool = False
    """It was cut short: by the environment (a time limit) or by running out of turns
    (termination ``truncated`` or ``turn_limit``). Neither is set for a session that failed,
    was stopped or was imported: it did not end by the episode's clock or rules."""
    step_rewards: list[float | None] | None = None
    """The participant's per-step rewards, one per ``assistant`` message: what the environment
    rewarded that action with, plus any reward addressed to the participant before its next
    action (when another's move decided the game). ``None`` where the environment gave this
    participant no per-step reward; an entry is ``None`` where that action earned none (a
    blocked one) or one was recorded as null."""


class Dataset(msgspec.Struct, frozen=True, kw_only=True):
    """A dataset as stored: ``id`` is ``dst_`` + the sha256 of the content fields."""

    schema_version: int = SCHEMA_VERSION
    id: str = ""
    name: str
    snapshots: tuple[str, ...]
    reward: str | None = None
    """The score metric used as the reward; ``None``: a participant's only own metric,
    pass/fail as 1.0/0.0, or the only metric."""
    trajectories: int
    created_at: str = ""
    participants: tuple[str, ...] | UnsetType = UNSET
    """Only these participants' rows (sorted); absent: every participant's."""
    shared_reward: bool | UnsetType = UNSET
    """``True``: one shared reward may be every participant's (a cooperative game). Absent,
    a trajectory with rows for several participants needs a per-participant reward.

    Both new fields are absent rather than defaulted, so datasets that do not use them keep
    the content, and the id, they always had."""


_dataset = msgspec.json.Decoder(Dataset)


# -- admission -----------------------------------------------------------------------------------


def reward_of(
    trajectory: Trajectory, metric: str | None, participant: str | None = None
) -> tuple[float | None, str]:
    """The reward of ``participant``'s rows in a trajectory, or ``None`` and why there is none.

    Without ``participant``: the reward every row shares, which a per-participant reward is
    not (see :mod:`envharness.trajectories.rewards`).
    """
    chain = trajectory.outcome.reward
    if chain is None:
        return None, "it has no score record: nothing rewards it"
    choice, why = choose_reward(chain, metric)
    if choice is None:
        return None, why
    if participant is None:
        if choice.scope == "participant":
            return None, (
                f"the reward (metric {choice.metric!r}) is per participant: name the participant"
            )
        return shared_value(chain, choice)
    return participant_reward(chain, choice, participant)


def rowed_participants(
    trajectory: Trajectory, participants: tuple[str, ...] | UnsetType = UNSET
) -> list[str]:
    """The participants a trajectory may give rows to: its roster, or the part of it selected.

    Rows go only to participants whose policy answered something; the roster is a bound on
    them that admission can check without reading the evidence.
    """
    roster = sorted(trajectory.participants)
    if isinstance(participants, UnsetType):
        return roster
    return [name for name in roster if name in participants]


def admission_refusals(
    snapshot: SnapshotMetadata,
    trajectory: Trajectory,
    reward: str | None = None,
    *,
    participants: tuple[str, ...] | UnsetType = UNSET,
    shared_reward: bool = False,
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
    rowed = rowed_participants(trajectory, participants)
    if not isinstance(participants, UnsetType) and not rowed:
        refuse(
            "selected",
            f"none of its participants ({names_text(sorted(trajectory.participants)) or 'none'})"
            f" is among the dataset's ({names_text(participants)}): leave it out of the "
            "snapshots, or select one of its participants",
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
    elif chain is None:
        refuse("reward", "it has no score record: nothing rewards it")
    else:
        for why in _reward_problems(chain, reward, rowed, shared_reward=shared_reward):
            refuse("reward", why)
    if not isinstance(trajectory.transcripts, UnsetType):
        for participant in rowed:
            seen = trajectory.transcripts.get(participant)
            if seen is not None and seen.transcribed < seen.answers:
                refuse("transcribed", _partly_recorded(participant, seen.transcribed, seen.answers))
    return found


def _partly_recorded(participant: str, transcribed: int, answers: int) -> str:
    return (
        f"{participant!r}'s agent recorded the messages of {transcribed} of its {answers} "
        "answers, so its row would be partly its real conversation and partly one rebuilt from "
        "what it was shown: leave the participant out (participants=[...], CLI --participant) "
        "or the session out of the snapshot, or have the agent return a transcript with every "
        "answer (AgentReply(transcript=...))"
    )


def _reward_problems(
    chain: RewardChain, reward: str | None, rowed: Sequence[str], *, shared_reward: bool
) -> list[str]:
    """Why some of ``rowed``'s rows would have no reward of their own (empty: none)."""
    choice, why = choose_reward(chain, reward)
    if choice is None:
        return [why]
    if choice.scope == "shared":
        if len(rowed) > 1 and not shared_reward:
            return [shared_refusal(chain, choice, rowed)]
        value, why = shared_value(chain, choice)
        return [why] if value is None else []
    values = [participant_reward(chain, choice, participant) for participant in rowed]
    return [why for value, why in values if value is None]


def _selection(participants: Sequence[str] | None) -> tuple[str, ...] | UnsetType:
    """The participants a dataset is for, checked and sorted (so the order given does not
    change its id); absent when not given."""
    if participants is None:
        return UNSET
    if isinstance(participants, str) or not all(
        isinstance(name, str) and name.strip() and name.isprintable() for name in participants
    ):
        raise ConfigurationError(
            f"participants={participants!r} must be a list of participant names, e.g. "
            "participants=['alice'] (CLI: --participant alice)"
        )
    if not participants:
        raise ConfigurationError(
            "participants=[] selects nobody; name at least one participant, or leave it out "
            "for every participant's rows"
        )
    repeated = sorted({name for name in participants if list(participants).count(name) > 1})
    if repeated:
        raise ConfigurationError(
            f"participants names {', '.join(map(repr, repeated))} more than once; name each once"
        )
    return tuple(sorted(participants))


async def create_dataset(
    store: AnyStore,
    name: str,
    snapshot_ids: Sequence[str],
    *,
    reward: str | None = None,
    participants: Sequence[str] | None = None,
    shared_reward: bool = False,
    reader: EvidenceReader | None = None,
) -> Dataset:
    """Admit every trajectory of these snapshots (in order) as dataset ``name``, or refuse.

    ``participants`` keeps only those participants' rows; ``shared_reward`` lets one shared
    reward be the reward of several participants' rows of a trajectory (a cooperative game;
    otherwise refused, since it would tell a zero-sum game's winner it lost). Each snapshot is
    verified first (content address and digest bindings). Creating the same dataset again
    returns it; another content under the same name is refused.
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
    if not isinstance(shared_reward, bool):
        raise ConfigurationError(f"shared_reward must be True or False, not {shared_reward!r}")
    selected = _selection(participants)
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
            refusals.extend(
                admission_refusals(
                    metadata,
                    trajectory,
                    reward,
                    participants=selected,
                    shared_reward=shared_reward,
                )
            )
    if refusals:
        raise AdmissionError(name, refusals)
    content = Dataset(
        name=name,
        snapshots=tuple(metadata.id for metadata in resolved),
        reward=reward,
        trajectories=count,
        participants=selected,
        shared_reward=True if shared_reward else UNSET,
    )
    data = canonical(content)
    dataset_id = content_address(DATASET_PREFIX, data)
    stored = await SnapshotStore(store.backend).put_dataset(name, dataset_id, data, utc_now_text())
    return _stored(stored.id, stored.content, stored.created_at)


async def load_dataset(store: AnyStore, name: str) -> Dataset:
    """The dataset named ``name`` (or with this id); its content address is checked."""
    stored = await SnapshotStore(store.backend).dataset(name)
    if content_address(DATASET_PREFIX, stored.content) != stored.id:
        raise TrajectoryError(
            f"dataset {stored.name!r}: its stored content no longer has its id {stored.id}: "
            "it was altered"
        )
    return _stored(stored.id, stored.content, stored.created_at)


async def list_datasets(store: AnyStore) -> list[Dataset]:
    return [
        _stored(stored.id, stored.content, stored.created_at)
        for stored in await SnapshotStore(store.backend).datasets()
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
    store: AnyStore, name: str, reader: EvidenceReader | None = None
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
                # One shared reward for several participants is refused when a dataset is
                # created, not when it is read: a dataset created before that rule keeps
                # giving the rows it always gave.
                refusals = admission_refusals(
                    metadata,
                    trajectory,
                    dataset.reward,
                    participants=dataset.participants,
                    shared_reward=True,
                )
                if refusals:  # admitted once, so only a changed program can get here
                    raise AdmissionError(dataset.name, refusals)
                chain = trajectory.outcome.reward
                assert chain is not None  # admission checked it
                choice, _ = choose_reward(chain, dataset.reward)
                assert choice is not None
                spoken = {
                    participant: conversation
                    for participant, conversation in (
                        await conversations(reader, trajectory)
                    ).items()
                    if conversation.chosen.answered
                    and (
                        isinstance(dataset.participants, UnsetType)
                        or participant in dataset.participants
                    )
                }
                _check_rowed(dataset, metadata, trajectory, chain, choice, spoken)
                for participant, found in spoken.items():
                    value, _ = participant_reward(chain, choice, participant)
                    assert value is not None  # _check_rowed checked it
                    conversation = found.chosen
                    yield DatasetRow(
                        messages=conversation.messages,
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
                        reward_metric=choice.metric,
                        reward_scope=choice.scope,
                        terminated=trajectory.termination.terminated,
                        truncated=trajectory.termination.truncated,
                        step_rewards=conversation.step_rewards(),
                    )


def _check_rowed(
    dataset: Dataset,
    snapshot: SnapshotMetadata,
    trajectory: Trajectory,
    chain: RewardChain,
    choice: RewardChoice,
    spoken: dict[str, Conversation],
) -> None:
    """Admission judged by the roster; every row's participant must have a reward too (a
    record naming someone outside the roster would otherwise get one nobody checked), and a
    whole conversation (a trajectory frozen without its transcript counts would otherwise
    give a partly recorded one)."""
    problems: list[tuple[str, str]] = []
    for participant, conversation in spoken.items():
        value, why = participant_reward(chain, choice, participant)
        if value is None:
            problems.append(("reward", why))
        if conversation.partly_recorded:
            why = _partly_recorded(participant, conversation.transcribed, conversation.answers)
            problems.append(("transcribed", why))
    if problems:
        raise AdmissionError(
            dataset.name,
            [
                Refusal(
                    snapshot_id=snapshot.id,
                    session_id=trajectory.session_id,
                    condition=condition,
                    detail=problem,
                )
                for condition, problem in problems
            ],
        )
