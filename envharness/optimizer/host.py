"""The host seam: what the optimizer needs from a harness, as typed Protocols.

The optimizer sits below the API layer, so it never imports ``envharness.api``; it states what
it uses of a harness here, and :class:`~envharness.AsyncEnvironmentHarness` and
:class:`~envharness.EnvironmentHarness` satisfy these Protocols by their shape (mypy checks it
where a harness is passed in; :class:`~envharness.optimizer.HarnessOptimizer` checks it with
``isinstance`` when it is given one):

- :class:`HarnessHost` — an async harness: its store (SQLite or PostgreSQL), whether
  ``async with`` holds the store open, its own hooks, a fresh environment, its writable store,
  and experiments (:class:`ExperimentHost`) over scenarios with the hooks the optimizer gives;
- :class:`BlockingHarnessHost` — a blocking harness: its async harness (``aio``) and ``call``,
  which runs an async function on the harness's portal (inside its open store when it is open).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, ParamSpec, Protocol, Self, TypeVar, runtime_checkable

from envharness.contracts.environment import Environment
from envharness.contracts.scenario import Scenario
from envharness.hooks import HarnessHooks
from envharness.records import ExperimentConfig
from envharness.runtime.executors.seam import Executor
from envharness.runtime.experiment import ExperimentResult
from envharness.store.locate import AnyStore

__all__ = ["BlockingHarnessHost", "ExperimentHost", "HarnessHost"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class ExperimentHost(Protocol):
    """One experiment, validated and ready to run once."""

    @property
    def id(self) -> str:
        """The experiment's id (its sessions' evidence names it)."""
        ...

    @property
    def config(self) -> ExperimentConfig:
        """Its frozen configuration: the optimizer reads the participants it records."""
        ...

    async def run(self) -> ExperimentResult:
        """Run every session; returns once all ended."""
        ...


@runtime_checkable
class HarnessHost(Protocol):
    """An async harness (:class:`~envharness.AsyncEnvironmentHarness`), as the optimizer uses
    it: ``async with`` keeps its store open across the reruns."""

    @property
    def store(self) -> Path | str:
        """The store directory, or the PostgreSQL URL without its password (a run's directory
        defaults to ``<store>/optimizer/<run id>``, or ``./envharness-optimizer/<run id>``)."""
        ...

    @property
    def is_open(self) -> bool:
        """Whether ``async with`` holds the store open."""
        ...

    @property
    def hooks(self) -> HarnessHooks | None:
        """The harness's own hooks: an accepted patch to go on from, or hooks the optimizer
        cannot stack on."""
        ...

    def new_environment(self) -> Environment[Any, Any]:
        """A fresh environment, made and checked as each session's is."""
        ...

    def writable_store(self) -> AbstractAsyncContextManager[AnyStore]:
        """The store the harness writes to (the open one, or opened for the block): the
        optimizer's own records share its one writer."""
        ...

    def experiment(
        self,
        name: str,
        scenarios: Sequence[Scenario[Any]],
        *,
        turns: int,
        trials: int = 1,
        seed: int = 0,
        max_concurrency: int | None = None,
        hooks: HarnessHooks | None = None,
        executor: Executor | None = None,
    ) -> ExperimentHost:
        """``scenarios`` x ``trials`` as sessions under one frozen configuration, with
        ``hooks`` (default: the harness's) around every participant; ``executor`` is where
        the sessions run (``None``: in this process)."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class BlockingHarnessHost(Protocol):
    """A blocking harness (:class:`~envharness.EnvironmentHarness`): its async harness, and a
    way to run the optimizer's async core on its portal."""

    @property
    def aio(self) -> HarnessHost:
        """The async harness it is the blocking face of."""
        ...

    def call(
        self, function: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run ``function(*args, **kwargs)`` on the harness's portal (inside its open store
        when ``with harness`` holds it open) and return its result."""
        ...
