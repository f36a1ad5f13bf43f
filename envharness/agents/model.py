"""A chat model that plays in any environment: the observation in, one valid action out.

:class:`ModelAgent` needs no glue per environment. When its session starts (``lifespan``) it
learns the environment's action schema, the participant and the role; each ``act`` renders the
observation — with the harness's hints and what happened since the last answer — into the
conversation through a versioned template, asks the model for an action (a native tool call
where the endpoint takes tools, JSON mode when asked for, else JSON in plain text), checks the
answer against the schema and asks again with the reason, up to ``attempts`` asks in all.
``docs/model-agents.md`` is the guide.

What the agent guarantees the person running it:

- **Nothing is lost when the model fails.** A model that gives no valid action in ``attempts``
  asks ends its session ``failed`` with :class:`NoValidActionError`; each rejected answer and
  why is first written to the session's ``log`` records (stream ``model-agent``). The answers
  of an act that succeeds travel in ``AgentReply.transcript``.
- **A budget is a promise.** Before each call the agent checks what it has spent against its
  :class:`~envharness.contracts.budget.Budget` and raises
  :class:`~envharness.errors.BudgetExhausted` instead of calling; a wall-time limit also bounds
  the call itself. Spending is per session and survives a resume (not a branch).
- **Resumes and branches continue the conversation**: it is part of every checkpoint.
- **One instance, any number of sessions**: calling the agent gives a fresh copy with the same
  settings and its own conversation, which is how the harness uses an agent factory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import anyio
import msgspec

from envharness.agents.conversation import ChatMessage, Conversation, ConversationState, to_message
from envharness.agents.formats import (
    TOOL_NAME,
    Mode,
    ask_line,
    assistant_message,
    describe,
    example_action,
    instructions,
    re_ask,
    request_options,
    schema_text,
    tool_parameters,
)
from envharness.agents.parsing import read_action
from envharness.agents.rendering import (
    feedback_section,
    hints_section,
    outcome_note,
    plain,
    show_observation,
    split_hints,
    veto_note,
)
from envharness.agents.schema import action_problems
from envharness.agents.settings import ActionFormat, Settings, supports_tools
from envharness.agents.template import AgentTemplate
from envharness.contracts.agent import AgentContext, AgentReply, LogLevel, cost_of_failure
from envharness.contracts.budget import Budget, Spending
from envharness.errors import BudgetExhausted, ConfigurationError, EnvharnessError
from envharness.llm.provider import (
    Completion,
    Provider,
    ProviderError,
    StructuredProvider,
    total_cost,
)
from envharness.records import Cost

__all__ = [
    "LOG_STREAM",
    "MAX_NOTES",
    "STATE_FORMAT",
    "TOOL_NAME",
    "ActionFormat",
    "ModelAgent",
    "NoValidActionError",
]

logger = logging.getLogger("envharness.agents")

TOOLS_REFUSED = frozenset({400, 422})
"""Statuses that, answering a request with tools, mean "this endpoint takes no tools"."""
SEED_MODULUS = 2**31
"""Seeds sent to the endpoint are reduced below this (some servers take only 32-bit seeds)."""
STATE_FORMAT = "envharness.model-agent/1"
"""The version of the state a checkpoint keeps for a model agent."""
LOG_STREAM = "model-agent"
"""The ``stream`` of the log records the agent writes (rejected answers, a fallback to text)."""
MAX_NOTES = 20
"""At most this many things that happened (outcomes, vetoes) wait for the next ask; older
ones are summarised as a count, so an agent that is rarely asked keeps a bounded prompt."""


class NoValidActionError(EnvharnessError):
    """The model gave no valid action in all the asks allowed for one; its session fails.

    ``answers`` holds each rejected answer and ``problems`` why it was rejected (both are also
    in the session's log records); ``cost`` what the asks cost (the runtime records it)."""

    def __init__(self, message: str, *, answers: tuple[str, ...], problems: tuple[str, ...]):
        super().__init__(message)
        self.answers = answers
        self.problems = problems
        self.cost: Cost | None = None


class _Spent(msgspec.Struct, kw_only=True):
    usd: float = 0.0
    tokens: int = 0
    seconds: float = 0.0
    calls: int = 0


class _AgentState(msgspec.Struct, kw_only=True):
    """What a checkpoint keeps of one model agent (:data:`STATE_FORMAT`)."""

    format: str
    template: str
    session: str | None = None
    conversation: ConversationState
    notes: list[str] = []
    tools_refused: bool = False
    acts: int = 0
    asks: int = 0
    answered: Any = None
    answered_turn: int | None = None
    spent: _Spent = msgspec.field(default_factory=_Spent)


class ModelAgent:
    """An agent backed by a chat model (see the module doc).

    ``system`` is put at the top of the system message; ``template`` is a packaged template's
    name, a ``.md`` file's path, a template's text, or an
    :class:`~envharness.agents.template.AgentTemplate` (default ``agent-v1``). ``attempts`` is
    how many times one action is asked for, re-asks included; ``window`` how many earlier
    exchanges are sent with each ask, and ``max_context_tokens`` (estimated) caps them further.
    ``implementation`` defaults to ``model-agent@<template version>:<provider>/<model>`` — what
    evidence freezes (the API key never is).
    """

    implementation: str

    def __init__(
        self,
        provider: Provider,
        *,
        system: str | None = None,
        template: str | AgentTemplate | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        budget: Budget | None = None,
        attempts: int = 3,
        window: int = 20,
        max_context_tokens: int | None = None,
        action_format: ActionFormat = "auto",
        implementation: str | None = None,
    ) -> None:
        self._settings = Settings.checked(
            provider,
            system=system,
            template=template,
            temperature=temperature,
            max_tokens=max_tokens,
            budget=budget,
            attempts=attempts,
            window=window,
            max_context_tokens=max_context_tokens,
            action_format=action_format,
            implementation=implementation,
        )
        self._begin()

    def _begin(self) -> None:
        """A fresh session's state."""
        settings = self._settings
        self.implementation = settings.implementation
        self._conversation = Conversation(
            window=settings.window, max_context_tokens=settings.max_context_tokens
        )
        self._spending = Spending()
        self._context: AgentContext | None = None
        self._schema: dict[str, Any] | None = None
        self._parameters: dict[str, Any] = {"type": "object"}
        self._wrapped = False
        self._example: str | None = None
        self._notes: list[str] = []
        self._dropped_notes = 0
        self._tools_refused = False
        self._acts = 0
        self._asks = 0
        self._answered: Any = None
        self._answered_turn: int | None = None

    def __call__(self) -> ModelAgent:
        """A fresh copy for one session: the same settings, its own conversation and spending."""
        fresh = type(self).__new__(type(self))
        fresh._settings = self._settings
        fresh._begin()
        return fresh

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.implementation!r})"

    # -- what a caller may look at ------------------------------------------------------------

    @property
    def provider(self) -> Provider:
        return self._settings.provider

    @property
    def template(self) -> AgentTemplate:
        return self._settings.template

    @property
    def budget(self) -> Budget | None:
        return self._settings.budget

    @property
    def spending(self) -> Spending:
        """What this session's copy has spent so far (a copy)."""
        spent = self._spending
        return Spending(
            usd=spent.usd, tokens=spent.tokens, seconds=spent.seconds, calls=spent.calls
        )

    @property
    def action_format(self) -> Mode:
        """The format the next ask uses (``auto`` resolved)."""
        return self._mode()

    @property
    def messages(self) -> list[ChatMessage]:
        """What the next ask sends before its own messages: the system message and the kept
        exchanges that fit the window."""
        return self._conversation.context(
            self._system(self._mode()), self._conversation.replies_to_open_calls(), ()
        )

    # -- the session's lifecycle ----------------------------------------------------------------

    def lifespan(self, context: AgentContext) -> AbstractAsyncContextManager[object]:
        """Learn where the agent plays; nothing needs starting or stopping."""
        self._context = context
        self._schema = context.environment.action_schema
        self._parameters, self._wrapped = tool_parameters(self._schema)
        example = example_action(self._schema)
        self._example = json.dumps(example, ensure_ascii=False) if example is not None else None
        return contextlib.nullcontext()

    @property
    def can_snapshot(self) -> bool:
        return True

    async def snapshot(self) -> dict[str, Any]:
        """The conversation, what waits to be said, and the spending, as JSON."""
        spent = self._spending
        state = _AgentState(
            format=STATE_FORMAT,
            template=self._settings.template.version,
            session=self._context.session_id if self._context is not None else None,
            conversation=self._conversation.snapshot(),
            notes=self._shown_notes(),
            tools_refused=self._tools_refused,
            acts=self._acts,
            asks=self._asks,
            answered=self._answered,
            answered_turn=self._answered_turn,
            spent=_Spent(
                usd=spent.usd, tokens=spent.tokens, seconds=spent.seconds, calls=spent.calls
            ),
        )
        result: dict[str, Any] = msgspec.to_builtins(state)
        return result

    def restore(self, state: Any) -> None:
        """Continue from a checkpoint's state: the same conversation; the same spending when
        it is the same session resuming (a branch is a new session, with its own budget)."""
        try:
            restored = msgspec.convert(state, _AgentState)
        except msgspec.ValidationError as exc:
            raise ConfigurationError(
                f"a model agent cannot restore this checkpointed state ({exc}); it was not "
                f"written by a model agent ({STATE_FORMAT})"
            ) from None
        if restored.format != STATE_FORMAT:
            raise ConfigurationError(
                f"a model agent cannot restore state of format {restored.format!r}; this "
                f"version reads {STATE_FORMAT!r}"
            )
        self._conversation.restore(restored.conversation)
        self._notes = list(restored.notes)
        self._dropped_notes = 0
        self._tools_refused = restored.tools_refused
        self._acts = restored.acts
        self._asks = restored.asks
        self._answered = restored.answered
        self._answered_turn = restored.answered_turn
        context = self._context
        if context is None or restored.session == context.session_id:
            spent = restored.spent
            self._spending = Spending(
                usd=spent.usd, tokens=spent.tokens, seconds=spent.seconds, calls=spent.calls
            )

    def feedback(self, turn: int, outcome: Any, blocked: str | None, *, action: Any = None) -> None:
        """Keep what happened in ``turn`` to show it at the next ask."""
        answered = self._answered if self._answered_turn == turn else None
        executed = plain(action) if action is not None else None
        note = outcome_note(turn, plain(outcome), blocked, executed, answered)
        if note is not None:
            self._note(note)

    def vetoed(self, turn: int, action: Any, reason: str) -> None:
        """Keep the veto to show it when the agent is asked again in the same turn."""
        self._note(veto_note(turn, action, reason))

    # -- acting ---------------------------------------------------------------------------------

    async def act(self, observation: Any) -> AgentReply:
        """One action that fits the action schema, or :class:`NoValidActionError`."""
        settings = self._settings
        turn = self._turn()
        shown, hints = split_hints(plain(observation))
        notes = self._shown_notes()
        mode = self._mode()
        conversation = self._conversation
        replies = conversation.replies_to_open_calls()
        system = self._system(mode)
        exchange: list[ChatMessage] = [self._user(mode, turn, shown, hints, notes)]
        completions: list[Completion] = []
        rejected: list[tuple[str, str]] = []
        try:
            while True:
                context = conversation.context(system, replies, exchange)
                try:
                    completion = await self._call(context, mode)
                except ProviderError as exc:
                    if not self._falls_back(mode, exc):
                        raise
                    self._tools_refused = True
                    self._log(
                        f"the endpoint refused tools ({exc}); the model is asked for JSON in "
                        "plain text for the rest of the session",
                        "warning",
                    )
                    mode = self._mode()
                    system = self._system(mode)
                    if len(exchange) == 1:
                        exchange[0] = self._user(mode, turn, shown, hints, notes)
                    continue
                completions.append(completion)
                exchange.append(assistant_message(completion))
                reading = read_action(completion, tool=TOOL_NAME, wrapped=self._wrapped)
                action = reading.action
                problems = (
                    [reading.problem or "no action"]
                    if action is None
                    else action_problems(action, self._schema)
                )
                if action is not None and not problems:
                    return self._accept(turn, action, system, replies, exchange, completions)
                rejected.append((describe(completion), "; ".join(problems)))
                if len(completions) >= settings.attempts:
                    raise NoValidActionError(
                        f"the model gave no valid action in {len(completions)} ask"
                        f"{'s' * (len(completions) != 1)} (each answer is in the session's "
                        f"log records); the last problem: {rejected[-1][1]}",
                        answers=tuple(answer for answer, _ in rejected),
                        problems=tuple(problem for _, problem in rejected),
                    )
                exchange.extend(re_ask(mode, completion, problems, self._example))
        except Exception as exc:
            self._log_rejected(rejected)
            if completions and cost_of_failure(exc) is None:
                # Spent though no action came of it: the runtime records it and budgets count it.
                exc.cost = total_cost(done.cost() for done in completions)  # type: ignore[attr-defined]
            raise

    def _accept(
        self,
        turn: int,
        action: dict[str, Any],
        system: ChatMessage,
        replies: list[ChatMessage],
        exchange: list[ChatMessage],
        completions: list[Completion],
    ) -> AgentReply:
        """Keep the answered exchange and hand the action over with what it cost and said."""
        conversation = self._conversation
        transcript = [] if conversation.system_sent else [system]
        transcript += [*replies, *exchange]
        conversation.commit(
            replies, exchange, [call.id for call in completions[-1].tool_calls], system_sent=True
        )
        self._notes, self._dropped_notes = [], 0
        self._acts += 1
        self._answered, self._answered_turn = action, turn
        return AgentReply(
            action,
            cost=total_cost(done.cost() for done in completions),
            transcript=tuple(transcript),
        )

    async def _call(self, messages: list[ChatMessage], mode: Mode) -> Completion:
        """One model call, within the budget; spending is counted whatever happens."""
        settings = self._settings
        budget = settings.budget
        spending = self._spending
        if budget is not None:
            reason = budget.exceeded(spending)
            if reason is not None:
                raise BudgetExhausted(self._over_budget(reason))
        remaining = None
        if budget is not None and budget.seconds is not None:
            remaining = budget.seconds - spending.seconds
        seed = self._seed()
        self._asks += 1
        wire = [to_message(message) for message in messages]
        options = request_options(mode, self._parameters)
        completion: Completion | None = None
        started = anyio.current_time()
        try:
            with anyio.move_on_after(remaining):
                if options:
                    provider = cast(StructuredProvider, settings.provider)
                    completion = await provider.complete(
                        wire,
                        temperature=settings.temperature,
                        max_tokens=settings.max_tokens,
                        seed=seed,
                        **options,
                    )
                else:
                    completion = await settings.provider.complete(
                        wire,
                        temperature=settings.temperature,
                        max_tokens=settings.max_tokens,
                        seed=seed,
                    )
        finally:
            spending.seconds += anyio.current_time() - started
        if completion is None:  # the wall-time budget ran out during the call
            assert budget is not None
            reason = budget.exceeded(spending) or f"the {budget.seconds:g} s budget ran out"
            raise BudgetExhausted(self._over_budget(f"{reason}, during a model call"))
        spending.add(completion.cost())
        return completion

    # -- pieces ---------------------------------------------------------------------------------

    def _mode(self) -> Mode:
        chosen = self._settings.action_format
        if chosen != "auto":
            return chosen
        offered = supports_tools(self._settings.provider)
        return "tools" if offered and not self._tools_refused else "text"

    def _falls_back(self, mode: Mode, error: ProviderError) -> bool:
        return (
            mode == "tools"
            and self._settings.action_format == "auto"
            and error.status in TOOLS_REFUSED
        )

    def _turn(self) -> int:
        context = self._context
        turn = context.current_turn() if context is not None else None
        return turn if turn is not None else self._acts + 1

    def _seed(self) -> int | None:
        """A seed per call, from the session's: a rerun asks the same questions."""
        context = self._context
        if context is None:
            return None
        key = f"{context.seed}|{context.participant}|{self._asks}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % SEED_MODULUS

    def _system(self, mode: Mode) -> ChatMessage:
        context = self._context
        environment = context.environment if context is not None else None
        schema = schema_text(self._schema)
        values = {
            "system": self._settings.system,
            "environment": (
                f"{environment.name} (version {environment.version})"
                if environment is not None
                else "(not named)"
            ),
            "participant": context.participant if context is not None else "the player",
            "role": context.role if context is not None else "player",
            "observation_type": (environment.observation_type if environment else None)
            or "(not named)",
            "action_schema": schema,
            "action_format": instructions(mode, schema, self._example, wrapped=self._wrapped),
        }
        return {"role": "system", "content": self._settings.template.render_system(values)}

    def _user(
        self, mode: Mode, turn: int, observation: Any, hints: list[str], notes: list[str]
    ) -> ChatMessage:
        context = self._context
        values = {
            "turn": str(turn),
            "participant": context.participant if context is not None else "the player",
            "role": context.role if context is not None else "player",
            "observation": show_observation(observation),
            "hints": hints_section(hints),
            "feedback": feedback_section(notes),
            "ask": ask_line(mode, self._example),
        }
        return {"role": "user", "content": self._settings.template.render_user(values)}

    def _note(self, note: str) -> None:
        self._notes.append(note)
        if len(self._notes) > MAX_NOTES:
            del self._notes[0]
            self._dropped_notes += 1

    def _shown_notes(self) -> list[str]:
        if not self._dropped_notes:
            return list(self._notes)
        count = self._dropped_notes
        return [f"({count} earlier event{'s' * (count != 1)} not shown)", *self._notes]

    def _log(self, message: str, level: LogLevel) -> None:
        if self._context is not None:
            self._context.log(message, level, LOG_STREAM)
        else:
            logger.log(logging.WARNING if level in ("warning", "error") else logging.INFO, message)

    def _log_rejected(self, rejected: list[tuple[str, str]]) -> None:
        for number, (answer, problem) in enumerate(rejected, start=1):
            self._log(
                f"answer {number} of {len(rejected)} was not a valid action ({problem}): {answer}",
                "warning",
            )

    def _over_budget(self, reason: str) -> str:
        return f"the model agent {reason}"  # the runtime adds whose agent it is
