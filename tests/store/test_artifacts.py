"""Artifacts: content-addressed, idempotent, atomic files beside the database."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import anyio
import pytest

from envharness.store import artifacts as artifacts_module
from envharness.store import open_store
from envharness.store.artifacts import ArtifactFiles


def files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def test_put_is_content_addressed(tmp_path: Path) -> None:
    artifacts = ArtifactFiles(tmp_path / "artifacts")
    data = b"some bytes worth keeping"
    digest = artifacts.put(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert artifacts.path(digest) == tmp_path / "artifacts" / digest[:2] / digest
    assert artifacts.path(digest).read_bytes() == data
    assert artifacts.get(digest) == data
    assert files(artifacts.root) == [f"{digest[:2]}/{digest}"]


def test_put_is_idempotent(tmp_path: Path) -> None:
    artifacts = ArtifactFiles(tmp_path / "artifacts")
    digest = artifacts.put(b"same")
    before = artifacts.path(digest).stat()
    assert artifacts.put(b"same") == digest
    after = artifacts.path(digest).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert files(artifacts.root) == [f"{digest[:2]}/{digest}"]


def test_different_content_gets_different_files(tmp_path: Path) -> None:
    artifacts = ArtifactFiles(tmp_path / "artifacts")
    digests = {artifacts.put(data) for data in (b"a", b"b", b"", bytes(range(256)) * 1000)}
    assert len(digests) == 4
    assert len(files(artifacts.root)) == 4
    assert artifacts.get(hashlib.sha256(b"").hexdigest()) == b""


@pytest.mark.parametrize("failing", ["replace", "fsync", "write"])
def test_a_failed_put_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    artifacts = ArtifactFiles(tmp_path / "artifacts")
    artifacts.put(b"already there")

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    if failing == "write":
        original = os.fdopen

        def fdopen(*args: object, **kwargs: object) -> object:
            stream = original(*args, **kwargs)  # type: ignore[call-overload]
            stream.write = fail
            return stream

        monkeypatch.setattr(artifacts_module.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(artifacts_module.os, failing, fail)
    data = b"x" * 100_000
    with pytest.raises(OSError, match="No space left"):
        artifacts.put(data)
    monkeypatch.undo()
    digest = hashlib.sha256(data).hexdigest()
    assert not artifacts.path(digest).exists()
    # Neither the target nor a temporary file: only the artifact that was there before.
    assert files(artifacts.root) == [
        f"{digest[:2]}/{digest}" for digest in [hashlib.sha256(b"already there").hexdigest()]
    ]
    # A later put of the same content succeeds.
    assert artifacts.put(data) == digest
    assert artifacts.get(digest) == data


def test_check_reports_missing_and_modified_files(tmp_path: Path) -> None:
    artifacts = ArtifactFiles(tmp_path / "artifacts")
    digest = artifacts.put(b"original")
    assert artifacts.check(digest) is None
    artifacts.path(digest).write_bytes(b"changed")
    assert "was modified" in (artifacts.check(digest) or "")
    artifacts.path(digest).unlink()
    assert "is missing" in (artifacts.check(digest) or "")
    assert "is missing" in (artifacts.check("ab" * 32) or "")


def test_check_reads_large_files_in_chunks(tmp_path: Path) -> None:
    artifacts = ArtifactFiles(tmp_path / "artifacts")
    data = os.urandom(3 * (1 << 20) + 17)
    digest = artifacts.put(data)
    assert artifacts.check(digest) is None


@pytest.mark.anyio
async def test_the_store_puts_artifacts_under_its_directory(store_path: Path) -> None:
    async with open_store(store_path) as store:
        digest = await store.put_artifact(b"from the store")
        assert store.artifacts.get(digest) == b"from the store"
    assert (store_path / "artifacts" / digest[:2] / digest).read_bytes() == b"from the store"


@pytest.mark.anyio
async def test_concurrent_puts_of_the_same_content_all_succeed(store_path: Path) -> None:
    data = os.urandom(200_000)
    digests: list[str] = []

    async with open_store(store_path) as store:

        async def put() -> None:
            digests.append(await store.put_artifact(data))

        async with anyio.create_task_group() as group:
            for _ in range(16):
                group.start_soon(put)
    assert set(digests) == {hashlib.sha256(data).hexdigest()}
    assert len(digests) == 16
    assert files(store_path / "artifacts") == [f"{digests[0][:2]}/{digests[0]}"]
