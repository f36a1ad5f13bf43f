"""The checks themselves, one function each (the package docstring says what each checks).

Each takes the :class:`~envharness.api.conformance.runs.Probe` and returns what it saw, or
raises :class:`~envharness.api.conformance.report.CheckFailed` with the fix, or
:class:`~envharness.api.conformance.report.CheckSkipped` saying why it does not apply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import msgspec

from envharness.api.conformance.compare import (
    declared_paths,
    decoded,
    difference,
    entries_at,
    keyed_by,
    plain,
    replaced,
    replacement,
)
from envharness.api.conformance.probe import CallTimes, InjectedFault, TimedEnvironment
from envharness.api.conformance.report import CheckFailed, CheckSkipped
from envharness.api.conformance.runs import Probe, make_environment
from envharness.records import Checkpoint, SessionStatus, canonical
from envharness.runtime.resume import restore_state

__all__ = ["CHECKED"]

_STATES_OBSERVED = 4
_OTHER_SEEDS = 4
_FAULT = "check-env made resolve() raise on purpose"

_DETERMINISM_FIX = (
    "draw every random choice from the rng that initialize() receives (keep it, or what it "
    "drew, in the state), never from the random module's global functions, the clock or a "
    "set's order; resolve and observe must depend on nothing but the state and the actions"
)
_RESTORE_FIX = (
    "keep everything resolve and observe read in the state, not on the instance (a fresh "
    "instance is given the stored state on resume, branch and restore), and declare "
    "state_type so that the state comes back typed"
)
_OBSERVE_FIX = (
    "make observe(state, participant) a function of its arguments alone: no memory on the "
    "instance, nothing from another participant's private entries"
)


async def spec(probe: Probe) -> str:
    environment, declared = probe.first, probe.spec
    missing = [
        name
        for name in ("initialize", "observe", "resolve", "intervene")
        if not callable(getattr(environment, name, None))
    ]
    if missing:
        raise CheckFailed(
            f"{type(environment).__name__} lacks {', '.join(missing)}()",
            "an environment defines initialize, observe, resolve and intervene",
        )
    if declared.turn_order == "environment" and not callable(getattr(environment, "acting", None)):
        raise CheckFailed(
            "turn_order='environment' but there is no acting(state) method",
            "define acting(state) -> the participants who act next",
        )
    notes = []
    reference = declared.reference()
    if declared.action_type is None:
        notes.append("no action_type: actions are not validated and agents get no schema")
    elif reference.action_schema is None:
        raise CheckFailed(
            f"action_type {reference.action_type} has no JSON Schema (msgspec cannot describe "
            "it), so agents and external programs cannot be told what to send",
            "declare the action as a msgspec Struct (or a dataclass / TypedDict of JSON types)",
        )
    second = make_environment(probe.factory)
    if second is environment:
        raise CheckFailed(
            "the factory returned the same instance twice, so concurrent sessions would share "
            "one environment",
            "pass the class, or a factory that makes a new environment on every call",
        )
    if second.spec != declared:
        raise CheckFailed(
            "two instances have different specs, so a resumed session would look like changed "
            f"code: {declared!r:.200} vs {second.spec!r:.200}",
            "make spec a class attribute, or build it only from constructor arguments",
        )
    roles = ", ".join(f"{name} ({role})" for name, role in probe.roster.items())
    said = "".join(f"; {note}" for note in notes)
    name = f"{declared.name}@{declared.version}"
    return f"{name}, turn order {declared.turn_order}, participants {roles}{said}"


async def encoding(probe: Probe) -> str:
    environment = await probe.held()
    declared = probe.spec
    state = await probe.initial(environment, probe.seed)
    try:
        data = canonical(state)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise CheckFailed(
            f"the initial state ({type(state).__name__}) does not encode: {exc}",
            "make the state a msgspec Struct, a dataclass or plain JSON values",
        ) from None
    if declared.state_type is None and not plain(state):
        raise CheckFailed(
            f"initialize() returned a {type(state).__name__}, but spec.state_type is not set: a "
            "resumed or branched session would get plain dicts and lists back",
            f"declare state_type={type(state).__name__} in the EnvironmentSpec",
        )
    try:
        again = canonical(restore_state(data, declared.state_type))
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise CheckFailed(
            f"the stored state does not convert back to state_type: {exc}",
            "state_type must be the type initialize() and resolve() return",
        ) from None
    if again != data:
        raise CheckFailed(
            "the state changes when stored and restored: "
            + difference(msgspec.json.decode(data), msgspec.json.decode(again), "state"),
            "use types that JSON keeps as they are (no sets, no non-string keys)",
        )
    acting = await probe.acting(environment, state)
    for participant in acting:
        await _observation_encodes(probe, environment, state, participant)
    who = f"observations of {', '.join(acting)} encode" if acting else "nobody acts first"
    return f"initial state {len(data)} bytes; {who}"


async def _observation_encodes(
    probe: Probe, environment: Any, state: Any, participant: str
) -> None:
    observation = await probe.call(environment, "observe", state, participant)
    try:
        builtin = msgspec.to_builtins(observation)
    except (TypeError, msgspec.EncodeError) as exc:
        raise CheckFailed(
            f"the observation for {participant!r} ({type(observation).__name__}) does not "
            f"encode: {exc}",
            "return a msgspec Struct, a dataclass or plain JSON values from observe()",
        ) from None
    kind = probe.spec.observation_type
    if kind is not None:
        try:
            msgspec.convert(builtin, kind)
        except (msgspec.ValidationError, TypeError) as exc:
            raise CheckFailed(
                f"the observation for {participant!r} is not a valid {kind.__qualname__}: {exc}",
                "return the declared observation_type from observe()",
            ) from None
    if callable(getattr(environment, "render_text", None)):
        text = await probe.call(environment, "render_text", state, participant)
        if text is not None and not isinstance(text, str):
            raise CheckFailed(
                f"render_text(state, {participant!r}) returned {type(text).__name__}",
                "return a str (ANSI colours allowed) or None",
            )


async def determinism(probe: Probe) -> str:
    first = await probe.session(probe.turns)
    second = await probe.session(probe.turns)
    probe.uninterrupted = first
    ended = (first.session.status, first.session.reason)
    if ended != (second.session.status, second.session.reason):
        raise CheckFailed(
            f"the same seed ended one session {ended[0]} ({ended[1]}) and the other "
            f"{second.session.status} ({second.session.reason})",
            _DETERMINISM_FIX,
        )
    differs = await probe.difference(first.evidence, second.evidence)
    if differs is not None:
        raise CheckFailed(
            f"two sessions with seed {probe.seed} differ: {differs}", _DETERMINISM_FIX
        )
    probe.deterministic = True
    session = first.session
    if session.status == "failed" and session.turns_completed == 0:
        raise CheckSkipped(f"the probe session failed before its first turn: {session.reason}")
    return (
        f"two sessions with seed {probe.seed} ended {session.status} after "
        f"{session.turns_completed} turns with the same {len(first.evidence)} records"
    )


async def checkpoint(probe: Probe) -> str:
    whole = probe.uninterrupted
    if whole is None or not probe.deterministic:
        raise CheckSkipped("needs sessions that the same seed repeats (see determinism)")
    played = whole.session.turns_completed
    if played < 2:
        raise CheckSkipped(
            f"the session ended after {played} turn(s) ({whole.session.reason}): there is no "
            "turn in between to restore; give more turns or an input whose episode lasts at "
            "least 2"
        )
    half = played // 2
    harness = probe.harness
    stopped = await harness.run(probe.scenario, turns=half, seed=probe.seed)
    if (stopped.status, stopped.turns_completed) != ("completed", half):
        raise CheckFailed(
            f"a session of {half} turns ended {stopped.status} after {stopped.turns_completed} "
            f"({stopped.reason}), unlike the longer one",
            _DETERMINISM_FIX,
        )
    taken = await harness.checkpoint(stopped.id)
    [state] = [
        record.payload.state
        async for record in harness.records(stopped.id)
        if isinstance(record.payload, Checkpoint) and record.seq == taken.seq
    ]
    if state != whole.states[half - 1]:
        shown = await probe.states_differ(whole.states[half - 1], state)
        raise CheckFailed(
            f"the state checkpointed after turn {half} differs from the uninterrupted "
            f"session's at the same turn: {shown}",
            _DETERMINISM_FIX,
        )
    continued = await harness.continue_(stopped.id, turns=probe.turns - half)
    if (continued.status, continued.turns_completed) != (whole.session.status, played):
        raise CheckFailed(
            f"restored at turn {half}, the session ended {continued.status} after "
            f"{continued.turns_completed} turns ({continued.reason}); uninterrupted it ended "
            f"{whole.session.status} after {played} ({whole.session.reason})",
            _RESTORE_FIX,
        )
    expected = [item for item in whole.evidence if item[0] is None or item[0] > half]
    got = await probe.evidence(continued.id, after=half)
    differs = await probe.difference(expected, got)
    if differs is not None:
        raise CheckFailed(
            f"restored at turn {half}, the session recorded something else: {differs}",
            _RESTORE_FIX,
        )
    return (
        f"checkpointed after turn {half}, restored on a fresh instance and continued to turn "
        f"{played}: the same {len(expected)} records as without the interruption"
    )


async def observe_private(probe: Probe) -> str:
    if len(probe.roster) < 2:
        raise CheckSkipped(
            "one participant: there is no one to keep anything private from (give more "
            "participants to check it)"
        )
    # The instance that dealt the initial state is watched, as a live session's would be; a
    # fresh one is given each state restored from JSON, as on resume.
    watched, fresh = await probe.held(), await probe.held()
    states = await _states(probe, watched)
    observed = 0
    for turn, state in states:
        restored = restore_state(canonical(state), probe.spec.state_type)
        for participant in probe.roster:
            seen = await probe.observed(watched, state, participant)
            if seen is None:
                continue  # not observable now (another's turn): nothing to compare
            for other in probe.roster:
                if other != participant:
                    await probe.observed(watched, state, other)
            again = await probe.observed(watched, state, participant)
            if again != seen:
                raise CheckFailed(
                    f"at {turn}, {participant!r}'s observation changed after the others were "
                    f"observed: {difference(decoded(seen), decoded(again), 'it')}",
                    _OBSERVE_FIX,
                )
            elsewhere = await probe.observed(fresh, restored, participant)
            if elsewhere != seen:
                raise CheckFailed(
                    f"at {turn}, a fresh instance given the same (restored) state shows "
                    f"{participant!r} something else: "
                    f"{difference(decoded(seen), decoded(elsewhere), 'it')}",
                    f"{_OBSERVE_FIX}; {_RESTORE_FIX}",
                )
            observed += 1
    detail = (
        f"{observed} observations over {len(states)} states depend on nothing but the state and "
        "the participant"
    )
    declared = getattr(probe.first, "private_state", None)
    if declared is None:
        found = keyed_by(msgspec.to_builtins(states[0][1]), set(probe.roster))
        hint = (
            f" (per-participant entries found at {', '.join(found)}: declare the private ones "
            "to have them varied)"
            if found
            else ""
        )
        return f"{detail}; no private_state declared, so no private entry was varied{hint}"
    paths = declared_paths(declared)
    varied, inconclusive = await _vary_private(probe, paths, states, watched)
    return (
        f"{detail}; varying the others' {', '.join(paths)} ({varied} times) never changed an "
        "observation" + (f", {inconclusive} variations inconclusive" if inconclusive else "")
    )


async def _states(probe: Probe, dealer: Any) -> list[tuple[str, Any]]:
    """The initial state, and the first states of the uninterrupted session."""
    states: list[tuple[str, Any]] = [("the initial state", await probe.initial(dealer, probe.seed))]
    whole = probe.uninterrupted
    for turn, digest in list(enumerate(whole.states if whole else [], 1))[: _STATES_OBSERVED - 1]:
        data = await probe.stored_state(digest)
        states.append((f"turn {turn}", restore_state(data, probe.spec.state_type)))
    return states


async def _vary_private(
    probe: Probe, paths: Sequence[str], states: Sequence[tuple[str, Any]], environment: Any
) -> tuple[int, int]:
    """Replace each other participant's declared entries; any change in what a participant
    observes is a leak. Returns how many variations were observed, and how many could not be."""
    dealer = await probe.held()
    others = [
        msgspec.to_builtins(await probe.initial(dealer, probe.seed + offset))
        for offset in range(1, _OTHER_SEEDS + 1)
    ]
    varied = inconclusive = 0
    for turn, state in states:
        builtin = msgspec.to_builtins(state)
        for path in paths:
            entries = entries_at(builtin, path)
            if not isinstance(entries, dict):
                raise CheckFailed(
                    f"private_state names {path!r}, but at {turn} the state has "
                    f"{type(entries).__name__} there, not a mapping keyed by participant",
                    "name the dotted paths of mappings from participant to private data",
                )
            for participant in probe.roster:
                seen = await probe.observed(environment, state, participant)
                if seen is None:
                    continue
                for other in [name for name in entries if name != participant]:
                    new = replacement(entries[other], path, other, others)
                    changed = replaced(builtin, path, other, new)
                    try:
                        typed = restore_state(canonical(changed), probe.spec.state_type)
                    except (msgspec.ValidationError, TypeError, ValueError):
                        inconclusive += 1
                        continue
                    shown = await probe.observed(environment, typed, participant)
                    if shown is None:
                        inconclusive += 1
                        continue
                    varied += 1
                    if shown != seen:
                        raise CheckFailed(
                            f"at {turn}, {participant!r}'s observation changes when "
                            f"{path}.{other} (private to {other!r}) changes: "
                            f"{difference(decoded(seen), decoded(shown), 'it')}",
                            _OBSERVE_FIX,
                        )
    return varied, inconclusive


async def resolve_failure(probe: Probe) -> str:
    times: CallTimes = probe.times

    def broken() -> Any:
        return TimedEnvironment(probe.factory(), times, fault=_FAULT)

    harness = probe.harness_for(broken, probe.folder / "faults")
    async with harness:
        ended = await harness.run(probe.scenario, turns=probe.turns, seed=probe.seed)
        errors = [
            record.payload.error.type
            async for record in harness.records(ended.id)
            if isinstance(record.payload, SessionStatus) and record.payload.error is not None
        ]
    if ended.status == "failed" and _FAULT in (ended.reason or ""):
        if InjectedFault.__name__ not in errors:
            raise CheckFailed(
                f"the session failed ({ended.reason}) but recorded no error of type "
                f"{InjectedFault.__name__}",
                "let the exception propagate out of resolve()",
            )
        return f"resolve() raised in turn 1; the session ended failed: {ended.reason}"
    whole = probe.uninterrupted
    if whole is not None and whole.session.turns_completed == 0:
        raise CheckSkipped(
            f"the probe session ends before its first resolve ({whole.session.reason})"
        )
    raise CheckFailed(
        f"resolve() raised, yet the session ended {ended.status} after {ended.turns_completed} "
        f"turns ({ended.reason})",
        "let exceptions from resolve() propagate (never catch and return a Resolution); for a "
        "program, answer the request with an error message",
    )


CHECKED: Final[dict[str, Callable[[Probe], Awaitable[str]]]] = {
    "spec": spec,
    "encoding": encoding,
    "determinism": determinism,
    "checkpoint": checkpoint,
    "observe-private": observe_private,
    "resolve-failure": resolve_failure,
}
"""Each check by its name, in :data:`~envharness.api.conformance.report.CHECKS` order."""
