"""``envharness selftest`` and ``envharness optimize``: the harness optimizer's loop.

``selftest`` runs the whole optimizer offline — the support-desk demo, the mining engineer, the
subprocess sandbox — in a temporary store (unless ``--store`` is given) and prints the figures:
baseline 0/N, then N/N with ``harness-v1``. ``optimize`` runs the loop on any environment and
agents given as ``module:attribute``. Both call :class:`~envharness.optimizer.HarnessOptimizer`,
as the Python API does; ``envharness harness`` reads back the versions they accepted
(:mod:`envharness.cli.harness_versions`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
import typer

from envharness.api.harness import AsyncEnvironmentHarness
from envharness.cli.edge import EXIT_INTERRUPTED, EXIT_NO, CliError, interruptible
from envharness.cli.harness_versions import patch_lines
from envharness.cli.loading import command_line_harness as _harness
from envharness.cli.loading import load_reference, make_cwd_importable, parse_input
from envharness.cli.options import (
    MaxBlocks,
    OnBlockLimitOption,
    RayAddress,
    check_choice,
    executor_from,
    workers_option,
)
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.contracts.scenario import Scenario
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.llm import ModelEngineer, OpenAICompatibleProvider
from envharness.optimizer import (
    Engineer,
    HarnessOptimizer,
    MiningEngineer,
    OptimizationConfig,
    OptimizationResult,
    ScriptedEngineer,
)
from envharness.optimizer.results import report_lines
from envharness.runtime.hooking import BLOCK_LIMITS, DEFAULT_MAX_BLOCKS, DEFAULT_ON_BLOCK_LIMIT
from envharness.store.locate import describe

__all__ = ["app", "load_scenarios", "optimize", "selftest"]

ENGINEERS = ("mining", "scripted", "openai")
SANDBOXES = ("subprocess", "local")
SELFTEST_TURNS = 8

RerunWorkers = Annotated[
    int | None,
    workers_option(
        "Run the reruns' sessions in N worker processes in all (with --ray, N Ray workers), "
        "split among the reruns at once (up to --capacity): one each at --workers equal to "
        "--capacity, all N for a rerun alone; with fewer workers than --capacity, only N "
        "reruns run at once. The evidence is still written by this process "
        "(docs/optimizer.md). Default: in this process."
    ),
]


app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds these commands to the root."""


@app.command("selftest")
def selftest(
    ctx: typer.Context,
    count: Annotated[
        int,
        typer.Option(
            "--tickets",
            metavar="N",
            min=8,
            max=200,
            help="Support tickets (at least 8: the gate is alpha / distinct outcomes).",
        ),
    ] = 8,
    candidates: Annotated[
        int, typer.Option("--candidates", metavar="K", min=1, max=64, help="Candidates.")
    ] = 8,
    sandbox: Annotated[
        str, typer.Option("--sandbox", metavar="KIND", help="subprocess or local.")
    ] = "subprocess",
) -> None:
    """Run the optimizer end to end, offline and deterministic, with no model.

    The support-desk demo's frozen policy refunds before it looks the order up, so every
    ticket fails; the mining engineer must find the precondition hook in the recorded
    failures, and the reruns must prove it: baseline 0/N, then N/N as harness-v1. Uses a
    temporary store unless --store is given (a directory or a PostgreSQL database).
    """
    _check_choice("--sandbox", sandbox, SANDBOXES)
    state = CliState.of(ctx, postgres=True)
    given = state.store_given
    with tempfile.TemporaryDirectory(prefix="envharness-selftest-") as scratch:
        store = state.location if given else Path(scratch) / "store"
        typer.echo(
            f"selftest: support desk, {count} tickets, mining engineer (offline, no model), "
            f"{sandbox} sandbox, store {printable(describe(store))}"
            + ("" if given else " (temporary)")
        )
        harness = AsyncEnvironmentHarness(
            store, environment=SupportDesk, agents={"agent": RefundFirstPolicy}
        )
        config = OptimizationConfig(
            candidates=candidates,
            iterations=3,
            turns=SELFTEST_TURNS,
            sandbox="local" if sandbox == "local" else "subprocess",
        )
        optimizer = HarnessOptimizer(harness, MiningEngineer(), config=config, progress=_progress)
        result = _run(optimizer, lambda: optimizer.optimize_async(tickets(count)), resumable=False)
        for line in report_lines(result):
            if not given and line.startswith("run directory: "):
                line = "run directory: removed with the temporary store (--store keeps it)"
            typer.echo(printable(line))
        if result.patch is not None:
            typer.echo("accepted patch:")
            for line in patch_lines(result.patch):
                typer.echo("  " + printable(line))
        ok = (
            result.baseline.passed < result.final.passed == result.final.total
            and result.accepted_version is not None
        )
        typer.echo(
            f"selftest {'passed' if ok else 'FAILED'}: baseline "
            f"{result.baseline.passed}/{result.baseline.total} -> patched "
            f"{result.final.passed}/{result.final.total}"
            + (f", accepted as {result.accepted_version}" if result.accepted_version else "")
        )
        if not ok:
            raise typer.Exit(EXIT_NO)


