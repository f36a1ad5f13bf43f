"""The CPU-bound environment ``optimizer_scale.py`` measures: the support desk, with pure-Python
work in every ``resolve`` (the GIL held throughout, as a simulator written in Python would).

A module of its own, not part of the script: an executor's workers import the environment by
name, and a script's own definitions live in ``__main__``, which a worker does not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from envharness.contracts.environment import Resolution
from envharness.demos.support_desk import DeskAction, DeskState, SupportDesk

__all__ = ["WORK", "CpuBoundDesk"]

WORK = 100_000
"""Loop iterations per turn: ~6 ms of one core. A rerun of 32 tickets (~3.5 turns each) then
spends ~0.7 s of a worker's CPU, against the driver's few milliseconds a session: reruns worth
two cores, unlike the plain desk's ~0.1 s reruns, which the driver's own work swamps."""


class CpuBoundDesk(SupportDesk):
    spec = dataclasses.replace(SupportDesk.spec, name="cpu-bound-desk")

    def __init__(self, work: int = WORK) -> None:
        self.work = work

    def resolve(self, state: DeskState, actions: Mapping[str, DeskAction]) -> Resolution:
        value = len(state.done)
        for _ in range(self.work):
            value = (value * 31 + 7) % 1_000_003
        return super().resolve(state, actions)
