"""Datasets from model agents: a participant whose agent recorded its conversation gets that
conversation as its row, message for message (system prompt, tool calls, tool results), with its
own reward; everyone else's rows are rebuilt exactly as before; half of each is refused."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness import (
    AgentReply,
    AsyncEnvironmentHarness,
    ConfigurationError,
    EnvironmentHarness,
    Hooks,
)
from envharness.hooks import BlockAndPrompt
from envharness.records import (
    ActionAttempted,
    ActionExecuted,
    EnvironmentRef,
    Observation,
    Outcome,
    ParticipantRef,
    RecordRow,
    ScenarioRef,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    Transcript,
    canonical,
    digest_of,
)
from envharness.store import read_store
from envharness.trajectories import AdmissionError, DatasetRow, Trajectory, TrajectoryError
from envharness.trajectories.binding import EvidenceRow
from envharness.trajectories.conversations import conversations
from envharness.trajectories.files import jsonl_line, write_parquet
from envharness.trajectories.model import Transcribed
from envharness.trajectories.projection import project_rows
from tests.trajectories._duel import Duel, Player, duel
from tests.trajectories._support import Journal, write

SYSTEM = "You play the duel: call move."


class Chatty:
    """Shaped like a model-backed agent: it keeps its conversation, answers with a tool call
    (or, without tools, with JSON text), and returns only the messages each answer added."""

    implementation = "chatty@1"
    runs_inline = True

    def __init__(self, *, tools: bool = True, forget: int | None = None) -> None:
        self.conversation: list[dict[str, Any]] = []
        self.tools = tools
        self.forget = forget
        """The answer (counted from 1) returned without its transcript."""
        self.calls = 0

    def act(self, observation: Any) -> AgentReply:
        added: list[dict[str, Any]] = []
        if not self.conversation:
            added.append({"role": "system", "content": SYSTEM})
        elif self.tools:  # the last call's result, before the next question
            added.append({"role": "tool", "tool_call_id": f"call_{self.calls}", "content": "done"})
        self.calls += 1
        added.append({"role": "user", "content": canonical(observation).decode()})
        if self.tools:
            call = {"name": "move", "arguments": '{"move": 1}'}
            calls = [{"id": f"call_{self.calls}", "type": "function", "function": call}]
            added.append({"role": "assistant", "content": None, "tool_calls": calls})
        else:
            added.append({"role": "assistant", "content": '{"move": 1}'})
        self.conversation += added
        if self.calls == self.forget:
            return AgentReply({"move": 1})
        return AgentReply({"move": 1}, transcript=tuple(added))


def veto_alices_first_answer(ctx: Any, nb: dict[str, Any]) -> Any:
    if ctx.participant == "alice" and not nb.get("vetoed"):
        nb["vetoed"] = True
        return BlockAndPrompt(message="think again")
    return None


@dataclass(frozen=True)
class Games:
    store: Path
    chatty: str
    """alice and bob both record their conversations (tool calls); alice wins in 3 moves."""
    half: str
    """alice records hers (no tools), bob is a plain agent."""
    forgetful: str
    """alice records the first of her two answers only; bob is a plain agent."""
    plain: str
    """Two plain agents: no transcripts at all."""
    vetoed: str
    """alice (no tools) has her first answer vetoed by a hook and answers again."""

    def harness(self) -> EnvironmentHarness:
        return EnvironmentHarness(self.store, environment=Duel, agents={"alice": Player})

    def rows(self, name: str, *sessions: str, **options: Any) -> dict[str, DatasetRow]:
        harness = self.harness()
        snapshot = harness.snapshot(list(sessions), entitlement="own games")
        harness.create_dataset(name, [snapshot.metadata.id], reward="chips", **options)
        return {row.participant: row for row in harness.dataset_rows(name)}


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> Games:
    store = tmp_path_factory.mktemp("transcripts") / "store"

    def play(alice: Any, bob: Any, **options: Any) -> str:
        harness = EnvironmentHarness(
            store, environment=Duel, agents={"alice": alice, "bob": bob}, **options
        )
        session = harness.run(duel("game"), turns=10)
        assert session.status == "completed", session.reason
        return session.id

    return Games(
        store=store,
        chatty=play(Chatty, Chatty),
        half=play(lambda: Chatty(tools=False), Player),
        forgetful=play(lambda: Chatty(forget=2), Player),
        plain=play(Player, Player),
        vetoed=play(
            lambda: Chatty(tools=False),
            Player,
            hooks=Hooks("veto@1", on_before_action=veto_alices_first_answer),
        ),
    )


def call(number: int) -> dict[str, Any]:
    """A tool call as a row holds it: its arguments the object the model's JSON text spells."""
    return {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": "move", "arguments": {"move": 1}},
    }


