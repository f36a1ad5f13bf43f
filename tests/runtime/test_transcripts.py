"""Transcripts: the messages a model-backed agent's answer added to its conversation are
recorded right after the answer, private to its participant, only what that answer added —
and an agent that gives none costs a turn nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from envharness import AgentReply, AsyncEnvironmentHarness, Cost, EnvironmentHarness, Record
from envharness.cli.render import Timeline
from envharness.records import Transcript, canonical
from envharness.runtime import participants
from envharness.service.pages.render import describe
from envharness.service.wire.sessions import RecordOut
from tests.service._support import World, make_world
from tests.trajectories._duel import Duel, Player, duel

SYSTEM = 'You play the duel. Answer with a JSON object: {"move": 1}.'


class Chatty:
    """Shaped like a model-backed agent: it keeps its conversation, and each answer returns
    only the messages that answer added to it."""

    implementation = "chatty@1"
    runs_inline = True

    def __init__(self, transcript: Any = None, cost: Cost | None = None) -> None:
        self.conversation: list[dict[str, Any]] = []
        self.transcript = transcript
        """Given instead of what was added (a bad transcript), when set."""
        self.cost = cost

    def act(self, observation: Any) -> AgentReply:
        added: list[dict[str, Any]] = []
        if not self.conversation:
            added.append({"role": "system", "content": SYSTEM})
        added.append({"role": "user", "content": canonical(observation).decode()})
        added.append({"role": "assistant", "content": '{"move": 1}'})
        self.conversation += added
        transcript = tuple(added) if self.transcript is None else self.transcript
        return AgentReply({"move": 1}, cost=self.cost, transcript=transcript)


def records_of(harness: EnvironmentHarness, session_id: str) -> list[Record]:
    return list(harness.records(session_id))


def transcripts(records: list[Record], participant: str) -> list[Transcript]:
    return [
        r.payload
        for r in records
        if isinstance(r.payload, Transcript) and r.participant == participant
    ]


def test_a_transcript_follows_its_answer_private_to_its_participant(tmp_path: Path) -> None:
    agents: dict[str, Any] = {"alice": lambda: Chatty(cost=Cost(input_tokens=7)), "bob": Chatty}
    harness = EnvironmentHarness(tmp_path, environment=Duel, agents=agents)
    session = harness.run(duel("game"), turns=10)
    assert session.status == "completed", session.reason
    records = records_of(harness, session.id)
    alice = [r.kind for r in records if r.participant == "alice" and r.turn == 1]
    assert alice == ["observation", "action.attempted", "transcript", "cost", "action.executed"]
    bob = [r.kind for r in records if r.participant == "bob" and r.turn == 2]
    assert bob == ["observation", "action.attempted", "transcript", "action.executed"]
    first, second = transcripts(records, "alice")
    assert [m["role"] for m in first.messages] == ["system", "user", "assistant"]
    assert [m["role"] for m in second.messages] == ["user", "assistant"]
    assert msgspec.json.decode(second.messages[0]["content"]) == {"moves": 2, "you": "alice"}
    assert all(r.participant is not None for r in records if r.kind == "transcript")


def test_a_transcript_is_one_line_in_the_viewer_and_the_terminal(tmp_path: Path) -> None:
    harness = EnvironmentHarness(
        tmp_path, environment=Duel, agents={"alice": Chatty, "bob": Chatty}
    )
    session = harness.run(duel("shown"), turns=10)
    [info] = harness.sessions()
    record = next(r for r in records_of(harness, session.id) if r.kind == "transcript")
    shown = "3 message(s) added to its conversation: system, user, assistant"
    assert str(describe(record)) == shown
    assert list(Timeline(info).lines(record))[-1].endswith(
        "transcript 3 message(s): system, user, assistant"
    )


def test_a_long_conversation_is_recorded_once_not_again_every_turn(tmp_path: Path) -> None:
    """Each record holds only what its answer added: the records stay the same size while the
    conversation grows, and together they are the conversation, each message once."""
    agent = Chatty()
    agents: dict[str, Any] = {"alice": lambda: agent, "bob": Player}
    harness = EnvironmentHarness(tmp_path, environment=Duel, agents=agents)
    session = harness.run(duel("long", moves=60), turns=60)
    assert session.status == "completed", session.reason
    records = [r for r in records_of(harness, session.id) if r.kind == "transcript"]
    assert len(records) == 30
    assert len(agent.conversation) == 61  # the system prompt, then a question and an answer
    sizes = [len(canonical(r.payload)) for r in records]
    assert max(sizes[1:]) < 2 * min(sizes[1:])  # the last answer's is no bigger than the 2nd's
    assert sum(sizes) < 3 * len(canonical(agent.conversation))
    recorded = [m for r in records for m in r.payload.messages]  # type: ignore[union-attr]
    assert recorded == agent.conversation


def test_an_agent_without_a_transcript_records_none_and_is_never_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No transcript: one falsy check, no record, no work (the checker is never reached)."""

    def refuse(transcript: object) -> tuple[dict[str, Any], ...]:
        raise AssertionError("checked a transcript that was not given")

    monkeypatch.setattr(participants, "checked_transcript", refuse)

    class Quiet(Player):
        def act(self, observation: Any) -> Any:
            return AgentReply({"move": 1}, cost=Cost(output_tokens=1))

    harness = EnvironmentHarness(tmp_path, environment=Duel, agents={"alice": Player, "bob": Quiet})
    session = harness.run(duel("quiet"), turns=10)
    assert session.status == "completed", session.reason
    records = records_of(harness, session.id)
    assert not [r for r in records if r.kind == "transcript"]
    assert [r.kind for r in records if r.participant == "bob" and r.turn == 2] == [
        "observation", "action.attempted", "cost", "action.executed",
    ]  # fmt: skip


