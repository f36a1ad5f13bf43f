"""Naming TOML keys in errors: which key a msgspec error is about, and on which line it is.

Used by :mod:`envharness.manifest`, so that an invalid manifest gets an error that names the
key and the line — ``FILE:LINE: KEY: problem`` — rather than a msgspec path.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from typing import Any, TypeAlias

import msgspec

__all__ = [
    "KeyLines",
    "KeyPath",
    "did_you_mean",
    "dotted",
    "in_toml_words",
    "key_parts",
    "parse_validation",
    "toml_type",
    "unknown_key",
]

KeyPath: TypeAlias = tuple[str | int, ...]
"""A key's place in the document: table names and array indexes, outermost first."""


# -- msgspec errors, unknown keys --------------------------------------------------------------

_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_STEP = re.compile(r"\.(?P<name>[^.\[]+)|\[(?P<index>\d+)\]|\[\.\.\.\]")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")
_TYPE_NAMES = {
    "object": "table",
    "str": "string",
    "int": "integer",
    "bool": "boolean",
    "array": "array",
    "float": "float",
}


def parse_validation(message: str) -> tuple[str, KeyPath, str | None]:
    """msgspec's ``"Expected `int`, got `str` - at `$.a[0].b`"`` as (problem, path, missing)."""
    matched = _AT.match(message)
    assert matched is not None  # the pattern matches any text
    problem, path_text = matched["problem"], matched["path"] or ""
    path: list[str | int] = []
    for step in _STEP.finditer(path_text):
        if step["name"] is not None:
            path.append(step["name"])
        elif step["index"] is not None:
            path.append(int(step["index"]))
        else:  # a dict key msgspec does not name: the enclosing key is as close as it gets
            break
    missing = _MISSING.match(problem)
    if missing is not None:
        return problem, tuple(path), missing["name"]
    return in_toml_words(problem), tuple(path), None


def in_toml_words(problem: str) -> str:
    def word(found: re.Match[str]) -> str:
        names = [_TYPE_NAMES.get(part.strip(), part.strip()) for part in found[1].split("|")]
        return " or ".join(name for name in names if name != "null") or found[0]

    text = re.sub(r"`([^`]+)`", word, problem)
    return text[:1].lower() + text[1:]


def unknown_key(value: Any, schema: Any, path: KeyPath) -> tuple[KeyPath, list[str]] | None:
    """The first key in ``value`` that ``schema`` does not define, with the keys it does."""
    info = schema if isinstance(schema, msgspec.inspect.Type) else msgspec.inspect.type_info(schema)
    if isinstance(info, msgspec.inspect.UnionType):
        for member in info.types:
            found = unknown_key(value, member, path)
            if found is not None:
                return found
        return None
    if isinstance(info, msgspec.inspect.StructType) and isinstance(value, dict):
        fields = {f.encode_name: f.type for f in info.fields}
        for key in value:
            if key not in fields:
                return (*path, key), list(fields)
        for key, inner in value.items():
            found = unknown_key(inner, fields[key], (*path, key))
            if found is not None:
                return found
    elif isinstance(info, msgspec.inspect.DictType) and isinstance(value, dict):
        for key, inner in value.items():
            found = unknown_key(inner, info.value_type, (*path, key))
            if found is not None:
                return found
    elif isinstance(info, msgspec.inspect.ListType) and isinstance(value, list):
        for index, inner in enumerate(value):
            found = unknown_key(inner, info.item_type, (*path, index))
            if found is not None:
                return found
    return None


def did_you_mean(name: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def toml_type(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def dotted(path: KeyPath) -> str:
    """``agents.alice.command``, ``scenarios.items[1].id``, quoting keys as TOML would."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if _BARE.match(part) else json.dumps(part)
            text += f".{name}" if text else name
    return text


# -- where keys are ----------------------------------------------------------------------------

_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED_KEY = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED_KEY})\s*\]")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED_KEY})\s*=")
_PART = re.compile(_KEY_PART)


class KeyLines:
    """The line on which each key of a TOML text is defined, found by scanning its table
    headers and ``key =`` lines (arrays of tables are numbered as tomllib numbers them).

    Good enough for the common layouts; a key it cannot place (inside a multi-line inline
    array, say) is placed at its nearest enclosing key that it can.
    """

    def __init__(self, text: str) -> None:
        self._lines: dict[KeyPath, int] = {}
        arrays: dict[KeyPath, int] = {}
        table: KeyPath = ()
        open_string: str | None = None
        for number, line in enumerate(text.splitlines(), 1):
            if open_string is not None:
                if line.count(open_string) % 2 == 1:
                    open_string = None
                continue
            header = _HEADER.match(line)
            assignment = None if header else _ASSIGNMENT.match(line)
            if header is not None:
                path = key_parts(header[2])
                placed: list[str | int] = []
                for depth, part in enumerate(path):
                    placed.append(part)
                    prefix = path[: depth + 1]
                    is_last = depth == len(path) - 1
                    if prefix in arrays and not (is_last and header[1] == "[["):
                        placed.append(arrays[prefix] - 1)
                if header[1] == "[[":
                    arrays[path] = arrays.get(path, 0) + 1
                    placed.append(arrays[path] - 1)
                table = tuple(placed)
                self._note(table, number)
            elif assignment is not None:
                self._note((*table, *key_parts(assignment[1])), number)
            for quote in ('"""', "'''"):
                if line.count(quote) % 2 == 1:
                    open_string = quote
                    break

    def _note(self, path: KeyPath, number: int) -> None:
        for depth in range(1, len(path) + 1):
            self._lines.setdefault(path[:depth], number)

    def line_of(self, path: KeyPath) -> int | None:
        """The key's line, else its nearest placed enclosing key's, else ``None``."""
        for depth in range(len(path), 0, -1):
            line = self._lines.get(path[:depth])
            if line is not None:
                return line
        return None


def key_parts(text: str) -> tuple[str, ...]:
    parts = []
    for part in _PART.findall(text):
        if part.startswith('"'):
            parts.append(json.loads(part))
        elif part.startswith("'"):
            parts.append(part[1:-1])
        else:
            parts.append(part)
    return tuple(parts)
