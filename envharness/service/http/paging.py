"""Pages of a JSON listing: ``after`` names the last item of the previous page, ``limit`` how
many come next.

Every listing that pages by key — sessions, experiments, trajectories, snapshots, datasets,
harness versions, optimizer runs — pages with :func:`page_of` (or :func:`start_after`, when the
items are projected lazily), so an ``after`` that is not in the listing is the same 422
everywhere, and ``next_after`` is ``null`` exactly on the last page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, TypeVar

import msgspec

from envharness.service.problems import HTTPProblem

__all__ = ["ListQuery", "page_of", "start_after"]

_T = TypeVar("_T")


class ListQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    after: Annotated[
        str | None, msgspec.Meta(description="The `next_after` of the previous page.")
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Items per page.")] = 100


def start_after(keys: Sequence[str], after: str | None, *, member: str) -> int:
    """Where the page after the item keyed ``after`` starts; 422 when ``after`` is not one of
    ``keys`` (``member`` says what it should have been: "a session of this listing")."""
    if after is None:
        return 0
    if after not in keys:
        raise HTTPProblem(
            422, f"query parameter 'after': {after!r} is not {member}", parameter="after"
        )
    return keys.index(after) + 1


def page_of(
    items: Sequence[_T],
    key: Callable[[_T], str],
    after: str | None,
    limit: int,
    *,
    member: str = "in this listing",
) -> tuple[list[_T], str | None]:
    """``limit`` items after the one keyed ``after``, and the key to pass for the next page
    (``None`` on the last)."""
    keys = [key(item) for item in items]
    start = start_after(keys, after, member=member)
    page = list(items[start : start + limit])
    more = start + limit < len(items)
    return page, keys[start + len(page) - 1] if more and page else None
