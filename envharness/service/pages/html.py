"""Escaped-by-default HTML: the only way the viewer builds markup.

:func:`html` formats a template with values that are escaped unless they are already
:class:`Html` (markup built the same way). Evidence holds whatever agents and environments
produced — an observation may contain ``<script>`` — so nothing reaches a page unescaped by
accident: raw text has to be *made* Html, and only this module does that.
"""

from __future__ import annotations

import html as _html
import math
from collections.abc import Iterable
from typing import Any

import msgspec

__all__ = ["DASH", "Html", "escape", "html", "join", "json_block", "number", "value"]

DASH = "\u2013"
"""What an empty cell shows (an en dash)."""

INLINE_KEYS = 8
"""Objects with at most this many scalar fields render inline as key/value chips."""
TEXT_LIMIT = 400
"""Characters of a string value shown inline before it is cut."""
LIST_LIMIT = 24
"""Items of a list of scalars shown inline before the rest is counted."""
BLOCK_LIMIT = 4000
"""Characters of a JSON block shown before it is cut (the record page shows it whole)."""

_pretty = msgspec.json.Encoder(order="sorted")


class Html(str):
    """Markup that is safe to insert as is."""

    __slots__ = ()


def escape(text: object) -> Html:
    if isinstance(text, Html):
        return text
    return Html(_html.escape(str(text), quote=True))


def html(template: str, /, **values: object) -> Html:
    """``template.format(**values)`` with every value escaped unless it is :class:`Html`."""
    return Html(template.format(**{name: escape(v) for name, v in values.items()}))


def join(parts: Iterable[Html], separator: str = "") -> Html:
    return Html(escape(separator).join(escape(part) for part in parts))


def json_block(data: Any, *, limit: int | None = BLOCK_LIMIT) -> Html:
    """Pretty JSON in a ``<pre>``; cut at ``limit`` characters with a note saying so."""
    text = msgspec.json.format(_pretty.encode(data), indent=2).decode()
    note = Html("")
    if limit is not None and len(text) > limit:
        note = html('<div class="cut">{n} more characters</div>', n=f"{len(text) - limit:,}")
        text = text[:limit] + "…"
    return html('<pre class="json">{text}</pre>{note}', text=text, note=note)


def value(data: Any, *, limit: int = TEXT_LIMIT) -> Html:
    """A JSON value for a table cell: scalars styled by type, small flat objects as
    key/value chips, anything bigger as a JSON block. ``static/viewer.js`` renders live
    records the same way (``renderValue``)."""
    if data is None or isinstance(data, bool | int | float | str):
        return _scalar(data, limit)
    if isinstance(data, dict) and len(data) <= INLINE_KEYS and all(_flat(v) for v in data.values()):
        if not data:
            return Html('<span class="empty">{}</span>')
        chips = [
            html(
                '<span class="kv"><span class="k">{k}</span>{v}</span>',
                k=key,
                v=_scalar(item, limit) if not isinstance(item, list) else _list(item, limit),
            )
            for key, item in data.items()
        ]
        return html('<span class="kvs">{chips}</span>', chips=join(chips))
    if isinstance(data, list) and _flat(data):
        return _list(data, limit)
    return json_block(data, limit=BLOCK_LIMIT)


def _flat(item: Any) -> bool:
    """A scalar, or a list of scalars (of any length: :func:`_list` shortens it)."""
    if item is None or isinstance(item, bool | int | float | str):
        return True
    return isinstance(item, list) and all(
        i is None or isinstance(i, bool | int | float | str) for i in item
    )


def _list(items: list[Any], limit: int) -> Html:
    inner = join((_scalar(item, limit) for item in items[:LIST_LIMIT]), ", ")
    more = len(items) - LIST_LIMIT
    rest = html('<span class="more">, … {n} more</span>', n=more) if more > 0 else Html("")
    return html('<span class="list">[{inner}{rest}]</span>', inner=inner, rest=rest)


def _scalar(data: Any, limit: int) -> Html:
    if data is None:
        return Html('<span class="null">null</span>')
    if isinstance(data, bool):
        return html('<span class="bool">{v}</span>', v="true" if data else "false")
    if isinstance(data, int | float):
        return html('<span class="num">{v}</span>', v=number(data))
    text = data if len(data) <= limit else data[: limit - 1] + "…"
    return html('<span class="str">{v}</span>', v=text)


def number(data: float | None) -> str:
    """Numbers as people read them: integers without ``.0``, others to 4 significant digits."""
    if data is None:
        return DASH
    if isinstance(data, int) or (math.isfinite(data) and data == int(data) and abs(data) < 1e15):
        return str(int(data))
    return f"{data:.4g}"
