"""``check_environment``: set up the probe, run every check in order, report."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio

from envharness.api.conformance.checks import CHECKED
from envharness.api.conformance.report import (
    DEFAULT_TURNS,
    CheckFailed,
    CheckResult,
    CheckSkipped,
    ConformanceReport,
)
from envharness.api.conformance.runs import Probe, fix_for, make_environment, roster_for
from envharness.api.setup import check_count, check_seed
from envharness.contracts.scenario import Scenario, validate_input
from envharness.errors import EnvharnessError

__all__ = ["DEFAULT_ACTION_TIMEOUT", "check_environment"]

DEFAULT_ACTION_TIMEOUT: Final = 30.0
"""Seconds the probe agent may take (it answers at once; the limit only bounds a hang)."""


async def check_environment(
    environment: Callable[[], Any],
    *,
    input: Any = None,
    turns: int = DEFAULT_TURNS,
    seed: int = 0,
    participants: Mapping[str, str] | None = None,
    action_timeout: float | None = DEFAULT_ACTION_TIMEOUT,
    on_result: Callable[[CheckResult], None] | None = None,
) -> ConformanceReport:
    """Run every check on the environment ``environment`` makes (a class or zero-argument
    factory) and report; ``on_result`` sees each result as it is decided.

    ``input`` is the scenario input (default ``{}``), ``participants`` maps names to roles
    (an empty role: the environment's only one; default: the environment's
    ``possible_agents`` if it lists them, else one participant per role, named after it). The
    sessions are recorded in a temporary store, removed afterwards. Something that cannot be
    checked — not an environment, an input its input type refuses, a participant with an
    unknown role — raises :class:`~envharness.errors.ConfigurationError`.
    """
    check_count("turns", turns)
    check_seed(seed)
    first = make_environment(environment)
    roster = roster_for(first.spec, participants, first)
    scenario: Scenario[Any] = Scenario(id="check-env", input={} if input is None else input)
    validated = validate_input(scenario, first.spec.input_type)
    folder = Path(await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix="check-env-")))
    probe = Probe(
        environment,
        first,
        roster,
        scenario,
        validated,
        turns=turns,
        seed=seed,
        action_timeout=action_timeout,
        folder=folder,
    )
    try:
        results = await _run(probe, on_result or (lambda result: None))
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(folder, ignore_errors=True))
    return ConformanceReport(
        environment=f"{probe.spec.name}@{probe.spec.version}",
        participants=dict(roster),
        results=tuple(results),
        timings=probe.timings(),
    )


async def _run(probe: Probe, report: Callable[[CheckResult], None]) -> list[CheckResult]:
    """The spec first: nothing else runs on an environment whose spec is unsound."""
    checks = dict(CHECKED)
    results = [await _one("spec", checks.pop("spec"), probe)]
    report(results[-1])
    if results[-1].status == "failed":
        for name in checks:
            results.append(CheckResult(name, "skipped", "not run: the spec check failed"))
            report(results[-1])
        return results
    async with probe.open(), probe.resources:  # one writer for every probe session
        for name, check in checks.items():
            results.append(await _one(name, check, probe))
            report(results[-1])
    return results


async def _one(name: str, check: Callable[[Probe], Awaitable[str]], probe: Probe) -> CheckResult:
    try:
        return CheckResult(name, "passed", await check(probe))
    except CheckFailed as failure:
        return CheckResult(name, "failed", failure.detail, failure.fix)
    except CheckSkipped as skipped:
        return CheckResult(name, "skipped", str(skipped))
    except EnvharnessError as exc:
        return CheckResult(name, "failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - the environment raised in a direct call: a FAIL
        return CheckResult(name, "failed", f"{type(exc).__name__}: {exc}", fix_for(exc))
