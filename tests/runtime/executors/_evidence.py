"""Evidence compared across executors: what legitimately differs between two runs held still.

A store is named by its directory or by a ``postgresql://`` URL: the same checks hold on both.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import msgspec

from envharness.records import Outcome, Record, SegmentStarted, SessionCreated, SessionStatus
from envharness.runtime.experiment import ExperimentResult
from envharness.store.locate import reading_store

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


Location = str | PathLike[str]
"""A store's directory, or a PostgreSQL URL."""


async def evidence(location: Location, result: ExperimentResult) -> list[list[Any]]:
    """Every session's records in experiment order, with what varies between runs held still."""
    ids = {result.id: "experiment"}
    ids.update({s.result.id: f"session {i}" for i, s in enumerate(result.sessions)})
    chains = []
    async with reading_store(location) as store:
        for session in result.sessions:
            chain = []
            async for record in store.records(session.result.id):
                payload = msgspec.json.decode(msgspec.json.encode(record.payload))
                place = (record.seq, record.kind, record.turn, record.participant)
                chain.append((*place, _held_still(payload, ids)))
            chains.append(chain)
    return chains


async def experiments_evidence(location: Location, experiment_ids: Sequence[str]) -> list[Any]:
    """:func:`evidence` of several experiments of one store, each with its sessions ordered by
    (scenario, trial)."""
    found = []
    async with reading_store(location) as store:
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
                [[_place_and_payload(record, ids) for record in records] for records in ordered]
            )
    return found


def _place_and_payload(record: Record[Any], ids: dict[str, str]) -> tuple[Any, Any]:
    place = (record.seq, record.kind, record.turn, record.participant)
    return place, _held_still(msgspec.json.decode(msgspec.json.encode(record.payload)), ids)


@dataclass(frozen=True)
class Retried:
    """A session whose worker was killed: its records, the ``interrupted`` status that ended
    the lost attempt, and the segment that went on."""

    records: list[Record[Any]]
    lost: SessionStatus
    second: SegmentStarted


async def nothing_lost_nothing_duplicated(
    location: Location, result: ExperimentResult, killed: Sequence[int], loss: str
) -> list[Retried]:
    """Check that every turn of every session is stored once and the store verifies, and that
    each session of a killed worker (pid in ``killed``) was interrupted, its reason naming
    ``loss``, and resumed once in a new segment on another worker; returns those sessions."""
    async with reading_store(location) as store:
        assert (await store.verify()).ok
        stored = {
            session.result.id: [record async for record in store.records(session.result.id)]
            for session in result.sessions
        }
    retried = []
    for session in result.sessions:
        records = stored[session.result.id]
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
