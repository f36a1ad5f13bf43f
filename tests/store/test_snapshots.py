"""The snapshots and datasets tables: rows found by their content address."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from envharness.errors import ConfigurationError
from envharness.store.database import connect
from envharness.store.snapshots import DATASET_PREFIX, SnapshotStore, content_address

pytestmark = pytest.mark.anyio


async def test_a_dataset_id_wins_over_a_name_that_equals_it(store_path: Path) -> None:
    # A store written before such names were refused may hold one: the id, which is unique
    # and content-addressed, must still reach its own dataset.
    (await anyio.to_thread.run_sync(lambda: connect(store_path, create=True))).close()
    datasets = SnapshotStore(store_path)
    first_content = b'{"name":"first"}'
    first_id = content_address(DATASET_PREFIX, first_content)
    impostor_content = b'{"name":"impostor"}'
    impostor_id = content_address(DATASET_PREFIX, impostor_content)
    await datasets.put_dataset(first_id, impostor_id, impostor_content, "2026-01-01T00:00:00Z")
    await datasets.put_dataset("first", first_id, first_content, "2026-01-02T00:00:00Z")
    assert (await datasets.dataset(first_id)).content == first_content
    assert (await datasets.dataset("first")).content == first_content
    assert (await datasets.dataset(impostor_id)).content == impostor_content


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ses_01a228ac4a", r"not a snapshot id: they start with 'snp_'"),
        ("SNP_BB3A148B", r"not a snapshot id: they start with 'snp_'"),
        # These start right and are only short: saying they do not start with snp_ misled.
        ("snp_", r"prefix 'snp_' is too short: give at least 8 characters \('snp_' and 4 more"),
        ("snp_bb3", r"prefix 'snp_bb3' is too short"),
    ],
)
async def test_a_snapshot_id_that_is_not_one_says_what_is_wrong_with_it(
    store_path: Path, given: str, expected: str
) -> None:
    (await anyio.to_thread.run_sync(lambda: connect(store_path, create=True))).close()
    with pytest.raises(ConfigurationError, match=expected) as caught:
        await SnapshotStore(store_path).snapshot(given)
    if given.startswith("snp_"):
        assert "they start with" not in str(caught.value)
