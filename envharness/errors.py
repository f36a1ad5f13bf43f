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
    │   ├── StoreBusyError          another process held the write lock for too long
    │   ├── ChainConflictError      a record's position in its session chain is already taken
    │   └── NameTakenError          a record claims a unique name (harness-vN) already taken
    ├── NotFoundError               a session (or other named thing) is not in the store
    ├── SourceImportError           an import was refused, nothing of it stored (store.sources)
    │   ├── SourceFormatError       a line is not a source record this envharness reads
    │   ├── SourceChainError        a hash, a ``prev`` link or a position does not hold
    │   └── SourceConflictError     a position already holds a record with another hash
    ├── ProtocolError               talking to an external agent failed (envharness.protocol)
    │   ├── ProtocolViolationError  it sent what the protocol forbids; bytes kept
    │   ├── AgentReportedError      it answered with an ``error`` message
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
    └── ServiceError                the local service answered 4xx/5xx (envharness.client)

Failures *inside* a session (an agent that raises, times out or returns garbage) are not raised
to the caller: they are recorded as evidence and the session ends ``failed``.
"""

from __future__ import annotations

__all__ = [
    "ChainConflictError",
    "ConfigurationError",
    "EnvharnessError",
    "NameTakenError",
    "NotFoundError",
    "ScenarioInputError",
    "StoreBusyError",
    "StoreError",
    "StoreLayoutError",
    "StoreVersionError",
]


class EnvharnessError(Exception):
    """Root of every error envharness raises on purpose."""


class ConfigurationError(EnvharnessError):
    """The caller set something up wrongly; the message names the setting and the fix."""


class ScenarioInputError(ConfigurationError):
    """A scenario's input does not validate against the environment's input type."""


class StoreError(EnvharnessError):
    """The evidence store cannot be opened, read or written."""


class StoreLayoutError(StoreError):
    """The store path exists but is not a usable store directory."""


class StoreVersionError(StoreError):
    """The store's schema is newer than this program understands."""


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
