"""What one running service holds: the store it reads, its tokens, its address, its login codes.

Passed explicitly to every handler (no module globals), so a test builds as many services as it
likes, each with its own clock.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from envharness.errors import ConfigurationError
from envharness.service.codes import LoginCodes
from envharness.service.projections import Projections
from envharness.store.locate import AnyStore
from envharness.store.tokens import TokenInfo, TokenStore

__all__ = ["Address", "Service", "loopback_address"]


@dataclass(frozen=True, slots=True)
class Address:
    """Where the service listens: a loopback host and a port.

    ``allowed_hosts`` are the Host header values a request may carry. A page on another site
    that rebinds its own name to 127.0.0.1 sends *its* name as Host, and is refused.
    """

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def allowed_hosts(self) -> frozenset[str]:
        bracketed = f"[{self.host}]" if ":" in self.host else self.host
        names = {bracketed, "localhost"}
        return frozenset(f"{name}:{self.port}" for name in names)

    @property
    def allowed_origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.allowed_hosts)


def loopback_address(host: str, port: int) -> Address:
    """``host`` if it is a loopback address (``localhost`` means 127.0.0.1); refuse others.

    The service publishes evidence that may hold private observations; it listens on the
    machine's own loopback interface only, never on a network.
    """
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"--port {port} is not a port number (0-65535)")
    if host == "localhost":
        return Address("127.0.0.1", port)
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ConfigurationError(
            f"--host {host!r} is not a loopback address; the service listens on this machine "
            "only (127.0.0.1, ::1 or localhost). To reach it from elsewhere, use an SSH tunnel "
            "(ssh -L 8765:127.0.0.1:8765 host)"
        )
    return Address(str(address), port)


@dataclass(slots=True)
class Service:
    """The dependencies every handler is given."""

    store: AnyStore
    """The store it reads: a SQLite store directory's or a PostgreSQL database's."""
    address: Address
    tokens: TokenStore
    logins: LoginCodes = field(default_factory=LoginCodes)
    monotonic: Callable[[], float] = time.monotonic
    """The clock of server-side waits (SSE polling, heartbeats)."""
    projections: Projections = field(default_factory=Projections)
    """Trajectories already projected, reused while their evidence is unchanged."""
    resolved_tokens: dict[str, TokenInfo] = field(default_factory=dict)
    """Tokens already resolved, by their secret's sha256; a request that uses one still checks
    in its own read that it was not revoked since (:mod:`envharness.service.auth`)."""

    @property
    def cookie_name(self) -> str:
        """Cookies ignore ports, so two services on one machine must not share a name."""
        return f"envharness-{self.address.port}"
