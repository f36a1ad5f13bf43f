"""What the driver and a worker say to each other: tagged, versioned msgspec Structs.

Every frame is one message, msgpack-encoded (records' payload bytes travel as they are, never
re-encoded). The recipe and a session's scenario are Python objects the user made, so they
cross as pickles — once per worker per experiment — inside a frame. Evidence goes back as one
:class:`Batch` per commit window of a session, never one frame per record.
"""

from __future__ import annotations

import msgspec

from envharness.records import ErrorInfo, RecordRow, RunnerRef

__all__ = [
    "PROTOCOL",
    "Ack",
    "Acks",
    "Artifact",
    "Batch",
    "Cancel",
    "Close",
    "Closed",
    "DriverFrame",
    "Ended",
    "Named",
    "News",
    "Open",
    "Pause",
    "Ready",
    "Refused",
    "Resume",
    "Run",
    "Spent",
    "Stored",
    "Turns",
    "WorkerFrame",
    "decode_driver_frame",
    "decode_worker_frame",
    "encode",
]

PROTOCOL = 4
"""Bumped when a frame changes incompatibly (a worker of another envharness is refused).
3: :class:`Acks`, several committed batches in one frame. 4: :class:`News` in place of one
frame per progress report and per settling session."""


class _Frame(msgspec.Struct, frozen=True, tag_field="t", array_like=True):
    pass


# -- driver to worker --------------------------------------------------------------------------


class Open(_Frame, frozen=True, tag="open"):
    """The experiment's recipe: ``pickle`` of (scenarios, plan_session, runner class, budget)."""

    protocol: int
    recipe: bytes
    reopened: bytes
    """The pickled ways to reopen, in the worker, what the recipe holds that cannot travel as
    itself (see :mod:`~envharness.runtime.executors.recipe`)."""
    sys_path: list[str]
    """The driver's import path, so the worker finds the modules the recipe names."""
    progress: bool
    """Whether the driver wants each turn's progress."""


class Run(_Frame, frozen=True, tag="run"):
    """Run a session from its start (``session_id``: the id a lost attempt had, when it
    committed nothing)."""

    key: int
    scenario: int
    trial: int
    seed: int
    session_id: str | None = None


class Resume(_Frame, frozen=True, tag="resume"):
    """Go on with a session whose worker was lost, in a new segment after its last committed
    turn: ``point`` is the pickled :class:`~envharness.runtime.resume.ResumePoint` the driver
    read from its store, ``state`` the state blob it names."""

    key: int
    scenario: int
    trial: int
    seed: int
    session_id: str
    point: bytes
    state: bytes
    changes: list[str] = []
    """Declared differences of today's code from the recorded one, which the segment records."""


class Ack(_Frame, frozen=True, tag="ack"):
    """The batch ``batch`` is committed (``error``: it is not, and why)."""

    batch: int
    error: str | None = None


class Acks(_Frame, frozen=True, tag="acks"):
    """The batches ``batches`` are committed: the driver acknowledges together every batch of
    a worker whose commit it finds done (a group commit holds many), one frame and one write
    instead of one each."""

    batches: list[int]


class Stored(_Frame, frozen=True, tag="stored"):
    request: int
    sha256: str | None = None
    error: str | None = None


class Pause(_Frame, frozen=True, tag="pause"):
    reason: str | None = None


class Spent(_Frame, frozen=True, tag="spent"):
    """The experiment's budget is spent (counted by the driver over every worker)."""

    reason: str


class Cancel(_Frame, frozen=True, tag="cancel"):
    key: int
    reason: str | None = None


class Close(_Frame, frozen=True, tag="close"):
    """The experiment is over: the worker ends its sessions, answers :class:`Closed` and waits
    for the next experiment's :class:`Open` (or the end of its channel, and exits)."""


DriverFrame = Open | Run | Resume | Ack | Acks | Stored | Pause | Spent | Cancel | Close

# -- worker to driver --------------------------------------------------------------------------


class Ready(_Frame, frozen=True, tag="ready"):
    pid: int
    runner: RunnerRef | None = None
    """The worker's process as its segments record it: the driver that loses the worker
    declares this exact runner gone (on another host, nothing else can tell)."""


class Refused(_Frame, frozen=True, tag="refused"):
    """The worker cannot serve this experiment (its recipe did not unpickle, say)."""

    message: str


class Named(_Frame, frozen=True, tag="named"):
    key: int
    session_id: str


class Batch(_Frame, frozen=True, tag="batch"):
    """One session's records of one commit window, sealed by the worker."""

    key: int
    batch: int
    rows: list[RecordRow]
    blobs: dict[str, bytes]


class Artifact(_Frame, frozen=True, tag="artifact"):
    request: int
    data: bytes


class Turns(msgspec.Struct, frozen=True, array_like=True):
    """One progress report of a session: ``turns`` of ``planned`` played."""

    key: int
    session_id: str
    turns: int
    planned: int


class News(_Frame, frozen=True, tag="news"):
    """What the worker's sessions said that no one waits for, gathered until the worker next
    sends (see ``worker.HOLD_SECONDS``): a frame per report cost the driver more than the
    report (a five-turn session's six progress reports and its settling took seven frames).
    News goes ahead of the frame it is sent with, so it reaches the driver before a
    session's :class:`Ended`."""

    progress: list[Turns] = []
    settled: list[int] = []
    """Sessions that have handed over their last records and only wait for their commit (the
    driver frees their slot)."""


class Ended(_Frame, frozen=True, tag="ended"):
    """The session ended after the commit of its last status (``status`` ``None``: it was
    cancelled, and its evidence says how it ended; ``crash``: the runner raised)."""

    key: int
    status: str | None = None
    turns_completed: int = 0
    reason: str | None = None
    error: ErrorInfo | None = None
    ended_by: str | None = None
    crash: str | None = None
    store_error: bool = False
    configuration: bool = False
    """The crash was a :class:`~envharness.errors.ConfigurationError`: raised as one."""


class Closed(_Frame, frozen=True, tag="closed"):
    """The worker is done with the experiment and ready for another (an open executor keeps
    it for the next one)."""


WorkerFrame = Ready | Refused | Named | Batch | Artifact | News | Ended | Closed

encode = msgspec.msgpack.Encoder().encode
decode_driver_frame = msgspec.msgpack.Decoder(DriverFrame).decode
decode_worker_frame = msgspec.msgpack.Decoder(WorkerFrame).decode
