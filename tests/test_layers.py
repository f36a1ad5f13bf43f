"""The folder tree is the layer diagram: a module imports only its own layer or those above.

The order between packages is DESIGN.md's (docs/architecture.md draws it); inside the larger
packages, the order of their modules is written here too, one level down. Every import counts,
also one inside a function: a function-level import is still a dependency, only a hidden one.
A module not listed fails the test, so a new module must choose its layer. Separately, no two
modules may import each other, directly or round a loop.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import envharness

PACKAGE = Path(envharness.__file__).parent

LAYERS: list[tuple[str, ...]] = [
    ("_version", "errors", "_portal", "_ansi"),
    ("records",),
    ("store",),
    ("protocol",),
    ("contracts", "fixtures"),
    ("hooks",),
    ("runtime",),
    ("scoring",),
    ("trajectories",),
    ("adapters",),
    ("optimizer",),
    ("llm",),
    ("agents",),
    ("demos",),  # below the optimizer: nothing it learns can come from knowing them
    ("api", "manifest", "advanced"),
    ("service", "client"),
    ("cli",),
    ("__init__",),
]
"""Top-level modules and packages, from the base down to the facade."""

INNER: dict[str, list[tuple[str, ...]]] = {
    "agents": [
        ("conversation", "parsing", "rendering", "schema", "template"),
        ("formats", "settings"),
        ("model",),
    ],
    "contracts": [
        ("agent", "budget", "environment", "operations", "scenario"),
        ("command_agent",),
    ],
    "runtime": [
        (
            "budgets",
            "checks",
            "compare",
            "hook_memory",
            "loop_passes",
            "participants",
            "transcripts",
        ),
        ("hooking", "recorder", "score_records"),
        ("plan",),
        ("resume", "turn"),
        ("branching", "session"),
        ("executors",),
        ("experiment", "template"),
        ("continuation",),
    ],
    "runtime.executors": [
        ("channel", "counts", "frames", "queueing", "recipe"),
        ("seam", "streams", "ray_cluster"),
        ("retries", "ray_channel"),
        ("in_process", "worker", "link", "split"),
        ("driver",),
        ("pool", "pool_worker", "ray"),
    ],
    "trajectories": [
        ("errors", "model", "spool"),
        ("binding", "codec", "projection", "rewards"),
        ("sources",),
        ("readers", "conversations"),
        ("snapshots",),
        ("datasets", "json_schema"),
        ("files", "trainer"),
    ],
    "service": [
        ("wire",),
        ("problems", "codes", "projections"),
        ("state", "params", "guard", "link_codes"),
        ("auth",),
        ("access",),
        ("spending", "trajectory_access", "routing", "search"),
        ("http",),
        ("pages",),
        ("app", "server"),
    ],
    "cli": [
        ("quickstart", "state"),
        ("render",),
        ("edge", "help_ranges"),
        ("model_agents",),
        ("loading", "options", "refusals", "results", "verdicts"),
        ("datasets", "experiments", "harness_versions", "manifest_run", "protocol", "serve"),
        ("artifacts", "check_env", "copy_store"),
        ("sources", "tokens", "trajectories"),
        ("optimize", "snapshots"),
        ("control", "lifecycle", "run", "sessions"),
        ("app",),
        ("__main__",),
    ],
    "optimizer": [
        ("host",),
        ("engineers",),
        ("patches",),
        ("stats", "results"),
        ("measure", "versions"),
        ("runlog",),
        ("history", "inputs"),
        ("config", "worker_sandbox"),
        ("shares",),
        ("rerun",),
        ("context", "state"),
        ("gate",),
        ("accept", "proposals", "report"),
        ("run",),
        ("loop",),
    ],
    "optimizer.engineers": [
        ("actions", "contract", "evidence"),
        ("families",),
        ("grammar", "packets", "scripted"),
        ("mining",),
    ],
    "optimizer.patches": [
        ("errors",),
        ("patch",),
        ("sandbox",),
        ("parse", "policy"),
        ("executable",),
    ],
    "optimizer.patches.sandbox": [
        ("_hookrt",),
        ("contract", "regex_workers"),
        ("local", "process"),
    ],
    "adapters": [
        ("_optional", "_png"),
        ("replay", "spaces"),
        ("_copies",),
        ("gymnasium", "pettingzoo", "process", "textworld"),
        ("registry",),
    ],
    "api": [
        ("remote_control",),
        ("setup", "sessions", "sources"),
        ("experiments",),
        ("harness",),
        ("blocking", "conformance"),
    ],
    "api.conformance": [
        ("report",),
        ("compare", "probe"),
        ("runs",),
        ("checks",),
        ("suite",),
    ],
}
"""The order of each package's own modules (first name below the package), from the base
down. A package's ``__init__`` is its face and may import any of them."""


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


@cache
def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@cache
def imports_of(path: Path) -> frozenset[str]:
    """Every envharness module ``path`` imports, wherever the import statement stands;
    ``from a import b`` counts as importing ``a.b`` when that is a module."""
    modules = all_modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            found.update(submodules & modules.keys())
            if not submodules <= modules.keys():
                found.add(node.module)
    return frozenset(n for n in found if n == "envharness" or n.startswith("envharness."))


def rank(module: str, order: list[tuple[str, ...]], where: str) -> int:
    ranks = {name: position for position, names in enumerate(order) for name in names}
    assert module in ranks, f"{where}.{module} has no layer: add it to this test's order"
    return ranks[module]


def top_rank(module: str) -> int:
    parts = module.split(".")
    assert parts[0] == "envharness", module
    return rank(parts[1] if len(parts) > 1 else "__init__", LAYERS, "envharness")


def test_every_import_points_up_the_layers() -> None:
    violations = []
    for name, path in all_modules().items():
        own = top_rank(name)
        for imported in imports_of(path):
            if top_rank(imported) > own:
                violations.append(f"{name} imports {imported}")
    assert violations == []


def test_inside_each_package_imports_point_up_too() -> None:
    violations = []
    for package, order in INNER.items():
        prefix = f"envharness.{package}."
        for name, path in all_modules().items():
            if not name.startswith(prefix):
                continue  # the package's face (its __init__) may import any of its modules
            own = name.removeprefix(prefix).split(".")[0]
            own_rank = rank(own, order, f"envharness.{package}")
            for imported in imports_of(path):
                if not imported.startswith(prefix):
                    continue
                other = imported.removeprefix(prefix).split(".")[0]
                if other != own and rank(other, order, f"envharness.{package}") > own_rank:
                    violations.append(f"{name} imports {imported}")
    assert violations == []


def test_no_import_cycles() -> None:
    """No loop of imports between modules, function-level imports included."""
    graph = {name: imports_of(path) - {name} for name, path in all_modules().items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == [], "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_relative_imports_are_not_used() -> None:
    """Absolute imports keep the layer checks above honest."""
    relative = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.ImportFrom) and node.level > 0
            for node in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert relative == []
