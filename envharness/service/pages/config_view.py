"""How the viewer shows a frozen configuration's settings and operations.

An experiment's configuration and each of its sessions' share the environment, the versions
and the operations, so the experiment page and a session's Configuration tab draw those the
same way from here and add what is their own (trials and concurrency; seed, turns, trial).
"""

from __future__ import annotations

from collections.abc import Sequence

from envharness.records import EnvironmentRef, ExperimentConfig, OperationRef, SessionConfig
from envharness.service.pages.html import DASH, Html, html, value
from envharness.service.pages.widgets import table

__all__ = ["environment_settings", "operations_table", "version_settings"]


def environment_settings(environment: EnvironmentRef) -> list[tuple[str, str]]:
    return [
        ("Environment", f"{environment.name} @ {environment.version}"),
        ("Turn order", environment.turn_order),
        ("Roles", ", ".join(environment.roles)),
        ("Input type", environment.input_type),
        ("Action type", environment.action_type or DASH),
        ("Observation type", environment.observation_type or DASH),
    ]


def version_settings(config: ExperimentConfig | SessionConfig) -> list[tuple[str, str]]:
    """The action timeout and the versions of envharness, the harness and the scoring."""
    return [
        ("Action timeout", f"{config.action_timeout:g} s" if config.action_timeout else "none"),
        ("envharness", config.envharness_version),
        ("Harness version", config.harness_version or DASH),
        ("Scoring version", config.scoring_version or DASH),
    ]


def operations_table(operations: Sequence[OperationRef]) -> Html:
    rows = (
        [
            html(
                '<tr><td class="mono">{n}</td><td>{v}</td><td>{c}</td></tr>',
                n=op.name,
                v=op.version,
                c=value(op.config),
            )
            for op in operations
        ]
        if operations
        else [Html('<tr><td colspan="3" class="muted">No operations.</td></tr>')]
    )
    return table(Html("<th>Name</th><th>Version</th><th>Configuration</th>"), rows)
