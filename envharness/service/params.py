"""Query parameters, validated against a Struct: a bad one is a 422 that names it.

Each endpoint declares its parameters as a frozen Struct; the same Struct drives parsing here
and the parameter list in the OpenAPI document, so the two cannot disagree. A field typed as a
list takes a repeated parameter (``?kind=a&kind=b``); any other field may appear once.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, TypeVar

import msgspec
from starlette.datastructures import QueryParams

from envharness.service.problems import HTTPProblem

__all__ = ["MAX_INTEGER", "NoParameters", "parse_query", "repeated_fields"]

_S = TypeVar("_S", bound=msgspec.Struct)

MAX_INTEGER = 2**63 - 1
"""The largest integer SQLite stores. Every seq, turn or store position a request names is
bounded by it (``le=MAX_INTEGER``): a larger one names nothing and cannot even be a query's
parameter, so it is refused as a bad parameter instead of failing in the store."""
_AT = re.compile(r" - at `\$\.([A-Za-z_]+)[^`]*`$")
_UNKNOWN = re.compile(r"unknown field `([^`]*)`")
_MISSING = re.compile(r"missing required field `([^`]*)`")


class NoParameters(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """For endpoints that take no query parameters (any given is refused)."""


@cache
def repeated_fields(struct: type[msgspec.Struct]) -> frozenset[str]:
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(
        field.encode_name
        for field in info.fields
        if isinstance(_unwrap(field.type), msgspec.inspect.ListType | msgspec.inspect.TupleType)
    )


def _unwrap(kind: msgspec.inspect.Type) -> msgspec.inspect.Type:
    if isinstance(kind, msgspec.inspect.Metadata):
        return _unwrap(kind.type)
    if isinstance(kind, msgspec.inspect.UnionType):
        members = [t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(members) == 1:
            return members[0]
    return kind


def parse_query(params: QueryParams, struct: type[_S]) -> _S:
    repeated = repeated_fields(struct)
    data: dict[str, Any] = {}
    for name in params:
        values = params.getlist(name)
        if name in repeated:
            data[name] = values
        elif len(values) > 1:
            raise HTTPProblem(
                422, f"query parameter {name!r} is given {len(values)} times; give it once",
                parameter=name,
            )  # fmt: skip
        else:
            data[name] = values[0]
    try:
        return msgspec.convert(data, struct, strict=False)
    except msgspec.ValidationError as exc:
        problem = _problem(str(exc))
        allowed = choices(struct).get(problem.parameter or "")
        if allowed and "invalid enum value" in problem.message:
            problem = HTTPProblem(
                422, f"{problem.message}; give one of: {', '.join(allowed)}",
                parameter=problem.parameter,
            )  # fmt: skip
        raise problem from None


@cache
def choices(struct: type[msgspec.Struct]) -> dict[str, tuple[str, ...]]:
    """The values each enumerated parameter allows, in the order they are declared."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    found = {}
    for field in info.fields:
        kind = _unwrap(field.type)
        members = kind.types if isinstance(kind, msgspec.inspect.UnionType) else (kind,)
        values = [
            str(value)
            for member in members
            if isinstance(member, msgspec.inspect.LiteralType)
            for value in member.values
            if value != ""  # "" stands for "any" where a form sends an unchosen option
        ]
        if values:
            found[field.encode_name] = tuple(values)
    return found


def _problem(message: str) -> HTTPProblem:
    if unknown := _UNKNOWN.search(message):
        name = unknown.group(1)
        return HTTPProblem(422, f"unknown query parameter {name!r}", parameter=name)
    if missing := _MISSING.search(message):
        name = missing.group(1)
        return HTTPProblem(422, f"query parameter {name!r} is required", parameter=name)
    if at := _AT.search(message):
        name = at.group(1)
        detail = message[: at.start()]
        detail = detail[0].lower() + detail[1:] if detail else "invalid"
        return HTTPProblem(422, f"query parameter {name!r}: {detail}", parameter=name)
    return HTTPProblem(422, f"bad query parameters: {message}")
