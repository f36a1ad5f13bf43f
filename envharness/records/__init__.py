"""Evidence records: typed payloads, the envelope, canonical bytes and the hash chain."""

from envharness.records.envelope import (
    Record,
    RecordRow,
    SessionChain,
    canonical,
    decode_payload,
    decode_record,
    digest_of,
    encode_record,
    utc_now_text,
)
from envharness.records.ids import new_id
from envharness.records.payloads import *  # noqa: F403
from envharness.records.payloads import __all__ as _payload_names

__all__ = [
    "Record",
    "RecordRow",
    "SessionChain",
    "canonical",
    "decode_payload",
    "decode_record",
    "digest_of",
    "encode_record",
    "new_id",
    "utc_now_text",
    *_payload_names,
]
