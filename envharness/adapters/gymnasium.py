"""Any Gymnasium environment as an envharness environment, unchanged.

``GymnasiumEnvironment("Taxi-v4", max_episode_steps=60)`` (any registered id, with
``gymnasium.make`` keyword arguments), ``GymnasiumEnvironment(env)`` (an instance) or
``GymnasiumEnvironment(make_env)`` (a zero-argument factory) is passed as the harness's
``environment=``. The harness calls it once per session, and each call gives a copy that makes
its own live environment; the object itself may also be used directly as an environment.

What a session sees and records:

- **One participant**, named as the caller likes, in the role ``"agent"``.
- **Seeds** come from the scenario: ``Scenario(id=..., input={"seed": 7})``, with Gymnasium's
  reset ``options`` as ``input={"seed": 7, "options": {...}}``. Without a seed, the session's
  own seed picks one, so an experiment's trials differ and each can be reproduced.
- **Observations** are ``{"observation": ..., "info": {...}, "action_mask": [...]}``: the
  observation as JSON (:func:`envharness.adapters.spaces.to_json`) and the JSON-able part of
  ``info``. An ``action_mask`` in ``info`` is lifted to the top, where agents and hooks find it.
- **Text view**: when the environment supports the ``ansi`` render mode and no other mode was
  asked for, it is made with ``render_mode="ansi"`` and each observation's text is its render
  (the viewer shows it, with ANSI colours).
- **Actions** are JSON objects ``{"action": <value>}``. The action space's JSON Schema is in
  the recorded spec, so agents are told what is legal. An action outside the space is blocked,
  naming the space and the legal values (``"action 7 is outside Discrete(6): choose an integer
  0..5"``). The blocked turn moves nothing, but still counts against the session's ``turns``.
  ``invalid_actions="fail"`` ends the session on such an action instead. ``"block"`` is the
  default because a model's malformed answer is evidence about the agent, not a reason to
  lose the episode. An ``action_mask`` is a hint here, not a rule: Gymnasium steps a masked
  action (Taxi charges it like any other move).
- **Each step** records its reward as the acting participant's reward, plus the shared signals
  ``reward`` and ``return`` (the running sum). Its outcome is ``{"reward", "return",
  "terminated", "truncated"}``. ``terminated`` ends the session as done, ``truncated`` (the
  ``TimeLimit`` of ``max_episode_steps``) as truncated.
- **Score**: ``{"return": sum of rewards, "steps": env.step calls}``.
- **Frames** (opt-in): ``frames_every=N`` makes the environment with ``render_mode="rgb_array"``
  and records a PNG artifact every N steps and at the episode's end.
- **State** is a :class:`GymnasiumState`: the seed and the moves, replayed to rebuild the live
  environment on resume, branch and checkpoint restore (:mod:`envharness.adapters.replay`; a
  branch from turn N replays N steps). The replay's determinism is checked on the observation,
  reward and end flags of every step, not on ``info``, which may hold wall-clock timings.
- **Hooks** read (``hook_view``) the steps and return so far, the ``action_mask`` with one
  predicate per action (``action_4_allowed``; Taxi's mask marks the moves that change
  anything) and, for a ``Discrete`` space of up to 64 actions, every action as admissible.
- **Interventions**: a branch takes ``intervention={}`` (the same state, for other agents or
  hooks to play on). Any other intervention is refused: the state is a seed and the moves
  made, with nothing else that could be changed from outside.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from random import Random
from typing import Any, Literal

import msgspec

from envharness.adapters._copies import PerSessionCopy, check_invalid_actions
from envharness.adapters._optional import require
from envharness.adapters._png import png
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

__all__ = ["ADAPTER_VERSION", "GymnasiumEnvironment", "GymnasiumInput", "GymnasiumState"]

ADAPTER_VERSION = "1"
"""Part of every spec's version: a change to what this adapter records changes it."""


GymnasiumInput = SeededInput
"""A scenario's input: the reset's seed and options (``replay.SeededInput``)."""


class GymnasiumState(msgspec.Struct, frozen=True, kw_only=True):
    """The recorded state: how to rebuild the live environment, and the episode so far."""

    replay: Replay
    steps: int = 0
    """``env.step`` calls so far (turns whose action was blocked made none)."""
    total_reward: float = 0.0
    terminated: bool = False
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class _Blueprint:
    """What every copy of one adapter shares: how to make the environment, and what it is."""

    make: Callable[[], Any]
    name: str
    action_space: Any
    text: bool
    frames_every: int | None
    spec: EnvironmentSpec


