"""Any PettingZoo environment, AEC or Parallel, as an envharness environment, unchanged.

``PettingZooEnvironment("pettingzoo.classic.texas_holdem_v4")`` (a module path, also without
the ``pettingzoo.`` prefix: ``"classic.leduc_holdem_v4"``, or a module of one's own that
defines ``env()`` or ``parallel_env()``), an instance, or a zero-argument factory is passed as
the harness's ``environment=``. The harness calls it once per session, and each call gives a
copy that makes its own live environment. PettingZoo 1.27 deprecates importing its environment
modules (it warns) in favour of its registry: a path the registry knows
(``classic.texas_holdem_v4`` is ``classic/texas_holdem-v4``, which may be given as well) is made
with ``pettingzoo.make``, and any other path by importing the module.

What a session sees and records:

- **Participants are the PettingZoo agents**, named as PettingZoo names them
  (``agents={"player_0": A, "player_1": B}``), all in one role, ``"player"``. One role keeps
  the harness's roster implicit. The agent names carry who is who, and a game whose seats
  differ says so in each agent's own observation. A roster that is not exactly the
  environment's ``possible_agents`` fails the session at its start, naming both.
- **Who acts**: ``turn_order="environment"``. With the AEC API the one agent to act is
  ``agent_selection`` (agents that terminated or were truncated are stepped out with ``None``
  as PettingZoo requires; they are never asked). With the Parallel API every live agent acts
  in each turn, together.
- **Observations** are each agent's own, never another's: AEC ``env.observe(agent)``, or the
  agent's entry of what Parallel ``reset``/``step`` returned. They go out as ``{"observation":
  ..., "action_mask": [...], "legal_actions": [...], "info": {...}}``. The mask is taken from
  a dict observation's ``action_mask`` (PettingZoo's classic games) or from ``info``.
  ``legal_actions`` lists the actions the mask allows, for a ``Discrete`` action space.
- **Actions** are JSON objects ``{"action": <value>}`` in the agent's action space; the schema
  is in the recorded spec. An action outside the space, or one the mask forbids, is blocked
  (``invalid_actions="block"``, the default) naming the legal actions. The blocked turn moves
  nothing, and the same agent is asked again next turn. ``invalid_actions="fail"`` ends the
  session instead. With the Parallel API a blocked action leaves the whole step unplayed:
  PettingZoo steps all live agents together. The others' actions are recorded as executed,
  with an outcome that says nothing moved, and everybody acts again.
- **Rewards**: each step's reward goes to the agent that acted, in its executed action. An
  agent that did not act gets its reward as its own outcome when that reward is not zero, and
  always when the episode ends. So the player who did not make the last move learns its final
  reward. Outcomes are ``{"reward", "return", "terminated", "truncated"}``.
- **The end**: the episode ends when every agent has terminated or been truncated. It is
  ``done`` when any of them terminated, and ``truncated`` when all were cut short.
- **Score**: ``per_participant={agent: {"return": ...}}`` and ``metrics={"steps": ...}``.
- **No text view**: a game's render draws the whole table, other players' hands included,
  and a participant's text may show no more than its observation.
- **State** is a :class:`PettingZooState`: seed and moves, replayed to rebuild the live
  environment (:mod:`envharness.adapters.replay`; a branch from turn N replays N steps). The
  checks cover who acts, the rewards, the end flags and the next agents' observations.
- **Hooks** read (``hook_view``) what the participant's own observation shows, and no more:
  whose turn it is (the ``my_turn`` predicate, the ``acting`` list), the mask with one
  predicate per action (``action_3_allowed``), the legal actions as the admissible ones, and
  its return so far.
- **Interventions**: only ``{}`` (a branch from the same state), as for Gymnasium.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from random import Random
from typing import Any, Literal

import msgspec

from envharness.adapters._copies import PerSessionCopy, check_invalid_actions
from envharness.adapters._optional import require
from envharness.adapters.replay import Replay, SeededInput
from envharness.adapters.spaces import (
    action_type,
    check_action_space,
    discrete_values,
    from_json,
    json_schema,
    move_of,
    problem,
    to_json,
    to_json_subset,
)
from envharness.contracts.environment import EnvironmentSpec, Resolution, ScoreReport
from envharness.errors import ConfigurationError
from envharness.hooks import HookView

__all__ = ["ADAPTER_VERSION", "PettingZooEnvironment", "PettingZooInput", "PettingZooState"]

ADAPTER_VERSION = "1"
"""Part of every spec's version: a change to what this adapter records changes it."""

