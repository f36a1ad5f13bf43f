"""The folder tree is the layer diagram: a module imports only its own layer or those above.

The order is DESIGN.md's; ``harness`` (the Python API the service and CLI share) sits just
above them. A module not listed here fails the test, so a new module must choose its layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import envharness

PACKAGE = Path(envharness.__file__).parent

LAYERS: list[tuple[str, ...]] = [
    ("_version", "errors"),
    ("records",),
    ("store",),
    ("protocol",),
    ("contracts", "fixtures"),
    ("hooks",),
    ("runtime",),
    ("scoring",),
    ("trajectories",),
    ("optimizer",),
    ("llm",),
    ("demos",),  # below the optimizer: nothing it learns can come from knowing them
    ("api", "manifest", "advanced"),
    ("service", "client"),
    ("cli",),
    ("__init__",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> int:
    """Rank of ``envharness.x.y`` by its first component ``x``."""
    parts = module.split(".")
    assert parts[0] == "envharness", module
    top = parts[1] if len(parts) > 1 else "__init__"
    assert top in RANK, f"envharness.{top} has no layer: add it to LAYERS in this test"
    return RANK[top]


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__" and len(parts) > 2:
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name == "envharness" or name.startswith("envharness.")}


def test_every_import_points_up_the_layers() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        own = layer_of(name)
        for imported in imports_of(path):
            if layer_of(imported) > own:
                violations.append(f"{name} imports {imported}")
    assert violations == []


def test_relative_imports_are_not_used() -> None:
    """Absolute imports keep the layer check above honest."""
    relative = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.ImportFrom) and node.level > 0
            for node in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert relative == []
