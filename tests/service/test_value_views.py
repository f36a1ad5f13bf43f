"""Observations that read well: a nested value drawn as key/value tables with every field name
in view (never a clipped JSON box), short lists inline, long ones counted, everything escaped,
the raw JSON one click away; and a failed session's error on the turn it failed in.

The store is a real run of a small environment whose observation is deep and hostile and whose
second move raises (one run per module).
"""

from __future__ import annotations

import html as stdlib_html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from typing import Any

import msgspec
import pytest

from envharness import EnvironmentHarness, EnvironmentSpec, Resolution, Scenario
from envharness.contracts.environment import ScoreReport
from envharness.service.pages.html import value
from envharness.service.pages.value_view import (
    DEPTH,
    FIELD_LIMIT,
    INLINE_ITEMS,
    ROW_LIMIT,
    STRING_LIMIT,
    needs_table,
    value_table,
)
from tests.service._support import World, get_page, make_world

pytestmark = pytest.mark.anyio

HOSTILE = "<script>alert('kv')</script>"
LONG_LIST = list(range(50))
BOOM = "the vault jammed on move 2"


class VaultInput(msgspec.Struct, frozen=True):
    pass


class Vault(msgspec.Struct, frozen=True):
    moves: int = 0


class Turn(msgspec.Struct, frozen=True):
    dial: int


def deep_observation(moves: int) -> dict[str, Any]:
    """Many fields, some late in the order, nested four deep: a JSON box would hide them."""
    padding = {f"field_{i:02d}": "x" * 120 for i in range(40)}
    return {
        **padding,
        "zz_last_field": {"room": {"door": {"lock": {"pins": [1, 2, 3]}}}},
        "hostile": HOSTILE,
        "readings": LONG_LIST,
        "short": [1, 2, 3],
        "moves": moves,
    }


class VaultEnv:
    spec = EnvironmentSpec(
        name="vault",
        version="1",
        input_type=VaultInput,
        action_type=Turn,
        roles=("player",),
        turn_order="sequential",
        state_type=Vault,
    )

    def initialize(self, input: VaultInput, rng: Random, roster: Mapping[str, str]) -> Vault:
        return Vault()

    def acting(self, state: Vault) -> Sequence[str]:
        return ["alice"]

    def observe(self, state: Vault, participant: str) -> dict[str, Any]:
        return deep_observation(state.moves)

    def resolve(self, state: Vault, actions: Mapping[str, Turn]) -> Resolution:
        if state.moves >= 1:
            raise RuntimeError(BOOM)
        return Resolution(state=Vault(moves=state.moves + 1), outcomes={"alice": {"opened": 0}})

    def intervene(self, state: Vault, intervention: Mapping[str, Any]) -> Vault:
        return state

    def score(self, state: Vault, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={"moves": float(state.moves)})


class Dialer:
    implementation = "dialer@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"dial": 7}


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, str]:
    store = tmp_path_factory.mktemp("value-views") / "store"
    harness = EnvironmentHarness(store, environment=VaultEnv, agents={"alice": Dialer})
    session = harness.run(Scenario(id="vault", input=VaultInput()), turns=5)
    assert session.status == "failed", session.status
    return make_world(store), session.id


def _turn(page: str, turn: int) -> str:
    found = re.search(rf'<section class="turn card" id="turn-{turn}".*?</section>', page, re.S)
    assert found is not None, f"turn {turn} not on the page"
    return found.group(0)


# -- the value as a table ------------------------------------------------------------------------


def test_a_deep_value_is_a_table_with_every_field_name_and_its_json_one_click_away() -> None:
    data = deep_observation(0)
    assert needs_table(data)
    drawn = value_table(data)
    for name in ("field_00", "field_39", "zz_last_field", "room", "door", "lock", "hostile"):
        assert f'<th scope="row" class="kv-key">{name}</th>' in drawn
    assert '<details class="as-json"><summary>JSON</summary><pre class="json">' in drawn
    assert "<script>" not in drawn
    assert stdlib_html.escape(HOSTILE, quote=True) in drawn


def test_short_lists_inline_long_lists_and_strings_counted() -> None:
    drawn = value_table({"short": [1, 2, 3], "long": LONG_LIST, "text": "y" * 500, "n": {}})
    assert '<span class="num">3</span>]' in drawn
    assert f"… {len(LONG_LIST) - INLINE_ITEMS} more" in drawn
    assert f"{500 - STRING_LIMIT} more characters" in drawn


def test_small_flat_values_stay_inline_chips() -> None:
    assert not needs_table({"dial": 7})
    assert not needs_table([1, 2, 3])
    assert not needs_table("text")
    assert value({"dial": 7}).startswith('<span class="kvs">')


def test_nesting_past_the_depth_is_a_short_json_line() -> None:
    deep: Any = {"a": {"b": {"c": {"d": {"e": {"f": HOSTILE}}}}}}
    drawn = value_table(deep)
    assert '<code class="kv-json">' in drawn
    assert "<script>" not in drawn


# -- on the Turns page ---------------------------------------------------------------------------


async def test_the_turns_page_draws_observations_as_tables(vault: tuple[World, str]) -> None:
    world, session_id = vault
    for role in ("viewer", "alice"):
        page = await get_page(world, role, f"/sessions/{session_id}/turns")
        first = _turn(page, 1)
        assert '<th scope="row" class="kv-key">zz_last_field</th>' in first
        assert '<th scope="row" class="kv-key">lock</th>' in first
        assert f"… {len(LONG_LIST) - INLINE_ITEMS} more" in first
        assert "<summary>JSON</summary>" in first
        assert "<script>alert" not in page


async def test_a_failed_session_shows_its_error_on_the_turn_it_failed_in(
    vault: tuple[World, str],
) -> None:
    world, session_id = vault
    page = await get_page(world, "viewer", f"/sessions/{session_id}/turns")
    last = _turn(page, 2)
    assert 'class="kv-failure"' in last
    assert BOOM in last
    assert 'class="kv-failure"' not in _turn(page, 1)


def test_a_long_list_of_objects_is_counted() -> None:
    drawn = value_table([{"i": i, "deep": {"x": [i]}} for i in range(30)])
    assert '<th scope="row" class="kv-key">[19]</th>' in drawn
    assert "[20]</th>" not in drawn
    assert "… 10 more" in drawn


def test_the_live_script_draws_the_same_tables() -> None:
    """viewer.js renders live records itself: it must draw values as the server does."""
    script = (
        Path(__file__).resolve().parents[2] / "envharness/service/pages/static/viewer.js"
    ).read_text()
    for needle in ('"kv-value"', '"kv-table"', '"kv-key"', '"kv-more"', '"kv-json"'):
        assert needle in script, needle
    for name, limit in (("KV_DEPTH", DEPTH), ("KV_ITEMS", INLINE_ITEMS), ("KV_FIELDS", FIELD_LIMIT),
                        ("KV_ROWS", ROW_LIMIT), ("KV_STRING", STRING_LIMIT)):  # fmt: skip
        assert f"{name} = {limit}" in script, name
