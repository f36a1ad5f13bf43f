"""Property-based: schemathesis draws requests from ``/openapi.json`` and sends them to the
app through its ASGI interface (no network), as admin, viewer and participant.

No answer may be a server error, and every answer must be what the document says of it:
a documented status, content type and headers, a body that matches the schema, 401 without
a valid credential. Half of the well-formed requests name things that exist (the quickstart's
sessions and experiment, its participants, a token), so they reach past the 404s; operations on
harness versions and optimizer runs go to a store the optimizer wrote two versions into.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import schemathesis
import schemathesis.python.asgi as schemathesis_asgi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import CheckFunction, GenerationMode
from schemathesis.auths import AuthStorage
from schemathesis.specs.openapi.checks import positive_data_acceptance

from envharness.service.app import ENDPOINTS
from envharness.service.http.openapi import openapi_document
from envharness.service.pages.assets import _ASSETS
from tests.service._support import BASE, World

DOCUMENT = openapi_document(ENDPOINTS, cookie_name="envharness-8765")
LABELS = sorted(
    f"{method.upper()} {path}" for path, methods in DOCUMENT["paths"].items() for method in methods
)
ROLES = ("admin", "viewer", "alice")
EXAMPLES = 60
"""Per operation (and per run: no example database): about 30 s in all on two cores."""

SEMANTIC_REJECTIONS = {
    "GET /api/sessions": "`after` must be a session of the listing (422)",
    "GET /api/experiments": "`after` must be an experiment of the listing (422)",
    "POST /api/tokens": "a participant token needs `participant`, others must not have one (422)",
    "POST /login": "a code is valid only if `serve` issued it (400)",
    "GET /api/trajectories": "`after` must be a trajectory of the listing (422)",
    "GET /api/snapshots": "`after` must be a snapshot of the listing (422)",
    "GET /api/datasets": "`after` must be a dataset of the listing (422)",
    "POST /api/snapshots": "the selection must name sessions or an experiment, and an "
    "entitlement must give its basis (422)",
    "POST /api/datasets": "every trajectory of the snapshots must be complete, terminal, "
    "training-entitled and rewarded, and a taken name holds other content (422)",
    "POST /api/imports": "the body must be import lines that chain from the source's head (422)",
    "GET /api/harness/versions": "`after` must be a version of the listing (422)",
    "GET /api/optimizer/runs": "`after` must be a run of the listing (422)",
    "GET /sessions": "`experiment` must be one the caller may see, and a participant's token "
    "cannot filter by `passed` (422)",
}
"""Operations where a request the schema admits can still be refused, and why: JSON Schema
cannot say "an id from this listing". For these, a 4xx to a schema-valid request is allowed."""


schemathesis.serializer.alias("application/x-ndjson", "text/plain")
"""The import body is JSON lines: text, which schemathesis can generate as it generates
``text/plain`` (it has no serializer of its own for ``application/x-ndjson``)."""

HARNESS_TAGS = ("/harness", "/optimizer")
"""Operations on harness versions and optimizer runs: they run against a store that has some."""


class Bearer:
    """A schemathesis auth provider: every generated request carries this token."""

    def __init__(self, secret: str) -> None:
        self.secret = secret

    def get(self, case: Any, context: Any) -> str:
        return self.secret

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture(autouse=True)
def schemathesis_portal_closed() -> Iterator[None]:
    """schemathesis runs ASGI apps on one process-wide blocking portal and closes it in an
    ``atexit`` handler, which Python runs only after it has waited for every non-daemon thread:
    left open, the portal's thread keeps the test process from ever exiting. Close it after
    each test (the next request starts a new one)."""
    yield
    shutdown = getattr(schemathesis_asgi, "_shutdown", None)
    if shutdown is not None:  # a version without it is caught by the conftest's portal check
        shutdown()


def _existing(world: World) -> dict[str, list[Any]]:
    """Values that name real things, by parameter name."""

    async def read() -> dict[str, list[Any]]:
        sessions = [info.id for info in await world.service.store.sessions()]
        experiments = [info.id for info in await world.service.store.experiments()]
        spare = await world.service.tokens.issue("viewer", label="for the property test")
        versions = [info.version for info in await world.service.store.harness_versions()]
        runs = [info.id for info in await world.service.store.optimizer_runs()]
        return {
            "session_id": sessions, "left": sessions, "right": sessions,
            "experiment_id": experiments, "experiment": experiments,
            "participant": ["alice", "bob", "carol", "dana"],
            "token_id": [spare.info.id], "name": sorted(_ASSETS), "seq": list(range(40)),
            "version": versions or ["harness-v1"], "old": versions or ["harness-v1"],
            "new": versions or ["harness-v1"], "run_id": runs or ["opt_missing"],
        }  # fmt: skip

    return anyio.run(read)


@pytest.mark.parametrize("label", LABELS)
def test_the_api_answers_as_documented(request: pytest.FixtureRequest, label: str) -> None:
    harnesses = any(tag in label.split(" ", 1)[1] for tag in HARNESS_TAGS)
    world: World = request.getfixturevalue("harness_world" if harnesses else "world")
    assert world.app.state.openapi == DOCUMENT
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    schema.app = world.app  # requests go to the app itself, never to a socket
    schema.config.update(base_url=BASE)
    # A body over the size limit is refused before it is parsed: 413 rejects invalid data too.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    operation = schema.find_operation_by_label(label)
    assert operation is not None
    existing = _existing(world)
    cursors = {
        "GET /api/sessions": "session_id", "GET /api/experiments": "experiment_id",
        "GET /api/harness/versions": "version", "GET /api/optimizer/runs": "run_id",
    }  # fmt: skip
    if label in cursors:
        existing["after"] = existing[cursors[label]]  # elsewhere `after` is a seq or position
    strategies = {
        (role, mode): operation.as_strategy(
            mode, auth_storage=AuthStorage([Bearer(world.secrets[role])])
        )
        for role in ROLES
        for mode in GenerationMode
    }
    excluded: list[CheckFunction] = (
        [positive_data_acceptance] if label in SEMANTIC_REJECTIONS else []
    )

    # derandomize: every run draws the same examples, so CI cannot pass and fail by chance.
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        role = data.draw(st.sampled_from(ROLES), label="role")
        mode = data.draw(st.sampled_from(GenerationMode), label="mode")
        case = data.draw(strategies[role, mode], label="case")
        if mode is GenerationMode.POSITIVE and data.draw(st.booleans(), label="existing"):
            for where in (case.path_parameters, case.query):
                for name in list(where or ()):
                    if name in existing:
                        where[name] = data.draw(st.sampled_from(existing[name]), label=name)
        response = case.call()
        case.validate_response(response, excluded_checks=excluded)

    check()
