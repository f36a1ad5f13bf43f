"""Set up and run envharness from a fresh clone, with nothing but Python 3.11+.

    python3 tools/dev.py demo   # venv + install, write the quickstart store, serve the viewer
    python3 tools/dev.py test   # venv + dev install, then ruff, mypy (strict) and pytest

The virtual environment lives in ``.venv``; it is reused while ``pyproject.toml`` is unchanged.
Exit status is non-zero when any step fails, so CI can call ``test`` directly.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STORE = ROOT / "environment-sessions"


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script must explain, not crash
        print("envharness needs Python 3.11 or newer", file=sys.stderr)
        return 2
    command = argv[1] if len(argv) > 1 else ""
    if command == "demo":
        install("server")
        return demo(argv[2:])
    if command == "test":
        install("dev")
        return test(argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


def install(extra: str) -> None:
    """Create ``.venv`` and install the package with ``extra``, unless already up to date."""
    if not PYTHON.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = VENV / f".installed-{extra}"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PYTHON, "-m", "pip", "install", "--quiet", "-e", f".[{extra}]")
    stamp.write_text(wanted)


def demo(extra_args: list[str]) -> int:
    """The quickstart store, then the viewer on it (Ctrl-C stops the server)."""
    envharness = str(BIN / "envharness")
    status = call(envharness, "--store", str(STORE), "quickstart", "--turns", "3")
    if status != 0:
        return status
    return call(envharness, "--store", str(STORE), "serve", "--open", *extra_args)


def test(pytest_args: list[str]) -> int:
    steps = [
        [str(PYTHON), "-m", "ruff", "format", "--check", "."],
        [str(PYTHON), "-m", "ruff", "check", "."],
        [str(PYTHON), "-m", "mypy"],
        [str(PYTHON), "-m", "pytest", *pytest_args],
    ]
    failed = [" ".join(step[2:4]) for step in steps if call(*step) != 0]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def run(*command: object) -> None:
    subprocess.run([str(part) for part in command], cwd=ROOT, check=True)


def call(*command: str) -> int:
    print(f"$ {' '.join(command)}", flush=True)
    return subprocess.call(command, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
