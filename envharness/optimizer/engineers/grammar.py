"""The mining grammar: what a rule is, what it tests, and the hook code it is written as.

Nothing here knows any particular environment: a rule reads only what a failure packet shows —
actions (named by their discriminating field, see :mod:`envharness.optimizer.engineers.actions`),
the predicates and state keys hooks can read, and outcomes.

**Atoms and rules.** A rule is *condition → effect*. A condition is a conjunction of atoms
(:class:`Atom`): the attempted action's name (``action["op"] == "open"``, or a free-text
field's leading words, optionally *not* followed by a longer prefix seen in passing sessions),
one of its argument fields (an integer or enum value: ``action["cell"] == 3``), whether a fact
family marks its argument (``lit_<cell>`` is false for the attempted cell; see
:mod:`envharness.optimizer.engineers.families`) or ranks it below another admissible option, a
predicate's value, a state key's value, "the same action as the last step", "the last step
failed". An atom is tested on a :class:`Situation` (a step, the participant's previous attempt)
exactly as the generated hook code tests it. A :class:`Rule` carries the evidence the search
(:mod:`envharness.optimizer.engineers.mining`) gathered for it and its rank.

**The space.** :func:`grammar_atoms` lists every atom the grammar offers over a packet, unranked:
what a search baseline samples from (``research/baselines.py``).

**Writing the patch.** :func:`render` writes a rule with an effect — ``block_and_prompt`` (with
a message naming what to do first), ``rewrite`` to an admissible action (matched on its name and
argument fields), ``choose`` (rewrite to the option that differs only in the family's argument
and that the family marks, does not mark, or ranks first, as the rule's family atom says; or
let the action through when there is none), or a ``hint`` shown before the agent acts — as an
answer in the patch protocol.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from envharness.optimizer.engineers.actions import (
    action_key,
    action_label,
    discriminating_field,
    first_word,
)
from envharness.optimizer.engineers.contract import FailurePacket, FailureStep
from envharness.optimizer.engineers.families import (
    Family,
    argument_fields,
    discover_families,
    is_integer,
)

__all__ = [
    "Atom",
    "Grammar",
    "Rule",
    "Situation",
    "failed",
    "alternatives",
    "grammar_atoms",
    "packet_sessions",
    "packet_steps",
    "render",
    "situations_of",
    "starts_with",
]

_ERROR_KEYS = ("error", "errors", "exception")
_FALSE_KEYS = ("ok", "success", "succeeded")
_CODE_KEYS = ("exit_code", "returncode", "exit_status")


# -- atoms ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Situation:
    """One step as a rule sees it: the step, the participant's previous attempt, the session."""

    step: FailureStep
    previous: FailureStep | None
    index: int


@dataclass(frozen=True, slots=True)
class Atom:
    """One condition. ``kind`` is one of ``field``, ``prefix``, ``not_prefix``, ``predicate``,
    ``state``, ``repeat``, ``after_error``, and, over a ``family`` (``name`` is its key):
    ``family`` (the family marks the attempted argument: ``value`` true, or does not: false)
    and ``not_best`` (another option is ranked higher, ``value`` ``"max"``, or lower, ``"min"``,
    by the family)."""

    kind: str
    name: str = ""
    value: Any = None
    family: Family | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}:{json.dumps(self.value, sort_keys=True)}"

    @property
    def on_action(self) -> bool:
        return self.kind in ("field", "prefix", "not_prefix", "repeat", "family", "not_best")

    @property
    def cost(self) -> int:
        return {"field": 0, "predicate": 0, "prefix": 1, "not_prefix": 1}.get(self.kind, 2)

    def holds(self, situation: Situation) -> bool:
        step = situation.step
        action = step.action if isinstance(step.action, dict) else {}
        if self.family is not None:
            family = self.family
            if self.kind == "family":
                return family.marks(step, action.get(family.field)) is self.value
            if self.kind == "not_best":
                return not ranked_first(step, family, str(self.value))
        if self.kind == "field":
            return bool(action.get(self.name) == self.value)
        if self.kind in ("prefix", "not_prefix"):
            text = action.get(self.name)
            starts = isinstance(text, str) and starts_with(text, str(self.value))
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
        """The atom as a Python expression over ``ctx``, ``action``, ``failed`` and, for a
        family, its ``fact`` function and ``ranked_first`` (see :func:`_prelude`)."""
        if self.family is not None:
            argument = f"fact(action.get({self.family.field!r}))"
            if self.kind == "not_best":
                return "not ranked_first"
            if self.value is True:
                return f"bool({argument})"
            return f"{argument} is not None and not {argument}"
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
        if self.family is not None:
            named = self.family.text()
            if self.kind == "not_best":
                order = "highest" if self.value == "max" else "lowest"
                return f"another {self.family.field} has a {order} {named}"
            marked = "marks" if self.value else "does not mark"
            return f"{named} {marked} the action's {self.family.field}"
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


