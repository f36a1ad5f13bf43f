"""The record kinds the projection of a source interprets, and what their payloads hold.

A source may send records of any kind (``model.call``, ``gen_ai.execute_tool``, ...): they are
kept, chained and exported as they are. Four kinds shape the trajectory an episode projects to,
so their payloads are checked when they are imported — a malformed one refuses the import
rather than failing a projection later:

- ``episode.started``: what ran (``environment``, ``scenario_id``) and who took part
  (``participants``: name → implementation);
- ``episode.ended``: how it ended (``status``: completed, failed, stopped or interrupted,
  ``reason``, ``error``), optionally with ``participants`` and the ``turns`` completed;
- ``score``: a verifier's verdict (``scorer``: its name and version, ``metrics``, ``passed``,
  ``cites``: the positions of the records it rests on);
- ``capture.failed``: the source says it lost something (``detail``, ``lost``: how many).

Payloads are objects; unknown fields are allowed (newer sources stay importable).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from envharness.records import ErrorInfo
from envharness.store.sources import CAPTURE_FAILED

__all__ = [
    "EPISODE_ENDED",
    "EPISODE_STARTED",
    "SCORE",
    "CaptureFailed",
    "EndStatus",
    "EpisodeEnded",
    "EpisodeStarted",
    "SourceScore",
    "check_payload",
    "decode_shaping",
]

EPISODE_STARTED = "episode.started"
EPISODE_ENDED = "episode.ended"
SCORE = "score"

EndStatus = Literal["completed", "failed", "stopped", "interrupted"]


class _Payload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    pass


class EpisodeStarted(_Payload, frozen=True):
    environment: str | None = None
    """``name@version`` of what the agent ran against, when the source knows it."""
    scenario_id: str | None = None
    participants: dict[str, str] = {}
    """Participant name → the implementation (agent, model) that played it."""


class EpisodeEnded(_Payload, frozen=True):
    status: EndStatus
    reason: str | None = None
    error: ErrorInfo | None = None
    participants: dict[str, str] = {}
    turns: int | None = None


class SourceScore(_Payload, frozen=True):
    scorer: str
    """The verifier's name and version, e.g. ``exact-match@1.2``."""
    metrics: dict[str, float | None] = {}
    passed: bool | None = None
    cites: tuple[int, ...] = ()
    """Positions (in the source's chain) of the records the score rests on."""


class CaptureFailed(_Payload, frozen=True):
    detail: str
    lost: int | None = None


_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    EPISODE_STARTED: msgspec.json.Decoder(EpisodeStarted),
    EPISODE_ENDED: msgspec.json.Decoder(EpisodeEnded),
    SCORE: msgspec.json.Decoder(SourceScore),
    CAPTURE_FAILED: msgspec.json.Decoder(CaptureFailed),
}

_HINTS = {
    EPISODE_ENDED: f"; status is one of {', '.join(get_args(EndStatus))}",
    SCORE: "; a score needs scorer (its name@version), metrics, passed and cites are optional",
    CAPTURE_FAILED: "; a capture failure needs a detail (what was lost)",
}


def check_payload(kind: str, payload: bytes) -> str | None:
    """What is wrong with the payload of a record of ``kind`` (``None``: nothing)."""
    decoder = _decoders.get(kind)
    if decoder is None:
        return None
    try:
        decoder.decode(payload)
    except msgspec.ValidationError as exc:
        return (
            f"the payload of a {kind!r} record is malformed: {exc}{_HINTS.get(kind, '')} "
            "(docs/imports.md, 'Kinds')"
        )
    except msgspec.DecodeError as exc:
        return f"the payload of a {kind!r} record is not JSON: {exc}"
    return None


def decode_shaping(
    kind: str, payload: bytes
) -> EpisodeStarted | EpisodeEnded | SourceScore | CaptureFailed | None:
    """The typed payload of a kind that shapes the trajectory; ``None`` for any other kind."""
    decoder = _decoders.get(kind)
    return None if decoder is None else decoder.decode(payload)
