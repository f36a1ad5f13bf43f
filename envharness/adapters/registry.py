"""Environments named by text, as the command line and manifests name them.

One reference names one environment factory (a fresh environment per session)::

    gymnasium:Taxi-v4                        any registered Gymnasium id
    gymnasium:my_pkg.envs:Maze-v0            an id that module registers when imported
    pettingzoo:classic.leduc_holdem_v4       a PettingZoo module (``pettingzoo.`` optional)
    textworld:games/tiny.z8                  a TextWorld game file (made by ``tw-make``)
    my_pkg.envs:MyEnvironment                a Python class or zero-argument factory

and :func:`command_environment` makes one from a program in any language that speaks the
environment protocol (``protocol/``). The three schemes are words no Python environment module
is called, so an adapter reference is never mistaken for ``module:attribute``.

Nothing here imports an adapter, or the package it adapts, until a reference is loaded: a plain
install without the extras still parses every reference, and loading one says which extra to
install. Every mistake is a :class:`~envharness.errors.ConfigurationError` naming the reference
and, where it can, what was meant (the closest Gymnasium ids, PettingZoo modules, attributes).
"""

from __future__ import annotations

import difflib
import importlib
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from envharness.adapters._optional import require
from envharness.errors import ConfigurationError, EnvharnessError

__all__ = [
    "SCHEMES",
    "EnvironmentReference",
    "command_environment",
    "has_scheme",
    "load_environment",
    "parse_environment",
]

SCHEMES = ("gymnasium", "pettingzoo", "textworld")
"""The adapter schemes a reference may start with (``scheme:target``)."""

Kind = Literal["gymnasium", "pettingzoo", "textworld", "python"]

_EXAMPLES = (
    "gymnasium:FrozenLake-v1, pettingzoo:classic.leduc_holdem_v4, textworld:game.z8 or "
    "my_package.envs:MyEnvironment"
)


@dataclass(frozen=True, slots=True)
class EnvironmentReference:
    """A parsed reference: which adapter (or ``python`` for ``module:attribute``) and its
    target (a Gymnasium id, a module path, a game file, ``module:attribute``)."""

    kind: Kind
    target: str

    def __str__(self) -> str:
        return self.target if self.kind == "python" else f"{self.kind}:{self.target}"


def has_scheme(text: str) -> bool:
    """Whether ``text`` names an adapter (``gymnasium:``, ``pettingzoo:``, ``textworld:``)."""
    scheme, separator, _ = text.partition(":")
    return bool(separator) and scheme.strip().lower() in SCHEMES