def starts_with(text: str, prefix: str) -> bool:
    """Starts with ``prefix`` at a boundary (so ``rm`` does not match ``rmdir``): exactly what
    the generated hook code tests."""
    return re.match(_prefix_pattern(prefix), text) is not None


def _prefix_pattern(prefix: str) -> str:
    """The regular expression hook code uses for :func:`starts_with` (a literal prefix, then a
    boundary)."""
    escaped = "".join("\\" + char if char in _REGEX_SPECIAL else char for char in prefix)
    return escaped + r"(?:\s|/|$)"


_REGEX_SPECIAL = frozenset(".^$*+?{}[]\\|()")


_RESERVED = frozenset(
    {
        "ctx", "nb", "action", "failed", "last", "option", "new", "key", "re", "fact", "value",
        "found", "alternatives", "best", "best_score", "score", "mine", "ranked_first",
    }
)  # fmt: skip


def _text_name(field_name: str) -> str:
    """The local variable holding a free-text field's value in hook code."""
    usable = field_name.isidentifier() and field_name.isascii() and field_name not in _RESERVED
    if usable and not field_name.startswith("_") and not keyword.iskeyword(field_name):
        return field_name
    return "text"


def alternatives(step: FailureStep, family: Family) -> list[dict[str, Any]]:
    """The options that differ from the attempted action only in the family's argument: the
    admissible ones, or — when the environment does not say — the action with each index the
    family covers. Exactly what the hook code's ``alternatives`` holds."""
    action = step.action if isinstance(step.action, dict) else {}
    field = family.field
    if step.admissible is None:
        return [{**action, field: value} for value in family.indices]
    return [
        option
        for option in step.admissible
        if isinstance(option, dict)
        and option.get(field) is not None
        and len(option) == len(action)
        and all(option.get(key) == action.get(key) for key in action if key != field)
    ]


def ranked_first(step: FailureStep, family: Family, order: str) -> bool:
    """Whether no alternative ranks above the attempted argument by ``family`` (``order``
    ``"max"``: higher is better; ``"min"``: lower): what hook code's ``ranked_first`` holds."""
    best: Any = None
    for option in alternatives(step, family):
        score = family.fact(step, option.get(family.field))
        if _number(score) and (best is None or _better(score, best, order)):
            best = score
    action = step.action if isinstance(step.action, dict) else {}
    mine = family.fact(step, action.get(family.field))
    return best is None or (_number(mine) and not _better(best, mine, order))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _better(score: Any, than: Any, order: str) -> bool:
    return bool(score > than if order == "max" else score < than)


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
    escapable: bool = True
    """Whether, wherever it fired, some other option would not have fired it (else a block
    vetoes every answer until the block limit)."""

    @property
    def key(self) -> str:
        return "&".join(sorted(atom.key for atom in self.atoms))

    @property
    def action_atoms(self) -> tuple[Atom, ...]:
        return tuple(atom for atom in self.atoms if atom.on_action)

    @property
    def family_atom(self) -> Atom | None:
        """The rule's one atom over a fact family, if any."""
        return next((atom for atom in self.atoms if atom.family is not None), None)

    @property
    def choice(self) -> str | None:
        """What a ``choose`` rewrite picks: ``marked`` (the rule fires on an argument the
        family does not mark), ``unmarked``, or the ``max``/``min`` ranked option."""
        atom = self.family_atom
        if atom is None:
            return None
        if atom.kind == "not_best":
            return str(atom.value)
        return "marked" if atom.value is False else "unmarked"

    @property
    def group(self) -> str:
        """Rules about the same action compete in one group."""
        return "&".join(sorted(a.key for a in self.atoms if a.kind in ("field", "prefix")))

    def holds(self, situation: Situation) -> bool:
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


