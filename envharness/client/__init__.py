"""A typed client for the local service's API, over httpx.

:class:`AsyncClient` is the one implementation (asyncio or trio); :class:`Client` is its
blocking face, a thin portal like :class:`~envharness.EnvironmentHarness`. Answers decode into
the service's own wire types (:mod:`envharness.service.wire`), so a response that does not
match the published schema fails loudly here instead of somewhere downstream.

    async with AsyncClient("http://127.0.0.1:8765", token) as client:
        async for summary in client.iter_sessions(status="completed"):
            page = await client.records(summary.id, kinds=["action.blocked"])
        async for record in client.events(session_id):   # live, resumes by itself
            ...
        detail = await client.experiment(experiment_id)   # config, sessions, detail.costs
        async for event in client.experiment_events(experiment_id):
            ...                                           # sessions starting and ending
        lineage = await client.lineage(session_id)        # parent and checkpoint, branches
        diff = await client.compare(parent_id, branch_id) # per-turn and score differences
        detail = await client.trajectory(session_id)      # states, segments, digest check
        async for line in client.export_snapshot(snapshot_id):
            ...                                           # checked first, then streamed
        version = await client.harness_version("harness-v2")   # code, reruns, reward

Errors the service answers with raise :class:`ServiceError` (status, message, and the bad
parameter when there is one); a service that cannot be reached raises httpx's own error.
"""

from envharness.client.aio import AsyncClient
from envharness.client.blocking import Client
from envharness.client.wire import RECONNECT_LIMIT, ExperimentEvent, ServiceError

__all__ = ["RECONNECT_LIMIT", "AsyncClient", "Client", "ExperimentEvent", "ServiceError"]
