"""Shared by the optimizer loop and CLI tests: answers in the patch protocol, small harnesses."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import anyio

from envharness import EnvironmentHarness
from envharness.demos.coding_shell import CodingShell, HastyShellPolicy
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk
from envharness.hooks import HookName
from envharness.optimizer import OptimizationConfig
from envharness.records import Payload
from envharness.store import read_store


def answer(body: str, hook: HookName = "on_before_action", think: str = "because") -> str:
    """``<think>…</think><patch>…</patch>`` adding one hook whose body is ``body``."""
    code = f"def {hook}(ctx, nb):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")
    patch = [{"op": "add_code_hook", "hook": hook, "code": code + "\n"}]
    return f"<think>{think}</think><patch>{json.dumps(patch)}</patch>"


LOOK_UP_FIRST = answer(
    """
    if ctx.action.get("tool") == "issue_refund" and not ctx.predicates.get("order_looked_up"):
        return block_and_prompt("look the order up first")
    return None
    """
)
"""The support desk's fix, written by hand."""

DO_NOTHING = answer("return None")

TESTS_FIRST = answer(
    """
    if ctx.action.get("command", "").startswith("edit") and not ctx.predicates.get("tests_run"):
        return block_and_prompt("run the tests first")
    return None
    """
)
"""The coding shell's first fix: it helps the urgent tasks and touches nothing else."""

TESTS_FIRST_BUT_NO_TIDYING = answer(
    """
    command = ctx.action.get("command", "")
    if command.startswith("edit") and not ctx.predicates.get("tests_run"):
        return block_and_prompt("run the tests first")
    if command == "submit" and "/workspace/" in (ctx.task or ""):
        return block_and_prompt("not yet")
    return None
    """
)
"""Helps the urgent tasks and breaks the tidy ones (which pass without any patch)."""


def desk(store: Path) -> EnvironmentHarness:
    return EnvironmentHarness(store, environment=SupportDesk, agents={"alice": RefundFirstPolicy})


def shell(store: Path) -> EnvironmentHarness:
    return EnvironmentHarness(store, environment=CodingShell, agents={"dev": HastyShellPolicy})


def fast(**changes: Any) -> OptimizationConfig:
    """In-process sandbox, few turns: what most loop tests need."""
    options: dict[str, Any] = {"turns": 12, "sandbox": "local", "candidates": 4}
    options.update(changes)
    return OptimizationConfig(**options)


def chain(store: Path, chain_id: str) -> list[Payload]:
    """Every payload of one chain (a session, an experiment or an optimizer run)."""

    async def read() -> list[Payload]:
        reader = await read_store(store)
        return [record.payload async for record in reader.records(chain_id)]

    return anyio.run(read)


def experiments(store: Path) -> list[str]:
    async def read() -> list[str]:
        return [info.id for info in await (await read_store(store)).experiments()]

    return anyio.run(read)
