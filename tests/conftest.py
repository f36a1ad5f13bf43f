"""Shared fixtures. Every async test runs on both backends (anyio's own pytest plugin); a
blocking call on an event loop fails its test (``tests/_blocking.py``).

The suite runs in parallel under pytest-xdist (``tools/dev.py test``): each worker is a process of
its own with its own temporary directory (``tmp_path_factory``), so session-scoped fixtures,
stores and ports (always port 0) are per worker. The thread checks below run in every worker; a
worker's finding reaches the controller, which fails the run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import _blocking, _engines


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store directory that does not exist yet (opening it creates it)."""
    return tmp_path / "store"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[_engines.PostgresServer]:
    """A real PostgreSQL server on loopback, started once per test process when a test first
    asks for it (``tests/_engines.py``); its tests carry the ``postgres`` marker."""
    try:
        _engines.require_psycopg()
        with _engines.running_postgres() as server:
            yield server
    except _engines.EngineUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[_engines.RayCluster]:
    """A real local Ray cluster (two CPUs, no dashboard), started once per test process when a
    test first asks for it (``tests/_engines.py``); its tests carry the ``ray`` marker."""
    try:
        with _engines.running_ray() as cluster:
            yield cluster
    except _engines.EngineUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


ENGINE_MARKERS = {"postgres_server": "postgres", "ray_cluster": "ray"}
"""A test that uses an engine carries its marker, so ``-m 'not ray'`` deselects it."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_itemcollected(item: pytest.Item) -> None:
    for fixture, marker in ENGINE_MARKERS.items():
        if fixture in getattr(item, "fixturenames", ()):
            item.add_marker(marker)


@pytest.fixture(autouse=True)
def no_blocking_portal_outlives_its_test() -> Iterator[None]:
    """A blocking portal left open keeps a non-daemon thread alive, and the test process then
    never exits (CI would wait out its whole time limit): name the test that leaked it."""
    before = {thread.ident for thread in threading.enumerate()}
    yield
    leaked = []
    for thread in threading.enumerate():
        if thread.ident in before or "portal" not in thread.name:
            continue
        thread.join(timeout=5)
        if thread.is_alive():
            leaked.append(thread.name)
    assert not leaked, f"blocking portal thread(s) left running: {leaked}; close what opened them"


@pytest.fixture(autouse=True)
def no_blocking_call_on_an_event_loop() -> Iterator[None]:
    """A blocking call on an event loop's thread (``tests/_blocking.py`` lists which) fails the
    test, with the stack that made it."""
    earlier = _blocking.take()
    if earlier:  # made between tests: a shared fixture's set-up, or a thread a test left behind
        pytest.fail(_blocking_report(earlier, "before this test (a shared fixture?)"))
    yield
    found = _blocking.take()
    if found:
        pytest.fail(_blocking_report(found, "during this test"))


def _blocking_report(found: list[_blocking.Violation], when: str) -> str:
    calls = "\n".join(str(violation) for violation in found)
    return (
        f"blocking call(s) on an event loop {when}; run them with anyio.to_thread (or use the "
        f"async API):\n{calls}"
    )


def pytest_configure(config: pytest.Config) -> None:
    _blocking.install()
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started with Ctrl-C ignored (a background job of a script, nohup ...): every process a
        # test starts would inherit that, and those it interrupts with SIGINT to check that
        # Ctrl-C stops them cleanly would never stop. (In-process CLI tests restore this as a
        # side effect, so the order tests ran in used to decide it.)
        signal.signal(signal.SIGINT, signal.default_int_handler)


ONE_WORK_UNIT = ("tests/research/",)
"""Folders whose modules xdist hands to one worker together, as if they were one module: those
that load torch, the trainers and SmolLM2 in the test process (~5 s of CPU to import, ~2 s to
load the model) pay that once instead of once on every worker that runs one of them."""

LONGEST_FIRST = (
    "tests/research/",
    "tests/service/test_properties.py",
    "tests/test_examples.py",
    "tests/service/test_browser.py",
    "tests/runtime/executors/test_ray.py",
    "tests/optimizer/test_redteam.py",
    "tests/cli/test_trajectories.py",
    "tests/service/test_trajectory_api.py",
    "tests/optimizer/test_loop.py",
    "tests/cli/test_optimize.py",
    "tests/service/test_api.py",
    "tests/service/test_harness_api.py",
    "tests/store/test_wal.py",
    "tests/service/test_auth.py",
    "tests/test_command_agent.py",
    "tests/cli/test_lifecycle_commands.py",
    "tests/llm/test_openai_compatible.py",
    "tests/optimizer/test_sandbox.py",
)
"""The modules that take longest, longest first (measured with ``--durations`` and per-module
sums of ``--junitxml`` times): a work unit taken up late would end the run alone. A module
missing here (renamed, or new) only falls back to the heuristic below."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker (``tools/dev.py test`` runs ``--dist loadscope``: a module's tests run
    together on one worker, so its module-scoped fixtures are built once), the modules come in
    the order the workers should take them up: the longest known ones first
    (:data:`LONGEST_FIRST`), then modules with module-scoped fixtures (a real model, a browser)
    and slow tests, then the larger before the smaller, so that no slow module is left to end
    the run alone. Each module's own order is kept; a run without xdist keeps the collected
    order."""
    if not hasattr(config, "workerinput"):
        return
    weight: dict[str, tuple[bool, bool, int]] = {}
    for item in items:
        shared, slow, count = weight.get(item.location[0], (False, False, 0))
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        shared = shared or any(chain and chain[-1].scope in ("module", "class") for chain in defs)
        slow = slow or item.get_closest_marker("slow") is not None
        weight[item.location[0]] = (shared, slow, count + 1)

    def order(path: str) -> tuple[int, bool, bool, int]:
        known = next(
            (rank for rank, prefix in enumerate(LONGEST_FIRST) if path.startswith(prefix)),
            len(LONGEST_FIRST),
        )
        shared, slow, count = weight[path]
        return known, not shared, not slow, -count

    items.sort(key=lambda item: order(item.location[0]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's controller, under ``--dist loadscope``: its scheduler, with the modules of each
    folder in :data:`ONE_WORK_UNIT` as one work unit. Other modes keep xdist's own."""
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FoldersAsOneUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for folder in ONE_WORK_UNIT:
                if nodeid.startswith(folder):
                    return folder
            return str(super()._split_scope(nodeid))

    return FoldersAsOneUnit(config, log)


