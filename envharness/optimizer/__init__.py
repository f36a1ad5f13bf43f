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

__all__ = [
    "Engineer",
    "FailureCluster",
    "FailureExample",
    "FailurePacket",
    "FailureStep",
    "Proposal",
]
