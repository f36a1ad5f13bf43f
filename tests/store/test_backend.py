"""The store's database as one object: its helpers reach it through ``Store.backend``, and a
store directory handed to them instead still reaches the same database."""

from __future__ import annotations

import ast
import hashlib
import sqlite3
from pathlib import Path

import pytest

import envharness
from envharness.errors import (
    DamagedStoreError,
    NotFoundError,
    StoreBusyError,
    StoreError,
    StoreLayoutError,
)
from envharness.records import RunnerRef
from envharness.store import open_store, read_store
from envharness.store.backend import SqliteBackend, backend_of
from envharness.store.control import ControlRequests
from envharness.store.snapshots import SnapshotStore
from envharness.store.sources.store import SourceStore
from envharness.store.tokens import TokenStore

pytestmark = pytest.mark.anyio


async def test_every_helper_reaches_the_store_through_its_backend(store_path: Path) -> None:
    async with open_store(store_path) as store:
        assert isinstance(store.backend, SqliteBackend)
        assert store.backend.directory == store.directory
        helpers = (
            TokenStore(store.backend),
            ControlRequests(store.backend),
            SnapshotStore(store.backend),
            SourceStore(store.backend),
        )
        assert all(helper.backend is store.backend for helper in helpers)
        issued = await TokenStore(store.backend).issue("viewer", label="through the backend")
        runner = RunnerRef(host="h", pid=1, started="t")
        asked = await ControlRequests(store.backend).ask("ses_x", "stop", runner, "test")
    # A directory still works while callers outside the store are moved over: same rows.
    reader = await read_store(store_path)
    assert [t.id for t in await TokenStore(reader.directory).tokens()] == [issued.info.id]
    assert await ControlRequests(reader.directory).get(asked.id) == asked
    assert backend_of(reader.directory).directory == store_path


async def test_a_write_is_one_transaction_and_a_read_sees_it(store_path: Path) -> None:
    async with open_store(store_path) as store:
        backend = store.backend

        def insert_then_fail(connection: sqlite3.Connection) -> None:
            connection.execute("INSERT INTO datasets VALUES ('n', 'i', x'00', 't')")
            raise RuntimeError("halfway")

        with pytest.raises(RuntimeError, match="halfway"):
            await backend.write(insert_then_fail)
        count = "SELECT count(*) FROM datasets"
        assert await backend.read(lambda c: c.execute(count).fetchone()[0]) == 0
        await backend.write(
            lambda c: c.execute("INSERT INTO datasets VALUES ('n', 'i', x'00', 't')")
        )
        assert await backend.read(lambda c: c.execute(count).fetchone()[0]) == 1


async def test_a_read_cannot_write(store_path: Path) -> None:
    async with open_store(store_path) as store:
        with pytest.raises(StoreError, match="attempt to write a readonly database"):
            await store.backend.read(lambda c: c.execute("DELETE FROM tokens"))


def test_a_missing_store_is_named_and_not_created(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "nowhere")
    assert not backend.exists()
    assert backend.location == str(tmp_path / "nowhere")
    with pytest.raises(StoreLayoutError, match="no evidence store at"):
        backend.connect(create=False)
    assert not (tmp_path / "nowhere").exists()


def test_sqlite_errors_become_store_errors_naming_the_store(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path)
    busy = backend.translate(sqlite3.OperationalError("database is locked"))
    assert isinstance(busy, StoreBusyError)
    other = backend.translate(sqlite3.OperationalError("no such table: x"))
    assert str(tmp_path) in str(other)
    assert "no such table: x" in str(other)


async def test_artifacts_are_read_through_the_backend_and_checked(store_path: Path) -> None:
    data = b"an artifact kept beside the evidence"
    async with open_store(store_path) as store:
        sha256 = await store.put_artifact(data)
    backend = (await read_store(store_path)).backend
    assert await backend.artifact(sha256) == data
    assert await backend.artifact_prefix(sha256, 10) == data[:10]
    assert await backend.artifact_prefix(sha256, 1000) == data


async def test_a_missing_artifact_is_not_found_naming_the_store(store_path: Path) -> None:
    async with open_store(store_path) as store:
        backend = store.backend
    absent = hashlib.sha256(b"never kept").hexdigest()
    with pytest.raises(NotFoundError) as missing:
        await backend.artifact(absent)
    assert f"artifact {absent} is missing from the store at {str(store_path)!r}" in str(
        missing.value
    )
    assert "envharness verify" in str(missing.value)
    assert await backend.artifact_prefix(absent, 10) is None


async def test_a_changed_artifact_is_refused_not_returned(store_path: Path) -> None:
    async with open_store(store_path) as store:
        sha256 = await store.put_artifact(b"as recorded")
    kept = store_path / "artifacts" / sha256[:2] / sha256
    kept.chmod(0o600)
    kept.write_bytes(b"as changed later")
    backend = SqliteBackend(store_path)
    with pytest.raises(DamagedStoreError, match=f"artifact {sha256} .* was modified"):
        await backend.artifact(sha256)
    # A preview is unchecked: the page shows the record, and verify reports the change.
    assert await backend.artifact_prefix(sha256, 5) == b"as ch"


def test_a_store_path_given_as_text_or_path_names_the_same_backend(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path)
    assert backend_of(backend) is backend
    assert backend_of(str(tmp_path)).directory == tmp_path
    assert backend_of(tmp_path).directory == tmp_path


SEAMED = ("service", "trajectories", "optimizer/runlog.py")
"""What reaches the store's database only through ``Store.backend`` (and the helpers given it):
never a store's directory, its artifact files or a ``sqlite3`` connection of its own."""
_FOLDER_OF_LINK_CODES = ("service/link_codes.py", "_folder")
"""The one exception: sign-in codes are files of a SQLite store's folder (no table yet)."""


def _seam_breaches(path: Path, name: str) -> list[str]:
    found: list[str] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (name, node.name) == _FOLDER_OF_LINK_CODES:
            allowed |= {id(inner) for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("directory", "artifacts"):
            if id(node) not in allowed:
                found.append(f"{name}:{node.lineno} uses .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "envharness.store.connections":
            found.append(f"{name}:{node.lineno} opens connections itself")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "sqlite3.connect":
            found.append(f"{name}:{node.lineno} connects to SQLite itself")
    return found


def test_the_service_and_trajectories_reach_the_store_through_its_backend() -> None:
    root = Path(envharness.__file__).parent
    files = [
        path
        for seamed in SEAMED
        for path in ([root / seamed] if seamed.endswith(".py") else (root / seamed).rglob("*.py"))
    ]
    assert len(files) > 50
    breaches = [
        breach
        for path in files
        for breach in _seam_breaches(path, path.relative_to(root).as_posix())
    ]
    assert breaches == []