def packet_steps(packet: FailurePacket) -> list[FailureStep]:
    """Every step the packet shows: its failure clusters' examples, then its passing sessions."""
    return [step for steps in packet_sessions(packet) for step in steps]


def packet_sessions(packet: FailurePacket) -> list[tuple[FailureStep, ...]]:
    """The steps of each session the packet shows (failure examples, then passing ones)."""
    examples = [cluster.example for cluster in packet.clusters] + list(packet.passing)
    return [example.steps for example in examples]


def packet_arguments(packet: FailurePacket, name_field: str | None) -> dict[str, list[Any]]:
    """The packet's argument fields with their values (see ``families.argument_fields``)."""
    return argument_fields(packet_sessions(packet), name_field)


def packet_families(
    packet: FailurePacket, name_field: str | None, arguments: dict[str, list[Any]]
) -> list[Family]:
    """The fact families the packet shows, linked to the naming field or an argument field."""
    steps = packet_steps(packet)
    fields = dict(arguments)
    if name_field is not None:
        values = [
            s.action[name_field]
            for s in steps
            if isinstance(s.action, dict) and is_integer(s.action.get(name_field))
        ]
        values += [
            o[name_field]
            for s in steps
            for o in s.admissible or []
            if isinstance(o, dict) and is_integer(o.get(name_field))
        ]
        named = list(dict.fromkeys(values))
        if named:
            fields[name_field] = named
        else:
            texts = [s.action.get(name_field) for s in steps if isinstance(s.action, dict)]
            words = [first_word(t) for t in texts if isinstance(t, str) and t]
            fields[name_field] = list(dict.fromkeys(words))
    return discover_families(steps, packet.predicate_keys, fields)


class Grammar(NamedTuple):
    """The grammar's atoms over a packet, unranked: what a rule may test about the attempted
    action (``actions``: its name, its argument fields, whether a fact family marks or ranks
    its argument), what it may test about the situation (``conditions``: state and predicate
    values, repetition, a failed previous step), and the action's naming field."""

    actions: list[Atom]
    conditions: list[Atom]
    field: str | None


def grammar_atoms(packet: FailurePacket) -> Grammar:
    """Every atom the grammar offers over ``packet``, with no ranking and no evidence: the
    space a search baseline samples from (``research/baselines.py``)."""
    steps = packet_steps(packet)
    name_field = discriminating_field(step.action for step in steps)
    arguments = packet_arguments(packet, name_field)
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
        elif isinstance(value, int) and not isinstance(value, bool):
            atom = Atom("field", name_field or "", value)
            action_atoms.setdefault(atom.key, atom)
        for argument in arguments:
            if argument in action and argument != name_field:
                atom = Atom("field", argument, action[argument])
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
    for family in packet_families(packet, name_field, arguments):
        for atom in family_atoms(family):
            action_atoms.setdefault(atom.key, atom)
    return Grammar(list(action_atoms.values()), list(conditions.values()), name_field)


def family_atoms(family: Family) -> list[Atom]:
    """What a rule may test with ``family``: whether it marks the attempted argument, and, for
    a family of numbers, whether another option ranks above it."""
    atoms = [Atom("family", family.key, flag, family) for flag in (True, False)]
    if family.numeric:
        atoms += [Atom("not_best", family.key, order, family) for order in ("max", "min")]
    return atoms


def situations_of(steps: Sequence[FailureStep]) -> Iterable[Situation]:
    """Each step of one session as a rule sees it, with its participant's previous step."""
    last: dict[str, FailureStep] = {}
    for index, step in enumerate(steps):
        yield Situation(step=step, previous=last.get(step.participant), index=index)
        last[step.participant] = step


