"""Who is asking: a bearer token, or the browser's read-only cookie, resolved to a policy.

Three fixed policies, chosen by the token's role:

- **admin** — everything, including issuing and revoking tokens;
- **viewer** — reads everything;
- **participant** — reads its own records in its own sessions (see :mod:`.access`).

Bearer tokens (``Authorization: Bearer eht_…``) work for every method. The cookie set by the
one-time sign-in link carries a *viewer* token and is accepted only on safe methods (GET,
HEAD) and on sign-out, so a page on another site can never make the browser change anything:
the cookie is ``SameSite=Strict`` besides, and no endpoint changes state on GET.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request

from envharness.service.problems import HTTPProblem
from envharness.service.state import Service
from envharness.store.tokens import Role, TokenInfo

__all__ = ["SAFE_METHODS", "Principal", "authenticate", "require"]

SAFE_METHODS = frozenset({"GET", "HEAD"})
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="envharness"'}


@dataclass(frozen=True, slots=True)
class Principal:
    """A resolved credential: its policy and, for a participant, what it is bound to."""

    token_id: str
    role: Role
    participant: str | None
    sessions: frozenset[str] | None
    via: Literal["bearer", "cookie"]

    @classmethod
    def of(cls, info: TokenInfo, via: Literal["bearer", "cookie"]) -> Principal:
        bound = frozenset(info.sessions) if info.sessions is not None else None
        return cls(info.id, info.role, info.participant, bound, via)


async def authenticate(request: Request, service: Service, *, cookie: bool) -> Principal | None:
    """The principal behind ``request``, ``None`` when it carries no credential.

    A bad ``Authorization`` header is a 401 at once (never a silent fall back to the cookie).
    ``cookie`` says whether this endpoint accepts the browser cookie at all.
    """
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, secret = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise HTTPProblem(
                401, "the Authorization header must be 'Bearer <token>'", headers=_CHALLENGE
            )
        info = await service.tokens.resolve(secret.strip())
        if info is None:
            raise HTTPProblem(
                401,
                "the bearer token is unknown, revoked or expired; issue a new one with "
                "`envharness token issue --role ...`",
                headers=_CHALLENGE,
            )
        return Principal.of(info, "bearer")
    if cookie:
        cookie_secret = request.cookies.get(service.cookie_name)
        if cookie_secret:
            info = await service.tokens.resolve(cookie_secret)
            # The cookie only ever carries read-only access, whatever was put into it.
            if info is not None and info.role == "viewer":
                return Principal.of(info, "cookie")
    return None


def require(principal: Principal | None, roles: frozenset[Role]) -> Principal:
    if principal is None:
        raise HTTPProblem(
            401,
            "this needs a credential: a bearer token from `envharness token`, or the browser "
            "sign-in link that `envharness serve` prints",
            headers=_CHALLENGE,
        )
    if principal.role not in roles:
        allowed = " or ".join(sorted(roles))
        raise HTTPProblem(
            403, f"this needs a token with role {allowed}; yours has role {principal.role}"
        )
    return principal
