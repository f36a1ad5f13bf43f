"""The mining engineer: proposes hooks by searching a small grammar over the failure packet.

Offline and deterministic, no model. Nothing here knows any particular environment: it reads
only what the packet shows — actions (named by their discriminating field, see
:mod:`envharness.optimizer.actions`), the predicates and state keys hooks can read, outcomes,
and which sessions passed.

**The grammar.** A rule is *condition → effect*. A condition is a conjunction of atoms: the
attempted action's name (``action["op"] == "open"``, or a free-text field's leading
words, optionally *not* followed by a longer prefix seen in passing sessions), a predicate's
value, a state key's value, "the same action as the last step", "the last step failed". An
effect is ``block_and_prompt`` (with a message naming what to do first), ``rewrite`` to an
admissible action, or a ``hint`` shown before the agent acts.

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
import keyword
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from envharness.optimizer.actions import (
    action_key,
    action_label,
    discriminating_field,
    first_word,
)
from envharness.optimizer.engineer import FailureExample, FailurePacket, FailureStep, Proposal

__all__ = [
    "Atom",
    "Grammar",
    "MiningEngineer",
    "Rule",
    "grammar_atoms",
    "mine_rules",
    "packet_steps",
    "render",
]

VERSION = "mining@1"
MAX_PREFIX_WORDS = 4
_ERROR_KEYS = ("error", "errors", "exception")
_FALSE_KEYS = ("ok", "success", "succeeded")
_CODE_KEYS = ("exit_code", "returncode", "exit_status")


# -- atoms ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Situation:
    """One step as a rule sees it: the step, the participant's previous attempt, the session."""

    step: FailureStep
    previous: FailureStep | None
    index: int


@dataclass(frozen=True, slots=True)
class Atom:
    """One condition. ``kind`` is one of ``field``, ``prefix``, ``not_prefix``, ``predicate``,
    ``state``, ``repeat``, ``after_error``."""

    kind: str
    name: str = ""
    value: Any = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}:{json.dumps(self.value, sort_keys=True)}"

    @property
    def on_action(self) -> bool:
        return self.kind in ("field", "prefix", "not_prefix", "repeat")

    @property
    def cost(self) -> int:
        return {"field": 0, "predicate": 0, "prefix": 1, "not_prefix": 1}.get(self.kind, 2)

    def holds(self, situation: _Situation) -> bool:
        step = situation.step
        action = step.action if isinstance(step.action, dict) else {}
        if self.kind == "field":
            return bool(action.get(self.name) == self.value)
        if self.kind in ("prefix", "not_prefix"):
            text = action.get(self.name)
            starts = isinstance(text, str) and _starts(text, str(self.value))
            return starts if self.kind == "prefix" else not starts
        if self.kind == "predicate":
            return step.predicates.get(self.name) is self.value
        if self.kind == "state":
            return bool(step.state.get(self.name) == self.value)
        previous = situation.previous
        if self.kind == "repeat":
            return previous is not None and action_key(previous.action) == action_key(step.action)
        if self.kind == "after_error":
            return previous is not None and previous.blocked is None and failed(previous.outcome)
        raise ValueError(f"unknown atom kind {self.kind!r}")

    def code(self) -> str:
        """The atom as a Python expression over ``ctx``, ``action`` and ``failed``."""
        if self.kind == "field":
            return f"action.get({self.name!r}) == {_literal(self.value)}"
        if self.kind in ("prefix", "not_prefix"):
            test = f"re.match({_prefix_pattern(str(self.value))!r}, {_text_name(self.name)})"
            return test if self.kind == "prefix" else f"not {test}"
        if self.kind == "predicate":
            return f"ctx.predicates.get({self.name!r}) is {self.value!r}"
        if self.kind == "state":
            return f"ctx.state.get({self.name!r}) == {_literal(self.value)}"
        if self.kind == "repeat":
            return "len(ctx.history) > 0 and ctx.history[-1].action == ctx.action"
        return "failed"

    def text(self) -> str:
        if self.kind == "field":
            return f"the action's {self.name} is {self.value!r}"
        if self.kind == "prefix":
            return f"the action's {self.name} starts with {self.value!r}"
        if self.kind == "not_prefix":
            return f"it does not start with {self.value!r}"
        if self.kind == "predicate":
            return f"{self.name} is {str(self.value).lower()}"
        if self.kind == "state":
            return f"state {self.name} is {self.value!r}"
        if self.kind == "repeat":
            return "it repeats the previous action"
        return "the previous action failed"


