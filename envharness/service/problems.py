"""The one exception a handler raises to answer with an error, and how store errors map to it.

Handlers never build error responses themselves: they raise :class:`HTTPProblem`, and the
routing layer renders it as JSON (``Problem``) for the API or as a page for the viewer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from envharness.errors import ConfigurationError, EnvharnessError, NotFoundError
from envharness.store.sources import SourceConflictError, SourceImportError
from envharness.trajectories import AdmissionError, TrajectoryError

__all__ = ["HTTPProblem", "from_error", "not_found", "trajectory_problem", "trajectory_problems"]


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


def trajectory_problem(error: EnvharnessError) -> HTTPProblem:
    """The answer to an error of the trajectory layer or of an import.

    Evidence that no longer matches its binding, or a snapshot stored under another schema, is
    a conflict with what is stored (409); a refused dataset or import is a bad body (422), an
    import that contradicts what a source holds is a conflict (409).
    """
    if isinstance(error, AdmissionError | ConfigurationError):
        return HTTPProblem(422, str(error), parameter="body")
    if isinstance(error, SourceConflictError):
        return HTTPProblem(409, str(error), parameter="body")
    if isinstance(error, SourceImportError):
        return HTTPProblem(422, str(error), parameter="body")
    if isinstance(error, TrajectoryError):
        return HTTPProblem(409, str(error))
    return from_error(error)


@contextmanager
def trajectory_problems(kind: type[EnvharnessError] = TrajectoryError) -> Iterator[None]:
    """An error of ``kind`` raised inside answers as :func:`trajectory_problem` says: what
    every handler of trajectories, snapshots, datasets and imports does with the errors of the
    functions it calls."""
    try:
        yield
    except kind as error:
        raise trajectory_problem(error) from None
