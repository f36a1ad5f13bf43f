"""The seam through which a trainer is injected — locally, by the user; never by the service.

envharness prepares data and never trains: a :class:`Trainer` is any object with a ``train``
method, given the dataset's rows (TRL's conversational format) and what the dataset is. The
harness calls it in a worker thread (training is long and blocking) and returns what it
returns. No part of the local service calls a trainer: the service has no route that runs
user code, and this module is not imported by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from envharness.trajectories.datasets import Dataset, DatasetRow

__all__ = ["Trainer"]


@runtime_checkable
class Trainer(Protocol):
    """Trains on a dataset's rows, e.g. wrapping ``trl.SFTTrainer`` or a reward-weighted loop.

    ``rows`` are :class:`DatasetRow` values (``msgspec.to_builtins`` makes them plain dicts;
    :func:`envharness.trajectories.files.to_hf_dataset` a ``datasets.Dataset``). Each row's
    ``reward`` is its participant's; a reinforcement-learning loop also has ``step_rewards``
    (one per assistant message) and ``terminated`` / ``truncated`` to bootstrap from, or not.
    """

    def train(self, rows: Sequence[DatasetRow], dataset: Dataset) -> Any: ...
