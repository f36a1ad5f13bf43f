"""Helpers for the service tests: synthetic sessions written record by record, a principal
roster with one token per role, a real uvicorn server on a free loopback port, pages fetched
as a role, event streams read until they idle, and the Python examples of docs/api.md."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette

import envharness.client
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    EnvironmentRef,
    ExperimentConfig,
    ExperimentCreated,
    ExperimentStatus,
    Finding,
    Observation,
    Outcome,
    ParticipantRef,
    RecordRow,
    ScenarioRef,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    new_id,
)
from envharness.service.app import create_app
from envharness.service.state import Address, Service
from envharness.store import Store, open_store, read_store
from envharness.store.tokens import TokenStore
from tests.service._asgi import ClosingASGITransport

BASE = "http://127.0.0.1:8765"
TRIO, SOLO, FLAKY, BRANCH = 10, 11, 12, 13
"""Where the quickstart's standalone sessions are in the oldest-first listing: after the ten
of its experiment. TRIO (alice, bob, carol) has blocked actions, a finding and a failed pass;
it was checkpointed after turn 3 and continued. SOLO (alice) passed; FLAKY (dana) failed.
BRANCH is the trio's branch from that checkpoint (same roster, total reset), continued too."""
ROLES = ("admin", "viewer", "alice", "bob", "none", "revoked")
"""The principals every endpoint is tried with: alice and bob are participant tokens."""
API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
KEEP_ALIVE = b": keep-alive\n\n"


ENVIRONMENT = EnvironmentRef(
    name="service-test", version="1", turn_order="simultaneous", roles=("agent",),
    input_type="tests.Input",
)  # fmt: skip


def roster(participants: Sequence[str]) -> dict[str, ParticipantRef]:
    return {name: ParticipantRef(role="agent", implementation=f"{name}@1") for name in participants}


def config(
    participants: Sequence[str],
    *,
    turns: int = 3,
    experiment_id: str | None = None,
    scenario: str = "service-test",
    trial: int | None = None,
    seed: int = 0,
) -> SessionConfig:
    return SessionConfig(
        environment=ENVIRONMENT,
        participants=roster(participants),
        scenario=ScenarioRef(
            id=scenario, input={"secret": "reference-input"}, reference={"answer": 42}
        ),
        seed=seed,
        turns=turns,
        envharness_version="test",
        experiment_id=experiment_id,
        trial=trial,
    )


class SessionWriter:
    """Seals a session's records turn by turn, the way the runtime does."""

    def __init__(
        self,
        participants: Sequence[str],
        *,
        turns: int = 3,
        session_id: str | None = None,
        experiment_id: str | None = None,
        scenario: str = "service-test",
        trial: int | None = None,
        seed: int = 0,
    ) -> None:
        self.participants = tuple(participants)
        self.chain = SessionChain(session_id or new_id("ses"))
        self.config = config(
            participants, turns=turns, experiment_id=experiment_id, scenario=scenario,
            trial=trial, seed=seed,
        )  # fmt: skip
        self.outcomes: dict[int, int] = {}

    @property
    def id(self) -> str:
        return self.chain.session_id

    def start(self) -> tuple[list[RecordRow], dict[str, bytes]]:
        state = b'{"turn":0}'
        digest = hashlib.sha256(state).hexdigest()
        return [
            self.chain.seal(SessionCreated(config=self.config)),
            self.chain.seal(SessionStatus(status="running")),
            self.chain.seal(SegmentStarted(segment=0, state=digest)),
        ], {digest: state}

    def turn(self, turn: int, observation: Any = None) -> tuple[list[RecordRow], dict[str, bytes]]:
        rows = []
        for name in self.participants:
            shown = observation if observation is not None else {"secret_of": name, "turn": turn}
            rows.append(
                self.chain.seal(Observation(observation=shown), turn=turn, participant=name)
            )
        for index, name in enumerate(self.participants):
            value = 99 if index == 1 and turn == 1 else index + 1
            action = {"value": value}
            attempted = ActionAttempted(action=action, seconds=0.01)
            rows.append(self.chain.seal(attempted, turn=turn, participant=name))
            result: ActionBlocked | ActionExecuted = (
                ActionBlocked(action=action, reason="too big")
                if value == 99
                else ActionExecuted(action=action, outcome={"mine": value})
            )
            rows.append(self.chain.seal(result, turn=turn, participant=name))
        state = f'{{"turn":{turn}}}'.encode()
        digest = hashlib.sha256(state).hexdigest()
        outcome = self.chain.seal(Outcome(state=digest, signals={"total": float(turn)}), turn=turn)
        self.outcomes[turn] = outcome.seq
        rows.append(outcome)
        return rows, {digest: state}

    def finish(self, status: Any = "completed") -> list[RecordRow]:
        last = max(self.outcomes) if self.outcomes else 0
        return [
            self.chain.seal(Score(version="test@1", metrics={"total": float(last)}, passed=True,
                                  uncertainty={"total": 0.5})),
            self.chain.seal(Finding(title="a finding", detail="cites the last outcome",
                                    severity="medium", cites=tuple(self.outcomes.values())[-1:])),
            self.chain.seal(SessionStatus(status=status, reason=f"ended {status}")),
            self.chain.seal(SegmentEnded(segment=0, status=status)),
        ]  # fmt: skip


