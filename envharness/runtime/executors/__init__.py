"""Where sessions run (issue 14): in this process, in a local process pool, or on Ray.

An experiment hands each session to an :class:`Executor`; the turn loop is the same code
everywhere, and the evidence is always committed by the one writer of the driver's store.
"""

from __future__ import annotations

from envharness.runtime.executors.driver import RemoteExecutor, WorkerError
from envharness.runtime.executors.in_process import InProcessExecutor
from envharness.runtime.executors.pool import ProcessPoolExecutor
from envharness.runtime.executors.seam import Executor, ExperimentWork, SessionRuns, SessionWork

__all__ = [
    "Executor",
    "ExperimentWork",
    "InProcessExecutor",
    "ProcessPoolExecutor",
    "RemoteExecutor",
    "SessionRuns",
    "SessionWork",
    "WorkerError",
]
