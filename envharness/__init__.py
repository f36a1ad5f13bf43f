"""envharness: run agents in persistent environments and keep hash-chained evidence of it all.

The names here are the public API; ``tests/test_exports.py`` keeps this list honest.
"""

from envharness._version import __version__
from envharness.agent import Agent, AgentContext, AgentReply, Cost
from envharness.blocking import EnvironmentHarness
from envharness.command_agent import CommandAgent
from envharness.environment import (
    Environment,
    EnvironmentSpec,
    FindingSpec,
    Resolution,
    ScoreReport,
)
from envharness.errors import (
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
from envharness.experiments import AsyncExperiment, Experiment
from envharness.harness import AsyncEnvironmentHarness, Session
from envharness.records import Record
from envharness.runtime.branching import CheckpointRef
from envharness.runtime.compare import Comparison, TurnDifference
from envharness.runtime.experiment import ExperimentProgress, ExperimentResult, ExperimentSession
from envharness.scenario import Scenario
from envharness.store import ChainBreak, Lineage, RecordFilter, SessionInfo, VerifyReport

__all__ = [
    "Agent",
    "AgentContext",
    "AgentReply",
    "AsyncEnvironmentHarness",
    "AsyncExperiment",
    "ChainBreak",
    "CheckpointRef",
    "ChainConflictError",
    "CommandAgent",
    "Comparison",
    "ConfigurationError",
    "Cost",
    "EnvharnessError",
    "Environment",
    "EnvironmentHarness",
    "EnvironmentSpec",
    "Experiment",
    "ExperimentProgress",
    "ExperimentResult",
    "ExperimentSession",
    "FindingSpec",
    "Lineage",
    "NotFoundError",
    "Record",
    "RecordFilter",
    "Resolution",
    "Scenario",
    "ScenarioInputError",
    "ScoreReport",
    "Session",
    "SessionInfo",
    "StoreBusyError",
    "StoreError",
    "StoreLayoutError",
    "StoreVersionError",
    "TurnDifference",
    "VerifyReport",
    "__version__",
]
