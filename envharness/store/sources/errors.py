"""The errors of a refused import: nothing of the batch was stored.

The tree they add under :class:`~envharness.errors.EnvharnessError`::

    SourceImportError        an import was refused; nothing was stored
    ├── SourceFormatError    a line is not a source record (JSON, a field, the schema version)
    ├── SourceChainError     a hash that does not match, a prev that does not chain, a gap
    └── SourceConflictError  a position already holds a record with another hash
"""

from __future__ import annotations

from typing import Literal

from envharness.errors import EnvharnessError

__all__ = [
    "ProblemKind",
    "SourceChainError",
    "SourceConflictError",
    "SourceFormatError",
    "SourceImportError",
]

ProblemKind = Literal["format", "schema", "hash", "chain", "gap", "conflict"]


class SourceImportError(EnvharnessError):
    """An import was refused and nothing of it was stored.

    ``source`` and ``position`` name the record at fault (``position`` is ``None`` when the
    problem is not one record's); ``problem`` says which rule it broke.
    """

    problem: ProblemKind = "format"

    def __init__(self, message: str, *, source: str, position: int | None) -> None:
        super().__init__(message)
        self.source = source
        self.position = position


class SourceFormatError(SourceImportError):
    """A line is not a source record this envharness reads."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        position: int | None,
        problem: Literal["format", "schema"] = "format",
    ) -> None:
        super().__init__(message, source=source, position=position)
        self.problem = problem


class SourceChainError(SourceImportError):
    """A record's hash does not match its content, its ``prev`` does not chain, or positions
    skip (a gap)."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        position: int | None,
        problem: Literal["hash", "chain", "gap"],
    ) -> None:
        super().__init__(message, source=source, position=position)
        self.problem = problem


class SourceConflictError(SourceImportError):
    """A position already holds a record with another hash: a retry with different content."""

    problem: ProblemKind = "conflict"
