"""Datasets of a zero-sum game: each row its participant's reward, per-step rewards, and how the
episode ended (terminated or truncated); a shared reward for several players is refused."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest

from envharness import AsyncEnvironmentHarness, ConfigurationError, EnvironmentHarness
from envharness.records import canonical
from envharness.store.snapshots import DATASET_PREFIX, SnapshotStore, content_address
from envharness.trajectories import AdmissionError, Dataset, DatasetRow
from envharness.trajectories.files import to_hf_dataset
from envharness.trajectories.rewards import names_text
from tests.trajectories._duel import AGENTS, Duel, duel


@dataclass(frozen=True)
class Games:
    store: Path
    won: str
    """alice wins in three moves: alice, bob, alice (bob learns it lost without moving)."""
    cut: str
    """The environment cuts the game short after two moves (truncated)."""
    out_of_turns: str
    """The harness's two turns run out before the game is decided (turn limit)."""
    shared: str
    """Scored with shared metrics only."""
    missing: str
    """bob has no chips of his own."""
    null: str
    """bob's chips and his last step reward are NaN, recorded as null."""

    def harness(self) -> EnvironmentHarness:
        return EnvironmentHarness(self.store, environment=Duel, agents=AGENTS)

    def snapshot(self, *sessions: str) -> str:
        frozen = self.harness().snapshot(list(sessions), entitlement="own games")
        return frozen.metadata.id


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> Games:
    store = tmp_path_factory.mktemp("duel") / "store"
    harness = EnvironmentHarness(store, environment=Duel, agents=AGENTS)

    def play(turns: int = 10, **game: object) -> str:
        return harness.run(duel("game", **game), turns=turns).id

    return Games(
        store=store,
        won=play(),
        cut=play(moves=9, limit=2),
        out_of_turns=play(turns=2, moves=9),
        shared=play(shared_only=True),
        missing=play(missing="bob"),
        null=play(null="bob"),
    )


def by_participant(rows: list[DatasetRow]) -> dict[str, DatasetRow]:
    assert len({row.session_id for row in rows}) == 1
    return {row.participant: row for row in rows}


def test_each_row_takes_its_participants_own_reward(games: Games) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.won)
    dataset = harness.create_dataset("chips", [snapshot], reward="chips")
    rows = by_participant(list(harness.dataset_rows(dataset.name)))
    assert (rows["alice"].reward, rows["bob"].reward) == (1.0, -1.0)
    for row in rows.values():
        assert (row.reward_metric, row.reward_scope) == ("chips", "participant")
    # Without reward=, the participants' only own metric is the reward.
    default = harness.create_dataset("chips-by-default", [snapshot])
    again = by_participant(list(harness.dataset_rows(default.name)))
    assert {name: row.reward for name, row in again.items()} == {"alice": 1.0, "bob": -1.0}


def test_the_reward_chain_carries_each_participants_metrics(games: Games) -> None:
    harness = games.harness()
    chain = harness.trajectory(games.won).outcome.reward
    assert chain is not None
    assert chain.per_participant == {"alice": {"chips": 1.0}, "bob": {"chips": -1.0}}
    [row] = [r for r in harness.records(games.won) if r.kind == "score"]
    assert chain.score_seq == row.seq
    # A shared score's trajectory has no per_participant at all: its bytes (and the ids of the
    # snapshots that freeze it) are what they were before per-participant scores existed.
    shared = harness.trajectory(games.shared)
    assert shared.outcome.reward is not None
    assert b"per_participant" not in msgspec.json.encode(shared)


def test_a_shared_reward_for_several_participants_is_refused_saying_how_to_choose(
    games: Games,
) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.shared)
    with pytest.raises(AdmissionError) as caught:
        harness.create_dataset("shared", [snapshot], reward="moves")
    [refusal] = caught.value.refusals
    assert (refusal.session_id, refusal.condition) == (games.shared, "reward")
    chain = harness.trajectory(games.shared).outcome.reward
    assert chain is not None
    assert refusal.detail.startswith(
        f"score seq {chain.score_seq} has no per-participant metrics; a dataset with rows for "
        "alice and bob would give both the same reward: have the environment's score() return "
        "ScoreReport(per_participant=...) and pass reward=<metric>, or build the dataset for "
        "one participant (participants=[...])"
    )
    assert "shared_reward=True" in refusal.detail
    # The default reward (pass/fail) is shared too.
    with pytest.raises(AdmissionError, match="no per-participant metrics"):
        harness.create_dataset("shared", [snapshot])
    assert all(d.name != "shared" for d in harness.datasets())  # nothing was created


