"""One turn of a session: what the participants see, what they answer, and what comes of it.

The session runner (:mod:`envharness.runtime.session`) owns the session's life — its start,
segments, checkpoints, score and end — and has a :class:`TurnPlayer` play each turn: observe
for the acting participants, ask their agents, put each answer before the hooks (when the
session has any), validate the actions, resolve them, and record every step of it —
observations, attempted, blocked and executed actions, artifacts and the outcome. Simultaneous
participants act together in one step; sequential ones one step each, in roster order; with
``turn_order="environment"`` the environment's ``acting(state)`` names who acts in the turn's
one step. An outcome or reward the environment addresses to a participant who did not act is
recorded as its ``outcome.participant``. What a participant learns of its turn (``feedback``)
is sent only once the turn is committed.

This is the hot path: what every turn needs is bound once per session, not looked up per turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Literal

import anyio
import msgspec
from msgspec import UNSET

from envharness.contracts.agent import AgentCapabilities, provides
from envharness.contracts.environment import (
    ChecksActions,
    DecidesWhoActs,
    Environment,
    RendersText,
    Resolution,
)
from envharness.hooks import BlockAndPrompt, Rewrite
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Artifact,
    Cost,
    Log,
    Observation,
    Outcome,
    ParticipantOutcome,
    Transcript,
    canonical,
)
from envharness.runtime.budgets import RecordFunction
from envharness.runtime.checks import (
    SessionFailure,
    as_evidence,
    awaited,
    call_environment,
    checked,
    checked_resolution,
    checked_signals,
    encodable,
    invoke,
    is_pending,
    private_copy,
)
from envharness.runtime.hooking import HookRunner, Validate, with_hints
from envharness.runtime.participants import (
    AgentFailure,
    Caller,
    OutOfBudget,
    Reply,
    ask_all,
    send_feedback,
    send_veto,
)
from envharness.runtime.plan import SessionPlan
from envharness.runtime.recorder import SessionRecorder
from envharness.store.locate import AnyStore

__all__ = ["TurnPlayer", "action_check"]

_json = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def action_check(environment: Environment[Any, Any]) -> Validate:
    """How an agent's answer is checked against ``environment``'s action type: the check
    returns ``(problem, action)``, ``problem`` ``None`` when the action is valid."""

    def validate(raw: Any) -> tuple[str | None, Any]:
        if not isinstance(raw, dict):
            return f"expected a dict (a JSON object), got {type(raw).__name__}: {raw!r:.200}", None
        action_type = environment.spec.action_type
        if action_type is None:
            try:
                canonical(raw)
            except (TypeError, msgspec.EncodeError) as exc:
                return f"the action is not JSON-encodable: {exc}", None
            return None, raw
        try:
            return None, msgspec.convert(raw, action_type)
        except msgspec.ValidationError as exc:
            return f"{exc} (expected {action_type.__qualname__})", None

    return validate


def _bystanders(
    resolution: Resolution, actions: Mapping[str, Any], roster: Mapping[str, Any]
) -> list[str]:
    """The participants who did not act but were addressed an outcome or a reward, in roster
    order (asked only when someone did not act and someone was addressed)."""
    return [
        name
        for name in roster
        if name not in actions and (name in resolution.outcomes or name in resolution.rewards)
    ]


class TurnPlayer:
    """Plays the turns of one session and records them; the runner says which turn, and when."""

    __slots__ = (
        "_acting",
        "_callers",
        "_capabilities",
        "_check_action",
        "_environment",
        "_feedback",
        "_hooking",
        "_keep_state",
        "_listening",
        "_outcome_seqs",
        "_plan",
        "_record",
        "_render",
        "_roster",
        "_run_last",
        "_sequential",
        "_settle",
        "_store",
        "_validate",
        "last_state",
        "listens",
        "truncated",
    )

    def __init__(
        self,
        store: AnyStore,
        plan: SessionPlan,
        evidence: SessionRecorder,
        capabilities: Mapping[str, AgentCapabilities],
        *,
        hooking: HookRunner | None,
        validate: Validate,
        outcome_seqs: dict[int, list[int]],
        record: RecordFunction | None = None,
    ) -> None:
        self._store = store
        self._plan = plan
        self._environment = plan.environment
        self._record = record or evidence.record
        """``evidence.record``, or the runner's wrapper of it (one that counts costs)."""
        self._keep_state = evidence.keep_state
        self._settle = evidence.settle
        self._capabilities = capabilities
        self._hooking = hooking
        self._validate = validate
        self._outcome_seqs = outcome_seqs
        """Per turn, the ``seq`` of each ``outcome`` record (a score's findings cite them)."""
        environment = plan.environment
        self._sequential = environment.spec.turn_order == "sequential"
        self._run_last = plan.on_block_limit == "run_last"
        """Whether the block limit runs the last vetoed answer instead of skipping the turn."""
        # The harness refused an environment that declares the order but lacks acting().
        whose_turn = environment.spec.turn_order == "environment"
        self._acting = (
            environment.acting if whose_turn and provides(environment, DecidesWhoActs) else None
        )
        self._render = environment.render_text if provides(environment, RendersText) else None
        self._check_action = (
            environment.check_action if provides(environment, ChecksActions) else None
        )
        # Sync agents' threads: one per participant, never shared with other sessions or the
        # journal, so a slow agent elsewhere cannot eat into this session's action timeout.
        threaded = False
        for found in capabilities.values():  # a loop, not any(): no generator per session
            if not found.is_async and not found.runs_inline:
                threaded = True
        threads = anyio.CapacityLimiter(len(plan.agents)) if threaded else None
        self._callers = {
            name: Caller(name, agent, capabilities[name], plan.action_timeout, threads)
            for name, agent in plan.agents.items()
        }
        self._feedback: list[tuple[str, Any, str | None, Any]] = []
        """This turn, in order: (participant, outcome, why it was blocked, the executed action);
        a participant that did not act has neither a reason nor an action."""
        self._listening = {
            name for name, found in capabilities.items() if found.feedback is not None
        }
        """The participants whose agents want ``feedback`` (what is kept for it, only for
        them)."""
        self.listens = bool(self._listening)
        """Whether any agent wants ``feedback``: if none does, the runner need not ask to
        send it."""
        self._roster = list(plan.agents)
        """The participants, in roster order."""
        self.truncated = False
        """Whether the last step's resolution cut the episode short (rather than ending it)."""
        self.last_state: str | None = None
        """The digest of the state the evidence last named (an outcome or a receipt); the
        runner names the states its operations and ``after_turn`` leave here too."""

    def play(self, turn: int, state: Any) -> Awaitable[tuple[Any, bool]]:
        """Play ``turn`` on ``state``; the awaitable gives the resolved state and whether it is
        done. (Not itself a coroutine: when everyone acts at once, the turn is one step, and
        awaiting that step directly saves a coroutine per turn.)"""
        if self._acting is None and not self._sequential:
            return self._step(turn, state, self._roster)
        return self._play_steps(turn, state)

    async def _play_steps(self, turn: int, state: Any) -> tuple[Any, bool]:
        """A turn of several steps (one per participant), or of the environment's choosing."""
        if self._acting is not None:
            return await self._step(turn, state, await self._who_acts(state))
        done = False
        for participant in self._roster:
            state, done = await self._step(turn, state, [participant])
            if done:
                break
        return state, done

    async def send_feedback(self, turn: int) -> None:
        """After the turn is committed — an agent learns nothing the evidence lacks."""
        feedback, self._feedback = self._feedback, []
        listening = self._listening
        if not any(entry[0] in listening for entry in feedback):
            return
        await self._settle()  # feedback is an effect outside the store: commit first
        for participant, outcome, blocked, action in feedback:
            if participant in listening:
                await send_feedback(
                    participant, self._capabilities[participant], turn, outcome, blocked, action
                )

    async def _step(self, turn: int, state: Any, acting: list[str]) -> tuple[Any, bool]:
        """Observe, act and resolve for the ``acting`` participants (all of them, or one)."""
        hooking = self._hooking
        observations = {}
        seen: dict[str, tuple[Any, bytes]] = {}
        """With hooks: each observation as produced, and its JSON (for contexts and re-asks)."""
        for participant in acting:
            # Looked up at each call: an environment's lifespan() may set up its methods.
            observation = invoke(self._environment, "observe", state, participant)
            if is_pending(observation):
                observation = await awaited(observation, "observe")
            shown = encodable(observation, "observation", participant)
            text = None if self._render is None else await self._text_view(state, participant)
            self._record(
                Observation(observation=shown, text=UNSET if text is None else text),
                turn=turn, participant=participant,
            )  # fmt: skip
            # The agent gets its own copy: it can neither change the state nor what was recorded.
            observations[participant] = private_copy(observation, shown)
            if hooking is not None:
                data = _json(shown)
                seen[participant] = (observation, data)
                hints = await hooking.before_ask(turn, participant, state, msgspec.Raw(data))
                observations[participant] = with_hints(observations[participant], hints)
        try:
            if len(observations) == 1:  # one participant acts: no task group to gather answers
                [(participant, observation)] = observations.items()
                caller = self._callers[participant]
                replies = {
                    participant: caller.answer(observation)
                    if caller.inline
                    else await caller.ask(observation)
                }
            else:
                replies = await ask_all(self._callers, observations)
        except OutOfBudget as stop:  # the session stops; what the others answered was paid for
            for participant, arrived in stop.arrived.items():
                self._attempted(turn, participant, arrived)
            self._spent_in_vain(turn, stop.participant, stop.cost)
            raise
        except AgentFailure as failure:
            self._spent_in_vain(turn, failure.participant, failure.cost)
            raise
        actions: dict[str, Any] = {}
        for participant in acting:
            reply: Reply | None = replies[participant]
            rewritten = None
            if hooking is None:
                self._attempted(turn, participant, replies[participant])
            else:
                reply, rewritten = await self._vetted(
                    turn, participant, state, replies[participant], seen
                )
                if reply is None:
                    continue  # vetoed max_blocks times in a row: the turn is skipped
            assert reply is not None
            judge: Literal["validation", "environment"] = "validation"
            if rewritten is not None:  # the hooks validated it against the action type
                raw, problem, action = rewritten, None, rewritten
            else:
                raw = reply.action
                problem, action = self._validate(raw)
            if problem is None and self._check_action is not None:
                # A hook's rewrite answers to the rules like the agent's own answer.
                problem, judge = await self._rule_check(state, participant, action), "environment"
            if problem is None:
                actions[participant] = action
            elif self._environment.spec.invalid_actions == "block":
                shown_raw = as_evidence(raw)
                self._record(
                    ActionBlocked(action=shown_raw, reason=problem, by=judge),
                    turn=turn, participant=participant,
                )  # fmt: skip
                if participant in self._listening:
                    self._feedback.append((participant, None, problem, None))
                if hooking is not None:
                    hooking.blocked(turn, participant, shown_raw, problem, prompt=False)
            else:
                raise SessionFailure(f"agent {participant!r} returned an invalid action: {problem}")
        resolved = invoke(self._environment, "resolve", state, actions)
        if is_pending(resolved):
            resolved = await awaited(resolved, "resolve")
        resolution = checked_resolution(resolved, self._plan.agents)
        digest = self.last_state = self._keep_state(resolution.state)
        rewards = resolution.rewards
        executed: dict[str, Any] = {}
        for participant, action in actions.items():
            outcome = encodable(resolution.outcomes.get(participant), "outcome", participant)
            shown_action = as_evidence(action)
            self._record(
                ActionExecuted(
                    action=shown_action, outcome=outcome, reward=rewards.get(participant, UNSET)
                ),
                turn=turn, participant=participant,
            )  # fmt: skip
            if participant in self._listening:
                self._feedback.append((participant, outcome, None, shown_action))
            if hooking is not None:
                hooking.executed(turn, participant, shown_action, outcome)
                executed[participant] = shown_action
        roster = self._plan.agents
        if len(actions) == len(roster) or not (resolution.outcomes or resolution.rewards):
            bystanders: Sequence[str] = ()  # everyone acted, or no one else was addressed
        else:
            bystanders = _bystanders(resolution, actions, roster)
        for participant in bystanders:
            outcome = encodable(resolution.outcomes.get(participant), "outcome", participant)
            self._record(
                ParticipantOutcome(outcome=outcome, reward=rewards.get(participant, UNSET)),
                turn=turn, participant=participant,
            )  # fmt: skip
            if participant in self._listening:
                self._feedback.append((participant, outcome, None, None))
        for name, data in resolution.artifacts.items():
            sha256 = await self._store.put_artifact(data)
            self._record(Artifact(name=name, sha256=sha256, size=len(data)), turn=turn)
        self.truncated = resolution.truncated
        outcome_row = self._record(
            Outcome(
                state=digest,
                done=resolution.done,
                signals=checked_signals(resolution),
                truncated=True if resolution.truncated else UNSET,
            ),
            turn=turn, participant=acting[0] if self._sequential else None,
        )  # fmt: skip
        self._outcome_seqs.setdefault(turn, []).append(outcome_row.seq)
        if hooking is not None:
            for participant in acting:
                await hooking.after_step(
                    turn,
                    participant,
                    resolution.state,
                    msgspec.Raw(seen[participant][1]),
                    executed.get(participant),
                )
        return resolution.state, resolution.done or resolution.truncated

    async def _who_acts(self, state: Any) -> list[str]:
        """The environment's answer to who acts on ``state``, checked against the roster."""
        acting = await call_environment(self._environment, "acting", state)
        roster = self._plan.agents
        if isinstance(acting, str) or not isinstance(acting, list | tuple | set | frozenset):
            raise SessionFailure(
                f"environment acting() returned {type(acting).__name__} {acting!r:.80}; return "
                "a list of participant names"
            )
        named = list(dict.fromkeys(acting))
        unknown = [name for name in named if name not in roster]
        if unknown:
            raise SessionFailure(
                f"environment acting() named {', '.join(map(repr, unknown))}, who is not a "
                f"participant (participants: {', '.join(roster)})"
            )
        return named

    async def _rule_check(self, state: Any, participant: str, action: Any) -> str | None:
        problem = await call_environment(
            self._environment, "check_action", state, participant, action
        )
        if problem is not None and not isinstance(problem, str):
            raise SessionFailure(
                f"environment check_action() returned {type(problem).__name__}; return None "
                "for a legal action or a str saying why it is not"
            )
        return problem

    async def _text_view(self, state: Any, participant: str) -> str | None:
        if self._render is None:
            return None
        text = await call_environment(self._environment, "render_text", state, participant)
        if text is not None and not isinstance(text, str):
            raise SessionFailure(
                f"environment render_text() returned {type(text).__name__}; return a str or None"
            )
        return text

    def _spent_in_vain(self, turn: int, participant: str, cost: Cost | None) -> None:
        """Record what an act that gave no action cost (a model asked for a valid action until
        it ran out of asks, or of budget): spending is evidence even when nothing came of it."""
        if cost is not None:
            self._record(checked(cost, f"the cost reported by agent {participant!r}"), turn=turn,
                         participant=participant)  # fmt: skip

    def _attempted(self, turn: int, participant: str, reply: Reply) -> Any:
        """Record what the participant answered (the messages it added to its conversation,
        and what it said it cost); its JSON form."""
        attempted = as_evidence(reply.action)
        self._record(
            ActionAttempted(action=attempted, seconds=reply.seconds),
            turn=turn, participant=participant,
        )  # fmt: skip
        if reply.transcript:  # private to the participant, like what it was shown
            self._record(Transcript(messages=reply.transcript), turn=turn, participant=participant)
        if reply.cost is not None:
            cost = checked(reply.cost, f"the cost reported by agent {participant!r}")
            self._record(cost, turn=turn, participant=participant)
        return attempted

    async def _vetted(
        self,
        turn: int,
        participant: str,
        state: Any,
        reply: Reply,
        seen: Mapping[str, tuple[Any, bytes]],
    ) -> tuple[Reply | None, Any]:
        """Record the answer and put it before ``on_before_action``.

        Returns the reply that stands and the action a rewrite validated to (or ``None``). A
        ``block_and_prompt`` records ``action.blocked``, tells an agent that takes vetoes
        (``vetoed(turn, action, reason)``) and asks the agent again, showing it the message.
        After ``max_blocks`` vetoes in a row the plan's ``on_block_limit`` decides: ``skip``
        records the last veto as a block too and skips the participant's turn (``None``), so
        a blocked action never runs; ``run_last`` lets the last answer stand (recorded as
        attempted, after the blocks before it, with a ``log`` saying why it ran).
        """
        hooking = self._hooking
        assert hooking is not None
        original, data = seen[participant]
        blocks = 0
        while True:
            attempted = self._attempted(turn, participant, reply)
            effect, rewritten = await hooking.before_action(
                turn, participant, state, msgspec.Raw(data), attempted
            )
            if not isinstance(effect, BlockAndPrompt):
                return reply, (rewritten if isinstance(effect, Rewrite) else None)
            blocks += 1
            final = blocks >= hooking.max_blocks
            if final and self._run_last:
                self._record(
                    Log(
                        message=f"vetoed {blocks} time(s) in a row (max_blocks="
                        f"{hooking.max_blocks}); on_block_limit='run_last' runs this last "
                        f"answer: {effect.message}",
                        level="warning",
                        stream="harness",
                    ),
                    turn=turn, participant=participant,
                )  # fmt: skip
                return reply, None
            reason = effect.message
            if final:
                reason = (
                    f"{effect.message} [blocked {blocks} time(s) in a row: this turn is skipped "
                    f"(max_blocks={hooking.max_blocks})]"
                )
            self._record(
                ActionBlocked(action=attempted, reason=reason, by="hook"),
                turn=turn, participant=participant,
            )  # fmt: skip
            hooking.blocked(turn, participant, attempted, reason, prompt=not final)
            if final:
                if participant in self._listening:
                    self._feedback.append((participant, None, reason, None))
                return None, None
            await send_veto(
                participant, self._capabilities[participant], turn, attempted, effect.message
            )
            observation = with_hints(
                private_copy(original, _decode(data)), hooking.take_hints(turn, participant)
            )
            try:
                reply = await self._callers[participant].ask(observation)
            except (AgentFailure, OutOfBudget) as failed:
                self._spent_in_vain(turn, participant, failed.cost)
                raise
