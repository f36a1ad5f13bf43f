"""The failure packet: what an engineer is shown, mined from a measurement's evidence.

For each session of the measured experiment the journal is folded into steps (what each
participant attempted, what became of it); for each step the *hook view* is rebuilt exactly as a
hook would have seen it — the state recorded before the step is loaded from its blob by digest
and passed to the environment's optional ``hook_view(state, participant)``. Failed sessions are
clustered by signature (the sequence of action names and how they ended), and passing sessions
are kept as contrasts. A session passed when its score said so; when the score says nothing
(an adapted Gymnasium environment reports a return, not a verdict) and the run optimizes a
``metric``, when that metric reached ``solved`` — the same line the run's report counts
scenarios as passed at. The packet also names every state and predicate key hooks can read (an
engineer cannot write ``state["verified"]`` if it never saw that key) and the environment's
``hook_forbidden_terms`` — strings patch code must not contain (answer leakage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from envharness.contracts.environment import Environment
from envharness.hooks import HOOK_NAMES, HookView
from envharness.optimizer.engineers.actions import action_label, discriminating_field, distinct
from envharness.optimizer.engineers.contract import (
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
)
from envharness.optimizer.engineers.evidence import RawStep, SessionTrace
from envharness.runtime.resume import restore_state
from envharness.store.locate import AnyStore

__all__ = [
    "PacketLimits",
    "build_packet",
    "forbidden_terms_of",
    "hook_view_of",
]


@dataclass(frozen=True, slots=True)
class PacketLimits:
    """Bounds that keep a packet readable (and a model prompt affordable)."""

    clusters: int = 8
    passing: int = 4
    steps: int = 40
    """Steps kept per example: the first ``steps - 10`` and the last 10."""
    action_examples: int = 12


def forbidden_terms_of(environment: Any) -> tuple[str, ...]:
    """The environment's ``hook_forbidden_terms`` (strings patch code must not contain)."""
    terms = getattr(environment, "hook_forbidden_terms", ())
    if isinstance(terms, str):
        terms = (terms,)
    return tuple(str(term) for term in terms if str(term))


def hook_view_of(environment: Any, state: Any, participant: str) -> HookView:
    """What hooks see of ``state``: the environment's ``hook_view``, or the state itself when it
    is a JSON object and the environment defines none. A failing ``hook_view`` shows nothing."""
    view_of = getattr(environment, "hook_view", None)
    if view_of is None:
        builtin = msgspec.to_builtins(state)
        return HookView(state=builtin if isinstance(builtin, dict) else {})
    try:
        view = view_of(state, participant)
        return view if isinstance(view, HookView) else msgspec.convert(view, HookView)
    except Exception:  # noqa: BLE001 - a broken hook_view shows nothing; the runs record it
        return HookView()


async def build_packet(
    store: AnyStore,
    traces: Sequence[SessionTrace],
    environment: Environment[Any, Any],
    *,
    metric: str | None = None,
    solved: float | None = None,
    current_patch: dict[str, Any] | None = None,
    limits: PacketLimits = PacketLimits(),
) -> FailurePacket:
    """The packet for one measurement (its sessions' ``traces``); ``solved`` is the ``metric``
    value at which a session whose score gave no ``passed`` counts as passing."""
    views = _Views(store, environment)
    field = discriminating_field(step.action for trace in traces for step in trace.steps)
    failing: list[tuple[SessionTrace, FailureExample]] = []
    passing: list[FailureExample] = []
    state_keys: set[str] = set()
    predicate_keys: set[str] = set()
    actions: list[Any] = []
    for trace in traces:
        example = await _example(trace, views, metric, solved, limits)
        for step in example.steps:
            state_keys.update(step.state)
            predicate_keys.update(step.predicates)
            actions.append(step.action)
        if example.passed:
            passing.append(example)
        else:
            failing.append((trace, example))
    clusters = _clusters(failing, field, limits)
    spec = environment.spec
    return FailurePacket(
        environment=f"{spec.name}@{spec.version}",
        hooks=HOOK_NAMES,
        state_keys=tuple(sorted(state_keys)),
        predicate_keys=tuple(sorted(predicate_keys)),
        action_examples=tuple(distinct(actions)[: limits.action_examples]),
        clusters=clusters,
        passing=_contrasts(passing, field, limits),
        current_patch=current_patch,
        forbidden_terms=forbidden_terms_of(environment),
        task=next((c.example.task for c in clusters if c.example.task), None)
        or next((p.task for p in passing if p.task), None),
    )


