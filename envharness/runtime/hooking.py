"""Calling a session's harness hooks: contexts in, effects checked and recorded, failures contained.

The session runner holds one :class:`HookRunner` when the session has hooks (none otherwise: the
turn loop without hooks does no hook work at all). The runner builds each :class:`HookContext`
only for hooks that exist, hands the hooks a fresh copy of the notebook, enforces the per-call
budget, checks what comes back, and records every effect, every notebook change and every
failure as a ``hook`` record. A hook that raises, overruns its budget, returns something that
is not an effect (or an effect its hook may not return), rewrites to an inadmissible action or
leaves a notebook that is not JSON or over its cap has *failed*: the failure is recorded and the
session goes on as if the hook had returned nothing.

How hints reach an agent (:func:`with_hints`): the agent is asked with its observation plus a
``hints`` list — a dict observation gets a copy with a ``"hints"`` key; any other observation
(or a dict that already has ``"hints"``) is wrapped as ``{"observation": ..., "hints": [...]}``.
Without hints the agent gets its observation exactly as before. The recorded ``observation``
stays what the environment produced; each hint shown is a ``hint`` record.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, get_args

import anyio
import msgspec

from envharness.contracts.environment import Environment
from envharness.errors import ConfigurationError
from envharness.hooks import (
    AddHint,
    Allow,
    BlockAndPrompt,
    Effect,
    HarnessHooks,
    HookContext,
    HookFailure,
    HookName,
    HookView,
    Rewrite,
    StepSummary,
)
from envharness.hooks.notebook import encoded_notebook
from envharness.records import ErrorInfo, Hint, HookCalled, Payload, RecordRow
from envharness.runtime.checks import SessionFailure, error_info
from envharness.runtime.hook_memory import HookMemory

__all__ = [
    "BLOCK_LIMITS",
    "DEFAULT_HOOK_BUDGET",
    "DEFAULT_MAX_BLOCKS",
    "DEFAULT_ON_BLOCK_LIMIT",
    "HookRunner",
    "OnBlockLimit",
    "Validate",
    "check_hooks",
    "check_on_block_limit",
    "with_hints",
]

DEFAULT_HOOK_BUDGET = 10.0
"""Seconds one hook call may take before it counts as failed (``None``: no limit)."""
DEFAULT_MAX_BLOCKS = 3
"""Consecutive ``block_and_prompt`` vetoes of one participant in one turn before its turn is
skipped (the repeated-block policy: a blocked action never runs)."""
OnBlockLimit = Literal["skip", "run_last"]
"""What happens when a participant's answers were vetoed ``max_blocks`` times in a row in one
turn: ``skip`` its turn (nothing runs), or ``run_last`` — run the last answer anyway, as a
reference harness that treats the limit as the end of its re-prompting would."""
DEFAULT_ON_BLOCK_LIMIT: OnBlockLimit = "skip"
BLOCK_LIMITS: tuple[OnBlockLimit, ...] = get_args(OnBlockLimit)

RecordFunction = Callable[..., RecordRow]
"""The session's ``_record(payload, turn=..., participant=...)``."""
Validate = Callable[[Any], tuple[str | None, Any]]
"""The session's action check: ``(problem, action)``, problem ``None`` when it is valid."""

_ALL_EFFECTS: tuple[type[Any], ...] = (Allow, Rewrite, BlockAndPrompt, AddHint)
_MAY_RETURN: dict[HookName, tuple[type[Any], ...]] = {
    "on_init": (Allow, AddHint),
    "make_pre_hint": (Allow, AddHint),
    "on_before_action": _ALL_EFFECTS,
    "on_post_step": (Allow, AddHint),
}
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_context_decoder = msgspec.json.Decoder(HookContext)
_view_decoder = msgspec.json.Decoder(HookView)


