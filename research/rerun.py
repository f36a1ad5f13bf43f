"""GRPO's inputs from a store: failure batches, their prompts, and the rerun evaluator.

This is where training meets the optimizer, and it uses the optimizer's own code at every step,
so a reward here means what a candidate's reward means in ``envharness optimize``:

- the **baseline** is one experiment over the scenarios with the accepted harness (none, or
  ``--base-version``), made and folded by :func:`envharness.optimizer.rerun.rerun_patch` — the
  function the optimizer's loop measures with, with the given seed;
- a **failure batch** is a chunk of those scenarios that holds at least one failure; its prompt
  is the failure packet of its baseline sessions (:func:`envharness.optimizer.engineers.packets.
  build_packet`) rendered by :func:`envharness.llm.render_packet` with the engineer's prompt —
  exactly what the model engineer sends at inference time;
- a sampled answer is **prepared** by :func:`envharness.optimizer.patches.parse.parse_answer`,
  stacked on the accepted patch, checked by :meth:`ExecutableHarness.from_patch` (schema, AST
  policy) and smoke-tested in the sandbox on contexts from the packet; any failure makes it
  invalid;
- a valid patch is **rerun** over the batch's scenarios by the same function with the same seed
  (so each session gets the seed its baseline session had), hook code in the sandbox, reruns
  bounded by a capacity limiter, and folded like the baseline: a session the patch broke counts
  as failed.

Everything runs on one event loop in a blocking portal that lives as long as training, so the
store, its single writer and the sandbox's worker processes stay open across steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from research.reward import Invalid, Measured, Prepared, RerunReward, batch_identity

__all__ = [
    "FailureBatch",
    "GrpoInputs",
    "OptimizerEvaluator",
    "RerunSettings",
    "build_batches",
    "grpo_inputs",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RerunSettings:
    """How baselines and reruns are measured (the optimizer's ``OptimizationConfig`` fields)."""

    turns: int = 20
    trials: int = 1
    seed: int = 0
    capacity: int = 2
    sandbox: str = "subprocess"
    metric: str | None = None
    batch_size: int = 8
    prompt: str = "engineer-v1"
    smoke_test: bool = True

    def optimization_config(self) -> Any:
        """These settings as the optimizer's ``OptimizationConfig`` (what its reruns read)."""
        from envharness.optimizer import OptimizationConfig

        return OptimizationConfig(
            turns=self.turns,
            trials=self.trials,
            seed=self.seed,
            capacity=self.capacity,
            sandbox="local" if self.sandbox == "local" else "subprocess",
            metric=self.metric,
            smoke_test=self.smoke_test,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailureBatch:
    """Scenarios rerun together, their baseline values, and the prompt that shows their failures."""

    identity: str
    scenarios: tuple[Any, ...]
    baseline: Mapping[str, float]
    base: Any
    """The accepted ``HarnessPatch`` candidates stack on (empty: the unpatched harness)."""
    packet: Any
    messages: tuple[Mapping[str, str], ...]
    experiment_id: str | None

    def row(self) -> dict[str, Any]:
        return {"prompt": [dict(m) for m in self.messages], "batch": self.identity}


async def build_batches(
    harness: Any,
    store: Any,
    scenarios: Sequence[Any],
    *,
    settings: RerunSettings,
    sandbox: Any,
    base: Any = None,
    label: str = "grpo",
) -> tuple[list[FailureBatch], Any]:
    """Measure the baseline once, split it into batches, keep those with failures.

    Returns the batches and the baseline measurement. A batch's identity digests what makes it
    one: the environment, its scenario ids, seed, turns, trials, metric and the base patch.
    """
    from envharness.llm import RenderLimits, load_prompt, render_packet
    from envharness.optimizer import HarnessPatch
    from envharness.optimizer.engineers.evidence import experiment_traces
    from envharness.optimizer.engineers.packets import build_packet
    from envharness.optimizer.rerun import rerun_patch

    base = base if base is not None else HarnessPatch()
    environment = harness.new_environment()
    baseline = await rerun_patch(
        harness,
        store,
        scenarios,
        base,
        sandbox=sandbox,
        config=settings.optimization_config(),
        name=f"{label} baseline",
    )
    measurement, experiment_id = baseline.measurement, baseline.experiment_id
    if measurement.infrastructure:
        raise RuntimeError(f"the baseline could not be measured: {measurement.error}")
    traces = await experiment_traces(store, experiment_id) if experiment_id else []
    prompt = load_prompt(settings.prompt)
    spec = environment.spec
    batches = []
    ordered = list(scenarios)
    for start in range(0, len(ordered), settings.batch_size):
        chunk = ordered[start : start + settings.batch_size]
        values = {s.id: float(measurement.values.get(s.id) or 0.0) for s in chunk}
        if all(value >= 1.0 for value in values.values()):
            continue  # nothing failed here: nothing to learn from this batch
        wanted = {s.id for s in chunk}
        packet = await build_packet(
            store,
            [trace for trace in traces if trace.scenario_id in wanted],
            environment,
            metric=settings.metric,
            current_patch=base.to_dict() if base.hooks else None,
        )
        identity = batch_identity(
            {
                "environment": f"{spec.name}@{spec.version}",
                "scenarios": [s.id for s in chunk],
                "seed": settings.seed,
                "turns": settings.turns,
                "trials": settings.trials,
                "metric": settings.metric,
                "base": base.digest() if base.hooks else None,
            }
        )
        messages = render_packet(prompt, packet, RenderLimits())
        batches.append(
            FailureBatch(
                identity=identity,
                scenarios=tuple(chunk),
                baseline=values,
                base=base,
                packet=packet,
                messages=tuple({"role": m.role, "content": m.content} for m in messages),
                experiment_id=experiment_id,
            )
        )
    return batches, measurement


class OptimizerEvaluator:
    """Prepares and reruns sampled patches on failure batches (see the module doc)."""

    def __init__(
        self,
        harness: Any,
        store: Any,
        batches: Sequence[FailureBatch],
        *,
        settings: RerunSettings,
        sandbox: Any,
        forbidden_terms: Sequence[str] = (),
        limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        self._harness = harness
        self._store = store
        self._batches = {batch.identity: batch for batch in batches}
        self._settings = settings
        self._sandbox = sandbox
        self._terms = tuple(forbidden_terms)
        self._limiter = limiter
        self._contexts: dict[str, list[Any]] = {}
        self.experiments: list[str] = []

    def batch(self, identity: str) -> FailureBatch:
        try:
            return self._batches[identity]
        except KeyError:
            raise KeyError(f"unknown failure batch {identity!r}") from None

    async def prepare(self, text: str, batch: str) -> Prepared | Invalid:
        from envharness.optimizer import ExecutableHarness, PatchError, contexts_from_packet
        from envharness.optimizer.patches.parse import parse_answer

        chosen = self.batch(batch)
        try:
            candidate = parse_answer(text).patch
            stacked = chosen.base.stacked(candidate)
            executable = ExecutableHarness.from_patch(
                stacked, sandbox=self._sandbox, forbidden_terms=self._terms
            )
            if self._settings.smoke_test:
                if batch not in self._contexts:
                    self._contexts[batch] = contexts_from_packet(chosen.packet)
                (await executable.smoke_test(self._contexts[batch])).raise_for_failure()
        except PatchError as exc:
            return Invalid(problem=str(exc))
        return Prepared(digest=stacked.digest(), patch=stacked)

    async def rerun(self, prepared: Prepared, batch: str) -> Measured:
        from envharness.optimizer.rerun import candidate_version, rerun_patch

        chosen = self.batch(batch)
        limiter = self._limiter or anyio.CapacityLimiter(self._settings.capacity)
        if self._limiter is None:
            self._limiter = limiter
        async with limiter:
            try:
                rerun = await rerun_patch(
                    self._harness,
                    self._store,
                    chosen.scenarios,
                    prepared.patch,
                    sandbox=self._sandbox,
                    config=self._settings.optimization_config(),
                    name=f"grpo rerun {batch} {prepared.digest[:12]}",
                    version=candidate_version(prepared.digest),
                    forbidden_terms=self._terms,
                )
            except Exception as exc:  # noqa: BLE001 - the measurement failed, not the patch
                problem = f"{type(exc).__name__}: {exc}"
                return Measured(baseline=dict(chosen.baseline), patched={}, infrastructure=problem)
        measurement, seconds = rerun.measurement, rerun.seconds  # its own time, not its wait
        if measurement.error is not None:  # the experiment failed, not the patch
            problem = f"{measurement.error.type}: {measurement.error.message}"
            return Measured(baseline=dict(chosen.baseline), patched={}, infrastructure=problem)
        if rerun.experiment_id:
            self.experiments.append(rerun.experiment_id)
        if measurement.infrastructure:
            problem = "a hook call could not run"
            return Measured(baseline=dict(chosen.baseline), patched={}, infrastructure=problem)
        return Measured(
            baseline=dict(chosen.baseline),
            patched={s: float(v or 0.0) for s, v in measurement.values.items()},
            patch_failures=tuple(s for s, why in measurement.failures.items() if why == "patch"),
            seconds=seconds,
        )


@dataclasses.dataclass
class GrpoInputs:
    """What ``train_engineer.py grpo`` trains on: prompt rows, the reward, and their origin."""

    rows: list[dict[str, Any]]
    reward: RerunReward
    batches: list[FailureBatch]
    baseline_experiment: str | None
    portal: BlockingPortal | None = None

    @property
    def digest(self) -> str:
        payload = json.dumps([row["batch"] for row in self.rows] + [self.baseline_experiment])
        return hashlib.sha256(payload.encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {
            "baseline_experiment": self.baseline_experiment,
            "failure_batches": {
                batch.identity: {
                    "scenarios": [s.id for s in batch.scenarios],
                    "baseline": dict(batch.baseline),
                }
                for batch in self.batches
            },
        }


@contextlib.contextmanager
def grpo_inputs(
    harness: Any,
    scenarios: Sequence[Any],
    *,
    settings: RerunSettings,
    crash_penalty: float = 1.0,
    cache_file: Path | None = None,
    base: Any = None,
) -> Iterator[GrpoInputs]:
    """Open the harness and sandbox in a portal, measure the baseline, build the batches.

    The reward's reruns run on the portal's loop. Raises
    :class:`research.training.NothingToLearn` when no scenario failed.
    """
    from envharness.optimizer import LocalSandbox, SubprocessSandbox
    from envharness.optimizer.engineers.packets import forbidden_terms_of
    from research.training import NothingToLearn

    with start_blocking_portal() as portal, contextlib.ExitStack() as stack:
        if not harness.is_open:
            stack.enter_context(portal.wrap_async_context_manager(harness))
        store = stack.enter_context(portal.wrap_async_context_manager(harness.writable_store()))
        sandbox_object: Any = (
            LocalSandbox()
            if settings.sandbox == "local"
            else SubprocessSandbox(workers=settings.capacity)
        )
        sandbox = stack.enter_context(portal.wrap_async_context_manager(sandbox_object))

        async def batches_now() -> tuple[list[FailureBatch], Any]:
            return await build_batches(
                harness, store, scenarios, settings=settings, sandbox=sandbox, base=base
            )

        batches, _measurement = portal.call(batches_now)
        if not batches:
            raise NothingToLearn(
                f"every one of the {len(scenarios)} scenarios passed at baseline: there is "
                "no failure to learn from"
            )
        terms = forbidden_terms_of(harness.new_environment())
        evaluator = OptimizerEvaluator(
            harness, store, batches, settings=settings, sandbox=sandbox, forbidden_terms=terms
        )
        reward = RerunReward(
            evaluator, crash_penalty=crash_penalty, cache_file=cache_file, runner=portal.call
        )
        yield GrpoInputs(
            rows=[batch.row() for batch in batches],
            reward=reward,
            batches=batches,
            baseline_experiment=batches[0].experiment_id,
            portal=portal,
        )
