"""Reading an engineer's answer: ``<think>…</think><patch>…</patch>``.

The ``<think>`` block is the engineer's reasoning (kept, never executed; optional, so an answer
without one still parses). The ``<patch>`` block must appear exactly once, outside ``<think>``,
and hold the patch JSON (``docs/patches.md``), optionally inside a Markdown code fence. Text
around the blocks is ignored. Everything wrong is a :class:`PatchParseError` naming the problem —
a missing or unclosed tag, JSON that does not parse (with its line and column inside the patch),
an unknown operation or hook, empty code — in words an engineer can act on.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from envharness.optimizer.patches.errors import PatchParseError
from envharness.optimizer.patches.patch import MAX_CODE_HOOKS, HarnessPatch

__all__ = ["MAX_ANSWER_CHARS", "ParsedAnswer", "parse_answer"]

MAX_ANSWER_CHARS = 1_000_000
"""Longer answers are refused before anything is searched in them."""

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```\Z", re.DOTALL)


class ParsedAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """An engineer's answer, read: its reasoning and its patch."""

    think: str
    patch: HarnessPatch


def parse_answer(text: str) -> ParsedAnswer:
    """Parse ``<think>…</think><patch>…</patch>``; raises :class:`PatchParseError`."""
    if not isinstance(text, str):
        raise PatchParseError(f"an engineer's answer is text, not {type(text).__name__}")
    if len(text) > MAX_ANSWER_CHARS:
        raise PatchParseError(
            f"the answer is {len(text)} characters, over the {MAX_ANSWER_CHARS}-character limit"
        )
    think, rest = _take_think(text)
    body = _take_patch(rest)
    value = _json(body)
    patch = HarnessPatch.from_dict(value)
    if not patch.hooks:
        raise PatchParseError(
            'the patch adds no hooks; add at least one {"op": "add_code_hook", ...} operation'
        )
    if len(patch.hooks) > MAX_CODE_HOOKS:
        raise PatchParseError(
            f"the patch adds {len(patch.hooks)} hooks, over the limit of {MAX_CODE_HOOKS} "
            "per answer"
        )
    return ParsedAnswer(think=think, patch=patch)


def _take_think(text: str) -> tuple[str, str]:
    """The reasoning and the answer without it (so a ``<patch>`` mentioned while thinking is not
    taken for the patch)."""
    opened = text.find("<think>")
    if opened < 0:
        return "", text
    match = _THINK.search(text, opened)
    if match is None:
        raise PatchParseError(
            "the <think> tag is never closed; write <think>…</think> before <patch>…</patch>"
        )
    return match.group(1).strip(), text[: match.start()] + text[match.end() :]


def _take_patch(text: str) -> str:
    opened = text.count("<patch>")
    closed = text.count("</patch>")
    if opened == 0:
        raise PatchParseError(
            "the answer has no <patch>…</patch> block; answer <think>your reasoning</think>"
            '<patch>[{"op": "add_code_hook", ...}]</patch>'
        )
    if opened > 1:
        raise PatchParseError(f"the answer has {opened} <patch> blocks; give exactly one")
    start = text.index("<patch>") + len("<patch>")
    end = text.find("</patch>", start)
    if end < 0 or closed != 1:
        raise PatchParseError("the <patch> tag is never closed; end the patch with </patch>")
    body = text[start:end].strip()
    fenced = _FENCE.match(body)
    if fenced is not None:
        body = fenced.group(1).strip()
    if not body:
        raise PatchParseError("the <patch> block is empty; put the patch JSON inside it")
    return body


def _json(body: str) -> Any:
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        lines = body.splitlines() or [""]
        shown = lines[min(exc.lineno, len(lines)) - 1].strip()
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise PatchParseError(
            f"the patch is not valid JSON: {exc.msg.removesuffix(' at')} at line {exc.lineno}, "
            f"column {exc.colno} of the patch ({shown!r}); hook code goes in a JSON string, "
            "newlines written \\n"
        ) from None
    except RecursionError:
        raise PatchParseError("the patch JSON nests too deeply") from None
