"""Sign-in codes and the server's address, kept beside the store for ``envharness login-link``.

A running ``serve`` holds its own codes in memory (:mod:`.codes`); a second process cannot reach
them. So ``login-link`` leaves a code where the server looks: a file in ``<store>/service/
codes/`` named by the code's sha256 (never the code itself), holding its wall-clock deadline.
This grants nothing new: whoever can write the store can already issue an admin token with
``envharness token``. Redeeming removes the file, and only one ``unlink`` of a path can succeed,
so two requests racing with one code sign in at most one browser.

``serve`` records the address it listens on in ``<store>/service/address`` so that
``login-link`` prints a link to it without being told the port. No module here imports
Starlette: the command line uses this without the ``server`` extra.

A store is given as its backend (``Store.backend``, as the service passes it) or its directory
(as the command line still does). A SQLite store keeps them in its own directory. A PostgreSQL
store has none, and its database is the wrong place: every role that may read the table would
read a live code. Its files go to this OS user's state directory instead
(``$XDG_STATE_HOME/envharness/service/``, by default ``~/.local/state/...``; 0700 folders,
0600 files), one folder per server and database (never the user or password: ``serve`` and
``login-link`` may connect as different roles). ``login-link`` prints a loopback link, so it
runs on the host that serves, as the same OS user: that is who can read the code, as with
SQLite.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from envharness.service.codes import LOGIN_CODE_TTL
from envharness.store.backend import BackendOrPath, backend_of
from envharness.store.postgres.backend import PostgresBackend

__all__ = [
    "StoreOf",
    "clear_address",
    "issue_stored_code",
    "read_address",
    "record_address",
    "redeem_stored_code",
    "service_directory",
]

_MAX_CODE = 200
"""Longer than any code issued; a longer one is refused before hashing."""

StoreOf = BackendOrPath | PostgresBackend
"""A store as these functions take it: a backend of either engine, or a store directory."""


def service_directory(store: StoreOf) -> Path:
    """Where a store keeps what its running service shares with other processes (0700)."""
    directory = _folder(store)
    if isinstance(store, PostgresBackend):
        _private_folders(_state_home(), directory)
    directory.mkdir(mode=0o700, exist_ok=True)
    (directory / "codes").mkdir(mode=0o700, exist_ok=True)
    return directory


def issue_stored_code(
    store: StoreOf, *, ttl: float = LOGIN_CODE_TTL, clock: Callable[[], float] = time.time
) -> str:
    """A fresh one-time code any ``serve`` of ``store`` accepts until ``ttl`` seconds pass."""
    codes = service_directory(store) / "codes"
    _forget_expired(codes, clock())
    code = secrets.token_urlsafe(24)
    _write_private(codes / _digest(code), f"{clock() + ttl!r}\n")
    return code


def redeem_stored_code(
    store: StoreOf, code: str, *, clock: Callable[[], float] = time.time
) -> bool:
    """True once for a live stored code; a used, expired or unknown code is refused alike.

    Blocking file work: the service calls it in a worker thread.
    """
    if not code or len(code) > _MAX_CODE:
        return False
    digest = _digest(code)
    codes = _folder(store) / "codes"
    try:
        names = os.listdir(codes)
    except OSError:
        return False
    # Compared in constant time, each against every name: no timing says how close a guess was.
    match = None
    for name in names:
        if hmac.compare_digest(name.encode(), digest.encode()):
            match = name
    if match is None:
        return False
    path = codes / match
    try:
        deadline = float(path.read_text(encoding="utf-8").strip() or "0")
        path.unlink()  # only one redeemer's unlink succeeds: single use even under a race
    except (OSError, ValueError):
        return False
    return clock() < deadline


def record_address(store: StoreOf, url: str) -> Path:
    """Write the running server's URL for ``login-link``; returns the file to remove later."""
    path = service_directory(store) / "address"
    temporary = path.with_name(f".address-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    _write_private(temporary, url + "\n")
    os.replace(temporary, path)
    return path


def clear_address(path: Path, url: str) -> None:
    """Remove the address file if it still names ``url`` (another ``serve`` may own it now)."""
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8").strip() == url:
            path.unlink()


def read_address(store: StoreOf) -> str | None:
    """The URL the store's running server recorded, ``None`` when none is recorded."""
    try:
        url = (_folder(store) / "address").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return url or None


def _folder(store: StoreOf) -> Path:
    """The store's folder for its service (not made here)."""
    if isinstance(store, PostgresBackend):
        where = store.where
        key = hashlib.sha256(f"{where.host}:{where.port}/{where.database}".encode()).hexdigest()
        return _state_home() / "envharness" / "service" / f"postgresql-{key[:24]}"
    return backend_of(store).directory / "service"


def _state_home() -> Path:
    """This user's state directory (the XDG base directory rule: an absolute
    ``$XDG_STATE_HOME``, else ``~/.local/state``)."""
    given = os.environ.get("XDG_STATE_HOME", "")
    return Path(given) if os.path.isabs(given) else Path.home() / ".local" / "state"


def _private_folders(base: Path, directory: Path) -> None:
    """Make ``directory``'s folders from ``base`` down, each 0700; one of ours found with more
    access (made by hand, or under another umask) is narrowed to 0700."""
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = base
    for part in directory.relative_to(base).parts:
        folder = folder / part
        folder.mkdir(mode=0o700, exist_ok=True)
        if folder.stat().st_mode & 0o077:
            folder.chmod(0o700)


def _forget_expired(codes: Path, now: float) -> None:
    for path in codes.iterdir():
        with contextlib.suppress(OSError, ValueError):
            if float(path.read_text(encoding="utf-8").strip() or "0") <= now:
                path.unlink()


def _write_private(path: Path, text: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(path, flags, 0o600), "w", encoding="utf-8") as file:
        file.write(text)


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()
