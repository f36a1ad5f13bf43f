"""The host seam: both harnesses are what the optimizer needs, anything else is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness import AsyncEnvironmentHarness, EnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk
from envharness.errors import ConfigurationError
from envharness.optimizer import HarnessOptimizer, ScriptedEngineer
from envharness.optimizer.host import BlockingHarnessHost, HarnessHost
from tests.optimizer._loops import LOOK_UP_FIRST


def test_both_harnesses_are_hosts(tmp_path: Path) -> None:
    blocking = EnvironmentHarness(
        tmp_path / "store", environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    assert isinstance(blocking, BlockingHarnessHost)
    assert isinstance(blocking.aio, HarnessHost)
    assert isinstance(blocking.aio, AsyncEnvironmentHarness)
    assert not isinstance(blocking, HarnessHost)
    assert not isinstance(blocking.aio, BlockingHarnessHost)


@pytest.mark.parametrize("wrong", [object(), "store", Path("store")])
def test_anything_else_is_refused_by_name(wrong: object) -> None:
    with pytest.raises(
        ConfigurationError,
        match=(
            "HarnessOptimizer needs an EnvironmentHarness or AsyncEnvironmentHarness, "
            f"not {type(wrong).__name__}"
        ),
    ):
        HarnessOptimizer(wrong, ScriptedEngineer([LOOK_UP_FIRST]))  # type: ignore[arg-type]
