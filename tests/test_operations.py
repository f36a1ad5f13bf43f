"""Environment operations through the SessionRunner seam: frozen identity, receipts, failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

from envharness import ConfigurationError, EnvironmentHarness, Scenario
from envharness.advanced import OperationResult, SessionRunner
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import OperationReceipt, SessionCreated

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


class Bump:
    name = "bump"
    version = "1"
    config: ClassVar[dict[str, Any]] = {"by": 10}

    def __init__(self) -> None:
        self.client_secret = "never in evidence"

    async def run(self, state: Any, request: Any) -> OperationResult:
        changed = msgspec.structs.replace(state, total=state.total + self.config["by"])
        return OperationResult(result={"bumped": True}, state=changed, changed_state=True)


class Broken(Bump):
    name = "broken"

    async def run(self, state: Any, request: Any) -> OperationResult:
        raise ConnectionError("engine unreachable")


def runner_calling(name: str) -> type[SessionRunner]:
    class Calling(SessionRunner):
        async def before_turn(self, turn: int, state: Any) -> Any:
            if turn == 2:
                _, state = await self.operate(name, {"turn": turn}, state)
            return state

    return Calling


def harness_for(store: Path, name: str, *operations: Any) -> EnvironmentHarness:
    return EnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"a": SyntheticAgent},
        operations=operations,
        runner=runner_calling(name),
    )


def test_an_operation_leaves_a_receipt_and_changes_the_state(store_path: Path) -> None:
    harness = harness_for(store_path, "bump", Bump())
    session = harness.run(START, turns=3)
    assert session.status == "completed"
    records = list(harness.records(session.id))
    created = records[0].payload
    assert isinstance(created, SessionCreated)
    [reference] = created.config.operations
    assert (reference.name, reference.version, reference.config) == ("bump", "1", {"by": 10})
    assert "never in evidence" not in msgspec.json.encode(created).decode()
    [receipt] = [r for r in records if isinstance(r.payload, OperationReceipt)]
    assert receipt.turn == 2
    assert receipt.payload.result == {"bumped": True}
    assert receipt.payload.request == {"turn": 2}
    observed = [r.payload.observation["total"] for r in records if r.kind == "observation"]  # type: ignore[union-attr]
    assert observed[:2] == [0, 10]  # the agent holds 0; the bump before turn 2 adds 10
    assert harness.verify().ok


def test_an_operation_that_raises_fails_the_session_with_its_receipt(store_path: Path) -> None:
    harness = harness_for(store_path, "broken", Broken())
    session = harness.run(START, turns=3)
    assert session.status == "failed"
    assert session.reason == "operation 'broken' raised ConnectionError: engine unreachable"
    [receipt] = [
        r.payload for r in harness.records(session.id) if isinstance(r.payload, OperationReceipt)
    ]
    assert receipt.error is not None
    assert receipt.error.message == "engine unreachable"


def test_an_unknown_operation_fails_the_session_naming_the_known_ones(store_path: Path) -> None:
    session = harness_for(store_path, "teleport", Bump()).run(START, turns=3)
    assert session.status == "failed"
    assert session.reason == "no operation 'teleport' in this session; it has ['bump']"


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        ((Bump(), Bump()), "two operations are named 'bump'"),
        ((object(),), "needs a `name` and a `version`"),
    ],
)
def test_bad_operations_are_refused_up_front(
    store_path: Path, operations: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        harness_for(store_path, "bump", *operations)


def test_the_runner_must_be_a_session_runner(store_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="runner must be a SessionRunner subclass"):
        EnvironmentHarness(
            store_path,
            environment=SyntheticEnvironment,
            agents={"a": SyntheticAgent},
            runner=object,  # type: ignore[arg-type]
        )
