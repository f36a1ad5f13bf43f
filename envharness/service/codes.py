"""One-time sign-in codes: how the browser gets read-only access without anyone asking for it.

``serve`` prints a link carrying a code (as notebook servers do); redeeming it once gives that
browser a viewer cookie. Codes live in the server's memory only, expire after
:data:`LOGIN_CODE_TTL` seconds, and are kept as sha256 digests so a memory dump of the process
shows no usable code. There is deliberately no endpoint that hands a credential to whichever
local process asks: only someone who can read ``serve``'s output can sign in.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["LOGIN_CODE_TTL", "MAX_OPEN_CODES", "LoginCodes"]

LOGIN_CODE_TTL = 600.0
"""Seconds a printed sign-in link stays valid."""
MAX_OPEN_CODES = 16
"""Unredeemed codes kept at most; issuing more forgets the oldest."""


class LoginCodes:
    """Codes issued by this process, each good for one redemption before its deadline."""

    def __init__(
        self, *, ttl: float = LOGIN_CODE_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._deadlines: OrderedDict[str, float] = OrderedDict()
        self._on_redeem: dict[str, Callable[[], None]] = {}

    def issue(self, *, on_redeem: Callable[[], None] | None = None) -> str:
        """A fresh code; ``on_redeem`` is called when it is redeemed (``serve --open`` then
        deletes the page that carried it)."""
        code = secrets.token_urlsafe(24)
        digest = _digest(code)
        self._deadlines[digest] = self._clock() + self.ttl
        if on_redeem is not None:
            self._on_redeem[digest] = on_redeem
        while len(self._deadlines) > MAX_OPEN_CODES:
            forgotten, _ = self._deadlines.popitem(last=False)
            self._on_redeem.pop(forgotten, None)
        return code

    def redeem(self, code: str) -> bool:
        """True once for a live code; a used, expired or unknown code is refused alike."""
        digest = _digest(code)
        deadline = self._deadlines.pop(digest, None)
        on_redeem = self._on_redeem.pop(digest, None)
        redeemed = deadline is not None and self._clock() < deadline
        if redeemed and on_redeem is not None:
            on_redeem()
        return redeemed


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()