@app.command("optimize")
def optimize(
    ctx: typer.Context,
    environment: Annotated[
        str,
        typer.Option(
            "--environment",
            metavar="REF",
            help="The environment: module:attribute, gymnasium:ID, pettingzoo:module.path or "
            "textworld:PATH.",
        ),
    ],
    agent: Annotated[
        list[str],
        typer.Option(
            "--agent",
            metavar="NAME=module:factory|COMMAND",
            help="A participant and its (frozen) agent; repeat for more participants.",
        ),
    ],
    engineer: Annotated[
        str, typer.Option("--engineer", metavar="KIND", help="mining, scripted or openai.")
    ] = "mining",
    candidates: Annotated[
        int, typer.Option("--candidates", metavar="K", min=1, help="Candidates per iteration.")
    ] = 8,
    iterations: Annotated[
        int, typer.Option("--iterations", metavar="N", min=1, help="Iterations at most.")
    ] = 3,
    scenarios: Annotated[
        str | None,
        typer.Option(
            "--scenarios",
            metavar="FILE.jsonl|module:attribute",
            help='The scenarios: a JSON-lines file ({"id": ..., "input": {...}} per '
            "line) or a function returning Scenarios. Default: one scenario, --input.",
        ),
    ] = None,
    held_out: Annotated[
        str | None,
        typer.Option(
            "--held-out",
            metavar="FILE.jsonl|module:attribute",
            help="A held-out split checked before a version is accepted.",
        ),
    ] = None,
    regression: Annotated[
        str | None,
        typer.Option(
            "--regression",
            metavar="FILE.jsonl|module:attribute",
            help="A regression suite no accepted version may break.",
        ),
    ] = None,
    input: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON", help="The input of the single scenario."),
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option("--role", metavar="NAME=ROLE", help="A participant's role."),
    ] = None,
    turns: Annotated[
        int, typer.Option("--turns", metavar="N", min=1, help="Turns per session at most.")
    ] = 20,
    trials: Annotated[
        int, typer.Option("--trials", metavar="N", min=1, help="Trials per scenario.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="The seed.")] = 0,
    capacity: Annotated[
        int,
        typer.Option(
            "--capacity",
            metavar="N",
            min=1,
            help="Reruns at once (with --workers, no more than the workers they share).",
        ),
    ] = 2,
    sandbox: Annotated[
        str, typer.Option("--sandbox", metavar="KIND", help="subprocess or local.")
    ] = "subprocess",
    alpha: Annotated[
        float,
        typer.Option(
            "--alpha",
            metavar="P",
            min=0.0,
            max=1.0,
            help="Accept only when the sign test's p-value is at most P; 0 or 1 to report "
            "the test without gating on it.",
        ),
    ] = 0.05,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            metavar="NAME",
            help="Optimize this score metric instead of pass/fail (a scenario counts as "
            "solved at --solved).",
        ),
    ] = None,
    solved: Annotated[
        float,
        typer.Option(
            "--solved",
            metavar="VALUE",
            help="The value at which a scenario counts as solved (regression protection).",
        ),
    ] = 1.0,
    answers: Annotated[
        Path | None,
        typer.Option(
            "--answers",
            metavar="FILE",
            help="For --engineer scripted: a JSON list of answers "
            "(<think>...</think><patch>...</patch>).",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME", help="For --engineer openai.")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            metavar="URL",
            help="For --engineer openai: the API root (default $OPENAI_BASE_URL or OpenAI).",
        ),
    ] = None,
    api_key_env: Annotated[
        str,
        typer.Option(
            "--api-key-env",
            metavar="VAR",
            help="The variable holding the API key; '' for an endpoint that needs none.",
        ),
    ] = "OPENAI_API_KEY",
    resume: Annotated[
        str | None,
        typer.Option("--resume", metavar="RUN", help="Finish an interrupted run (opt_...)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result as one JSON object.")
    ] = False,
    max_blocks: MaxBlocks = DEFAULT_MAX_BLOCKS,
    on_block_limit: OnBlockLimitOption = DEFAULT_ON_BLOCK_LIMIT,
    workers: RerunWorkers = None,
    ray: RayAddress = None,
) -> None:
    """Learn hook patches for a frozen agent from its recorded failures.

    Runs a baseline, mines the failures into a packet, asks the engineer for K candidate
    patches, reruns each over the same scenarios and seeds, and accepts the best one that
    improves and breaks nothing as harness-vN (docs/optimizer.md). Exit status 1 when no
    version was accepted.
    """
    _check_choice("--engineer", engineer, ENGINEERS)
    _check_choice("--sandbox", sandbox, SANDBOXES)
    store = CliState.of(ctx, postgres=True).location
    check_choice("--on-block-limit", on_block_limit, BLOCK_LIMITS)
    harness = _harness(
        store, environment, agent, role, max_blocks=max_blocks, on_block_limit=on_block_limit
    )
    chosen = _engineer(engineer, answers, model, base_url, api_key_env)
    train = (
        load_scenarios(scenarios, "--scenarios")
        if scenarios
        else [Scenario(id="cli", input=parse_input(input))]
    )
    if scenarios and input is not None:
        raise CliError("give either --scenarios or --input, not both")
    held = load_scenarios(held_out, "--held-out") if held_out else []
    suite = load_scenarios(regression, "--regression") if regression else []
    config = OptimizationConfig(
        candidates=candidates,
        iterations=iterations,
        turns=turns,
        trials=trials,
        seed=seed,
        capacity=capacity,
        sandbox="local" if sandbox == "local" else "subprocess",
        alpha=alpha if 0.0 < alpha < 1.0 else None,
        metric=metric,
        solved=solved,
        executor=executor_from(workers, ray),
    )
    optimizer = HarnessOptimizer(
        harness, chosen, config=config, progress=None if as_json else _progress
    )
    if resume is None:
        result = _run(optimizer, lambda: optimizer.optimize_async(train, held, suite))
    else:
        result = _run(
            optimizer,
            lambda: optimizer.resume_async(resume, train, held_out=held, regression=suite),
        )
    if as_json:
        typer.echo(msgspec.json.encode(result).decode())
    else:
        for line in report_lines(result):
            typer.echo(printable(line))
    if result.accepted_version is None:
        raise typer.Exit(EXIT_NO)


