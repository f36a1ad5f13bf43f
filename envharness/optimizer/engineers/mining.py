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
- *recovery*: what passing sessions did after a failed step, where failing ones did not;
- *family*: a failing step took an argument that a fact family did not mark (or marked, or
  ranked below another option) while another admissible option was marked (unmarked, ranked
  first): the rule names the family, and its rewrite *chooses* the argument by it.

Each of the first three is tried with the action's name alone and with the name and one of
its argument fields (an integer or enum value; a contrast then suggests the argument passing
sessions took).

**The ranking.** Each rule is replayed over the packet's steps: *explained* counts the failed
sessions where it would have intervened, *changed* the passing steps it would have touched.
Rules that change no passing step come first, then by failures explained, then those with
ordering evidence, simpler ones, and earlier interventions. Proposals cover different actions
before different variants of one, and every one is then proven by reruns like any other
engineer's (this ranking only decides what is worth measuring). A rule that some failing step
could not have escaped by any other option (its condition does not depend on what the agent
chooses) is never proposed as a block — the veto would repeat until the block limit — only as
a rewrite.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from envharness.optimizer.engineers.actions import (
    action_key,
    action_label,
    discriminating_field,
    distinct,
)
from envharness.optimizer.engineers.contract import (
    FailureExample,
    FailurePacket,
    FailureStep,
    Proposal,
)
from envharness.optimizer.engineers.families import Family
from envharness.optimizer.engineers.grammar import (
    Atom,
    Rule,
    Situation,
    alternatives,
    packet_arguments,
    packet_families,
    packet_steps,
    ranked_first,
    render,
    situations_of,
    starts_with,
)

__all__ = ["MiningEngineer", "mine_rules"]

VERSION = "mining@2"
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
    argument_values = packet_arguments(packet, name_field)
    arguments = list(argument_values)
    families = packet_families(packet, name_field, argument_values)
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
    passing_arguments = _passing_choices(sessions, situations, name_field, arguments)
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
            for family in families:
                _family_seeds(family, situation, name_field, add)
            for condition in _action_conditions(step, name_field, arguments):
                label = _label(step.action, name_field, arguments if len(condition) > 1 else ())
                choices = passing_arguments if len(condition) > 1 else passing_by_situation
                add(condition, "preceded failure", index=situation.index)
                for name, value in step.predicates.items():
                    atom = Atom("predicate", name, value)
                    flip = _flip(chain, position, name, value)
                    if flip is not None and flip > position:
                        enabling = chain[flip].step.action
                        add(
                            [*condition, atom],
                            "ordering",
                            ordering=True,
                            distance=flip - position,
                            index=situation.index,
                            suggestion=enabling,
                        )
                    else:
                        add([*condition, atom], "preceded failure", index=situation.index)
                    other = choices.get((name, value), {})
                    chosen = [a for lab, a in other.items() if lab != label]
                    # an argument contrast suggests the same action with another argument
                    chosen.sort(
                        key=lambda a: _label(a, name_field) != _label(step.action, name_field)
                    )
                    if chosen and label not in other:
                        add([*condition, atom], "contrast", suggestion=chosen[0])
                for atom in state_atoms:
                    if atom.holds(situation):
                        add([*condition, atom], "preceded failure", index=situation.index)
                if len(condition) > 1:
                    continue
                action_atom = condition[0]
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
    seen = distinct([step.action for step in steps])
    for rule in ranked:
        rule.escapable = _escapable(rule, sessions, situations, seen)
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


def _action_conditions(
    step: FailureStep, name_field: str | None, arguments: Sequence[str]
) -> list[tuple[Atom, ...]]:
    """What a rule may say about the attempted action: its name, and its name with one of its
    argument fields."""
    named = _action_atoms(step, name_field)
    if not named or not isinstance(step.action, dict):
        return [(atom,) for atom in named]
    conditions: list[tuple[Atom, ...]] = [(named[0],)]
    for argument in arguments:
        if argument != name_field and argument in step.action:
            conditions.append((named[0], Atom("field", argument, step.action[argument])))
    return conditions


def _label(action: Any, name_field: str | None, arguments: Sequence[str] = ()) -> str:
    """The action's name, with its argument fields' values when ``arguments`` are given."""
    label = action_label(action, name_field)
    if not arguments or not isinstance(action, dict):
        return label
    shown = {key: action[key] for key in arguments if key in action and key != name_field}
    return label + (json.dumps(shown, sort_keys=True) if shown else "")


def _family_seeds(
    family: Family, situation: Situation, name_field: str | None, add: Callable[..., None]
) -> None:
    """Rules over ``family`` for one failing step: the argument it took was not marked while
    another option was (or marked while another was not, or ranked below another)."""
    step = situation.step
    action = step.action
    if not isinstance(action, dict) or family.field not in action:
        return
    named = [] if family.field == name_field else _action_atoms(step, name_field)[:1]
    options = [o.get(family.field) for o in alternatives(step, family)]
    marked = family.marks(step, action.get(family.field))
    for flag in (False, True):
        if marked is flag and any(family.marks(step, o) is (not flag) for o in options):
            atom = Atom("family", family.key, flag, family)
            add([*named, atom], "family", index=situation.index)
    if family.numeric:
        for order in ("max", "min"):
            if not ranked_first(step, family, order):
                atom = Atom("not_best", family.key, order, family)
                add([*named, atom], "family", index=situation.index)


def _escapable(
    rule: Rule,
    sessions: Sequence[_Session],
    situations: dict[int, list[Situation]],
    seen: Sequence[Any],
) -> bool:
    """Whether at every failing step the rule fired on, another option (an admissible one, or
    an action seen in the packet) would not have fired it."""
    for session in sessions:
        if not session.failing:
            continue
        for situation in situations[id(session)]:
            step = situation.step
            if step.blocked is not None or not rule.holds(situation):
                continue
            options = step.admissible if step.admissible is not None else seen
            attempted = action_key(step.action)
            if not any(
                action_key(option) != attempted
                and not rule.holds(
                    Situation(
                        step=msgspec.structs.replace(step, action=option),
                        previous=situation.previous,
                        index=situation.index,
                    )
                )
                for option in options
            ):
                return False
    return True


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
    arguments: Sequence[str] = (),
) -> dict[tuple[str, Any], dict[str, Any]]:
    """For each (predicate, value): the actions passing sessions took while it held, by name
    (and argument values, when ``arguments`` are given)."""
    found: dict[tuple[str, Any], dict[str, Any]] = {}
    for session in sessions:
        if session.failing:
            continue
        for situation in situations[id(session)]:
            step = situation.step
            if step.blocked is not None:
                continue
            label = _label(step.action, name_field, arguments)
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
    effect: str  # "block", "choose", "rewrite" or "hint"


def _ordered(rules: Sequence[Rule]) -> list[_Candidate]:
    """Blocks first, covering different actions (groups) before variants of one; within a
    group, the best rule and then its simplest form; each rule over a fact family followed by
    its ``choose`` rewrite; then rewrites; then hints. Rules no option escapes are never
    blocks."""
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
    blocks: list[list[_Candidate]] = []
    for rule in rounds:
        own = [_Candidate(rule, "block")] if rule.action_atoms and rule.escapable else []
        blocks.append(own + ([_Candidate(rule, "choose")] if rule.choice is not None else []))
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
    first = [candidate for own in blocks[:two_rounds] for candidate in own]
    later = [candidate for own in blocks[two_rounds:] for candidate in own]
    return first + rewrites + later + hints


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
