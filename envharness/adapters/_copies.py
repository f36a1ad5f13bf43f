"""One adapter object, one copy per session, each with its own live instance and replayer.

An adapter is passed as the harness's ``environment=`` and is called once per session. The
live third-party instance it drives cannot be shared between sessions, so each call gives a
copy bound to the same blueprint (what every copy shares: how to make the instance, and the
spec), holding its own instance and its own :class:`~envharness.adapters.replay.Replayer`
(step 4 of :mod:`envharness.adapters.replay`). The Gymnasium, PettingZoo and TextWorld
adapters are such objects; each writes ``_reset`` and ``_step`` for its package.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, Self, TypeVar

import anyio

from envharness.adapters.replay import Replayer
from envharness.contracts.environment import EnvironmentSpec
from envharness.errors import ConfigurationError

__all__ = ["Blueprint", "PerSessionCopy", "check_invalid_actions"]


class Blueprint(Protocol):
    """What every copy of one adapter shares."""

    @property
    def spec(self) -> EnvironmentSpec: ...

    def make(self) -> Any:
        """A new live instance (one per copy, made when the copy first needs it)."""


BlueprintT = TypeVar("BlueprintT", bound=Blueprint)


class PerSessionCopy(Generic[BlueprintT]):
    """An adapter whose every call gives a fresh copy (the harness makes one per session).

    A subclass's ``__init__`` builds its blueprint and calls :meth:`_bind`; it writes
    ``_reset`` and ``_step`` as :class:`~envharness.adapters.replay.Replayer` takes them, and
    ``_checked`` when some of a step's result may differ between two faithful replays.
    """

    spec: EnvironmentSpec
    _blueprint: BlueprintT
    _env: Any
    _replayer: Replayer[Any]

    def _bind(self, blueprint: BlueprintT) -> None:
        self._blueprint = blueprint
        self.spec = blueprint.spec
        self._env = None
        """The live instance, once made."""
        self._replayer = self._new_replayer()

    def __call__(self) -> Self:
        """A fresh copy with its own live environment: the harness makes one per session."""
        fresh = type(self).__new__(type(self))
        fresh._bind(self._blueprint)
        return fresh

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.name.partition(':')[2]!r})"

    @property
    def replayer(self) -> Replayer[Any]:
        """This copy's replayer (how often it rebuilt its environment: tests, benches)."""
        return self._replayer

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Close the live instance when the session ends (the runtime holds each session in
        this): a game process, a render window or open files go with the session, not with
        the garbage collector. Closing runs in a worker thread, shielded, as some take long."""
        try:
            yield
        finally:
            live, self._env = self._env, None
            self._replayer = self._new_replayer()
            close = getattr(live, "close", None)
            if callable(close):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(close)

    def intervene(self, state: Any, intervention: Mapping[str, Any]) -> Any:
        """Only ``{}`` (a branch from the same state): the state is a seed and the moves."""
        if intervention:
            raise ConfigurationError(
                f"{self.spec.name} takes no interventions (got {intervention!r}): its "
                "state is a seed and the moves made, with nothing to change from outside; "
                "branch with intervention={} and let other agents or hooks play the branch"
            )
        return state

    # -- the live instance ---------------------------------------------------------------------

    def _new_replayer(self) -> Replayer[Any]:
        return Replayer(self.spec.name, self._reset, self._step, checked=self._checked)

    def _live_env(self) -> Any:
        """The live instance, made on first use and reset (never remade) after that."""
        if self._env is None:
            self._env = self._blueprint.make()
        return self._env

    def _reset(self, seed: int, setup: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def _step(self, live: Any, move: Any) -> Any:
        raise NotImplementedError

    def _checked(self, result: Any) -> Any:
        """What of a step's result the replay's checks cover: all of it unless overridden."""
        return result


def check_invalid_actions(value: object) -> None:
    """``invalid_actions`` checked before the adapter makes anything (which may take long)."""
    if value not in ("block", "fail"):
        raise ConfigurationError(f"invalid_actions must be 'block' or 'fail', not {value!r}")