def check_hooks(hooks: Any) -> HarnessHooks:
    """``hooks`` if it is a usable :class:`HarnessHooks`; a clear error otherwise."""
    if not isinstance(hooks, HarnessHooks):
        raise ConfigurationError(
            f"hooks must implement HarnessHooks (version, defined, call), e.g. "
            f"envharness.Hooks('my-hooks@1', on_before_action=...), not {type(hooks).__name__}"
        )
    version = hooks.version
    if not isinstance(version, str) or not version:
        raise ConfigurationError(f"hooks need a non-empty version string, not {version!r}")
    unknown = set(hooks.defined) - set(_MAY_RETURN)
    if unknown:
        raise ConfigurationError(
            f"hooks define {sorted(unknown)}, which are not hooks; hooks are {list(_MAY_RETURN)}"
        )
    return hooks


def check_on_block_limit(value: Any) -> OnBlockLimit:
    """``value`` if it names a block-limit policy; a clear refusal otherwise."""
    for choice in BLOCK_LIMITS:
        if value == choice and isinstance(value, str):
            return choice
    raise ConfigurationError(
        f"on_block_limit must be one of {', '.join(map(repr, BLOCK_LIMITS))}, not {value!r}: "
        "'skip' skips the participant's turn after max_blocks vetoes in a row, 'run_last' "
        "runs its last answer"
    )


def with_hints(observation: Any, hints: list[str]) -> Any:
    """What an agent is asked with: its observation, plus the hints when there are any."""
    if not hints:
        return observation
    if isinstance(observation, dict) and "hints" not in observation:
        return {**observation, "hints": hints}
    return {"observation": observation, "hints": hints}


