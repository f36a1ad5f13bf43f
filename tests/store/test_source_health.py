"""Source health as a verdict (``health_problems``, ``AsyncSources.problems``), the chain check it
runs, and refused imports: noted against a source that holds records, nothing otherwise."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from envharness.api.sources import AsyncSources
from envharness.store.sources import (
    ImportBatch,
    SourceChainError,
    SourceGap,
    SourceHealth,
    SourceStore,
    health_problems,
)
from envharness.trajectories.sources import SourceChain
from tests.trajectories.sources._support import SOURCE, database, dump, episode

OTHER = "acme/other"
BATCH = ImportBatch(source=SOURCE, format="envharness", importer="tests/1", origin="test")


def health(**changes: object) -> SourceHealth:
    figures: dict[str, object] = {
        "source": SOURCE, "head_position": 4, "head_hash": "h", "records": 5, "episodes": 1,
        "formats": ("envharness",), "offered_position": 4, "backlog": 0, "gaps": (),
        "capture_failures": 0, "last_capture_failure": None, "imports": 1, "refused": 0,
        "last_refusal": None, "updated_at": "",
    }  # fmt: skip
    return SourceHealth(**{**figures, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, []),
        ({"capture_failures": 2, "last_capture_failure": "lost 3"}, []),
        (
            {"gaps": (SourceGap(5, 6),), "backlog": 4, "refused": 1, "last_refusal": "gap"},
            ["position(s) 5..6 were never imported (a refused import skipped them); import "
             "them, then the refused records again"],
        ),
        (
            {"backlog": 2, "refused": 1, "last_refusal": "prev"},
            ["2 offered position(s) after the head 4 are not stored: re-send them from the source"],
        ),
        (
            {"refused": 2, "last_refusal": "a conflict"},
            ["its last 2 import(s) were refused: a conflict"],
        ),
        ({"head_position": -1, "head_hash": None, "records": 0, "refused": 1, "backlog": 3}, []),
    ],
    ids=["sound", "capture-failure", "gap", "backlog", "refused", "holds-nothing"],
)  # fmt: skip
def test_health_problems_name_what_an_import_can_mend(
    changes: dict[str, object], expected: list[str]
) -> None:
    assert health_problems(health(**changes)) == expected


@pytest.mark.anyio
async def test_problems_recompute_each_chain_and_scope_to_one_source(store_path: Path) -> None:
    sources = AsyncSources(store_path)
    await sources.import_records(SOURCE, episode(SourceChain(SOURCE)))
    await sources.import_records(OTHER, episode(SourceChain(OTHER)))
    assert await sources.problems() == {}
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET payload = ? WHERE source = ? AND position = 1",
            (b'{"cells":[9]}', SOURCE),
        )

    found = await sources.problems()

    assert list(found) == [SOURCE]
    [problem] = found[SOURCE]
    assert problem.startswith(
        "its stored chain is broken at position 1: position 1: its stored hash"
    )
    # The store's fault, with the store's fix: not advice on how a producer hashes a line.
    assert "altered after it was imported" in problem
    assert problem.endswith("import the source's records again under a new source name")
    assert "docs/imports.md" not in problem
    assert await sources.problems(OTHER) == {}
    assert [b.chain for b in await SourceStore(store_path).verify(SOURCE)] == [SOURCE]
    assert await SourceStore(store_path).verify(OTHER) == []


@pytest.mark.anyio
async def test_a_refusal_is_noted_against_a_source_that_holds_records(store_path: Path) -> None:
    chain = SourceChain(SOURCE)
    first, second = episode(chain, "run-1"), episode(chain, "run-2")
    sources = SourceStore(store_path)
    await sources.append(BATCH, first)
    with pytest.raises(SourceChainError):
        await sources.append(BATCH, second[1:])  # skips the first record of run-2

    [noted] = await sources.health()
    assert (noted.refused, noted.gaps) == (1, (SourceGap(5, 5),))
    assert health_problems(noted)[0].startswith("position(s) 5 were never imported")


@pytest.mark.anyio
async def test_a_refusal_into_a_new_source_writes_nothing(store_path: Path) -> None:
    sources = SourceStore(store_path)
    await sources.append(BATCH, episode(SourceChain(SOURCE)))
    before = dump(store_path)
    with database(store_path) as connection:
        log = connection.execute("SELECT * FROM source_imports").fetchall()
    other = episode(SourceChain(OTHER))
    with pytest.raises(SourceChainError, match="it holds no records yet"):
        await sources.append(
            ImportBatch(source=OTHER, format="envharness", importer="t"), other[2:]
        )

    assert dump(store_path) == before
    with database(store_path) as connection:
        assert connection.execute("SELECT * FROM source_imports").fetchall() == log
    assert [h.source for h in await sources.health()] == [SOURCE]


@pytest.mark.anyio
async def test_a_refusal_into_a_store_that_does_not_exist_creates_none(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    with pytest.raises(SourceChainError, match="it holds no records yet"):
        await SourceStore(store_path).append(BATCH, rows[1:])
    assert not await anyio.Path(store_path).exists()
