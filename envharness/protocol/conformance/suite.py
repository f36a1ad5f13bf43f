"""The suite: run the selected cases in order and gather a report; what an agent gets wrong is
a failed case, never an exception."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import anyio

from envharness.errors import ConfigurationError
from envharness.protocol.conformance.cases import CASES
from envharness.protocol.conformance.program import (
    CaseFailure,
    CaseRun,
    CaseSkipped,
    ConformanceCase,
    as_text,
    excerpt,
    stderr_tail,
    step_of,
)
from envharness.protocol.conformance.report import (
    INHERITED_ENV,
    CaseResult,
    CaseStatus,
    ConformanceReport,
    ConformanceSettings,
)
from envharness.protocol.errors import AgentReportedError, ProtocolViolationError
from envharness.protocol.process import (
    AgentCommand,
    agent_command,
)

_BY_NAME = {case.name: case for case in CASES}


async def check_agent(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    inherit_env: Iterable[str] = INHERITED_ENV,
    settings: ConformanceSettings | None = None,
    cases: Iterable[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> ConformanceReport:
    """Run the conformance cases (all, or those named) against the program ``argv``.

    A program that cannot be found or run raises :class:`~envharness.errors.ConfigurationError`
    before any case runs; everything the *agent* gets wrong is a failed case in the report.
    ``on_result`` hears about each case as it finishes (the CLI prints progress with it).
    """
    settings = settings or ConformanceSettings()
    selected = _select(cases)
    command = agent_command(argv, cwd=cwd, env=env, inherit_env=inherit_env)
    results: list[CaseResult] = []
    implementation: str | None = None
    capabilities: tuple[str, ...] = ()
    handshake_failed = False
    for case in selected:
        if handshake_failed:
            result = CaseResult(case.name, "skipped", "needs the handshake, which failed", 0.0)
        else:
            result, run = await _run_case(case, command, settings)
            handshake_failed = case.name == "handshake" and result.status == "failed"
            ready = run.agents[0].channel.ready if run.agents else None
            if ready is not None and implementation is None:
                implementation, capabilities = ready.implementation, ready.capabilities
        results.append(result)
        if on_result is not None:
            on_result(result)
    return ConformanceReport(
        argv=command.argv,
        results=tuple(results),
        implementation=implementation,
        capabilities=capabilities,
    )


async def _run_case(
    case: ConformanceCase, command: AgentCommand, settings: ConformanceSettings
) -> tuple[CaseResult, CaseRun]:
    """Run one case; what the agent does wrong becomes a failed result, never an exception.

    Everything is caught inside the task group that drains stderr, so nothing reaches its exit
    but cancellation; a program that cannot start is raised after it, as itself.
    """
    started = anyio.current_time()
    status: CaseStatus = "failed"
    detail = ""
    unstartable: ConfigurationError | None = None
    async with anyio.create_task_group() as group:
        run = CaseRun(command, settings, group)
        try:
            detail = await case.run(run)
            status = "passed"
        except CaseSkipped as skip:
            status, detail = "skipped", str(skip)
        except CaseFailure as failure:
            detail = f"at {step_of(run)}: {failure}"
        except ProtocolViolationError as violation:
            detail = f"at {step_of(run)}: {violation.code}: {violation.problem}"
            if violation.offending:
                detail += f"; the line: {excerpt(as_text(violation.offending))}"
        except AgentReportedError as error:
            detail = f"at {step_of(run)}: the agent answered error: {excerpt(error.message)}"
        except ConfigurationError as error:
            unstartable = error
    if unstartable is not None:
        raise unstartable
    seconds = anyio.current_time() - started
    stderr = stderr_tail(run) if status == "failed" else ""
    return CaseResult(case.name, status, detail, seconds, stderr), run


def _select(names: Iterable[str] | None) -> tuple[ConformanceCase, ...]:
    if names is None:
        return CASES
    wanted = set(names)
    unknown = sorted(wanted - _BY_NAME.keys())
    if unknown:
        raise ConfigurationError(
            f"unknown conformance case {', '.join(map(repr, unknown))}; the cases are: "
            f"{', '.join(_BY_NAME)}"
        )
    return tuple(case for case in CASES if case.name in wanted)
