"""envharness: run agents in persistent environments and keep hash-chained evidence of it all.

The names here are the public API; ``tests/test_exports.py`` keeps this list honest.
"""

from typing import TYPE_CHECKING, Any

from envharness._version import __version__
from envharness.api.blocking import EnvironmentHarness
from envharness.api.experiments import AsyncExperiment, Experiment
from envharness.api.harness import AsyncEnvironmentHarness, Session
from envharness.api.sources import AsyncSources, Sources
from envharness.contracts.agent import Agent, AgentContext, AgentReply, Cost
from envharness.contracts.budget import Budget
from envharness.contracts.command_agent import CommandAgent
from envharness.contracts.environment import (
    Environment,
    EnvironmentSpec,
    FindingSpec,
    Resolution,
    ScoreReport,
)
from envharness.contracts.scenario import Scenario
from envharness.errors import (
    BudgetExhausted,
    ChainConflictError,
    ConfigurationError,
    EnvharnessError,
    NotFoundError,
    ScenarioInputError,
    StoreBusyError,
    StoreError,
    StoreLayoutError,
    StoreVersionError,
)
from envharness.hooks import (
    AddHint,
    Allow,
    BlockAndPrompt,
    HarnessHooks,
    HookContext,
    HookFailure,
    Hooks,
    HookView,
    Rewrite,
    StepSummary,
)
from envharness.records import Record
from envharness.runtime.branching import CheckpointRef
from envharness.runtime.compare import Comparison, TurnDifference
from envharness.runtime.executors import InProcessExecutor, ProcessPoolExecutor
from envharness.runtime.experiment import ExperimentProgress, ExperimentResult, ExperimentSession
from envharness.store import ChainBreak, Lineage, RecordFilter, SessionInfo, VerifyReport
from envharness.trajectories import (
    AdmissionError,
    Dataset,
    DatasetRow,
    Entitlement,
    EvidenceMismatchError,
    Snapshot,
    Trainer,
    Trajectory,
)

__all__ = [
    "AddHint",
    "AdmissionError",
    "Agent",
    "AgentContext",
    "AgentReply",
    "Allow",
    "AsyncEnvironmentHarness",
    "AsyncExperiment",
    "AsyncSources",
    "BlockAndPrompt",
    "Budget",
    "BudgetExhausted",
    "ChainBreak",
    "ChainConflictError",
    "CheckpointRef",
    "CommandAgent",
    "Comparison",
    "ConfigurationError",
    "Cost",
    "Dataset",
    "DatasetRow",
    "EnvharnessError",
    "Entitlement",
    "Environment",
    "EvidenceMismatchError",
    "EnvironmentHarness",
    "EnvironmentSpec",
    "Experiment",
    "ExperimentProgress",
    "ExperimentResult",
    "ExperimentSession",
    "FindingSpec",
    "HarnessHooks",
    "HookContext",
    "HookFailure",
    "HookView",
    "Hooks",
    "InProcessExecutor",
    "Lineage",
    "NotFoundError",
    "ProcessPoolExecutor",
    "RayExecutor",
    "Record",
    "RecordFilter",
    "Resolution",
    "Rewrite",
    "Scenario",
    "ScenarioInputError",
    "ScoreReport",
    "Session",
    "SessionInfo",
    "Snapshot",
    "Sources",
    "StepSummary",
    "StoreBusyError",
    "StoreError",
    "StoreLayoutError",
    "StoreVersionError",
    "Trainer",
    "Trajectory",
    "TurnDifference",
    "VerifyReport",
    "__version__",
]

if TYPE_CHECKING:
    from envharness.runtime.executors.ray import RayExecutor


def __getattr__(name: str) -> Any:
    """``RayExecutor`` is imported when first asked for: its modules are needed only by those
    who run on Ray."""
    if name == "RayExecutor":
        from envharness.runtime.executors.ray import RayExecutor

        return RayExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
