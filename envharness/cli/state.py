"""What the root options decide for every command, handed over through ``typer.Context``.

The root callback (:mod:`envharness.cli.app`) parses ``--store`` once and sets a
:class:`CliState` as the context's object; a command takes ``ctx: typer.Context`` and reads it
with :meth:`CliState.of`. Nothing lives in a module global, so each command is a plain function
that can be read, and invoked, on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

__all__ = ["DEFAULT_STORE", "STORE_ENV", "CliState"]

DEFAULT_STORE = Path("environment-sessions")
STORE_ENV = "ENVHARNESS_STORE"


@dataclass(frozen=True, slots=True)
class CliState:
    """The root options, as every command sees them."""

    store: Path
    """The evidence store directory, with ``~`` expanded."""
    store_given: bool = False
    """Whether ``--store`` or ``$ENVHARNESS_STORE`` named the store, rather than the default
    (``selftest`` uses a temporary store unless one was named)."""

    @classmethod
    def parsed(cls, ctx: typer.Context, store: Path) -> CliState:
        """The state the root callback sets, from its own context and ``--store`` value."""
        source = ctx.get_parameter_source("store")
        # Compared by name: typer bundles its own click, whose enum is not click's.
        given = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
        return cls(store=store.expanduser(), store_given=given)

    @classmethod
    def of(cls, ctx: typer.Context) -> CliState:
        """The state the root callback set; the defaults when a command runs without it."""
        found = ctx.find_object(cls)
        return found if found is not None else cls(store=DEFAULT_STORE)
