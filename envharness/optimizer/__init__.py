"""The harness optimizer: learn executable hook patches from failure trajectories.

Baseline run → failure packet → an engineer's candidate patches → sandboxed reruns over the same
scenarios and seeds → keep a patch only when it measurably helps and breaks nothing that passed.
``docs/optimizer.md`` is the guide, ``docs/reproduction.md`` maps it to Harness-R1.

The package, from its base down (each part imports only those above it; this module is the
face and re-exports the public names):

- ``host`` — what the optimizer needs from a harness, as typed Protocols (it never imports the
  API layer);
- ``engineers/`` — the engineer contract, failure packets mined from evidence, and the mining
  and scripted engineers (its ``__init__`` maps its modules);
- ``patches/`` — a patch's parsing, AST policy, sandboxes and the executable harness (its
  ``__init__`` maps its modules);
- the loop, one module per concern:

  - ``stats`` — paired comparisons: the paired mean, its bootstrap interval, the sign test;
  - ``results`` — what a run returns and writes: the result, the report, and
    :class:`HarnessVersion`, the one shape of an accepted version;
  - ``measure`` — a rerun's evidence folded into a score per scenario;
  - ``versions`` — accepted harness versions read back from the store (the one place a
    :class:`HarnessVersion` is built): list, show, diff, load;
  - ``runlog`` — the run's own chain of evidence, and what a resumed run learns from it;
  - ``history`` — a run read back from its chain for the service and the viewer;
  - ``inputs`` — what a run is given, checked before anything is spent;
  - ``config`` — :class:`OptimizationConfig`: how a run searches and what it accepts;
  - ``rerun`` — measuring a patch: rerun scenarios with it and without it;
  - ``context`` — one run's fixed inputs, and the recording and measuring every step does;
  - ``state`` — what a run holds between steps: the accepted harness and what it spent;
  - ``gate`` — each candidate's verdict, then the one selected;
  - ``accept`` — accepting a candidate as ``harness-vN``;
  - ``proposals`` — asking the engineer for candidates and checking each answer;
  - ``report`` — the run's result and report files, from its state;
  - ``run`` — one run, step by step: baseline, then iterations until done;
  - ``loop`` — :class:`HarnessOptimizer`, the face: checks its inputs, opens the run and sandbox.
"""

import warnings
from typing import Any

from envharness.optimizer.engineers.contract import (
    Engineer,
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
    Proposal,
)
from envharness.optimizer.engineers.mining import MiningEngineer
from envharness.optimizer.engineers.packets import PacketLimits, build_packet
from envharness.optimizer.engineers.scripted import ScriptedEngineer
from envharness.optimizer.loop import HarnessOptimizer, OptimizationConfig
from envharness.optimizer.patches.errors import (
    PatchError,
    PatchFailure,
    PatchParseError,
    PatchPolicyError,
    PatchSchemaError,
    PatchSmokeTestError,
    SandboxInfrastructureError,
)
from envharness.optimizer.patches.executable import (
    ExecutableHarness,
    SmokeReport,
    SmokeResult,
    contexts_from_packet,
    smoke_contexts,
    validate_patch,
)
from envharness.optimizer.patches.parse import ParsedAnswer, parse_answer
from envharness.optimizer.patches.patch import CodeHook, HarnessPatch
from envharness.optimizer.patches.policy import PolicyViolation, check_patch
from envharness.optimizer.patches.sandbox import (
    LocalSandbox,
    Sandbox,
    SandboxLimits,
    SubprocessSandbox,
)
from envharness.optimizer.rerun import PatchMeasurement, Rerun, measure_patch, rerun_patch
from envharness.optimizer.results import (
    HarnessVersion,
    IterationReport,
    LedgerEntry,
    MeasurementSummary,
    OptimizationResult,
)
from envharness.optimizer.stats import PairedComparison, paired_comparison, sign_test

__all__ = [
    "CodeHook",
    "Engineer",
    "ExecutableHarness",
    "FailureCluster",
    "FailureExample",
    "FailurePacket",
    "FailureStep",
    "HarnessOptimizer",
    "HarnessPatch",
    "HarnessVersion",
    "IterationReport",
    "LedgerEntry",
    "LocalSandbox",
    "MeasurementSummary",
    "MiningEngineer",
    "OptimizationConfig",
    "OptimizationResult",
    "PacketLimits",
    "PairedComparison",
    "ParsedAnswer",
    "PatchError",
    "PatchFailure",
    "PatchMeasurement",
    "PatchParseError",
    "PatchPolicyError",
    "PatchSchemaError",
    "PatchSmokeTestError",
    "PolicyViolation",
    "Proposal",
    "Rerun",
    "Sandbox",
    "SandboxInfrastructureError",
    "SandboxLimits",
    "ScriptedEngineer",
    "SmokeReport",
    "SmokeResult",
    "SubprocessSandbox",
    "build_packet",
    "check_patch",
    "contexts_from_packet",
    "measure_patch",
    "paired_comparison",
    "parse_answer",
    "rerun_patch",
    "sign_test",
    "smoke_contexts",
    "validate_patch",
]


def __getattr__(name: str) -> Any:
    """``AcceptedVersion``, the name :class:`HarnessVersion` had while the store's versions had
    a shape of their own: still importable, with a warning, until the next minor release."""
    if name == "AcceptedVersion":
        warnings.warn(
            "envharness.optimizer.AcceptedVersion is now HarnessVersion (one shape for a "
            "version, returned, written and read back); import HarnessVersion instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return HarnessVersion
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
