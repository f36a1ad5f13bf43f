"""Agent protocol v1: JSON lines between the host and an external agent program.

The normative spec is ``protocol/README.md`` at the top of the repository; this package is its
reference implementation on the host side: the message types (:mod:`.messages`), byte framing
with bounded memory (:mod:`.framing`), the request/response discipline (:mod:`.channel`), the
exceptions (:mod:`.errors`), the generated JSON Schema (:mod:`.json_schema`), the agent process
(:mod:`.process`) and the conformance kit (:mod:`.conformance`).
"""

from envharness.protocol.channel import AgentChannel, LogCallback
from envharness.protocol.errors import (
    OFFENDING_LIMIT,
    VIOLATION_CODES,
    AgentReportedError,
    ChannelUsageError,
    ProtocolError,
    ProtocolViolationError,
    ViolationCode,
)
from envharness.protocol.framing import (
    DEFAULT_CHUNK_SIZE,
    LineReader,
    MessageReader,
    MessageWriter,
)
from envharness.protocol.json_schema import render_schemas, schema_documents
from envharness.protocol.messages import (
    AGENT_MESSAGE_TYPES,
    CAPABILITIES,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_LOG_MESSAGES,
    HOST_MESSAGE_TYPES,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Act,
    Action,
    ActionCost,
    AgentMessage,
    EnvironmentInfo,
    ErrorMessage,
    Feedback,
    Hello,
    HostMessage,
    Limits,
    LogMessage,
    Ready,
    Restore,
    Restored,
    Shutdown,
    Snapshot,
    State,
    decode_agent_message,
    decode_host_message,
    encode_into,
    encode_message,
    message_type,
)

__all__ = [
    "AGENT_MESSAGE_TYPES",
    "CAPABILITIES",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_LOG_MESSAGES",
    "HOST_MESSAGE_TYPES",
    "OFFENDING_LIMIT",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "VIOLATION_CODES",
    "Act",
    "Action",
    "ActionCost",
    "AgentChannel",
    "AgentMessage",
    "AgentReportedError",
    "ChannelUsageError",
    "EnvironmentInfo",
    "ErrorMessage",
    "Feedback",
    "Hello",
    "HostMessage",
    "Limits",
    "LineReader",
    "LogCallback",
    "LogMessage",
    "MessageReader",
    "MessageWriter",
    "ProtocolError",
    "ProtocolViolationError",
    "Ready",
    "Restore",
    "Restored",
    "Shutdown",
    "Snapshot",
    "State",
    "ViolationCode",
    "decode_agent_message",
    "decode_host_message",
    "encode_into",
    "encode_message",
    "message_type",
    "render_schemas",
    "schema_documents",
]
