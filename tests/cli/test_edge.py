"""The CLI's async edge on both backends: the quickstart writer and Ctrl-C as cancellation."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from envharness.cli.edge import interruptible
from envharness.cli.quickstart import write_quickstart
from envharness.errors import NotFoundError

pytestmark = pytest.mark.anyio


async def test_write_quickstart(store_path: Path) -> None:
    summary = await write_quickstart(store_path, turns=3)

    assert len(summary.sessions) == 14
    assert summary.grouped == 10
    assert summary.records > 14 * 5
    assert summary.blocked > 0
    assert summary.findings > 0
    assert summary.showcase.startswith("ses_")
    branch = summary.branch
    assert branch is not None
    assert [s.id for s in summary.sessions][-1] == branch.child
    assert (branch.checkpoint_turn, branch.turns) == (3, 5)


async def test_interruptible_returns_the_result_and_raises_errors_as_themselves() -> None:
    async def answer() -> int:
        return 42

    async def fail() -> int:
        raise NotFoundError("no session 'x'")

    assert await interruptible(answer) == 42
    with pytest.raises(NotFoundError, match="no session 'x'"):
        await interruptible(fail)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_ctrl_c_cancels_the_work_and_lets_its_cleanup_finish() -> None:
    cleaned_up = []

    async def work() -> str:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await anyio.sleep(10)
            return "finished"
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # like the runtime's final records
                cleaned_up.append(True)

    with anyio.fail_after(5):
        assert await interruptible(work) is None
    assert cleaned_up == [True]
