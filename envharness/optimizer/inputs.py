"""What an optimizer run is given, checked before anything is spent.

A run that cannot succeed is refused with a message that says why and what to do, before the
baseline is measured or the engineer is asked: scenario lists that repeat or overlap, an
environment with no success signal, a significance gate no candidate could pass, a resumed run
whose code or inputs differ from those it recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envharness.contracts.environment import Environment
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.optimizer.engineers.contract import Engineer
from envharness.optimizer.stats import sign_test
from envharness.records import OptimizerConfigRef, ParticipantRef

__all__ = [
    "Suites",
    "code_changes",
    "require_a_passable_gate",
    "require_resumable",
    "require_success_signal",
]


@dataclass(frozen=True, slots=True)
class Suites:
    """The scenarios a run measures: the training scenarios (``train``, what candidates are
    judged on), the ``held_out`` split and the ``regression`` suite (gates), pairwise
    disjoint."""

    train: list[Scenario[Any]]
    held_out: list[Scenario[Any]]
    regression: list[Scenario[Any]]

    @classmethod
    def checked(
        cls,
        scenarios: Sequence[Scenario[Any]],
        held_out: Sequence[Scenario[Any]] = (),
        regression: Sequence[Scenario[Any]] = (),
    ) -> Suites:
        """The suites, refused when ``scenarios`` is empty, an id repeats or the suites
        overlap."""
        suites = cls(
            _scenarios(scenarios, "scenarios"),
            _scenarios(held_out, "held_out", empty=True),
            _scenarios(regression, "regression", empty=True),
        )
        owner: dict[str, str] = {}
        for name, group in zip(("scenarios", "held_out", "regression"), suites.all, strict=True):
            for scenario in group:
                if scenario.id in owner:
                    raise ConfigurationError(
                        f"scenario {scenario.id!r} is in both {owner[scenario.id]} and {name}; "
                        "the suites must not overlap"
                    )
                owner[scenario.id] = name
        return suites

    @property
    def all(self) -> tuple[list[Scenario[Any]], list[Scenario[Any]], list[Scenario[Any]]]:
        return (self.train, self.held_out, self.regression)

    def ids(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """Each suite's scenario ids, as the run's configuration records them."""
        train, held, suite = self.all
        return (
            tuple(s.id for s in train),
            tuple(s.id for s in held),
            tuple(s.id for s in suite),
        )


def _scenarios(
    scenarios: Sequence[Scenario[Any]], what: str, *, empty: bool = False
) -> list[Scenario[Any]]:
    found = list(scenarios)
    if not found and not empty:
        raise ConfigurationError(f"{what} is empty; the optimizer needs scenarios to rerun")
    seen: set[str] = set()
    for scenario in found:
        if not isinstance(scenario, Scenario):
            raise ConfigurationError(
                f"{what}: expected Scenario(id=..., input=...), got {type(scenario).__name__}"
            )
        if scenario.id in seen:
            raise ConfigurationError(f"{what}: scenario id {scenario.id!r} appears twice")
        seen.add(scenario.id)
    return found


def require_success_signal(environment: Environment[Any, Any]) -> None:
    """Refuse an environment that cannot say whether a session succeeded (no ``score()``)."""
    if not callable(getattr(environment, "score", None)):
        spec = environment.spec
        raise ConfigurationError(
            f"environment {spec.name}@{spec.version} has no score(), so nothing says whether a "
            "session succeeded; the optimizer needs a success signal: define "
            "score(state, scenario) returning ScoreReport(metrics=..., passed=True/False)"
        )


def require_a_passable_gate(
    train: Sequence[Scenario[Any]], alpha: float | None, candidates: int = 1
) -> None:
    """Refuse a run whose significance gate no candidate could pass: with n scenarios the sign
    test's smallest p-value is 2**-n, however many trials each scenario has.

    This is the floor for one distinct candidate (the gate is ``alpha / m`` for m distinct
    patches, and the engineer may well answer K times with the same patch). With K distinct
    candidates a gain needs at least log2(K / alpha) scenarios; the message says so.
    """
    smallest = sign_test(len(train), 0)
    if alpha is not None and smallest > alpha:
        needed = math.ceil(math.log2(1 / alpha))
        for_all = math.ceil(math.log2(candidates / alpha))
        several = (
            f" ({for_all} for a gain to pass when all {candidates} candidates behave differently: "
            "the gate is alpha / distinct outcomes)"
            if for_all > needed
            else ""
        )
        raise ConfigurationError(
            f"with {len(train)} scenario(s) no candidate could ever be accepted: the sign test's "
            f"smallest p-value is {smallest:.3g} (every scenario improved), over alpha {alpha}; "
            f"give at least {needed} scenarios{several}, or decide by the mean reward alone "
            "with OptimizationConfig(alpha=None) (envharness optimize --alpha 1)"
        )


def require_resumable(
    recorded: OptimizerConfigRef,
    *,
    suites: Suites,
    engineer: Engineer,
    base_digest: str | None,
    environment: Environment[Any, Any],
    participants: dict[str, ParticipantRef],
) -> None:
    """Refuse to resume a run with other scenarios, another engineer or base patch, or other
    code than it recorded: its measurements would not be comparable."""
    if suites.ids() != (recorded.scenarios, recorded.held_out, recorded.regression):
        raise ConfigurationError(
            "resume with the scenarios the run recorded: scenarios "
            f"{list(recorded.scenarios)}, held_out {list(recorded.held_out)}, regression "
            f"{list(recorded.regression)}"
        )
    if engineer.name != recorded.engineer:
        raise ConfigurationError(
            f"the run was recorded with engineer {recorded.engineer!r}, not "
            f"{engineer.name!r}; resume it with the same engineer"
        )
    if base_digest != recorded.base_digest:
        raise ConfigurationError(
            "the run was recorded on another base patch; resume it with the same base_patch"
        )
    changed = code_changes(recorded, environment, participants)
    if changed:
        raise ConfigurationError(
            f"the run was recorded with other code ({'; '.join(changed)}): its measurements "
            "would not be comparable; resume it with the environment and agents it was "
            "recorded with, or start a new run"
        )


def code_changes(
    recorded: OptimizerConfigRef,
    environment: Environment[Any, Any],
    participants: dict[str, ParticipantRef],
) -> list[str]:
    """How the environment and agents about to run differ from those the run recorded."""
    found = []
    was, now = recorded.environment, environment.spec.reference()
    if (was.name, was.version) != (now.name, now.version):
        found.append(f"environment {was.name}@{was.version} is now {now.name}@{now.version}")
    if not recorded.participants:  # recorded before participants were: nothing to compare
        return found
    for name in sorted(recorded.participants.keys() | participants.keys()):
        before, after = recorded.participants.get(name), participants.get(name)
        if before is None:
            found.append(f"participant {name!r} was not in the recorded roster")
        elif after is None:
            found.append(f"participant {name!r} is no longer in the roster")
        elif (before.role, before.implementation) != (after.role, after.implementation):
            found.append(
                f"agent {name!r} was {before.implementation!r} ({before.role}), is now "
                f"{after.implementation!r} ({after.role})"
            )
    return found
