"""The lower-level pieces, for when the harness's defaults are not enough.

- :class:`SessionRunner` — the seam: subclass it and override ``before_turn`` / ``after_turn``
  to interleave environment operations (``await self.operate(name, request, state)``) with
  turns; pass the subclass as ``runner=`` to the harness.
- :class:`EnvironmentOperation`, :class:`OperationResult` — imperative work whose name, version
  and JSON configuration are frozen into the evidence.
- :class:`ExperimentRunner` (the coordinator), :class:`ExperimentConfig` (an explicit,
  frozen experiment specification), :func:`derive_seed` — what ``harness.experiment`` uses.
- :class:`SessionPlan`, :class:`Resumption` — what a runner is given.
"""

from envharness.contracts.operations import EnvironmentOperation, OperationResult
from envharness.records import ExperimentConfig
from envharness.runtime.experiment import ExperimentRunner, derive_seed
from envharness.runtime.session import Resumption, SessionPlan, SessionRunner

ExperimentSpec = ExperimentConfig
"""The explicit, frozen specification of an experiment (the seed README's name for it)."""

__all__ = [
    "EnvironmentOperation",
    "ExperimentConfig",
    "ExperimentRunner",
    "ExperimentSpec",
    "OperationResult",
    "Resumption",
    "SessionPlan",
    "SessionRunner",
    "derive_seed",
]
