"""Which number of a trajectory's score is a dataset row's reward, and for whom.

A score has shared metrics (the session's) and, where the environment scores participants
apart, each participant's own (``per_participant``: a zero-sum game's winner and loser). A row
holds one participant's conversation, so its reward must be that participant's: copying one
shared number onto every participant's rows would tell the winner it lost. The rules:

- a metric named by ``reward=`` is the participant's own when any participant has it, else the
  shared one;
- with none named, a participant's own metric when the score has exactly one such name, else
  the shared pass/fail as 1.0/0.0, else the only shared metric;
- a shared reward on the rows of more than one participant of one trajectory is refused unless
  the dataset declares it shared (``shared_reward=True``: a cooperative game, where one
  number really is everybody's).

Everything here is a pure function of the trajectory's reward chain, so admission and the rows
decide alike.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal, NamedTuple

from msgspec import UnsetType

from envharness.trajectories.model import RewardChain

__all__ = ["RewardChoice", "choose_reward", "names_text", "participant_reward", "shared_refusal"]

RewardScope = Literal["participant", "shared"]


class RewardChoice(NamedTuple):
    """Where rows of one trajectory take their reward from.

    ``scope``: ``participant`` (each row its participant's own metric) or ``shared`` (the
    score's shared metric, the same for every row). ``metric`` is ``None`` for the shared
    pass/fail as 1.0/0.0.
    """

    scope: RewardScope
    metric: str | None


def own_metrics(chain: RewardChain) -> dict[str, dict[str, float | None]]:
    """Each participant's own metrics (``{}`` when the score has none)."""
    return {} if isinstance(chain.per_participant, UnsetType) else chain.per_participant


def choose_reward(chain: RewardChain, metric: str | None) -> tuple[RewardChoice | None, str]:
    """The reward's source for ``metric`` (``None``: the default), or ``None`` and why not."""
    own = sorted({name for metrics in own_metrics(chain).values() for name in metrics})
    if metric is not None:
        if metric in own:
            return RewardChoice("participant", metric), ""
        if metric in chain.metrics:
            return RewardChoice("shared", metric), ""
        names = ", ".join(sorted(chain.metrics)) or "none"
        per = f"; per participant: {', '.join(own)}" if own else ""
        return None, f"score seq {chain.score_seq} has no metric {metric!r} (it has: {names}{per})"
    if len(own) == 1:
        return RewardChoice("participant", own[0]), ""
    if chain.passed is not None:
        return RewardChoice("shared", None), ""
    if len(chain.metrics) == 1:
        [only] = chain.metrics
        return RewardChoice("shared", only), ""
    names = ", ".join(sorted(chain.metrics)) or "none"
    per = f"; per participant: {', '.join(own)}" if own else ""
    return None, (
        f"score seq {chain.score_seq} has no pass/fail and several metrics ({names}{per}); "
        "name the reward metric (reward=... / --reward METRIC)"
    )


def shared_value(chain: RewardChain, choice: RewardChoice) -> tuple[float | None, str]:
    """The shared reward (``choice.scope == "shared"``), or ``None`` and why there is none."""
    if choice.metric is None:
        return (1.0 if chain.passed else 0.0), ""
    value = chain.metrics.get(choice.metric)
    if value is None:
        return None, f"score seq {chain.score_seq} recorded metric {choice.metric!r} as null"
    return value, ""


def participant_reward(
    chain: RewardChain, choice: RewardChoice, participant: str
) -> tuple[float | None, str]:
    """``participant``'s reward under ``choice``, or ``None`` and why there is none."""
    if choice.scope == "shared":
        return shared_value(chain, choice)
    metric = choice.metric
    assert metric is not None  # a participant's reward is always a named metric
    metrics = own_metrics(chain).get(participant)
    if metrics is None or metric not in metrics:
        has = ", ".join(sorted(metrics or {})) or "none"
        return None, (
            f"score seq {chain.score_seq} has no per-participant metric {metric!r} for "
            f"{participant!r} (its own metrics: {has}); have the environment's score() give "
            f"every participant {metric!r} in ScoreReport(per_participant=...), or build the "
            "dataset for the participants that have it (participants=[...])"
        )
    value = metrics[metric]
    if value is None:
        return None, (
            f"score seq {chain.score_seq} recorded {participant!r}'s metric {metric!r} as null"
        )
    return value, ""


def shared_refusal(chain: RewardChain, choice: RewardChoice, rowed: Collection[str]) -> str:
    """Why a shared reward may not be every row's reward of ``rowed`` participants."""
    which = f"metric {choice.metric!r}" if choice.metric is not None else "pass/fail"
    own = sorted({name for metrics in own_metrics(chain).values() for name in metrics})
    if own:
        first = f"the reward ({which}) of score seq {chain.score_seq} is shared"
        how = f"pass reward=<metric> naming a per-participant one ({', '.join(own)})"
    else:
        first = f"score seq {chain.score_seq} has no per-participant metrics"
        how = (
            "have the environment's score() return ScoreReport(per_participant=...) and pass "
            "reward=<metric>"
        )
    both = "both" if len(rowed) == 2 else "all"
    return (
        f"{first}; a dataset with rows for {names_text(sorted(rowed))} would give {both} the "
        f"same reward: {how}, or build the dataset for one participant (participants=[...]), "
        "or declare the reward shared by all (shared_reward=True, CLI --shared-reward) when "
        "it is a cooperative game"
    )


def names_text(names: Sequence[str]) -> str:
    """``alice``, ``alice and bob``, ``alice, bob and carol``."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"
