"""The exact, small state of an environment that cannot write itself down: its seed and moves.

A Gymnasium or PettingZoo environment (a TextWorld game, most simulators) is a live Python
object with no way to save its state and load it back. envharness needs exactly that: it stores
the state after every turn, and resume, branch and checkpoint restore rebuild it — in another
process, on a fresh environment instance. So an adapter keeps the live instance for the running
session and records instead what rebuilds it: the seed it was reset with and the moves made
since (their JSON forms), with a short check of what each move produced. That is enough for
environments that are deterministic given their seed and moves, and the checks verify that
every time a state is rebuilt.

How: a frozen :class:`Replay` value is part of the adapter's state. A :class:`Replayer` owns the
live instance and knows which ``Replay`` it is at. Every call that needs the instance names the
state it is for; when the instance is elsewhere (a resume in a new process, a branch from turn
N, a restored checkpoint, a fresh instance, an older state), the replayer resets it with the
seed and plays the moves again, comparing each step's check with the recorded one. The first
difference raises :class:`ReplayMismatchError` naming the turn where the replay diverged — the
runtime records it as the session's failure. A state that cannot be rebuilt exactly is refused,
never approximated.

**Cost.**

- A call on the state the instance is at costs an identity check.
- Rebuilding costs a reset plus one step per recorded turn: a branch, resume or restore from
  turn N replays N steps. ``tools/bench/adapters.py`` measures it.
- The state grows by a move's JSON and :data:`CHECK_CHARS` characters per turn: about 10 bytes
  for a toy-text move, so Taxi's state is 10 KB at turn 1,000. The runtime stores every turn's
  state, so a T-turn episode's states hold O(T²) bytes in all: 5.1 MB for 1,000 Taxi turns, four
  times that for 2,000. The store keeps them compressed (``envharness.store.blobs``: ~160 KB
  for those 1,000 turns), but every rebuild still replays from the start. That is why this
  suits episodes of up to a few thousand turns, not environments that run forever.

**Reusing it** (the Gymnasium and PettingZoo adapters do this; a TextWorld adapter does the
same):

1. Write ``reset(seed, setup) -> (live, result)``, which makes the live instance (or reuses
   the one it has) and resets it with ``seed`` and ``setup`` (any other JSON the reset needs,
   kept in the ``Replay``), and ``step(live, move) -> result``, which applies one
   move. ``move`` is a JSON value (never ``None``). ``result`` is a JSON value saying what the
   step produced (observation, reward, end flags), which the checks cover. ``step`` must
   depend on nothing but the instance and the move.
2. Put a ``Replay`` in the adapter's state Struct, and declare that Struct as the spec's
   ``state_type`` so a restored state is typed again.
3. ``initialize`` calls :meth:`Replayer.start`. ``resolve`` calls :meth:`Replayer.advance`,
   or :meth:`Replayer.skip` for a turn in which nothing moved (an action was blocked), so the
   ``Replay`` keeps one entry per turn and a mismatch can name the turn. Every other method
   that needs the live instance calls :meth:`Replayer.live`, or :meth:`Replayer.result` for
   what the latest step produced.
4. Give each adapter instance its own ``Replayer``: the harness makes one per session
   (:class:`~envharness.adapters._copies.PerSessionCopy` does it, given ``_reset`` and ``_step``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from envharness.errors import EnvharnessError

__all__ = ["CHECK_CHARS", "Replay", "ReplayMismatchError", "Replayer", "SeededInput", "check_of"]

LiveT = TypeVar("LiveT")

CHECK_CHARS = 8
"""Hex characters of each step's check (32 bits): a step that diverges goes unnoticed with a
chance of 1 in 4 billion, and a divergence usually shows again in the steps after it."""

NO_MOVE = "-" * CHECK_CHARS
"""The check of a turn in which nothing moved."""

_encode = msgspec.json.Encoder(order="sorted").encode


class SeededInput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A scenario's input to an adapter that resets with a seed: the reset's seed (``None``:
    derived from the session's seed) and its ``options`` (kept in the :class:`Replay`)."""

    seed: int | None = None
    options: dict[str, Any] | None = None


class Replay(msgspec.Struct, frozen=True, kw_only=True):
    """Where a live instance is: the seed (and setup) it was reset with, one move per turn
    since (``None`` for a turn in which nothing moved), and each turn's check
    (:data:`CHECK_CHARS` hex characters; the first for the reset)."""

    seed: int
    setup: Any = None
    """What else the reset needs, as JSON (Gymnasium's reset ``options``, a game file)."""
    moves: tuple[Any, ...] = ()
    checks: str = ""

    @property
    def turns(self) -> int:
        """The turns recorded (each one a move or a turn without one)."""
        return len(self.moves)


class ReplayMismatchError(EnvharnessError):
    """A replay did not reproduce what was recorded: the environment is not deterministic given
    its seed and moves, so the state cannot be rebuilt (``turn`` 0 is the reset)."""

    def __init__(self, message: str, *, turn: int) -> None:
        super().__init__(message)
        self.turn = turn


def check_of(result: Any) -> str:
    """The check of one step's result: the start of the sha256 of its canonical JSON."""
    return hashlib.sha256(_encode(result)).hexdigest()[:CHECK_CHARS]


