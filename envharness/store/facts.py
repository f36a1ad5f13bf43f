"""What the sessions list shows and searches beside the session index: each session's
environment and roster (frozen in its ``session.created``) and its latest score's verdict.

Read in one query over the first record and the newest ``score`` record of every session, so
a list of thousands of sessions costs one read rather than one per session.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from envharness.store.reader import AMONG

__all__ = ["SESSION_FACTS_QUERY", "SessionFacts", "session_facts", "session_facts_query"]


class SessionFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A session's environment, roster and latest verdict; derived, not evidence."""

    environment: str | None
    participants: tuple[str, ...]
    scored: bool
    """Whether any score report was recorded (``passed`` is ``None`` either way when not)."""
    passed: bool | None
    metrics: dict[str, float | None]
    """The latest score report's metrics, in the order the report gave them."""


SESSION_FACTS_QUERY = (
    "SELECT id,"
    " (SELECT json_extract(CAST(payload AS TEXT), '$.config.environment.name') FROM records"
    "  WHERE records.session_id = sessions.id AND records.seq = 0),"
    " (SELECT json_extract(CAST(payload AS TEXT), '$.config.participants') FROM records"
    "  WHERE records.session_id = sessions.id AND records.seq = 0),"
    " (SELECT json_array(json_extract(CAST(payload AS TEXT), '$.passed'),"
    "   json(COALESCE(json_extract(CAST(payload AS TEXT), '$.metrics'), '{}'))) FROM records"
    "  WHERE records.session_id = sessions.id AND records.kind = 'score'"
    "  ORDER BY records.seq DESC LIMIT 1)"
    " FROM sessions"
)
"""Each session's id, environment name, roster (a JSON object) and ``[passed, metrics]``."""

_roster = msgspec.json.Decoder(dict[str, object])
_verdict = msgspec.json.Decoder(tuple[int | bool | None, dict[str, float | None]])


def session_facts_query(among: bool) -> str:
    return SESSION_FACTS_QUERY + (" WHERE id IN " + AMONG if among else "")


def session_facts(row: Sequence[object]) -> tuple[str, SessionFacts]:
    session_id, environment, roster, verdict = row
    names = tuple(_roster.decode(str(roster))) if roster is not None else ()
    passed: bool | None = None
    metrics: dict[str, float | None] = {}
    if verdict is not None:
        flag, metrics = _verdict.decode(str(verdict))
        passed = None if flag is None else bool(flag)
    return str(session_id), SessionFacts(
        environment=None if environment is None else str(environment),
        participants=names,
        scored=verdict is not None,
        passed=passed,
        metrics=metrics,
    )
