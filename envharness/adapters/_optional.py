"""Third-party packages the adapters need, imported when an adapter is used, never before.

A plain ``pip install envharness`` has none of them; an adapter that is used without its
package must say which extra brings it, not fail with a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from envharness.errors import ConfigurationError

__all__ = ["require"]


def require(module: str, extra: str, *, needed_by: str | None = None) -> ModuleType:
    """``module``, imported; a :class:`ConfigurationError` naming ``extra`` when it (or a
    package it needs) is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or module
        who = needed_by or f"the {extra} adapter"
        raise ConfigurationError(
            f"{who} needs the Python package {missing!r}, which is not installed: "
            f'pip install "envharness[{extra}]"'
        ) from exc
