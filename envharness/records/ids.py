"""Identifiers that sort by creation time and say what they name (``ses_…``, ``exp_…``)."""

from __future__ import annotations

import secrets
import time

__all__ = ["new_id"]


def new_id(prefix: str) -> str:
    """``prefix_`` + 12 hex digits of milliseconds since the epoch + 10 random hex digits."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(5)}"
