"""The ``envharness`` command line: a thin edge over the Python API (see ``docs/cli.md``)."""

from envharness.cli.app import app, main

__all__ = ["app", "main"]
