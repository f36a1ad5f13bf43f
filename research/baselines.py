"""Baseline and ablated engineers: what the optimizer does without its key ingredients.

- :class:`RandomPatchEngineer` samples hooks uniformly from the mining engineer's grammar (the
  same atoms over the packet's actions, predicates and state, ``grammar.grammar_atoms``; the same
  effects block / rewrite / hint, written by the same code generator, ``grammar.render``), with
  no ranking and no evidence: any gain it makes comes from the optimizer's reruns and gates
  alone. Its patches are valid by construction, so it measures search, not syntax.
- :class:`WithoutHooks` wraps an engineer and removes every operation on the given hooks from
  its answers (no pre-action hook: ``{"on_before_action"}``; no post-step hook:
  ``{"on_post_step"}``); an answer left with no operation is sent without a patch (invalid).
- :class:`TaskOnly` wraps an engineer and shows it only the environment, the task text and the
  hook names — no failure clusters, no passing contrasts, no state or predicate keys.

The other ablations (K=1, no regression guard, no held-out gate) are optimizer settings; see
:mod:`research.ablations`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["RandomPatchEngineer", "TaskOnly", "WithoutHooks"]

_PATCH = re.compile(r"<patch>(.*?)</patch>", re.DOTALL)


class RandomPatchEngineer:
    """Uniform samples from the hook grammar (see the module doc); ``seed`` varies the draw."""

    def __init__(self, seed: int = 0, *, name: str = "random") -> None:
        self._seed = seed
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return "random-patch@1"

    async def propose(self, packet: Any, count: int, *, seed: int) -> list[Any]:
        return self.answers(packet, count, seed=seed)

    def answers(self, packet: Any, count: int, *, seed: int = 0) -> list[Any]:
        from envharness.optimizer import Proposal
        from envharness.optimizer.engineers.grammar import Rule, grammar_atoms, packet_steps, render

        rng = random.Random(f"{self._seed}:{seed}")
        actions, conditions, field = grammar_atoms(packet)
        examples = [step.action for step in packet_steps(packet) if isinstance(step.action, dict)]
        if not actions and not conditions:
            return []
        forbidden = [term.lower() for term in packet.forbidden_terms]
        proposals: list[Any] = []
        for _ in range(count * 20):
            if len(proposals) >= count:
                break
            effect = rng.choice(("block", "rewrite", "hint"))
            atoms: list[Any] = []
            if effect != "hint" and actions:
                atoms.append(rng.choice(actions))
            if conditions and (effect == "hint" or rng.random() < 0.5):
                atoms.append(rng.choice(conditions))
            if not atoms or (effect != "hint" and not any(a.on_action for a in atoms)):
                effect = "hint" if any(not a.on_action for a in atoms) else "block"
            if effect == "hint" and not any(not a.on_action for a in atoms):
                continue
            suggestion = rng.choice(examples) if examples and effect != "block" else None
            if effect == "rewrite" and suggestion is None:
                effect = "block"
            rule = Rule(atoms=tuple(atoms), seed="random draw", suggestion=suggestion)
            if effect != "hint" and rule.family_atom is not None and rng.random() < 0.5:
                effect = "choose"  # a fact family's rule may also rewrite to the marked option
            text = render(rule, effect, field, packet)
            if any(term in text.lower() for term in forbidden):
                continue
            proposals.append(Proposal(engineer=self._name, text=text))
        return proposals


class WithoutHooks:
    """An engineer whose answers lose every operation on ``dropped`` hooks."""

    def __init__(self, engineer: Any, dropped: Iterable[str]) -> None:
        self._engineer = engineer
        self._dropped = frozenset(dropped)

    @property
    def name(self) -> str:
        return str(self._engineer.name)

    @property
    def version(self) -> str:
        return f"{self._engineer.version}-without-{'-'.join(sorted(self._dropped))}"

    async def propose(self, packet: Any, count: int, *, seed: int) -> list[Any]:
        import msgspec

        proposals = await self._engineer.propose(packet, count, seed=seed)
        return [msgspec.structs.replace(p, text=self.strip(p.text)) for p in proposals]

    def strip(self, text: str) -> str:
        match = _PATCH.search(text)
        if match is None:
            return text
        try:
            ops = json.loads(match.group(1))
        except json.JSONDecodeError:
            return text
        listed = ops.get("ops", []) if isinstance(ops, dict) and "op" not in ops else ops
        listed = listed if isinstance(listed, list) else [listed]
        kept = [
            op for op in listed if not (isinstance(op, dict) and op.get("hook") in self._dropped)
        ]
        if not kept:
            return text[: match.start()] + "(no patch: every hook it used is ablated)"
        return text[: match.start()] + f"<patch>{json.dumps(kept)}</patch>" + text[match.end() :]


class TaskOnly:
    """An engineer shown only the environment, the task and the hook names."""

    def __init__(self, engineer: Any) -> None:
        self._engineer = engineer

    @property
    def name(self) -> str:
        return str(self._engineer.name)

    @property
    def version(self) -> str:
        return f"{self._engineer.version}-task-only"

    async def propose(self, packet: Any, count: int, *, seed: int) -> list[Any]:
        from envharness.optimizer import FailurePacket

        task = packet.task or next(
            (c.example.task for c in packet.clusters if c.example.task), None
        )
        bare = FailurePacket(
            environment=packet.environment,
            hooks=packet.hooks,
            task=task,
            current_patch=packet.current_patch,
            forbidden_terms=packet.forbidden_terms,
        )
        result: list[Any] = await self._engineer.propose(bare, count, seed=seed)
        return result
