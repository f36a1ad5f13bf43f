"""Bearer tokens for the local service, and the sessions a participant token may reach.

A token is an opaque secret handed out once (``eht_`` + 256 random bits); the store keeps only
its sha256, so a copy of the store does not leak working credentials. A high-entropy secret
needs no slow password hash: nobody can brute-force 256 bits, and a fast hash keeps every
request's lookup cheap. Each token resolves to one of three fixed policies (admin, viewer,
participant); what a policy may see is decided by the service, but which sessions a
participant took part in is a query, so it lives here with the rest of the SQL.

Tokens are not evidence: revoking one updates its row. They live in the store so that the
command line, the service and every restart agree on which credentials exist.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal, TypeVar, get_args

import msgspec

from envharness.errors import ConfigurationError, NotFoundError
from envharness.records import new_id, utc_now_text
from envharness.store.backend import SqliteBackend, backend_of

__all__ = [
    "ROLES",
    "TOKEN_PREFIX",
    "IssuedToken",
    "Role",
    "TokenInfo",
    "TokenStore",
    "hash_secret",
    "participant_sessions_in",
    "resolve_in",
]

Role = Literal["admin", "viewer", "participant"]
ROLES: tuple[Role, ...] = get_args(Role)
TOKEN_PREFIX = "eht_"
"""Every secret starts with this, so a leaked one is recognisable (and greppable)."""

_T = TypeVar("_T")
_COLUMNS = "id, role, participant, sessions, label, created_at, expires_at, revoked_at"
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


class IssuedToken(msgspec.Struct, frozen=True, kw_only=True):
    """A new token: ``secret`` is shown this once and cannot be recovered later."""

    secret: str
    info: TokenInfo


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenStore:
    """The tokens table of one store. Every call is one short transaction in a worker thread.

    ``clock`` gives the current time as stored text (RFC 3339 UTC); tests move it forward to
    expire tokens.
    """

    def __init__(
        self, database: SqliteBackend | Path, *, clock: Callable[[], str] = utc_now_text
    ) -> None:
        self.backend = backend_of(database)
        self.directory = self.backend.directory
        self._clock = clock

    def now(self) -> str:
        return self._clock()

    async def issue(
        self,
        role: str,
        *,
        participant: str | None = None,
        sessions: Sequence[str] | None = None,
        label: str = "",
        expires_at: str | None = None,
    ) -> IssuedToken:
        """Create a token. A participant token names its participant and may be bound to
        some of that participant's sessions; the others may not be narrowed."""
        checked_role = _check_role(role)
        if checked_role == "participant":
            if not participant:
                raise ConfigurationError(
                    "a participant token needs the participant's name (--participant NAME)"
                )
        elif participant is not None or sessions:
            raise ConfigurationError(
                f"only a participant token takes a participant or sessions; a {role} token "
                "sees every session"
            )
        bound = tuple(dict.fromkeys(sessions)) if sessions else None
        if bound is not None and participant is not None:
            found = await self.participant_sessions(participant, among=bound)
            missing = [session for session in bound if session not in found]
            if missing:
                raise ConfigurationError(
                    f"participant {participant!r} takes no part in session(s) "
                    f"{', '.join(missing)} (or they do not exist); give full session ids "
                    "from `envharness sessions list`"
                )
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        info = TokenInfo(
            id=new_id("tok"),
            role=checked_role,
            participant=participant,
            sessions=bound,
            label=label,
            created_at=self.now(),
            expires_at=expires_at,
        )
        encoded = msgspec.json.encode(bound).decode() if bound is not None else None

        def insert(connection: sqlite3.Connection) -> None:
            connection.execute(
                f"INSERT INTO tokens (secret_sha256, {_COLUMNS}) VALUES ({', '.join('?' * 9)})",
                (
                    hash_secret(secret),
                    info.id,
                    info.role,
                    info.participant,
                    encoded,
                    info.label,
                    info.created_at,
                    info.expires_at,
                    None,
                ),
            )

        await self._write(insert)
        return IssuedToken(secret=secret, info=info)

    async def resolve(self, secret: str) -> TokenInfo | None:
        """The active token with this secret; ``None`` when unknown, revoked or expired."""
        if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
            return None
        digest = hash_secret(secret)
        now = self.now()
        return await self._read(lambda c: resolve_in(c, digest, now))

    async def tokens(self) -> list[TokenInfo]:
        """Every token ever issued, oldest first, revoked and expired ones included."""
        rows = await self._read(
            lambda c: c.execute(f"SELECT {_COLUMNS} FROM tokens ORDER BY created_at, id").fetchall()
        )
        return [_info(row) for row in rows]

    async def revoke(self, token_id: str) -> TokenInfo:
        """Revoke a token for good; revoking it again changes nothing."""
        now = self.now()

        def update(connection: sqlite3.Connection) -> list[tuple[object, ...]]:
            connection.execute(
                "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (now, token_id),
            )
            return connection.execute(
                f"SELECT {_COLUMNS} FROM tokens WHERE id = ?", (token_id,)
            ).fetchall()

        rows = await self._write(update)
        if not rows:
            raise NotFoundError(f"no token {token_id!r}; `envharness token list` shows them")
        return _info(rows[0])

    async def participant_sessions(
        self, participant: str, *, among: Collection[str] | None = None
    ) -> frozenset[str]:
        """Ids of the sessions whose roster (frozen in ``session.created``) names
        ``participant``, optionally only those in ``among``."""
        return await self._read(lambda c: participant_sessions_in(c, participant, among))

    # -- connections ---------------------------------------------------------------------------

    async def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self.backend.read(work)

    async def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self.backend.write(work)


def resolve_in(connection: sqlite3.Connection, digest: str, now: str) -> TokenInfo | None:
    """The token whose secret has this sha256 if it is active at ``now`` (blocking): the
    lookup of :meth:`TokenStore.resolve`, for a read that makes it with its own queries."""
    rows = connection.execute(
        f"SELECT {_COLUMNS} FROM tokens WHERE secret_sha256 = ?", (digest,)
    ).fetchall()
    if not rows:
        return None
    info = _info(rows[0])
    return info if info.active(now) else None


def participant_sessions_in(
    connection: sqlite3.Connection, participant: str, among: Collection[str] | None
) -> frozenset[str]:
    """:meth:`TokenStore.participant_sessions` on a connection the caller holds (blocking),
    for a read that makes its other queries in the same worker-thread call."""
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


def _check_role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise ConfigurationError(f"role {role!r} is not one of: {', '.join(ROLES)}")


def _info(row: Sequence[object]) -> TokenInfo:
    token_id, role, participant, sessions, label, created_at, expires_at, revoked_at = row
    return TokenInfo(
        id=str(token_id),
        role=_check_role(str(role)),
        participant=participant if isinstance(participant, str) else None,
        sessions=_session_list.decode(sessions) if isinstance(sessions, str) else None,
        label=str(label),
        created_at=str(created_at),
        expires_at=expires_at if isinstance(expires_at, str) else None,
        revoked_at=revoked_at if isinstance(revoked_at, str) else None,
    )