class ExperimentWriter:
    """Seals an experiment's own chain, and makes writers for its sessions."""

    def __init__(
        self,
        scenarios: Sequence[str] = ("first", "second"),
        *,
        trials: int = 2,
        participants: Sequence[str] = ("alice", "bob"),
        name: str = "service-test sweep",
    ) -> None:
        self.chain = SessionChain(new_id("exp"))
        self.config = ExperimentConfig(
            name=name,
            scenarios=tuple(
                ScenarioRef(id=scenario, input={"n": n}, reference={"answer": f"secret-{n}"})
                for n, scenario in enumerate(scenarios)
            ),
            trials=trials, seed=7, turns=2, max_concurrency=2, environment=ENVIRONMENT,
            participants=roster(participants), envharness_version="test",
        )  # fmt: skip

    @property
    def id(self) -> str:
        return self.chain.session_id

    @property
    def total(self) -> int:
        return len(self.config.scenarios) * self.config.trials

    def start(self) -> list[RecordRow]:
        return [
            self.chain.seal(ExperimentCreated(config=self.config)),
            self.chain.seal(ExperimentStatus(status="running", total=self.total)),
        ]

    def session(
        self, scenario: str, trial: int, participants: Sequence[str] | None = None
    ) -> SessionWriter:
        """A session of this experiment; ``participants`` other than the experiment's own
        roster make the mixed rosters a participant's view must be cut from."""
        return SessionWriter(
            participants if participants is not None else list(self.config.participants),
            turns=self.config.turns, experiment_id=self.id, scenario=scenario, trial=trial,
            seed=1000 * trial + len(scenario),
        )  # fmt: skip

    def finish(self, status: Any = "completed") -> list[RecordRow]:
        return [self.chain.seal(ExperimentStatus(status=status, total=self.total,
                                                 reason=f"ended {status}"))]  # fmt: skip


async def write_session(
    store: Store, writer: SessionWriter, turns: int, *, finish: bool = True
) -> None:
    rows, blobs = writer.start()
    await store.append(rows, blobs)
    for turn in range(1, turns + 1):
        rows, blobs = writer.turn(turn)
        await store.append(rows, blobs)
    if finish:
        await store.append(writer.finish())


@dataclass
class World:
    """A service over a store, with one token per principal in :data:`ROLES`."""

    store: Path
    service: Service
    app: Starlette
    secrets: dict[str, str] = field(default_factory=dict)
    token_ids: dict[str, str] = field(default_factory=dict)

    def client(self, role: str = "viewer", **options: Any) -> httpx.AsyncClient:
        headers = dict(options.pop("headers", {}))
        if role in self.secrets:
            headers["Authorization"] = f"Bearer {self.secrets[role]}"
        return httpx.AsyncClient(
            transport=ClosingASGITransport(self.app), base_url=BASE, headers=headers, **options
        )


def make_world(store_path: Path, *, port: int = 8765) -> World:
    async def build() -> World:
        store = await read_store(store_path)
        service = Service(
            store=store, address=Address("127.0.0.1", port), tokens=TokenStore(store.directory)
        )
        world = World(store_path, service, create_app(service))
        for role, options in {
            "admin": {"role": "admin"},
            "viewer": {"role": "viewer"},
            "alice": {"role": "participant", "participant": "alice"},
            "bob": {"role": "participant", "participant": "bob"},
            "revoked": {"role": "viewer"},
        }.items():
            issued = await service.tokens.issue(**options)  # type: ignore[arg-type]
            world.secrets[role] = issued.secret
            world.token_ids[role] = issued.info.id
        await service.tokens.revoke(world.token_ids["revoked"])
        return world

    return anyio.run(build)


def write_store(path: Path, sessions: Sequence[tuple[SessionWriter, int]]) -> None:
    async def write() -> None:
        async with open_store(path) as store:
            for writer, turns in sessions:
                await write_session(store, writer, turns)

    anyio.run(write)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(service: Service) -> Iterator[str]:
    """The app under a real uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", service.address.port))
    config = uvicorn.Config(
        create_app(service), log_level="warning", lifespan="off", ws="none",
        timeout_graceful_shutdown=1,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        assert server.started, "uvicorn did not start"
        yield service.address.url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"


async def get_page(world: World, role: str, path: str, status: int = 200) -> str:
    """A viewer page as ``role`` sees it, checked to be HTML with the expected status."""
    async with world.client(role) as client:
        response = await client.get(path)
    assert response.status_code == status, (role, path, response.text[-600:])
    assert response.headers["content-type"].startswith("text/html")
    return response.text


async def until_keep_alive(stream: AsyncGenerator[bytes, None]) -> list[bytes]:
    """An event stream's chunks up to its first keep-alive (within 5 s); the stream is closed."""
    chunks = []
    with anyio.fail_after(5):
        async with aclosing(stream) as opened:
            async for chunk in opened:
                chunks.append(chunk)
                if chunk == KEEP_ALIVE:
                    break
    return chunks


def api_doc_examples() -> list[str]:
    """The Python blocks of docs/api.md, in order."""
    return re.findall(r"```python\n(.*?)```", API_DOC.read_text(), flags=re.DOTALL)


def run_api_doc_example(
    code: str, world: World, monkeypatch: pytest.MonkeyPatch, role: str = "viewer"
) -> None:
    """Run an example of docs/api.md as written: its ``Client`` talks to ``world``'s app (no
    network) with ``role``'s token from ``ENVHARNESS_TOKEN``."""
    real = envharness.client.Client

    def over_the_app(base_url: str, token: str | None = None, **options: Any) -> Any:
        return real(base_url, token, transport=ClosingASGITransport(world.app))

    monkeypatch.setattr(envharness.client, "Client", over_the_app)
    monkeypatch.setenv("ENVHARNESS_TOKEN", world.secrets[role])
    exec(compile(code, str(API_DOC), "exec"), {"__name__": "docs"})
