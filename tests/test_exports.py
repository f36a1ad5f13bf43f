"""The public surface is exactly the documented one (docs/python-api.md lists these names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import envharness

PAGE = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"

DOCUMENTED = {
    "AddHint",
    "Agent",
    "AgentContext",
    "Allow",
    "BlockAndPrompt",
    "HarnessHooks",
    "HookContext",
    "HookFailure",
    "HookView",
    "Hooks",
    "Rewrite",
    "StepSummary",
    "AgentReply",
    "AsyncEnvironmentHarness",
    "AsyncExperiment",
    "Budget",
    "BudgetExhausted",
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
    # where sessions run (docs/scale-out.md); RayExecutor is imported when first asked for
    "InProcessExecutor",
    "ProcessPoolExecutor",
    "RayExecutor",
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
    # trajectories, snapshots, datasets (docs/trajectories.md)
    "AdmissionError",
    "AsyncSources",
    "Dataset",
    "DatasetRow",
    "Entitlement",
    "EvidenceMismatchError",
    "Snapshot",
    "Sources",
    "Trainer",
    "Trajectory",
}


def test_all_lists_exactly_the_documented_names() -> None:
    assert set(envharness.__all__) == DOCUMENTED


def test_every_exported_name_exists() -> None:
    missing = [name for name in envharness.__all__ if not hasattr(envharness, name)]
    assert missing == []


def test_errors_share_one_root() -> None:
    errors = [
        getattr(envharness, name)
        for name in envharness.__all__
        if name.endswith("Error") and name != "EnvharnessError"
    ]
    assert all(issubclass(error, envharness.EnvharnessError) for error in errors)


def test_the_page_names_every_exported_name() -> None:
    page = PAGE.read_text(encoding="utf-8")
    unnamed = [name for name in envharness.__all__ if not re.search(rf"\b{name}\b", page)]
    assert unnamed == [], f"{PAGE.name} does not name {unnamed}"


def test_ray_executor_is_imported_only_when_asked_for() -> None:
    """A plain install (no Ray) imports envharness without the Ray executor's modules."""
    assert "RayExecutor" not in vars(envharness)  # served by the module's __getattr__
    from envharness.runtime.executors.ray import RayExecutor

    assert envharness.RayExecutor is RayExecutor
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchExecutor'"):
        _ = envharness.NoSuchExecutor  # type: ignore[attr-defined]
