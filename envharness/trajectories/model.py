"""The trajectory contract: a portable, digest-bound projection of one journal.

A :class:`Trajectory` is *computed from* the journal — it is never a second writer and holds
no evidence of its own. It says which chain it was projected from and binds that range by
digest (:class:`JournalRange`), splits execution into causally linked :class:`Segment` s, and
reports four states that vary independently of one another:

- **collection** (:class:`CollectionStatus`): is every record of the range here?
  ``complete``, ``partial`` (more may come: still running, or an import not yet caught up) or
  ``gaps`` (positions are missing).
- **execution** (:class:`ExecutionStatus`): ``running``, ``finished`` (it ran to its end,
  completed or failed) or ``interrupted`` (stopped, interrupted or paused: it can resume).
- **termination** (:class:`Termination`): how it ended — environment done, turn limit,
  failure, stop, crash, pause — or that it has not ended.
- **verified outcome** (:class:`VerifiedOutcome`): ``unverified``, ``verified`` or
  ``disputed``, with the verifier's (scorer's) version.

A trajectory of imported records has the same shape, marked by its :class:`Provenance`
(``origin="imported"`` and the source's namespace). ``docs/trajectories.md`` is the guide and
``protocol/schema/trajectory.json`` the versioned JSON Schema generated from these types.

Wire rules: every Struct is frozen, new fields get defaults, existing fields never change type;
``schema_version`` changes only for an incompatible change, and a reader refuses a version it
does not know (:func:`envharness.trajectories.codec.decode_trajectory`).
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from envharness.records import ErrorInfo

__all__ = [
    "DIGEST_ALGORITHM",
    "SCHEMA_VERSION",
    "CollectionState",
    "CollectionStatus",
    "Entitlement",
    "ExecutionState",
    "ExecutionStatus",
    "Gap",
    "JournalRange",
    "Origin",
    "Provenance",
    "RewardChain",
    "Segment",
    "SegmentCause",
    "Snapshot",
    "SnapshotMetadata",
    "TerminationCause",
    "Termination",
    "Trajectory",
    "Transcribed",
    "VerificationState",
    "VerifiedOutcome",
]

SCHEMA_VERSION = 1
"""The trajectory/snapshot wire version this envharness writes and reads."""

DIGEST_ALGORITHM = "sha256-chain/1"
"""How :attr:`JournalRange.head_digest` binds a range: the digest of the range's last record,
which covers (through ``prev``) every earlier one; see docs/evidence.md for a record's digest."""

CollectionState = Literal["complete", "partial", "gaps"]
ExecutionState = Literal["running", "finished", "interrupted"]
VerificationState = Literal["unverified", "verified", "disputed"]
TerminationCause = Literal[
    "done",
    "truncated",
    "turn_limit",
    "failed",
    "stopped",
    "interrupted",
    "paused",
    "imported",
    "not_ended",
]
SegmentCause = Literal["start", "resume", "branch", "import"]
Origin = Literal["native", "imported"]