class _Views:
    """Hook views by (state digest, participant), each state blob loaded and typed once."""

    def __init__(self, store: AnyStore, environment: Environment[Any, Any]) -> None:
        self._store = store
        self._environment = environment
        self._states: dict[str, Any] = {}
        self._views: dict[tuple[str, str], HookView] = {}

    async def view(self, digest: str | None, participant: str) -> HookView:
        if digest is None:
            return HookView()
        key = (digest, participant)
        if key not in self._views:
            if digest not in self._states:
                data = await self._store.blob(digest)
                try:
                    self._states[digest] = restore_state(data, self._environment.spec.state_type)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    self._states[digest] = msgspec.json.decode(data)
            self._views[key] = hook_view_of(self._environment, self._states[digest], participant)
        return self._views[key]


async def _example(
    trace: SessionTrace,
    views: _Views,
    metric: str | None,
    solved: float | None,
    limits: PacketLimits,
) -> FailureExample:
    steps = trace.steps
    if len(steps) > limits.steps:
        tail = min(10, limits.steps // 2)
        steps = steps[: limits.steps - tail] + steps[-tail:]
    shown: list[FailureStep] = []
    task: str | None = None
    for step in steps:
        view = await views.view(step.state, step.participant)
        task = task or view.task
        shown.append(_failure_step(step, view))
    passed = _passed(trace, metric, solved)
    return FailureExample(
        session_id=trace.session_id,
        scenario_id=trace.scenario_id,
        trial=trace.trial,
        task=task,
        passed=passed,
        reward=trace.value(metric),
        steps=tuple(shown),
    )


def _passed(trace: SessionTrace, metric: str | None, solved: float | None) -> bool:
    if trace.status != "completed":
        return False
    if trace.passed is not None or metric is None or solved is None:
        return bool(trace.passed)
    return trace.value(metric) >= solved


def _failure_step(step: RawStep, view: HookView) -> FailureStep:
    blocked = None
    if step.blocked is not None:
        blocked = f"{step.blocked_by or 'blocked'}: {step.blocked}"
    return FailureStep(
        step=step.turn,
        participant=step.participant,
        action=step.action,
        outcome=step.outcome,
        blocked=blocked,
        state=dict(view.state),
        predicates=dict(view.predicates),
        admissible=list(view.admissible) if view.admissible is not None else None,
    )


def signature(example: FailureExample, field: str | None, ending: str) -> str:
    """``issue_refund → lookup_order → reply | not passed``: repeats collapsed, blocks marked."""
    names: list[str] = []
    for step in example.steps:
        name = action_label(step.action, field) + (" (blocked)" if step.blocked else "")
        if not names or names[-1] != name:
            names.append(name)
    return f"{' → '.join(names) or '(no actions)'} | {ending}"


def _ending(trace: SessionTrace) -> str:
    if trace.status != "completed":
        return f"session {trace.status}" + (f" ({trace.error_type})" if trace.error_type else "")
    return "not passed" if trace.passed is False else "no pass signal"


def _clusters(
    failing: list[tuple[SessionTrace, FailureExample]],
    field: str | None,
    limits: PacketLimits,
) -> tuple[FailureCluster, ...]:
    groups: dict[str, list[tuple[SessionTrace, FailureExample]]] = {}
    for trace, example in failing:
        groups.setdefault(signature(example, field, _ending(trace)), []).append((trace, example))
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    clusters = []
    for key, members in ordered[: limits.clusters]:
        trace, example = members[0]
        scenarios = sorted({t.scenario_id for t, _ in members})
        description = (
            f"{len(members)} failed session(s) over {len(scenarios)} scenario(s) "
            f"({', '.join(scenarios[:5])}{', …' if len(scenarios) > 5 else ''}): {key}"
        )
        if trace.reason and trace.status != "completed":
            description += f"; the session ended: {trace.reason}"
        clusters.append(
            FailureCluster(
                signature=key,
                description=description,
                sessions=tuple(t.session_id for t, _ in members),
                example=example,
            )
        )
    return tuple(clusters)


def _contrasts(
    passing: list[FailureExample], field: str | None, limits: PacketLimits
) -> tuple[FailureExample, ...]:
    """Passing sessions with distinct signatures first, so the contrasts differ."""
    seen: set[str] = set()
    first: list[FailureExample] = []
    rest: list[FailureExample] = []
    for example in passing:
        key = signature(example, field, "passed")
        (rest if key in seen else first).append(example)
        seen.add(key)
    return tuple((first + rest)[: limits.passing])