_exit_status: list[int] = []
_stray_threads: list[str] = []
_workers_stray_threads: dict[str, list[str]] = {}


@pytest.hookimpl(trylast=True)  # after the session-scoped fixtures are torn down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A non-daemon thread still running here would make Python wait for it forever after the
    last test — a worker thread started for an event loop that had already ended, say (one
    such leak, from a read finalised at loop shutdown, is tested in tests/store/test_reader.py).
    Threads that are merely on their way out get a moment; any other fails the run by name
    (``pytest_unconfigure`` then ends the process instead of hanging CI until its time limit).
    An xdist worker hands its finding to the controller, which fails the run."""
    _exit_status.append(int(exitstatus))
    _stray_threads.extend(_non_daemon_threads_left())
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reads this when it ends
        workeroutput["stray_threads"] = list(_stray_threads)
        return
    stray = {name: threads for name, threads in _workers_stray_threads.items() if threads}
    if _stray_threads:
        stray["this process"] = list(_stray_threads)
    if stray:
        print(
            f"\nFAILED: non-daemon threads still running after the tests: {stray}; "
            "find what started them (a worker thread of an event loop that had ended?)",
            file=sys.stderr,
        )
        session.exitstatus = int(exitstatus) or 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: a worker ended; keep the threads it found left running."""
    output = getattr(node, "workeroutput", None) or {}
    _workers_stray_threads[str(node.gateway.id)] = list(output.get("stray_threads", []))


def _non_daemon_threads_left() -> list[str]:
    deadline = time.monotonic() + 5
    stray = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            stray.append(thread.name)
    return stray


def pytest_unconfigure(config: pytest.Config) -> None:
    _blocking.uninstall()
    if _stray_threads and _exit_status:  # Python would wait for them forever
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(_exit_status[0] or 1)


@pytest.fixture(scope="session")
def research_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Converted GGUF checkpoints live here for the whole test session, not in the user's HOME.

    Under pytest-xdist the workers share one (beside their own temporary directories): the
    first to need SmolLM2 converts it (~20 s) while the others wait for it instead of
    converting it again on the same two cores (``research.models`` locks the conversion)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = shared / "research-cache"
    cache.mkdir(exist_ok=True)
    before = os.environ.get("ENVHARNESS_RESEARCH_CACHE")
    os.environ["ENVHARNESS_RESEARCH_CACHE"] = str(cache)
    yield cache
    if before is None:
        os.environ.pop("ENVHARNESS_RESEARCH_CACHE", None)
    else:
        os.environ["ENVHARNESS_RESEARCH_CACHE"] = before
