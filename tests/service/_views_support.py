"""A store made by a real run of a small card-table game, for the text views, artifacts and the
new record kinds (``outcome.participant``, rewards, truncation, per-participant scores).

The environment says who acts (alice, then bob, then alice), renders each player's view as
ANSI-coloured text (with markup and hostile escape sequences in it), tells the player who did
not act what happened (a private ``outcome.participant`` with a reward), keeps artifacts (a
text board, a PNG, an HTML page and an SVG with scripts in them) and is cut short by its time
limit after three moves (``truncated``). Every private value carries its owner's name
(``secret-alice-…``, ``told-bob-…``) so a test can say exactly what a token must not see.

``python -m tests.service._views_support STORE`` plays it slowly in a process of its own, a
frame every move, for the browser test's live timeline (:func:`main`).

A second, hand-written session holds a ``protocol.violation`` for alice and one for bob, each
keeping its offending bytes: the records through which a participant may fetch an artifact.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec

from envharness import EnvironmentHarness, EnvironmentSpec, Resolution, Scenario
from envharness.contracts.environment import ScoreReport
from envharness.records import ProtocolViolation
from envharness.store import open_store
from tests.service._support import SessionWriter

PLAYERS = ("alice", "bob")
LIMIT = 3
"""Moves after which the table's time runs out: the session ends truncated, not done."""
HOSTILE = "\x1b]0;pwned\x07\x1b[2J<script>alert('view')</script>"
"""In every text view: a terminal title, a screen clear and markup; none may reach a reader."""
HTML_PAGE = b"<html><body><script>alert('artifact')</script></body></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert("svg")</script></svg>'
OFFENDING = {"alice": b"not json from alice\n", "bob": b"not json from bob\n"}


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG of red pixels, made here (no image library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def board(moves: int) -> bytes:
    return f"\x1b[32mtable after move {moves}\x1b[0m\n<b>not markup</b>\n".encode()


class TableInput(msgspec.Struct, frozen=True):
    limit: int = LIMIT


class Table(msgspec.Struct, frozen=True):
    to_move: str
    moves: int = 0
    chips: dict[str, int] = {}


class Bet(msgspec.Struct, frozen=True):
    chips: int


class CardTable:
    """Players alternate; each sees only its own hand."""

    spec = EnvironmentSpec(
        name="card-table",
        version="1",
        input_type=TableInput,
        action_type=Bet,
        roles=("player",),
        turn_order="environment",
        state_type=Table,
    )

    frames = False
    """Keep a frame every move (the slow game), not only after move 2."""

    def __init__(self) -> None:
        self.limit = LIMIT

    def initialize(self, input: TableInput, rng: Random, roster: Mapping[str, str]) -> Table:
        self.limit = input.limit
        return Table(to_move="alice", chips=dict.fromkeys(PLAYERS, 0))

    def acting(self, state: Table) -> Sequence[str]:
        return [state.to_move]

    def observe(self, state: Table, participant: str) -> dict[str, Any]:
        return {"hand": f"secret-{participant}-hand-{state.moves}", "chips": state.chips}

    def render_text(self, state: Table, participant: str) -> str:
        return (
            f"\x1b[1;31mhand\x1b[0m secret-{participant}-view-{state.moves}\n"
            f"\x1b[38;5;208mchips\x1b[39m {state.chips[participant]}\t{HOSTILE}\n"
        )

    def resolve(self, state: Table, actions: Mapping[str, Bet]) -> Resolution:
        ((mover, bet),) = actions.items()
        other = "bob" if mover == "alice" else "alice"
        chips = dict(state.chips)
        chips[mover] += bet.chips
        chips[other] -= bet.chips
        after = Table(to_move=other, moves=state.moves + 1, chips=chips)
        artifacts: dict[str, bytes] = {"board.txt": board(after.moves)}
        if after.moves == 2 or self.frames:
            artifacts.update({"frame.png": png(), "page.html": HTML_PAGE, "drawing.svg": SVG})
        return Resolution(
            state=after,
            outcomes={mover: {"bet": bet.chips}, other: {"told": f"told-{other}-{after.moves}"}},
            rewards={mover: float(bet.chips), other: -float(bet.chips)},
            artifacts=artifacts,
            truncated=after.moves >= self.limit,
        )

    def intervene(self, state: Table, intervention: Mapping[str, Any]) -> Table:
        return state

    def score(self, state: Table, scenario: Any) -> ScoreReport:
        return ScoreReport(
            metrics={"moves": float(state.moves)},
            per_participant={p: {"chips": float(state.chips[p])} for p in PLAYERS},
        )


class Better:
    implementation = "better@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"chips": 2}


def write_views_store(store: Path) -> tuple[str, str]:
    """Play the table (it is cut short after :data:`LIMIT` moves) and write the violations
    session; their ids."""
    harness = EnvironmentHarness(
        store, environment=CardTable, agents={name: Better for name in PLAYERS}
    )
    session = harness.run(Scenario(id="table", input=TableInput()), turns=10)
    assert session.status == "completed", session.reason
    return session.id, anyio.run(_write_violations, store)


async def _write_violations(store_path: Path) -> str:
    writer = SessionWriter(PLAYERS, turns=1)
    async with open_store(store_path) as store:
        rows, blobs = writer.start()
        for name in PLAYERS:
            sha256 = await store.put_artifact(OFFENDING[name])
            assert sha256 == hashlib.sha256(OFFENDING[name]).hexdigest()
            violation = ProtocolViolation(
                problem=f"invalid-json: {name} sent a line that is not JSON",
                artifact=sha256,
                excerpt=OFFENDING[name].decode(),
            )
            rows.append(writer.chain.seal(violation, turn=1, participant=name))
        await store.append(rows, blobs)
        await store.append(writer.finish(status="failed"))
    return writer.id


SLOW_SECONDS = 0.4
SLOW_MOVES = 10


class SlowTable(CardTable):
    frames = True


class SlowBetter(Better):
    implementation = "slow-better@1"
    runs_inline = False  # it sleeps: the harness runs it in a worker thread

    def act(self, observation: Any) -> dict[str, int]:
        time.sleep(SLOW_SECONDS)
        return super().act(observation)


def main(store: str) -> int:
    """The table, a move every :data:`SLOW_SECONDS`, cut short after :data:`SLOW_MOVES`."""
    harness = EnvironmentHarness(
        store, environment=SlowTable, agents={name: SlowBetter for name in PLAYERS}
    )
    try:
        harness.run(Scenario(id="slow-table", input=TableInput(limit=SLOW_MOVES)), turns=100)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
