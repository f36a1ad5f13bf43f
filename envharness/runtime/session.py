"""The session runner: the turn loop that turns agent decisions into evidence.

One runner drives one session. Each turn's records are sealed into the session's hash chain and
handed to the journal at turn boundaries (:mod:`envharness.runtime.recorder` decides when; the
journal merges concurrent sessions' commits).
Whatever goes wrong inside the session — an agent that raises, times out or returns garbage, an
environment whose state cannot be encoded — ends the session ``failed`` with the diagnosis
recorded; cancellation (``stop()``, Ctrl-C) ends it ``stopped`` with every record up to then
committed. Only a store that cannot be written is raised to the caller.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from random import Random
from typing import Any

import anyio
import msgspec

from envharness.contracts.agent import AgentCapabilities, AgentContext, LogLevel
from envharness.contracts.environment import ScoreReport
from envharness.contracts.operations import OperationResult, operation_ref
from envharness.errors import StoreError
from envharness.hooks import BlockAndPrompt, Rewrite
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Artifact,
    Checkpoint,
    ErrorInfo,
    Finding,
    Intervention,
    Log,
    Observation,
    OperationReceipt,
    Outcome,
    ProtocolViolation,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionCreated,
    SessionStatus,
    Status,
    canonical,
)
from envharness.runtime.checks import (
    SessionFailure,
    as_evidence,
    checked,
    checked_resolution,
    checked_signals,
    error_info,
    interruption,
    private_copy,
)
from envharness.runtime.hook_memory import HookMemory
from envharness.runtime.hooking import HookRunner, with_hints
from envharness.runtime.participants import (
    AgentFailure,
    Caller,
    Reply,
    ask_all,
    running,
    send_feedback,
)
from envharness.runtime.plan import (
    PAUSED_REASON,
    PauseRequest,
    ProgressCallback,
    Resumption,
    SessionPlan,
    SessionResult,
)
from envharness.runtime.recorder import SessionRecorder
from envharness.store import Store
from envharness.store.owners import this_process

__all__ = [
    "PauseRequest",
    "ProgressCallback",
    "Resumption",
    "SessionPlan",
    "SessionResult",
    "SessionRunner",
]

_json = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class SessionRunner:
    """Drives one session from ``session.created`` (or a resume) to a terminal status."""

    def __init__(
        self,
        store: Store,
        plan: SessionPlan,
        progress: ProgressCallback | None = None,
        resumption: Resumption | None = None,
    ) -> None:
        self._store = store
        self._plan = plan
        self._progress = progress
        self._resumption = resumption
        self._outcome_seqs: dict[int, list[int]] = {}
        self._turns_completed = 0
        self._segment = 0
        if resumption is None:
            chain = SessionChain(plan.session_id)
        else:
            chain = SessionChain(
                plan.session_id, next_seq=resumption.head_seq + 1, prev=resumption.head_digest
            )
            self._segment = resumption.previous_segment + 1
            self._turns_completed = resumption.turn
            self._outcome_seqs = {t: list(s) for t, s in resumption.outcome_seqs.items()}
        evidence = SessionRecorder(store, chain)
        # Bound once: these run for every record and every turn.
        self._record = evidence.record
        self._keep_state = evidence.keep_state
        self._keep_blob = evidence.keep_blob
        self._flush = evidence.flush
        self._settle = evidence.settle
        self._sequential = plan.environment.spec.turn_order == "sequential"
        # Sync agents' threads: one per participant, never shared with other sessions or the
        # journal, so a slow agent elsewhere cannot eat into this session's action timeout.
        threads = anyio.CapacityLimiter(max(1, len(plan.agents)))
        self._capabilities = {
            name: AgentCapabilities.of(agent) for name, agent in plan.agents.items()
        }
        """What each agent can do beyond ``act``, found once for the session."""
        self._callers = {
            name: Caller(name, agent, self._capabilities[name], plan.action_timeout, threads)
            for name, agent in plan.agents.items()
        }
        self._feedback: dict[str, tuple[Any, str | None, Any]] = {}
        """Per participant this turn: (outcome, why it was blocked, the executed action)."""
        self._listening = {
            name for name, found in self._capabilities.items() if found.feedback is not None
        }
        """The participants whose agents want ``feedback``."""
        self._current_turn: int | None = None
        """The turn being played; logs from an agent outside any turn carry no turn."""
        self._last_state: str | None = None
        """The digest of the state the evidence last named (an outcome or a receipt)."""
        self._checkpointed = 0
        """The last turn this segment checkpointed."""
        self._first_turn = self._turns_completed + 1
        self._hooking: HookRunner | None = None
        if plan.hooks is not None:
            self._hooking = HookRunner(
                plan.hooks,
                session_id=plan.session_id,
                roster={name: plan.roster[name] for name in plan.agents},
                environment=plan.environment,
                budget=plan.hook_budget,
                max_blocks=plan.max_blocks,
                memory=(resumption.memory if resumption is not None else None) or HookMemory(),
                record=self._record,
                keep_blob=self._keep_blob,
                validate=self._validate,
            )

    async def run(self) -> SessionResult:
        plan = self._plan
        resumption = self._resumption
        if resumption is None:
            self._record(SessionCreated(config=plan.config()))
            self._record(SessionStatus(status="running"))
        else:
            self._record(SessionStatus(status="running", reason="resumed"))
        try:
            if resumption is None:
                state = self._call_environment(
                    "initialize", plan.input, Random(plan.seed), plan.roster
                )
                segment = SegmentStarted(
                    segment=self._segment, state=self._keep_state(state), runner=this_process()
                )
            else:
                state = resumption.state
                segment = SegmentStarted(
                    segment=self._segment,
                    cause=resumption.cause,
                    previous=resumption.previous_segment,
                    until=resumption.until,
                    state=self._keep_state(state),
                    turn=resumption.turn,
                    runner=this_process(),
                    changes=resumption.changes,
                )
            self._record(segment)
            if self._hooking is not None and resumption is None:
                await self._hooking.on_init(state, lambda p: self._observe(state, p))
            # A caller told the session's id (progress), or an agent process about to start,
            # may act on the session existing: commit the start first. Otherwise it goes out
            # with the first turns, in one commit.
            external = any(found.lifespan for found in self._capabilities.values())
            await self._flush(durable=self._progress is not None or external)
            if self._progress is not None:
                self._progress(plan.session_id, self._turns_completed, plan.turns)
            async with running(self._capabilities, self._agent_contexts()):
                if resumption is not None and resumption.agent_states:
                    await self._restore_agents(resumption.agent_states)
                state, reason = await self._turns(state)
            if reason == PAUSED_REASON:
                return await self._finish("paused", reason)
            self._score(state)
            return await self._finish("completed", reason)
        except AgentFailure as failure:
            await self._record_violation(failure)
            return await self._finish("failed", failure.reason, error_info(failure.cause))
        except SessionFailure as failure:
            return await self._finish("failed", failure.reason, failure.error)
        except StoreError:
            raise
        except BaseException as exc:  # every way out leaves a terminal status
            status, reason = interruption(exc)
            error = None if status == "stopped" else error_info(exc)
            with anyio.CancelScope(shield=True):
                result = await self._finish(status, reason, error)
            if isinstance(exc, Exception) and not isinstance(exc, BaseExceptionGroup):
                return result  # a bug in envharness, recorded; the caller still gets a result
            raise

    # -- turns ---------------------------------------------------------------------------------

    async def _turns(self, state: Any) -> tuple[Any, str | None]:
        """Run the planned turns; returns the final state and why it stopped early, if it did."""
        plan = self._plan
        pause = plan.pause
        for turn in range(self._turns_completed + 1, plan.turns + 1):
            if pause is not None and pause.requested:
                # Keep what the agents and hooks know now, so the resume goes on from it.
                if self._turns_completed > max(self._checkpointed, self._first_turn - 1):
                    await self._checkpoint(self._turns_completed, state, "paused")
                return state, PAUSED_REASON
            self._current_turn = turn
            state = await self.before_turn(turn, state)
            state, done = await self._turn(turn, state)
            resolved = state
            state = await self.after_turn(turn, state)
            if state is not resolved:
                self._record_state_change(turn, state)
            await self._flush(durable=False)
            self._turns_completed = turn
            await self._send_feedback(turn)
            every = plan.checkpoint_every
            if every and turn % every == 0 and not done:
                await self._checkpoint(turn, state)
            self._current_turn = None
            if self._progress is not None:
                self._progress(plan.session_id, turn, plan.turns)
            if done:
                return state, f"the environment reported done at turn {turn}"
        return state, None

    def _record_state_change(self, turn: int, state: Any) -> None:
        """``after_turn`` left another state than the evidence last named: record it (as an
        ``intervention``), so that a resume restores exactly what the turn ended with."""
        digest = self._keep_state(state)
        if digest != self._last_state:
            self._record(
                Intervention(
                    intervention={"kind": "after_turn"},
                    reason=f"{type(self).__name__}.after_turn changed the state",
                    state=digest,
                ),
                turn=turn,
            )
            self._last_state = digest

    async def _checkpoint(self, turn: int, state: Any, label: str | None = None) -> None:
        """A checkpoint at this turn boundary, with each agent's own state where it can give
        one (an external agent that declared ``snapshot``)."""
        snapshots: dict[str, Any] = {}
        for participant, found in self._capabilities.items():
            if found.snapshots is not None and found.snapshots.can_snapshot:
                try:
                    snapshots[participant] = await found.snapshots.snapshot()
                except Exception as exc:
                    raise AgentFailure(
                        participant,
                        f"agent {participant!r} failed to give its state for a checkpoint: {exc}",
                        exc,
                    ) from exc
        self._checkpointed = turn
        self._record(
            Checkpoint(
                label=label or f"turn {turn}",
                state=self._keep_state(state),
                agents=snapshots,
                notebook=self._hooking.notebook if self._hooking is not None else None,
                turn=turn,
            ),
            turn=turn,
        )

    async def _restore_agents(self, states: Mapping[str, Any]) -> None:
        """Give each agent the state a checkpoint recorded for it (a branch's first turn), when
        it can take one; an agent that cannot is told in a ``log`` record, and starts afresh."""
        for participant, agent_state in states.items():
            found = self._capabilities.get(participant)
            if found is None:
                continue
            if found.snapshots is None or not found.snapshots.can_snapshot:
                self._record(
                    Log(
                        message=f"agent {participant!r} cannot restore the state its checkpoint "
                        "recorded (no snapshot capability); it starts afresh",
                        level="warning",
                    ),
                    participant=participant,
                )
                continue
            try:
                restored = found.snapshots.restore(agent_state)
                if inspect.isawaitable(restored):
                    await restored
            except Exception as exc:
                raise AgentFailure(
                    participant,
                    f"agent {participant!r} failed to restore its checkpointed state: {exc}",
                    exc,
                ) from exc
            self._record(
                Log(message="restored the agent's state from the checkpoint", level="info"),
                participant=participant,
            )

    # -- the seam: subclass SessionRunner to interleave operations with turns ------------------

    async def before_turn(self, turn: int, state: Any) -> Any:
        """Called before each turn with the current state; returns the state to play on."""
        return state

    async def after_turn(self, turn: int, state: Any) -> Any:
        """Called after each turn is resolved (before its commit); returns the state to keep."""
        return state

    async def operate(self, name: str, request: Any, state: Any) -> tuple[Any, Any]:
        """Call the session's operation ``name``; returns ``(result, state)``.

        The call is recorded as an ``operation.receipt`` with its request, result and the new
        state's digest. A sync operation runs in a worker thread (it usually does I/O). An
        operation that raises fails the session with the receipt — and its error — recorded.
        """
        operation = self._plan.operations.get(name)
        if operation is None:
            raise SessionFailure(
                f"no operation {name!r} in this session; it has {sorted(self._plan.operations)}"
            )
        reference = operation_ref(operation)
        started = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(operation.run):
                outcome = await operation.run(state, request)
            else:
                outcome = await anyio.to_thread.run_sync(operation.run, state, request)
        except Exception as exc:
            self._record(
                OperationReceipt(
                    operation=reference.name,
                    version=reference.version,
                    request=as_evidence(request),
                    error=error_info(exc),
                    seconds=time.perf_counter() - started,
                ),
                turn=self._current_turn,
            )
            raise SessionFailure(
                f"operation {name!r} raised {type(exc).__name__}: {exc}", exc
            ) from exc
        if not isinstance(outcome, OperationResult):
            outcome = OperationResult(result=outcome)
        new_state = outcome.state if outcome.changed_state else state
        digest = self._keep_state(new_state) if outcome.changed_state else None
        if digest is not None:
            self._last_state = digest
        self._record(
            OperationReceipt(
                operation=reference.name,
                version=reference.version,
                request=as_evidence(request),
                result=self._encodable(outcome.result, f"result of operation {name!r}"),
                state=digest,
                seconds=time.perf_counter() - started,
            ),
            turn=self._current_turn,
        )
        return outcome.result, new_state

    async def _send_feedback(self, turn: int) -> None:
        """After the turn is committed — an agent learns nothing the evidence lacks."""
        feedback, self._feedback = self._feedback, {}
        listening = self._listening
        if not listening or listening.isdisjoint(feedback):
            return
        await self._settle()  # feedback is an effect outside the store: commit first
        for participant, (outcome, blocked, action) in feedback.items():
            if participant in listening:
                await send_feedback(
                    participant, self._capabilities[participant], turn, outcome, blocked, action
                )

    async def _turn(self, turn: int, state: Any) -> tuple[Any, bool]:
        roster = list(self._plan.agents)
        if not self._sequential:
            return await self._step(turn, state, roster)
        done = False
        for participant in roster:
            state, done = await self._step(turn, state, [participant])
            if done:
                break
        return state, done

    async def _step(self, turn: int, state: Any, acting: list[str]) -> tuple[Any, bool]:
        """Observe, act and resolve for the ``acting`` participants (all of them, or one)."""
        hooking = self._hooking
        observations = {}
        seen: dict[str, tuple[Any, bytes]] = {}
        """With hooks: each observation as produced, and its JSON (for contexts and re-asks)."""
        for participant in acting:
            observation = self._call_environment("observe", state, participant)
            observations[participant] = observation
            shown = self._encodable(observation, f"observation for {participant!r}")
            self._record(Observation(observation=shown), turn=turn, participant=participant)
            # The agent gets its own copy: it can neither change the state nor what was recorded.
            observations[participant] = private_copy(observation, shown)
            if hooking is not None:
                data = _json(shown)
                seen[participant] = (observation, data)
                hints = await hooking.before_ask(turn, participant, state, msgspec.Raw(data))
                observations[participant] = with_hints(observations[participant], hints)
        replies = await ask_all(self._callers, observations)
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
                    continue  # blocked max_blocks times in a row: the turn is skipped
            assert reply is not None
            raw = reply.action
            if rewritten is not None:
                actions[participant] = rewritten
                continue
            problem, action = self._validate(raw)
            if problem is None:
                actions[participant] = action
            elif self._plan.environment.spec.invalid_actions == "block":
                shown_raw = as_evidence(raw)
                self._record(
                    ActionBlocked(action=shown_raw, reason=problem, by="validation"),
                    turn=turn, participant=participant,
                )  # fmt: skip
                self._feedback[participant] = (None, problem, None)
                if hooking is not None:
                    hooking.blocked(turn, participant, shown_raw, problem, prompt=False)
            else:
                raise SessionFailure(f"agent {participant!r} returned an invalid action: {problem}")
        resolution = checked_resolution(self._call_environment("resolve", state, actions))
        digest = self._last_state = self._keep_state(resolution.state)
        executed: dict[str, Any] = {}
        for participant, action in actions.items():
            outcome = self._encodable(
                resolution.outcomes.get(participant), f"outcome for {participant!r}"
            )
            shown_action = as_evidence(action)
            self._record(
                ActionExecuted(action=shown_action, outcome=outcome),
                turn=turn, participant=participant,
            )  # fmt: skip
            self._feedback[participant] = (outcome, None, shown_action)
            if hooking is not None:
                hooking.executed(turn, participant, shown_action, outcome)
                executed[participant] = shown_action
        for name, data in resolution.artifacts.items():
            sha256 = await self._store.put_artifact(data)
            self._record(Artifact(name=name, sha256=sha256, size=len(data)), turn=turn)
        outcome_row = self._record(
            Outcome(state=digest, done=resolution.done, signals=checked_signals(resolution)),
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
        return resolution.state, resolution.done

    def _attempted(self, turn: int, participant: str, reply: Reply) -> Any:
        """Record what the participant answered (and what it said it cost); its JSON form."""
        attempted = as_evidence(reply.action)
        self._record(
            ActionAttempted(action=attempted, seconds=reply.seconds),
            turn=turn, participant=participant,
        )  # fmt: skip
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
        ``block_and_prompt`` records ``action.blocked`` and asks the agent again, showing it the
        message; after ``max_blocks`` blocks in a row the participant's turn is skipped
        (``None``): a blocked action never runs.
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
                self._feedback[participant] = (None, reason, None)
                return None, None
            observation = with_hints(
                private_copy(original, _decode(data)), hooking.take_hints(turn, participant)
            )
            reply = await self._callers[participant].ask(observation)

    def _validate(self, raw: Any) -> tuple[str | None, Any]:
        if not isinstance(raw, dict):
            return f"expected a dict (a JSON object), got {type(raw).__name__}: {raw!r:.200}", None
        action_type = self._plan.environment.spec.action_type
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

    # -- scoring and the end -------------------------------------------------------------------

    def _score(self, state: Any) -> None:
        environment = self._plan.environment
        score = getattr(environment, "score", None)
        if score is None:
            return
        report = self._call_environment("score", state, self._plan.scenario)
        if report is None:
            return
        if isinstance(report, Mapping):
            report = ScoreReport(metrics=dict(report))
        if not isinstance(report, ScoreReport):
            raise SessionFailure(
                f"environment score() returned {type(report).__name__}; return a ScoreReport "
                "or a mapping of metric names to numbers"
            )
        version = report.version or environment.spec.scoring_version or "1"
        score_payload = Score(
            version=version,
            metrics=dict(report.metrics),
            passed=report.passed,
            uncertainty=dict(report.uncertainty),
        )
        self._record(checked(score_payload, "the environment's score() report"))
        for finding in report.findings:
            cites = tuple(seq for turn in finding.turns for seq in self._outcome_seqs.get(turn, ()))
            found = Finding(
                title=finding.title, detail=finding.detail, severity=finding.severity, cites=cites
            )
            self._record(checked(found, "a finding from the environment's score()"))

    def _agent_contexts(self) -> dict[str, AgentContext]:
        plan = self._plan
        environment = plan.environment.spec.reference()

        def logger(participant: str) -> Callable[[str, LogLevel, str | None], None]:
            def log(message: str, level: LogLevel = "info", stream: str | None = None) -> None:
                self._record(
                    Log(message=message, level=level, stream=stream),
                    turn=self._current_turn, participant=participant,
                )  # fmt: skip

            return log

        return {
            name: AgentContext(
                session_id=plan.session_id,
                participant=name,
                role=plan.roster[name],
                seed=plan.seed,
                turns=plan.turns,
                environment=environment,
                first_turn=self._turns_completed + 1,
                log=logger(name),
            )
            for name in plan.agents
        }

    async def _record_violation(self, failure: AgentFailure) -> None:
        """Keep what an external agent sent that broke the protocol, bytes and all."""
        violation = failure.violation
        if violation is None:
            return
        sha256 = (
            await self._store.put_artifact(violation.offending) if violation.offending else None
        )
        self._record(
            ProtocolViolation(
                problem=f"{violation.code}: {violation.problem}",
                artifact=sha256,
                excerpt=violation.offending[:200].decode("utf-8", "replace"),
            ),
            turn=self._current_turn, participant=failure.participant,
        )  # fmt: skip

    async def _finish(
        self, status: Status, reason: str | None, error: ErrorInfo | None = None
    ) -> SessionResult:
        self._record(SessionStatus(status=status, reason=reason, error=error))
        self._record(SegmentEnded(segment=self._segment, status=status))
        settling = self._plan.settling
        if settling is not None:
            await self._flush(durable=False, hold=False)
            settling()
        await self._flush()
        return SessionResult(
            id=self._plan.session_id,
            status=status,
            turns_completed=self._turns_completed,
            reason=reason,
            error=error,
        )

    # -- evidence plumbing ---------------------------------------------------------------------

    def _observe(self, state: Any, participant: str) -> Any:
        """What ``participant`` sees of ``state``, as JSON (for an ``on_init`` context)."""
        observation = self._call_environment("observe", state, participant)
        return self._encodable(observation, f"observation for {participant!r}")

    def _encodable(self, value: Any, what: str) -> Any:
        try:
            return msgspec.to_builtins(value)
        except (TypeError, msgspec.EncodeError) as exc:
            raise SessionFailure(
                f"the {what} ({type(value).__name__}) is not encodable by msgspec: {exc}", exc
            ) from exc

    def _call_environment(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._plan.environment, method)(*args)
        except Exception as exc:
            raise SessionFailure(
                f"environment {method}() raised {type(exc).__name__}: {exc}", exc
            ) from exc
