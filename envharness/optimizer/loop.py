"""The optimizer loop: baseline → failure packet → K candidates → reruns → select → accept.

:class:`HarnessOptimizer` runs the method of Harness-R1 (docs/reproduction.md) on a harness:

1. **baseline** — an experiment over the scenarios (and any held-out and regression suites)
   with the accepted harness (none at first);
2. **failure packet** — from that measurement's evidence (:mod:`envharness.optimizer.packets`);
3. **candidates** — the engineer's K answers, each parsed, checked by the AST policy and
   smoke-tested in the sandbox; an answer that fails any stage is recorded as invalid (reward 0);
4. **reruns** — each valid candidate, stacked on the accepted patch, runs as an experiment over
   the same scenario identities and seeds, candidates concurrently under a capacity limiter, hook
   code in the run's sandbox; identical patches are measured once (the patch cache, by digest);
5. **reward** — per scenario, candidate - accepted (Eq. 1), with the paired mean, a bootstrap
   interval and a sign test (:mod:`envharness.optimizer.stats`); a session where the patch's
   code failed counts as failed (:mod:`envharness.optimizer.measure`);
6. **select** — the best candidate that improves, breaks no scenario the accepted harness
   solved, passes the significance gate (``alpha``, Bonferroni-corrected over the distinct
   candidates measured), then the regression suite and the held-out split when given;
7. **accept** — as ``harness-vN``: ``accepted_patch.json`` and ``versions/harness-vN.json`` in
   the run directory, an ``optimizer.accepted`` record in the store — and iterate on top of it.

Every step is recorded in the run's own chain before the loop acts on it
(:mod:`envharness.optimizer.runlog`), so :meth:`HarnessOptimizer.resume` finishes a crashed run
without asking the engineer again or re-measuring anything measured.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import msgspec
from anyio.from_thread import start_blocking_portal

from envharness._version import __version__
from envharness.environment import Environment
from envharness.errors import ConfigurationError, EnvharnessError
from envharness.hooks import HarnessHooks
from envharness.optimizer.engineer import Engineer, FailurePacket, Proposal
from envharness.optimizer.errors import PatchError, SandboxInfrastructureError
from envharness.optimizer.evidence import experiment_traces
from envharness.optimizer.executable import ExecutableHarness, contexts_from_packet
from envharness.optimizer.measure import Measurement, fold_traces
from envharness.optimizer.packets import build_packet, forbidden_terms_of
from envharness.optimizer.parse import parse_answer
from envharness.optimizer.patch import HarnessPatch
from envharness.optimizer.results import (
    AcceptedVersion,
    IterationReport,
    LedgerEntry,
    MeasurementSummary,
    OptimizationResult,
    report_lines,
    summarize,
    write_bytes,
    write_json,
)
from envharness.optimizer.runlog import RunLog, RunMemo, measurement_key
from envharness.optimizer.sandbox import LocalSandbox, Sandbox, SandboxLimits, SubprocessSandbox
from envharness.optimizer.stats import PairedComparison, paired_comparison, sign_test
from envharness.records import (
    CandidateVerdict,
    Cost,
    ErrorInfo,
    OptimizerAccepted,
    OptimizerConfigRef,
    OptimizerDecision,
    OptimizerMeasured,
    OptimizerProposal,
    OptimizerStatus,
    ParticipantRef,
    new_id,
)
from envharness.scenario import Scenario
from envharness.store import Store

__all__ = ["HarnessOptimizer", "OptimizationConfig", "Progress"]

Progress = Callable[[str], None]
"""Called with one line of text at each step (the CLI prints them)."""

_VERSION = re.compile(r"harness-v(\d+)")


@dataclass(frozen=True, slots=True)
class OptimizationConfig:
    """How an optimizer run searches and what it accepts.

    ``candidates`` per iteration (K) and ``iterations``; each rerun plays ``turns`` turns and
    ``trials`` trials per scenario from ``seed`` (the same seeds as the baseline). ``capacity``
    reruns run at once (each with ``max_concurrency`` sessions; default: the harness's).
    ``sandbox``: ``"subprocess"`` (worker processes under CPU and memory limits — for untrusted
    patches) or ``"local"`` (in-process, fast; for trusted engineers and tests).

    A candidate is accepted when its mean paired reward exceeds ``min_improvement``, it breaks
    no scenario the accepted harness solved (value >= ``solved``), and — unless ``alpha`` is
    ``None`` — the one-sided sign test's p-value is at most ``alpha / m``, where ``m`` is the
    number of distinct patches measured in that iteration (Bonferroni): the loop keeps the best
    of several tries, so without the correction K candidates of no effect would pass the gate
    far more often than ``alpha``. With n scenarios the smallest p-value is ``2**-n``, so a gain
    among K distinct candidates can pass only with n >= log2(K / alpha) scenarios (8 for K=8 at
    0.05). ``metric`` scores by a score metric instead of pass/fail. ``directory`` defaults to
    ``<store>/optimizer/<run id>``.
    """

    candidates: int = 8
    iterations: int = 3
    turns: int = 20
    trials: int = 1
    seed: int = 0
    capacity: int = 2
    max_concurrency: int | None = None
    sandbox: Literal["subprocess", "local"] = "subprocess"
    sandbox_limits: SandboxLimits | None = None
    sandbox_workers: int | None = None
    alpha: float | None = 0.05
    confidence: float = 0.95
    resamples: int = 2000
    metric: str | None = None
    solved: float = 1.0
    min_improvement: float = 0.0
    smoke_test: bool = True
    stop_when_solved: bool = True
    engineer_timeout: float | None = 900.0
    name: str = "optimize"
    directory: Path | None = None

    def __post_init__(self) -> None:
        for name in ("candidates", "iterations", "turns", "trials", "capacity", "resamples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"OptimizationConfig.{name} must be a positive integer, not {value!r}"
                )
        for name in ("max_concurrency", "sandbox_workers"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigurationError(
                    f"OptimizationConfig.{name} must be a positive integer or None, not {value!r}"
                )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigurationError(
                f"OptimizationConfig.seed must be an integer, not {self.seed!r}"
            )
        if self.sandbox not in ("subprocess", "local"):
            raise ConfigurationError(
                f"OptimizationConfig.sandbox must be 'subprocess' or 'local', not {self.sandbox!r}"
            )
        if self.alpha is not None and not 0.0 < self.alpha < 1.0:
            raise ConfigurationError(
                f"OptimizationConfig.alpha must be between 0 and 1 (e.g. 0.05) or None, "
                f"not {self.alpha!r}"
            )
        if not 0.0 < self.confidence < 1.0:
            raise ConfigurationError(
                f"OptimizationConfig.confidence must be between 0 and 1, not {self.confidence!r}"
            )
        if self.engineer_timeout is not None and self.engineer_timeout <= 0:
            raise ConfigurationError("OptimizationConfig.engineer_timeout must be positive or None")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("OptimizationConfig.name must be a non-empty string")

    @classmethod
    def from_record(cls, ref: OptimizerConfigRef) -> OptimizationConfig:
        """The configuration a run recorded (a resumed run goes on with it; the sandbox's limits
        and the engineer's timeout are the defaults, they change no verdict)."""
        return cls(
            candidates=ref.candidates,
            iterations=ref.iterations,
            turns=ref.turns,
            trials=ref.trials,
            seed=ref.seed,
            capacity=ref.capacity,
            sandbox="local" if ref.sandbox == "local" else "subprocess",
            alpha=ref.alpha,
            confidence=ref.confidence,
            metric=ref.metric,
            solved=ref.solved,
            min_improvement=ref.min_improvement,
            resamples=ref.resamples,
            smoke_test=ref.smoke_test,
            stop_when_solved=ref.stop_when_solved,
            max_concurrency=ref.max_concurrency,
            name=ref.name,
            directory=Path(ref.directory) if ref.directory else None,
        )


class HarnessOptimizer:
    """Learns hook patches for ``harness`` from its recorded failures (see the module doc).

    ``harness`` is an :class:`~envharness.EnvironmentHarness` or
    :class:`~envharness.AsyncEnvironmentHarness`; ``engineer`` any :class:`Engineer`
    (``ScriptedEngineer``, ``MiningEngineer``, ``envharness.llm.ModelEngineer``). To go on from
    an accepted version, pass its patch as ``base_patch`` (and its name as ``base_version``).
    """

    def __init__(
        self,
        harness: Any,
        engineer: Engineer,
        *,
        config: OptimizationConfig | None = None,
        base_patch: HarnessPatch | None = None,
        base_version: str | None = None,
        progress: Progress | None = None,
    ) -> None:
        self._host = harness
        self._harness: Any = getattr(harness, "aio", harness)
        for needed in ("experiment", "new_environment", "writable_store", "store"):
            if not hasattr(self._harness, needed):
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
        existing = getattr(self._harness, "hooks", None)
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
        return self._blocking(self.optimize_async, scenarios, held_out, regression, None)

    def resume(
        self,
        run_id: str,
        scenarios: Sequence[Scenario[Any]],
        *,
        held_out: Sequence[Scenario[Any]] = (),
        regression: Sequence[Scenario[Any]] = (),
    ) -> OptimizationResult:
        """Finish an interrupted run (blocking); see :meth:`resume_async`."""
        return self._blocking(self.optimize_async, scenarios, held_out, regression, run_id)

    def _blocking(self, function: Callable[..., Any], *args: Any) -> OptimizationResult:
        call = getattr(self._host, "_blocking", None)
        if call is not None:  # an EnvironmentHarness: its portal (and open store) if it has one
            result: OptimizationResult = call(function, *args)
            return result
        with start_blocking_portal() as portal:
            return portal.call(function, *args)  # type: ignore[no-any-return]

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
        train = _scenarios(scenarios, "scenarios")
        held = _scenarios(held_out, "held_out", empty=True)
        suite = _scenarios(regression, "regression", empty=True)
        _disjoint(train, held, suite)
        environment = self._harness.new_environment()
        _require_success_signal(environment, self.config.metric)
        if resume is None:
            _require_a_passable_gate(train, self.config.alpha, self.config.candidates)
        participants = self._participants(train)
        async with AsyncExitStack() as stack:
            if not self._harness.is_open:
                await stack.enter_async_context(self._harness)
            store: Store = await stack.enter_async_context(self._harness.writable_store())
            if resume is None:
                run_id = new_id("opt")
                config = self.config
                directory = config.directory or Path(self._harness.store) / "optimizer" / run_id
                log = await RunLog.start(
                    store,
                    run_id,
                    self._config_ref(environment, participants, train, held, suite, directory),
                )
                memo = RunMemo()
            else:
                log, memo = await RunLog.reopen(store, resume)
                assert memo.config is not None
                self._check_resumable(memo.config, environment, participants, train, held, suite)
                await log.resumed()
                config = OptimizationConfig.from_record(memo.config)
                directory = Path(memo.config.directory)
            self.run_id = log.run_id
            self._say(
                f"optimizer run {log.run_id} {'started' if resume is None else 'resumed'} "
                f"(run directory {directory})"
            )
            sandbox: Sandbox = await stack.enter_async_context(_sandbox(config))
            run = _Run(
                self, config, store, log, memo, environment, sandbox, directory, train, held, suite
            )
            return await run.execute()

    def _participants(self, train: list[Scenario[Any]]) -> dict[str, ParticipantRef]:
        """The participants every rerun will run, as an experiment records them (the agents are
        made to read their implementations; nothing runs and nothing is recorded)."""
        probe = self._harness.experiment(self.config.name, train[:1], turns=self.config.turns)
        return dict(probe.config.participants)

    def _config_ref(
        self,
        environment: Environment[Any, Any],
        participants: dict[str, ParticipantRef],
        train: list[Scenario[Any]],
        held: list[Scenario[Any]],
        suite: list[Scenario[Any]],
        directory: Path,
    ) -> OptimizerConfigRef:
        config = self.config
        return OptimizerConfigRef(
            name=config.name,
            environment=environment.spec.reference(),
            participants=participants,
            engineer=self._engineer.name,
            engineer_version=self._engineer.version,
            scenarios=tuple(s.id for s in train),
            held_out=tuple(s.id for s in held),
            regression=tuple(s.id for s in suite),
            candidates=config.candidates,
            iterations=config.iterations,
            turns=config.turns,
            trials=config.trials,
            seed=config.seed,
            capacity=config.capacity,
            sandbox=config.sandbox,
            alpha=config.alpha,
            confidence=config.confidence,
            metric=config.metric,
            solved=config.solved,
            min_improvement=config.min_improvement,
            resamples=config.resamples,
            smoke_test=config.smoke_test,
            stop_when_solved=config.stop_when_solved,
            max_concurrency=config.max_concurrency,
            base_version=self._base_version,
            base_digest=self._base.digest() if self._base is not None else None,
            directory=str(directory),
            envharness_version=__version__,
        )

    def _check_resumable(
        self,
        recorded: OptimizerConfigRef,
        environment: Environment[Any, Any],
        participants: dict[str, ParticipantRef],
        train: list[Scenario[Any]],
        held: list[Scenario[Any]],
        suite: list[Scenario[Any]],
    ) -> None:
        given = (
            tuple(s.id for s in train),
            tuple(s.id for s in held),
            tuple(s.id for s in suite),
        )
        if given != (recorded.scenarios, recorded.held_out, recorded.regression):
            raise ConfigurationError(
                "resume with the scenarios the run recorded: scenarios "
                f"{list(recorded.scenarios)}, held_out {list(recorded.held_out)}, regression "
                f"{list(recorded.regression)}"
            )
        if self._engineer.name != recorded.engineer:
            raise ConfigurationError(
                f"the run was recorded with engineer {recorded.engineer!r}, not "
                f"{self._engineer.name!r}; resume it with the same engineer"
            )
        base = self._base.digest() if self._base is not None else None
        if base != recorded.base_digest:
            raise ConfigurationError(
                "the run was recorded on another base patch; resume it with the same base_patch"
            )
        changed = _code_changes(recorded, environment, participants)
        if changed:
            raise ConfigurationError(
                f"the run was recorded with other code ({'; '.join(changed)}): its measurements "
                "would not be comparable; resume it with the environment and agents it was "
                "recorded with, or start a new run"
            )

    def _say(self, line: str) -> None:
        if self._progress is not None:
            self._progress(line)


# -- one run -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Proposed:
    """A recorded proposal and, when valid, the stacked patch it makes."""

    record: OptimizerProposal
    stacked: HarnessPatch | None = None


@dataclass(slots=True)
class _Spent:
    engineer_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class _State:
    """The accepted harness so far and its measurements (train, held-out, regression)."""

    patch: HarnessPatch
    version: str | None
    reference: OptimizerMeasured
    held: OptimizerMeasured | None = None
    suite: OptimizerMeasured | None = None
    versions: list[AcceptedVersion] = field(default_factory=list)
    iterations: list[IterationReport] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)
    spent: _Spent = field(default_factory=_Spent)


class _Run:
    def __init__(
        self,
        optimizer: HarnessOptimizer,
        config: OptimizationConfig,
        store: Store,
        log: RunLog,
        memo: RunMemo,
        environment: Environment[Any, Any],
        sandbox: Sandbox,
        directory: Path,
        train: list[Scenario[Any]],
        held: list[Scenario[Any]],
        suite: list[Scenario[Any]],
    ) -> None:
        self.optimizer = optimizer
        self.harness = optimizer._harness
        self.engineer = optimizer._engineer
        self.config = config
        self.store = store
        self.log = log
        self.memo = memo
        self.environment = environment
        self.sandbox = sandbox
        self.directory = directory
        self.train, self.held, self.suite = train, held, suite
        self.terms = forbidden_terms_of(environment)
        self.lock = anyio.Lock()
        spec = environment.spec
        self.environment_name = f"{spec.name}@{spec.version}"

    @property
    def run_id(self) -> str:
        return self.log.run_id

    async def execute(self) -> OptimizationResult:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            state = await self._baseline()
            for iteration in range(1, self.config.iterations + 1):
                if self.config.stop_when_solved and self._solved_all(state.reference):
                    self.optimizer._say(
                        f"every scenario is solved; stopping before iteration {iteration}"
                    )
                    break
                await self._iteration(iteration, state)
                self._write_report(state, "running", None)
        except BaseException as exc:
            status, reason = _ending(exc)
            with anyio.CancelScope(shield=True):
                await self._append(
                    OptimizerStatus(
                        status=status,
                        reason=reason,
                        error=_error(exc) if status == "failed" else None,
                    )
                )
            raise
        await self._append(OptimizerStatus(status="completed"))
        result = self._result(state, "completed", None)
        self._write_files(result)
        self.optimizer._say(
            f"done: {result.baseline.passed}/{result.baseline.total} -> "
            f"{result.final.passed}/{result.final.total}"
            + (f", {result.accepted_version}" if result.accepted_version else ", no version")
        )
        return result

    # -- baseline ----------------------------------------------------------------------------

    async def _baseline(self) -> _State:
        base = self.optimizer._base or HarnessPatch()
        version = self.optimizer._base_version
        everything = self.train + self.held + self.suite
        measured = await self._measure("baseline", 0, everything, base, version, None)
        if measured.error is not None:
            raise EnvharnessError(
                f"the baseline could not be measured: {measured.error.type}: "
                f"{measured.error.message}"
            )
        await self._require_signal(measured)
        state = _State(
            patch=base,
            version=version,
            reference=_subset(measured, self.train),
            held=_subset(measured, self.held) if self.held else None,
            suite=_subset(measured, self.suite) if self.suite else None,
        )
        summary = _summary(state.reference, self.config)
        self.optimizer._say(
            f"baseline: {summary.passed}/{summary.total} passed "
            f"(mean {summary.mean_reward:.3f}) [{measured.experiment_id}]"
        )
        return state

    async def _require_signal(self, measured: OptimizerMeasured) -> None:
        """Refuse an environment that never said whether a session passed — before the engineer
        is asked for anything."""
        if measured.experiment_id is None:
            return
        traces = await experiment_traces(self.store, measured.experiment_id)
        if self.config.metric is None:
            silent = bool(traces) and all(t.passed is None for t in traces)
        else:
            silent = bool(traces) and all(self.config.metric not in t.metrics for t in traces)
        if not silent:
            return
        failed = [t for t in traces if t.status != "completed"]
        if len(failed) == len(traces):  # nothing was scored because nothing finished
            first = failed[0]
            raise ConfigurationError(
                f"every baseline session ended {first.status} ({len(traces)} sessions), so "
                f"nothing was scored; the first, {first.session_id}: "
                f"{first.reason or 'no reason recorded'} (envharness show {first.session_id}); "
                "fix the environment or agents before optimizing"
            )
        if self.config.metric is None:
            raise ConfigurationError(
                f"environment {self.environment_name}'s score() never reported `passed` in "
                f"the baseline ({len(traces)} sessions); the optimizer needs a success signal:"
                " return ScoreReport(metrics=..., passed=True/False), or optimize a metric "
                "(OptimizationConfig(metric=...); envharness optimize --metric NAME)"
            )
        raise ConfigurationError(
            f"no baseline session's score has the metric {self.config.metric!r}"
        )

    # -- one iteration -----------------------------------------------------------------------

    async def _iteration(self, iteration: int, state: _State) -> None:
        started = anyio.current_time()
        say = self.optimizer._say
        recorded = self.memo.decisions.get(iteration)
        packet = await self._packet(state)
        proposed = await self._proposals(iteration, packet, state)
        unique: dict[str, _Proposed] = {}
        for item in proposed:
            if item.stacked is not None and item.record.digest is not None:
                unique.setdefault(item.record.digest, item)
        measured: dict[str, OptimizerMeasured] = {}
        limiter = anyio.CapacityLimiter(self.config.capacity)

        async def evaluate(item: _Proposed) -> None:
            assert item.stacked is not None
            assert item.record.digest is not None
            async with limiter:
                measured[item.record.digest] = await self._measure(
                    "candidate",
                    iteration,
                    self.train,
                    item.stacked,
                    _candidate_version(item.record.digest),
                    item.record.candidate,
                )

        async with anyio.create_task_group() as group:
            for item in unique.values():
                group.start_soon(evaluate, item)
        verdicts = [self._verdict(item, measured, unique, state) for item in proposed]
        for verdict in verdicts:
            for scenario in verdict.regressions:
                state.ledger.append(
                    LedgerEntry(iteration=iteration, candidate=verdict.candidate, scenario=scenario)
                )
        selected, verdicts, reason, checks = await self._select(iteration, verdicts, unique, state)
        spent = _Spent(
            engineer_tokens=sum(_tokens(c) for c in self.memo.costs.get(iteration, [])),
            rerun_tokens=sum(
                m.tokens for m in [*measured.values(), *checks] if m.iteration == iteration
            ),
            seconds=anyio.current_time() - started,
        )
        if recorded is not None:  # replayed: what the iteration spent is what it recorded
            spent = _Spent(recorded.engineer_tokens, recorded.rerun_tokens, recorded.seconds)
        else:
            await self._append(
                OptimizerDecision(
                    iteration=iteration,
                    verdicts=tuple(verdicts),
                    selected=selected.record.candidate if selected is not None else None,
                    reason=reason,
                    engineer_tokens=spent.engineer_tokens,
                    rerun_tokens=spent.rerun_tokens,
                    seconds=spent.seconds,
                )
            )
        state.spent.engineer_tokens += spent.engineer_tokens
        state.spent.rerun_tokens += spent.rerun_tokens
        state.spent.seconds += spent.seconds
        version = None
        if selected is not None:
            version = await self._accept(iteration, selected, measured, checks, state)
        state.iterations.append(
            IterationReport(
                iteration=iteration,
                verdicts=tuple(verdicts),
                selected=selected.record.candidate if selected is not None else None,
                accepted_version=version,
                reason=reason,
                engineer_tokens=spent.engineer_tokens,
                rerun_tokens=spent.rerun_tokens,
                seconds=spent.seconds,
                hooks={
                    item.record.candidate: dict(measured[item.record.digest].hooks)
                    for item in proposed
                    if item.record.digest is not None and item.record.digest in measured
                },
            )
        )
        say(f"iteration {iteration}: {reason}")

    async def _packet(self, state: _State) -> FailurePacket:
        experiment_id = state.reference.experiment_id
        traces = await experiment_traces(self.store, experiment_id) if experiment_id else []
        wanted = {s.id for s in self.train}
        return await build_packet(
            self.store,
            [t for t in traces if t.scenario_id in wanted],
            self.environment,
            metric=self.config.metric,
            current_patch=state.patch.to_dict() if state.patch.hooks else None,
        )

    async def _proposals(
        self, iteration: int, packet: FailurePacket, state: _State
    ) -> list[_Proposed]:
        recorded = self.memo.proposals.get(iteration)
        if recorded is not None:  # a resumed run: the answers were given and checked already
            return [self._restack(record, state) for record in recorded]
        answers = await self._ask(iteration, packet)
        costs = [answer.cost for answer in answers if answer.cost is not None]
        self.memo.costs[iteration] = costs
        await self.log.costs(iteration, costs)
        contexts = contexts_from_packet(packet)
        proposed = []
        for index, answer in enumerate(answers):
            item = await self._check(iteration, index, answer, state, contexts)
            await self._append(item.record)
            proposed.append(item)
        self.memo.proposals[iteration] = [item.record for item in proposed]
        valid = sum(1 for item in proposed if item.stacked is not None)
        self.optimizer._say(
            f"iteration {iteration}: {len(proposed)} answer(s) from {self.engineer.name}, "
            f"{valid} valid"
        )
        return proposed

    async def _ask(self, iteration: int, packet: FailurePacket) -> list[Proposal]:
        count = self.config.candidates
        name = self.engineer.name
        try:
            with anyio.fail_after(self.config.engineer_timeout):
                answers = await self.engineer.propose(
                    packet, count, seed=self.config.seed * 1000 + iteration
                )
        except TimeoutError:
            return [Proposal(engineer=name, error="the engineer did not answer in time")] * count
        except Exception as exc:  # noqa: BLE001 - an engineer's failure costs its candidates only
            problem = f"the engineer failed: {type(exc).__name__}: {exc}"
            return [Proposal(engineer=name, error=problem)] * count
        checked: list[Proposal] = []
        for answer in list(answers)[:count]:
            if not isinstance(answer, Proposal):
                answer = Proposal(engineer=name, error=f"not a Proposal: {answer!r:.200}")
            checked.append(answer)
        return checked

    async def _check(
        self,
        iteration: int,
        index: int,
        answer: Proposal,
        state: _State,
        contexts: list[Any],
    ) -> _Proposed:
        base = OptimizerProposal(
            iteration=iteration,
            candidate=index,
            engineer=answer.engineer or self.engineer.name,
            text=answer.text,
            error=answer.error,
        )
        if answer.error is not None:
            return _Proposed(base)
        try:
            candidate = parse_answer(answer.text).patch
            stacked = state.patch.stacked(candidate)
            executable = ExecutableHarness.from_patch(
                stacked,
                sandbox=self.sandbox,
                version=_candidate_version(stacked.digest()),
                forbidden_terms=self.terms,
            )
            if self.config.smoke_test:
                (await executable.smoke_test(contexts)).raise_for_failure()
        except PatchError as exc:
            return _Proposed(msgspec.structs.replace(base, problem=str(exc)))
        except SandboxInfrastructureError as exc:
            problem = f"infrastructure: the sandbox failed during the smoke test: {exc}"
            return _Proposed(msgspec.structs.replace(base, error=problem))
        record = msgspec.structs.replace(base, patch=candidate.to_dict(), digest=stacked.digest())
        return _Proposed(record, stacked)

    def _restack(self, record: OptimizerProposal, state: _State) -> _Proposed:
        if record.patch is None or record.digest is None:
            return _Proposed(record)
        stacked = state.patch.stacked(HarnessPatch.from_dict(record.patch))
        if stacked.digest() != record.digest:
            raise EnvharnessError(
                f"optimizer run {self.run_id}: the recorded candidate {record.candidate} of "
                f"iteration {record.iteration} no longer stacks to its recorded digest"
            )
        return _Proposed(record, stacked)

    # -- judging -------------------------------------------------------------------------------

    def _verdict(
        self,
        item: _Proposed,
        measured: dict[str, OptimizerMeasured],
        unique: dict[str, _Proposed],
        state: _State,
    ) -> CandidateVerdict:
        record = item.record
        index = record.candidate
        if record.error is not None:
            status: Literal["failed", "infrastructure"] = (
                "infrastructure" if record.error.startswith("infrastructure") else "failed"
            )
            return CandidateVerdict(candidate=index, status=status, reason=record.error)
        if record.problem is not None or record.digest is None:
            return CandidateVerdict(
                candidate=index,
                status="invalid",
                reason=record.problem or "no patch",
                mean_reward=0.0,
            )
        result = measured[record.digest]
        duplicate = unique[record.digest].record.candidate
        same = (
            f" (same patch as candidate {duplicate}, measured once)" if duplicate != index else ""
        )
        if result.error is not None or "infrastructure" in result.failures.values():
            why = result.error.message if result.error else "a hook call could not be run"
            return CandidateVerdict(
                candidate=index,
                status="infrastructure",
                reason=f"the rerun could not be measured: {why}{same}",
                digest=record.digest,
            )
        comparison = self._compare(result, state.reference, record.digest)
        regressions = tuple(
            s
            for s in comparison.worsened
            if (state.reference.values.get(s) or 0.0) >= self.config.solved
        )
        crashed = sorted(s for s, why in result.failures.items() if why == "patch")
        crash_note = f"; the patch's hooks failed in {', '.join(crashed)}" if crashed else ""
        if regressions:
            reason = f"breaks previously solved scenario(s): {', '.join(regressions)}"
        elif comparison.mean <= self.config.min_improvement:
            reason = f"no improvement (mean reward {comparison.mean:+.3f})"
        elif self.config.alpha is not None and comparison.p_value > (
            threshold := self.config.alpha / len(unique)
        ):
            reason = (
                f"not significant: sign test p={comparison.p_value:.3g} > alpha "
                f"{self.config.alpha}/{len(unique)} distinct candidate"
                f"{'s' if len(unique) != 1 else ''} = {threshold:.3g} "
                f"({len(comparison.improved)} improved, {len(comparison.worsened)} worsened)"
            )
        else:
            reason = ""
        return CandidateVerdict(
            candidate=index,
            status="rejected" if reason else "accepted",
            reason=(reason or f"improves {len(comparison.improved)} scenario(s)")
            + crash_note
            + same,
            digest=record.digest,
            mean_reward=comparison.mean,
            interval=comparison.interval,
            p_value=comparison.p_value,
            improved=comparison.improved,
            regressions=regressions,
        )

    def _compare(
        self, result: OptimizerMeasured, reference: OptimizerMeasured, key: str
    ) -> PairedComparison:
        return paired_comparison(
            result.values,
            reference.values,
            seed=self.config.seed,
            key=f"{self.run_id}:{reference.digest}:{key}",
            confidence=self.config.confidence,
            resamples=self.config.resamples,
        )

    async def _select(
        self,
        iteration: int,
        verdicts: list[CandidateVerdict],
        unique: dict[str, _Proposed],
        state: _State,
    ) -> tuple[_Proposed | None, list[CandidateVerdict], str, list[OptimizerMeasured]]:
        """The best eligible candidate that also holds on the regression suite and held-out
        split; every other eligible one is marked rejected, with why."""
        eligible = sorted(
            (v for v in verdicts if v.status == "accepted"),
            key=lambda v: (-(v.mean_reward or 0.0), v.candidate),
        )
        final = {v.candidate: v for v in verdicts}
        checks: list[OptimizerMeasured] = []
        chosen: _Proposed | None = None
        seen: set[str] = set()
        for verdict in eligible:
            digest = verdict.digest or ""
            if digest in seen:  # a duplicate of one already judged
                final[verdict.candidate] = msgspec.structs.replace(
                    verdict, status="rejected", reason="the same patch as an earlier candidate"
                )
                continue
            seen.add(digest)
            if chosen is not None:
                final[verdict.candidate] = msgspec.structs.replace(
                    verdict,
                    status="rejected",
                    reason=f"candidate {chosen.record.candidate} was chosen (its reward was "
                    f"higher, or equal and it ranked first; this one: {verdict.reason})",
                )
                continue
            item = unique[digest]
            problem = await self._gates(iteration, item, state, checks)
            if problem is not None:
                final[verdict.candidate] = msgspec.structs.replace(
                    verdict, status="rejected", reason=problem
                )
                continue
            chosen = item
        ordered = [final[v.candidate] for v in verdicts]
        if chosen is not None:
            best = final[chosen.record.candidate]
            reason = (
                f"accepted candidate {chosen.record.candidate}: mean reward "
                f"{best.mean_reward or 0.0:+.3f} over {state.version or 'the unpatched harness'}"
            )
        elif not verdicts:
            reason = "the engineer proposed nothing"
        else:
            counts: dict[str, int] = {}
            for verdict in ordered:
                counts[verdict.status] = counts.get(verdict.status, 0) + 1
            reason = (
                "no candidate accepted ("
                + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
                + ")"
            )
        return chosen, ordered, reason, checks

    async def _gates(
        self,
        iteration: int,
        item: _Proposed,
        state: _State,
        checks: list[OptimizerMeasured],
    ) -> str | None:
        """The regression suite, then the held-out split; the problem, or ``None``."""
        assert item.stacked is not None
        assert item.record.digest is not None
        version = _candidate_version(item.record.digest)
        candidate = item.record.candidate
        if self.suite and state.suite is not None:
            result = await self._measure(
                "regression", iteration, self.suite, item.stacked, version, candidate
            )
            checks.append(result)
            if result.error is not None or "infrastructure" in result.failures.values():
                return "the regression suite could not be measured"
            broken = [
                s.id
                for s in self.suite
                if (state.suite.values.get(s.id) or 0.0) >= self.config.solved
                and (result.values.get(s.id) or 0.0) < (state.suite.values.get(s.id) or 0.0)
            ]
            for scenario in broken:
                state.ledger.append(
                    LedgerEntry(
                        iteration=iteration,
                        candidate=candidate,
                        scenario=scenario,
                        suite="regression",
                    )
                )
            if broken:
                return f"breaks the regression suite: {', '.join(broken)}"
        if self.held and state.held is not None:
            result = await self._measure(
                "held_out", iteration, self.held, item.stacked, version, candidate
            )
            checks.append(result)
            if result.error is not None or "infrastructure" in result.failures.values():
                return "the held-out split could not be measured"
            comparison = self._compare(result, state.held, f"held:{item.record.digest}")
            broken = [
                s
                for s in comparison.worsened
                if (state.held.values.get(s) or 0.0) >= self.config.solved
            ]
            for scenario in broken:
                state.ledger.append(
                    LedgerEntry(
                        iteration=iteration,
                        candidate=candidate,
                        scenario=scenario,
                        suite="held_out",
                    )
                )
            if broken or comparison.mean < 0:
                return (
                    f"worse on the held-out split (mean {comparison.mean:+.3f}"
                    + (f"; breaks {', '.join(broken)}" if broken else "")
                    + ")"
                )
        return None

    # -- accepting -----------------------------------------------------------------------------

    async def _accept(
        self,
        iteration: int,
        chosen: _Proposed,
        measured: dict[str, OptimizerMeasured],
        checks: list[OptimizerMeasured],
        state: _State,
    ) -> str:
        assert chosen.stacked is not None
        assert chosen.record.digest is not None
        result = measured[chosen.record.digest]
        comparison = self._compare(result, state.reference, chosen.record.digest)
        recorded = self.memo.accepted.get(iteration)
        parent = state.version
        score = _summary(result, self.config).mean_reward
        if recorded is None:
            name = await self._next_version()
            recorded = OptimizerAccepted(
                version=name,
                iteration=iteration,
                candidate=chosen.record.candidate,
                digest=chosen.record.digest,
                patch=chosen.stacked.to_dict(),
                parent=parent,
                experiment_id=result.experiment_id,
                mean_reward=comparison.mean,
                interval=comparison.interval,
                p_value=comparison.p_value,
                score=score,
                engineer_tokens=state.spent.engineer_tokens,
                rerun_tokens=state.spent.rerun_tokens,
                seconds=state.spent.seconds,
            )
            await self._append(recorded)
        accepted = AcceptedVersion(
            version=recorded.version,
            parent=parent,
            digest=recorded.digest,
            patch=recorded.patch,
            iteration=iteration,
            candidate=recorded.candidate,
            experiment_id=recorded.experiment_id,
            mean_reward=recorded.mean_reward,
            interval=recorded.interval,
            p_value=recorded.p_value,
            score=score,
            improved=comparison.improved,
            engineer_tokens=recorded.engineer_tokens,
            rerun_tokens=recorded.rerun_tokens,
            seconds=recorded.seconds,
        )
        state.versions.append(accepted)
        state.patch, state.version = chosen.stacked, recorded.version
        state.reference = msgspec.structs.replace(result, version=recorded.version)
        for check in checks:
            if check.digest == chosen.record.digest and check.role == "held_out":
                state.held = check
            if check.digest == chosen.record.digest and check.role == "regression":
                state.suite = check
        state.spent = _Spent()
        document = self._patch_document(accepted)
        write_json(self.directory / "versions" / f"{accepted.version}.json", document)
        write_json(self.directory / "accepted_patch.json", document)
        self.optimizer._say(
            f"accepted {accepted.version}: reward {accepted.mean_reward:+.3f}, p="
            f"{accepted.p_value if accepted.p_value is not None else float('nan'):.3g}"
        )
        return accepted.version

    def _patch_document(self, accepted: AcceptedVersion) -> dict[str, Any]:
        return {
            "version": accepted.version,
            "parent": accepted.parent,
            "run_id": self.run_id,
            "environment": self.environment_name,
            "digest": accepted.digest,
            "patch": accepted.patch,
            "iteration": accepted.iteration,
            "candidate": accepted.candidate,
            "experiment_id": accepted.experiment_id,
            "mean_reward": accepted.mean_reward,
            "interval": accepted.interval,
            "p_value": accepted.p_value,
            "score": accepted.score,
        }

    async def _next_version(self) -> str:
        numbers = [
            int(match.group(1))
            for info in await self.store.harness_versions()
            if (match := _VERSION.fullmatch(info.version))
        ]
        return f"harness-v{max(numbers, default=0) + 1}"

    # -- measuring -----------------------------------------------------------------------------

    async def _measure(
        self,
        role: Literal["baseline", "candidate", "held_out", "regression"],
        iteration: int,
        scenarios: list[Scenario[Any]],
        patch: HarnessPatch,
        version: str | None,
        candidate: int | None,
    ) -> OptimizerMeasured:
        digest = patch.digest() if patch.hooks else None
        key = measurement_key(role, digest)
        cached = self.memo.measurements.get(key)
        if cached is not None and cached.error is None:
            return cached
        hooks: HarnessHooks | None = None
        if patch.hooks:
            hooks = ExecutableHarness.from_patch(
                patch, sandbox=self.sandbox, version=version, forbidden_terms=self.terms
            )
        label = role if candidate is None else f"{role} {candidate}"
        name = f"{self.config.name} {self.run_id} iteration {iteration} {label}"
        started = anyio.current_time()
        experiment_id: str | None = None
        try:
            experiment = self.harness.experiment(
                name,
                scenarios,
                turns=self.config.turns,
                trials=self.config.trials,
                seed=self.config.seed,
                max_concurrency=self.config.max_concurrency,
                hooks=hooks,
            )
            experiment_id = experiment.id
            await experiment.run()
            traces = await experiment_traces(self.store, experiment.id)
            folded = fold_traces(traces, [s.id for s in scenarios], self.config.metric)
        except ConfigurationError:
            raise
        except Exception as exc:  # noqa: BLE001 - the measurement failed, not the patch
            folded = Measurement(error=_error(exc))
        record = OptimizerMeasured(
            iteration=iteration,
            role=role,
            candidate=candidate,
            digest=digest,
            version=version,
            experiment_id=experiment_id,
            values=folded.values,
            failures=folded.failures,
            hooks=folded.hooks,
            hook_errors=folded.hook_errors,
            tokens=folded.tokens,
            seconds=anyio.current_time() - started,
            error=folded.error,
        )
        await self._append(record)
        self.memo.measurements[key] = record
        return record

    async def _append(self, *payloads: Any) -> None:
        async with self.lock:
            await self.log.append(*payloads)

    # -- the result ----------------------------------------------------------------------------

    def _solved_all(self, measured: OptimizerMeasured) -> bool:
        return all((v or 0.0) >= self.config.solved for v in measured.values.values())

    def _result(self, state: _State, status: str, reason: str | None) -> OptimizationResult:
        baseline = self.memo.measurements[
            measurement_key(
                "baseline",
                self.optimizer._base.digest() if self.optimizer._base is not None else None,
            )
        ]
        return OptimizationResult(
            run_id=self.run_id,
            status=status,
            reason=reason,
            directory=str(self.directory),
            environment=self.environment_name,
            engineer=f"{self.engineer.name} ({self.engineer.version})",
            baseline=_summary(_subset(baseline, self.train), self.config),
            final=_summary(state.reference, self.config),
            accepted_version=state.versions[-1].version if state.versions else None,
            versions=tuple(state.versions),
            iterations=tuple(state.iterations),
            ledger=tuple(state.ledger),
            patch=state.patch.to_dict() if state.patch.hooks else None,
            held_out=_summary(state.held, self.config) if state.held is not None else None,
        )

    def _write_report(self, state: _State, status: str, reason: str | None) -> None:
        self._write_files(self._result(state, status, reason))

    def _write_files(self, result: OptimizationResult) -> None:
        write_json(self.directory / "report.json", result)
        text = "\n".join(report_lines(result)) + "\n"
        write_bytes(self.directory / "report.txt", text.encode())


# -- helpers -------------------------------------------------------------------------------------


def _sandbox(config: OptimizationConfig) -> LocalSandbox | SubprocessSandbox:
    if config.sandbox == "local":
        return LocalSandbox(config.sandbox_limits)
    return SubprocessSandbox(
        config.sandbox_limits, workers=config.sandbox_workers or config.capacity
    )


def _candidate_version(digest: str) -> str:
    return f"candidate-{digest[:12]}"


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


def _disjoint(*groups: list[Scenario[Any]]) -> None:
    names = ("scenarios", "held_out", "regression")
    owner: dict[str, str] = {}
    for name, group in zip(names, groups, strict=True):
        for scenario in group:
            if scenario.id in owner:
                raise ConfigurationError(
                    f"scenario {scenario.id!r} is in both {owner[scenario.id]} and {name}; "
                    "the suites must not overlap"
                )
            owner[scenario.id] = name


def _require_success_signal(environment: Environment[Any, Any], metric: str | None) -> None:
    if not callable(getattr(environment, "score", None)):
        spec = environment.spec
        raise ConfigurationError(
            f"environment {spec.name}@{spec.version} has no score(), so nothing says whether a "
            "session succeeded; the optimizer needs a success signal: define "
            "score(state, scenario) returning ScoreReport(metrics=..., passed=True/False)"
        )


def _require_a_passable_gate(
    train: list[Scenario[Any]], alpha: float | None, candidates: int = 1
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
            f" ({for_all} for a gain to pass when all {candidates} candidates differ: the gate "
            "is alpha / distinct candidates)"
            if for_all > needed
            else ""
        )
        raise ConfigurationError(
            f"with {len(train)} scenario(s) no candidate could ever be accepted: the sign test's "
            f"smallest p-value is {smallest:.3g} (every scenario improved), over alpha {alpha}; "
            f"give at least {needed} scenarios{several}, or decide by the mean reward alone "
            "with OptimizationConfig(alpha=None) (envharness optimize --alpha 1)"
        )


def _code_changes(
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


def _subset(measured: OptimizerMeasured, scenarios: list[Scenario[Any]]) -> OptimizerMeasured:
    wanted = [s.id for s in scenarios]
    return msgspec.structs.replace(
        measured,
        values={s: measured.values.get(s) for s in wanted},
        failures={s: why for s, why in measured.failures.items() if s in wanted},
    )


def _summary(measured: OptimizerMeasured, config: OptimizationConfig) -> MeasurementSummary:
    """A measurement's figures over the scenarios it holds, named by its own version."""
    return summarize(measured, list(measured.values), config.solved, version=measured.version)


def _tokens(cost: Cost) -> int:
    return (cost.input_tokens or 0) + (cost.output_tokens or 0)


def _error(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(type=type(exc).__name__, message=str(exc)[:2000])


def _ending(exc: BaseException) -> tuple[Literal["stopped", "failed"], str]:
    if isinstance(exc, anyio.get_cancelled_exc_class() | KeyboardInterrupt):
        return "stopped", "the run was stopped"
    return "failed", f"{type(exc).__name__}: {exc}"
