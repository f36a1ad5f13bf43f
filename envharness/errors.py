"""The one exception tree envharness raises.

Every error a user can cause or meet derives from :class:`EnvharnessError`, so a caller (and the
CLI edge) can catch one class and print a message that names what was wrong and how to fix it.
Each class lives beside the code that raises it; ``tests/test_errors.py`` keeps this drawing
true to the classes::

    EnvharnessError
    ├── ConfigurationError          a harness, environment, agent or scenario is set up wrongly
    │   ├── ScenarioInputError      a scenario's input does not match the environment's input type
    │   └── ManifestError           an experiment manifest is invalid (envharness.manifest)
    ├── StoreError                  the evidence store cannot be used
    │   ├── StoreLayoutError        the path is not a store directory (a file, unreadable, ...)
    │   ├── StoreVersionError       the store was written by a newer envharness
    │   ├── DamagedStoreError       the database file is damaged (envharness.store.damage)
    │   │   └── WalDamageError      the write-ahead log lost acknowledged commits (store.wal)
    │   ├── StoreBusyError          another process held the write lock for too long
    │   ├── ChainConflictError      a record's position in its session chain is already taken
    │   └── NameTakenError          a record claims a unique name (harness-vN) already taken
    ├── NotFoundError               a session (or other named thing) is not in the store
    ├── BudgetExhausted             a budget ran out: the session stops, resumable (budget)
    ├── ReplayMismatchError         an adapted environment's replay diverged (adapters.replay)
    ├── SourceImportError           an import was refused, nothing of it stored (store.sources)
    │   ├── SourceFormatError       a line is not a source record this envharness reads
    │   ├── SourceChainError        a hash, a ``prev`` link or a position does not hold
    │   └── SourceConflictError     a position already holds a record with another hash
    ├── ProtocolError               talking to an external agent failed (envharness.protocol)
    │   ├── ProtocolViolationError  it sent what the protocol forbids; bytes kept
    │   ├── AgentReportedError      it answered with an ``error`` message
    │   ├── EnvironmentReportedError  an environment program answered ``error``
    │   └── ChannelUsageError       the host used a channel out of order (a bug)
    ├── HookFailure                 a hook raised, overran its budget or returned no effect
    │   ├── PatchFailure            a patch's code failed during a call (envharness.optimizer)
    │   └── SandboxInfrastructureError   the sandbox failed for reasons the patch cannot cause
    ├── PatchError                  a patch was refused before any of its code ran (optimizer)
    │   ├── PatchParseError         the answer is not ``<think>…</think><patch>…</patch>``
    │   │   └── PatchSchemaError    the patch JSON is not a list of ``add_code_hook`` operations
    │   ├── PatchPolicyError        the hook code uses constructs the AST policy refuses
    │   └── PatchSmokeTestError     a hook failed when called once on a synthetic context
    ├── TrajectoryError             a trajectory, snapshot or dataset cannot be used as asked
    │   ├── SchemaVersionError      written under a schema version this program does not read
    │   ├── EvidenceMismatchError   a record no longer matches the digest it was bound to
    │   └── AdmissionError          a dataset was refused; each refused trajectory is named
    ├── ProviderError               a model call failed for good, after retries (envharness.llm)
    ├── NoValidActionError          a model agent got no valid action in its asks (agents)
    ├── WorkerError                 a remote executor's worker could not start, or died
    └── ServiceError                the local service answered 4xx/5xx (envharness.client)

Failures *inside* a session (an agent that raises, times out or returns garbage) are not raised
to the caller: they are recorded as evidence and the session ends ``failed``.

No exception group reaches a caller unexplained: where tasks run side by side (an experiment's
sessions, the store's writer), :func:`collapse` turns the group they raise into the one error it
stands for (see its docstring for which one, and how the others stay visible).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "ChainConflictError",
    "BudgetExhausted",
    "ConfigurationError",
    "DamagedStoreError",
    "EnvharnessError",
    "NameTakenError",
    "NotFoundError",
    "ScenarioInputError",
    "StoreBusyError",
    "StoreError",
    "StoreLayoutError",
    "StoreVersionError",
    "WalDamageError",
    "collapse",
    "collapsing",
    "distinct_leaves",
]


class EnvharnessError(Exception):
    """Root of every error envharness raises on purpose."""


class ConfigurationError(EnvharnessError):
    """The caller set something up wrongly; the message names the setting and the fix."""


class ScenarioInputError(ConfigurationError):
    """A scenario's input does not validate against the environment's input type."""


class BudgetExhausted(EnvharnessError):
    """A budget (tokens, money, wall time) ran out.

    Raised by whatever spends (a model agent before a call it cannot afford) and caught by the
    runtime, which stops the session cleanly with a ``budget`` reason instead of failing it: a
    larger budget can resume it.
    """


class StoreError(EnvharnessError):
    """The evidence store cannot be opened, read or written."""


class StoreLayoutError(StoreError):
    """The store path exists but is not a usable store directory."""


class StoreVersionError(StoreError):
    """The store's schema is newer than this program understands."""