def asked(moves: int, you: str) -> dict[str, Any]:
    return {"role": "user", "content": canonical({"moves": moves, "you": you}).decode()}


def test_a_recorded_conversation_is_the_row_message_for_message(games: Games) -> None:
    rows = games.rows("chats", games.chatty)
    alice, bob = rows["alice"], rows["bob"]
    assert msgspec.to_builtins(alice.messages) == [
        {"role": "system", "content": SYSTEM},
        asked(0, "alice"),
        {"role": "assistant", "content": "", "tool_calls": [call(1)]},
        {"role": "tool", "content": "done", "tool_call_id": "call_1"},
        asked(2, "alice"),
        {"role": "assistant", "content": "", "tool_calls": [call(2)]},
    ]
    assert msgspec.to_builtins(bob.messages) == [
        {"role": "system", "content": SYSTEM},
        asked(1, "bob"),
        {"role": "assistant", "content": "", "tool_calls": [call(1)]},
    ]
    # Each participant's own reward, and its per-step rewards, one per assistant message.
    assert (alice.reward, alice.reward_scope, alice.step_rewards) == (
        1.0,
        "participant",
        [0.25, 1.0],
    )
    assert (bob.reward, bob.step_rewards) == (-1.0, [-0.75])
    line = msgspec.json.decode(jsonl_line(alice))
    assert line["messages"][2]["tool_calls"] == [call(1)]
    assert "name" not in line["messages"][0]  # fields a message lacks are left out, not null


def test_the_row_is_the_concatenation_of_the_records(games: Games) -> None:
    """No message is made up or left out: the row's messages are the transcript records' own,
    in order (only null text is empty text and arguments are parsed)."""
    harness = games.harness()
    recorded = [
        message
        for record in harness.records(games.chatty)
        if isinstance(record.payload, Transcript) and record.participant == "alice"
        for message in record.payload.messages
    ]
    row = games.rows("concatenated", games.chatty, participants=["alice"])["alice"]
    assert [(m.role, m.content) for m in row.messages] == [
        (m["role"], m["content"] or "") for m in recorded
    ]
    assert [m.tool_call_id for m in row.messages if m.role == "tool"] == ["call_1"]
    trajectory = harness.trajectory(games.chatty)
    assert trajectory.transcripts == {
        "alice": Transcribed(answers=2, transcribed=2),
        "bob": Transcribed(answers=1, transcribed=1),
    }