# -- writing the patch ---------------------------------------------------------------------------


def render(rule: Rule, effect: str, name_field: str | None, packet: FailurePacket) -> str:
    """The answer in the patch protocol: ``<think>evidence</think><patch>[...]</patch>``.

    ``effect`` is ``block``, ``rewrite`` (to the rule's suggestion), ``choose`` (the rule's
    family picks the argument; see :attr:`Rule.choice`) or ``hint``."""
    suggestion = rule.suggestion if effect != "choose" else None
    arguments = list(packet_arguments(packet, name_field))
    what = _named(suggestion, name_field, arguments) if suggestion is not None else None
    families = {atom.name for atom in rule.atoms if atom.family is not None}
    if len(families) > 1:
        raise ValueError("a rule tests at most one fact family")
    if effect == "choose" and rule.choice is None:
        raise ValueError("a choose rewrite needs a rule with a family atom")
    message = _message(rule, what, effect)
    if effect == "hint":
        hook, code = "make_pre_hint", _hint_code(rule, message)
    elif effect == "choose":
        hook, code = "on_before_action", _choose_code(rule, message)
    else:
        hook = "on_before_action"
        code = _before_action_code(rule, effect, message, suggestion, name_field, arguments)
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


def _named(action: Any, name_field: str | None, arguments: Sequence[str]) -> str:
    """An action's name, with its argument fields (``place cell=3``)."""
    label = action_label(action, name_field)
    if not isinstance(action, dict):
        return label
    shown = [f"{key}={action[key]!r}" for key in arguments if key in action and key != name_field]
    return " ".join([label, *shown])


def _message(rule: Rule, what: str | None, effect: str = "block") -> str:
    precondition = next((a for a in rule.atoms if a.kind == "predicate" and rule.ordering), None)
    action = " and ".join(a.text() for a in _reading(rule.action_atoms)) or "this"
    family = rule.family_atom
    if family is not None and family.family is not None:
        field, named = family.family.field, family.family.text()
        wanted = {
            "marked": f"that {named} marks",
            "unmarked": f"that {named} does not mark",
            "max": f"with the highest {named}",
            "min": f"with the lowest {named}",
        }[rule.choice or "marked"]
        if effect == "choose":
            text = f"Take the {field} {wanted}"
        else:
            text = f"Not this {field}: take one {wanted}"
    elif any(a.kind == "repeat" for a in rule.atoms):
        text = "You just did exactly this and it did not help; do something different"
    elif precondition is not None:
        wanted = "true" if precondition.value is False else "false"
        text = f"Not yet: first make {precondition.name} {wanted}"
    elif any(a.kind == "after_error" for a in rule.atoms):
        text = "The previous action failed; recover from the failure before this"
    else:
        text = f"This action is not allowed here ({action})"
    return text + (f" (for example: {what})." if what else ".")


_READING_ORDER = (
    "field", "prefix", "not_prefix", "family", "not_best", "repeat", "after_error", "predicate",
    "state",
)  # fmt: skip


def _reading(atoms: Sequence[Atom]) -> list[Atom]:
    return sorted(atoms, key=lambda a: (_READING_ORDER.index(a.kind), a.key))


def _conditions(atoms: Sequence[Atom]) -> str:
    return " and ".join(atom.code() for atom in _reading(atoms))


def _prelude(atoms: Sequence[Atom], *, choosing: bool = False) -> list[str]:
    """Locals the conditions read: free-text fields, whether the last step failed, and a fact
    family's ``fact`` function, ``alternatives`` and ``ranked_first`` (also what a ``choose``
    rewrite picks from)."""
    lines = []
    for name in sorted({a.name for a in atoms if a.kind in ("prefix", "not_prefix")}):
        lines.append(f"    {_text_name(name)} = str(action.get({name!r}, ''))")
    if any(a.kind == "after_error" for a in atoms):
        lines.append(_FAILED_CODE.rstrip("\n"))
    family_atom = next((a for a in atoms if a.family is not None), None)
    if family_atom is not None and family_atom.family is not None:
        family = family_atom.family
        lines += family.function("fact")
        ranking = [a for a in atoms if a.kind == "not_best"]
        if choosing or ranking:
            lines += _alternatives_code(family)
        if ranking:
            lines += _ranking_code(family, str(ranking[0].value))
    return lines