class Unencodable:
    pass


@pytest.mark.parametrize(
    ("transcript", "expected"),
    [
        ("user: hi", "the transcript is str; give a tuple of message dicts"),
        ({"role": "user", "content": "hi"}, "the transcript is dict; give a tuple"),
        (["hi"], "transcript[0] is str, not a message"),
        ([{"content": "hi"}], "transcript[0] has role None; a message's role is one of"),
        ([{"role": "bot", "content": "hi"}], "has role 'bot'"),
        ([{"role": "user"}], "(user) has no content; give its text as 'content'"),
        ([{"role": "assistant", "content": None}], "(assistant) has no content"),
        ([{"role": "user", "content": ["a", "b"]}], "(user) has content of type list"),
        (
            [{"role": "user", "content": "hi", "tool_calls": [{}]}],
            "(user) has tool_calls; only an assistant message calls tools",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": "move"}],
            "has tool_calls of type str; give a list",
        ),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"name": "move"}]}],
            "tool_calls[0] = {'name': 'move'}, which is not a tool call",
        ),
        ([{"role": "tool", "content": "ok", "tool_call_id": 3}], "has tool_call_id of type int"),
        (
            [{"role": "user", "content": "hi", "extra": Unencodable()}],
            "the transcript is not JSON-encodable",
        ),
    ],
)
def test_a_transcript_that_is_not_chat_messages_fails_the_agent_naming_it(
    tmp_path: Path, transcript: Any, expected: str
) -> None:
    agents: dict[str, Any] = {"alice": lambda: Chatty(transcript=transcript), "bob": Player}
    harness = EnvironmentHarness(tmp_path, environment=Duel, agents=agents)
    session = harness.run(duel("bad"), turns=10)
    assert session.status == "failed"
    assert session.reason is not None
    assert session.reason.startswith(
        "agent 'alice' returned a transcript that is not chat messages: "
    )
    assert expected in session.reason
    records = records_of(harness, session.id)
    assert not [r for r in records if r.kind in ("transcript", "action.attempted")]


def test_tool_calls_and_tool_results_are_kept_as_sent(tmp_path: Path) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "move", "arguments": '{"move": 1}'},
    }
    said = (
        {"role": "user", "content": "Your move.", "name": "referee"},
        {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None},
        {"role": "tool", "tool_call_id": "call_1", "content": "moved"},
    )
    agents: dict[str, Any] = {"alice": lambda: Chatty(transcript=said), "bob": Player}
    harness = EnvironmentHarness(tmp_path, environment=Duel, agents=agents)
    session = harness.run(duel("tools"), turns=10)
    assert session.status == "completed", session.reason
    first = transcripts(records_of(harness, session.id), "alice")[0]
    assert first.messages == said  # every key, as the agent sent it


@pytest.mark.anyio
async def test_transcripts_on_both_backends(tmp_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=Duel, agents={"alice": Chatty, "bob": Chatty}
    )
    session = await harness.run(duel("async"), turns=10)
    assert session.status == "completed", session.reason
    kinds = [record.kind async for record in harness.records(session.id)]
    assert kinds.count("transcript") == 3


# -- isolation ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, str]:
    """A service over a duel in which each player's messages carry its name."""
    store = tmp_path_factory.mktemp("chats") / "store"

    class Secretive(Chatty):
        def act(self, observation: Any) -> AgentReply:
            you = observation["you"]
            said = ({"role": "user", "content": f"secret-{you}-{observation['moves']}"},)
            return AgentReply({"move": 1}, transcript=said)

    harness = EnvironmentHarness(
        store, environment=Duel, agents={"alice": Secretive, "bob": Secretive}
    )
    session = harness.run(duel("chats"), turns=10)
    assert session.status == "completed", session.reason
    return make_world(store), session.id


@pytest.mark.anyio
@pytest.mark.parametrize("me", ["alice", "bob"])
async def test_a_participant_reads_its_own_transcripts_and_no_one_elses(
    chats: tuple[World, str], me: str
) -> None:
    world, session_id = chats
    other = "bob" if me == "alice" else "alice"
    base = f"/api/sessions/{session_id}"
    async with world.client("admin") as client:
        every = (await client.get(f"{base}/records", params={"kind": "transcript"})).json()
    assert {r["participant"] for r in every["records"]} == {"alice", "bob"}
    async with world.client(me) as client:
        mine = await client.get(f"{base}/records", params={"kind": "transcript"})
        theirs = await client.get(
            f"{base}/records", params={"kind": "transcript", "participant": other}
        )
        export = (await client.get(f"{base}/export")).text
    assert mine.status_code == 200
    received = [
        msgspec.json.decode(msgspec.json.encode(item), type=RecordOut)
        for item in mine.json()["records"]
    ]
    assert received
    assert {r.participant for r in received} == {me}
    assert theirs.status_code == 404
    assert f"secret-{me}" in export
    for body in (mine.text, theirs.text, export):
        assert f"secret-{other}" not in body
