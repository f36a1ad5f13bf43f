"""What the root options decide for every command, handed over through ``typer.Context``.

The root callback (:mod:`envharness.cli.app`) parses ``--store`` once and sets a
:class:`CliState` as the context's object; a command takes ``ctx: typer.Context`` and reads it
with :meth:`CliState.of`. Nothing lives in a module global, so each command is a plain function
that can be read, and invoked, on its own.

``--store`` names a store directory or a PostgreSQL database (a ``postgresql://`` URL, kept a
string: a path would collapse its ``//``). A command reads :attr:`CliState.store`, a directory,
unless it says it works on PostgreSQL too (``CliState.of(ctx, postgres=True)``) and reads
:attr:`CliState.location`; any other command given a URL is refused there, by name, before it
touches anything — so a command nobody taught about PostgreSQL can never take the URL for a
directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from envharness.errors import ConfigurationError
from envharness.store.locate import postgres_url

__all__ = ["DEFAULT_STORE", "ON_POSTGRES", "STORE_ENV", "CliState"]

DEFAULT_STORE = Path("environment-sessions")
STORE_ENV = "ENVHARNESS_STORE"
ON_POSTGRES = (
    "quickstart",
    "selftest",
    "run",
    "resume",
    "continue",
    "stop",
    "pause",
    "sessions list",
    "sessions show",
    "verify",
    "export SESSION",
    "export snapshot",
    "trajectories",
    "snapshot create",
    "snapshot list",
    "snapshot show",
    "dataset create",
    "dataset list",
    "dataset export",
    "checkpoint",
    "branch",
    "compare",
    "artifact",
    "experiments list",
    "experiments show",
    "harness list",
    "harness show",
    "harness diff",
    "harness runs",
    "optimize",
    "copy-store",
    "import",
    "sources",
    "serve",
    "login-link",
    "token issue",
    "token list",
    "token revoke",
)
"""The commands that take a PostgreSQL store today (``docs/postgresql.md``): each is named in a
refusal, so a user learns what does work."""


@dataclass(frozen=True, slots=True)
class CliState:
    """The root options, as every command sees them."""

    location: Path | str = DEFAULT_STORE
    """The store: a directory (``~`` expanded), or a PostgreSQL URL as given."""
    store_given: bool = False
    """Whether ``--store`` or ``$ENVHARNESS_STORE`` named the store, rather than the default
    (``selftest`` uses a temporary store unless one was named)."""

    @property
    def store(self) -> Path:
        """The store directory. :meth:`of` has refused a URL for every command that reads
        this, so one here is a bug in the command, not a user's mistake."""
        if isinstance(self.location, str):
            raise TypeError("this command reads CliState.location: it takes a PostgreSQL URL")
        return self.location

    @classmethod
    def parsed(cls, ctx: typer.Context, store: str | Path) -> CliState:
        """The state the root callback sets, from its own context and ``--store`` value."""
        source = ctx.get_parameter_source("store")
        # Compared by name: typer bundles its own click, whose enum is not click's.
        given = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
        url = postgres_url(str(store))
        location = url if url is not None else Path(store).expanduser()
        return cls(location=location, store_given=given)

    @classmethod
    def of(cls, ctx: typer.Context, *, postgres: bool = False) -> CliState:
        """The state the root callback set; the defaults when a command runs without it.

        Without ``postgres`` a PostgreSQL store is refused, naming the command and the ones
        that take it."""
        found = ctx.find_object(cls)
        state = found if found is not None else cls()
        if isinstance(state.location, str) and not postgres:
            raise ConfigurationError(
                f"`{ctx.command_path}` does not work on a PostgreSQL store yet (--store "
                f"postgresql://...): on PostgreSQL the command line has {', '.join(ON_POSTGRES)}; "
                "docs/postgresql.md says what is still kept in a store directory. Give this "
                "command a store directory, or move the evidence with `envharness copy-store`"
            )
        return state
