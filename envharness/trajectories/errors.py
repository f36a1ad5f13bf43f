"""What the trajectory layer raises: each error names the trajectory, record or rule at fault.

::

    EnvharnessError
    └── TrajectoryError              a trajectory, snapshot or dataset cannot be used
        ├── SchemaVersionError       written under a schema version this envharness does not know
        ├── EvidenceMismatchError    the evidence no longer matches its digest binding
        └── AdmissionError           a dataset refused trajectories; ``refusals`` says why, each
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from envharness.errors import EnvharnessError

__all__ = [
    "AdmissionError",
    "EvidenceMismatchError",
    "Refusal",
    "SchemaVersionError",
    "TrajectoryError",
]


class TrajectoryError(EnvharnessError):
    """A trajectory, snapshot or dataset cannot be used as asked."""


class SchemaVersionError(TrajectoryError):
    """A trajectory or snapshot was written under a schema version this program does not read."""


class EvidenceMismatchError(TrajectoryError):
    """A record no longer matches the digest a trajectory (or snapshot) bound it to.

    ``session_id`` and ``seq`` name the first record found wrong (``seq`` is ``None`` when the
    problem is the snapshot's own content address).
    """

    def __init__(self, message: str, *, session_id: str, seq: int | None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """Why one trajectory may not enter a dataset: which one, and the condition it misses."""

    snapshot_id: str
    session_id: str
    condition: str
    """``complete``, ``terminal``, ``training-entitled``, ``reward``, ``unique`` (in two
    snapshots) or ``selected`` (none of its participants is among the dataset's)."""
    detail: str

    def __str__(self) -> str:
        return (
            f"{self.session_id} (snapshot {self.snapshot_id}): not {self.condition}: {self.detail}"
        )


class AdmissionError(TrajectoryError):
    """A dataset was refused; every refused trajectory is named with what it lacks."""

    def __init__(self, dataset: str, refusals: Sequence[Refusal]) -> None:
        self.dataset = dataset
        self.refusals = tuple(refusals)
        shown = "; ".join(str(refusal) for refusal in self.refusals[:20])
        more = len(self.refusals) - 20
        tail = f"; and {more} more" if more > 0 else ""
        super().__init__(
            f"dataset {dataset!r} refused {len(self.refusals)} trajectory(ies): {shown}{tail}"
        )