def load_scenarios(spec: str, option: str) -> list[Scenario[Any]]:
    """Scenarios from a JSON-lines file, or from a ``module:attribute`` function or list."""
    path = Path(spec)
    if path.suffix in (".jsonl", ".json") or path.exists():
        return _scenarios_file(path, option)
    make_cwd_importable()
    value = load_reference(spec, what=option)
    found = value() if callable(value) else value
    if not isinstance(found, list | tuple) or not all(isinstance(s, Scenario) for s in found):
        raise CliError(f"{option} {spec!r} did not give a list of Scenario objects")
    return list(found)


def _scenarios_file(path: Path, option: str) -> list[Scenario[Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{option}: cannot read {str(path)!r}: {exc.strerror}") from None
    found: list[Scenario[Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise CliError(f"{option} {path}:{number}: not valid JSON ({exc})") from None
        if not isinstance(entry, dict) or "id" not in entry:
            raise CliError(
                f"{option} {path}:{number}: each line is an object like "
                '{"id": "case-1", "input": {...}}'
            )
        unknown = sorted(set(entry) - {"id", "input", "reference", "metadata"})
        if unknown:
            raise CliError(
                f"{option} {path}:{number}: unknown key(s) {', '.join(unknown)}; a scenario has "
                "id, input, reference and metadata"
            )
        try:
            found.append(
                Scenario(
                    id=entry["id"],
                    input=entry.get("input", {}),
                    reference=entry.get("reference"),
                    metadata=entry.get("metadata") or {},
                )
            )
        except Exception as exc:  # noqa: BLE001 - shown with the line it came from
            raise CliError(f"{option} {path}:{number}: {exc}") from None
    if not found:
        raise CliError(f"{option} {path} holds no scenarios")
    return found


def _engineer(
    kind: str, answers: Path | None, model: str | None, base_url: str | None, key_env: str
) -> Engineer:
    if kind == "mining":
        return MiningEngineer()
    if kind == "scripted":
        if answers is None:
            raise CliError("--engineer scripted needs --answers FILE (a JSON list of answers)")
        try:
            given = msgspec.json.decode(answers.read_bytes())
        except OSError as exc:
            raise CliError(f"--answers: cannot read {str(answers)!r}: {exc.strerror}") from None
        except msgspec.DecodeError as exc:
            raise CliError(f"--answers {answers}: not valid JSON ({exc})") from None
        if not isinstance(given, list) or not all(isinstance(a, str) for a in given):
            raise CliError(f"--answers {answers}: must be a JSON list of answer strings")
        return ScriptedEngineer(given)
    if not model:
        raise CliError("--engineer openai needs --model NAME (e.g. --model gpt-4o-mini)")
    if key_env and not os.environ.get(key_env):
        raise CliError(
            f"--engineer openai reads its API key from ${key_env}, which is not set: export "
            f"{key_env}=..., name another variable with --api-key-env VAR, or give "
            "--api-key-env '' for an endpoint that needs no key (a local vLLM or llama.cpp server)"
        )
    provider = OpenAICompatibleProvider.from_env(
        model, base_url=base_url, api_key_env=key_env or None
    )
    return ModelEngineer(provider)


def _run(
    optimizer: HarnessOptimizer, work: Callable[[], Any], *, resumable: bool = True
) -> OptimizationResult:
    """Run the optimizer; on Ctrl-C, say which run was stopped and how to finish it."""
    result: OptimizationResult | None = anyio.run(
        lambda: interruptible(lambda: _opened(optimizer.config.executor, work))
    )
    if result is None:
        if not resumable:
            typer.echo("interrupted: the selftest was stopped", err=True)
        elif optimizer.run_id is None:
            typer.echo(
                "interrupted before the optimizer run started; nothing was recorded", err=True
            )
        else:
            typer.echo(
                f"interrupted: optimizer run {optimizer.run_id} was recorded as stopped; finish it "
                f"with the same command and --resume {optimizer.run_id}",
                err=True,
            )
        raise typer.Exit(EXIT_INTERRUPTED)
    return result


async def _opened(executor: object, work: Callable[[], Awaitable[Any]]) -> Any:
    """``work()`` with the reruns' executor open around it when it can be (a process pool or
    Ray then keeps its workers from one rerun to the next)."""
    if isinstance(executor, AbstractAsyncContextManager):
        async with executor:
            return await work()
    return await work()


def _progress(line: str) -> None:
    typer.echo(printable(line), err=True)


def _check_choice(option: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise CliError(f"{option} must be one of {', '.join(choices)}, not {value!r}")
