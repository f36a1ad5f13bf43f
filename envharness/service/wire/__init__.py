"""The wire types: what the service's JSON endpoints return and accept, shared with the client.

These msgspec Structs are the single source of the OpenAPI schemas and what
:mod:`envharness.client` decodes answers with, so the document, the server and the client
cannot disagree. One module per family of resources, each named after what it carries:

- :mod:`.sessions` — sessions, records, experiments and their live events, lineage,
  comparisons, verification, tokens, health, and :class:`~.sessions.Problem` (every error);
- :mod:`.trajectories` — trajectories, snapshots, datasets and imported sources;
- :mod:`.optimizer` — harness versions the optimizer accepted, its runs, and diffs.

Nothing here imports Starlette or uvicorn (nor anything else of the service): the client works
without the ``server`` extra.
"""
