"""An opt-in pytest plugin that finds async generators abandoned by the test that abandons
them: ``pytest -p tests._collect_in_loop``.

An async generator left suspended is finalized whenever the garbage collector next runs, and
under trio that finalizer warns, which this suite makes an error: so the test that fails is
whichever one is running then, on a loaded machine now and then, never the one at fault. With
this plugin every async test ends with a collection inside its own event loop (a collection
after the loop has ended finds nothing: trio closes what is left as its run ends), so the
culprit fails, every time, on its ``[trio]`` run. Too slow for every run of the suite: a
collection per test over a large heap.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    test = getattr(item, "obj", None)
    if inspect.iscoroutinefunction(test):
        item.obj = _collecting(test)  # type: ignore[attr-defined]
    yield


def _collecting(
    test: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., Coroutine[Any, Any, None]]:
    @functools.wraps(test)
    async def collected(*args: Any, **kwargs: Any) -> None:
        await test(*args, **kwargs)
        gc.collect()

    return collected
