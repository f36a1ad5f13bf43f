"""Evidence compared across executors: what legitimately differs between two runs held still."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from envharness.records import Outcome, Record, SegmentStarted, SessionCreated, SessionStatus
from envharness.runtime.experiment import ExperimentResult
from envharness.store import read_store

VARYING = {"runner", "seconds"}
"""Payload fields that differ between any two runs (the process that ran the session, and
measured durations); ids differ too and are replaced by their place in the experiment."""


def _held_still(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _held_still(v, ids) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [_held_still(v, ids) for v in value]
    if isinstance(value, str):
        return ids.get(value, value)
    return value


async def evidence(store_dir: Path, result: ExperimentResult) -> list[list[Any]]:
    """Every session's records in experiment order, with what varies between runs held still."""
    store = await read_store(store_dir)
    ids = {result.id: "experiment"}
    ids.update({s.result.id: f"session {i}" for i, s in enumerate(result.sessions)})
    chains = []
    for session in result.sessions:
        chain = []
        async for record in store.records(session.result.id):
            payload = msgspec.json.decode(msgspec.json.encode(record.payload))
            place = (record.seq, record.kind, record.turn, record.participant)
            chain.append((*place, _held_still(payload, ids)))
        chains.append(chain)
    return chains


async def experiments_evidence(store_dir: Path, experiment_ids: Sequence[str]) -> list[Any]:
    """:func:`evidence` of several experiments of one store, each with its sessions ordered by
    (scenario, trial)."""
    store = await read_store(store_dir)
    found = []
    for experiment_id in experiment_ids:
        chains: dict[tuple[str, int], list[Any]] = {}
        for info in await store.sessions(experiment_id=experiment_id):
            records = [record async for record in store.records(info.id)]
            created = records[0].payload
            assert isinstance(created, SessionCreated)
            chains[(info.scenario_id, created.config.trial or 0)] = records
        ordered = [chains[key] for key in sorted(chains)]
        ids = {experiment_id: "experiment"}
        ids.update({records[0].session_id: f"session {i}" for i, records in enumerate(ordered)})
        found.append(
            [
                [
                    (
                        (record.seq, record.kind, record.turn, record.participant),
                        _held_still(msgspec.json.decode(msgspec.json.encode(record.payload)), ids),
                    )
                    for record in records
                ]
                for records in ordered
            ]
        )
    return found


@dataclass(frozen=True)
class Retried:
    """A session whose worker was killed: its records, the ``interrupted`` status that ended
    the lost attempt, and the segment that went on."""

    records: list[Record[Any]]
    lost: SessionStatus
    second: SegmentStarted


async def nothing_lost_nothing_duplicated(
    store_dir: Path, result: ExperimentResult, killed: Sequence[int], loss: str
) -> list[Retried]:
    """Check that every turn of every session is stored once and the store verifies, and that
    each session of a killed worker (pid in ``killed``) was interrupted, its reason naming
    ``loss``, and resumed once in a new segment on another worker; returns those sessions."""
    store = await read_store(store_dir)
    assert (await store.verify()).ok
    retried = []
    for session in result.sessions:
        records = [record async for record in store.records(session.result.id)]
        segments = [r.payload for r in records if isinstance(r.payload, SegmentStarted)]
        turns = collections.Counter(r.turn for r in records if isinstance(r.payload, Outcome))
        # every turn once: nothing acknowledged was lost, nothing written twice
        assert sorted(turns) == list(range(1, session.result.turns_completed + 1))
        assert set(turns.values()) == {1}
        if segments[0].runner is None or segments[0].runner.pid not in killed:
            assert len(segments) == 1
            continue
        statuses = [r.payload for r in records if isinstance(r.payload, SessionStatus)]
        assert [s.status for s in statuses] == ["running", "interrupted", "running", "completed"]
        assert loss in (statuses[1].reason or "")
        _, second = segments
        assert (second.segment, second.cause, second.previous) == (1, "resume", 0)
        assert second.runner is not None
        assert second.runner.pid not in killed
        retried.append(Retried(records, statuses[1], second))
    assert retried
    return retried
