"""The local service: a JSON API, live timelines and the browser viewer over one store.

The folders are the layers; each imports only those above it in this list:

1. :mod:`.wire` — the wire types, shared with :mod:`envharness.client` (no Starlette).
2. What the API and the viewer share, one module each:

   - :mod:`.problems` — :class:`~.problems.HTTPProblem`, the one error a handler raises, and
     how store and trajectory errors map to it;
   - :mod:`.codes` — one-time sign-in codes, kept hashed in memory;
   - :mod:`.projections` — trajectories already projected, kept while their evidence is
     unchanged;
   - :mod:`.state` — what one running service holds: store, tokens, address, codes;
   - :mod:`.auth` — who is asking: a bearer token or the viewer cookie, resolved to a policy;
   - :mod:`.access` — what that principal may see of sessions and records, in the query;
   - :mod:`.trajectory_access` — the same for trajectories, snapshots and datasets;
   - :mod:`.params` — query parameters validated against a Struct;
   - :mod:`.routing` — endpoints as data: routes, their checks, and the OpenAPI paths;
   - :mod:`.guard` — Host and Origin checks before routing, and the headers of every answer.

3. :mod:`.http` — the JSON API: a module per resource, paging, bodies, events (SSE), exports,
   ``/openapi.json``.
4. :mod:`.pages` — the viewer: a module per destination, its drawing pieces, its static files;
   it reuses the API's reads.
5. :mod:`.app` — the Starlette application: every endpoint table, in order, behind the guard;
   :mod:`.server` — binding loopback and running the app under uvicorn.

Importing this package, or :mod:`.wire`, imports nothing else of the service:
:mod:`envharness.client` uses the wire types without needing Starlette or uvicorn (the
``server`` extra).
"""
