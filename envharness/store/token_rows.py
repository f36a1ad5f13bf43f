"""A service token as the ``tokens`` table holds it, and SQLite's two reads of that table.

Kept apart from :mod:`.tokens` (which issues and revokes) so that the service's named reads of
either engine (:mod:`.named_reads`, :mod:`.postgres.named_reads`) decode a token row the same
way without importing the token store that calls them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from typing import Literal, get_args

import msgspec

from envharness.errors import ConfigurationError

__all__ = [
    "ROLES",
    "TOKEN_COLUMNS",
    "Role",
    "TokenInfo",
    "check_role",
    "participant_sessions_in",
    "resolve_in",
    "token_info",
]

Role = Literal["admin", "viewer", "participant"]
ROLES: tuple[Role, ...] = get_args(Role)
TOKEN_COLUMNS = "id, role, participant, sessions, label, created_at, expires_at, revoked_at"
"""The columns :func:`token_info` reads, in its order."""

_session_list = msgspec.json.Decoder(tuple[str, ...])


class TokenInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A token as listed: everything but the secret, which is never stored."""

    id: str
    role: Role
    participant: str | None = None
    sessions: tuple[str, ...] | None = None
    """The sessions a participant token is bound to; ``None``: every session it takes part in."""
    label: str = ""
    created_at: str
    expires_at: str | None = None
    revoked_at: str | None = None

    def active(self, now: str) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


def check_role(role: str) -> Role:
    """``role`` if it is one of :data:`ROLES`; a :class:`ConfigurationError` naming them if not."""
    for known in ROLES:
        if role == known:
            return known
    raise ConfigurationError(f"role {role!r} is not one of: {', '.join(ROLES)}")


def token_info(row: Sequence[object]) -> TokenInfo:
    """A :data:`TOKEN_COLUMNS` row, from either engine."""
    token_id, role, participant, sessions, label, created_at, expires_at, revoked_at = row
    return TokenInfo(
        id=str(token_id),
        role=check_role(str(role)),
        participant=participant if isinstance(participant, str) else None,
        sessions=_session_list.decode(sessions) if isinstance(sessions, str) else None,
        label=str(label),
        created_at=str(created_at),
        expires_at=expires_at if isinstance(expires_at, str) else None,
        revoked_at=revoked_at if isinstance(revoked_at, str) else None,
    )


def resolve_in(connection: sqlite3.Connection, digest: str, now: str) -> TokenInfo | None:
    """The token whose secret has this sha256 if it is active at ``now`` (blocking): the
    lookup of :meth:`~envharness.store.tokens.TokenStore.resolve`, for a read that makes it
    with its own queries."""
    rows = connection.execute(
        f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_sha256 = ?", (digest,)
    ).fetchall()
    if not rows:
        return None
    info = token_info(rows[0])
    return info if info.active(now) else None


def participant_sessions_in(
    connection: sqlite3.Connection, participant: str, among: Collection[str] | None
) -> frozenset[str]:
    """Ids of the sessions whose roster (frozen in ``session.created``) names ``participant``,
    optionally only those in ``among`` (blocking), for a read that makes its other queries in
    the same worker-thread call."""
    query = (
        "SELECT s.id FROM sessions s JOIN records r ON r.session_id = s.id AND r.seq = 0"
        " WHERE r.kind = 'session.created' AND EXISTS (SELECT 1 FROM"
        " json_each(CAST(r.payload AS TEXT), '$.config.participants') WHERE key = ?)"
    )
    arguments: list[object] = [participant]
    if among is not None:
        query += " AND s.id IN (SELECT value FROM json_each(?))"
        arguments.append(msgspec.json.encode(list(among)).decode())
    return frozenset(str(row[0]) for row in connection.execute(query, arguments))