def test_a_shared_metric_beside_per_participant_ones_names_them(games: Games) -> None:
    harness = games.harness()
    with pytest.raises(AdmissionError) as caught:
        harness.create_dataset("by-moves", [games.snapshot(games.won)], reward="moves")
    [refusal] = caught.value.refusals
    assert "the reward (metric 'moves') of score seq" in refusal.detail
    assert "is shared" in refusal.detail
    assert "naming a per-participant one (chips)" in refusal.detail


def test_one_participants_dataset_of_a_shared_metric_works_as_before(games: Games) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.shared)
    dataset = harness.create_dataset("alice-only", [snapshot], participants=["alice"])
    assert dataset.participants == ("alice",)
    [row] = harness.dataset_rows(dataset.name)
    assert (row.participant, row.reward, row.passed) == ("alice", 1.0, True)
    assert (row.reward_metric, row.reward_scope) == (None, "shared")


def test_a_declared_shared_reward_is_every_participants(games: Games) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.shared)
    dataset = harness.create_dataset("cooperative", [snapshot], reward="moves", shared_reward=True)
    assert dataset.shared_reward is True
    rows = by_participant(list(harness.dataset_rows(dataset.name)))
    assert {name: row.reward for name, row in rows.items()} == {"alice": 3.0, "bob": 3.0}
    assert {row.reward_scope for row in rows.values()} == {"shared"}


def test_datasets_without_the_new_options_keep_their_content(games: Games) -> None:
    """Their content (and so their id) is what it was before participants and shared_reward."""
    harness = games.harness()
    snapshot = games.snapshot(games.won)
    dataset = harness.create_dataset("plain", [snapshot], reward="chips")
    content = canonical(msgspec.structs.replace(dataset, id="", created_at=""))
    assert b"participants" not in content
    assert b"shared_reward" not in content
    selected = harness.create_dataset("plain-bob", [snapshot], reward="chips", participants=["bob"])
    assert b'"participants":["bob"]' in canonical(
        msgspec.structs.replace(selected, id="", created_at="")
    )
    [row] = harness.dataset_rows(selected.name)
    assert (row.participant, row.reward) == ("bob", -1.0)


def test_rows_say_whether_the_episode_terminated_or_was_truncated(games: Games) -> None:
    harness = games.harness()
    expected = {
        games.won: ("done", True, False),
        games.cut: ("truncated", False, True),
        games.out_of_turns: ("turn_limit", False, True),
    }
    for session, (cause, terminated, truncated) in expected.items():
        termination = harness.trajectory(session).termination
        assert (termination.cause, termination.terminated, termination.truncated) == (
            cause,
            terminated,
            truncated,
        )
    snapshot = games.snapshot(*expected)
    dataset = harness.create_dataset("endings", [snapshot], reward="chips")
    rows = list(harness.dataset_rows(dataset.name))
    assert len(rows) == 6  # alice and bob in each game (one move each in the two cut ones)
    for row in rows:
        assert (row.terminated, row.truncated) == expected[row.session_id][1:]
    cut = [row.reward for row in rows if row.session_id != games.won]
    assert cut == [0.0] * 4


def test_rows_hold_each_participants_per_step_rewards(games: Games) -> None:
    harness = games.harness()
    dataset = harness.create_dataset("steps", [games.snapshot(games.won)], reward="chips")
    rows = by_participant(list(harness.dataset_rows(dataset.name)))
    alice, bob = rows["alice"], rows["bob"]
    assert [m.role for m in alice.messages] == ["user", "assistant"] * 2
    assert alice.step_rewards == [0.25, 1.0]
    # bob's one move earned 0.25; the -1 of the game alice then won lands on it too.
    assert [m.role for m in bob.messages] == ["user", "assistant"]
    assert bob.step_rewards == [-0.75]


def test_a_participant_missing_the_metric_is_refused_by_name(games: Games) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.missing)
    with pytest.raises(AdmissionError) as caught:
        harness.create_dataset("missing", [snapshot], reward="chips")
    [refusal] = caught.value.refusals
    assert (refusal.session_id, refusal.condition) == (games.missing, "reward")
    assert "has no per-participant metric 'chips' for 'bob' (its own metrics: moves_made)" in (
        refusal.detail
    )
    # alice's rows alone are fine.
    dataset = harness.create_dataset("missing", [snapshot], reward="chips", participants=["alice"])
    [row] = harness.dataset_rows(dataset.name)
    assert (row.participant, row.reward) == ("alice", 1.0)
    # Two own metric names and no reward=: the default is the shared one, refused for two.
    with pytest.raises(AdmissionError, match=r"naming a per-participant one \(chips, moves_made\)"):
        harness.create_dataset("missing-default", [snapshot])


