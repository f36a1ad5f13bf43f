"""Help that prints only the bounds a user could meet.

A count declared ``max=MAX_COUNT`` (2**63 - 1, what the store can count) is still refused above
it, but ``[1<=x<=9223372036854775807]`` in ``--help`` reads as noise where ``[x>=1]`` says what
matters. Typer keeps the bounds it prints on each parameter apart from the ones it checks, so
the printed ones are dropped here, once for every command, when the root group is made.
"""

from __future__ import annotations

from typer import _click  # typer's own click: the classes its commands are made of
from typer.core import TyperArgument, TyperGroup, TyperOption

__all__ = ["UNREACHABLE", "drop_unreachable_bounds"]

UNREACHABLE = 2**31
"""A bound this far from zero is left out of help (still enforced)."""


def drop_unreachable_bounds(command: _click.Command) -> None:
    """Leave bounds of ``UNREACHABLE`` or beyond out of the help of ``command`` and of every
    command under it."""
    for param in command.params:
        if isinstance(param, TyperOption | TyperArgument):
            if param.max is not None and abs(param.max) >= UNREACHABLE:
                param.max = None
            if param.min is not None and abs(param.min) >= UNREACHABLE:
                param.min = None
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            drop_unreachable_bounds(sub)