class GymnasiumEnvironment(PerSessionCopy[_Blueprint]):
    """A Gymnasium environment (an id, an instance or a factory) as an envharness environment.

    ``env``: a registered id (``"Taxi-v4"``, ``"module:Id"`` to import its module first), a
    ``gymnasium.Env`` instance (each session gets a deep copy; when copying fails, a new one
    made from its registered spec) or a zero-argument callable that returns a new one.
    ``max_episode_steps`` wraps it in a time limit (for an id, as ``gymnasium.make`` does);
    ``invalid_actions`` says what an action outside the space does (see the module docstring);
    ``frames_every`` records an ``rgb_array`` frame every N steps; ``make_kwargs`` go to
    ``gymnasium.make`` (an id only).
    """

    def __init__(
        self,
        env: Any,
        /,
        *,
        max_episode_steps: int | None = None,
        invalid_actions: Literal["block", "fail"] = "block",
        frames_every: int | None = None,
        **make_kwargs: Any,
    ) -> None:
        if frames_every is not None and (
            isinstance(frames_every, bool) or not isinstance(frames_every, int) or frames_every < 1
        ):
            raise ConfigurationError(
                f"frames_every must be a positive number of steps or None, not {frames_every!r}"
            )
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool)
            or not isinstance(max_episode_steps, int)
            or max_episode_steps < 1
        ):
            raise ConfigurationError(
                f"max_episode_steps must be a positive integer or None, not {max_episode_steps!r}"
            )
        check_invalid_actions(invalid_actions)
        self._bind(_blueprint(env, max_episode_steps, invalid_actions, frames_every, make_kwargs))

    # -- the environment contract --------------------------------------------------------------

    def initialize(
        self, input: GymnasiumInput, rng: Random, roster: Mapping[str, str]
    ) -> GymnasiumState:
        if len(roster) != 1:
            raise ConfigurationError(
                f"{self._blueprint.name} is a single-agent environment: give exactly one "
                f"participant, not {len(roster)} ({', '.join(roster)})"
            )
        seed = input.seed if input.seed is not None else rng.randrange(2**31)
        replay, _ = self._replayer.start(seed, input.options)
        return GymnasiumState(replay=replay)

    def observe(self, state: GymnasiumState, participant: str) -> dict[str, Any]:
        result = self._replayer.result(state.replay)
        info = dict(result["info"])
        shown: dict[str, Any] = {"observation": result["observation"]}
        mask = info.pop("action_mask", None)
        if mask is not None:
            shown["action_mask"] = mask
        shown["info"] = info
        return shown

    def render_text(self, state: GymnasiumState, participant: str) -> str | None:
        if not self._blueprint.text:
            return None
        text = self._replayer.live(state.replay).render()
        return text if isinstance(text, str) else None

    def check_action(self, state: GymnasiumState, participant: str, action: Any) -> str | None:
        return problem(self._blueprint.action_space, move_of(action))

    def resolve(self, state: GymnasiumState, actions: Mapping[str, Any]) -> Resolution:
        if state.terminated or state.truncated:
            # A continued session that had ended: nothing moves, and it ends again at once.
            ended = msgspec.structs.replace(state, replay=self._replayer.skip(state.replay))
            return Resolution(state=ended, done=state.terminated, truncated=not state.terminated)
        if not actions:  # the action was blocked: this turn moves nothing
            return Resolution(
                state=msgspec.structs.replace(state, replay=self._replayer.skip(state.replay))
            )
        [(participant, action)] = actions.items()
        move = move_of(action)
        illegal = problem(self._blueprint.action_space, move)
        if illegal is not None:  # not vetted by check_action (a hook's rewrite, a direct call)
            raise ValueError(f"{participant}'s {illegal}")
        replay, result = self._replayer.advance(state.replay, move)
        reward = result["reward"]
        terminated, truncated = result["terminated"], result["truncated"]
        after = GymnasiumState(
            replay=replay,
            steps=state.steps + 1,
            total_reward=state.total_reward + reward,
            terminated=terminated,
            truncated=truncated and not terminated,
        )
        return Resolution(
            state=after,
            outcomes={
                participant: {
                    "reward": reward,
                    "return": after.total_reward,
                    "terminated": terminated,
                    "truncated": truncated,
                }
            },
            done=terminated,
            truncated=after.truncated,
            signals={"reward": reward, "return": after.total_reward},
            rewards={participant: reward},
            artifacts=self._frames(after),
        )

    def hook_view(self, state: GymnasiumState, participant: str) -> HookView:
        """What harness hooks (and the optimizer's engineers) may read: the episode so far, the
        action mask with a predicate per action (``action_3_allowed``), and for a small
        ``Discrete`` space every action as admissible."""
        result = self._replayer.result(state.replay)
        mask = result["info"].get("action_mask")
        shown: dict[str, Any] = {"steps": state.steps, "return": state.total_reward}
        predicates = {"terminated": state.terminated, "truncated": state.truncated}
        space = self._blueprint.action_space
        values = discrete_values(space)
        if mask is not None:
            shown["action_mask"] = mask
            if values is not None and len(values) == len(mask):
                predicates.update(
                    (f"action_{value}_allowed", bool(on))
                    for value, on in zip(values, mask, strict=True)
                )
        admissible = [{"action": value} for value in values] if values is not None else None
        return HookView(state=shown, predicates=predicates, admissible=admissible)

    def score(self, state: GymnasiumState, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={"return": state.total_reward, "steps": state.steps})

    # -- the live environment ------------------------------------------------------------------

    def _reset(self, seed: int, options: Any) -> tuple[Any, dict[str, Any]]:
        env = self._live_env()
        observation, info = env.reset(seed=seed, options=options)
        return env, _result(observation, 0.0, False, False, info)

    def _step(self, env: Any, move: Any) -> dict[str, Any]:
        observation, reward, terminated, truncated, info = env.step(
            from_json(self._blueprint.action_space, move)
        )
        return _result(observation, reward, terminated, truncated, info)

    def _checked(self, result: dict[str, Any]) -> Any:
        """What the replay's checks cover: all but ``info`` (a wrapper may time the step there)."""
        return [result["observation"], result["reward"], result["terminated"], result["truncated"]]

    def _frames(self, state: GymnasiumState) -> dict[str, bytes]:
        every = self._blueprint.frames_every
        if every is None or not (state.steps % every == 0 or state.terminated or state.truncated):
            return {}
        frame = self._replayer.live(state.replay).render()
        if frame is None:
            return {}
        return {f"frame-{state.steps:06d}.png": png(frame)}


