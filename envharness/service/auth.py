"""Who is asking: a bearer token, or the browser's read-only cookie, resolved to a policy.

Three fixed policies, chosen by the token's role:

- **admin** — everything, including issuing and revoking tokens;
- **viewer** — reads everything;
- **participant** — reads its own records in its own sessions (see :mod:`.access`).

Bearer tokens (``Authorization: Bearer eht_…``) work for every method. The cookie set by the
one-time sign-in link carries a *viewer* token and is accepted only on safe methods (GET,
HEAD) and on sign-out, so a page on another site can never make the browser change anything:
the cookie is ``SameSite=Strict`` besides, and no endpoint changes state on GET.

Every request checks its token against the store: a revoked token stops working at once,
whichever process revoked it. An endpoint that reads its answer through
:class:`~envharness.service.access.Access` may make that check inside its own read instead of
before it (``Endpoint.cached_token``): the token is then taken from the tokens this service
has already resolved (its role and binding never change), and the read re-reads the token's
row, in the same worker-thread call, before anything else (:func:`confirm_in`). A worker-thread
hop costs a request more than its queries; this saves one and checks exactly as much.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from starlette.requests import Request

from envharness.service.problems import HTTPProblem
from envharness.service.state import Service
from envharness.store.named_reads import NamedReads, read_named
from envharness.store.tokens import TOKEN_PREFIX, Role, TokenInfo, hash_secret

__all__ = [
    "SAFE_METHODS",
    "Principal",
    "TokenCheck",
    "authenticate",
    "confirm",
    "confirm_in",
    "confirmed_failure",
    "refused",
    "require",
]

SAFE_METHODS = frozenset({"GET", "HEAD"})
RESOLVED_TOKENS = 1024
"""Tokens a service keeps resolved; beyond, it forgets them all and resolves afresh."""
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="envharness"'}
_UNKNOWN = (
    "the bearer token is unknown, revoked or expired; issue a new one with "
    "`envharness token issue --role ...`"
)
_NEEDED = (
    "this needs a credential: a bearer token from `envharness token`, or the browser sign-in "
    "link that `envharness serve` prints"
)


class TokenCheck:
    """A token taken from the resolved ones, not yet re-read in this request: its digest, the
    time it must be active at, what it resolved to, and whether the request's read found it
    still so."""

    __slots__ = ("confirmed", "digest", "info", "now")

    def __init__(self, digest: str, now: str, info: TokenInfo) -> None:
        self.digest = digest
        self.now = now
        self.info = info
        self.confirmed = False


@dataclass(frozen=True, slots=True)
class Principal:
    """A resolved credential: its policy and, for a participant, what it is bound to."""

    token_id: str
    role: Role
    participant: str | None
    sessions: frozenset[str] | None
    via: Literal["bearer", "cookie"]
    pending: TokenCheck | None = field(default=None, compare=False)
    """Set when the token came from the resolved ones: the check still owed this request."""

    @classmethod
    def of(
        cls, info: TokenInfo, via: Literal["bearer", "cookie"], pending: TokenCheck | None = None
    ) -> Principal:
        bound = frozenset(info.sessions) if info.sessions is not None else None
        return cls(info.id, info.role, info.participant, bound, via, pending)


async def authenticate(
    request: Request, service: Service, *, cookie: bool, cached: bool = False
) -> Principal | None:
    """The principal behind ``request``, ``None`` when it carries no credential.

    A bad ``Authorization`` header is a 401 at once (never a silent fall back to the cookie).
    ``cookie`` says whether this endpoint accepts the browser cookie at all. ``cached``: the
    token may come from the ones already resolved, with its check left ``pending`` for the
    request's own read (see the module's docstring).
    """
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, secret = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise HTTPProblem(
                401, "the Authorization header must be 'Bearer <token>'", headers=_CHALLENGE
            )
        info, pending = await _resolve(service, secret.strip(), cached)
        if info is None:
            raise HTTPProblem(401, _UNKNOWN, headers=_CHALLENGE)
        return Principal.of(info, "bearer", pending)
    if cookie:
        cookie_secret = request.cookies.get(service.cookie_name)
        if cookie_secret:
            info, pending = await _resolve(service, cookie_secret, cached)
            # The cookie only ever carries read-only access, whatever was put into it.
            if info is not None and info.role == "viewer":
                return Principal.of(info, "cookie", pending)
    return None


async def _resolve(
    service: Service, secret: str, cached: bool
) -> tuple[TokenInfo | None, TokenCheck | None]:
    """The token, from the resolved ones when ``cached`` allows (its check then pending)."""
    if not cached or not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return await service.tokens.resolve(secret), None
    digest = hash_secret(secret)
    now = service.tokens.now()
    known = service.resolved_tokens.get(digest)
    if known is not None and known.active(now):  # expiry needs no read; revocation does
        return known, TokenCheck(digest, now, known)
    info = await service.tokens.resolve(secret)
    if info is not None:
        if len(service.resolved_tokens) >= RESOLVED_TOKENS:
            service.resolved_tokens.clear()
        service.resolved_tokens[digest] = info
    return info, None


def confirm_in(reads: NamedReads, principal: Principal) -> bool:
    """Settle ``principal``'s pending check on a reader the caller holds (blocking): ``False``
    when its token was revoked (or expired) since it was resolved, or is no longer the token
    it was (a store replaced under the service)."""
    check = principal.pending
    if check is None or check.confirmed:
        return True
    check.confirmed = reads.token(check.digest, check.now) == check.info
    return check.confirmed


async def confirm(principal: Principal | None, service: Service) -> None:
    """Settle a check the request's own read did not (a 401 when the token is no longer
    active); nothing to do otherwise."""
    if principal is None or principal.pending is None or principal.pending.confirmed:
        return
    if not await read_named(service.tokens.backend, lambda reads: confirm_in(reads, principal)):
        raise refused(service, principal)


async def confirmed_failure(
    principal: Principal | None, service: Service, failure: HTTPProblem
) -> HTTPProblem:
    """``failure``, or the 401 it must be instead when the token turns out to be revoked:
    a revoked token is refused before anything else is said about the request."""
    if failure.status == 401:
        return failure
    try:
        await confirm(principal, service)
    except HTTPProblem as refusal:
        return refusal
    return failure


def refused(service: Service, principal: Principal) -> HTTPProblem:
    """The 401 for a token a read found no longer active, as it was answered when looked up
    first (a dead cookie counts as no credential); the service forgets the token."""
    if principal.pending is not None:
        service.resolved_tokens.pop(principal.pending.digest, None)
    return HTTPProblem(401, _NEEDED if principal.via == "cookie" else _UNKNOWN, headers=_CHALLENGE)


def require(principal: Principal | None, roles: frozenset[Role]) -> Principal:
    if principal is None:
        raise HTTPProblem(401, _NEEDED, headers=_CHALLENGE)
    if principal.role not in roles:
        allowed = " or ".join(sorted(roles))
        raise HTTPProblem(
            403, f"this needs a token with role {allowed}; yours has role {principal.role}"
        )
    return principal