def test_null_values_are_refused_or_shown_as_null(games: Games) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.null)
    with pytest.raises(AdmissionError, match="recorded 'bob''s metric 'chips' as null"):
        harness.create_dataset("nulls", [snapshot], reward="chips")
    dataset = harness.create_dataset("nulls", [snapshot], reward="chips", participants=["alice"])
    [row] = harness.dataset_rows(dataset.name)
    assert (row.reward, row.step_rewards) == (1.0, [0.25, 1.0])
    # bob's rows under a declared shared reward: his last step reward is unknown, not a sum.
    shared = harness.create_dataset("nulls-shared", [snapshot], reward="moves", shared_reward=True)
    bob = by_participant(list(harness.dataset_rows(shared.name)))["bob"]
    assert bob.step_rewards == [None]


def test_a_selection_of_nobody_in_a_trajectory_is_refused(games: Games) -> None:
    harness = games.harness()
    with pytest.raises(AdmissionError) as caught:
        harness.create_dataset("carol", [games.snapshot(games.won)], participants=["carol"])
    [refusal] = caught.value.refusals
    assert refusal.condition == "selected"
    assert "none of its participants (alice and bob) is among the dataset's (carol)" in str(refusal)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"participants": "alice"}, "must be a list of participant names"),
        ({"participants": []}, "selects nobody"),
        ({"participants": ["alice", ""]}, "must be a list of participant names"),
        ({"participants": ["bob", "bob"]}, "names 'bob' more than once"),
        ({"shared_reward": "yes"}, "shared_reward must be True or False"),
    ],
)
def test_bad_options_are_named(games: Games, options: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigurationError, match=expected):
        games.harness().create_dataset("bad", [games.snapshot(games.won)], **options)  # type: ignore[arg-type]


def test_parquet_and_hugging_face_rows_keep_the_new_columns(games: Games, tmp_path: Path) -> None:
    harness = games.harness()
    snapshot = games.snapshot(games.won, games.cut)
    dataset = harness.create_dataset("columns", [snapshot], reward="chips")
    rows = list(harness.dataset_rows(dataset.name))
    table = to_hf_dataset(rows)
    assert set(table.column_names) >= {
        "reward_metric", "reward_scope", "terminated", "truncated", "step_rewards",
    }  # fmt: skip
    assert table.to_list() == [msgspec.to_builtins(row) for row in rows]
    importlib.import_module("pyarrow")


def test_names_are_joined_for_people() -> None:
    assert [names_text(n) for n in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == [
        "",
        "a",
        "a and b",
        "a, b and c",
    ]


def test_a_dataset_decodes_without_the_new_fields() -> None:
    """A dataset stored before participants and shared_reward existed still reads."""
    old = b'{"schema_version":1,"id":"","name":"d","snapshots":["snp_x"],"reward":null,'
    old += b'"trajectories":1,"created_at":""}'
    decoded = msgspec.json.decode(old, type=Dataset)
    assert decoded.participants is msgspec.UNSET
    assert decoded.shared_reward is msgspec.UNSET
    assert canonical(decoded) == canonical(msgspec.json.decode(canonical(decoded), type=Dataset))


@pytest.mark.anyio
async def test_per_participant_rows_on_both_backends(games: Games) -> None:
    harness = AsyncEnvironmentHarness(games.store, environment=Duel, agents=AGENTS)
    snapshot = await harness.snapshot([games.won], entitlement="own games")
    dataset = await harness.create_dataset(
        f"async-{snapshot.metadata.id[4:12]}", [snapshot.metadata.id], participants=["bob"]
    )
    rows = [row async for row in harness.dataset_rows(dataset.name)]
    assert [(row.participant, row.reward, row.step_rewards) for row in rows] == [
        ("bob", -1.0, [-0.75])
    ]


def test_a_dataset_made_before_the_rule_still_exports_as_it_was(games: Games) -> None:
    """One shared reward for two players is refused when a dataset is created; a dataset
    created before that rule (stored without shared_reward) keeps giving its rows."""
    snapshot = games.snapshot(games.shared)
    content = canonical(
        Dataset(name="older", snapshots=(snapshot,), reward="moves", trajectories=1)
    )
    dataset_id = content_address(DATASET_PREFIX, content)
    anyio.run(SnapshotStore(games.store).put_dataset, "older", dataset_id, content, "2026-01-01")
    rows = by_participant(list(games.harness().dataset_rows("older")))
    assert {name: row.reward for name, row in rows.items()} == {"alice": 3.0, "bob": 3.0}
