"""Environments people already have, run unchanged: Gymnasium, PettingZoo (and more to come).

Each adapter is an optional extra that pulls only the third-party package it adapts
(``pip install "envharness[gymnasium]"``, ``[pettingzoo]``), so nothing here imports one until an
adapter is used: ``from envharness.adapters.gymnasium import GymnasiumEnvironment``.

In layer order (``tests/test_layers.py``):

- :mod:`._optional` — importing a third-party package, or a clear error naming the extra;
  :mod:`.replay` — the exact, small state of an environment that cannot serialise itself (its
  seed and moves, replayed on resume, branch and restore, with the replay's determinism
  checked); :mod:`.spaces` — Gymnasium spaces as JSON values and JSON Schema, and actions
  checked against them; :mod:`._png` — frames as PNG files without an imaging library;
- :mod:`._copies` — an adapter object that gives each session a copy with its own live
  instance and replayer;
- :mod:`.gymnasium` — :class:`~envharness.adapters.gymnasium.GymnasiumEnvironment`;
  :mod:`.pettingzoo` — :class:`~envharness.adapters.pettingzoo.PettingZooEnvironment`.
"""