class Replayer(Generic[LiveT]):
    """Keeps one live instance at a recorded :class:`Replay`, replaying when it is not.

    ``name`` says what is replayed in errors (``"gymnasium:Taxi-v4"``); ``reset`` and ``step``
    are described in this module's docstring. ``checked`` picks what of a result the checks
    cover (all of it by default): leave out what may differ between two faithful runs, such as
    a wrapper's wall-clock timings in Gymnasium's ``info``.
    """

    __slots__ = (
        "_at",
        "_checked",
        "_live",
        "_name",
        "_reset",
        "_result",
        "_step",
        "rebuilt",
        "replayed",
    )

    def __init__(
        self,
        name: str,
        reset: Callable[[int, Any], tuple[LiveT, Any]],
        step: Callable[[LiveT, Any], Any],
        *,
        checked: Callable[[Any], Any] | None = None,
    ) -> None:
        self._name = name
        self._reset = reset
        self._step = step
        self._checked = checked
        self._live: LiveT | None = None
        self._at: Replay | None = None
        """The replay the live instance is at; ``None`` when there is none, or it is lost (a
        step raised halfway)."""
        self._result: Any = None
        self.rebuilt = 0
        """How many times the instance was reset to replay a history (tests, benches)."""
        self.replayed = 0
        """How many moves were replayed in all."""

    def start(self, seed: int, setup: Any = None) -> tuple[Replay, Any]:
        """Reset the live instance with ``seed`` (and ``setup``, a JSON value): the first
        replay, and what the reset gave."""
        self._at = None
        live, result = self._reset(seed, setup)
        self._live, self._result = live, result
        self._at = Replay(seed=seed, setup=setup, checks=self._check(result))
        return self._at, result

    def advance(self, replay: Replay, move: Any) -> tuple[Replay, Any]:
        """Play ``move`` (a JSON value) on the instance at ``replay``: the next replay (one turn
        more) and what the step gave."""
        if move is None:
            raise ValueError("a move cannot be None: None marks a turn without a move (skip)")
        live = self.live(replay)
        self._at = None  # if the step raises, where the instance is is unknown
        result = self._step(live, move)
        self._result = result
        self._at = msgspec.structs.replace(
            replay, moves=(*replay.moves, move), checks=replay.checks + self._check(result)
        )
        return self._at, result

    def skip(self, replay: Replay) -> Replay:
        """A turn in which nothing moved (the move was blocked): one entry more, no step."""
        skipped = msgspec.structs.replace(
            replay, moves=(*replay.moves, None), checks=replay.checks + NO_MOVE
        )
        if self._at is replay:
            self._at = skipped
        return skipped

    def live(self, replay: Replay) -> LiveT:
        """The live instance, at ``replay`` (replayed there first when it is elsewhere)."""
        if self._at is not replay:
            self._go_to(replay)
        assert self._live is not None
        return self._live

    def result(self, replay: Replay) -> Any:
        """What the latest step of ``replay`` produced (the reset's result before any)."""
        if self._at is not replay:
            self._go_to(replay)
        return self._result

    def _go_to(self, target: Replay) -> None:
        at = self._at
        if at is not None and at == target:  # the same history, read back from the store
            self._at = target
            return
        self._check_shape(target)
        done = 0
        if at is not None and _extends(target, at):
            done = at.turns  # the instance is on the way: play only what follows
        else:
            self._at = None
            self._live, self._result = self._reset(target.seed, target.setup)
            self._compare(target, 0, self._result)
            self.rebuilt += 1
        live = self._live
        assert live is not None
        self._at = None  # until the replay is through, the instance is in between
        for index in range(done, target.turns):
            move = target.moves[index]
            if move is None:
                continue
            self._result = self._step(live, move)
            self.replayed += 1
            self._compare(target, index + 1, self._result)
        self._at = target

    def _compare(self, target: Replay, turn: int, result: Any) -> None:
        recorded = target.checks[turn * CHECK_CHARS : (turn + 1) * CHECK_CHARS]
        found = self._check(result)
        if found == recorded:
            return
        where = "the reset" if turn == 0 else f"turn {turn} of {target.turns}"
        raise ReplayMismatchError(
            f"{self._name}: replaying seed {target.seed} did not reproduce {where} (recorded "
            f"check {recorded}, the replay gave {found}). The environment is not deterministic "
            "given its seed and moves (a global random generator, the clock, another version of "
            "its package?), so this state cannot be rebuilt: resume, branch and checkpoint "
            "restore need an environment that is",
            turn=turn,
        )

    def _check(self, result: Any) -> str:
        return check_of(result if self._checked is None else self._checked(result))

    def _check_shape(self, target: Replay) -> None:
        if len(target.checks) != CHECK_CHARS * (target.turns + 1):
            raise ReplayMismatchError(
                f"{self._name}: the recorded state is inconsistent: {target.turns} turns but "
                f"{len(target.checks)} check characters (expected "
                f"{CHECK_CHARS * (target.turns + 1)}); it was not written by this adapter",
                turn=0,
            )


def _extends(target: Replay, at: Replay) -> bool:
    """Whether ``target``'s history continues ``at``'s."""
    return (
        target.seed == at.seed
        and target.setup == at.setup
        and target.turns > at.turns
        and target.checks.startswith(at.checks)
        and target.moves[: at.turns] == at.moves
    )
