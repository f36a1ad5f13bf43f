"""What a user implements, and how the runtime reaches it.

- :mod:`~envharness.contracts.environment` — ``Environment`` (rules as four ordinary
  methods), ``EnvironmentSpec``, ``Resolution``;
- :mod:`~envharness.contracts.agent` — ``Agent`` (``act``) and ``AgentFactory``;
- :mod:`~envharness.contracts.command_agent` — external programs as agents over the JSON-lines
  protocol;
- :mod:`~envharness.contracts.operations` — ``EnvironmentOperation``: imperative work whose
  name, version and configuration are frozen into evidence;
- :mod:`~envharness.contracts.scenario` — ``Scenario[T]`` and input validation.

The public names are re-exported by ``envharness``; these modules sit between the protocol
and the hooks in the layer diagram (docs/architecture.md).
"""