ROLE = "player"


PettingZooInput = SeededInput
"""A scenario's input: the reset's seed and options (``replay.SeededInput``)."""


class PettingZooState(msgspec.Struct, frozen=True, kw_only=True):
    """The recorded state: how to rebuild the live environment, and the episode so far."""

    replay: Replay
    acting: tuple[str, ...] = ()
    """Who acts next (the runtime asks only them)."""
    returns: dict[str, float] = {}
    """Each agent's rewards so far, summed."""
    steps: int = 0
    ended: bool = False
    truncated: bool = False
    """Whether the episode ended by truncation only (no agent terminated)."""


@dataclass(frozen=True, slots=True)
class _Blueprint:
    """What every copy of one adapter shares: how to make the environment, and what it is."""

    make: Callable[[], Any]
    name: str
    parallel: bool
    agents: tuple[str, ...]
    action_spaces: Mapping[str, Any]
    spec: EnvironmentSpec


class PettingZooEnvironment(PerSessionCopy[_Blueprint]):
    """A PettingZoo environment (a module path, an instance or a factory) as an envharness
    environment.

    ``env``: a module path (``"pettingzoo.classic.texas_holdem_v4"``, ``"classic.rps_v2"``,
    ``"my_pkg.my_game"``), an ``AECEnv`` or ``ParallelEnv`` instance (deep-copied for each
    session) or a zero-argument callable returning one. ``api`` picks ``"aec"`` (``env()``, the
    default) or ``"parallel"`` (``parallel_env()``) from a module; ``env_kwargs`` go to that
    function. ``invalid_actions`` says what an illegal action does (module docstring).
    """

    def __init__(
        self,
        env: Any,
        /,
        *,
        api: Literal["aec", "parallel"] | None = None,
        invalid_actions: Literal["block", "fail"] = "block",
        **env_kwargs: Any,
    ) -> None:
        if api not in (None, "aec", "parallel"):
            raise ConfigurationError(f"api must be 'aec' or 'parallel', not {api!r}")
        check_invalid_actions(invalid_actions)
        self._bind(_blueprint(env, api, invalid_actions, env_kwargs))

    @property
    def possible_agents(self) -> tuple[str, ...]:
        """The participants a session must name (PettingZoo's own name for them): what
        ``check-env`` and other tools seat when no roster is given."""
        return self._blueprint.agents

    # -- the environment contract --------------------------------------------------------------

    def initialize(
        self, input: PettingZooInput, rng: Random, roster: Mapping[str, str]
    ) -> PettingZooState:
        agents = self._blueprint.agents
        if set(roster) != set(agents):
            missing = [a for a in agents if a not in roster]
            unknown = [p for p in roster if p not in agents]
            said = "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"not agents of it: {', '.join(unknown)}" if unknown else "",
                )
                if part
            )
            raise ConfigurationError(
                f"{self._blueprint.name} has the agents {', '.join(agents)}: name the "
                f"participants after them, one each ({said})"
            )
        seed = input.seed if input.seed is not None else rng.randrange(2**31)
        replay, result = self._replayer.start(seed, input.options)
        return PettingZooState(
            replay=replay, acting=tuple(result["acting"]), returns=dict.fromkeys(agents, 0.0)
        )

    def acting(self, state: PettingZooState) -> list[str]:
        return list(state.acting)

    def observe(self, state: PettingZooState, participant: str) -> dict[str, Any]:
        result = self._replayer.result(state.replay)
        seen = result["observations"].get(participant)
        info = result["infos"].get(participant, {})
        if seen is None and not self._blueprint.parallel and not state.ended:
            env = self._replayer.live(state.replay)
            seen = to_json(env.observe(participant))
            info = to_json_subset(env.infos.get(participant, {}))
        return _shown(seen, info, self._blueprint.action_spaces[participant])

    def check_action(self, state: PettingZooState, participant: str, action: Any) -> str | None:
        space = self._blueprint.action_spaces[participant]
        move = move_of(action)
        found = problem(space, move)
        if found is not None:
            return found
        legal = self.observe(state, participant).get("legal_actions")
        if legal is not None and move not in legal:
            return (
                f"action {move} is not legal for {participant} now (its action_mask forbids "
                f"it): legal actions are {', '.join(map(str, legal))}"
            )
        return None

    def resolve(self, state: PettingZooState, actions: Mapping[str, Any]) -> Resolution:
        if state.ended:
            # A continued session whose episode had ended: nothing moves; it ends again.
            again = msgspec.structs.replace(state, replay=self._replayer.skip(state.replay))
            return Resolution(state=again, done=not state.truncated, truncated=state.truncated)
        moves = {name: move_of(action) for name, action in actions.items()}
        missing = [name for name in state.acting if name not in moves]
        if not moves or missing:
            # A blocked action: nothing moves (PettingZoo steps all live agents at once).
            skipped = msgspec.structs.replace(state, replay=self._replayer.skip(state.replay))
            note = {
                "moved": False,
                "reason": f"{', '.join(missing)} had no legal action; every agent acts again",
            }
            return Resolution(state=skipped, outcomes=dict.fromkeys(moves, note))
        spaces = self._blueprint.action_spaces
        for name, value in moves.items():
            illegal = problem(spaces[name], value)
            if illegal is not None:  # not vetted by check_action (a hook's rewrite, a direct call)
                raise ValueError(f"{name}'s {illegal}")
        move = moves if self._blueprint.parallel else moves[state.acting[0]]
        replay, result = self._replayer.advance(state.replay, move)
        rewards: dict[str, float] = result["rewards"]
        returns = dict(state.returns)
        for name, reward in rewards.items():
            returns[name] = returns.get(name, 0.0) + reward
        terminations, truncations = result["terminations"], result["truncations"]
        # Over when no agent is left, or (a Parallel environment that keeps them listed) when
        # every one left has terminated or been truncated.
        ended = all(terminations.get(a) or truncations.get(a) for a in result["live"])
        terminated = any(terminations.values())
        truncated = ended and not terminated and any(truncations.values())
        after = PettingZooState(
            replay=replay,
            acting=tuple(result["acting"]),
            returns=returns,
            steps=state.steps + 1,
            ended=ended,
            truncated=truncated,
        )
        told: dict[str, float] = {}
        outcomes: dict[str, Any] = {}
        for name in self._blueprint.agents:
            reward = rewards.get(name, 0.0)
            if name in moves or reward != 0.0 or ended:
                told[name] = reward
                outcomes[name] = {
                    "reward": reward,
                    "return": returns.get(name, 0.0),
                    "terminated": bool(terminations.get(name, False)),
                    "truncated": bool(truncations.get(name, False)),
                }
        return Resolution(
            state=after,
            outcomes=outcomes,
            done=ended and not truncated,
            truncated=truncated,
            rewards=told,
        )

    def hook_view(self, state: PettingZooState, participant: str) -> HookView:
        """What harness hooks (and the optimizer's engineers) may read, from this participant's
        own observation only: whose turn it is (``my_turn``), its mask with a predicate per
        action (``action_2_allowed``), its legal actions as the admissible ones, and the
        episode so far."""
        shown = self.observe(state, participant)
        mask, legal = shown.get("action_mask"), shown.get("legal_actions")
        view: dict[str, Any] = {
            "acting": list(state.acting),
            "steps": state.steps,
            "return": state.returns.get(participant, 0.0),
        }
        predicates = {"my_turn": participant in state.acting, "ended": state.ended}
        if mask is not None:
            view["action_mask"] = mask
        values = discrete_values(self._blueprint.action_spaces[participant])
        if legal is not None and values is not None:
            view["legal_actions"] = legal
            predicates.update((f"action_{value}_allowed", value in legal) for value in values)
        admissible = [{"action": value} for value in legal] if legal is not None else None
        return HookView(state=view, predicates=predicates, admissible=admissible)

    def score(self, state: PettingZooState, scenario: Any) -> ScoreReport:
        return ScoreReport(
            metrics={"steps": state.steps},
            per_participant={
                name: {"return": state.returns.get(name, 0.0)} for name in self._blueprint.agents
            },
        )

    # -- the live environment ------------------------------------------------------------------

    def _reset(self, seed: int, options: Any) -> tuple[Any, dict[str, Any]]:
        env = self._live_env()
        if self._blueprint.parallel:
            observations, infos = env.reset(seed=seed, options=options)
            return env, self._parallel_result(env, observations, {}, {}, {}, infos)
        env.reset(seed=seed, options=options)
        _step_out_the_dead(env)
        return env, _aec_result(env, {}, {}, {})

    def _step(self, env: Any, move: Any) -> dict[str, Any]:
        spaces = self._blueprint.action_spaces
        if self._blueprint.parallel:
            joint = {name: from_json(spaces[name], value) for name, value in move.items()}
            observations, rewards, terminations, truncations, infos = env.step(joint)
            return self._parallel_result(
                env, observations, rewards, terminations, truncations, infos
            )
        env.step(from_json(spaces[env.agent_selection], move))
        # What this step gave, before the agents it ended are stepped out (which clears it).
        rewards = {name: float(value) for name, value in env.rewards.items()}
        terminations = {name: bool(value) for name, value in env.terminations.items()}
        truncations = {name: bool(value) for name, value in env.truncations.items()}
        _step_out_the_dead(env)
        return _aec_result(env, rewards, terminations, truncations)

    def _checked(self, result: dict[str, Any]) -> Any:
        """What the replay's checks cover: all but ``infos`` (which may hold timings)."""
        return {key: value for key, value in result.items() if key != "infos"}

    def _parallel_result(
        self,
        env: Any,
        observations: Mapping[str, Any],
        rewards: Mapping[str, Any],
        terminations: Mapping[str, Any],
        truncations: Mapping[str, Any],
        infos: Mapping[str, Any],
    ) -> dict[str, Any]:
        live = list(env.agents)
        return {
            "acting": live,
            "live": live,
            "rewards": {name: float(value) for name, value in rewards.items()},
            "terminations": {name: bool(value) for name, value in terminations.items()},
            "truncations": {name: bool(value) for name, value in truncations.items()},
            "observations": {name: to_json(observations[name]) for name in live},
            "infos": {name: to_json_subset(infos.get(name, {})) for name in live},
        }


