"""What a caller of the named reads (:mod:`envharness.store.named_reads`) is about to ask, so
that an engine with a round trip per statement can ask it all at once."""

from __future__ import annotations

from dataclasses import dataclass

from envharness.store.reader import RecordFilter

__all__ = ["ReadAhead"]


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """The reads a caller is about to make about one session, which an engine may make
    together: a hint, never a check — each named read still answers only for its own
    arguments, and a read not made ahead is made when it is asked."""

    session_id: str
    """:meth:`NamedReads.session` of this id (always read)."""
    token: str | None = None
    """:meth:`NamedReads.token` of this digest, if the caller will check one."""
    participant: str | None = None
    """:meth:`NamedReads.participant_sessions` of this participant among ``[session_id]``."""
    page: RecordFilter | None = None
    """:meth:`NamedReads.page` of ``session_id`` with this selection."""
