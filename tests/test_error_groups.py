"""``errors.collapse``: a task group's exception group comes out as the one error it stands for."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from envharness.errors import (
    ConfigurationError,
    StoreError,
    collapse,
    collapsing,
    distinct_leaves,
)

FULL = "the store at 'here' failed: database or disk is full"


def test_a_nested_group_of_one_store_error_met_by_many_tasks_is_that_error() -> None:
    first = StoreError(FULL)
    group = ExceptionGroup(
        "outer", [ExceptionGroup("sessions", [first, StoreError(FULL), StoreError(FULL)])]
    )
    assert collapse(group) is first
    assert getattr(first, "__notes__", []) == []  # the same error again is no news


def test_cancellations_beside_the_error_are_how_the_others_stopped_not_why() -> None:
    error = StoreError(FULL)
    group = BaseExceptionGroup("g", [asyncio.CancelledError(), error, asyncio.CancelledError()])
    assert collapse(group) is error
    assert distinct_leaves(group) == [error]


def test_other_errors_are_named_on_the_first_never_lost() -> None:
    first, other = StoreError(FULL), ConfigurationError("no agent 'bob'")
    group = ExceptionGroup("g", [first, ExceptionGroup("inner", [other, StoreError(FULL)])])
    assert collapse(group) is first
    assert first.__notes__ == ["also raised alongside it: ConfigurationError: no agent 'bob'"]
    collapse(group)
    assert len(first.__notes__) == 1  # collapsing twice notes it once


def test_ctrl_c_wins_over_the_errors_beside_it() -> None:
    interrupt = KeyboardInterrupt()
    group = BaseExceptionGroup("g", [StoreError(FULL), interrupt])
    assert collapse(group) is interrupt
    assert interrupt.__notes__ == [f"also raised alongside it: StoreError: {FULL}"]


def test_a_group_of_cancellations_only_is_left_as_it_is() -> None:
    group = BaseExceptionGroup("g", [asyncio.CancelledError(), asyncio.CancelledError()])
    assert collapse(group) is group
    plain = StoreError(FULL)
    assert collapse(plain) is plain


@pytest.mark.anyio
async def test_collapsing_raises_the_error_itself_with_its_own_cause() -> None:
    async def fail() -> None:
        try:
            raise OSError(28, "No space left on device")
        except OSError as exc:
            raise StoreError(FULL) from exc

    async def sessions() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(fail)
            group.start_soon(fail)

    async def experiment() -> None:
        with collapsing():
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.sleep, 10)  # cancelled by the failure
                group.start_soon(sessions)

    with pytest.raises(StoreError, match="disk is full") as caught:
        await experiment()
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__suppress_context__  # the group is not printed as its context
