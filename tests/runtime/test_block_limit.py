"""The block limit: after ``max_blocks`` vetoes in a row, ``on_block_limit`` skips the
participant's turn (the default) or runs its last answer; the choice is recorded in the
session's configuration and kept by a continuation and a branch."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from envharness import (
    AsyncEnvironmentHarness,
    BlockAndPrompt,
    ConfigurationError,
    EnvironmentHarness,
    EnvironmentSpec,
    HookContext,
    Hooks,
    Resolution,
    Scenario,
)
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Log,
    SessionConfig,
    SessionCreated,
)
from envharness.runtime.template import keeping_block_limit

pytestmark = pytest.mark.anyio

REFUSED = "not that"


class KnockInput(msgspec.Struct, frozen=True):
    pass


class Knocking:
    """Counts knocks; never over by itself."""

    spec = EnvironmentSpec(name="knocking", version="1", input_type=KnockInput)

    def initialize(self, input: KnockInput, rng: Random, roster: Any) -> dict[str, int]:
        return {"knocks": 0}

    def observe(self, state: dict[str, int], participant: str) -> dict[str, int]:
        return dict(state)

    def resolve(self, state: dict[str, int], actions: Mapping[str, Any]) -> Resolution:
        new = {"knocks": state["knocks"] + len(actions)}
        return Resolution(state=new, outcomes={name: dict(new) for name in actions})

    def intervene(self, state: dict[str, int], intervention: Mapping[str, Any]) -> Any:
        return {**state, **intervention}


def naysayer(ctx: HookContext, nb: dict[str, Any]) -> BlockAndPrompt:
    """Vetoes every answer."""
    return BlockAndPrompt(message=REFUSED)


HOOKS = Hooks("naysayer@1", on_before_action=naysayer)


class Knocker:
    implementation = "knocker@1"

    def act(self, observation: Any) -> dict[str, str]:
        return {"do": "knock"}


SCENARIO = Scenario(id="door", input=KnockInput())


def harness(store_path: Path, **options: Any) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store_path, environment=Knocking, agents={"alice": Knocker}, hooks=HOOKS, **options
    )


async def played(
    store_path: Path, session_id: str
) -> tuple[SessionConfig, dict[int, list[type[Any]]], list[Any]]:
    """The session's configuration, each turn's record kinds, and its records."""
    records = [r async for r in harness(store_path).records(session_id)]
    [config] = [r.payload.config for r in records if isinstance(r.payload, SessionCreated)]
    kinds: dict[int, list[type[Any]]] = {}
    watched = (ActionAttempted, ActionBlocked, ActionExecuted, Log)
    for record in records:
        if record.turn is not None and isinstance(record.payload, watched):
            kinds.setdefault(record.turn, []).append(type(record.payload))
    return config, kinds, records


async def test_run_last_runs_the_last_answer_after_the_blocks_before_it(
    store_path: Path,
) -> None:
    session = await harness(store_path, max_blocks=2, on_block_limit="run_last").run(
        SCENARIO, turns=1
    )
    assert session.status == "completed"
    config, kinds, records = await played(store_path, session.id)
    assert (config.max_blocks, config.on_block_limit) == (2, "run_last")
    assert kinds[1] == [ActionAttempted, ActionBlocked, ActionAttempted, Log, ActionExecuted]
    [log] = [r.payload for r in records if isinstance(r.payload, Log)]
    assert log.stream == "harness"
    assert log.level == "warning"
    assert "run_last" in log.message
    assert REFUSED in log.message
    [executed] = [r.payload for r in records if isinstance(r.payload, ActionExecuted)]
    assert executed.outcome == {"knocks": 1}


async def test_skip_is_the_default_and_is_recorded(store_path: Path) -> None:
    session = await harness(store_path, max_blocks=2).run(SCENARIO, turns=1)
    config, kinds, _ = await played(store_path, session.id)
    assert (config.max_blocks, config.on_block_limit) == (2, "skip")
    assert kinds[1] == [ActionAttempted, ActionBlocked, ActionAttempted, ActionBlocked]


async def test_a_session_without_hooks_records_no_block_limit(store_path: Path) -> None:
    plain = AsyncEnvironmentHarness(store_path, environment=Knocking, agents={"alice": Knocker})
    session = await plain.run(SCENARIO, turns=1)
    config, _, _ = await played(store_path, session.id)
    assert config.max_blocks is None
    assert config.on_block_limit is UNSET
    assert b"on_block_limit" not in msgspec.json.encode(config)


def test_a_configuration_recorded_before_the_policy_reads_and_writes_the_same_bytes() -> None:
    """Re-encoding an older configuration adds nothing: its digest still holds."""
    written = msgspec.json.encode(
        SessionConfig(
            environment=Knocking.spec.reference(),
            participants={},
            scenario=SCENARIO.reference_record(KnockInput()),
            seed=1,
            turns=2,
            envharness_version="0",
            max_blocks=3,
        )
    )
    assert b"on_block_limit" not in written
    config = msgspec.json.decode(written, type=SessionConfig)
    assert config.on_block_limit is UNSET
    assert msgspec.json.encode(config) == written


@pytest.mark.parametrize("value", ["last", "RUN_LAST", "", None, 1])
def test_a_bad_policy_is_refused_naming_the_choices(store_path: Path, value: Any) -> None:
    refused = "on_block_limit must be one of 'skip', 'run_last'"
    with pytest.raises(ConfigurationError, match=refused):
        harness(store_path, on_block_limit=value)
    with pytest.raises(ConfigurationError, match="on_block_limit"):
        EnvironmentHarness(
            store_path, environment=Knocking, agents={"alice": Knocker}, on_block_limit=value
        )


async def test_a_continuation_keeps_the_recorded_policy(store_path: Path) -> None:
    first = await harness(store_path, max_blocks=1, on_block_limit="run_last").run(
        SCENARIO, turns=1
    )
    # Today's harness says otherwise: the session goes on under the rules it was recorded with.
    await harness(store_path, max_blocks=5).continue_(first.id, turns=1)
    _, kinds, _ = await played(store_path, first.id)
    assert kinds[2] == [ActionAttempted, Log, ActionExecuted]


async def test_a_branch_keeps_the_recorded_policy(store_path: Path) -> None:
    recorded = harness(store_path, max_blocks=1, on_block_limit="run_last")
    first = await recorded.run(SCENARIO, turns=1)
    child = await recorded.branch(
        await recorded.checkpoint(first.id), intervention={"knocks": 10}, reason="test"
    )
    await harness(store_path).continue_(child.id, turns=1)
    config, kinds, _ = await played(store_path, child.id)
    assert config.on_block_limit == "run_last"
    assert kinds[2] == [ActionAttempted, Log, ActionExecuted]


def test_a_session_recorded_before_the_policy_goes_on_skipping() -> None:
    """A session recorded with hooks before ``on_block_limit`` existed skipped at the limit:
    so it does when resumed, whatever today's harness says."""
    from envharness.runtime.plan import SessionPlan

    plan = SessionPlan(
        session_id="ses_x",
        environment=Knocking(),
        agents={"alice": Knocker()},
        roster={"alice": "player"},
        scenario=SCENARIO,
        input=KnockInput(),
        turns=2,
        seed=0,
        hooks=HOOKS,
        max_blocks=7,
        on_block_limit="run_last",
    )
    old = msgspec.structs.replace(plan.config(), max_blocks=3, on_block_limit=UNSET)
    kept = keeping_block_limit(plan, old)
    assert (kept.max_blocks, kept.on_block_limit) == (3, "skip")
    unhooked = msgspec.structs.replace(old, max_blocks=None)
    assert keeping_block_limit(plan, unhooked) is plan