class HookRunner:
    """The hooks of one session, with the memory they need between calls."""

    def __init__(
        self,
        hooks: HarnessHooks,
        *,
        session_id: str,
        roster: Mapping[str, str],
        environment: Environment[Any, Any],
        budget: float | None,
        max_blocks: int,
        memory: HookMemory,
        record: RecordFunction,
        keep_blob: Callable[[bytes], str],
        validate: Validate,
    ) -> None:
        self.hooks = hooks
        self.defined = frozenset(hooks.defined)
        self.version = hooks.version
        self.max_blocks = max_blocks
        self._session_id = session_id
        self._roster = roster
        self._environment = environment
        self._hook_view = getattr(environment, "hook_view", None)
        self._budget = budget
        self._memory = memory
        self._record = record
        self._keep_blob = keep_blob
        self._validate = validate

    @property
    def notebook(self) -> dict[str, Any]:
        """A copy of the notebook as it is now (for a checkpoint)."""
        value: dict[str, Any] = _decode(self._memory.notebook)
        return value

    # -- the four hooks ------------------------------------------------------------------------

    async def on_init(self, state: Any, observe: Callable[[str], Awaitable[Any]]) -> None:
        """Once per session, for each participant in roster order, before the first turn."""
        if "on_init" not in self.defined:
            return
        for participant in self._roster:
            effect = await self._call(
                "on_init", participant, None, state, observation=await observe(participant)
            )
            self._keep_hint("on_init", participant, effect)

    async def before_ask(
        self, turn: int, participant: str, state: Any, observation: msgspec.Raw
    ) -> list[str]:
        """``make_pre_hint``, then the hints to show at this ask (each recorded as ``hint``)."""
        if "make_pre_hint" in self.defined:
            effect = await self._call(
                "make_pre_hint", participant, turn, state, observation=observation
            )
            self._keep_hint("make_pre_hint", participant, effect)
        return self.take_hints(turn, participant)

    async def before_action(
        self,
        turn: int,
        participant: str,
        state: Any,
        observation: msgspec.Raw,
        attempted: Any,
    ) -> tuple[Effect | None, Any]:
        """``on_before_action`` on the attempted action (its JSON form). Returns the effect —
        a rewrite already checked, with the action it validated to — or ``None``."""
        if "on_before_action" not in self.defined:
            return None, None
        checked: list[Any] = []
        effect = await self._call(
            "on_before_action",
            participant,
            turn,
            state,
            observation=observation,
            action=attempted,
            rewritten=checked,
        )
        self._keep_hint("on_before_action", participant, effect)
        return effect, (checked[0] if checked else None)

    async def after_step(
        self,
        turn: int,
        participant: str,
        state: Any,
        observation: msgspec.Raw,
        executed: Any,
    ) -> None:
        """``on_post_step`` once the step resolved; ``executed`` is ``None`` when the
        participant's action was blocked."""
        if "on_post_step" not in self.defined:
            return
        effect = await self._call(
            "on_post_step", participant, turn, state, observation=observation, action=executed
        )
        self._keep_hint("on_post_step", participant, effect)

    # -- memory kept between calls -------------------------------------------------------------

    def take_hints(self, turn: int, participant: str) -> list[str]:
        """The participant's pending hints, recorded as shown now."""
        pending = self._memory.pending.pop(participant, None)
        if not pending:
            return []
        for text, source in pending:
            self._record(Hint(text=text, source=source), turn=turn, participant=participant)
        return [text for text, _ in pending]

    def blocked(
        self, turn: int, participant: str, action: Any, reason: str, *, prompt: bool
    ) -> None:
        """A step that did not run; with ``prompt``, ``reason`` is shown at the re-ask."""
        self._memory.steps(participant).append(
            StepSummary(step=turn, action=action, blocked=reason)
        )
        if prompt:
            self._memory.pending.setdefault(participant, []).append((reason, "on_before_action"))

    def executed(self, turn: int, participant: str, action: Any, outcome: Any) -> None:
        self._memory.steps(participant).append(
            StepSummary(step=turn, action=action, outcome=outcome)
        )
        self._memory.last_outcome[participant] = outcome

    # -- one call ------------------------------------------------------------------------------

    async def _call(
        self,
        hook: HookName,
        participant: str,
        turn: int | None,
        state: Any,
        *,
        observation: Any = None,
        action: Any = None,
        rewritten: list[Any] | None = None,
    ) -> Effect | None:
        context = self._context(hook, participant, turn, state, observation, action)
        notebook: dict[str, Any] = _decode(self._memory.notebook)  # the hook's private copy
        started = time.perf_counter()
        effect: Any = None
        try:
            with anyio.fail_after(self._budget):
                effect, notebook = await self.hooks.call(hook, context, notebook)
            seconds = time.perf_counter() - started
            if self._budget is not None and seconds > self._budget:
                # In-process code that never awaited cannot be interrupted; its late answer
                # is still refused.
                raise HookFailure(hook, f"took {seconds:.3f}s, over its {self._budget}s budget")
            self._check_effect(hook, effect, context, rewritten)
            data = self._checked_notebook(hook, notebook)
        except TimeoutError as exc:
            self._failed(hook, participant, turn, effect, exc, started, "overran its budget")
            return None
        except Exception as exc:  # noqa: BLE001 - HookFailure, or a broken HarnessHooks: contained
            self._failed(hook, participant, turn, effect, exc, started)
            return None
        changed = data != self._memory.notebook
        if effect is None and not changed:
            return None
        digest = None
        if changed:
            self._memory.notebook = data
            digest = self._keep_blob(data)
        self._record(
            HookCalled(
                hook=hook,
                effect=_name(effect) if effect is not None else None,
                detail=msgspec.to_builtins(effect) if effect is not None else None,
                seconds=seconds,
                harness_version=self.version,
                notebook=digest,
            ),
            turn=turn,
            participant=participant,
        )
        result: Effect | None = effect
        return result

    def _check_effect(
        self, hook: HookName, effect: Any, context: HookContext, rewritten: list[Any] | None
    ) -> None:
        if effect is None:
            return
        allowed = _MAY_RETURN[hook]
        if not isinstance(effect, _ALL_EFFECTS):
            raise HookFailure(hook, f"returned {type(effect).__name__}, which is not an effect")
        if not isinstance(effect, allowed):
            names = ", ".join(_name_of(kind) for kind in allowed)
            raise HookFailure(
                hook, f"returned {_name(effect)}, which {hook} may not return (it may: {names})"
            )
        if isinstance(effect, BlockAndPrompt | AddHint):
            text = effect.message if isinstance(effect, BlockAndPrompt) else effect.text
            if not isinstance(text, str) or not text.strip():
                raise HookFailure(hook, f"returned {_name(effect)} without a message to show")
        if isinstance(effect, Rewrite):
            try:
                proposed = _decode(_encode(effect.action))
            except (TypeError, ValueError, msgspec.MsgspecError) as exc:
                raise HookFailure(hook, f"rewrote to an action that is not JSON: {exc}") from None
            if context.admissible is not None and proposed not in context.admissible:
                raise HookFailure(
                    hook,
                    f"rewrote to {proposed!r:.200}, which is not admissible now "
                    f"(admissible: {context.admissible!r:.300})",
                )
            problem, converted = self._validate(proposed)
            if problem is not None:
                raise HookFailure(hook, f"rewrote to an invalid action: {problem}")
            if rewritten is not None:
                rewritten.append(converted)

    def _checked_notebook(self, hook: HookName, notebook: Any) -> bytes:
        try:
            return encoded_notebook(notebook)
        except ConfigurationError as exc:
            raise HookFailure(hook, str(exc)) from None

    def _failed(
        self,
        hook: HookName,
        participant: str,
        turn: int | None,
        effect: Any,
        exc: BaseException,
        started: float,
        problem: str | None = None,
    ) -> None:
        seconds = time.perf_counter() - started
        error: ErrorInfo
        if problem is not None:  # the budget: the traceback would only show where it waited
            error = ErrorInfo(
                type="HookFailure",
                message=f"hook {hook} failed: {problem} ({self._budget}s)",
            )
        else:
            error = error_info(exc)
        try:
            detail = msgspec.to_builtins(effect) if effect is not None else None
        except (TypeError, msgspec.EncodeError):
            detail = {"unencodable": repr(effect)[:2000]}
        payload: Payload = HookCalled(
            hook=hook, detail=detail, error=error, seconds=seconds, harness_version=self.version
        )
        self._record(payload, turn=turn, participant=participant)

    # -- what a hook sees ----------------------------------------------------------------------

    def _context(
        self,
        hook: HookName,
        participant: str,
        turn: int | None,
        state: Any,
        observation: Any,
        action: Any,
    ) -> HookContext:
        view = self._view(state, participant)
        memory = self._memory
        context = HookContext(
            hook=hook,
            session_id=self._session_id,
            participant=participant,
            role=self._roster[participant],
            step=turn or 0,
            observation=observation,
            state=view.state,
            predicates=view.predicates,
            admissible=view.admissible,
            task=view.task,
            action=action,
            last_outcome=memory.last_outcome.get(participant),
            history=tuple(memory.history.get(participant, ())),
        )
        # One round trip through JSON: the hook gets values of its own, nothing it could
        # change the session through.
        return _context_decoder.decode(_encode(context))

    def _view(self, state: Any, participant: str) -> HookView:
        """The environment's ``hook_view``; without one, the state when it is a JSON object."""
        if self._hook_view is None:
            if isinstance(state, dict):
                try:
                    return HookView(state=_decode(_encode(state)))
                except (TypeError, ValueError, msgspec.MsgspecError):
                    return HookView()
            return HookView()
        try:
            value = self._hook_view(state, participant)
        except Exception as exc:
            raise SessionFailure(
                f"environment hook_view() raised {type(exc).__name__}: {exc}", exc
            ) from exc
        try:
            view: HookView = _view_decoder.decode(_encode(value))
        except (TypeError, ValueError, msgspec.MsgspecError) as exc:
            raise SessionFailure(
                f"environment hook_view() returned {type(value).__name__}, not a valid HookView "
                f"of JSON values: {exc}; return HookView(state=..., predicates=..., "
                "admissible=..., task=...)",
                exc,
            ) from exc
        return view

    def _keep_hint(self, hook: HookName, participant: str, effect: Effect | None) -> None:
        if isinstance(effect, AddHint):
            self._memory.pending.setdefault(participant, []).append((effect.text, hook))


def _name(effect: Any) -> str:
    return _name_of(type(effect))


def _name_of(kind: type[Any]) -> str:
    tag: str = kind.__struct_config__.tag
    return tag
