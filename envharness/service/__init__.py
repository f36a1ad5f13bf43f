"""The local service: a JSON API, live timelines and the browser viewer over one store.

Modules, each with one job: :mod:`.app` (the Starlette application), :mod:`.server` (binding
to loopback and running it under uvicorn), :mod:`.auth` and :mod:`.access` (who is asking and
what they may see), :mod:`.routing` (endpoints as data), :mod:`.api` and one ``*_api`` module
per resource (with :mod:`.paging`, :mod:`.bodies` and :mod:`.exports`, which they share),
:mod:`.events` (server-sent events), :mod:`.pages`, the ``*_pages`` modules and :mod:`.login`
(the viewer, drawn with :mod:`.widgets`), :mod:`.openapi`, :mod:`.schemas` (the wire types,
shared with :mod:`envharness.client`).

Importing this package imports nothing else: :mod:`envharness.client` uses the wire types
without needing Starlette or uvicorn (the ``server`` extra).
"""
