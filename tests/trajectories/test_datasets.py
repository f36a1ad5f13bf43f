"""Datasets: admission names every refusal; exports in TRL's conversational format."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness import ConfigurationError
from envharness.store import read_store
from envharness.trajectories import (
    AdmissionError,
    Dataset,
    DatasetRow,
    EvidenceMismatchError,
    Refusal,
    Trainer,
    dataset_rows,
)
from envharness.trajectories.files import to_hf_dataset, write_parquet
from tests.trajectories._support import MISS, REACH, Journal, flip_payload_byte, harness, write


def refusals_of(caught: pytest.ExceptionInfo[AdmissionError]) -> set[tuple[str, str]]:
    return {(refusal.session_id, refusal.condition) for refusal in caught.value.refusals}


def test_an_admitted_dataset_exports_conversations_with_their_reward(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    passed, failed = runner.run(REACH, turns=5), runner.run(MISS, turns=2)
    snapshot = runner.snapshot([passed, failed], entitlement="own evaluation data")
    dataset = runner.create_dataset("sft-1", [snapshot.metadata.id])
    assert dataset.id.startswith("dst_")
    assert (dataset.name, dataset.snapshots, dataset.trajectories) == (
        "sft-1",
        (snapshot.metadata.id,),
        2,
    )
    assert runner.create_dataset("sft-1", [snapshot.metadata.id]) == dataset  # idempotent
    assert runner.datasets() == [dataset]
    assert runner.dataset(dataset.id) == dataset
    rows = {row.session_id: row for row in runner.dataset_rows("sft-1")}
    assert (rows[passed.id].reward, rows[passed.id].passed) == (1.0, True)
    assert (rows[failed.id].reward, rows[failed.id].passed) == (0.0, False)
    row = rows[passed.id]
    assert [m.role for m in row.messages] == ["user", "assistant"] * 3
    assert msgspec.json.decode(row.messages[0].content) == {
        "my_contributions": [],
        "target": 0,
        "total": -3,
        "turn": 0,
    }
    assert msgspec.json.decode(row.messages[1].content) == {"value": 1}
    trajectory = runner.trajectory(passed)
    reward = trajectory.outcome.reward
    assert reward is not None
    assert (row.score_seq, row.score_digest, row.scorer_version) == (
        reward.score_seq,
        reward.score_digest,
        "synthetic-score@1",
    )
    assert row.head_digest == trajectory.journal.head_digest
    assert (row.participant, row.snapshot_id, row.dataset) == ("a", snapshot.metadata.id, "sft-1")


def test_a_named_reward_metric_is_the_reward(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(MISS, turns=2)], entitlement="own data")
    runner.create_dataset("by-total", [snapshot.metadata.id], reward="total")
    [row] = runner.dataset_rows("by-total")
    assert row.reward == -28.0
    with pytest.raises(AdmissionError) as caught:
        runner.create_dataset("by-nothing", [snapshot.metadata.id], reward="accuracy")
    assert "has no metric 'accuracy' (it has: total, turns)" in str(caught.value)


def test_every_refusal_names_the_trajectory_and_the_missing_condition(tmp_path: Path) -> None:
    running = Journal()
    running.start()
    running.turn(1)
    unscored = Journal()
    unscored.start()
    unscored.turn(1, done=True)
    unscored.end()
    good = Journal().complete()
    write(tmp_path, running, unscored, good)
    runner = harness(tmp_path)
    entitled = runner.snapshot([running.id, unscored.id, good.id], entitlement="own data")
    with pytest.raises(AdmissionError) as caught:
        runner.create_dataset("mixed", [entitled.metadata.id])
    assert refusals_of(caught) == {
        (running.id, "complete"),
        (running.id, "terminal"),
        (running.id, "reward"),
        (unscored.id, "reward"),
    }
    message = str(caught.value)
    assert "dataset 'mixed' refused 4 trajectory(ies)" in message
    assert (
        f"{running.id} (snapshot {entitled.metadata.id}): not terminal: its session is running"
        in (message)
    )
    assert (
        f"{unscored.id} (snapshot {entitled.metadata.id}): not reward: it has no score record"
        in (message)
    )
    assert runner.datasets() == []  # nothing was created
    not_entitled = runner.snapshot([good.id])
    with pytest.raises(AdmissionError) as caught:
        runner.create_dataset("unentitled", [not_entitled.metadata.id])
    [refusal] = caught.value.refusals
    assert refusal == Refusal(
        snapshot_id=not_entitled.metadata.id,
        session_id=good.id,
        condition="training-entitled",
        detail=refusal.detail,
    )
    assert "declares no training entitlement" in refusal.detail
    assert "--entitle-training" in refusal.detail


def test_disputed_and_unresolved_rewards_are_refused(tmp_path: Path) -> None:
    disputed = Journal()
    disputed.start()
    disputed.turn(1, done=True)
    disputed.score(passed=True, version="judge@1")
    disputed.score(passed=False, version="judge@2")
    disputed.end()
    several = Journal().complete(passed=None, accuracy=1.0, latency=2.0)
    write(tmp_path, disputed, several)
    runner = harness(tmp_path)
    snapshot = runner.snapshot([disputed.id, several.id], entitlement="own data")
    with pytest.raises(AdmissionError) as caught:
        runner.create_dataset("d", [snapshot.metadata.id])
    details = {refusal.session_id: refusal.detail for refusal in caught.value.refusals}
    assert "score records disagree" in details[disputed.id]
    assert "several metrics (accuracy, latency)" in details[several.id]


def test_a_dataset_name_is_taken_for_good(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    first = runner.snapshot([runner.run(REACH, turns=5)], entitlement="own data")
    second = runner.snapshot([runner.run(MISS, turns=2)], entitlement="own data")
    runner.create_dataset("d", [first.metadata.id])
    with pytest.raises(ConfigurationError, match="already exists with other snapshots"):
        runner.create_dataset("d", [second.metadata.id])
    with pytest.raises(ConfigurationError, match="given twice"):
        runner.create_dataset("e", [first.metadata.id, first.metadata.id])
    again = runner.snapshot([runner.sessions()[0].id], label="again", entitlement="own data")
    with pytest.raises(AdmissionError, match="not unique: it is also in snapshot"):
        runner.create_dataset("e", [first.metadata.id, again.metadata.id])
    for bad, expected in (("", "1 to 100"), ("a\nb", "printable")):
        with pytest.raises(ConfigurationError, match=expected):
            runner.create_dataset(bad, [first.metadata.id])
    with pytest.raises(ConfigurationError, match="at least one snapshot"):
        runner.create_dataset("f", [])


def test_a_name_that_looks_like_a_dataset_id_is_refused(tmp_path: Path) -> None:
    # Datasets are found by name or id: a name equal to another dataset's id made that id
    # reach the wrong dataset's rows.
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(REACH, turns=5)], entitlement="own data")
    first = runner.create_dataset("d", [snapshot.metadata.id])
    with pytest.raises(ConfigurationError, match="starts with 'dst_', which begins dataset ids"):
        runner.create_dataset(first.id, [snapshot.metadata.id], reward="total")
    assert runner.dataset(first.id) == first


def test_rows_are_checked_against_the_evidence(tmp_path: Path) -> None:
    journal = Journal().complete()
    write(tmp_path, journal)
    runner = harness(tmp_path)
    snapshot = runner.snapshot([journal.id], entitlement="own data")
    runner.create_dataset("d", [snapshot.metadata.id])
    flip_payload_byte(tmp_path, journal.id, 3)
    with pytest.raises(EvidenceMismatchError, match="record seq 3"):
        list(runner.dataset_rows("d"))
    with pytest.raises(EvidenceMismatchError, match="record seq 3"):
        runner.create_dataset("again", [snapshot.metadata.id])


def rows_of(store: Path, name: str) -> list[DatasetRow]:
    async def main() -> list[DatasetRow]:
        return [row async for row in dataset_rows(await read_store(store), name)]

    return anyio.run(main)


def test_parquet_and_hugging_face_exports_keep_the_conversational_format(tmp_path: Path) -> None:
    runner = harness(tmp_path / "store")
    sessions = [runner.run(REACH, turns=5), runner.run(MISS, turns=2)]
    snapshot = runner.snapshot(sessions, entitlement="own data")
    runner.create_dataset("d", [snapshot.metadata.id])
    path = tmp_path / "d.parquet"

    async def export() -> int:
        reader = await read_store(tmp_path / "store")
        return await write_parquet(dataset_rows(reader, "d"), path)

    assert anyio.run(export) == 2
    assert not list(tmp_path.glob(".*partial"))
    parquet = importlib.import_module("pyarrow.parquet")
    table = parquet.read_table(path)
    rows = table.to_pylist()
    expected = [msgspec.to_builtins(row) for row in rows_of(tmp_path / "store", "d")]
    assert rows == expected
    assert rows[0]["messages"][0]["role"] == "user"
    dataset = to_hf_dataset(rows_of(tmp_path / "store", "d"))
    assert dataset.num_rows == 2
    assert set(dataset.column_names) >= {"messages", "reward", "passed", "session_id"}
    assert dataset[0]["messages"] == rows[0]["messages"]


def test_a_trainer_is_injected_locally(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(REACH, turns=5)], entitlement="own data")
    runner.create_dataset("d", [snapshot.metadata.id])

    class Recorder:
        def train(self, rows: Sequence[DatasetRow], dataset: Dataset) -> dict[str, Any]:
            return {"rows": len(rows), "dataset": dataset.name, "reward": rows[0].reward}

    assert isinstance(Recorder(), Trainer)
    assert runner.train("d", Recorder()) == {"rows": 1, "dataset": "d", "reward": 1.0}
    with pytest.raises(ConfigurationError, match="has no train"):
        runner.train("d", object())  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_datasets_on_both_backends(tmp_path: Path) -> None:
    from tests.trajectories._support import async_harness

    runner = async_harness(tmp_path)
    session = await runner.run(REACH, turns=5)
    snapshot = await runner.snapshot([session.id], entitlement="own data")
    dataset = await runner.create_dataset("d", [snapshot.metadata.id])
    rows = [row async for row in runner.dataset_rows(dataset.name)]
    assert [row.session_id for row in rows] == [session.id]


def imported_episode(store: Path, source: str, *, training: bool) -> str:
    from envharness.trajectories.sources import SourceChain

    chain = SourceChain(source)
    rows = [
        chain.seal("ep", "episode.started", {"participants": {"bot": "bot@1"}}),
        chain.seal("ep", "message", {"role": "user", "content": "2+2?"}, participant="bot"),
        chain.seal("ep", "message", {"role": "assistant", "content": "4"}, participant="bot"),
        chain.seal("ep", "score", {"scorer": "exact@1", "passed": True, "cites": [2]}),
        chain.seal("ep", "episode.ended", {"status": "completed"}),
    ]
    harness(store).sources().import_records(source, rows, training=training)
    return f"{source}:ep"


def test_imported_trajectories_need_their_source_to_declare_training_rights(
    tmp_path: Path,
) -> None:
    runner = harness(tmp_path)
    runner.run(REACH, turns=5)  # the store exists
    undeclared = imported_episode(tmp_path, "acme/no-rights", training=False)
    declared = imported_episode(tmp_path, "acme/with-rights", training=True)
    snapshot = runner.snapshot([undeclared, declared], entitlement="licensed")
    with pytest.raises(AdmissionError) as caught:
        runner.create_dataset("imports", [snapshot.metadata.id])
    [refusal] = caught.value.refusals
    assert (refusal.session_id, refusal.condition) == (undeclared, "training-entitled")
    assert "source 'acme/no-rights', which did not declare training rights" in refusal.detail
    only_declared = runner.snapshot([declared], entitlement="licensed")
    runner.create_dataset("imports", [only_declared.metadata.id])
    [row] = runner.dataset_rows("imports")
    assert [(m.role, m.content) for m in row.messages] == [("user", "2+2?"), ("assistant", "4")]
    assert (row.reward, row.participant, row.scorer_version) == (1.0, "bot", "exact@1")


def test_an_imported_trajectory_speaks_only_through_its_message_records(tmp_path: Path) -> None:
    # A source's own 'observation' is not our Observation: decoding it as one failed every
    # export of a dataset that had admitted it.
    from envharness.trajectories.sources import SourceChain

    runner = harness(tmp_path)
    runner.run(REACH, turns=5)  # the store exists
    chain = SourceChain("acme/evals")
    rows = [
        chain.seal("ep", "episode.started", {"participants": {"bot": "bot@1"}}),
        chain.seal("ep", "observation", {"cells": [1, 2]}, participant="bot", turn=1),
        chain.seal("ep", "action", {"move": "up"}, participant="bot", turn=1),
        chain.seal("ep", "message", {"role": "user", "content": "2+2?"}, participant="bot"),
        chain.seal("ep", "message", {"role": "assistant", "content": "4"}, participant="bot"),
        chain.seal("ep", "score", {"scorer": "exact@1", "passed": True, "cites": [1, 2]}),
        chain.seal("ep", "episode.ended", {"status": "completed"}),
    ]
    runner.sources().import_records("acme/evals", rows, training=True)
    snapshot = runner.snapshot(["acme/evals:ep"], entitlement="licensed")
    runner.create_dataset("imported", [snapshot.metadata.id])
    [row] = runner.dataset_rows("imported")
    assert [(m.role, m.content) for m in row.messages] == [("user", "2+2?"), ("assistant", "4")]


OTEL_TRACE = "54d8d8e585ddee593d47f2a3b0eec622"


def scored_otel_trace(store: Path, source: str) -> str:
    """The recorded OpenTelemetry GenAI trace (a tool-using agent), then a verifier's score."""
    from envharness.store.sources import SourceStore
    from envharness.trajectories.sources import SourceChain
    from tests.trajectories.sources._support import OTEL_FIXTURE

    runner = harness(store)
    runner.sources().import_file(source, OTEL_FIXTURE, format="otel-genai", training=True)
    position, head = anyio.run(SourceStore(store).head, source)
    chain = SourceChain(source, next_position=position + 1, prev=head)
    # It judged the final answer: the second model call, at position 2.
    score = chain.seal(OTEL_TRACE, "score", {"scorer": "judge@1", "passed": True, "cites": [2]})
    runner.sources().import_records(source, [score], training=True)
    return f"{source}:{OTEL_TRACE}"


