"""The evidence reader a store's trajectories are checked against by default.

It joins the two sides: :mod:`~envharness.trajectories.binding` reads native trajectories from
the journal, :mod:`~envharness.trajectories.sources.evidence` imported ones from their
source's chain — which builds on the binding, so the join lives here, above both.
"""

from __future__ import annotations

from envharness.store.locate import AnyStore
from envharness.trajectories.binding import Evidence, JournalEvidence, StoreChains
from envharness.trajectories.sources.evidence import SourceEvidence

__all__ = ["evidence_for"]


def evidence_for(store: AnyStore) -> Evidence:
    """The evidence reader exports and datasets use by default for ``store``: the journal for
    native trajectories, the source chains (``SourceEvidence``) for imported ones, on either
    engine."""
    return Evidence(JournalEvidence(StoreChains(store)), imported=SourceEvidence(store.backend))
