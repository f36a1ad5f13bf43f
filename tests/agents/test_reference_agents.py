"""The reference agents in ``agents/`` pass every conformance case and play the synthetic policy.

They are what an agent author copies, and what the ``CommandAgent`` tests run, so each of them
must be exactly right: the whole suite, on both async backends.
"""

from __future__ import annotations

import subprocess
import sys

import anyio
import msgspec
import pytest

from envharness.fixtures import SyntheticAgent, SyntheticObservation
from envharness.protocol import AgentChannel, EnvironmentInfo, Hello, LogMessage
from envharness.protocol.conformance import CASES, ConformanceSettings, check_agent
from tests.agents._support import reference_agents

pytestmark = pytest.mark.slow

SETTINGS = ConformanceSettings(reply_timeout=10.0, shutdown_grace=5.0, terminate_grace=1.0)


@pytest.mark.anyio
@pytest.mark.parametrize("argv", reference_agents())
async def test_a_reference_agent_passes_every_case(argv: list[str]) -> None:
    report = await check_agent(argv, settings=SETTINGS)

    failures = [f"{r.name}: {r.detail} {r.stderr}" for r in report.results if r.status != "passed"]
    assert failures == []
    assert [result.name for result in report.results] == [case.name for case in CASES]
    assert report.ok
    assert report.implementation is not None
    assert report.implementation.startswith("echo-agent-")
    assert report.capabilities == ("snapshot",)


@pytest.mark.anyio
@pytest.mark.parametrize("argv", reference_agents())
async def test_a_reference_agent_decides_like_the_synthetic_agent(argv: list[str]) -> None:
    """Same observations, same actions as ``envharness.fixtures.SyntheticAgent``: the agents
    are drop-in participants for ``SyntheticEnvironment``."""
    observations = [
        SyntheticObservation(total=0, turn=0, target=3, my_contributions=[]),
        SyntheticObservation(total=5, turn=1, target=3, my_contributions=[1]),
        SyntheticObservation(total=3, turn=2, target=3, my_contributions=[1, -1]),
        SyntheticObservation(total=-4, turn=3, target=None, my_contributions=[]),
        SyntheticObservation(total=12, turn=4, target=None, my_contributions=[]),
        SyntheticObservation(total=0, turn=5, target=None, my_contributions=[]),
        SyntheticObservation(total=-9, turn=6, target=-12, my_contributions=[]),
    ]
    logs: list[LogMessage] = []
    hello = Hello(
        protocols=(1,),
        session="ses_policy",
        participant="alice",
        role="agent",
        seed=0,
        environment=EnvironmentInfo(
            name="synthetic-total", version="1", turn_order="simultaneous", roles=("agent",)
        ),
    )
    async with await anyio.open_process(argv, start_new_session=True) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        channel = AgentChannel(process.stdout, process.stdin, on_log=logs.append)
        with anyio.fail_after(10):
            await channel.handshake(hello)
            for turn, observation in enumerate(observations, start=1):
                action = await channel.act(turn, msgspec.to_builtins(observation))
                assert action.action == SyntheticAgent().act(observation), observation
            await channel.shutdown()
            assert await process.wait() == 0
    assert logs[-1].message == f"bye after {len(observations)} acts"


def test_the_python_agent_is_checked_where_envharness_cannot_be_imported() -> None:
    """The flags its tests run it with really hide envharness (and every installed package)."""
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import envharness"], capture_output=True, check=False
    )
    assert probe.returncode != 0
    assert b"ModuleNotFoundError" in probe.stderr
