"""The replay machinery on its own, with a tiny live object: a state rebuilt by replay is the
state recorded, a replay that diverges is refused naming the turn, and nothing is replayed
that need not be."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from envharness.adapters.replay import CHECK_CHARS, Replay, Replayer, ReplayMismatchError, check_of
from envharness.errors import EnvharnessError


class Counter:
    """A live object that cannot write itself down: a running total of the moves, seeded."""

    def __init__(self) -> None:
        self.total = 0
        self.steps = 0


def counter_replayer(glitch_at: int | None = None, name: str = "counter") -> Replayer[Counter]:
    live: list[Counter] = []

    def reset(seed: int, setup: Any) -> tuple[Counter, Any]:
        if not live:
            live.append(Counter())
        counter = live[0]
        counter.total = seed + (setup or {}).get("bonus", 0)
        counter.steps = 0
        return counter, {"total": counter.total}

    def step(counter: Counter, move: Any) -> Any:
        counter.steps += 1
        counter.total += move["add"]
        if glitch_at is not None and counter.steps == glitch_at:
            counter.total += 1000  # not what the recording saw
        return {"total": counter.total}

    return Replayer(name, reset, step)


def played(replayer: Replayer[Counter], moves: list[Any], seed: int = 5) -> Replay:
    replay, _ = replayer.start(seed)
    for move in moves:
        replay = replayer.skip(replay) if move is None else replayer.advance(replay, move)[0]
    return replay


def restored(replay: Replay) -> Replay:
    """The state as a resume gets it: JSON from the store, converted back."""
    return msgspec.convert(msgspec.json.decode(msgspec.json.encode(replay)), Replay)


MOVES = [{"add": 1}, {"add": 2}, None, {"add": 3}, {"add": 4}]


def test_the_state_is_the_seed_the_moves_and_a_check_per_turn() -> None:
    replayer = counter_replayer()
    replay = played(replayer, MOVES)
    assert (replay.seed, replay.moves, replay.turns) == (5, tuple(MOVES), 5)
    assert len(replay.checks) == CHECK_CHARS * 6
    assert replay.checks[:CHECK_CHARS] == check_of({"total": 5})
    assert replay.checks[3 * CHECK_CHARS : 4 * CHECK_CHARS] == "-" * CHECK_CHARS  # no move
    assert replayer.result(replay) == {"total": 15}
    with pytest.raises(AttributeError):
        replay.seed = 6  # type: ignore[misc]


def test_the_live_instance_is_not_replayed_while_it_is_where_the_state_says() -> None:
    replayer = counter_replayer()
    replay = played(replayer, MOVES)
    assert replayer.live(replay).total == 15
    assert replayer.result(restored(replay)) == {"total": 15}  # equal, read back: no replay
    assert (replayer.rebuilt, replayer.replayed) == (0, 0)


def test_a_fresh_instance_is_rebuilt_by_replaying_the_moves() -> None:
    replay = restored(played(counter_replayer(), MOVES))
    fresh = counter_replayer()
    assert fresh.live(replay).total == 15
    assert (fresh.rebuilt, fresh.replayed) == (1, 4)  # the turn without a move replays nothing
    after, result = fresh.advance(replay, {"add": 10})
    assert result == {"total": 25}
    assert after.turns == 6


def test_going_back_replays_from_the_reset_and_forward_only_what_follows() -> None:
    replayer = counter_replayer()
    early = played(replayer, MOVES[:2])
    late = played(replayer, MOVES)
    assert replayer.result(early) == {"total": 8}  # back to turn 2: reset + 2 moves
    assert (replayer.rebuilt, replayer.replayed) == (1, 2)
    assert replayer.result(late) == {"total": 15}  # forward from turn 2: the 2 moves after
    assert (replayer.rebuilt, replayer.replayed) == (1, 4)


def test_the_setup_is_kept_and_replayed() -> None:
    replayer = counter_replayer()
    replay, result = replayer.start(1, {"bonus": 10})
    assert result == {"total": 11}
    replay, _ = replayer.advance(replay, {"add": 1})
    assert counter_replayer().result(restored(replay)) == {"total": 12}


def test_a_replay_that_diverges_is_refused_naming_the_turn() -> None:
    replay = restored(played(counter_replayer(), MOVES))
    flaky = counter_replayer(glitch_at=3, name="gymnasium:Counter-v0")  # the 3rd step: turn 4
    with pytest.raises(ReplayMismatchError) as caught:
        flaky.live(replay)
    assert caught.value.turn == 4
    message = str(caught.value)
    assert "gymnasium:Counter-v0" in message
    assert "seed 5" in message
    assert "did not reproduce turn 4 of 5" in message
    assert "not deterministic" in message
    assert isinstance(caught.value, EnvharnessError)


def test_a_reset_that_differs_is_named_as_the_reset() -> None:
    replay = restored(played(counter_replayer(), MOVES))
    tampered = msgspec.structs.replace(replay, seed=6)
    with pytest.raises(ReplayMismatchError, match="did not reproduce the reset") as caught:
        counter_replayer().live(tampered)
    assert caught.value.turn == 0


def test_an_inconsistent_state_is_refused() -> None:
    replay = played(counter_replayer(), MOVES)
    broken = msgspec.structs.replace(replay, checks=replay.checks[:-1])
    with pytest.raises(ReplayMismatchError, match="inconsistent: 5 turns but 47 check"):
        counter_replayer().live(broken)


def test_a_step_that_raises_leaves_the_instance_to_be_rebuilt() -> None:
    replayer = counter_replayer()
    replay = played(replayer, MOVES[:2])
    with pytest.raises(TypeError):
        replayer.advance(replay, {"add": "x"})
    assert replayer.result(replay) == {"total": 8}
    assert replayer.rebuilt == 1


def test_a_move_cannot_be_none() -> None:
    replayer = counter_replayer()
    replay, _ = replayer.start(0)
    with pytest.raises(ValueError, match="skip"):
        replayer.advance(replay, None)


def test_checks_cover_only_what_the_adapter_picks() -> None:
    """A value that may differ between two faithful runs (a timing) is left out of the check."""
    clock = iter(range(100))

    def reset(seed: int, setup: Any) -> tuple[Counter, Any]:
        counter = Counter()
        counter.total = seed
        return counter, {"total": seed, "took": next(clock)}

    def step(counter: Counter, move: Any) -> Any:
        counter.total += move
        return {"total": counter.total, "took": next(clock)}

    def picked(result: Any) -> Any:
        return result["total"]

    first = Replayer("timed", reset, step, checked=picked)
    replay, _ = first.start(3)
    replay, _ = first.advance(replay, 4)
    again = Replayer("timed", reset, step, checked=picked)
    assert again.result(restored(replay))["total"] == 7
