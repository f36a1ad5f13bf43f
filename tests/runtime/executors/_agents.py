"""Agents the executor tests share: importable by name, so a pool worker or a Ray worker can
make them from a recipe, and aware of where they run, so that a test can slow a session down
only where it plays remotely (a worker killed after a few turns still holds sessions)."""

from __future__ import annotations

import sys

import anyio

from envharness.fixtures import SyntheticObservation

__all__ = ["IN_A_WORKER", "PacedAgent"]

IN_A_WORKER = any(entry in sys.argv[0] for entry in ("pool_worker", "default_worker"))
"""True in a process a pool (``pool_worker``) or Ray (``default_worker``) started to run
sessions: their entry points, which import the test module to make its agents."""


class PacedAgent:
    """Steps toward zero; in a worker it takes a little while per turn."""

    implementation = "paced-agent@1"

    async def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if IN_A_WORKER:
            await anyio.sleep(0.005)
        return {"value": (observation.total < 0) - (observation.total > 0)}
