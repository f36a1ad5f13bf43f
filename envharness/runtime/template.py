"""What every session of one harness shares, and the plans stamped out of it.

A :class:`SessionTemplate` holds the environment and agent factories and the options a user
gave once (already validated by :mod:`envharness.api.setup`); every planner — a standalone run,
an experiment, a resume, a continuation — asks it for a :class:`SessionPlan`, so none of them
calls back into the facade that made it. :class:`SessionPauses` is the set of sessions one
harness is running, by id: what ``harness.pause(id)`` can reach.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET

from envharness.contracts.agent import Agent, AgentStart
from envharness.contracts.budget import Budget
from envharness.contracts.environment import Environment
from envharness.contracts.operations import EnvironmentOperation
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.hooks import HarnessHooks
from envharness.records import SessionConfig, new_id
from envharness.runtime.hooking import DEFAULT_ON_BLOCK_LIMIT, OnBlockLimit, check_hooks
from envharness.runtime.plan import PauseRequest, SessionPlan
from envharness.runtime.session import SessionRunner

__all__ = ["SessionPauses", "SessionTemplate", "check_budget", "keeping_block_limit"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True, slots=True)
class SessionTemplate:
    """The factories and options every session of one harness shares.

    ``new_environment`` and ``new_agents`` make fresh, checked objects per session (a factory's
    failure is a :class:`ConfigurationError` naming it); the rest is copied into each plan.
    """

    new_environment: Callable[[], Environment[Any, Any]]
    new_agents: Callable[[Mapping[str, AgentStart]], dict[str, Agent]]
    roster: Mapping[str, str]
    action_timeout: float | None
    operations: Mapping[str, EnvironmentOperation]
    checkpoint_every: int | None
    hooks: HarnessHooks | None
    hook_budget: float | None
    max_blocks: int
    runner: type[SessionRunner] = SessionRunner
    budget: Budget | None = None
    """What each session may spend, unless a call gives another budget."""
    on_block_limit: OnBlockLimit = DEFAULT_ON_BLOCK_LIMIT
    starting: frozenset[str] = frozenset()
    """The participants whose factories take their :class:`AgentStart` (``context``): only
    theirs are made, since most factories take none and every session would pay for them."""

    def hooks_for(self, hooks: HarnessHooks | None) -> HarnessHooks | None:
        """The hooks a call asked for, else the template's own (``None``: no hooks)."""
        return check_hooks(hooks) if hooks is not None else self.hooks

    def budget_for(self, budget: Budget | None) -> Budget | None:
        """The session budget a call asked for, else the template's own (``None``: none)."""
        return check_budget(budget) if budget is not None else self.budget

    def plan(
        self,
        scenario: Scenario[Any],
        input: Any,
        *,
        turns: int,
        seed: int,
        environment: Environment[Any, Any] | None = None,
        session_id: str | None = None,
        experiment_id: str | None = None,
        trial: int | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> SessionPlan:
        """One session's plan with fresh agents; ``input`` is the scenario's input, already
        validated against the environment's input type (by the caller, who may have checked
        a whole experiment's inputs at once)."""
        session_id = session_id or new_id("ses")
        starts: dict[str, AgentStart] = {}
        if self.starting:
            told = _encode(scenario.reference_record(input).input)
            starts = {
                name: AgentStart(
                    session_id=session_id,
                    participant=name,
                    role=self.roster[name],
                    scenario_id=scenario.id,
                    input=_decode(told),  # each agent its own copy
                    seed=seed,
                )
                for name in self.starting
            }
        return SessionPlan(
            session_id=session_id,
            environment=environment if environment is not None else self.new_environment(),
            agents=self.new_agents(starts),
            roster=self.roster,
            scenario=scenario,
            input=input,
            turns=turns,
            seed=seed,
            action_timeout=self.action_timeout,
            experiment_id=experiment_id,
            trial=trial,
            operations=self.operations,
            checkpoint_every=self.checkpoint_every,
            hooks=self.hooks_for(hooks),
            hook_budget=self.hook_budget,
            max_blocks=self.max_blocks,
            on_block_limit=self.on_block_limit,
            budget=self.budget_for(budget),
        )


def keeping_block_limit(plan: SessionPlan, recorded: SessionConfig) -> SessionPlan:
    """``plan`` with the block-limit policy ``recorded`` when the session started with hooks:
    a resumed or branched session goes on under the rules it was recorded with, like its seed
    (one recorded before the policy was, skipped). A session that ran without hooks recorded
    none, and takes the harness's."""
    if recorded.max_blocks is None:
        return plan
    policy = recorded.on_block_limit
    return dataclasses.replace(
        plan,
        max_blocks=recorded.max_blocks,
        on_block_limit=DEFAULT_ON_BLOCK_LIMIT if policy is UNSET else policy,
    )


def check_budget(budget: object, what: str = "budget") -> Budget:
    """``budget`` if it is a :class:`Budget`; a clear refusal otherwise (a mapping is not one:
    its limits would go unchecked)."""
    if isinstance(budget, Budget):
        return budget
    hint = f"; write Budget(**{dict(budget)!r})" if isinstance(budget, Mapping) and budget else ""
    raise ConfigurationError(
        f"{what} must be a Budget(usd=..., tokens=..., seconds=...) from "
        f"envharness.contracts.budget, or None for no limit; got {type(budget).__name__} "
        f"{budget!r:.80}{hint}"
    )


class SessionPauses:
    """The sessions one harness is running, each with the request that pauses it."""

    __slots__ = ("_running",)

    def __init__(self) -> None:
        self._running: dict[str, PauseRequest] = {}

    @asynccontextmanager
    async def holding(
        self, session_id: str, request: PauseRequest | None = None
    ) -> AsyncIterator[PauseRequest]:
        """Make ``session_id`` pausable for the block; yields the request to plan with."""
        request = self._running[session_id] = request or PauseRequest()
        try:
            yield request
        finally:
            if self._running.get(session_id) is request:
                del self._running[session_id]

    def request(self, session_id: str) -> None:
        """Pause the one running session whose id starts with ``session_id``.

        Callable from any thread (it only sets a flag).
        """
        found = [request for sid, request in self._running.items() if sid.startswith(session_id)]
        if not session_id or len(found) != 1:
            running = ", ".join(sorted(self._running)) or "none"
            raise ConfigurationError(
                f"session {session_id!r} is not running in this harness, so it cannot be "
                f"paused here (running: {running})"
            )
        found[0].request()
