"""The JSON API: one module of handlers and endpoint table per resource, and what they share.

Resources (each module's table is listed in :data:`envharness.service.app.ENDPOINTS`):

- :mod:`.sessions` — sessions, records, export, live timelines, lineage, comparison; and the
  store-wide verification, tokens and health;
- :mod:`.experiments` — experiments, one with its sessions, its live stream;
- :mod:`.trajectories` — the trajectory listing and one trajectory;
- :mod:`.snapshots` — snapshots: list, freeze, read, export;
- :mod:`.datasets` — datasets: list, create, read, export;
- :mod:`.imports` — imported sources' health, and imports into them;
- :mod:`.optimizer` — harness versions, their diffs, and optimizer runs;
- :mod:`.openapi` — ``/openapi.json``, built from the endpoint table.

Shared by them:

- :mod:`.paging` — keyed pages of a listing (``after``, ``limit``);
- :mod:`.bodies` — request bodies read with a size limit and decoded;
- :mod:`.events` — server-sent events: a session's records and an experiment's changes, live;
- :mod:`.exports` — streamed exports, checked before their first byte.

Handlers read through :mod:`envharness.service.access` and answer with
:mod:`envharness.service.wire` types. Nothing here imports the viewer
(:mod:`envharness.service.pages`), which reads what these handlers read.
"""
