"""Many refusals at once, told by reason: how many of each, one example, and the fix.

A dataset of a thousand trajectories that are not yet training-entitled would otherwise be a
thousand lines saying the same thing; ``--verbose`` still lists every one.
"""

from __future__ import annotations

from collections.abc import Sequence

from envharness.cli.render import printable
from envharness.trajectories import Refusal

__all__ = ["FIXES", "refusal_lines"]

FIXES: dict[str, str] = {
    "complete": "wait until the evidence is complete (no gaps; `envharness verify`), then "
    "freeze a new snapshot",
    "terminal": "let those sessions end (or `envharness resume` them), then freeze a new snapshot",
    "training-entitled": "freeze the snapshot with `envharness snapshot create ... "
    "--entitle-training BASIS` (an imported source must declare training rights too)",
    "selected": "leave those sessions out of the snapshots, or select one of their "
    "participants with --participant",
    "reward": "score those sessions, name the metric with --reward METRIC, or give "
    "--shared-reward for a shared (cooperative) score",
    "unique": "put each session in one snapshot only",
    "transcribed": "use sessions whose agents recorded every answer's transcript, or none",
}
"""The fix for each admission condition (:class:`~envharness.trajectories.Refusal`)."""


def refusal_lines(what: str, refusals: Sequence[Refusal], *, verbose: bool) -> list[str]:
    """``what`` refused, then one block per condition, most frequent first: its count, the
    fix, and one example (every refusal with ``verbose``)."""
    groups: dict[str, list[Refusal]] = {}
    for refusal in refusals:
        groups.setdefault(refusal.condition, []).append(refusal)
    total = len(refusals)
    lines = [f"{what} refused {total} {'trajectory' if total == 1 else 'trajectories'}:"]
    for condition, members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"  {len(members)} not {condition}")
        lines.append(f"    fix: {FIXES.get(condition, 'see docs/trajectories.md')}")
        shown = members if verbose else members[:1]
        label = "" if verbose else "e.g. "
        lines += [f"    {label}{printable(str(refusal))}" for refusal in shown]
    if not verbose and total > len(groups):
        lines.append("  (--verbose lists every refused trajectory)")
    return lines