def _alternatives_code(family: Family) -> list[str]:
    field = repr(family.field)
    return [
        "    alternatives = []",
        "    for option in ctx.admissible or []:",
        f"        if not isinstance(option, dict) or option.get({field}) is None:",
        "            continue",
        f"        same = [option.get(key) == action.get(key) for key in action if key != {field}]",
        "        if len(option) == len(action) and all(same):",
        "            alternatives.append(option)",
        "    if ctx.admissible is None:",
        f"        for value in {_literal(list(family.indices))}:",
        "            option = dict(action)",
        f"            option[{field}] = value",
        "            alternatives.append(option)",
    ]


def _ranking_code(family: Family, order: str) -> list[str]:
    field = repr(family.field)
    better, at_least = (">", ">=") if order == "max" else ("<", "<=")
    number = "isinstance({0}, (int, float)) and not isinstance({0}, bool)"
    return [
        "    best = None",
        "    best_score = 0",
        "    for option in alternatives:",
        f"        score = fact(option.get({field}))",
        f"        if {number.format('score')}:",
        f"            if best is None or score {better} best_score:",
        "                best = option",
        "                best_score = score",
        f"    mine = fact(action.get({field}))",
        f"    ranked_first = best is None or ({number.format('mine')} "
        f"and mine {at_least} best_score)",
    ]


def _before_action_code(
    rule: Rule,
    effect: str,
    message: str,
    suggestion: Any,
    name_field: str | None,
    arguments: Sequence[str] = (),
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
            keys = [name_field] + [
                key for key in arguments if key != name_field and key in suggestion
            ]
            matched = " and ".join(
                f"option.get({key!r}) == {_literal(suggestion.get(key))}" for key in keys
            )
            lines += [
                "    for option in ctx.admissible or []:",
                f"        if isinstance(option, dict) and {matched}:",
                f"            return rewrite(option, {message!r})",
                "    if ctx.admissible is None:",
                f"        new = {_literal(suggestion)}",
                "        for key in action:",
                f"            if key in new and key {_excluded(keys)}:",
                "                new[key] = action[key]",
                f"        return rewrite(new, {message!r})",
            ]
        else:
            lines.append(f"    return rewrite({_literal(suggestion)}, {f'{label}: ' + message!r})")
            return "\n".join(lines) + "\n"
    lines.append(f"    return block_and_prompt({message!r})")
    return "\n".join(lines) + "\n"


def _excluded(keys: Sequence[str]) -> str:
    """The test that a key is none of ``keys`` (the plain comparison for a single key)."""
    return f"!= {keys[0]!r}" if len(keys) == 1 else f"not in {_literal(list(keys))}"


def _choose_code(rule: Rule, message: str) -> str:
    """Rewrite to the alternative the family picks; with none to pick, let the action through
    (vetoing it would only repeat until the block limit)."""
    atom = rule.family_atom
    if atom is None or atom.family is None:
        raise ValueError("a choose rewrite needs a rule with a family atom")
    field = repr(atom.family.field)
    lines = [
        "def on_before_action(ctx, nb):",
        "    action = ctx.action if isinstance(ctx.action, dict) else {}",
    ]
    lines += _prelude(rule.atoms, choosing=True)
    choice = rule.choice
    lines.append(f"    if not ({_conditions(rule.atoms)}):")
    lines.append("        return None")
    if choice in ("max", "min"):
        lines += ["    if best is not None:", f"        return rewrite(best, {message!r})"]
    else:
        fact = f"fact(option.get({field}))"
        picked = f"bool({fact})" if choice == "marked" else f"{fact} is not None and not {fact}"
        lines += [
            "    for option in alternatives:",
            f"        if {picked}:",
            f"            return rewrite(option, {message!r})",
        ]
    lines.append("    return None")
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