def _starts(text: str, prefix: str) -> bool:
    """Starts with ``prefix`` at a boundary (so ``rm`` does not match ``rmdir``): exactly what
    the generated hook code tests."""
    return re.match(_prefix_pattern(prefix), text) is not None


def _prefix_pattern(prefix: str) -> str:
    """The regular expression hook code uses for :func:`_starts` (a literal prefix, then a
    boundary)."""
    escaped = "".join("\\" + char if char in _REGEX_SPECIAL else char for char in prefix)
    return escaped + r"(?:\s|/|$)"


_REGEX_SPECIAL = frozenset(".^$*+?{}[]\\|()")


_RESERVED = frozenset({"ctx", "nb", "action", "failed", "last", "option", "new", "key", "re"})


def _text_name(field_name: str) -> str:
    """The local variable holding a free-text field's value in hook code."""
    usable = field_name.isidentifier() and field_name.isascii() and field_name not in _RESERVED
    if usable and not field_name.startswith("_") and not keyword.iskeyword(field_name):
        return field_name
    return "text"


def failed(outcome: Any) -> bool:
    """Whether an outcome says the action failed, by the common conventions (an ``error``
    field, ``ok``/``success`` false, a non-zero ``exit_code``)."""
    if not isinstance(outcome, dict):
        return False
    if any(outcome.get(key) for key in _ERROR_KEYS):
        return True
    if any(outcome.get(key) is False for key in _FALSE_KEYS):
        return True
    return any(outcome.get(key) not in (None, 0) for key in _CODE_KEYS)


_FAILED_CODE = (
    "    last = ctx.last_outcome\n"
    "    failed = isinstance(last, dict) and (\n"
    f"        any([last.get(key) for key in {_ERROR_KEYS!r}])\n"
    f"        or any([last.get(key) is False for key in {_FALSE_KEYS!r}])\n"
    f"        or any([last.get(key) not in (None, 0) for key in {_CODE_KEYS!r}])\n"
    "    )\n"
)


# -- rules ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Rule:
    """A condition, the evidence for it, and what to suggest instead (an action seen to help)."""

    atoms: tuple[Atom, ...]
    seed: str
    suggestion: Any = None
    ordering: bool = False
    distance: int = 1_000
    first_index: int = 1_000
    explained: int = 0
    changed: int = 0
    sessions: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return "&".join(sorted(atom.key for atom in self.atoms))

    @property
    def action_atoms(self) -> tuple[Atom, ...]:
        return tuple(atom for atom in self.atoms if atom.on_action)

    @property
    def group(self) -> str:
        """Rules about the same action compete in one group."""
        return "&".join(sorted(a.key for a in self.atoms if a.kind in ("field", "prefix")))

    def holds(self, situation: _Situation) -> bool:
        return all(atom.holds(situation) for atom in self.atoms)

    def rank(self) -> tuple[Any, ...]:
        return (
            self.changed > 0,
            -self.explained,
            self.changed,
            not self.ordering,
            sum(atom.cost for atom in self.atoms),
            len(self.atoms),
            self.distance,
            self.first_index,
            self.key,
        )

    def describe(self) -> str:
        return " and ".join(atom.text() for atom in _reading(self.atoms))


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
    situations = {id(s): list(_situations(s.example.steps)) for s in sessions}
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


