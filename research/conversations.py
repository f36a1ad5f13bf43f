"""Training rows in the conversational formats TRL's trainers take, read and checked.

Two shapes are accepted, one JSON object per line:

- prompt-completion: ``{"prompt": [messages…], "completion": [{"role": "assistant", …}]}``
  (what ``build_sft_dataset.py`` writes: the loss falls on the patch answer only);
- whole conversations: ``{"messages": [messages…]}`` (what ``envharness dataset export``
  writes for trajectories), where the loss falls on every assistant turn's tokens TRL trains.

Each message is ``{"role": "system"|"user"|"assistant", "content": str}``. Other keys on a row
(``packet_digest``, ``batch``, …) travel along as metadata. A bad row is refused with its line
number and what is wrong, before a model is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DataError", "read_rows", "texts_of"]

ROLES = frozenset({"system", "user", "assistant"})


class DataError(ValueError):
    """A training file that cannot be used; the message names the file, line and problem."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of ``path``, checked (see the module doc)."""
    if not path.is_file():
        raise DataError(
            f"training data {path} does not exist; build it with research/build_sft_dataset.py"
        )
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: not JSON ({exc.msg})") from None
            rows.append(check_row(row, f"{path}:{number}"))
    return rows


def check_row(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object")
    if "messages" in row:
        _messages(row["messages"], f"{where}: messages")
        if not any(m["role"] == "assistant" for m in row["messages"]):
            raise DataError(f"{where}: messages has no assistant turn to learn from")
        return row
    if "prompt" in row and "completion" in row:
        _messages(row["prompt"], f"{where}: prompt")
        _messages(row["completion"], f"{where}: completion")
        if [m["role"] for m in row["completion"]] != ["assistant"]:
            raise DataError(f"{where}: completion must be exactly one assistant message")
        return row
    raise DataError(
        f"{where}: a row needs either 'messages' or both 'prompt' and 'completion' "
        "(the conversational formats TRL's SFTTrainer takes)"
    )


def check_prompt_rows(rows: Sequence[dict[str, Any]], where: str) -> None:
    """GRPO rows: a ``prompt`` (messages) each, the rest is metadata for the reward."""
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or "prompt" not in row:
            raise DataError(f"{where} row {number}: a GRPO row needs a 'prompt' (messages)")
        _messages(row["prompt"], f"{where} row {number}: prompt")


def _messages(value: Any, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where} must be a non-empty list of messages")
    for index, message in enumerate(value):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise DataError(
                f"{where}[{index}] must be {{'role': system|user|assistant, 'content': str}}"
            )


def texts_of(rows: Sequence[dict[str, Any]]) -> Iterator[str]:
    """Every message text of ``rows`` (what the tiny model's tokenizer is trained on)."""
    for row in rows:
        for key in ("prompt", "completion", "messages"):
            for message in row.get(key) or ():
                yield message["content"]