class DamagedStoreError(StoreError):
    """The store's database file is damaged: bytes SQLite or envharness cannot take as written.

    The message names the file and what is wrong, and gives the recovery advice."""


class WalDamageError(DamagedStoreError):
    """Opening the store would lose commits that were acknowledged (``envharness.store.wal``).

    Its write-ahead log is damaged (SQLite's recovery would stop early and drop the commits
    after the damage) or cut short, or the store holds fewer records than the acknowledged
    high-water mark. The message says what is missing and what to do; nothing was changed."""


class StoreBusyError(StoreError):
    """Another process kept the store's write lock for longer than the busy timeout."""


class ChainConflictError(StoreError):
    """A record claims a (session, seq) position that another record already holds."""


class NameTakenError(StoreError):
    """A record claims a unique name (a harness version's) that another record already holds.

    Nothing of its transaction was written and its chain is intact, so the writer may seal the
    record again under another name at the same position (``RunLog.accept`` does)."""


class NotFoundError(EnvharnessError):
    """A named thing (a session, an artifact) is not in the store."""


# -- exception groups ------------------------------------------------------------------------------


def distinct_leaves(error: BaseException) -> list[BaseException]:
    """The errors inside ``error`` (itself if it is no group), at any depth, in order.

    Cancellations are left out when anything else is there: they are how sibling tasks were
    stopped because of the others, not why. Leaves of the same class with the same message
    (ten sessions meeting one full disk) count once.
    """
    found: list[BaseException] = []

    def collect(inner: BaseException) -> None:
        if isinstance(inner, BaseExceptionGroup):
            for nested in inner.exceptions:
                collect(nested)
        else:
            found.append(inner)

    collect(error)
    meaningful = [leaf for leaf in found if not _is_cancellation(leaf)] or found
    distinct: list[BaseException] = []
    seen: set[tuple[type[BaseException], str]] = set()
    for leaf in meaningful:
        key = (type(leaf), str(leaf))
        if key not in seen:
            seen.add(key)
            distinct.append(leaf)
    return distinct


def collapse(error: BaseException) -> BaseException:
    """The one error an exception group stands for; ``error`` itself if it is no group.

    Of :func:`distinct_leaves`, a ``KeyboardInterrupt`` or ``SystemExit`` wins (someone asked to
    stop), else the first. The others are never lost silently: each is named in a note on the
    error returned (PEP 678; printed with its traceback and by the CLI). A group of nothing but
    cancellations comes back as it is.
    """
    if not isinstance(error, BaseExceptionGroup):
        return error
    leaves = distinct_leaves(error)
    if all(_is_cancellation(leaf) for leaf in leaves):
        return error
    chosen = next((leaf for leaf in leaves if not isinstance(leaf, Exception)), leaves[0])
    notes = getattr(chosen, "__notes__", [])
    for other in leaves:
        note = f"also raised alongside it: {type(other).__name__}: {other}"
        if other is not chosen and note not in notes:
            chosen.add_note(note)
    return chosen


@contextmanager
def collapsing() -> Iterator[None]:
    """Raise an exception group escaping the block as :func:`collapse` makes it.

    The error keeps its own ``__cause__`` (the SQLite error under a store's error); the group
    it came out of is not printed as its context.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        chosen = collapse(group)
        if chosen is group:
            raise
        raise chosen from chosen.__cause__


def _is_cancellation(error: BaseException) -> bool:
    if isinstance(error, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(error, trio.Cancelled)
