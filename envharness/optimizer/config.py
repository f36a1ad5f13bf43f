"""How an optimizer run searches and what it accepts: :class:`OptimizationConfig`.

The configuration is frozen into the run's chain (``optimizer.started``) as an
:class:`~envharness.records.OptimizerConfigRef`; :meth:`OptimizationConfig.to_record` and
:meth:`OptimizationConfig.from_record` are the two directions, so a resumed run goes on with
exactly the settings it was started with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envharness._version import __version__
from envharness.contracts.environment import Environment
from envharness.errors import ConfigurationError
from envharness.optimizer.engineers.contract import Engineer
from envharness.optimizer.inputs import Suites
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.sandbox import LocalSandbox, SandboxLimits, SubprocessSandbox
from envharness.records import OptimizerConfigRef, ParticipantRef
from envharness.runtime.executors.seam import Executor

__all__ = ["OptimizationConfig", "Progress"]

Progress = Callable[[str], None]
"""Called with one line of text at each step (the CLI prints them)."""


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
    number of distinct per-scenario outcome vectors measured in that iteration (Bonferroni): the
    loop keeps the best of several tries, so without the correction K candidates of no effect
    would pass the gate far more often than ``alpha``; candidates with the same outcomes are one
    test. With n scenarios the smallest p-value is ``2**-n``, so a gain among K differently
    behaving candidates can pass only with n >= log2(K / alpha) scenarios (8 for K=8 at 0.05).
    ``metric`` scores by a score metric instead of pass/fail. ``directory`` defaults to
    ``<store>/optimizer/<run id>`` (``./envharness-optimizer/<run id>`` on a PostgreSQL
    store). ``executor`` is where each rerun's sessions run (``None``: in this process;
    ``ProcessPoolExecutor(workers=N)``: N processes in all, each opening a sandbox of the same
    kind for the hooks, split among the reruns that run at once, up to ``capacity`` — with
    fewer workers than ``capacity``, only as many reruns as workers run at once:
    :mod:`~envharness.optimizer.shares`);
    not recorded, since it changes no measurement.
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
    executor: Executor | None = None

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
        if self.executor is not None and not callable(getattr(self.executor, "serving", None)):
            raise ConfigurationError(
                "OptimizationConfig.executor must be an executor from "
                "envharness.runtime.executors (ProcessPoolExecutor(workers=N), RayExecutor(...)) "
                f"or None, not {type(self.executor).__name__}"
            )

    @classmethod
    def from_record(
        cls, ref: OptimizerConfigRef, *, executor: Executor | None = None
    ) -> OptimizationConfig:
        """The configuration a run recorded (a resumed run goes on with it; the sandbox's limits
        and the engineer's timeout are the defaults, they change no verdict); its reruns run in
        ``executor``, the resuming caller's choice."""
        return cls(
            executor=executor,
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

    def to_record(
        self,
        *,
        environment: Environment[Any, Any],
        participants: dict[str, ParticipantRef],
        engineer: Engineer,
        suites: Suites,
        base: HarnessPatch | None,
        base_version: str | None,
        directory: Path,
    ) -> OptimizerConfigRef:
        """What ``optimizer.started`` freezes: these settings and what they apply to (the
        environment, agents, engineer, scenario ids, base patch and run directory)."""
        train, held_out, regression = suites.ids()
        return OptimizerConfigRef(
            name=self.name,
            environment=environment.spec.reference(),
            participants=participants,
            engineer=engineer.name,
            engineer_version=engineer.version,
            scenarios=train,
            held_out=held_out,
            regression=regression,
            candidates=self.candidates,
            iterations=self.iterations,
            turns=self.turns,
            trials=self.trials,
            seed=self.seed,
            capacity=self.capacity,
            sandbox=self.sandbox,
            alpha=self.alpha,
            confidence=self.confidence,
            metric=self.metric,
            solved=self.solved,
            min_improvement=self.min_improvement,
            resamples=self.resamples,
            smoke_test=self.smoke_test,
            stop_when_solved=self.stop_when_solved,
            max_concurrency=self.max_concurrency,
            base_version=base_version,
            base_digest=base.digest() if base is not None else None,
            directory=str(directory),
            envharness_version=__version__,
        )

    def new_sandbox(self) -> LocalSandbox | SubprocessSandbox:
        """The sandbox this configuration asks for (not yet open: ``async with`` it)."""
        if self.sandbox == "local":
            return LocalSandbox(self.sandbox_limits)
        return SubprocessSandbox(self.sandbox_limits, workers=self.sandbox_workers or self.capacity)
