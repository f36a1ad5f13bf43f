"""The worker's side of the protocol against a scripted driver, over an in-memory channel: a
driver that goes away mid-session leaves a worker that ends, never one that waits for ever."""

from __future__ import annotations

import dataclasses
import sys

import anyio
import pytest

from envharness import Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import new_id
from envharness.runtime.executors.frames import (
    PROTOCOL,
    Acks,
    Batch,
    Ended,
    Named,
    Open,
    Ready,
    Refused,
    Run,
    decode_worker_frame,
    encode,
)
from envharness.runtime.executors.recipe import pickled_recipe
from envharness.runtime.executors.worker import serve
from envharness.runtime.plan import SessionPlan
from envharness.runtime.session import SessionRunner
from tests.runtime.executors.test_driver import MemoryChannel

pytestmark = pytest.mark.anyio

SCENARIO = Scenario(id="long", input=SyntheticScenarioInput(starting_total=0))


def plan(
    scenario: Scenario[SyntheticScenarioInput],
    trial: int,
    seed: int,
    /,
    session_id: str | None = None,
) -> SessionPlan:
    """A session far longer than the test lets it run."""
    return SessionPlan(
        session_id=session_id or new_id("ses"),
        environment=SyntheticEnvironment(),
        agents={"agent": SyntheticAgent()},
        roster={"agent": "agent"},
        scenario=scenario,
        input=scenario.input,
        turns=1_000_000,
        seed=seed,
    )


def pair() -> tuple[MemoryChannel, MemoryChannel]:
    to_worker, worker_in = anyio.create_memory_object_stream[bytes](64)
    to_driver, driver_in = anyio.create_memory_object_stream[bytes](64)
    return MemoryChannel(to_worker, driver_in), MemoryChannel(to_driver, worker_in)


async def serving(worker: MemoryChannel) -> None:
    """The worker side, closing its end once it has served (as the pool's entry point does)."""
    try:
        await serve(worker)
    finally:
        await worker.aclose()


def opening(recipe: object) -> bytes:
    pickled = pickled_recipe(recipe, (), "test")
    return encode(Open(PROTOCOL, pickled.recipe, pickled.reopened, list(sys.path), False))


async def test_a_worker_whose_driver_goes_away_mid_session_ends() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(opening(((SCENARIO,), plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        assert isinstance(decode_worker_frame(await driver.receive()), Named)
        assert isinstance(decode_worker_frame(await driver.receive()), Batch)
        await driver.aclose()  # gone, with a batch never acknowledged
    # the task group ended: serve returned, its sessions ended with it


async def test_a_recipe_that_does_not_load_is_refused_naming_why() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(
            encode(Open(PROTOCOL, b"not a pickle", b"\x80\x05]\x94.", list(sys.path), False))
        )
        refused = decode_worker_frame(await driver.receive())
        await driver.aclose()
    assert isinstance(refused, Refused)
    assert refused.message.startswith("the recipe did not load in the worker: UnpicklingError")


async def test_a_driver_of_another_protocol_is_refused() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(encode(Open(PROTOCOL + 1, b"", b"", [], False)))
        refused = decode_worker_frame(await driver.receive())
        await driver.aclose()
    assert isinstance(refused, Refused)
    assert refused.message == f"this worker speaks protocol {PROTOCOL}, the driver {PROTOCOL + 1}"


def short_plan(
    scenario: Scenario[SyntheticScenarioInput],
    trial: int,
    seed: int,
    /,
    session_id: str | None = None,
) -> SessionPlan:
    return dataclasses.replace(plan(scenario, trial, seed, session_id=session_id), turns=3)


async def test_batches_acknowledged_together_in_one_frame_each_count_as_committed() -> None:
    driver, worker = pair()
    batches: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(opening(((SCENARIO,), short_plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        while not isinstance(frame := decode_worker_frame(await driver.receive()), Ended):
            if isinstance(frame, Batch):
                batches.append(frame.batch)
                # with one nobody waits for (a late acknowledgement is no error)
                await driver.send(encode(Acks([frame.batch, 10_000 + frame.batch])))
        await driver.aclose()
    assert batches
    assert (frame.status, frame.turns_completed, frame.crash) == ("completed", 3, None)
