"""The Python API the CLI, the service and users share ("one way to do a thing").

- :mod:`~envharness.api.harness` — ``AsyncEnvironmentHarness``: delegation only;
- :mod:`~envharness.api.setup` — validated options, and the session plans made from them;
- :mod:`~envharness.api.blocking` — ``EnvironmentHarness``, its blocking face (a portal);
- :mod:`~envharness.api.experiments` — experiment handles, async and blocking;
- :mod:`~envharness.api.sources` — evidence in and out of a store (exports and imports);
- :mod:`~envharness.api.conformance` — ``check_environment``: does an environment keep the
  contract (``envharness check-env``)? It drives the harness with a probe agent.

The public names are re-exported by ``envharness``.
"""