def parse_environment(text: str, *, what: str = "environment") -> EnvironmentReference:
    """Split a reference into its kind and target; ``what`` names it in errors (``--environment``,
    a manifest key). Nothing is imported."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"{what or 'the environment'} is empty; give e.g. {_EXAMPLES}")
    text = text.strip()
    scheme, separator, target = text.partition(":")
    if separator and scheme.lower() in SCHEMES:
        target = target.strip()
        if not target:
            raise ConfigurationError(
                f"{_named(what, text)} names no {scheme.lower()} environment after the colon; e.g. "
                f"{_scheme_example(scheme.lower())}"
            )
        return EnvironmentReference(scheme.lower(), target)  # type: ignore[arg-type]
    if any(character.isspace() for character in text):
        raise ConfigurationError(
            f"{_named(what, text)} looks like a command line: run a program that speaks the "
            "environment protocol with --environment-command (command = [...] in a manifest's "
            "[environment] table)"
        )
    module_name, separator, attribute = text.partition(":")
    names = [*module_name.split("."), *attribute.split(".")]
    if not separator or not all(name.isidentifier() for name in names):
        close = difflib.get_close_matches(scheme.lower(), SCHEMES, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}:{target}?" if separator and close else ""
        raise ConfigurationError(
            f"{_named(what, text)} is not an environment reference: give {_EXAMPLES}{hint}"
        )
    return EnvironmentReference("python", text)


def load_environment(
    reference: str | EnvironmentReference,
    *,
    options: Mapping[str, Any] | None = None,
    base: str | PathLike[str] | None = None,
    what: str = "environment",
) -> Callable[[], Any]:
    """The environment factory a reference names, checked now so that a mistake (an unknown
    Gymnasium id, a missing package, a game file that is not there) is reported before any
    session starts.

    ``options`` are keyword arguments for the adapter (``max_episode_steps=60`` for
    Gymnasium) or for a Python factory; ``base`` is the folder a relative game path is
    relative to (the manifest's folder; default: the current directory). A ``module:attribute``
    reference imports from ``sys.path`` as it is: callers decide what is on it.
    """
    parsed = reference if isinstance(reference, EnvironmentReference) else None
    if parsed is None:
        parsed = parse_environment(str(reference), what=what)
    keywords = dict(options or {})
    if parsed.kind == "python":
        return _python(parsed, keywords, what)
    named = _named(what, str(parsed))
    require(parsed.kind, parsed.kind, needed_by=named)
    target = parsed.target
    if parsed.kind == "textworld":
        target = _game_file(target, Path(base) if base is not None else None, named)
    adapter = _adapter_class(parsed.kind)
    return _adapter(named, lambda: adapter(target, **keywords))


def command_environment(
    command: str | Sequence[str],
    *,
    cwd: str | PathLike[str] | None = None,
    options: Mapping[str, Any] | None = None,
    what: str = "--environment-command",
) -> Callable[[], Any]:
    """A :class:`~envharness.adapters.process.ProcessEnvironment` for a program in any
    language that speaks the environment protocol (``protocol/environment.md``): a factory
    that gives each session its own process. A string is split into words as a shell would
    (no shell runs it); ``options`` are the adapter's (``env``, ``inherit_env``, ``limits``).

    The program is started once now to read its spec, which blocks: async code awaits
    ``ProcessEnvironment.create(...)`` instead.
    """
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ConfigurationError(
                f"{what}: cannot split {command!r} into words: {exc}"
            ) from None
    else:
        argv = [str(word) for word in command]
    if not argv:
        raise ConfigurationError(
            f'{what} is empty; give the program and its arguments, e.g. "node my_env.js"'
        )
    from envharness.adapters.process import ProcessEnvironment

    keywords = dict(options or {})
    if cwd is not None:
        keywords["cwd"] = Path(cwd)
    return _adapter(f"{what} {shlex.join(argv)!r}", lambda: ProcessEnvironment(argv, **keywords))


# -- the adapters --------------------------------------------------------------------------------


def _adapter(what: str, make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
    """Make the adapter now (it reads the environment's spaces, or its program's spec), so
    that a mistake surfaces before any session; the adapter is itself the factory of a fresh
    copy per session."""
    try:
        return make()
    except EnvharnessError as exc:
        raise ConfigurationError(f"{what}: {exc}") from exc
    except TypeError as exc:  # an option the adapter does not take
        raise ConfigurationError(f"{what}: {exc} (check the options given for it)") from exc


def _adapter_class(scheme: str) -> Callable[..., Callable[[], Any]]:
    """The adapter for a scheme, imported only now (its package was checked first)."""
    if scheme == "gymnasium":
        from envharness.adapters.gymnasium import GymnasiumEnvironment

        return GymnasiumEnvironment
    if scheme == "pettingzoo":
        from envharness.adapters.pettingzoo import PettingZooEnvironment

        return PettingZooEnvironment
    from envharness.adapters.textworld import TextWorldEnvironment

    return TextWorldEnvironment


def _game_file(target: str, base: Path | None, named: str) -> str:
    """A TextWorld game's path, relative to ``base`` (a manifest's folder) or the current
    directory, checked now."""
    path = Path(target).expanduser()
    if not path.is_absolute():
        path = (base if base is not None else Path.cwd()) / path
    if not path.is_file():
        where = " (relative to the manifest's folder)" if base is not None else ""
        raise ConfigurationError(
            f"{named}: no game file at {str(path)!r}{where}; make one with tw-make (e.g. "
            "tw-make tw-simple --output games/simple.z8)"
        )
    return str(path)


def _python(parsed: EnvironmentReference, options: dict[str, Any], what: str) -> Callable[[], Any]:
    module_name, _, attribute = parsed.target.partition(":")
    value: Any = _import(module_name, _named(what, parsed.target))
    parts = attribute.split(".")
    for depth, part in enumerate(parts):
        try:
            value = getattr(value, part)
        except AttributeError:
            owner = ":".join([module_name, ".".join(parts[:depth])]) if depth else module_name
            public = [name for name in dir(value) if not name.startswith("_")]
            raise ConfigurationError(
                f"{_named(what, parsed.target)}: {owner} has no attribute {part!r}"
                + _closest(part, public, "names there")
            ) from None
    if not callable(value):
        raise ConfigurationError(
            f"{_named(what, parsed.target)} is a {type(value).__name__}, not an environment class "
            "or factory: point it at the class (a fresh environment is made for every session)"
        )
    if not options:
        factory: Callable[[], Any] = value
        return factory
    return _Bound(value, dict(options))


@dataclass(frozen=True, slots=True)
class _Bound:
    """A Python factory with keyword arguments (a manifest's ``options``): still a
    zero-argument factory, called once per session."""

    factory: Callable[..., Any]
    keywords: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> Any:
        return self.factory(**self.keywords)

    def __repr__(self) -> str:
        words = ", ".join(f"{key}={value!r}" for key, value in self.keywords.items())
        return f"{getattr(self.factory, '__qualname__', self.factory)}({words})"


# -- helpers -------------------------------------------------------------------------------------


def _import(module_name: str, what: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigurationError(
                f"{what}: no module named {exc.name!r} (looked on the Python path: the current "
                "directory for the envharness command, the manifest's folder for a manifest)"
            ) from exc
        raise ConfigurationError(
            f"{what}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    except Exception as exc:  # the user's module raised while importing: name it
        raise ConfigurationError(
            f"{what}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _closest(name: str, candidates: Sequence[str], what: str) -> str:
    lowered = {candidate.lower(): candidate for candidate in candidates}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.5)
    if not close:
        return ""
    return f"; the closest {what}: {', '.join(lowered[c] for c in close)}"


def _named(what: str, reference: str) -> str:
    """``--environment 'gymnasium:Taxi-v4'``; the reference alone when ``what`` is empty (a
    manifest names the file, line and key itself)."""
    return f"{what} {reference!r}" if what else repr(reference)


def _scheme_example(scheme: str) -> str:
    return {
        "gymnasium": "gymnasium:FrozenLake-v1",
        "pettingzoo": "pettingzoo:classic.leduc_holdem_v4",
        "textworld": "textworld:games/simple.z8",
    }[scheme]
