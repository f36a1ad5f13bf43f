"""The exception tree drawn in ``envharness/errors.py``'s docstring is the tree the package defines:
every ``EnvharnessError`` subclass in every module is drawn, under its real parent, and nothing
else is."""

from __future__ import annotations

import importlib
import pkgutil
import re

import envharness
from envharness import errors
from envharness.errors import EnvharnessError

BRANCH = re.compile(r"^(?P<indent>(?:│   |    )*)(?:├── |└── )?(?P<name>[A-Z]\w*)")


def drawn_tree() -> dict[str, str | None]:
    """Each drawn class's name and its parent's (``None`` for the root), from the docstring."""
    doc = errors.__doc__ or ""
    lines = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in lines:
        match = BRANCH.match(line.removeprefix("    "))
        assert match, f"not a branch of the drawing: {line!r}"
        name = match["name"]
        depth = len(match["indent"]) // 4 + (0 if name == "EnvharnessError" else 1)
        assert depth <= len(path), f"{name} is drawn deeper than its parent"
        del path[depth:]
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = path[-1] if path else None
        path.append(name)
    return parents


def defined_tree() -> dict[str, str | None]:
    """Each ``EnvharnessError`` subclass envharness defines, with its envharness parent."""
    for module in pkgutil.walk_packages(envharness.__path__, "envharness."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    parents: dict[str, str | None] = {EnvharnessError.__name__: None}
    pending = [EnvharnessError]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.partition(".")[0] != "envharness":
                continue  # a test's own subclass
            pending.append(sub)
            bases = [base for base in sub.__bases__ if issubclass(base, EnvharnessError)]
            assert len(bases) == 1, f"{sub.__qualname__} has {len(bases)} envharness parents"
            assert sub.__name__ not in parents or parents[sub.__name__] == bases[0].__name__, (
                f"two classes are called {sub.__name__}"
            )
            parents[sub.__name__] = bases[0].__name__
    return parents


def test_the_drawing_parses_into_a_tree_rooted_at_envharness_error() -> None:
    drawn = drawn_tree()
    assert [name for name, parent in drawn.items() if parent is None] == ["EnvharnessError"]
    assert len(drawn) > 1


def test_every_defined_error_is_drawn_under_its_parent() -> None:
    drawn, defined = drawn_tree(), defined_tree()
    missing = {name: parent for name, parent in defined.items() if name not in drawn}
    assert missing == {}, f"draw these in envharness/errors.py (name: parent): {missing}"
    wrong = {
        name: (drawn[name], parent) for name, parent in defined.items() if drawn[name] != parent
    }
    assert wrong == {}, f"drawn under the wrong parent (name: (drawn, real)): {wrong}"


def test_nothing_is_drawn_that_is_not_defined() -> None:
    extra = set(drawn_tree()) - set(defined_tree())
    assert extra == set(), f"drawn in envharness/errors.py but defined nowhere: {sorted(extra)}"
