"""Text with ANSI colours as viewer markup: a ``<pre class="textview">`` of styled spans.

The colours are classes (``ansi-fg1``, ``ansi-bg12``, ``ansi-bold``), never inline styles:
the viewer's Content-Security-Policy admits no style attribute. A 256-colour or RGB colour
is shown as the nearest of the 16 basic ones, which ``static/viewer.css`` defines. The text
itself goes through :func:`~envharness.service.pages.html.html` like every other value, so an
environment's ``<script>`` is text here too; escape sequences never reach the page
(:mod:`envharness._ansi` parses them out). ``static/viewer.js`` draws live records the same way.
"""

from __future__ import annotations

from envharness._ansi import Style, nearest_basic, runs
from envharness.service.pages.html import Html, html, join

__all__ = ["TEXT_VIEW_LIMIT", "style_classes", "text_view"]

TEXT_VIEW_LIMIT = 8000
"""Characters of a text view shown on the Turns page (the record page shows it whole)."""


def text_view(text: str, *, limit: int | None = TEXT_VIEW_LIMIT, css: str = "textview") -> Html:
    """``text`` drawn with its colours, cut at ``limit`` visible characters with a note."""
    parts: list[Html] = []
    shown = 0
    total = 0
    for part, style in runs(text):
        total += len(part)
        if limit is not None and shown + len(part) > limit:
            part = part[: max(limit - shown, 0)]
        if not part:
            continue
        shown += len(part)
        classes = style_classes(style)
        if classes:
            parts.append(html('<span class="{c}">{t}</span>', c=classes, t=part))
        else:
            parts.append(html("{t}", t=part))
    note = Html("")
    if total > shown:
        note = html('<div class="cut">{n} more characters</div>', n=f"{total - shown:,}")
    return html('<pre class="{css}">{body}</pre>{note}', css=css, body=join(parts), note=note)


def style_classes(style: Style) -> str:
    """The classes that draw ``style``; inverse video swaps the colours (a default colour
    swaps to the text's own background or foreground)."""
    fg, bg = style.fg, style.bg
    names = []
    if style.inverse:
        fg, bg = bg, fg
        names.append("ansi-inverse")
    if fg is not None:
        names.append(f"ansi-fg{nearest_basic(fg)}")
    if bg is not None:
        names.append(f"ansi-bg{nearest_basic(bg)}")
    for flag in ("bold", "dim", "italic", "underline"):
        if getattr(style, flag):
            names.append(f"ansi-{flag}")
    return " ".join(names)