def packet_steps(packet: FailurePacket) -> list[FailureStep]:
    """Every step the packet shows: its failure clusters' examples, then its passing sessions."""
    examples = [cluster.example for cluster in packet.clusters] + list(packet.passing)
    return [step for example in examples for step in example.steps]


class Grammar(NamedTuple):
    """The grammar's atoms over a packet, unranked: what a rule may test about the attempted
    action (``actions``), what it may test about the situation (``conditions``: state and
    predicate values, repetition, a failed previous step), and the action's naming field."""

    actions: list[Atom]
    conditions: list[Atom]
    field: str | None


def grammar_atoms(packet: FailurePacket) -> Grammar:
    """Every atom the grammar offers over ``packet``, with no ranking and no evidence: the
    space a search baseline samples from (``research/baselines.py``)."""
    steps = packet_steps(packet)
    name_field = discriminating_field(step.action for step in steps)
    action_atoms: dict[str, Atom] = {}
    conditions: dict[str, Atom] = {}
    for step in steps:
        action = step.action if isinstance(step.action, dict) else {}
        value = action.get(name_field) if name_field is not None else None
        if isinstance(value, str):
            word = first_word(value)
            kind = "field" if word == value else "prefix"
            atom = Atom(kind, name_field or "", value if kind == "field" else word)
            action_atoms.setdefault(atom.key, atom)
        for name, flag in step.state.items():
            if isinstance(flag, str | int | float | bool):
                atom = Atom("state", name, flag)
                conditions.setdefault(atom.key, atom)
    for name in packet.predicate_keys:
        for flag in (True, False):
            atom = Atom("predicate", name, flag)
            conditions.setdefault(atom.key, atom)
    for extra in (Atom("repeat"), Atom("after_error")):
        conditions.setdefault(extra.key, extra)
    return Grammar(list(action_atoms.values()), list(conditions.values()), name_field)


def _situations(steps: Sequence[FailureStep]) -> Iterable[_Situation]:
    last: dict[str, FailureStep] = {}
    for index, step in enumerate(steps):
        yield _Situation(step=step, previous=last.get(step.participant), index=index)
        last[step.participant] = step


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


def _flip(chain: Sequence[_Situation], position: int, name: str, value: Any) -> int | None:
    """The index of the step whose execution changed predicate ``name`` away from ``value``
    (the step *before* the first one that sees the new value), or ``None``."""
    for later in range(position + 1, len(chain)):
        seen = chain[later].step.predicates.get(name)
        if seen is not None and seen is not value:
            return later - 1
    return None


