"""Journals written row by row (any shape, no runtime), sessions run for real, and tampering."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from envharness import AsyncEnvironmentHarness, EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import (
    ActionAttempted,
    ActionExecuted,
    EnvironmentRef,
    ErrorInfo,
    Finding,
    Observation,
    Outcome,
    ParticipantRef,
    Payload,
    RecordRow,
    ScenarioRef,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    new_id,
)
from envharness.store import open_store
from envharness.store.database import DATABASE_NAME

REACH = Scenario(id="reach", input=SyntheticScenarioInput(starting_total=-3, target=0))
"""Reaches its target (passed) at turn 3."""
MISS = Scenario(id="miss", input=SyntheticScenarioInput(starting_total=-30, target=0))
"""Runs out of turns before its target (failed score) unless given 30 turns."""


def harness(store: Path, **options: Any) -> EnvironmentHarness:
    return EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}, **options
    )


def async_harness(store: Path) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )


def config(participants: Sequence[str] = ("alice",)) -> SessionConfig:
    return SessionConfig(
        environment=EnvironmentRef(
            name="hand-written",
            version="1",
            turn_order="simultaneous",
            roles=("agent",),
            input_type="tests.Input",
        ),
        participants={
            name: ParticipantRef(role="agent", implementation="p@1") for name in participants
        },
        scenario=ScenarioRef(id="s1", input={}),
        seed=0,
        turns=3,
        envharness_version="test",
    )


class Journal:
    """Seals a session's rows in order; ``write`` commits them (with their state blobs)."""

    def __init__(self, participants: Sequence[str] = ("alice",)) -> None:
        self.chain = SessionChain(new_id("ses"))
        self.rows: list[RecordRow] = []
        self.blobs: dict[str, bytes] = {}
        self.participants = tuple(participants)
        self.add(SessionCreated(config=config(participants)))

    @property
    def id(self) -> str:
        return self.chain.session_id

    def add(self, payload: Payload, **where: Any) -> RecordRow:
        row = self.chain.seal(payload, **where)
        self.rows.append(row)
        return row

    def start(self, segment: int = 0, turn: int = 0, **options: Any) -> None:
        self.add(SessionStatus(status="running"))
        self.add(SegmentStarted(segment=segment, turn=turn, **options))

    def turn(self, turn: int, *, done: bool = False) -> RecordRow:
        for name in self.participants:
            self.add(Observation(observation={"turn": turn}), turn=turn, participant=name)
            self.add(ActionAttempted(action={"move": turn}), turn=turn, participant=name)
            self.add(ActionExecuted(action={"move": turn}), turn=turn, participant=name)
        state = f'{{"turn":{turn}}}'.encode()
        digest = hashlib.sha256(state).hexdigest()
        self.blobs[digest] = state
        return self.add(Outcome(state=digest, done=done), turn=turn)

    def score(
        self, passed: bool | None = True, version: str = "judge@1", **metrics: float | None
    ) -> None:
        self.add(Score(version=version, metrics=metrics or {"accuracy": 1.0}, passed=passed))

    def end(self, status: Any = "completed", segment: int = 0, **options: Any) -> None:
        self.add(SessionStatus(status=status, **options))
        self.add(SegmentEnded(segment=segment, status=status))

    def complete(self, turns: int = 2, **score: Any) -> Journal:
        self.start()
        for turn in range(1, turns + 1):
            self.turn(turn, done=turn == turns)
        self.score(**score)
        self.add(Finding(title="note", cites=(self.rows[-2].seq,)))
        self.end()
        return self

    def failed(self) -> Journal:
        self.start()
        self.turn(1)
        self.end(
            "failed",
            reason="agent 'alice' raised",
            error=ErrorInfo(type="ValueError", message="boom"),
        )
        return self

    async def write(self, store: Path) -> str:
        async with open_store(store) as opened:
            await opened.append(self.rows, self.blobs)
        return self.id


def write(store: Path, *journals: Journal) -> list[str]:
    async def main() -> list[str]:
        return [await journal.write(store) for journal in journals]

    return anyio.run(main)


@contextmanager
def tampering(store: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection with the append-only and immutability triggers dropped."""
    connection = sqlite3.connect(store / DATABASE_NAME, isolation_level=None, timeout=10)
    try:
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall():
            connection.execute(f"DROP TRIGGER {name}")
        yield connection
    finally:
        connection.close()


def flip_payload_byte(store: Path, session_id: str, seq: int) -> None:
    """Change one byte of a record's stored payload: its last digit, so it still decodes."""
    with tampering(store) as connection:
        (payload,) = connection.execute(
            "SELECT payload FROM records WHERE session_id = ? AND seq = ?", (session_id, seq)
        ).fetchone()
        data = bytearray(payload)
        index = max(i for i, byte in enumerate(data) if chr(byte).isdigit())
        data[index] = ord("7") if data[index] != ord("7") else ord("8")
        connection.execute(
            "UPDATE records SET payload = ? WHERE session_id = ? AND seq = ?",
            (bytes(data), session_id, seq),
        )
