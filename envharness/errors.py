"""The one exception tree envharness raises.

Every error a user can cause or meet derives from :class:`EnvharnessError`, so a caller (and the
CLI edge) can catch one class and print a message that names what was wrong and how to fix it::

    EnvharnessError
    ├── ConfigurationError        a harness, environment, agent or scenario is set up wrongly
    │   ├── ScenarioInputError    a scenario's input does not match the environment's input type
    │   └── ManifestError         an experiment manifest is invalid (envharness.manifest)
    ├── StoreError                the evidence store cannot be used
    │   ├── StoreLayoutError      the path is not a store directory (a file, unreadable, ...)
    │   ├── StoreVersionError     the store was written by a newer envharness
    │   ├── StoreBusyError        another process held the write lock for too long
    │   ├── ChainConflictError    a record's position in its session chain is already taken
    │   └── NameTakenError        a record claims a unique name (harness-vN) already taken
    ├── NotFoundError             a session (or other named thing) is not in the store
    ├── ProtocolError             talking to an external agent failed (envharness.protocol)
    │   ├── ProtocolViolationError    it sent what the protocol forbids; bytes kept
    │   ├── AgentReportedError        it answered with an ``error`` message
    │   └── ChannelUsageError         the host used a channel out of order (a bug)
    ├── ProviderError             a model call failed for good, after retries (envharness.llm)
    └── ServiceError              the local service answered 4xx/5xx (envharness.client)

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