def _step_out_the_dead(env: Any) -> None:
    """PettingZoo's AEC rule: an agent that terminated or was truncated is stepped with
    ``None`` when selected, which removes it; it is never asked for an action."""
    while env.agents:
        selected = env.agent_selection
        if not (env.terminations.get(selected) or env.truncations.get(selected)):
            return
        env.step(None)


def _aec_result(
    env: Any,
    rewards: dict[str, float],
    terminations: dict[str, bool],
    truncations: dict[str, bool],
) -> dict[str, Any]:
    acting = [env.agent_selection] if env.agents else []
    return {
        "acting": acting,
        "live": list(env.agents),
        "rewards": rewards,
        "terminations": terminations,
        "truncations": truncations,
        "observations": {name: to_json(env.observe(name)) for name in acting},
        "infos": {name: to_json_subset(env.infos.get(name, {})) for name in acting},
    }


def _shown(seen: Any, info: dict[str, Any], space: Any) -> dict[str, Any]:
    """One agent's observation as it goes out: the mask lifted to the top, with the legal
    actions it allows spelt out for a ``Discrete`` space."""
    info = dict(info)
    mask = info.pop("action_mask", None)
    observation = seen
    if isinstance(seen, dict) and "action_mask" in seen:
        mask = seen["action_mask"]
        rest = {key: value for key, value in seen.items() if key != "action_mask"}
        observation = rest["observation"] if list(rest) == ["observation"] else rest
    shown: dict[str, Any] = {"observation": observation}
    if mask is not None:
        shown["action_mask"] = mask
        start = getattr(space, "start", None)
        if start is not None and getattr(space, "n", None) is not None:
            shown["legal_actions"] = [int(start) + i for i, on in enumerate(mask) if on]
    shown["info"] = info
    return shown


