"""The optimizer loop: baseline → failure packet → K candidates → reruns → select → accept.

:class:`HarnessOptimizer` runs the method of Harness-R1 (docs/reproduction.md) on a harness:

1. **baseline** — an experiment over the scenarios (and any held-out and regression suites)
   with the accepted harness (none at first);
2. **failure packet** — from that measurement's evidence
   (:mod:`envharness.optimizer.engineers.packets`);
3. **candidates** — the engineer's K answers, each parsed, checked by the AST policy and
   smoke-tested in the sandbox; an answer that fails any stage is recorded as invalid (reward 0)
   (:mod:`envharness.optimizer.proposals`);
4. **reruns** — each valid candidate, stacked on the accepted patch, runs as an experiment over
   the same scenario identities and seeds, candidates concurrently under a capacity limiter, hook
   code in the run's sandbox; identical patches are measured once (the patch cache, by digest;
   :mod:`envharness.optimizer.rerun`, :mod:`envharness.optimizer.context`);
5. **reward** — per scenario, candidate - accepted (Eq. 1), with the paired mean, a bootstrap
   interval and a sign test (:mod:`envharness.optimizer.stats`); a session where the patch's
   code failed counts as failed (:mod:`envharness.optimizer.measure`);
6. **select** — the best candidate that improves, breaks no scenario the accepted harness
   solved, passes the significance gate (``alpha``, Bonferroni-corrected over the distinct
   outcome vectors measured), then the regression suite and the held-out split when given
   (:mod:`envharness.optimizer.gate`); a candidate judged in an earlier iteration on the same
   harness is not measured again, and an iteration that offers nothing new ends the run;
7. **accept** — as ``harness-vN``: ``accepted_patch.json`` and ``versions/harness-vN.json`` in
   the run directory, an ``optimizer.accepted`` record in the store — and iterate on top of it
   (:mod:`envharness.optimizer.accept`).

Every step is recorded in the run's own chain before the loop acts on it
(:mod:`envharness.optimizer.runlog`), so :meth:`HarnessOptimizer.resume` finishes a crashed run
without asking the engineer again or re-measuring anything measured. This module is the face:
it checks what it is given, starts or reopens the run's chain and opens the sandbox;
:mod:`envharness.optimizer.run` runs the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from envharness._portal import call_blocking
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.optimizer.config import OptimizationConfig, Progress
from envharness.optimizer.context import RunContext
from envharness.optimizer.engineers.contract import Engineer
from envharness.optimizer.host import BlockingHarnessHost, HarnessHost
from envharness.optimizer.inputs import (
    Suites,
    require_a_passable_gate,
    require_resumable,
    require_success_signal,
)
from envharness.optimizer.patches.executable import ExecutableHarness
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.sandbox import Sandbox
from envharness.optimizer.results import OptimizationResult
from envharness.optimizer.run import execute
from envharness.optimizer.runlog import RunLog, RunMemo
from envharness.records import ParticipantRef, new_id
from envharness.store.locate import AnyStore, postgres_url

__all__ = [
    "BESIDE_A_DATABASE",
    "HarnessOptimizer",
    "OptimizationConfig",
    "Progress",
    "default_directory",
]

BESIDE_A_DATABASE = "envharness-optimizer"
"""The folder, in the working directory, that holds the run directories of runs recorded into
a PostgreSQL store: a database has no folder to keep ``report.json`` beside it."""


def default_directory(store: Path | str, run_id: str) -> Path:
    """Where a run keeps its files unless told: ``<store>/optimizer/<run id>`` beside a SQLite
    store, ``./envharness-optimizer/<run id>`` (made absolute, as the run records it) for a
    PostgreSQL one — its files are copies of what the store records, for people to read."""
    if postgres_url(str(store)) is None:
        return Path(store) / "optimizer" / run_id
    return Path(BESIDE_A_DATABASE, run_id).absolute()


class HarnessOptimizer:
    """Learns hook patches for ``harness`` from its recorded failures (see the module doc).

    ``harness`` is an :class:`~envharness.EnvironmentHarness` or
    :class:`~envharness.AsyncEnvironmentHarness` (what the optimizer uses of them:
    :mod:`envharness.optimizer.host`); ``engineer`` any :class:`Engineer`
    (``ScriptedEngineer``, ``MiningEngineer``, ``envharness.llm.ModelEngineer``). To go on from
    an accepted version, pass its patch as ``base_patch`` (and its name as ``base_version``).
    """

    def __init__(
        self,
        harness: HarnessHost | BlockingHarnessHost,
        engineer: Engineer,
        *,
        config: OptimizationConfig | None = None,
        base_patch: HarnessPatch | None = None,
        base_version: str | None = None,
        progress: Progress | None = None,
    ) -> None:
        self._blocking_host: BlockingHarnessHost | None = None
        if isinstance(harness, BlockingHarnessHost) and isinstance(harness.aio, HarnessHost):
            self._blocking_host, self._harness = harness, harness.aio
        elif isinstance(harness, HarnessHost):
            self._harness = harness
        else:
            raise ConfigurationError(
                f"HarnessOptimizer needs an EnvironmentHarness or AsyncEnvironmentHarness, "
                f"not {type(harness).__name__}"
            )
        if not isinstance(engineer, Engineer):
            raise ConfigurationError(
                f"engineer must implement Engineer (name, version, async propose()), e.g. "
                f"MiningEngineer(), not {type(engineer).__name__}"
            )
        self._engineer = engineer
        self.config = config or OptimizationConfig()
        existing = self._harness.hooks
        if isinstance(existing, ExecutableHarness) and base_patch is None:
            base_patch, base_version = existing.patch, base_version or existing.version
        elif existing is not None and not isinstance(existing, ExecutableHarness):
            raise ConfigurationError(
                "this harness already has its own hooks; the optimizer stacks patches on a "
                "harness without hooks (give an accepted patch as base_patch instead)"
            )
        if base_patch is not None and not isinstance(base_patch, HarnessPatch):
            base_patch = HarnessPatch.from_dict(base_patch)
        self._base = base_patch if base_patch is not None and base_patch.hooks else None
        self._base_version = base_version if self._base is not None else None
        if self._base is not None and not self._base_version:
            self._base_version = f"patch-{self._base.digest()[:12]}"
        self._progress = progress
        self.run_id: str | None = None
        """The run this optimizer started or resumed last, set as soon as its chain exists
        (``None`` before): what to pass to :meth:`resume` after an interruption."""

    # -- the blocking face ---------------------------------------------------------------------

    def optimize(
        self,
        scenarios: Sequence[Scenario[Any]],
        *,
        held_out: Sequence[Scenario[Any]] = (),
        regression: Sequence[Scenario[Any]] = (),
    ) -> OptimizationResult:
        """Run the loop to its end (blocking); see :meth:`optimize_async`."""
        return self._blocking(scenarios, held_out, regression, None)

    def resume(
        self,
        run_id: str,
        scenarios: Sequence[Scenario[Any]],
        *,
        held_out: Sequence[Scenario[Any]] = (),
        regression: Sequence[Scenario[Any]] = (),
    ) -> OptimizationResult:
        """Finish an interrupted run (blocking); see :meth:`resume_async`."""
        return self._blocking(scenarios, held_out, regression, run_id)

    def _blocking(
        self,
        scenarios: Sequence[Scenario[Any]],
        held_out: Sequence[Scenario[Any]],
        regression: Sequence[Scenario[Any]],
        resume: str | None,
    ) -> OptimizationResult:
        host = self._blocking_host
        if host is not None:  # an EnvironmentHarness: its portal (and open store) if it has one
            return host.call(self.optimize_async, scenarios, held_out, regression, resume)
        return call_blocking(lambda: self.optimize_async(scenarios, held_out, regression, resume))

    # -- the async core ------------------------------------------------------------------------

    async def resume_async(
        self,
        run_id: str,
        scenarios: Sequence[Scenario[Any]],
        *,
        held_out: Sequence[Scenario[Any]] = (),
        regression: Sequence[Scenario[Any]] = (),
    ) -> OptimizationResult:
        """Finish an interrupted or stopped run with the configuration it recorded: answers
        already given are not asked for again, measurements already made are not repeated."""
        return await self.optimize_async(scenarios, held_out, regression, run_id)

    async def optimize_async(
        self,
        scenarios: Sequence[Scenario[Any]],
        held_out: Sequence[Scenario[Any]] = (),
        regression: Sequence[Scenario[Any]] = (),
        resume: str | None = None,
    ) -> OptimizationResult:
        """Run the loop; returns the result once the last iteration is decided.

        Refuses before anything is spent: an environment without a ``score()`` (no success
        signal), repeated or overlapping scenario ids, an empty scenario list.
        """
        suites = Suites.checked(scenarios, held_out, regression)
        environment = self._harness.new_environment()
        require_success_signal(environment)
        if resume is None:
            require_a_passable_gate(suites.train, self.config.alpha, self.config.candidates)
        participants = self._participants(suites.train)
        base_digest = self._base.digest() if self._base is not None else None
        async with AsyncExitStack() as stack:
            if not self._harness.is_open:
                await stack.enter_async_context(self._harness)
            store: AnyStore = await stack.enter_async_context(self._harness.writable_store())
            if resume is None:
                run_id = new_id("opt")
                config = self.config
                directory = config.directory or default_directory(self._harness.store, run_id)
                recorded = config.to_record(
                    environment=environment,
                    participants=participants,
                    engineer=self._engineer,
                    suites=suites,
                    base=self._base,
                    base_version=self._base_version,
                    directory=directory,
                )
                log = await RunLog.start(store, run_id, recorded)
                memo = RunMemo()
            else:
                log, memo = await RunLog.reopen(store, resume)
                assert memo.config is not None
                require_resumable(
                    memo.config,
                    suites=suites,
                    engineer=self._engineer,
                    base_digest=base_digest,
                    environment=environment,
                    participants=participants,
                )
                await log.resumed()
                config = OptimizationConfig.from_record(memo.config, executor=self.config.executor)
                directory = Path(memo.config.directory)
            self.run_id = log.run_id
            self._say(
                f"optimizer run {log.run_id} {'started' if resume is None else 'resumed'} "
                f"(run directory {directory})"
            )
            sandbox: Sandbox = await stack.enter_async_context(config.new_sandbox())
            run = RunContext(
                harness=self._harness,
                engineer=self._engineer,
                config=config,
                store=store,
                log=log,
                memo=memo,
                environment=environment,
                sandbox=sandbox,
                directory=directory,
                suites=suites,
                base=self._base,
                base_version=self._base_version,
                progress=self._progress,
            )
            return await execute(run)

    def _participants(self, train: list[Scenario[Any]]) -> dict[str, ParticipantRef]:
        """The participants every rerun will run, as an experiment records them (the agents are
        made to read their implementations; nothing runs and nothing is recorded)."""
        probe = self._harness.experiment(self.config.name, train[:1], turns=self.config.turns)
        return dict(probe.config.participants)

    def _say(self, line: str) -> None:
        if self._progress is not None:
            self._progress(line)
