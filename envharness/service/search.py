"""Finding sessions: the search, filters and sort that the Sessions page and ``GET
/api/sessions`` share.

Every session considered is one the caller may see (``Access.sessions``), and the facts
searched (roster, environment, verdict) are read only for those and only as the caller may see
them, so neither a match nor a count says anything about a session the caller may not see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from envharness.records import Status
from envharness.service.access import Access
from envharness.service.problems import HTTPProblem
from envharness.store import SessionInfo
from envharness.store.facts import SessionFacts

__all__ = [
    "ORDERS",
    "PASSED",
    "SORTS",
    "STATUSES",
    "Found",
    "Order",
    "Passed",
    "Sort",
    "SessionSearch",
    "find_sessions",
    "one_of",
]

Passed = Literal["yes", "no", "none"]
Sort = Literal["created", "updated", "turns"]
Order = Literal["desc", "asc"]

STATUSES: tuple[str, ...] = get_args(Status)
SORTS: tuple[str, ...] = get_args(Sort)
ORDERS: tuple[str, ...] = get_args(Order)
PASSED: tuple[str, ...] = get_args(Passed)


@dataclass(frozen=True, slots=True)
class SessionSearch:
    """What to keep and in which order; an empty string keeps everything."""

    q: str = ""
    status: str = ""
    experiment: str = ""
    passed: str = ""
    sort: str = "created"
    order: str = "desc"


@dataclass(frozen=True, slots=True)
class Found:
    """A listed session, with what the list shows and searches beside its index entry."""

    info: SessionInfo
    facts: SessionFacts | None
    experiment_name: str | None


def one_of(name: str, given: str, allowed: Sequence[str]) -> None:
    """Refuse ``given`` unless it is empty or one of ``allowed``, naming them."""
    if given and given not in allowed:
        raise HTTPProblem(
            422,
            f"query parameter {name!r} is {given!r}; give one of: {', '.join(allowed)}",
            parameter=name,
        )


def _check(search: SessionSearch, access: Access) -> None:
    one_of("status", search.status, STATUSES)
    one_of("passed", search.passed, PASSED)
    one_of("sort", search.sort, SORTS)
    one_of("order", search.order, ORDERS)
    if search.passed and not access.sees_everything:
        raise HTTPProblem(
            422,
            "query parameter 'passed': scores are about every participant, so a participant's "
            "token cannot filter by them; leave 'passed' out",
            parameter="passed",
        )


async def find_sessions(
    search: SessionSearch, access: Access, *, facts_wanted: bool = True
) -> tuple[list[Found], list[Found]]:
    """Every session the caller may see, and those ``search`` keeps, in the order it asks for.

    Without ``facts_wanted`` the rosters and verdicts are read only when the search needs them
    (a plain JSON listing does not). A 422 problem for a value not among the allowed ones.
    """
    _check(search, access)
    experiments = {experiment.id: experiment.name for experiment in await access.experiments()}
    infos = await access.sessions()
    facts: dict[str, SessionFacts] = {}
    if facts_wanted or search.q or search.passed:
        facts = await access.service.store.session_facts(among=await access.visible_sessions())
    everything = [
        Found(
            info=info,
            facts=_as_seen(facts.get(info.id), access),
            experiment_name=experiments.get(info.experiment_id or ""),
        )
        for info in infos
    ]
    words = search.q.casefold().split()
    kept = [
        found
        for found in everything
        if search.status in ("", found.info.status)
        and search.experiment in ("", found.info.experiment_id)
        and _verdict_kept(search.passed, found.facts)
        and all(_matches(word, found) for word in words)
    ]
    kept.sort(key=_sort_key(search.sort), reverse=search.order == "desc")
    return everything, kept


def _as_seen(facts: SessionFacts | None, access: Access) -> SessionFacts | None:
    """A participant sees its own name in the roster, no environment and no verdict: the
    configuration and the scores are about everyone (as on the session's own pages)."""
    if facts is None or access.sees_everything:
        return facts
    own = access.principal.participant or ""
    return SessionFacts(
        environment=None,
        participants=tuple(name for name in facts.participants if name == own),
        scored=False,
        passed=None,
        metrics={},
    )


def _verdict_kept(passed: str, facts: SessionFacts | None) -> bool:
    if not passed:
        return True
    verdict = None if facts is None else facts.passed
    return {"yes": verdict is True, "no": verdict is False, "none": verdict is None}[passed]


def _matches(word: str, found: Found) -> bool:
    info, facts = found.info, found.facts
    if info.id.casefold().startswith(word):
        return True
    fields = [info.scenario_id, info.experiment_id or "", found.experiment_name or ""]
    if facts is not None:
        fields.extend(facts.participants)
        fields.append(facts.environment or "")
    return any(word in field.casefold() for field in fields)


def _sort_key(sort: str) -> Callable[[Found], tuple[object, ...]]:
    if sort == "updated":
        return lambda found: (found.info.updated_at, found.info.id)
    if sort == "turns":
        return lambda found: (found.info.turns_completed, found.info.created_at, found.info.id)
    return lambda found: (found.info.created_at, found.info.id)
