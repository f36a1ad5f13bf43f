"""Patches: an engineer's answer made into hook code that may run, and what runs it.

One module, one job (each imports only those above it in this list):

- ``errors`` — who is to blame: the patch (``PatchError``, ``PatchFailure``) or the machinery
  (``SandboxInfrastructureError``);
- ``patch`` — :class:`HarnessPatch`: code hooks and the JSON an engineer writes them in;
- ``sandbox/`` — what runs a patch's code: ``contract`` (the :class:`Sandbox` seam, limits),
  ``_hookrt`` (the standard-library hook runtime, also run as the worker scripts),
  ``regex_workers`` (matches ``LocalSandbox`` runs where they can be killed), ``local``
  (in-process) and ``process`` (worker processes under kernel limits);
- ``parse`` — reads an answer's ``<think>…</think><patch>…</patch>``;
- ``policy`` — the AST policy: which Python a code hook may be written in;
- ``executable`` — :class:`ExecutableHarness`: a validated, smoke-tested patch run in a sandbox
  as the runtime's ``HarnessHooks``.

Everything public is re-exported by ``envharness.optimizer``.
"""
