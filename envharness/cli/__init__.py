"""The ``envharness`` command line: a thin edge over the Python API (see ``docs/cli.md``).

Each module imports only those above it in this list:

1. What every command shares: :mod:`.quickstart` (the demo store, no command line),
   :mod:`.render` (terminal text), :mod:`.edge` (exit statuses, errors, Ctrl-C, progress),
   :mod:`.state` (the root options, handed to commands on the typer context),
   :mod:`.options` (option declarations used alike by several commands), :mod:`.loading`
   (``module:attribute``, environment references, ``NAME=VALUE`` and JSON arguments into
   objects), :mod:`.refusals` (many refusals told by reason), :mod:`.verdicts` (a
   conformance kit's results as they come) and :mod:`.manifest_run` (``run experiment.toml``).
2. The commands, one typer app per module, each command a top-level function:
   :mod:`.serve`, :mod:`.tokens` (``token``), :mod:`.run` (``quickstart``, ``run``,
   ``resume``), :mod:`.lifecycle` (``checkpoint``, ``branch``, ``continue``, ``compare``),
   :mod:`.control` (``stop``, ``pause``), :mod:`.experiments`, :mod:`.trajectories`,
   :mod:`.snapshots` (``snapshot``, and ``export snapshot ID``), :mod:`.sessions`
   (``sessions list|show``, ``verify``, ``export``), :mod:`.artifacts` (``artifact``),
   :mod:`.datasets` (``dataset``),
   :mod:`.sources` (``import``, ``sources``), :mod:`.harness_versions` (``harness``),
   :mod:`.optimize` (``selftest``, ``optimize``), :mod:`.check_env` (``check-env``),
   :mod:`.copy_store` (``copy-store``) and :mod:`.protocol`.
3. :mod:`.app` — the root app and its options, and where every module's app is added.
"""

from envharness.cli.app import app, main

__all__ = ["app", "main"]