def _result(
    observation: Any, reward: Any, terminated: Any, truncated: Any, info: Any
) -> dict[str, Any]:
    return {
        "observation": to_json(observation),
        "reward": float(reward),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "info": to_json_subset(info) if isinstance(info, Mapping) else {},
    }


# -- making the blueprint ------------------------------------------------------------------------


def _blueprint(
    env: Any,
    max_episode_steps: int | None,
    invalid_actions: Literal["block", "fail"],
    frames_every: int | None,
    make_kwargs: dict[str, Any],
) -> _Blueprint:
    gym = require("gymnasium", "gymnasium")
    render_mode: str | None
    if isinstance(env, str):
        make, render_mode, identity = _from_id(
            gym, env, max_episode_steps, frames_every, make_kwargs
        )
        name = f"gymnasium:{env}"
    else:
        if make_kwargs:
            raise ConfigurationError(
                f"gymnasium.make keyword arguments ({', '.join(sorted(make_kwargs))}) apply to an "
                "environment id only; make the instance (or the factory) with them instead"
            )
        make, name, identity = _from_object(gym, env, max_episode_steps)
        render_mode = None
    probe = make()
    try:
        action_space = probe.action_space
        check_action_space(action_space, name)
        mode = getattr(probe, "render_mode", None)
        if frames_every is not None and mode != "rgb_array":
            raise ConfigurationError(
                f"frames_every needs {name} to render 'rgb_array' frames, but its render_mode "
                f"is {mode!r}; make it with render_mode='rgb_array'"
            )
        text = mode == "ansi"
        schema = json_schema(action_space)
        version = _version(gym, identity, action_space, frames_every, render_mode or mode)
    finally:
        probe.close()
    spec = EnvironmentSpec(
        name=name,
        version=version,
        input_type=GymnasiumInput,
        action_type=action_type("GymnasiumAction", schema, module=__name__),
        roles=("agent",),
        turn_order="simultaneous",
        invalid_actions=invalid_actions,
        state_type=GymnasiumState,
    )
    return _Blueprint(make, name, action_space, text, frames_every, spec)


