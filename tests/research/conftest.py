"""Fixtures for the research scripts: offline by construction, tiny models built once.

Hub access is switched off before ``transformers`` is imported, so any accidental download
fails at once instead of hanging or succeeding on a developer's machine only. The research
extra (torch, transformers, trl, datasets) is needed; CI installs it (``tools/dev.py test``), a
developer without it sees these tests skipped, with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (tools/dev.py test) another worker shares the cores: torch's thread pool
    # (one thread per core, set from this when torch starts, here and in the scripts run as
    # subprocesses) would only make the two fight. Results do not depend on it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
RESEARCH = ROOT / "research"

for name in ("torch", "transformers", "trl", "datasets"):
    # Fail, never skip: `tools/dev.py test` installs the research extra, so a missing library is
    # a broken set-up that a skip would hide.
    if importlib.util.find_spec(name) is None:
        raise pytest.UsageError(
            f"the research tests need {name}: pip install torch==2.13.0 -e '.[research]' "
            "(python3 tools/dev.py test does it)"
        )

# The trainers call each other's deprecated names (trl 1.x on transformers 5.x); those warnings
# are about library internals no user can act on, so they do not fail these tests.
THIRD_PARTY_WARNINGS = [
    pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
    pytest.mark.filterwarnings("ignore::FutureWarning:trl"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:torch"),
    pytest.mark.filterwarnings("ignore::UserWarning:torch"),
    pytest.mark.filterwarnings("ignore::UserWarning:transformers"),
    pytest.mark.filterwarnings("ignore::UserWarning:trl"),
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            for mark in THIRD_PARTY_WARNINGS:
                item.add_marker(mark)


PATCH_ANSWER = (
    "<think>refunds fail when the order was not looked up first</think>"
    '<patch>[{"op": "add_code_hook", "hook": "on_before_action", "code": '
    '"def on_before_action(ctx, nb):\\n    return None\\n"}]</patch>'
)


def sft_row(number: int) -> dict[str, Any]:
    return {
        "prompt": [
            {"role": "system", "content": "You improve an agent's harness with hook patches."},
            {"role": "user", "content": f"Failure {number}: issue_refund before lookup_order."},
        ],
        "completion": [{"role": "assistant", "content": PATCH_ANSWER}],
    }


@pytest.fixture
def sft_rows() -> list[dict[str, Any]]:
    return [sft_row(n) for n in range(8)]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke model, built once: a 2-layer Llama (hidden 64) and a tokenizer trained here."""
    from research.tiny import build_tiny

    texts = [
        m["content"] for n in range(8) for m in sft_row(n)["prompt"] + sft_row(n)["completion"]
    ]
    return build_tiny(texts, tmp_path_factory.mktemp("tiny") / "model")


def script(name: str) -> list[str]:
    return [sys.executable, str(RESEARCH / name)]
