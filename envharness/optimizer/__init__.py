"""The harness optimizer: learn executable hook patches from failure trajectories.

Baseline run → failure packet → an engineer's candidate patches → sandboxed reruns over the same
scenarios and seeds → keep a patch only when it measurably helps and breaks nothing that passed.
``docs/optimizer.md`` is the guide, ``docs/reproduction.md`` maps it to Harness-R1.
"""

from envharness.optimizer.engineer import (
    Engineer,
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
    Proposal,
)
from envharness.optimizer.errors import (
    PatchError,
    PatchFailure,
    PatchParseError,
    PatchPolicyError,
    PatchSchemaError,
    PatchSmokeTestError,
    SandboxInfrastructureError,
)
from envharness.optimizer.executable import (
    ExecutableHarness,
    SmokeReport,
    SmokeResult,
    contexts_from_packet,
    smoke_contexts,
    validate_patch,
)
from envharness.optimizer.loop import HarnessOptimizer, OptimizationConfig
from envharness.optimizer.mining import MiningEngineer
from envharness.optimizer.packets import PacketLimits, build_packet
from envharness.optimizer.parse import ParsedAnswer, parse_answer
from envharness.optimizer.patch import CodeHook, HarnessPatch
from envharness.optimizer.policy import PolicyViolation, check_patch
from envharness.optimizer.rerun import PatchMeasurement, Rerun, measure_patch, rerun_patch
from envharness.optimizer.results import (
    AcceptedVersion,
    IterationReport,
    LedgerEntry,
    MeasurementSummary,
    OptimizationResult,
)
from envharness.optimizer.sandbox import (
    LocalSandbox,
    Sandbox,
    SandboxLimits,
    SubprocessSandbox,
)
from envharness.optimizer.scripted import ScriptedEngineer
from envharness.optimizer.stats import PairedComparison, paired_comparison, sign_test

__all__ = [
    "AcceptedVersion",
    "CodeHook",
    "Engineer",
    "ExecutableHarness",
    "FailureCluster",
    "FailureExample",
    "FailurePacket",
    "FailureStep",
    "HarnessPatch",
    "HarnessOptimizer",
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
