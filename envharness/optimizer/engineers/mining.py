"""The mining engineer: proposes hooks by searching the mining grammar over the failure packet.

Offline and deterministic, no model. Nothing here knows any particular environment: it reads
only what the packet shows — actions, the predicates and state keys hooks can read, outcomes, and
which sessions passed. The rules it searches, and the hook code they are written as, are
:mod:`envharness.optimizer.engineers.grammar`'s.

**The seeds** — where conditions come from:

- *ordering*: an action taken while a predicate had a value that a later step of the same
  session changed (the agent established the precondition, too late);
- *preceded failure*: an action taken in a failed session while some predicate held;
- *contrast*: in the same predicate situation, passing sessions chose another action;
- *repetition*: the same action again right after it changed nothing or failed;
- *recovery*: what passing sessions did after a failed step, where failing ones did not.

**The ranking.** Each rule is replayed over the packet's steps: *explained* counts the failed
sessions where it would have intervened, *changed* the passing steps it would have touched.
Rules that change no passing step come first, then by failures explained, then those with
ordering evidence, simpler ones, and earlier interventions. Proposals cover different actions
before different variants of one, and every one is then proven by reruns like any other
engineer's (this ranking only decides what is worth measuring).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from envharness.optimizer.engineers.actions import action_label, discriminating_field
from envharness.optimizer.engineers.contract import (
    FailureExample,
    FailurePacket,
    FailureStep,
    Proposal,
)
from envharness.optimizer.engineers.grammar import (
    Atom,
    Rule,
    Situation,
    packet_steps,
    render,
    situations_of,
    starts_with,
)

__all__ = ["MiningEngineer", "mine_rules"]

VERSION = "mining@1"
MAX_PREFIX_WORDS = 4


# -- the search ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Session:
    example: FailureExample
    weight: int
    failing: bool


def mine_rules(packet: FailurePacket) -> tuple[list[Rule], str | None]:
    """Every rule the seeds suggest, scored and ranked; and the discriminating field."""
    sessions = [
        _Session(cluster.example, max(1, len(cluster.sessions)), True)
        for cluster in packet.clusters
    ] + [_Session(example, 1, False) for example in packet.passing]
    steps = packet_steps(packet)
    name_field = discriminating_field(step.action for step in steps)
    situations = {id(s): list(situations_of(s.example.steps)) for s in sessions}
    rules: dict[str, Rule] = {}

    def add(atoms: Iterable[Atom], seed: str, **evidence: Any) -> None:
        atoms = tuple(sorted(set(atoms), key=lambda a: a.key))
        if not atoms:
            return
        rule = Rule(atoms=atoms, seed=seed)
        found = rules.setdefault(rule.key, rule)
        suggestion = evidence.get("suggestion")
        if suggestion is not None and found.suggestion is None:
            found.suggestion = suggestion
        if evidence.get("ordering"):
            if not found.ordering or evidence["distance"] < found.distance:
                found.distance = evidence["distance"]
            found.ordering = True
            found.seed = seed
        found.first_index = min(found.first_index, evidence.get("index", 1_000))

    passing_by_situation = _passing_choices(sessions, situations, name_field)
    recovery = _recoveries(sessions, situations, name_field)
    state_atoms = _state_atoms(steps)
    for session in sessions:
        if not session.failing:
            continue
        chain = situations[id(session)]
        for position, situation in enumerate(chain):
            step = situation.step
            if step.blocked is not None:
                continue
            for action_atom in _action_atoms(step, name_field):
                label = action_label(step.action, name_field)
                add([action_atom], "preceded failure", index=situation.index)
                for name, value in step.predicates.items():
                    atom = Atom("predicate", name, value)
                    flip = _flip(chain, position, name, value)
                    if flip is not None and flip > position:
                        enabling = chain[flip].step.action
                        add(
                            [action_atom, atom],
                            "ordering",
                            ordering=True,
                            distance=flip - position,
                            index=situation.index,
                            suggestion=enabling,
                        )
                    else:
                        add([action_atom, atom], "preceded failure", index=situation.index)
                    other = passing_by_situation.get((name, value), {})
                    chosen = [a for lab, a in other.items() if lab != label]
                    if chosen and label not in other:
                        add([action_atom, atom], "contrast", suggestion=chosen[0])
                for atom in state_atoms:
                    if atom.holds(situation):
                        add([action_atom, atom], "preceded failure", index=situation.index)
                if situation.previous is not None:
                    if Atom("repeat").holds(situation):
                        add([Atom("repeat")], "repetition", index=situation.index)
                        add([Atom("repeat"), action_atom], "repetition", index=situation.index)
                    if Atom("after_error").holds(situation):
                        add(
                            [Atom("after_error"), action_atom],
                            "recovery",
                            index=situation.index,
                            suggestion=recovery.get(label),
                        )
                        if Atom("repeat").holds(situation):
                            add(
                                [Atom("after_error"), Atom("repeat")],
                                "repetition",
                                index=situation.index,
                                suggestion=next(iter(recovery.values()), None),
                            )
    _add_negations(rules, sessions, situations)
    for rule in rules.values():
        _score(rule, sessions, situations)
    ranked = sorted((r for r in rules.values() if r.explained > 0), key=Rule.rank)
    return ranked, name_field


def _action_atoms(step: FailureStep, name_field: str | None) -> list[Atom]:
    action = step.action
    if not isinstance(action, dict) or name_field is None:
        return []
    value = action.get(name_field)
    if isinstance(value, str):
        words = value.split()
        if len(words) > 1:
            return [Atom("prefix", name_field, words[0])]
        return [Atom("field", name_field, value)]
    if isinstance(value, bool | int) and not isinstance(value, float):
        return [Atom("field", name_field, value)]
    return []


def _flip(chain: Sequence[Situation], position: int, name: str, value: Any) -> int | None:
    """The index of the step whose execution changed predicate ``name`` away from ``value``
    (the step *before* the first one that sees the new value), or ``None``."""
    for later in range(position + 1, len(chain)):
        seen = chain[later].step.predicates.get(name)
        if seen is not None and seen is not value:
            return later - 1
    return None


def _passing_choices(
    sessions: Sequence[_Session],
    situations: dict[int, list[Situation]],
    name_field: str | None,
) -> dict[tuple[str, Any], dict[str, Any]]:
    """For each (predicate, value): the actions passing sessions took while it held."""
    found: dict[tuple[str, Any], dict[str, Any]] = {}
    for session in sessions:
        if session.failing:
            continue
        for situation in situations[id(session)]:
            step = situation.step
            if step.blocked is not None:
                continue
            label = action_label(step.action, name_field)
            for name, value in step.predicates.items():
                found.setdefault((name, value), {}).setdefault(label, step.action)
    return found


def _recoveries(
    sessions: Sequence[_Session],
    situations: dict[int, list[Situation]],
    name_field: str | None,
) -> dict[str, Any]:
    """What passing sessions did right after a failed step, keyed by what failing ones did."""
    passing_next: list[Any] = []
    for session in sessions:
        if session.failing:
            continue
        for situation in situations[id(session)]:
            if Atom("after_error").holds(situation):
                passing_next.append(situation.step.action)
    if not passing_next:
        return {}
    recovery: dict[str, Any] = {}
    for session in sessions:
        if not session.failing:
            continue
        for situation in situations[id(session)]:
            if Atom("after_error").holds(situation):
                label = action_label(situation.step.action, name_field)
                options = [a for a in passing_next if action_label(a, name_field) != label]
                if options:
                    recovery.setdefault(label, options[0])
    return recovery


def _state_atoms(steps: Sequence[FailureStep]) -> list[Atom]:
    """``state[key] == value`` for scalar keys with a few distinct values (not constants)."""
    values: dict[str, set[str]] = {}
    raw: dict[tuple[str, str], Any] = {}
    for step in steps:
        for key, value in step.state.items():
            if isinstance(value, str | bool | int) and not isinstance(value, float):
                encoded = json.dumps(value)
                values.setdefault(key, set()).add(encoded)
                raw[(key, encoded)] = value
    atoms: list[Atom] = []
    for key, seen in sorted(values.items()):
        if 2 <= len(seen) <= 6:
            atoms.extend(Atom("state", key, raw[(key, encoded)]) for encoded in sorted(seen))
    return atoms


def _prefixes(text: str) -> list[str]:
    """Leading words, and leading path components inside them, shortest first."""
    found: list[str] = []
    words = text.split()
    for count in range(1, min(len(words), MAX_PREFIX_WORDS) + 1):
        head = " ".join(words[: count - 1])
        word = words[count - 1]
        cut = 0
        while True:
            cut = word.find("/", cut + 1)
            if cut < 0:
                break
            found.append((head + " " if head else "") + word[:cut])
        found.append(" ".join(words[:count]))
    return [p for p in dict.fromkeys(found) if p]


def _add_negations(
    rules: dict[str, Rule],
    sessions: Sequence[_Session],
    situations: dict[int, list[Situation]],
) -> None:
    """For a rule on a free-text prefix that would touch passing steps: the same rule *unless*
    the text continues with a prefix those passing steps share and the failing ones do not."""
    for rule in list(rules.values()):
        prefix = next((a for a in rule.atoms if a.kind == "prefix"), None)
        if prefix is None:
            continue
        touched: list[str] = []
        failing_texts: list[str] = []
        for session in sessions:
            for situation in situations[id(session)]:
                if situation.step.blocked is not None or not rule.holds(situation):
                    continue
                action = situation.step.action
                text = action.get(prefix.name) if isinstance(action, dict) else None
                if isinstance(text, str):
                    (failing_texts if session.failing else touched).append(text)
        if not touched or not failing_texts:
            continue
        for candidate in _prefixes(touched[0]):
            if len(candidate) <= len(str(prefix.value)):
                continue
            if all(starts_with(t, candidate) for t in touched) and not any(
                starts_with(t, candidate) for t in failing_texts
            ):
                negated = Rule(
                    atoms=tuple(
                        sorted(
                            (*rule.atoms, Atom("not_prefix", prefix.name, candidate)),
                            key=lambda a: a.key,
                        )
                    ),
                    seed="contrast",
                    suggestion=rule.suggestion,
                    ordering=rule.ordering,
                    distance=rule.distance,
                    first_index=rule.first_index,
                )
                rules.setdefault(negated.key, negated)
                break


def _score(
    rule: Rule, sessions: Sequence[_Session], situations: dict[int, list[Situation]]
) -> None:
    for session in sessions:
        fired = False
        for situation in situations[id(session)]:
            if situation.step.blocked is not None or not rule.holds(situation):
                continue
            if session.failing:
                fired = True
            else:
                rule.changed += 1
        if fired:
            rule.explained += session.weight
            rule.sessions += 1
            rule.examples.append(session.example.scenario_id)


# -- proposals -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    rule: Rule
    effect: str  # "block", "rewrite" or "hint"


def _ordered(rules: Sequence[Rule]) -> list[_Candidate]:
    """Blocks first, covering different actions (groups) before variants of one; within a
    group, the best rule and then its simplest form; then rewrites; then hints."""
    groups: dict[str, list[Rule]] = {}
    for rule in rules:
        groups.setdefault(rule.group, []).append(rule)
    for members in groups.values():
        simplest = min(
            (r for r in members if r.changed == 0),
            key=lambda r: (len(r.atoms), r.rank()),
            default=None,
        )
        if simplest is not None and simplest is not members[0]:
            members.remove(simplest)
            members.insert(1, simplest)
    rounds: list[Rule] = []
    depth = 0
    while any(depth < len(members) for members in groups.values()):
        rounds.extend(members[depth] for members in groups.values() if depth < len(members))
        depth += 1
    blocks = [_Candidate(rule, "block") for rule in rounds if rule.action_atoms]
    rewrites = [
        _Candidate(rule, "rewrite")
        for rule in rounds
        if rule.action_atoms and rule.suggestion is not None
    ]
    hints = [
        _Candidate(rule, "hint")
        for rule in rounds
        if rule.suggestion is not None
        and any(not a.on_action for a in rule.atoms)
        and not any(a.kind == "repeat" for a in rule.atoms)
    ]
    two_rounds = sum(min(2, len(members)) for members in groups.values())
    return blocks[:two_rounds] + rewrites + blocks[two_rounds:] + hints


class MiningEngineer:
    """Mines rules from the packet and writes them as patches (see the module doc).

    ``max_rules`` bounds how many rules are kept after ranking; ``seed`` only breaks exact ties.
    """

    def __init__(self, *, name: str = "mining", max_rules: int = 64) -> None:
        self._name = name
        self._max_rules = max_rules

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return VERSION

    async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
        return self.answers(packet, count, seed=seed)

    def answers(self, packet: FailurePacket, count: int, *, seed: int = 0) -> list[Proposal]:
        """The proposals, computed synchronously (the search is small and pure)."""
        rules, name_field = mine_rules(packet)
        rules = rules[: self._max_rules]
        _break_ties(rules, seed)
        proposals: list[Proposal] = []
        seen: set[str] = set()
        forbidden = [term.lower() for term in packet.forbidden_terms]
        for candidate in _ordered(rules):
            if len(proposals) >= count:
                break
            text = render(candidate.rule, candidate.effect, name_field, packet)
            if text in seen or any(term in text.lower() for term in forbidden):
                continue
            seen.add(text)
            proposals.append(Proposal(engineer=self._name, text=text))
        return proposals


def _break_ties(rules: list[Rule], seed: int) -> None:
    """Shuffle only rules whose rank is equal in everything but their key."""
    if seed == 0:
        return
    shuffler = random.Random(seed)
    start = 0
    while start < len(rules):
        end = start + 1
        while end < len(rules) and rules[end].rank()[:-1] == rules[start].rank()[:-1]:
            end += 1
        block = rules[start:end]
        shuffler.shuffle(block)
        rules[start:end] = block
        start = end
