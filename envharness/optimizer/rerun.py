"""Measuring a patch: rerun scenarios with it and without it, the way the optimizer does.

A candidate's reward in ``envharness optimize`` is what these functions measure, so anything
else that needs "what does this patch do?" — research baselines, ablations, GRPO's reward, a
user checking an accepted version on new scenarios — calls them instead of copying the loop:

- :func:`rerun_patch` runs one experiment over the scenarios with a patch (hook code in the
  given sandbox) from the configuration's seed, turns and trials, and folds its evidence with
  :func:`~envharness.optimizer.measure.fold_traces` (a session the patch broke counts as
  failed). The experiment seed derives every session's seed from the scenario id and trial, so
  two reruns of the same scenarios get the same seeds: their values are paired.
- :func:`measure_patch` reruns the scenarios without the patch (or with a reference patch) and
  with it, and compares them with :func:`~envharness.optimizer.stats.paired_comparison` — the
  paired mean reward, its bootstrap interval and the sign test the optimizer's gate uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.hooks import HarnessHooks
from envharness.optimizer.config import OptimizationConfig
from envharness.optimizer.engineers.evidence import experiment_traces
from envharness.optimizer.engineers.packets import forbidden_terms_of
from envharness.optimizer.host import HarnessHost
from envharness.optimizer.measure import Measurement, crashed, fold_traces
from envharness.optimizer.patches.executable import ExecutableHarness
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.sandbox import Sandbox
from envharness.optimizer.shares import RerunSlots
from envharness.optimizer.stats import PairedComparison, paired_comparison
from envharness.optimizer.worker_sandbox import WorkerSandbox
from envharness.records import ErrorInfo
from envharness.store.locate import AnyStore

__all__ = [
    "PatchMeasurement",
    "Rerun",
    "candidate_version",
    "error_info",
    "measure_patch",
    "rerun_patch",
]


@dataclass(frozen=True, slots=True)
class Rerun:
    """One rerun experiment: what it measured, its id (``None`` when it could not be created)
    and its wall-clock seconds. ``measurement.error`` is set when the experiment itself failed
    (not the patch): such a rerun says nothing about the patch."""

    measurement: Measurement
    experiment_id: str | None
    seconds: float


@dataclass(frozen=True, slots=True)
class PatchMeasurement:
    """A patch measured against a reference over the same scenarios and seeds.

    ``comparison`` is per scenario patched - reference (the optimizer's reward), or ``None``
    when either rerun could not be measured (an infrastructure failure; see ``Measurement``).
    """

    reference: Rerun
    patched: Rerun
    comparison: PairedComparison | None


def candidate_version(digest: str) -> str:
    """The harness version a candidate's hooks are recorded under until it is accepted."""
    return f"candidate-{digest[:12]}"


def error_info(exc: BaseException) -> ErrorInfo:
    """An exception as evidence records it (type and a bounded message)."""
    return ErrorInfo(type=type(exc).__name__, message=str(exc)[:2000])


async def rerun_patch(
    harness: HarnessHost,
    store: AnyStore,
    scenarios: Sequence[Scenario[Any]],
    patch: HarnessPatch,
    *,
    sandbox: Sandbox,
    config: OptimizationConfig | None = None,
    name: str = "rerun",
    version: str | None = None,
    forbidden_terms: Sequence[str] | None = None,
) -> Rerun:
    """One experiment of ``scenarios`` with ``patch`` (none when it has no hooks), folded as the
    optimizer folds a rerun.

    ``harness`` is an open :class:`~envharness.AsyncEnvironmentHarness` (any
    :class:`~envharness.optimizer.host.HarnessHost`) and ``store`` its writable store;
    ``sandbox`` (open) runs the hook code. ``config`` gives the turns, trials, seed, session
    concurrency, metric and executor (the defaults when ``None``); with an executor, each
    worker runs the hooks in a sandbox of ``sandbox``'s kind and limits, opened there.
    ``version`` is the harness version the sessions record; ``forbidden_terms`` default to the
    environment's.

    Raises :class:`~envharness.errors.ConfigurationError` for a setup that can never be
    measured (and :class:`~envharness.optimizer.PatchError` for a patch that is not valid);
    any other failure of the experiment is returned as ``measurement.error``.
    """
    config = config or OptimizationConfig()
    executor = config.executor
    hooks: HarnessHooks | None = None
    if patch.hooks:
        if forbidden_terms is None:
            forbidden_terms = forbidden_terms_of(harness.new_environment())
        # In an executor's workers the hooks run in a sandbox of the same kind opened there.
        runs_in = WorkerSandbox(sandbox) if executor is not None else sandbox
        hooks = ExecutableHarness.from_patch(
            patch, sandbox=runs_in, version=version, forbidden_terms=forbidden_terms
        )
    started = anyio.current_time()
    experiment_id: str | None = None
    try:
        experiment = harness.experiment(
            name,
            list(scenarios),
            turns=config.turns,
            trials=config.trials,
            seed=config.seed,
            max_concurrency=config.max_concurrency,
            hooks=hooks,
            executor=executor,
        )
        experiment_id = experiment.id
        await experiment.run()
        traces = await experiment_traces(store, experiment.id)
        folded = fold_traces(traces, [s.id for s in scenarios], config.metric)
    except ConfigurationError:
        raise
    except Exception as exc:  # noqa: BLE001 - the measurement failed, not the patch
        folded = Measurement(error=error_info(exc))
    return Rerun(folded, experiment_id, anyio.current_time() - started)


async def measure_patch(
    harness: HarnessHost,
    store: AnyStore,
    scenarios: Sequence[Scenario[Any]],
    patch: HarnessPatch,
    *,
    sandbox: Sandbox,
    config: OptimizationConfig | None = None,
    reference: HarnessPatch | None = None,
    name: str = "measure patch",
) -> PatchMeasurement:
    """Rerun ``scenarios`` with ``reference`` (default: no patch) and with ``patch``, with the
    same seeds, and compare them as the optimizer compares a candidate with the accepted
    harness.

    ``patch`` is measured as given: to measure a candidate on top of an accepted version, pass
    ``accepted.stacked(candidate)`` as ``patch`` and ``accepted`` as ``reference``. The two
    reruns run at once when ``config.capacity`` and the executor's workers allow, splitting
    its workers between them; else one after the other, each with all of them, and nothing
    says so (:mod:`~envharness.optimizer.shares`). See :func:`rerun_patch` for the rest.
    """
    config = config or OptimizationConfig()
    reference = reference or HarnessPatch()
    terms = forbidden_terms_of(harness.new_environment())
    batch = RerunSlots(config).among(2)
    reruns: dict[str, Rerun] = {}

    async def one(label: str, chosen: HarnessPatch) -> None:
        version = candidate_version(chosen.digest()) if chosen.hooks else None
        async with batch.limiter:
            reruns[label] = await rerun_patch(
                harness, store, scenarios, chosen, sandbox=sandbox, config=batch.config,
                name=f"{name} {label}", version=version, forbidden_terms=terms,
            )  # fmt: skip

    async with anyio.create_task_group() as group:
        group.start_soon(one, "reference", reference)
        group.start_soon(one, "patched", patch)
    before, after = reruns["reference"], reruns["patched"]
    comparison = None
    if not (before.measurement.infrastructure or after.measurement.infrastructure):
        comparison = paired_comparison(
            after.measurement.values,
            before.measurement.values,
            seed=config.seed,
            key=f"measure:{reference.digest()}:{patch.digest()}",
            confidence=config.confidence,
            resamples=config.resamples,
            failed=crashed(after.measurement.failures, config.metric),
        )
    return PatchMeasurement(reference=before, patched=after, comparison=comparison)
