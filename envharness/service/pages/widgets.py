"""Pieces many viewer pages draw alike: heads, tab bars, filter chips, pagers and tables.

Each is built with :func:`~envharness.service.pages.html.html`, so what a page passes in is escaped
unless it is already :class:`~envharness.service.pages.html.Html`. Drawn in one place, a piece has
the same markup on every page — which the stylesheet, ``viewer.js`` and the tests rely on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from envharness.service.pages.html import Html, html, join
from envharness.service.problems import HTTPProblem

__all__ = [
    "StatusListing",
    "chip",
    "detail_head",
    "kv_card",
    "kv_rows",
    "nav_links",
    "page_head",
    "page_slice",
    "pager",
    "status_listing",
    "table",
    "tabs",
]

_CURRENT = Html(' aria-current="page" class="active"')
_NOTHING = Html("<span></span>")


def page_head(title: str, sub: str) -> Html:
    """The head of a destination's page: its title and a line saying what it lists."""
    return html('<div class="page-head"><h1>{t}</h1><p class="sub">{s}</p></div>', t=title, s=sub)


def detail_head(
    crumbs: Sequence[tuple[str, str]], title: str, facts: Iterable[Html], more: str = ""
) -> Html:
    """The head of one thing's page: the way back (``(href, label)`` pairs), its title, its
    facts on one line, and whatever ``more`` the page adds below them."""
    return html(
        '<div class="page-head session-head"><div class="crumbs">{crumbs} /</div><h1>{title}'
        '</h1><p class="facts">{facts}</p>{more}</div>',
        crumbs=join((html('<a href="{h}">{l}</a>', h=h, l=label) for h, label in crumbs), " / "),
        title=title,
        facts=join(facts, " · "),
        more=more,
    )


def nav_links(parts: Iterable[tuple[str, str, str]], active: str) -> Html:
    """A link per ``(key, label, path)``; the one keyed ``active`` is the current page."""
    return join(
        html(
            '<a href="{path}"{current}>{label}</a>',
            path=path,
            label=label,
            current=_CURRENT if key == active else "",
        )
        for key, label, path in parts
    )


def tabs(parts: Iterable[tuple[str, str, str]], active: str) -> Html:
    """The parts of a destination (or of one session) as a tab bar."""
    return html('<nav class="tabs">{links}</nav>', links=nav_links(parts, active))


def chip(label: str, count: int, link: str, active: bool) -> Html:
    """A filter, with how many items it keeps."""
    return html(
        '<a class="chip{active}" href="{link}">{label} <span class="count">{count}</span></a>',
        active=" active" if active else "",
        link=link,
        label=label,
        count=count,
    )


def pager(
    current: int,
    pages: int,
    href: Callable[[int], str],
    *,
    back: str = "← Newer",
    forward: str = "Older →",
) -> Html:
    """Links to the pages before and after ``current`` (``href(n)`` is page ``n``'s URL);
    nothing when there is one page."""
    if pages <= 1:
        return Html("")
    return html(
        '<nav class="pager">{p}<span>page {n} of {pages}</span>{f}</nav>',
        p=html('<a href="{h}">{l}</a>', h=href(current - 1), l=back) if current > 1 else _NOTHING,
        n=current,
        pages=pages,
        f=html('<a href="{h}">{l}</a>', h=href(current + 1), l=forward)
        if current < pages
        else _NOTHING,
    )


def table(head: Html, rows: Iterable[Html], *, css: str = "table") -> Html:
    """A table of ``rows`` under the header cells ``head``."""
    return html(
        '<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>',
        css=css,
        head=head,
        rows=join(rows),
    )


def kv_rows(pairs: Iterable[tuple[str, str]]) -> Html:
    """A row per ``(name, value)``, the name as the row's header."""
    return join(html("<tr><th>{k}</th><td>{v}</td></tr>", k=k, v=v) for k, v in pairs)


def kv_card(title: str, pairs: Iterable[tuple[str, str]], after: str = "") -> Html:
    """A card of named values, and whatever ``after`` says below them."""
    return html(
        '<section class="card"><h2>{title}</h2><table class="table kv-table">{rows}</table>'
        "{after}</section>",
        title=title,
        rows=kv_rows(pairs),
        after=after,
    )


class _Listed(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def created_at(self) -> str: ...


_L = TypeVar("_L", bound=_Listed)
_T = TypeVar("_T")


def page_slice(items: Sequence[_T], page: int, per_page: int, noun: str) -> tuple[list[_T], int]:
    """Page ``page`` (from 1) of ``items``, and how many pages there are; 404 past the last."""
    pages = max(1, -(-len(items) // per_page))
    if page > pages:
        raise HTTPProblem(404, f"there are {pages} page(s) of {noun}, not {page}", parameter="page")
    return list(items[(page - 1) * per_page : page * per_page]), pages


@dataclass(frozen=True, slots=True)
class StatusListing(Generic[_L]):
    """One page of a listing filtered by status, with its filters and its pager."""

    shown: list[_L]
    filters: Html
    pager: Html


def status_listing(
    everything: Sequence[_L], status: str | None, page: int, *, base: str, noun: str, per_page: int
) -> StatusListing[_L]:
    """Page ``page`` of the items at ``base`` that have ``status`` (any, when ``None``), newest
    first; the chips that filter them by status, each counted; 404 past the last page."""
    counts = Counter(item.status for item in everything)
    chosen = [item for item in everything if status in (None, item.status)]
    chosen.sort(key=lambda item: (item.created_at, item.id), reverse=True)
    shown, pages = page_slice(chosen, page, per_page, noun)
    filters = html(
        '<nav class="chips" aria-label="Filter by status">{chips}</nav>',
        chips=join(
            [
                chip("All", len(everything), base, status is None),
                *(chip(s, counts[s], f"{base}?status={s}", status == s) for s in sorted(counts)),
            ]
        ),
    )
    keep = f"status={status}&" if status else ""
    return StatusListing(
        shown=shown,
        filters=filters,
        pager=pager(page, pages, lambda n: f"{base}?{keep}page={n}"),
    )
