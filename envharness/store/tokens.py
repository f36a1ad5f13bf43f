"""Bearer tokens for the local service, and the sessions a participant token may reach.

A token is an opaque secret handed out once (``eht_`` + 256 random bits); the store keeps only
its sha256, so a copy of the store does not leak working credentials. A high-entropy secret
needs no slow password hash: nobody can brute-force 256 bits, and a fast hash keeps every
request's lookup cheap. Each token resolves to one of three fixed policies (admin, viewer,
participant); what a policy may see is decided by the service, but which sessions a
participant took part in is a query, a named read of each engine (:mod:`.named_reads`).

Tokens are not evidence: revoking one updates its row. They live in the store so that the
command line, the service and every restart agree on which credentials exist — in the
SQLite store's database or the PostgreSQL store's ``tokens`` table alike (the statements that
issue, list and revoke are SQL both engines run).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from envharness.errors import ConfigurationError, NotFoundError
from envharness.records import new_id, utc_now_text
from envharness.store.backend import SqliteBackend, backend_of
from envharness.store.named_reads import AnyBackend, NamedReads, read_named
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.token_rows import (
    ROLES,
    TOKEN_COLUMNS,
    Role,
    TokenInfo,
    check_role,
    participant_sessions_in,
    resolve_in,
    token_info,
)

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

TOKEN_PREFIX = "eht_"
"""Every secret starts with this, so a leaked one is recognisable (and greppable)."""

_T = TypeVar("_T")


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
        self, database: AnyBackend | Path, *, clock: Callable[[], str] = utc_now_text
    ) -> None:
        self.backend: AnyBackend = (
            database
            if isinstance(database, SqliteBackend | PostgresBackend)
            else backend_of(database)
        )
        self._clock = clock

    def now(self) -> str:
        return self._clock()

    async def check_grants(self) -> None:
        """Refuse, before any request needs it, a PostgreSQL role that may not keep tokens:
        the service reads them on every request and writes one per browser sign-in, and a
        viewer's role is often granted ``SELECT`` on the evidence alone. (A SQLite store's
        tokens share its file, which the service opens already.)"""
        if not isinstance(self.backend, PostgresBackend):
            return
        missing = await self.backend.missing_privileges("tokens", ("SELECT", "INSERT", "UPDATE"))
        if missing:
            role = self.backend.where.user
            raise ConfigurationError(
                f"role {role!r} may not {', '.join(missing)} on the table tokens of the "
                f"PostgreSQL store {self.backend.location}: the service checks every request's "
                "token there and issues one per browser sign-in. Run as its owner: GRANT "
                f'SELECT, INSERT, UPDATE ON tokens TO {role} (docs/postgresql.md, "The '
                'viewer"), or serve with a role that has them'
            )

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
        checked_role = check_role(role)
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

        def insert(connection: Any) -> None:
            connection.execute(
                f"INSERT INTO tokens (secret_sha256, {TOKEN_COLUMNS})"
                f" VALUES ({', '.join('?' * 9)})",
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

        await self.backend.write(insert)
        return IssuedToken(secret=secret, info=info)

    async def resolve(self, secret: str) -> TokenInfo | None:
        """The active token with this secret; ``None`` when unknown, revoked or expired."""
        if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
            return None
        digest = hash_secret(secret)
        now = self.now()
        return await self._named(lambda reads: reads.token(digest, now))

    async def tokens(self) -> list[TokenInfo]:
        """Every token ever issued, oldest first, revoked and expired ones included."""
        rows = await self.backend.read(
            lambda c: c.execute(
                f"SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, id"
            ).fetchall()
        )
        return [token_info(row) for row in rows]

    async def revoke(self, token_id: str) -> TokenInfo:
        """Revoke a token for good; revoking it again changes nothing."""
        now = self.now()

        def update(connection: Any) -> list[tuple[object, ...]]:
            connection.execute(
                "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (now, token_id),
            )
            found: list[tuple[object, ...]] = connection.execute(
                f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?", (token_id,)
            ).fetchall()
            return found

        rows = await self.backend.write(update)
        if not rows:
            raise NotFoundError(f"no token {token_id!r}; `envharness token list` shows them")
        return token_info(rows[0])

    async def participant_sessions(
        self, participant: str, *, among: Collection[str] | None = None
    ) -> frozenset[str]:
        """Ids of the sessions whose roster (frozen in ``session.created``) names
        ``participant``, optionally only those in ``among``."""
        return await self._named(lambda reads: reads.participant_sessions(participant, among))

    # -- connections ---------------------------------------------------------------------------

    async def _named(self, work: Callable[[NamedReads], _T]) -> _T:
        return await read_named(self.backend, work)