# -- making the blueprint ------------------------------------------------------------------------


def _blueprint(
    env: Any,
    api: Literal["aec", "parallel"] | None,
    invalid_actions: Literal["block", "fail"],
    env_kwargs: dict[str, Any],
) -> _Blueprint:
    pettingzoo = require("pettingzoo", "pettingzoo")
    kinds = require("pettingzoo.utils.env", "pettingzoo")
    if isinstance(env, str):
        make, name, identity = _from_module(env, api, env_kwargs)
    else:
        if env_kwargs:
            raise ConfigurationError(
                f"keyword arguments ({', '.join(sorted(env_kwargs))}) apply to a module path "
                "only; make the instance (or the factory) with them instead"
            )
        if api is not None:
            raise ConfigurationError(
                "api= chooses between a module's env() and parallel_env(); an instance or a "
                "factory is already one or the other"
            )
        make, name, identity = _from_object(kinds, env)
    probe = make()
    parallel = isinstance(probe, kinds.ParallelEnv)
    if not parallel and not isinstance(probe, kinds.AECEnv):
        raise ConfigurationError(
            f"{name} made an object of type {type(probe).__name__}, which is neither a PettingZoo "
            "AECEnv nor a ParallelEnv"
        )
    try:
        agents = tuple(str(agent) for agent in probe.possible_agents)
        action_spaces = {agent: probe.action_space(agent) for agent in agents}
    finally:
        probe.close()
    for agent, space in action_spaces.items():
        check_action_space(space, f"{name} agent {agent!r}")
    if not agents:
        raise ConfigurationError(f"{name} has no possible_agents")
    schemas: dict[str, dict[str, Any]] = {}
    for space in action_spaces.values():
        schemas.setdefault(repr(space), json_schema(space))
    distinct = list(schemas.values())
    schema = distinct[0] if len(distinct) == 1 else {"anyOf": distinct}
    made_of = f"{identity}|{parallel}|{sorted((a, repr(s)) for a, s in action_spaces.items())}"
    digest = hashlib.sha256(made_of.encode()).hexdigest()[:12]
    spec = EnvironmentSpec(
        name=name,
        version=f"adapter {ADAPTER_VERSION}; pettingzoo {pettingzoo.__version__}; env {digest}",
        input_type=PettingZooInput,
        action_type=action_type("PettingZooAction", schema, module=__name__),
        roles=(ROLE,),
        turn_order="environment",
        invalid_actions=invalid_actions,
        state_type=PettingZooState,
    )
    return _Blueprint(make, name, parallel, agents, action_spaces, spec)


