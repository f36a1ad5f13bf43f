"""Talking to the session's agents: asking for actions, sending feedback and vetoes, running
lifespans.

Everything an agent can do wrong becomes an :class:`AgentFailure` that names the participant and
what happened; the session runner records it and ends the session ``failed``. A protocol
violation by an external agent keeps the offending bytes, so the runner can store them. An
agent that raises :class:`~envharness.errors.BudgetExhausted` has not failed: it cannot afford
to go on, and the session stops cleanly (:class:`OutOfBudget`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, NamedTuple, cast

import anyio

from envharness.contracts.agent import (
    Agent,
    AgentCapabilities,
    AgentContext,
    AgentReply,
    cost_of_failure,
)
from envharness.errors import BudgetExhausted
from envharness.protocol import ProtocolViolationError
from envharness.records import Cost
from envharness.runtime.transcripts import TranscriptError, checked_transcript

__all__ = [
    "AgentFailure",
    "Caller",
    "OutOfBudget",
    "Reply",
    "ask_all",
    "running",
    "send_feedback",
    "send_veto",
]


class AgentFailure(Exception):
    """An agent failed its session. ``cause`` keeps the original error and its traceback."""

    def __init__(self, participant: str, reason: str, cause: BaseException) -> None:
        super().__init__(reason)
        self.participant = participant
        self.reason = reason
        self.cause = cause
        self.cost = cost_of_failure(cause)
        """What the failed act spent, when the agent said (recorded before the session ends)."""

    @property
    def violation(self) -> ProtocolViolationError | None:
        return self.cause if isinstance(self.cause, ProtocolViolationError) else None


class OutOfBudget(Exception):
    """An agent raised :class:`~envharness.errors.BudgetExhausted` while acting: the session
    stops cleanly (``stopped``, resumable), not ``failed``. ``arrived`` holds the answers of
    the others asked in the same step, so that what they cost is recorded."""

    def __init__(self, participant: str, reason: str, cause: BudgetExhausted) -> None:
        super().__init__(reason)
        self.participant = participant
        self.reason = reason
        self.cause = cause
        self.cost = cost_of_failure(cause)
        """What the act spent before the budget ran out, when the agent said."""
        self.arrived: dict[str, Reply] = {}


class Reply(NamedTuple):
    """What one participant answered, how long it took, what it said it cost, and the messages
    it added to its conversation (checked, in their JSON form; empty for most agents)."""

    action: Any
    seconds: float
    cost: Cost | None = None
    transcript: tuple[dict[str, Any], ...] = ()


_new_reply = cast(
    "Callable[[type[Reply], tuple[Any, float, None, tuple[()]]], Reply]", tuple.__new__
)


class Caller:
    """Asks one participant's agent for actions; how to call it is decided once, not per turn.

    A sync ``act`` runs in a worker thread so a blocking model call cannot stall other
    sessions; on timeout the thread is abandoned (it cannot be interrupted) and the session
    fails. An agent whose ``act`` is quick pure computation may say ``runs_inline = True`` to
    be called on the event loop instead (no timeout can interrupt it there).
    """

    __slots__ = ("_is_async", "_threads", "_timeout", "agent", "inline", "participant")

    def __init__(
        self,
        participant: str,
        agent: Agent,
        capabilities: AgentCapabilities,
        action_timeout: float | None,
        threads: anyio.CapacityLimiter | None = None,
    ) -> None:
        self.participant = participant
        self.agent = agent
        self._timeout = action_timeout
        self._threads = threads
        self._is_async = capabilities.is_async
        self.inline = capabilities.runs_inline
        """Whether the agent is called on the event loop: then :meth:`answer` asks it."""

    async def ask(self, observation: Any) -> Reply:
        """One action, within ``action_timeout`` seconds (configuration)."""
        if self.inline:
            return self.answer(observation)
        participant = self.participant
        started = time.perf_counter()
        reply: Any = None
        try:
            with anyio.move_on_after(self._timeout) as deadline:
                if self._is_async:
                    reply = await self.agent.act(observation)  # type: ignore[misc]
                else:
                    reply = await anyio.to_thread.run_sync(
                        self.agent.act,
                        observation,
                        abandon_on_cancel=True,
                        limiter=self._threads,
                    )
        except BudgetExhausted as exc:
            raise _out_of_budget(participant, exc) from exc
        except Exception as exc:  # including the agent's own TimeoutError: that is its failure
            raise _failure(participant, "acting", exc) from exc
        if deadline.cancelled_caught:
            raise AgentFailure(
                participant,
                f"agent {participant!r} did not answer within {self._timeout}s (action_timeout)",
                TimeoutError(f"no action within {self._timeout}s"),
            )
        return self._reply(reply, time.perf_counter() - started)

    def answer(self, observation: Any) -> Reply:
        """One action from an agent that runs inline: pure computation, called right here (no
        thread hop, no coroutine, and no timeout could interrupt it)."""
        started = time.perf_counter()
        try:
            reply = self.agent.act(observation)
        except BudgetExhausted as exc:
            raise _out_of_budget(self.participant, exc) from exc
        except Exception as exc:
            raise _failure(self.participant, "acting", exc) from exc
        seconds = time.perf_counter() - started
        if isinstance(reply, AgentReply):
            return self._reply(reply, seconds)
        return _new_reply(Reply, (reply, seconds, None, ()))  # every turn: no Python __new__

    def _reply(self, reply: Any, seconds: float) -> Reply:
        if isinstance(reply, AgentReply):
            participant = self.participant
            if reply.cost is not None and not isinstance(reply.cost, Cost):
                raise AgentFailure(
                    participant,
                    f"agent {participant!r} reported a cost of type "
                    f"{type(reply.cost).__name__}; "
                    "use envharness.Cost(input_tokens=..., output_tokens=..., usd=...)",
                    TypeError(type(reply.cost).__name__),
                )
            if reply.transcript:
                return Reply(reply.action, seconds, reply.cost, _said(participant, reply))
            return Reply(reply.action, seconds, reply.cost)
        return _new_reply(Reply, (reply, seconds, None, ()))  # every turn: no Python __new__


async def ask_all(
    callers: Mapping[str, Caller], observations: Mapping[str, Any]
) -> dict[str, Reply]:
    """Ask every participant in ``observations`` concurrently.

    All are waited for, so every answer that did arrive can be recorded; then the first
    failure in roster order is raised — or, when none failed, the first that ran out of budget
    (with the answers that arrived).
    """
    if len(observations) == 1:
        [(participant, observation)] = observations.items()
        return {participant: await callers[participant].ask(observation)}
    replies: dict[str, Reply] = {}
    failures: dict[str, AgentFailure] = {}
    spent: dict[str, OutOfBudget] = {}

    async def one(participant: str, observation: Any) -> None:
        try:
            replies[participant] = await callers[participant].ask(observation)
        except AgentFailure as failure:
            failures[participant] = failure
        except OutOfBudget as stop:
            spent[participant] = stop

    async with anyio.create_task_group() as group:
        for participant, observation in observations.items():
            group.start_soon(one, participant, observation)
    for participant in observations:
        if participant in failures:
            raise failures[participant]
    for participant in observations:
        if participant in spent:
            stop = spent[participant]
            stop.arrived = replies
            raise stop
    return replies


async def send_feedback(
    participant: str,
    capabilities: AgentCapabilities,
    turn: int,
    outcome: Any,
    blocked: str | None,
    action: Any = None,
) -> None:
    """Tell an agent how its action went, if it wants to know (``feedback`` is optional).

    An agent whose ``feedback`` takes ``action`` (see :class:`AgentCapabilities`) is also
    given the JSON form of what was executed (``None`` when blocked).
    """
    listener = capabilities.feedback
    if listener is None:
        return
    try:
        if capabilities.feedback_with_action:
            feedback: Callable[..., object] = listener.feedback
            result = feedback(turn, outcome, blocked, action=action)
        else:
            result = listener.feedback(turn, outcome, blocked)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        raise _failure(participant, "taking feedback", exc) from exc


async def send_veto(
    participant: str, capabilities: AgentCapabilities, turn: int, action: Any, reason: str
) -> None:
    """Tell an agent, before it is asked again in the same turn, that a harness hook vetoed
    its answer ``action`` (JSON form) and why, if it wants to know (``vetoed`` is optional)."""
    listener = capabilities.vetoes
    if listener is None:
        return
    try:
        result = listener.vetoed(turn, action, reason)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        raise _failure(participant, "taking a veto", exc) from exc


@asynccontextmanager
async def running(
    capabilities: Mapping[str, AgentCapabilities], contexts: Mapping[str, AgentContext]
) -> AsyncIterator[None]:
    """Enter every agent's optional ``lifespan`` for the duration of the block.

    Agents leave in reverse order of entry, whatever ends the block; an agent that cannot
    start fails the session before its first turn.
    """
    async with AsyncExitStack() as stack:
        for participant, found in capabilities.items():
            if found.lifespan is None:
                continue
            try:
                await stack.enter_async_context(found.lifespan.lifespan(contexts[participant]))
            except Exception as exc:
                raise _failure(participant, "starting", exc) from exc
        yield


def _said(participant: str, reply: AgentReply) -> tuple[dict[str, Any], ...]:
    """The messages ``reply`` added to the agent's conversation, checked (a transcript that is
    not chat messages fails the agent, naming the message)."""
    try:
        return checked_transcript(reply.transcript)
    except TranscriptError as exc:
        raise AgentFailure(
            participant,
            f"agent {participant!r} returned a transcript that is not chat messages: {exc}",
            exc,
        ) from exc


def _out_of_budget(participant: str, exc: BudgetExhausted) -> OutOfBudget:
    reason = f"{exc} (agent {participant!r})" if str(exc) else f"agent {participant!r}"
    return OutOfBudget(participant, reason, exc)


def _failure(participant: str, doing: str, exc: Exception) -> AgentFailure:
    if isinstance(exc, AgentFailure):
        return exc
    if isinstance(exc, ProtocolViolationError):
        reason = f"agent {participant!r} broke the protocol while {doing}: {exc.problem}"
    elif doing == "acting":
        reason = f"agent {participant!r} raised {type(exc).__name__}: {exc}"
    else:
        reason = f"agent {participant!r} failed while {doing}: {type(exc).__name__}: {exc}"
    return AgentFailure(participant, reason, exc)
