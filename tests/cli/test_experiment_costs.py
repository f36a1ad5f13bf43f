"""What an experiment spent — tokens, money and time, per session and in total — in its report,
``experiments show`` and its ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AgentReply, Cost, EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.scoring import experiment_report
from envharness.store import read_store
from tests.cli._support import Invoke

SCENARIOS = [
    Scenario(id=f"start-{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(2)
]


class Priced:
    implementation = "priced@1"
    runs_inline = True

    def act(self, observation: Any) -> AgentReply:
        cost = Cost(input_tokens=7, output_tokens=3, usd=0.01, seconds=0.5, model="m")
        return AgentReply({"value": 1}, cost)


class Unpriced:
    implementation = "unpriced@1"
    runs_inline = True

    def act(self, observation: Any) -> AgentReply:
        return AgentReply({"value": 0}, Cost(input_tokens=10, output_tokens=0))


@pytest.fixture(scope="module")
def spent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A store with an experiment whose agents reported costs, and one whose did not."""
    store = tmp_path_factory.mktemp("costs") / "store"
    paying = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": Priced, "b": Unpriced}
    )
    costly = paying.experiment("costly", SCENARIOS, turns=3).run()
    free = EnvironmentHarness(store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent})
    cheap = free.experiment("free", SCENARIOS, turns=1).run()
    return store, costly.id, cheap.id


def test_the_report_sums_every_session_s_costs(spent: tuple[Path, str, str]) -> None:
    store, costly, _ = spent

    async def report() -> Any:
        return await experiment_report(await read_store(store), costly)

    found = anyio.run(report)
    total = found.costs
    assert (total.calls, total.priced) == (12, 6)  # 2 sessions x 3 turns x 2 agents
    assert (total.input_tokens, total.output_tokens, total.tokens) == (102, 18, 120)
    assert total.usd == pytest.approx(0.06)
    assert total.seconds == pytest.approx(3.0)
    assert total.wall_seconds >= 0.0
    assert [s.scenario_id for s in found.session_costs] == ["start-0", "start-1"]
    for session in found.session_costs:
        assert (session.status, session.costs.calls, session.costs.tokens) == ("completed", 6, 60)
        assert session.costs.usd == pytest.approx(0.03)
        assert session.costs.wall_seconds >= 0.0


def test_show_prints_what_it_spent(invoke: Invoke, spent: tuple[Path, str, str]) -> None:
    store, costly, _ = spent
    result = invoke("--store", store, "experiments", "show", costly)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    [line] = [line for line in lines if line.startswith("  spent")]
    assert line.startswith(
        "  spent        120 tokens (102 in / 18 out) · $0.0600 (+ 6 unpriced calls) · "
        "12 calls (3.0 s) · ran "
    )
    assert "costs per session, the most expensive first" in lines
    rows = [line.split() for line in lines]
    header = " ".join(lines[lines.index("costs per session, the most expensive first") + 1].split())
    assert header == "session scenario status calls tokens usd call time wall time"
    table = [row for row in rows if row and row[0].startswith("ses_")]
    assert [row[1:7] for row in table] == [
        ["start-0", "completed", "6", "60", "$0.0300", "1.5"],
        ["start-1", "completed", "6", "60", "$0.0300", "1.5"],
    ]


def test_show_says_when_no_costs_were_reported(
    invoke: Invoke, spent: tuple[Path, str, str]
) -> None:
    store, _, cheap = spent
    result = invoke("--store", store, "experiments", "show", cheap)
    assert result.exit_code == 0, result.output
    assert "  spent        no costs reported · ran " in result.stdout
    assert "costs per session" not in result.stdout


def test_show_json_has_the_totals_and_each_session_s(
    invoke: Invoke, spent: tuple[Path, str, str]
) -> None:
    store, costly, _ = spent
    first = invoke("--store", store, "experiments", "show", costly, "--json")
    again = invoke("--store", store, "experiments", "show", costly, "--json")
    assert first.stdout == again.stdout  # the times come from the evidence, not the clock
    report = json.loads(first.stdout)
    assert report["costs"]["calls"] == 12
    assert report["costs"]["usd"] == pytest.approx(0.06)
    assert set(report["costs"]) == {
        "calls", "priced", "input_tokens", "output_tokens", "usd", "seconds", "wall_seconds",
    }  # fmt: skip
    assert [s["costs"]["output_tokens"] for s in report["session_costs"]] == [9, 9]