def test_a_participant_without_transcripts_keeps_the_rebuilt_conversation(games: Games) -> None:
    rows = games.rows("half", games.half)
    alice, bob = rows["alice"], rows["bob"]
    assert [m.role for m in alice.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert alice.messages[2].content == '{"move": 1}'  # the model's own text, not re-encoded
    assert [m.role for m in bob.messages] == ["user", "assistant"]
    assert bob.messages[1].content == '{"move":1}'  # rebuilt from action.attempted
    assert (alice.reward, bob.reward) == (1.0, -1.0)
    assert games.harness().trajectory(games.half).transcripts == {
        "alice": Transcribed(answers=2, transcribed=2)
    }


def test_a_partly_recorded_conversation_is_refused_naming_the_participant(games: Games) -> None:
    harness = games.harness()
    assert harness.trajectory(games.forgetful).transcripts == {
        "alice": Transcribed(answers=2, transcribed=1)
    }
    snapshot = harness.snapshot([games.forgetful], entitlement="own games")
    with pytest.raises(AdmissionError) as caught:
        harness.create_dataset("forgetful", [snapshot.metadata.id], reward="chips")
    [refusal] = caught.value.refusals
    assert refusal.condition == "transcribed"
    assert str(refusal).startswith(f"{games.forgetful} (snapshot {snapshot.metadata.id}): not ")
    assert "'alice''s agent recorded the messages of 1 of its 2 answers" in refusal.detail
    assert "participants=[...]" in refusal.detail
    assert "forgetful" not in {dataset.name for dataset in harness.datasets()}
    # The participants whose conversations are whole still make a dataset.
    rows = games.rows("forgetful-bob", games.forgetful, participants=["bob"])
    assert list(rows) == ["bob"]


def test_a_vetoed_answer_and_the_answer_after_it_are_both_in_the_conversation(
    games: Games,
) -> None:
    """The action's reward goes to the answer that gave it; the vetoed one earned none."""
    alice = games.rows("vetoed", games.vetoed, participants=["alice"])["alice"]
    assert [m.role for m in alice.messages] == [
        "system", "user", "assistant", "user", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert alice.step_rewards == [None, 0.25, 1.0]
    blocked = [r for r in games.harness().records(games.vetoed) if r.kind == "action.blocked"]
    assert len(blocked) == 1


def test_rows_without_transcripts_keep_their_bytes(games: Games) -> None:
    """A session without transcripts projects to the bytes it always did (so its snapshots
    keep their ids), and its rows' messages are role and content only."""
    trajectory_digest, messages_digest = golden()
    # Computed with the code before transcripts existed, from the same hand-sealed records.
    assert trajectory_digest == "70e4bb53892b1f6feec61ca56f2312cf26fafec8f4e7b257aaffef63f4e8803c"
    assert messages_digest == "aa863a95dea3d1060b4e0a8b10eba92038c08f992cce6bf87a7274af6c5f417a"
    harness = games.harness()
    assert b"transcripts" not in canonical(harness.trajectory(games.plain))
    rows = games.rows("plain", games.plain)
    for row in rows.values():
        line = msgspec.json.decode(jsonl_line(row))
        assert all(set(message) == {"role", "content"} for message in line["messages"])


def test_parquet_refuses_tool_calls_instead_of_dropping_them(games: Games, tmp_path: Path) -> None:
    games.rows("parquet-tools", games.chatty)
    path = tmp_path / "rows.parquet"

    async def export() -> int:
        from envharness.trajectories import dataset_rows

        return await write_parquet(
            dataset_rows(await read_store(games.store), "parquet-tools"), path
        )

    with pytest.raises(ConfigurationError, match=r"has tool calls.*--format jsonl"):
        anyio.run(export)
    assert not path.exists()
    assert not list(tmp_path.glob(".*partial"))


def test_an_unreadable_transcript_record_is_named(tmp_path: Path) -> None:
    journal = Journal()
    journal.start()
    journal.turn(1, done=True)
    bad = journal.add(Transcript(messages=({"content": "no role"},)), turn=1, participant="alice")
    journal.score()
    journal.end()
    [session_id] = write(tmp_path, journal)
    harness = EnvironmentHarness(tmp_path, environment=Duel, agents={"alice": Player})
    snapshot = harness.snapshot([session_id], entitlement="own data")
    harness.create_dataset("broken", [snapshot.metadata.id])
    with pytest.raises(TrajectoryError, match=rf"record {bad.seq} is a transcript whose messages"):
        list(harness.dataset_rows("broken"))


def test_an_imported_message_record_is_still_role_and_text_only(tmp_path: Path) -> None:
    """Tool fields belong to a native agent's transcript; an imported source's message keeps
    giving the row it gave before (its other keys are the source's)."""
    from envharness.trajectories.sources import SourceChain

    harness = EnvironmentHarness(tmp_path, environment=Duel, agents={"alice": Player})
    harness.run(duel("store"), turns=1)  # the store exists
    chain = SourceChain("acme/evals")
    said = {"role": "assistant", "content": "4", "name": 7, "tool_calls": [{"bad": True}]}
    rows = [
        chain.seal("ep", "episode.started", {"participants": {"bot": "bot@1"}}),
        chain.seal("ep", "message", {"role": "user", "content": "2+2?"}, participant="bot"),
        chain.seal("ep", "message", said, participant="bot"),
        chain.seal("ep", "score", {"scorer": "exact@1", "passed": True, "cites": [1, 2]}),
        chain.seal("ep", "episode.ended", {"status": "completed"}),
    ]
    harness.sources().import_records("acme/evals", rows, training=True)
    snapshot = harness.snapshot(["acme/evals:ep"], entitlement="licensed")
    harness.create_dataset("imported", [snapshot.metadata.id])
    [row] = harness.dataset_rows("imported")
    line = msgspec.json.decode(jsonl_line(row))
    assert line["messages"] == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]


@pytest.mark.anyio
async def test_recorded_conversations_on_both_backends(games: Games) -> None:
    harness = AsyncEnvironmentHarness(games.store, environment=Duel, agents={"alice": Player})
    snapshot = await harness.snapshot([games.chatty], entitlement="own games")
    dataset = await harness.create_dataset(
        f"async-{snapshot.metadata.id[4:12]}", [snapshot.metadata.id], reward="chips"
    )
    rows = [row async for row in harness.dataset_rows(dataset.name)]
    assert [(row.participant, row.messages[0].role) for row in rows] == [
        ("alice", "system"),
        ("bob", "system"),
    ]


# -- the bytes of rows without transcripts --------------------------------------------------------

AT = "2026-01-01T00:00:00.000000Z"
SESSION = "ses_00000000000000000000aa"


def golden() -> tuple[str, str]:
    """The sha256 of a hand-sealed session's trajectory and of its rebuilt conversations."""
    found = _sealed()
    trajectory = project_rows(SESSION, found)
    talks = anyio.run(conversations, _Rows(found), trajectory)
    encode = msgspec.json.Encoder().encode
    said = b"".join(
        encode(talks[name].messages) + encode(talks[name].step_rewards()) for name in sorted(talks)
    )
    return hashlib.sha256(canonical(trajectory)).hexdigest(), hashlib.sha256(said).hexdigest()


def _sealed() -> list[RecordRow]:
    rows: list[RecordRow] = []
    prev: str | None = None

    def seal(payload: Any, turn: int | None = None, participant: str | None = None) -> None:
        nonlocal prev
        data = canonical(payload)
        kind = payload.__struct_config__.tag
        seq = len(rows)
        digest = digest_of(SESSION, seq, kind, turn, participant, AT, data, prev)
        rows.append(RecordRow(SESSION, seq, kind, turn, participant, AT, data, prev, digest))
        prev = digest

    config = SessionConfig(
        environment=EnvironmentRef(
            name="golden", version="1", turn_order="simultaneous", roles=("agent",),
            input_type="tests.Input",
        ),
        participants={
            name: ParticipantRef(role="agent", implementation="p@1") for name in ("alice", "bob")
        },
        scenario=ScenarioRef(id="s1", input={}), seed=0, turns=2, envharness_version="test",
    )  # fmt: skip
    seal(SessionCreated(config=config))
    seal(SessionStatus(status="running"))
    seal(SegmentStarted(segment=0))
    for turn in (1, 2):
        for name in ("alice", "bob"):
            seal(Observation(observation={"turn": turn, "you": name}), turn, name)
            seal(ActionAttempted(action={"move": turn}, seconds=0.5), turn, name)
            seal(ActionExecuted(action={"move": turn}, outcome="ok", reward=0.5), turn, name)
        seal(Outcome(state="0" * 64, done=turn == 2), turn)
    seal(Score(version="judge@1", metrics={"m": 1.0}, passed=True))
    seal(SessionStatus(status="completed"))
    seal(SegmentEnded(segment=0, status="completed"))
    return rows


class _Rows:
    """An evidence reader over rows in memory (the digest check is the binding's business)."""

    def __init__(self, rows: list[RecordRow]) -> None:
        self._rows = rows

    async def rows(self, trajectory: Trajectory) -> AsyncIterator[EvidenceRow]:
        for row in self._rows:
            yield EvidenceRow(row.seq, row.kind, row.turn, row.participant, row.payload, b"")