def test_an_otel_genai_trace_becomes_the_agents_conversation(tmp_path: Path) -> None:
    """Each model call sends the whole history so far: the row holds it once, the tool call
    and its result in order, ending with the answer."""
    runner = harness(tmp_path)
    runner.run(REACH, turns=1)  # the store exists
    trajectory_id = scored_otel_trace(tmp_path, "otel/weather-agent")
    snapshot = runner.snapshot([trajectory_id], entitlement="own traces")
    runner.create_dataset("traces", [snapshot.metadata.id])
    [row] = runner.dataset_rows("traces")
    call = '{"tool_call":{"arguments":{"city":"Paris"},"id":"call_weather_1","name":"get_weather"}}'
    assert [(m.role, m.content) for m in row.messages] == [
        ("system", "You answer weather questions with the get_weather tool."),
        ("user", "What is the weather in Paris?"),
        ("assistant", call),
        ("tool", '{"temperature_c": 18, "sky": "sunny"}'),
        ("assistant", "It is 18 degrees and sunny in Paris."),
    ]
    assert (row.participant, row.reward, row.scorer_version) == ("weather-agent", 1.0, "judge@1")


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"gen_ai.input.messages": "[{"}, "gen_ai.input.messages is not JSON"),
        ({"gen_ai.input.messages": '{"role": "user"}'}, "is dict, not a JSON array"),
        ({"gen_ai.output.messages": '[{"parts": []}]'}, "output.messages[0] is not a message"),
        ({"gen_ai.output.messages": '[{"role": "assistant", "parts": ["hi"]}]'}, "not a part"),
    ],
)
def test_unreadable_model_call_messages_are_named(
    tmp_path: Path, attributes: dict[str, str], problem: str
) -> None:
    from envharness.trajectories import TrajectoryError
    from envharness.trajectories.sources import SourceChain

    runner = harness(tmp_path)
    runner.run(REACH, turns=1)  # the store exists
    chain = SourceChain("acme/otel")
    rows = [
        chain.seal("ep", "episode.started", {"participants": {"bot": "m@1"}}),
        chain.seal("ep", "gen_ai.chat", {"attributes": attributes}),
        chain.seal("ep", "score", {"scorer": "exact@1", "passed": True, "cites": [1]}),
        chain.seal("ep", "episode.ended", {"status": "completed"}),
    ]
    runner.sources().import_records("acme/otel", rows, training=True)
    snapshot = runner.snapshot(["acme/otel:ep"], entitlement="licensed")
    runner.create_dataset("bad", [snapshot.metadata.id])
    with pytest.raises(TrajectoryError, match=r"record 1 \(gen_ai.chat\)") as caught:
        list(runner.dataset_rows("bad"))
    assert problem in str(caught.value)


def test_model_calls_that_send_only_what_is_new_are_appended() -> None:
    from envharness.trajectories.sources.genai import chat_turn, merge

    def call(sent: list[tuple[str, str]], answer: str) -> Any:
        messages = [{"role": r, "parts": [{"type": "text", "content": c}]} for r, c in sent]
        return {
            "attributes": {
                "gen_ai.system_instructions": [{"type": "text", "content": "Be brief."}],
                "gen_ai.input.messages": msgspec.json.encode(messages).decode(),
                "gen_ai.output.messages": [
                    {"role": "assistant", "parts": [{"type": "text", "content": answer}]}
                ],
            }
        }

    conversation: list[tuple[str, str]] = []
    merge(conversation, *chat_turn(call([("user", "hi")], "hello")))
    merge(conversation, *chat_turn(call([("user", "and?")], "bye")))
    assert conversation == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "hello"),
        ("system", "Be brief."),
        ("user", "and?"),
        ("assistant", "bye"),
    ]
    assert chat_turn({"attributes": {}}) == ([], [])  # content not captured: nothing said
