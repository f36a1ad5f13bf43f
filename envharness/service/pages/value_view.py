"""A nested JSON value as a key/value table: what an observation, action or outcome says,
with every field name in view.

A JSON box cut at a few thousand characters hides whichever fields come late; a table keeps
every name visible and shortens only the values: lists past :data:`INLINE_ITEMS` and strings
past :data:`STRING_LIMIT` say how much more there is, and nesting past :data:`DEPTH` shows a
short JSON line. The whole value stays one click away as JSON (``<details>``), as the text
views do (:mod:`.text_view`). Everything goes through :func:`~.html.html`, so an
environment's ``<script>`` is text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from envharness.service.pages.html import Html, html, join, json_block, value

__all__ = [
    "DEPTH",
    "FIELD_LIMIT",
    "INLINE_ITEMS",
    "ROW_LIMIT",
    "STRING_LIMIT",
    "needs_table",
    "value_table",
]

DEPTH = 4
"""Levels of nested tables before a value is shown as a short JSON line."""
INLINE_ITEMS = 8
"""Items of a list shown before the rest is counted."""
FIELD_LIMIT = 500
"""Fields of one object shown before the rest is counted: high, since names are the point."""
ROW_LIMIT = 20
"""Items of a list of objects or lists shown before the rest is counted."""
STRING_LIMIT = 200
"""Characters of a string shown before the rest is counted."""

_compact = msgspec.json.Encoder(order="sorted")


def needs_table(data: Any) -> bool:
    """Whether :func:`~.html.value` would fall back to a JSON box for ``data``."""
    return isinstance(data, dict | list) and value(data).startswith('<pre class="json">')


def value_table(data: Any) -> Html:
    """``data`` as nested key/value tables, with its whole JSON behind a toggle."""
    return html(
        '<div class="kv-value">{table}<details class="as-json"><summary>JSON</summary>'
        "{json}</details></div>",
        table=_item(data, 0),
        json=json_block(data),
    )


def _item(data: Any, depth: int) -> Html:
    if isinstance(data, dict):
        if not data:
            return Html('<span class="empty">{}</span>')
        if depth >= DEPTH:
            return _short_json(data)
        return _table(list(data.items()), depth, FIELD_LIMIT)
    if isinstance(data, list):
        if all(not isinstance(item, dict | list) for item in data):
            return _inline(data)
        if depth >= DEPTH:
            return _short_json(data)
        rows = [(f"[{i}]", item) for i, item in enumerate(data[:ROW_LIMIT])]
        return _table(rows, depth, ROW_LIMIT, len(data))
    return _scalar(data)


def _table(rows: list[tuple[Any, Any]], depth: int, limit: int, total: int | None = None) -> Html:
    shown = rows[:limit]
    more = (total if total is not None else len(rows)) - len(shown)
    body = join(
        html(
            '<tr><th scope="row" class="kv-key">{k}</th><td>{v}</td></tr>',
            k=key,
            v=_item(item, depth + 1),
        )
        for key, item in shown
    )
    note = Html("")
    if more > 0:
        note = html('<tr><td colspan="2" class="kv-more">… {n} more</td></tr>', n=f"{more:,}")
    return html('<table class="kv-table"><tbody>{body}{note}</tbody></table>', body=body,
                note=note)  # fmt: skip


def _inline(items: list[Any]) -> Html:
    inner = join((_scalar(item) for item in items[:INLINE_ITEMS]), ", ")
    more = len(items) - INLINE_ITEMS
    rest = html('<span class="kv-more">, … {n} more</span>', n=f"{more:,}") if more > 0 else ""
    return html('<span class="list">[{inner}{rest}]</span>', inner=inner, rest=rest)


def _scalar(data: Any) -> Html:
    if isinstance(data, str) and len(data) > STRING_LIMIT:
        return html(
            '<span class="str">{v}…</span><span class="kv-more"> {n} more characters</span>',
            v=data[:STRING_LIMIT],
            n=f"{len(data) - STRING_LIMIT:,}",
        )
    return value(data, limit=STRING_LIMIT + 1)


def _short_json(data: Any) -> Html:
    text = _compact.encode(data).decode()
    if len(text) > STRING_LIMIT:
        return html(
            '<code class="kv-json">{t}…</code><span class="kv-more"> {n} more characters</span>',
            t=text[:STRING_LIMIT],
            n=f"{len(text) - STRING_LIMIT:,}",
        )
    return html('<code class="kv-json">{t}</code>', t=text)
