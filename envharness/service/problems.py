"""The one exception a handler raises to answer with an error, and how store errors map to it.

Handlers never build error responses themselves: they raise :class:`HTTPProblem`, and the
routing layer renders it as JSON (``Problem``) for the API or as a page for the viewer.
"""

from __future__ import annotations

from collections.abc import Mapping

from envharness.errors import ConfigurationError, EnvharnessError, NotFoundError

__all__ = ["HTTPProblem", "from_error", "not_found"]


class HTTPProblem(Exception):
    """An answer other than success: a status, a sentence, optionally the bad parameter."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        parameter: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.parameter = parameter
        self.headers = dict(headers or {})


def not_found(what: str) -> HTTPProblem:
    """The same 404 whether a thing is missing or hidden from this token: a participant must
    not learn that another participant's session exists."""
    return HTTPProblem(404, f"no {what} here (or this token may not see it)")


def from_error(error: EnvharnessError) -> HTTPProblem:
    if isinstance(error, NotFoundError):
        return HTTPProblem(404, str(error))
    if isinstance(error, ConfigurationError):
        return HTTPProblem(422, str(error))
    return HTTPProblem(503, f"the store cannot answer: {error}")
