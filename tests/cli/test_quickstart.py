"""``quickstart``: a store worth exploring, and an honest note that it measures nothing."""

from __future__ import annotations

from pathlib import Path

import anyio

from envharness.records import SessionCreated
from envharness.store import RecordFilter, read_store
from tests.cli._support import Invoke


async def _rosters_and_kinds(store: Path) -> tuple[set[int], dict[str, int], set[str]]:
    reader = await read_store(store)
    sizes: set[int] = set()
    kinds: dict[str, int] = {}
    statuses = {info.status for info in await reader.sessions()}
    for info in await reader.sessions():
        async for record in reader.records(info.id):
            kinds[record.kind] = kinds.get(record.kind, 0) + 1
            if isinstance(record.payload, SessionCreated):
                sizes.add(len(record.payload.config.participants))
    return sizes, kinds, statuses


def test_quickstart_writes_varied_sessions_and_says_what_they_are(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "quickstart", "--turns", "4")

    assert result.exit_code == 0, result.output
    assert "measure nothing" in result.stdout
    assert str(store_path.resolve()) in result.stdout
    assert "wrote 16 sessions" in result.stdout
    for command in ("sessions", "show ses_", "verify", "export ses_"):
        assert f"envharness --store {store_path.resolve()} {command}" in result.stdout
    sizes, kinds, statuses = anyio.run(_rosters_and_kinds, store_path)
    assert sizes == {1, 2, 3}
    assert kinds["action.blocked"] > 0
    assert kinds["finding"] > 0
    assert kinds["score"] > 0
    assert statuses == {"completed", "failed"}


def test_the_suggested_show_has_a_blocked_action_and_a_finding(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "quickstart", "--turns", "4")
    suggested = next(
        line.split()[-1] for line in result.stdout.splitlines() if " show ses_" in line
    )

    async def notable() -> list[str]:
        reader = await read_store(store_path)
        selection = RecordFilter(kinds=("action.blocked", "finding"))
        return [record.kind async for record in reader.records(suggested, selection)]

    assert {"action.blocked", "finding"} <= set(anyio.run(notable))


def test_quickstart_adds_to_an_existing_store(invoke: Invoke, store_path: Path) -> None:
    invoke("--store", store_path, "quickstart", "--turns", "1")
    invoke("--store", store_path, "quickstart", "--turns", "1")

    listed = invoke("--store", store_path, "sessions", "--json")

    assert len(listed.stdout.splitlines()) == 32


def test_quickstart_refuses_zero_turns(invoke: Invoke, store_path: Path) -> None:
    result = invoke("--store", store_path, "quickstart", "--turns", "0")

    assert result.exit_code == 2
    assert not store_path.exists()
