"""Types shared by the CLI tests."""

from __future__ import annotations

from collections.abc import Callable

from typer.testing import Result

Invoke = Callable[..., Result]
"""``invoke("--store", path, "sessions")``: run the command in-process and return its result."""