def _from_id(
    gym: Any,
    env_id: str,
    max_episode_steps: int | None,
    frames_every: int | None,
    make_kwargs: dict[str, Any],
) -> tuple[Callable[[], Any], str | None, str]:
    """How to make a registered id (checked now, naming the closest ids when it is unknown)."""
    module, _, bare = env_id.rpartition(":")
    if module:
        try:  # gymnasium's "module:Id": the module registers the id when it is imported
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(
                f"Gymnasium id {env_id!r} names the module {module!r} to import first, and "
                f"importing it failed: {type(exc).__name__}: {exc}"
            ) from exc
    if bare not in gym.registry:
        close = difflib.get_close_matches(bare, list(gym.registry), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ConfigurationError(
            f'unknown Gymnasium environment id {env_id!r}{hint} (python -c "import gymnasium; '
            'gymnasium.pprint_registry()" lists the registered ids)'
        )
    kwargs = dict(make_kwargs)
    if frames_every is not None:
        kwargs.setdefault("render_mode", "rgb_array")
    elif "render_mode" not in kwargs and "ansi" in _render_modes(gym, bare):
        kwargs["render_mode"] = "ansi"  # a text view for the viewer, at no cost to the agent
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps

    def make() -> Any:
        try:
            return gym.make(bare, **kwargs)
        except Exception as exc:
            raise ConfigurationError(
                f"gymnasium.make({bare!r}) failed: {type(exc).__name__}: {exc}"
            ) from exc

    identity = f"{env_id} {sorted((k, repr(v)) for k, v in kwargs.items())}"
    return make, kwargs.get("render_mode"), identity


def _render_modes(gym: Any, env_id: str) -> list[str]:
    """The render modes an id's environment class declares, without making one."""
    entry = gym.spec(env_id).entry_point
    try:
        creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # noqa: BLE001 - making it will say what is wrong
        return []
    modes = getattr(creator, "metadata", {}).get("render_modes", [])
    return list(modes) if isinstance(modes, list | tuple) else []


def _from_object(
    gym: Any, env: Any, max_episode_steps: int | None
) -> tuple[Callable[[], Any], str, str]:
    """How to make a fresh environment like ``env`` (an instance or a factory)."""
    if isinstance(env, gym.Env):
        instance = env
        spec = getattr(instance, "spec", None)

        def fresh() -> Any:
            try:
                return copy.deepcopy(instance)
            except Exception as exc:
                if spec is None:
                    raise ConfigurationError(
                        f"cannot copy the Gymnasium environment {instance!r} for a new session "
                        f"({type(exc).__name__}: {exc}); pass a factory that makes one instead"
                    ) from exc
                return gym.make(spec)

        made: Callable[[], Any] = fresh
        label = spec.id if spec is not None else type(instance.unwrapped).__qualname__
    elif callable(env):
        factory = env

        def made() -> Any:
            try:
                created = factory()
            except Exception as exc:
                raise ConfigurationError(
                    f"the Gymnasium environment factory {_named(factory)} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(created, gym.Env):
                raise ConfigurationError(
                    f"the factory {_named(factory)} returned {type(created).__name__}, not a "
                    "gymnasium.Env"
                )
            return created

        label = _named(factory)
    else:
        raise ConfigurationError(
            f"GymnasiumEnvironment takes an environment id, a gymnasium.Env or a factory, not "
            f"{type(env).__name__} {env!r:.80}"
        )
    if max_episode_steps is None:
        return made, f"gymnasium:{label}", label
    limit = max_episode_steps

    def limited() -> Any:
        return gym.wrappers.TimeLimit(made(), max_episode_steps=limit)

    return limited, f"gymnasium:{label}", f"{label} max_episode_steps={limit}"


def _named(factory: Any) -> str:
    module = getattr(factory, "__module__", None) or ""
    name = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return f"{module}:{name}" if module and not inspect.isbuiltin(factory) else name


def _version(
    gym: Any, identity: str, action_space: Any, frames_every: int | None, render_mode: Any
) -> str:
    """Adapter, Gymnasium and a digest of what the environment is made from: a resume on
    other code is refused unless declared (``declare_changes``)."""
    made_of = f"{identity}|{action_space!r}|{frames_every}|{render_mode}"
    digest = hashlib.sha256(made_of.encode()).hexdigest()[:12]
    return f"adapter {ADAPTER_VERSION}; gymnasium {gym.__version__}; env {digest}"