def _from_module(
    path: str, api: Literal["aec", "parallel"] | None, env_kwargs: dict[str, Any]
) -> tuple[Callable[[], Any], str, str]:
    """How to make the environment ``path`` names: through PettingZoo's registry when it has
    one that knows it (1.27 deprecates importing ``pettingzoo.classic.texas_holdem_v4`` and
    warns), otherwise by importing the module and calling its ``env()`` or ``parallel_env()``."""
    kwargs = dict(env_kwargs)
    shown = sorted((k, repr(v)) for k, v in kwargs.items())
    registered = _registered(path, api)
    if registered is not None:
        pettingzoo, env_type, env_id = registered

        def make_registered() -> Any:
            try:
                return pettingzoo.make(env_type, env_id, **kwargs)
            except Exception as exc:
                raise ConfigurationError(
                    f"pettingzoo.make({env_type!r}, {env_id!r}) failed: {type(exc).__name__}: {exc}"
                ) from exc

        name = f"pettingzoo:{path.removeprefix('pettingzoo.')}"
        return make_registered, name, f"{env_type} {env_id} {shown}"
    module_name = _resolve_module(path)
    module = require(module_name, "pettingzoo", needed_by=f"PettingZoo environment {path!r}")
    wanted = api or ("aec" if hasattr(module, "env") else "parallel")
    function_name = "env" if wanted == "aec" else "parallel_env"
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigurationError(
            f"{module_name} has no {function_name}() to make its "
            f"{'AEC' if wanted == 'aec' else 'Parallel'} environment"
        )

    def make() -> Any:
        try:
            return function(**kwargs)
        except Exception as exc:
            raise ConfigurationError(
                f"{module_name}.{function_name}() failed: {type(exc).__name__}: {exc}"
            ) from exc

    name = f"pettingzoo:{module_name.removeprefix('pettingzoo.')}"
    return make, name, f"{module_name}.{function_name} {shown}"


