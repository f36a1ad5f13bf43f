"""How the commands that run a conformance kit print it: ``protocol check`` and ``check-env``.

One line per result as it is decided (``PASS``, ``FAIL``, ``SKIP``, the name in a column, what
was seen), more lines under it indented to the detail's column, and a summary of the counts.
The header waits for the first result, so a program that cannot start prints only why; a
Ctrl-C stops the kit and exits 130 (:mod:`envharness.cli.edge`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import typer

from envharness.cli.edge import EXIT_INTERRUPTED, interruptible
from envharness.cli.render import printable
from envharness.protocol.conformance.report import CaseStatus, Tally

__all__ = ["run_kit", "tally", "verdict_lines"]

_LABELS: dict[CaseStatus, str] = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}

_ResultT = TypeVar("_ResultT")
_ReportT = TypeVar("_ReportT", bound=Tally)


def run_kit(
    header: str,
    kit: Callable[[Callable[[_ResultT], None]], Awaitable[_ReportT]],
    show: Callable[[_ResultT], None],
    *,
    interrupted: str,
) -> _ReportT:
    """Run ``kit`` (given the callback that sees each result) under the header; ``interrupted``
    says on stderr what a Ctrl-C stopped."""
    pending = [header]

    def on_result(result: _ResultT) -> None:
        while pending:
            typer.echo(pending.pop())
        show(result)

    report = anyio.run(lambda: interruptible(lambda: kit(on_result)))
    if report is None:
        typer.echo(f"interrupted: {interrupted}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    return report


def verdict_lines(status: CaseStatus, name: str, width: int, detail: str, *more: str) -> list[str]:
    """A result's line, its name padded to ``width``, and ``more`` lines under its detail."""
    lines = [f"{_LABELS[status]}  {name:<{width}}  {printable(detail)}"]
    lines.extend(f"      {'':<{width}}  {line}" for line in more)
    return lines


def tally(report: Tally) -> str:
    """``3 passed, 1 failed`` (and ``, 2 skipped`` when any were)."""
    text = f"{report.passed} passed, {report.failed} failed"
    if report.skipped:
        text += f", {report.skipped} skipped"
    return text
