"""Turning a rerun experiment's evidence into a measurement: a score per scenario, and why.

A scenario's value is its sessions' mean score (pass = 1, else 0; or a chosen metric). Who is to
blame for a bad session is read from the evidence, never guessed:

- a session in which a hook of the patch failed (raised, overran a budget, returned garbage,
  rewrote to an inadmissible action) counts as a **failure of the patch** — value 0, whatever
  the session did afterwards: a losing patch must not turn its negative reward into zero by
  crashing (a failed hook degrades to "no intervention", which is the reference's behaviour);
- a hook call the sandbox itself could not run (``SandboxInfrastructureError``) makes the whole
  measurement an **infrastructure** failure: it says nothing about the patch, so it is not used
  to judge it (a resumed run measures it again);
- a session that failed for its own reasons (the agent, the environment) is a plain failure,
  as it would be at baseline.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from envharness.optimizer.engineers.evidence import SessionTrace
from envharness.records import ErrorInfo, HookCalled, OptimizerMeasured

__all__ = [
    "INFRASTRUCTURE_ERRORS",
    "Measurement",
    "crashed",
    "fold_traces",
    "is_patch_failure",
    "outcome_vector",
    "subset",
    "unmeasured",
]

INFRASTRUCTURE_ERRORS = frozenset({"SandboxInfrastructureError"})
"""Error types of a ``hook`` record that the patch cannot have caused."""


def is_patch_failure(hook: HookCalled) -> bool:
    return hook.error is not None and hook.error.type not in INFRASTRUCTURE_ERRORS


def crashed(failures: Mapping[str, str], metric: str | None) -> frozenset[str]:
    """The scenarios that may gain nothing over the reference, because the patch's own code
    failed there (a measurement's ``failures``) — when optimizing a ``metric``.

    A failed session's value is 0. Scoring pass/fail, 0 is the floor and that is enough; a
    metric can be negative (an episode's return), where 0 would turn a crash into a gain.
    """
    if metric is None:
        return frozenset()
    return frozenset(scenario for scenario, why in failures.items() if why == "patch")


def unmeasured(result: OptimizerMeasured) -> bool:
    """The rerun says nothing about the patch (the experiment or the sandbox failed)."""
    return result.error is not None or "infrastructure" in result.failures.values()


def outcome_vector(
    result: OptimizerMeasured, scenario_ids: Sequence[str], metric: str | None
) -> Hashable:
    """A rerun's behaviour on ``scenario_ids``, as the significance gate sees it: each
    scenario's value and whether the patch's own code failed there (which caps its reward when
    optimizing a ``metric``). Two candidates with the same vector get the same sign test
    against the same reference: selecting among them is one test, not two."""
    failed = crashed(result.failures, metric)
    return tuple((result.values.get(s), s in failed) for s in scenario_ids)


@dataclass(slots=True)
class Measurement:
    """What one rerun measured, per scenario (scenario id → value)."""

    values: dict[str, float | None] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    hooks: dict[str, int] = field(default_factory=dict)
    hook_errors: int = 0
    tokens: int = 0
    cut: int = 0
    """Sessions that ended by the turn limit rather than by the environment."""
    error: ErrorInfo | None = None

    @property
    def infrastructure(self) -> bool:
        return self.error is not None or "infrastructure" in self.failures.values()


def fold_traces(
    traces: Sequence[SessionTrace], scenario_ids: Sequence[str], metric: str | None
) -> Measurement:
    """One measurement from an experiment's sessions (``scenario_ids`` in their order)."""
    measurement = Measurement()
    per_scenario: dict[str, list[float]] = {}
    for trace in traces:
        patch_failed = False
        for hook in trace.hooks:
            if hook.effect is not None and hook.error is None:
                name = f"{hook.hook}:{hook.effect}"
                measurement.hooks[name] = measurement.hooks.get(name, 0) + 1
            if hook.error is not None:
                measurement.hook_errors += 1
                if is_patch_failure(hook):
                    patch_failed = True
                else:
                    measurement.failures[trace.scenario_id] = "infrastructure"
        measurement.tokens += trace.tokens
        measurement.cut += trace.cut_by_turn_limit
        value = 0.0 if patch_failed else trace.value(metric)
        per_scenario.setdefault(trace.scenario_id, []).append(value)
        if measurement.failures.get(trace.scenario_id) == "infrastructure":
            continue
        if patch_failed:
            measurement.failures[trace.scenario_id] = "patch"
        elif trace.status != "completed":
            measurement.failures.setdefault(trace.scenario_id, "session")
    for scenario_id in scenario_ids:
        values = per_scenario.get(scenario_id)
        measurement.values[scenario_id] = sum(values) / len(values) if values else None
        if not values:
            measurement.failures.setdefault(scenario_id, "infrastructure")
    return measurement


def subset(measured: OptimizerMeasured, scenario_ids: Sequence[str]) -> OptimizerMeasured:
    """The part of ``measured`` over ``scenario_ids``: one suite of a measurement that ran
    several at once (the baseline runs training, held-out and regression scenarios together)."""
    wanted = list(scenario_ids)
    return msgspec.structs.replace(
        measured,
        values={s: measured.values.get(s) for s in wanted},
        failures={s: why for s, why in measured.failures.items() if s in wanted},
    )
