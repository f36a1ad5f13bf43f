"""Experiments described in a TOML file, so a team whose agents are not Python writes no Python.

``load_manifest(path)`` reads and validates the whole file — every key, every scenario, every
agent command — and returns a :class:`Manifest`; nothing is imported or run yet. Its
``experiment(store)`` (or ``async_experiment``) then imports the environment and the Python
agents and returns an ordinary experiment handle. The format is ``docs/manifests.md``::

    [experiment]
    name = "synthetic sweep"
    turns = 5
    trials = 2
    seed = 42

    [environment]
    factory = "envharness.fixtures:SyntheticEnvironment"

    [agents.alice]
    factory = "envharness.fixtures:SyntheticAgent"

    [agents.bob]
    command = ["{python}", "agents/python/echo_agent.py"]
    implementation = "echo-agent-python@1"

    [agents.carol]
    model = "gpt-4o-mini"     # a model agent; the endpoint from base_url or $OPENAI_BASE_URL
    budget = { usd = 0.50 }

    [scenarios]
    file = "scenarios.jsonl"

The environment may also be an adapter — ``environment = "pettingzoo:classic.leduc_holdem_v4"``
alone, or ``factory = "gymnasium:Taxi-v4"`` with ``options`` — or a program speaking the
environment protocol (``command = ["node", "my_env.js"]``), through
:mod:`envharness.adapters.registry`.

A model agent's endpoint and key come from the environment (``$OPENAI_BASE_URL``, the variable
``api_key_env`` names), never from the file; ``[experiment]`` may give the whole experiment a
``budget`` and each session a ``session_budget``.

``[experiment]`` may name hooks around every participant: ``hooks = "module:attribute"`` (a
:class:`~envharness.hooks.HarnessHooks`, or a zero-argument factory of one), or ``harness =
"harness-v2"``, a version the optimizer accepted into the store the experiment records into.

Every mistake is a :class:`ManifestError` naming the file, the line and the key. Paths (``cwd``,
``scenarios.file``) are relative to the manifest's folder, which is also where an agent program
runs unless ``cwd`` says otherwise and where ``module:attribute`` references are imported from
first.
"""

from envharness.manifest.document import ManifestError
from envharness.manifest.loader import load_manifest
from envharness.manifest.model import PYTHON, Manifest, ManifestAgent, ManifestProgram
from envharness.manifest.model_agents import ModelAgentSpec

__all__ = [
    "PYTHON",
    "Manifest",
    "ManifestAgent",
    "ManifestError",
    "ManifestProgram",
    "ModelAgentSpec",
    "load_manifest",
]
