"""The CPU-bound environment ``scale.py`` measures: the synthetic total, with pure-Python work
in every ``resolve`` (the GIL held throughout, as a simulator written in Python would).

A module of its own, not part of ``scale.py``: an executor's workers import the environment by
name, and a script's own definitions live in ``__main__``, which a worker does not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from envharness.contracts.environment import Resolution
from envharness.fixtures import SyntheticAction, SyntheticEnvironment, SyntheticState

__all__ = ["WORK", "CpuBoundEnvironment"]

WORK = 20_000
"""Loop iterations per turn: 1.1-1.5 ms of one core (the loop alone: 1.15 ms). A pool worker
then spends ~6 ms of CPU on a five-turn session against the driver's ~1.5: heavy enough for
two workers to reach 1.6x one on two cores, which a lighter environment would not be (scale.py
prints the bound the driver's share sets)."""


class CpuBoundEnvironment(SyntheticEnvironment):
    spec = dataclasses.replace(SyntheticEnvironment.spec, name="cpu-bound-total")

    def __init__(self, work: int = WORK) -> None:
        self.work = work

    def resolve(self, state: SyntheticState, actions: Mapping[str, SyntheticAction]) -> Resolution:
        value = state.noise
        for _ in range(self.work):
            value = (value * 31 + 7) % 1_000_003
        return super().resolve(state, actions)