class _Part(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """A value of the contract; unknown fields are ignored so newer writers stay readable."""


# -- where it came from ------------------------------------------------------------------------


class Provenance(_Part, frozen=True, kw_only=True):
    """Where the projected records came from.

    ``native``: recorded by envharness itself (``source`` is ``None``). ``imported``: sent by
    an external source, named by its namespace (``source``), in the source's own ``format``
    (e.g. ``inspect_ai``, ``otel-genai``, ``envharness``); ``source_position`` and
    ``source_hash`` are the source's own position and hash of the last record projected, so a
    reader can check the trajectory against the source's chain too.
    """

    origin: Origin = "native"
    source: str | None = None
    format: str | None = None
    source_position: int | None = None
    source_hash: str | None = None
    importer: str | None = None
    """Name and version of the importer that translated the source's records."""
    training: bool = False
    """The source declared, when its records were imported, that they may be used to train
    models. Native evidence needs no such declaration (see :class:`Entitlement`)."""


class JournalRange(_Part, frozen=True, kw_only=True):
    """The digest binding: exactly which records a trajectory was projected from.

    ``head_digest`` is the stored digest of record ``last_seq`` of ``chain``. Each record's
    digest covers its own bytes and its predecessor's digest (``prev``), so this one value
    binds every record from seq 0 to ``last_seq``: changing one byte of any of them changes
    its recomputed digest and breaks the chain up to the head. ``first_seq`` is where the
    projection starts reading (0 for a whole chain); ``records`` counts ``first_seq ..
    last_seq``. An empty chain cannot be projected.
    """

    chain: str
    """The session id (native), or the chain id the imported records were written under."""
    first_seq: int
    last_seq: int
    records: int
    head_digest: str
    algorithm: str = DIGEST_ALGORITHM


# -- execution ---------------------------------------------------------------------------------


class Segment(_Part, frozen=True, kw_only=True):
    """One uninterrupted stretch of execution (``segment.started`` … ``segment.ended``).

    ``previous`` links a resumed segment to the one whose end caused it. ``status`` is how the
    segment ended, ``None`` while it runs (or when its end was never recorded: a crash that
    recovery has not marked yet).
    """

    index: int
    cause: SegmentCause
    previous: int | None = None
    first_seq: int
    last_seq: int
    start_turn: int = 0
    """The last complete turn the segment started after."""
    end_turn: int | None = None
    """The last turn it completed; ``None`` when it completed none."""
    started_at: str
    ended_at: str | None = None
    status: str | None = None
    changes: tuple[str, ...] = ()
    """Declared differences from the recorded configuration (a resume with changed code)."""


# -- the four states ---------------------------------------------------------------------------


class Gap(_Part, frozen=True, kw_only=True):
    """Positions ``first .. last`` (inclusive) that the projection did not find."""

    first: int
    last: int


class CollectionStatus(_Part, frozen=True, kw_only=True):
    state: CollectionState
    gaps: tuple[Gap, ...] = ()
    detail: str = ""


class ExecutionStatus(_Part, frozen=True, kw_only=True):
    state: ExecutionState
    status: str
    """The session status it was projected from (``completed``, ``paused``, ...)."""


class Termination(_Part, frozen=True, kw_only=True):
    """How the trajectory ended. ``cause`` is ``not_ended`` while it runs.

    ``done``: the environment declared the episode over; ``truncated``: the environment cut it
    short from outside its rules (a time limit); ``turn_limit``: the planned turns ran out
    (also a truncation, see :attr:`truncated`); ``failed``: an agent or the environment failed
    (``error`` says how); ``stopped``: a person or program stopped it; ``interrupted``: its
    process died; ``paused``: it waits to be continued (a fresh branch); ``imported``: an
    imported source's record says it ended.
    """

    cause: TerminationCause
    status: str | None = None
    reason: str | None = None
    error: ErrorInfo | None = None
    seq: int | None = None
    """The record that says so (its final ``session.status``)."""
    turns: int = 0
    """Complete turns at the end (or so far)."""

    @property
    def terminated(self) -> bool:
        """Over by the environment's rules (RL's ``terminated``): a trainer may treat the last
        state as final, with no value beyond it."""
        return self.cause == "done"

    @property
    def truncated(self) -> bool:
        """Cut short rather than over (RL's ``truncated`` as against ``terminated``)."""
        return self.cause in ("truncated", "turn_limit")


class RewardChain(_Part, frozen=True, kw_only=True):
    """A reward that can be traced: the score record, the scorer's version, what it rests on.

    ``cites`` are the seqs of the evidence the score was computed from: the ``outcome`` record
    whose state was scored, and the records the score's findings cite. A chain is *resolved*
    when the score record and every cited record lie inside the trajectory's journal range.

    ``per_participant`` holds each participant's own metrics when the score has them (a
    zero-sum game's winner and loser), so a dataset row's reward traces to the participant's
    value in the score record. It is absent, not empty, when the score has none: trajectories
    of shared scores keep their bytes, and their snapshots their ids.
    """

    score_seq: int
    score_digest: str
    scorer_version: str
    metrics: dict[str, float | None] = {}
    passed: bool | None = None
    cites: tuple[int, ...] = ()
    resolved: bool = False
    per_participant: dict[str, dict[str, float | None]] | UnsetType = UNSET


class VerifiedOutcome(_Part, frozen=True, kw_only=True):
    """Whether a verifier checked the outcome, which one, and what it said.

    ``unverified``: no score record. ``verified``: every score record of the range agrees.
    ``disputed``: score records disagree (one passed, another failed the same trajectory), with
    ``detail`` naming them. ``verifier_version`` is the scorer version of ``reward``.
    """

    state: VerificationState
    verifier_version: str | None = None
    passed: bool | None = None
    reward: RewardChain | None = None
    detail: str = ""


# -- conversations -----------------------------------------------------------------------------


class Transcribed(_Part, frozen=True, kw_only=True):
    """How many of a participant's answers came with the messages they added to its agent's
    conversation (``transcript`` records, from a model-backed agent).

    A dataset takes such a participant's real conversation, not one rebuilt from what it was
    shown and answered, and only when every answer has its transcript: a conversation partly
    real and partly rebuilt is refused (docs/trajectories.md, 'Rows').
    """

    answers: int
    """Its ``action.attempted`` records."""
    transcribed: int
    """Of those, the ones followed by a ``transcript`` record."""


# -- the trajectory ----------------------------------------------------------------------------


class Trajectory(_Part, frozen=True, kw_only=True):
    """A portable, digest-bound projection of one session's journal (see the module doc)."""

    schema_version: int = SCHEMA_VERSION
    session_id: str
    provenance: Provenance = Provenance()
    journal: JournalRange
    environment: str | None = None
    """``name@version`` of the environment, when the journal names it."""
    scenario_id: str | None = None
    experiment_id: str | None = None
    participants: dict[str, str] = {}
    """Participant name → agent implementation."""
    parent: str | None = None
    """The session this one branched from, when it is a branch."""
    segments: tuple[Segment, ...] = ()
    collection: CollectionStatus
    execution: ExecutionStatus
    termination: Termination
    outcome: VerifiedOutcome
    started_at: str | None = None
    ended_at: str | None = None
    transcripts: dict[str, Transcribed] | UnsetType = UNSET
    """Per participant whose agent recorded its conversation, how much of it. Absent, not
    empty, when none did: trajectories without transcripts keep their bytes, and their
    snapshots their ids."""


# -- snapshots ---------------------------------------------------------------------------------


class Entitlement(_Part, frozen=True, kw_only=True):
    """A declaration that the trajectories of a snapshot may be used to train models.

    It is made once, when the snapshot is frozen, and is part of the snapshot's content (and so
    of its id). ``basis`` says why (``"own evaluation data"``, a licence, a contract);
    ``declared_by`` who says so. Imported trajectories are entitled only when their source also
    declared it (:attr:`Provenance.training`).
    """

    basis: str
    declared_by: str = ""


class SnapshotMetadata(_Part, frozen=True, kw_only=True):
    """What a snapshot is: its content address and what it holds.

    ``id`` is ``snp_`` + the sha256 of the snapshot's canonical content (this metadata without
    ``id`` and ``created_at``, then each trajectory's canonical bytes), so the same content
    always gets the same id and any change gets another.
    """

    schema_version: int = SCHEMA_VERSION
    id: str
    label: str = ""
    trajectories: int
    records: int
    entitlement: Entitlement | None = None
    created_at: str = ""
    """When it was first frozen; not part of the content address."""


class Snapshot(_Part, frozen=True, kw_only=True):
    """A frozen, content-addressed, ordered selection of trajectories."""

    metadata: SnapshotMetadata
    trajectories: tuple[Trajectory, ...] = ()