def _passing_choices(
    sessions: Sequence[_Session],
    situations: dict[int, list[_Situation]],
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
    situations: dict[int, list[_Situation]],
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
    situations: dict[int, list[_Situation]],
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
            if all(_starts(t, candidate) for t in touched) and not any(
                _starts(t, candidate) for t in failing_texts
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
    rule: Rule, sessions: Sequence[_Session], situations: dict[int, list[_Situation]]
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


# -- writing the patch ---------------------------------------------------------------------------


def render(rule: Rule, effect: str, name_field: str | None, packet: FailurePacket) -> str:
    """The answer in the patch protocol: ``<think>evidence</think><patch>[...]</patch>``."""
    suggestion = rule.suggestion
    what = action_label(suggestion, name_field) if suggestion is not None else None
    message = _message(rule, what)
    if effect == "hint":
        hook, code = "make_pre_hint", _hint_code(rule, message)
    else:
        hook = "on_before_action"
        code = _before_action_code(rule, effect, message, suggestion, name_field)
    think = (
        f"Seed: {rule.seed}. When {rule.describe()}, the agent failed: this rule would have "
        f"intervened in {rule.explained} failed session(s) "
        f"({', '.join(sorted(set(rule.examples))[:5])}) and changed {rule.changed} step(s) of "
        f"passing sessions."
        + (" A later step established it, so it is a precondition." if rule.ordering else "")
        + (f" Suggest {what} instead." if what else "")
        + f" Effect: {effect}."
    )
    patch = [{"op": "add_code_hook", "hook": hook, "code": code, "description": message[:200]}]
    return f"<think>{think}</think>\n<patch>{json.dumps(patch, indent=1)}</patch>"


def _message(rule: Rule, what: str | None) -> str:
    precondition = next((a for a in rule.atoms if a.kind == "predicate" and rule.ordering), None)
    action = " and ".join(a.text() for a in _reading(rule.action_atoms)) or "this"
    if any(a.kind == "repeat" for a in rule.atoms):
        text = "You just did exactly this and it did not help; do something different"
    elif precondition is not None:
        wanted = "true" if precondition.value is False else "false"
        text = f"Not yet: first make {precondition.name} {wanted}"
    elif any(a.kind == "after_error" for a in rule.atoms):
        text = "The previous action failed; recover from the failure before this"
    else:
        text = f"This action is not allowed here ({action})"
    return text + (f" (for example: {what})." if what else ".")


_READING_ORDER = ("field", "prefix", "not_prefix", "repeat", "after_error", "predicate", "state")


def _reading(atoms: Sequence[Atom]) -> list[Atom]:
    return sorted(atoms, key=lambda a: (_READING_ORDER.index(a.kind), a.key))


def _conditions(atoms: Sequence[Atom]) -> str:
    return " and ".join(atom.code() for atom in _reading(atoms))


def _prelude(atoms: Sequence[Atom]) -> list[str]:
    """Locals the conditions read: free-text fields, and whether the last step failed."""
    lines = []
    for name in sorted({a.name for a in atoms if a.kind in ("prefix", "not_prefix")}):
        lines.append(f"    {_text_name(name)} = str(action.get({name!r}, ''))")
    if any(a.kind == "after_error" for a in atoms):
        lines.append(_FAILED_CODE.rstrip("\n"))
    return lines


def _before_action_code(
    rule: Rule, effect: str, message: str, suggestion: Any, name_field: str | None
) -> str:
    lines = [
        "def on_before_action(ctx, nb):",
        "    action = ctx.action if isinstance(ctx.action, dict) else {}",
    ]
    lines += _prelude(rule.atoms)
    lines.append(f"    if not ({_conditions(rule.atoms)}):")
    lines.append("        return None")
    if effect == "rewrite" and suggestion is not None:
        label = action_label(suggestion, name_field)
        if isinstance(suggestion, dict) and name_field is not None:
            wanted = suggestion.get(name_field)
            lines += [
                "    for option in ctx.admissible or []:",
                f"        if isinstance(option, dict) and option.get({name_field!r}) == "
                f"{_literal(wanted)}:",
                f"            return rewrite(option, {message!r})",
                "    if ctx.admissible is None:",
                f"        new = {_literal(suggestion)}",
                "        for key in action:",
                f"            if key in new and key != {name_field!r}:",
                "                new[key] = action[key]",
                f"        return rewrite(new, {message!r})",
            ]
        else:
            lines.append(f"    return rewrite({_literal(suggestion)}, {f'{label}: ' + message!r})")
            return "\n".join(lines) + "\n"
    lines.append(f"    return block_and_prompt({message!r})")
    return "\n".join(lines) + "\n"


def _hint_code(rule: Rule, message: str) -> str:
    conditions = [a for a in rule.atoms if not a.on_action]
    lines = ["def make_pre_hint(ctx, nb):"]
    lines += _prelude(conditions)
    if conditions:
        lines.append(f"    if not ({_conditions(conditions)}):")
        lines.append("        return None")
    lines.append(f"    return hint({message!r})")
    return "\n".join(lines) + "\n"


def _literal(value: Any) -> str:
    """A Python literal for a JSON value (``true`` → ``True``, ``null`` → ``None``)."""
    if isinstance(value, dict):
        inner = ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)
