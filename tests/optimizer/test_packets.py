"""The failure packet: steps and hook views rebuilt from the journal, clusters, contrasts, keys."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec

from envharness import AsyncEnvironmentHarness, EnvironmentSpec, Hooks, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.hooks import BlockAndPrompt, HookContext
from envharness.optimizer import FailurePacket, PacketLimits, build_packet
from envharness.optimizer.engineers.evidence import experiment_traces
from envharness.optimizer.engineers.packets import forbidden_terms_of, hook_view_of
from envharness.store import read_store


class CarefulPolicy(RefundFirstPolicy):
    """Looks the order up first: its sessions pass (the contrast)."""

    implementation = "careful@1"

    def act(self, observation: Any) -> dict[str, Any]:
        order = observation["order_id"]
        plan = [
            {"tool": "lookup_order", "order_id": order},
            {"tool": "issue_refund", "order_id": order, "amount": observation["amount_requested"]},
            {"tool": "reply", "template": "refund_issued"},
        ]
        done = observation["done"]
        return next((step for step in plan if step not in done), plan[-1])


class MixedPolicy:
    """Careful on even-numbered orders, refund-first on the others."""

    implementation = "mixed@1"

    def __init__(self) -> None:
        self._careful = CarefulPolicy()
        self._hasty = RefundFirstPolicy()

    def act(self, observation: Any) -> dict[str, Any]:
        careful = int(observation["order_id"].split("-")[1]) % 2 == 0
        return (self._careful if careful else self._hasty).act(observation)


async def packet_of(
    store: Path, policy: Any, count: int, *, hooks: Any = None, **options: Any
) -> FailurePacket:
    harness = AsyncEnvironmentHarness(store, environment=SupportDesk, agents={"alice": policy})
    result = await harness.experiment("baseline", tickets(count), turns=8, hooks=hooks).run()
    reader = await read_store(store)
    traces = await experiment_traces(reader, result.id)
    return await build_packet(reader, traces, SupportDesk(), **options)


async def test_failed_sessions_are_clustered_with_their_hook_views(
    anyio_backend: str, tmp_path: Path
) -> None:
    packet = await packet_of(tmp_path / "store", RefundFirstPolicy, 3)
    assert packet.environment == "support-desk@1"
    assert packet.hooks == ("on_init", "make_pre_hint", "on_before_action", "on_post_step")
    assert packet.state_keys == ("amount_requested", "order_id", "tool_calls")
    assert packet.predicate_keys == ("order_looked_up", "refund_issued", "reply_sent")
    assert packet.forbidden_terms == ("refund_before_lookup",)
    assert packet.passing == ()
    assert packet.task is not None
    assert packet.task.startswith("Ada asks for a refund")
    (cluster,) = packet.clusters
    assert cluster.signature == "issue_refund → lookup_order → reply | not passed"
    assert len(cluster.sessions) == 3
    assert "3 failed session(s) over 3 scenario(s)" in cluster.description
    example = cluster.example
    assert example.passed is False
    assert example.reward == 0.0
    assert [step.action["tool"] for step in example.steps] == [
        "issue_refund",
        "lookup_order",
        "reply",
    ]
    # Each step shows what a hook would have seen *before* it: the state loaded from its blob.
    assert [step.predicates["order_looked_up"] for step in example.steps] == [False, False, True]
    assert [step.predicates["refund_issued"] for step in example.steps] == [False, True, True]
    assert [step.state["tool_calls"] for step in example.steps] == [0, 1, 2]
    assert example.steps[0].admissible is not None
    assert {"tool": "lookup_order", "order_id": "A-1000"} in example.steps[0].admissible
    assert example.steps[1].outcome["ok"] is True
    assert example.steps[1].outcome["order"]["id"] == "A-1000"
    assert "paid" not in example.steps[0].state, "hooks never see the paid amount"
    assert len(packet.action_examples) == 3 * 2 + 3 - 2  # distinct actions over three tickets


async def test_passing_sessions_are_contrasts_with_distinct_signatures_first(
    anyio_backend: str, tmp_path: Path
) -> None:
    packet = await packet_of(tmp_path / "store", MixedPolicy, 4)
    assert len(packet.clusters) == 1
    assert len(packet.clusters[0].sessions) == 2
    assert len(packet.passing) == 2
    assert all(example.passed for example in packet.passing)
    assert [s.action["tool"] for s in packet.passing[0].steps][:1] == ["lookup_order"]


async def test_blocked_attempts_show_who_blocked_them(anyio_backend: str, tmp_path: Path) -> None:
    def look_first(ctx: HookContext, nb: dict[str, Any]) -> Any:
        if ctx.action.get("tool") == "issue_refund" and not ctx.predicates["order_looked_up"]:
            return BlockAndPrompt(message="look it up first")
        return None

    hooks = Hooks("look-first@1", on_before_action=look_first)
    packet = await packet_of(
        tmp_path / "store", RefundFirstPolicy, 2, hooks=hooks, current_patch={"ops": []}
    )
    assert packet.clusters == ()
    assert packet.current_patch == {"ops": []}
    first = packet.passing[0].steps[0]
    assert first.action["tool"] == "issue_refund"
    assert first.blocked == "hook: look it up first"
    assert packet.passing[0].steps[1].step == first.step, "re-asked in the same turn"


async def test_limits_keep_a_packet_small(anyio_backend: str, tmp_path: Path) -> None:
    limits = PacketLimits(clusters=1, passing=1, steps=2, action_examples=2)
    packet = await packet_of(tmp_path / "store", MixedPolicy, 4, limits=limits)
    assert len(packet.clusters) == 1
    assert len(packet.passing) == 1
    assert len(packet.clusters[0].example.steps) == 2
    assert len(packet.action_examples) == 2


class Plain:
    """No hook_view, no forbidden terms; a JSON-object state."""

    spec = EnvironmentSpec(name="plain", version="1", input_type=dict)

    def initialize(self, input: Any, rng: Random, roster: Mapping[str, str]) -> dict[str, Any]:
        return {"count": 0, "secret": "s"}

    def observe(self, state: Any, participant: str) -> Any:
        return {"count": state["count"]}

    def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
        return Resolution(state={**state, "count": state["count"] + 1}, done=state["count"] >= 1)

    def intervene(self, state: Any, intervention: Any) -> Any:
        return state

    def score(self, state: Any, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={"count": float(state["count"])}, passed=False)


class Counter:
    implementation = "counter@1"

    def act(self, observation: Any) -> dict[str, str]:
        return {"do": "count"}


async def test_without_hook_view_a_json_state_is_shown_whole(
    anyio_backend: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(store, environment=Plain, agents={"a": Counter})
    result = await harness.experiment("e", [Scenario(id="s", input={})], turns=3).run()
    reader = await read_store(store)
    packet = await build_packet(reader, await experiment_traces(reader, result.id), Plain())
    assert packet.state_keys == ("count", "secret")
    assert packet.predicate_keys == ()
    assert packet.forbidden_terms == ()
    assert [s.state["count"] for s in packet.clusters[0].example.steps] == [0, 1]


class Broken:
    spec = Plain.spec

    def hook_view(self, state: Any, participant: str) -> Any:
        raise ValueError("no view")


def test_views_and_forbidden_terms_degrade_safely() -> None:
    assert hook_view_of(Broken(), {"a": 1}, "p").state == {}
    assert hook_view_of(Plain(), ["not", "an", "object"], "p").state == {}
    assert hook_view_of(SupportDesk(), SupportDesk().initialize(
        tickets(1)[0].input, Random(0), {"a": "agent"}
    ), "a").predicates["order_looked_up"] is False  # fmt: skip

    class Terms:
        hook_forbidden_terms = "answer"

    assert forbidden_terms_of(Terms()) == ("answer",)
    assert forbidden_terms_of(object()) == ()


def test_packets_encode_as_json_for_a_prompt(tmp_path: Path) -> None:
    async def build() -> FailurePacket:
        return await packet_of(tmp_path / "store", RefundFirstPolicy, 2)

    packet = anyio.run(build)
    assert msgspec.json.decode(msgspec.json.encode(packet), type=FailurePacket) == packet
