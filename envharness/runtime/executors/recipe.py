"""The recipe a worker rebuilds sessions from, pickled once per experiment.

A session plan holds live objects (an environment, agents with processes, a hook sandbox), so it
cannot travel; what travels is what makes it: the harness's factories and options, pickled. A
function or class pickles *by name* — the worker imports it — so a lambda, a function defined
inside another, or anything defined in the script being run (``__main__``, which a worker does
not run) cannot travel. That is refused here, naming the part, before anything is recorded.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any

from envharness.errors import ConfigurationError

__all__ = ["REOPENED", "PickledRecipe", "Reopen", "pickled_recipe", "unpickled_recipe"]

_FIX = (
    "define it at module level in an importable module (not a lambda, not a function inside "
    "another, not in the script being run), or run in process (no executor)"
)


REOPENED = "__reopened_in_worker__"
"""The method by which an object of a recipe says it travels as a way to re-make it: a
zero-argument callable (picklable) returning an async context manager that opens a fresh
equivalent in the worker — a hook sandbox, say, whose processes belong to the driver. The
worker opens each one for the experiment and puts it where the original was."""

Reopen = Callable[[], AbstractAsyncContextManager[Any]]


@dataclass(frozen=True, slots=True)
class PickledRecipe:
    """A recipe as it travels: its pickle, and the pickle of the :data:`Reopen` callables the
    worker opens first (the recipe names them by their place in that list)."""

    recipe: bytes
    reopened: bytes


class _Unsendable(Exception):
    pass


class _RecipePickler(pickle.Pickler):
    """A pickler that refuses what a worker could not import back, and sends what reopens in
    a worker as the way to reopen it."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.reopened: list[Reopen] = []
        self._plain: set[type] = {type}
        """Types whose objects travel as themselves: asked once per type, since the pickler
        asks for every object (a recipe holds every scenario of the experiment)."""

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if kind in self._plain:
            return None
        if isinstance(obj, type) or getattr(kind, REOPENED, None) is None:
            self._plain.add(kind)
            return None
        self.reopened.append(getattr(obj, REOPENED)())
        return len(self.reopened) - 1

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")):
            module = getattr(obj, "__module__", None)
            if module == "__main__":
                raise _Unsendable(
                    f"{obj.__qualname__} is defined in the script being run (__main__), which "
                    "a worker process does not import"
                )
        return NotImplemented


class _RecipeUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], reopened: Sequence[Any]) -> None:
        super().__init__(file)
        self._reopened = reopened

    def persistent_load(self, pid: Any) -> Any:
        return self._reopened[pid]


def _dumps(value: object) -> PickledRecipe:
    buffer = io.BytesIO()
    pickler = _RecipePickler(buffer)
    try:
        pickler.dump(value)
        reopened = pickle.dumps(pickler.reopened, protocol=pickle.HIGHEST_PROTOCOL)
    except _Unsendable:
        raise
    except Exception as exc:  # pickle raises PicklingError, TypeError, AttributeError ...
        raise _Unsendable(f"{type(exc).__name__}: {exc}") from exc
    return PickledRecipe(buffer.getvalue(), reopened)


def pickled_recipe(
    recipe: object, parts: Sequence[tuple[str, object]], where: str
) -> PickledRecipe:
    """``recipe`` pickled for a worker; refused, naming the first of ``parts`` (the user's
    factories, by what they are: ``"agent 'alice'"``) that cannot travel to ``where``."""
    try:
        return _dumps(recipe)
    except _Unsendable as whole:
        for name, part in parts:
            try:
                _dumps(part)
            except _Unsendable as why:
                shown = getattr(part, "__qualname__", type(part).__qualname__)
                raise ConfigurationError(
                    f"{name} ({shown}) cannot be sent to a {where} worker: {why}; {_FIX}"
                ) from None
        raise ConfigurationError(
            f"the experiment's recipe cannot be sent to a {where} worker: {whole}; {_FIX}"
        ) from None


@asynccontextmanager
async def unpickled_recipe(pickled: PickledRecipe) -> AsyncIterator[Any]:
    """The recipe, in a worker, with what reopens there opened for the block."""
    reopen: list[Reopen] = pickle.loads(pickled.reopened)
    async with AsyncExitStack() as stack:
        reopened = [await stack.enter_async_context(make()) for make in reopen]
        yield _RecipeUnpickler(io.BytesIO(pickled.recipe), reopened).load()