def _registered(
    path: str, api: Literal["aec", "parallel"] | None
) -> tuple[Any, Literal["aec", "parallel"], str] | None:
    """PettingZoo's registry id for ``path`` (``classic.texas_holdem_v4`` is
    ``classic/texas_holdem-v4``; a registry id is taken as it is), with the API to make it
    with, or ``None`` when there is no registry or it does not know the environment."""
    pettingzoo = require("pettingzoo", "pettingzoo")
    registries = {
        "aec": getattr(pettingzoo, "aec_registry", None),
        "parallel": getattr(pettingzoo, "parallel_registry", None),
    }
    if registries["aec"] is None or not callable(getattr(pettingzoo, "make", None)):
        return None  # before PettingZoo 1.27: modules are the way
    short = path.removeprefix("pettingzoo.")
    env_id = short
    if "/" not in short:
        family, _, module = short.rpartition(".")
        versioned = re.fullmatch(r"(\w+)_v(\d+)", module)
        if not family or versioned is None:
            return None
        env_id = f"{family}/{versioned[1]}-v{versioned[2]}"
    order: tuple[Literal["aec", "parallel"], ...] = (api,) if api else ("aec", "parallel")
    for env_type in order:
        if env_id in (registries[env_type] or {}):
            return pettingzoo, env_type, env_id
    if api is not None and env_id in (registries["parallel" if api == "aec" else "aec"] or {}):
        raise ConfigurationError(
            f"PettingZoo environment {path!r} has no {'AEC' if api == 'aec' else 'Parallel'} "
            f"API; use api={'parallel' if api == 'aec' else 'aec'!r}"
        )
    return None


def _resolve_module(path: str) -> str:
    """The module ``path`` names (``pettingzoo.`` may be left out), or an error naming the
    closest PettingZoo environments."""
    candidates = [path] if path.startswith("pettingzoo.") else [f"pettingzoo.{path}", path]
    for candidate in candidates:
        try:
            if importlib.util.find_spec(candidate) is not None:
                return candidate
        except (ImportError, ValueError):
            continue
    known = _known_environments()
    close = difflib.get_close_matches(path.removeprefix("pettingzoo."), known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise ConfigurationError(
        f"unknown PettingZoo environment {path!r}{hint} (give a module path such as "
        "'pettingzoo.classic.texas_holdem_v4', or a module of your own that defines env() or "
        "parallel_env())"
    )


def _known_environments() -> list[str]:
    """PettingZoo's own environments as ``family.name_vN``, found without importing them."""
    pettingzoo = require("pettingzoo", "pettingzoo")
    found = []
    for family in pkgutil.iter_modules(pettingzoo.__path__):
        if not family.ispkg or family.name in ("utils", "test"):
            continue
        spec = importlib.util.find_spec(f"pettingzoo.{family.name}")
        locations = spec.submodule_search_locations if spec is not None else None
        for module in pkgutil.iter_modules(list(locations or [])):
            if module.name.rpartition("_v")[2].isdigit():
                found.append(f"{family.name}.{module.name}")
    return found


def _from_object(kinds: Any, env: Any) -> tuple[Callable[[], Any], str, str]:
    if isinstance(env, kinds.AECEnv | kinds.ParallelEnv):
        instance = env

        def copied() -> Any:
            try:
                return copy.deepcopy(instance)
            except Exception as exc:
                raise ConfigurationError(
                    f"cannot copy the PettingZoo environment {instance!r} for a new session "
                    f"({type(exc).__name__}: {exc}); pass a factory that makes one instead"
                ) from exc

        label = str(getattr(instance, "metadata", {}).get("name") or type(instance).__qualname__)
        return copied, f"pettingzoo:{label}", f"instance {label}"
    if callable(env):
        factory = env

        def made() -> Any:
            try:
                return factory()
            except Exception as exc:
                raise ConfigurationError(
                    f"the PettingZoo environment factory {factory!r} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

        label = getattr(factory, "__qualname__", None) or type(factory).__qualname__
        module = getattr(factory, "__module__", None)
        label = f"{module}:{label}" if module else label
        return made, f"pettingzoo:{label}", f"factory {label}"
    raise ConfigurationError(
        f"PettingZooEnvironment takes a module path, an AECEnv or ParallelEnv, or a factory, "
        f"not {type(env).__name__} {env!r:.80}"
    )
