"""How the checks use an environment: fresh instances called directly, and probe sessions
recorded by a harness into a temporary store, read back as comparable evidence.

One :class:`Probe` serves all the checks of one ``check_environment``: it holds the instances
it called directly in their ``lifespan()`` (a program's process) until the checks end, times
every call through :class:`~envharness.api.conformance.probe.TimedEnvironment`, and keeps the
uninterrupted session that later checks compare with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

import msgspec

from envharness.api.conformance.compare import (
    COMPARED,
    UNTIMED,
    Evidence,
    difference,
    first_mismatch,
    label,
)
from envharness.api.conformance.probe import (
    CallTimes,
    InjectedFault,
    ProbeAgent,
    TimedEnvironment,
    timed_names,
)
from envharness.api.conformance.report import CallTiming, CheckFailed
from envharness.api.harness import AsyncEnvironmentHarness
from envharness.api.sessions import Session
from envharness.contracts.environment import EnvironmentSpec, HoldsResources
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError, EnvharnessError
from envharness.records import Outcome, canonical
from envharness.runtime.checks import call_environment
from envharness.store import read_store

__all__ = ["Probe", "Run", "make_environment", "roster_for"]


def make_environment(factory: Callable[[], Any]) -> Any:
    """One environment from the factory, or a setup error saying why it is not one."""
    if not callable(factory):
        hint = (
            ": pass the class (or a zero-argument factory), not an instance"
            if hasattr(factory, "resolve")
            else ""
        )
        raise ConfigurationError(
            f"not an environment: {type(factory).__name__} {factory!r:.80} is not a class or "
            f"factory{hint}"
        )
    name = getattr(factory, "__qualname__", repr(factory))
    try:
        made = factory()
    except EnvharnessError:
        raise
    except Exception as exc:
        raise ConfigurationError(
            f"creating the environment with {name}() raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(getattr(made, "spec", None), EnvironmentSpec):
        raise ConfigurationError(
            f"not an environment: {name}() returned {type(made).__name__} {made!r:.80}, which "
            "has no `spec` EnvironmentSpec; an environment declares spec = "
            "EnvironmentSpec(name=..., version=..., input_type=...) and defines initialize, "
            "observe, resolve and intervene"
        )
    return made


def roster_for(
    spec: EnvironmentSpec, participants: Mapping[str, str] | None, environment: Any
) -> dict[str, str]:
    """The participants to run: as given (an empty role: the environment's only role, or the
    role the name is); else the environment's ``possible_agents`` when it names them (as
    PettingZoo does), or one per role named after it."""
    if not participants:
        named = getattr(environment, "possible_agents", None)
        if len(spec.roles) == 1 and isinstance(named, Sequence) and not isinstance(named, str):
            return {str(name): spec.roles[0] for name in named}
        return {role: role for role in spec.roles}
    roster = {}
    for name, role in participants.items():
        if not role:
            if len(spec.roles) == 1:
                role = spec.roles[0]
            elif name in spec.roles:
                role = name
            else:
                raise ConfigurationError(
                    f"participant {name!r} needs a role: environment {spec.name!r} has the "
                    f"roles {', '.join(spec.roles)} (give NAME=ROLE)"
                )
        if role not in spec.roles:
            raise ConfigurationError(
                f"participant {name!r} has role {role!r}, which environment {spec.name!r} does "
                f"not have (roles: {', '.join(spec.roles)})"
            )
        roster[name] = role
    return roster


@dataclass
class Run:
    """A probe session and what it recorded that the environment decided."""

    session: Session
    evidence: Evidence
    states: list[str]
    """The state digest after each turn, in turn order."""


class Probe:
    """The environment under check, its sessions, and what the checks learned so far."""

    def __init__(
        self,
        factory: Callable[[], Any],
        first: Any,
        roster: dict[str, str],
        scenario: Scenario[Any],
        validated: Any,
        *,
        turns: int,
        seed: int,
        action_timeout: float | None,
        folder: Path,
    ) -> None:
        self.factory = factory
        self.first = first
        self.spec: EnvironmentSpec = first.spec
        self.roster = roster
        self.scenario = scenario
        self.validated = validated
        self.turns = turns
        self.seed = seed
        self.action_timeout = action_timeout
        self.folder = folder
        self.times = CallTimes()
        self.resources = AsyncExitStack()
        self.uninterrupted: Run | None = None
        """The determinism check's first session: what the later checks compare with."""
        self.deterministic = False
        self._harness: AsyncEnvironmentHarness | None = None

    # -- environments --------------------------------------------------------------------------

    def fresh(self) -> TimedEnvironment:
        """A new environment for a session (the harness holds its lifespan)."""
        return TimedEnvironment(make_environment(self.factory), self.times)

    async def held(self) -> TimedEnvironment:
        """A new environment for the checks to call directly, held in its ``lifespan()``
        until the checks end."""
        environment = self.fresh()
        if isinstance(environment.inner, HoldsResources):
            await self.resources.enter_async_context(environment.inner.lifespan())
        return environment

    async def call(self, environment: Any, method: str, *args: Any) -> Any:
        """A direct call; what the environment raises is this check's failure."""
        try:
            return await call_environment(environment, method, *args)
        except EnvharnessError:
            raise
        except Exception as exc:  # a SessionFailure naming the method
            raise CheckFailed(str(exc), fix_for(exc.__cause__ or exc)) from exc

    async def initial(self, environment: Any, seed: int) -> Any:
        return await self.call(environment, "initialize", self.validated, Random(seed), self.roster)

    async def observed(self, environment: Any, state: Any, participant: str) -> bytes | None:
        """The observation's canonical bytes, or ``None`` when the environment refuses to
        show ``participant`` this state (not its turn)."""
        try:
            return canonical(await self.call(environment, "observe", state, participant))
        except CheckFailed:
            return None

    async def acting(self, environment: Any, state: Any) -> list[str]:
        """Who acts on ``state``: everyone, or whom ``acting`` names (checked)."""
        if self.spec.turn_order != "environment":
            return list(self.roster)
        named = await self.call(environment, "acting", state)
        if not isinstance(named, list | tuple) or not all(isinstance(n, str) for n in named):
            raise CheckFailed(
                f"acting(state) returned {named!r:.100}, not a list of participant names",
                "return a list of the names of the participants who act next",
            )
        unknown = [name for name in named if name not in self.roster]
        if unknown:
            raise CheckFailed(
                f"acting(state) named {', '.join(map(repr, unknown))}, who is not a participant "
                f"(participants: {', '.join(self.roster)})",
                "name participants from the roster initialize() receives",
            )
        return list(named)

    def timings(self) -> tuple[CallTiming, ...]:
        found = []
        for method in timed_names():
            spent = self.times.spent.get(method)
            if spent:
                found.append(CallTiming(method, len(spent), sum(spent) / len(spent) / 1000))
        return tuple(found)

    # -- sessions ------------------------------------------------------------------------------

    def open(self) -> AsyncEnvironmentHarness:
        """The probe harness, made once the spec is known to be sound; ``async with`` it (and
        :attr:`resources`) around the checks that run sessions."""
        self._harness = self.harness_for(self.fresh, self.folder / "store")
        return self._harness

    @property
    def harness(self) -> AsyncEnvironmentHarness:
        assert self._harness is not None, "open() comes first"
        return self._harness

    def harness_for(self, factory: Callable[[], Any], store: Path) -> AsyncEnvironmentHarness:
        return AsyncEnvironmentHarness(
            store,
            environment=factory,
            agents={participant: ProbeAgent for participant in self.roster},
            roles=self.roster,
            action_timeout=self.action_timeout,
        )

    async def session(self, turns: int) -> Run:
        harness = self.harness
        session = await harness.run(self.scenario, turns=turns, seed=self.seed)
        states: list[str] = []
        async for record in harness.records(session.id):
            if isinstance(record.payload, Outcome) and record.turn is not None:
                del states[record.turn - 1 :]  # the last outcome of a turn holds its state
                states.append(record.payload.state)
        return Run(session, await self.evidence(session.id), states)

    async def evidence(self, session_id: str, *, after: int = 0) -> Evidence:
        """What the environment decided after turn ``after``, and the last segment's score."""
        turns: Evidence = []
        ending: Evidence = []
        async for record in self.harness.records(session_id):
            if record.kind == "segment.started":
                ending = []
            if record.kind not in COMPARED:
                continue
            payload = msgspec.to_builtins(record.payload)
            for key in UNTIMED:
                payload.pop(key, None)
            item = (record.turn, record.kind, record.participant, payload)
            if record.turn is None:
                ending.append(item)
            elif record.turn > after:
                turns.append(item)
        return turns + ending

    async def difference(self, left: Evidence, right: Evidence) -> str | None:
        """Where two runs' evidence first differs, in words; a state that differs is shown
        where it differs, not as two digests."""
        found = first_mismatch(left, right)
        if found is None:
            return None
        mine, theirs = found
        if theirs is None:
            longer = "first" if len(left) > len(right) else "second"
            return f"the {longer} run recorded more, from {label(mine)} on"
        if mine[:3] != theirs[:3]:
            return f"{label(mine)} in one run, {label(theirs)} in the other"
        ours, other = mine[3], theirs[3]
        if mine[1] == "outcome" and ours.get("state") != other.get("state"):
            shown = await self.states_differ(ours["state"], other["state"])
            return f"{label(mine)}: the state after it differs: {shown}"
        return f"{label(mine)}: {difference(ours, other, '')}"

    async def states_differ(self, mine: str, theirs: str) -> str:
        store = await read_store(self.folder / "store")
        left, right = await store.blob(mine), await store.blob(theirs)
        return difference(msgspec.json.decode(left), msgspec.json.decode(right), "state")

    async def stored_state(self, digest: str) -> bytes:
        store = await read_store(self.folder / "store")
        return await store.blob(digest)


def fix_for(exc: BaseException) -> str:
    if isinstance(exc, InjectedFault):
        return ""
    return "the environment raised where the check called it; its message says what it expected"
