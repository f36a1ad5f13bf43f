"""Content-addressed files beside the database: ``artifacts/ab/abcdef…`` named by sha256.

Like the store itself, they are the owner's alone: files 0600, folders 0700 when made here.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["ArtifactFiles"]


class ArtifactFiles:
    """Blocking file operations; the store calls them through ``anyio.to_thread``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def put(self, data: bytes) -> str:
        """Store ``data`` once, atomically and durably; return its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.path(digest)
        if target.exists():
            return digest
        _private_folders(target.parent)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _fsync_directory(target.parent)
        return digest

    def get(self, sha256: str) -> bytes:
        return self.path(sha256).read_bytes()

    def check(self, sha256: str) -> str | None:
        """``None`` when the file is present and intact, else what is wrong with it."""
        path = self.path(sha256)
        if not path.is_file():
            return f"artifact {sha256} is missing from {self.root}"
        hasher = hashlib.sha256()
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                hasher.update(chunk)
        if hasher.hexdigest() != sha256:
            return f"artifact {sha256} was modified (its content no longer has that sha256)"
        return None


def _private_folders(folder: Path) -> None:
    """Make ``folder`` and its missing parents, each made here 0700 whatever the umask."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(mode=0o700, exist_ok=True)
        os.chmod(made, 0o700)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; Windows has no directory handles)."""
    if os.name == "nt":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
