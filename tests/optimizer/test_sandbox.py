"""Both sandboxes: the hook's world, its budgets, and (for the subprocess one) its process."""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness.optimizer import (
    LocalSandbox,
    PatchFailure,
    Sandbox,
    SandboxInfrastructureError,
    SandboxLimits,
    SubprocessSandbox,
)
from envharness.optimizer.patches.sandbox import SANDBOX_ENV, HookProgram

from ._sandboxes import ctx_json, program_of

pytestmark = pytest.mark.anyio

LIMITS = SandboxLimits(timeout_s=2.0, max_lines=20_000)
CATASTROPHIC = 're.match("(a+)+$", "a" * 34 + "b")'  # minutes of CPU: only a limit ends it


@pytest.fixture(params=["local", "subprocess"])
async def sandbox(request: pytest.FixtureRequest, anyio_backend: str) -> AsyncIterator[Sandbox]:
    if request.param == "local":
        yield LocalSandbox(LIMITS)
    else:
        async with SubprocessSandbox(LIMITS, kill_grace_s=0.5) as opened:
            yield opened


async def run(sandbox: Sandbox, program: HookProgram, nb: dict[str, Any] | None = None) -> Any:
    return await sandbox.run(program, "on_before_action", ctx_json(), nb if nb is not None else {})


async def failure(sandbox: Sandbox, program: HookProgram, nb: dict[str, Any] | None = None) -> Any:
    with pytest.raises(PatchFailure) as caught:
        await run(sandbox, program, nb)
    return caught.value


# -- the hook's world --------------------------------------------------------------------------


async def test_an_effect_and_the_notebook_come_back(sandbox: Sandbox) -> None:
    program = program_of(
        """
        nb["calls"] = nb.get("calls", 0) + 1
        if ctx.action["tool"] == "issue_refund" and not ctx.predicates["looked_up"]:
            return block_and_prompt("look the order up first")
        """
    )
    notebook = {"calls": 4}
    outcome = await run(sandbox, program, notebook)
    assert outcome.effect == {"effect": "block_and_prompt", "message": "look the order up first"}
    assert outcome.notebook == {"calls": 5}
    assert notebook == {"calls": 4}  # the caller's notebook is never touched
    assert outcome.lines >= 2


async def test_every_effect_constructor(sandbox: Sandbox) -> None:
    cases = {
        "return allow()": {"effect": "allow"},
        "return rewrite({'tool': 'lookup_order'}, reason='first')": {
            "effect": "rewrite", "action": {"tool": "lookup_order"}, "reason": "first"},
        "return rewrite(ctx.action)": {
            "effect": "rewrite", "action": {"tool": "issue_refund", "order": "A1"}, "reason": ""},
        "return hint('be careful')": {"effect": "hint", "text": "be careful"},
        "return {'effect': 'hint', 'text': 'raw JSON works too'}": {
            "effect": "hint", "text": "raw JSON works too"},
        "return None": None,
    }  # fmt: skip
    for body, expected in cases.items():
        assert (await run(sandbox, program_of(body))).effect == expected, body


async def test_stacked_hooks_run_in_order_and_the_first_intervention_wins(
    sandbox: Sandbox,
) -> None:
    program = program_of(
        'nb["order"] = nb.get("order", []) + ["first"]\nreturn allow()',
        'nb["order"] = nb["order"] + ["second"]\nreturn hint("second")',
        'nb["order"] = nb["order"] + ["third"]\nreturn block_and_prompt("third")',
    )
    outcome = await run(sandbox, program)
    assert outcome.effect == {"effect": "hint", "text": "second"}  # allow() does not decide
    assert outcome.notebook == {"order": ["first", "second", "third"]}  # all ran, nb threaded
    only_allow = program_of("return allow()", "return None")
    assert (await run(sandbox, only_allow)).effect == {"effect": "allow"}


async def test_ctx_is_read_only_but_reads_like_json(sandbox: Sandbox) -> None:
    reads = program_of(
        """
        kinds = [isinstance(ctx.state, dict), isinstance(ctx.history, list), ctx.step == 1]
        copy = dict(ctx.action)
        copy["order"] = "B2"
        return hint(json.dumps([kinds, copy, ctx.admissible], sort_keys=True))
        """
    )
    text = (await run(sandbox, reads)).effect["text"]
    assert text == '[[true, true, true], {"order": "B2", "tool": "issue_refund"}, null]'
    for body in ('ctx.state["looked_up"] = True', "ctx.action.update({})", "ctx.history.append(1)"):
        found = await failure(sandbox, program_of(body))
        assert found.kind == "exception"
        assert "read-only" in found.problem


async def test_the_helpers_work(sandbox: Sandbox) -> None:
    program = program_of(
        """
        found = re.search(r"(\\d+)", "order 42")
        data = json.loads('{"a": [1, 2]}')
        return hint(f"{math.floor(math.pi)} {found.group(1)} {json.dumps(data)} {math.sqrt(16)}")
        """
    )
    assert (await run(sandbox, program)).effect["text"] == '3 42 {"a": [1, 2]} 4.0'


async def test_an_exception_names_its_type_and_line(sandbox: Sandbox) -> None:
    found = await failure(sandbox, program_of('x = 1\nreturn nb["missing"]'))
    assert found.kind == "exception"
    assert "KeyError: 'missing' at line 3" in found.problem


@pytest.mark.parametrize(
    ("body", "kind", "words"),
    [
        pytest.param("return 5", "result", "returned a int", id="not-an-effect"),
        pytest.param("return {'effect': 'explode'}", "result", "not an effect", id="unknown"),
        pytest.param("return rewrite({1, 2})", "result", "not a JSON value", id="set-action"),
        pytest.param('nb["s"] = {1, 2}', "notebook", "nb['s'] is a set", id="set"),
        pytest.param('nb["t"] = (1, 2)', "notebook", "(use a list)", id="tuple"),
        pytest.param('nb[1] = "x"', "notebook", "JSON keys are strings", id="int-key"),
        pytest.param('nb["f"] = float("nan")', "notebook", "JSON cannot hold", id="nan"),
        pytest.param('nb["big"] = "x" * 70000', "notebook", "over its 65536-byte cap", id="size"),
        pytest.param('nb["me"] = [nb]', "notebook", "nests deeper", id="cycle"),
    ],
)
async def test_bad_results_and_notebooks_fail_the_call(
    sandbox: Sandbox, body: str, kind: str, words: str
) -> None:
    found = await failure(sandbox, program_of(body))
    assert (found.kind, found.hook) == (kind, "on_before_action")
    assert words in found.problem


# -- budgets -----------------------------------------------------------------------------------

LOOP = """
total = 0
for i in range(1000000):
    for j in range(1000000):
        total += 1
"""


async def test_the_line_budget_stops_a_long_loop(sandbox: Sandbox) -> None:
    found = await failure(sandbox, program_of(LOOP))
    assert found.kind == "lines"
    assert "more than 20000 lines" in found.problem


async def test_the_wall_clock_timeout_stops_a_slow_loop(anyio_backend: str) -> None:
    slow = SandboxLimits(timeout_s=0.05, max_lines=10**12)
    found = await failure(LocalSandbox(slow), program_of(LOOP))
    assert found.kind == "timeout"
    async with SubprocessSandbox(slow) as sandbox:
        found = await failure(sandbox, program_of(LOOP))
    assert found.kind == "timeout"


async def test_the_budget_cannot_be_caught_by_the_hook(sandbox: Sandbox) -> None:
    """Every exception class a hook may name in ``except`` is tried; the stop is none of them."""
    program = program_of(
        """
        def spin():
            total = 0
            for i in range(1000000):
                for j in range(1000000):
                    total += 1
        try:
            spin()
        except (ArithmeticError, AttributeError, IndexError, KeyError, LookupError,
                OverflowError, TypeError, ValueError, ZeroDivisionError):
            return hint("caught the stop")
        return hint("finished")
        """
    )
    assert (await failure(sandbox, program)).kind == "lines"


def test_the_budgets_work_off_the_main_thread() -> None:
    """The runtime calls hooks from worker threads; signals would only work on the main one."""
    sandbox = LocalSandbox(LIMITS)
    caught: list[BaseException] = []

    def call() -> None:
        try:
            sandbox.run_sync(program_of(LOOP), "on_before_action", ctx_json(), {})
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            caught.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    [error] = caught
    assert isinstance(error, PatchFailure)
    assert error.kind == "lines"


async def test_infinite_recursion_fails_the_call(sandbox: Sandbox) -> None:
    program = program_of("def down(n):\n    return down(n + 1)\nreturn down(0)")
    assert (await failure(sandbox, program)).kind == "recursion"


async def test_the_tracer_is_restored_after_a_call(anyio_backend: str) -> None:
    import sys

    sandbox = LocalSandbox(LIMITS)
    before = sys.gettrace()
    sandbox.run_sync(program_of("return None"), "on_before_action", ctx_json(), {})
    with pytest.raises(PatchFailure):
        sandbox.run_sync(program_of(LOOP), "on_before_action", ctx_json(), {})
    assert sys.gettrace() is before


async def test_local_sandbox_abandons_a_call_stuck_in_c_code(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What LocalSandbox cannot do: interrupt one C call that is not a match. Its caller is
    answered at ``timeout_s + abandon_grace_s``, and the thread runs on until the call returns
    (docs/patches.md says so). The stuck call is simulated by one that waits without the GIL, so
    the caller's side is what is measured, not a race with the hook's own deadline."""
    sandbox = LocalSandbox(SandboxLimits(timeout_s=0.05), abandon_grace_s=0.05)
    release = threading.Event()
    monkeypatch.setattr(sandbox, "_run", lambda call: release.wait(30))
    try:
        found = await failure(sandbox, program_of("return None"))
    finally:
        release.set()
    assert found.kind == "timeout"
    assert "abandoned the thread" in found.problem


# -- the subprocess sandbox --------------------------------------------------------------------

needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")


@needs_proc
async def test_the_worker_never_sees_the_parents_environment(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    async with SubprocessSandbox(LIMITS) as sandbox:
        [pid] = sandbox.pids
        environ = await anyio.Path(f"/proc/{pid}/environ").read_bytes()
    assert b"OPENAI_API_KEY" not in environ
    assert b"sk-test" not in environ
    variables = dict(item.split(b"=", 1) for item in environ.split(b"\0") if item)
    assert {k.decode(): v.decode() for k, v in variables.items()} == dict(SANDBOX_ENV)


async def test_the_worker_lives_across_calls_in_its_own_process_group(anyio_backend: str) -> None:
    async with SubprocessSandbox(LIMITS) as sandbox:
        [pid] = sandbox.pids
        assert os.getpgid(pid) == pid  # its own group: killing it kills what it started
        for number in range(5):
            outcome = await run(sandbox, program_of('nb["n"] = nb.get("n", 0) + 1'), {"n": number})
            assert outcome.notebook == {"n": number + 1}
        assert sandbox.pids == (pid,)
    assert not _alive(pid)


async def test_killing_a_worker_kills_what_it_started(anyio_backend: str, tmp_path: Path) -> None:
    """Hooks cannot start processes (no os, RLIMIT_NPROC=0); should anything in the worker's
    group exist anyway, the kill reaches it. A wrapper starts a sleeper in the group first."""
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("needs sleep")
    pidfile = tmp_path / "child.pid"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\n{sleep} 300 &\necho $! > {pidfile}\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    limits = SandboxLimits(timeout_s=0.2)
    async with SubprocessSandbox(limits, kill_grace_s=0.2, python=str(wrapper)) as sandbox:
        child = int(pidfile.read_text())
        assert _alive(child)
        found = await failure(sandbox, program_of(f"return {CATASTROPHIC}"))
        assert found.kind == "timeout"
        for _ in range(200):  # the kernel reaps it shortly after the kill
            if not _alive(child):
                break
            await anyio.sleep(0.05)
        assert not _alive(child)


async def test_a_cpu_hog_in_c_is_stopped_by_rlimit_cpu(anyio_backend: str) -> None:
    """The wall clock is set far away, so only RLIMIT_CPU can stop the regex."""
    async with SubprocessSandbox(SandboxLimits(timeout_s=60.0), cpu_seconds=1) as sandbox:
        [first] = sandbox.pids
        found = await failure(sandbox, program_of(f"return {CATASTROPHIC}"))
        assert found.kind == "cpu"
        assert "CPU limit" in found.problem
        assert not _alive(first)
        assert (await run(sandbox, program_of("return hint('back')"))).effect["text"] == "back"
        assert sandbox.pids != (first,)


async def test_a_hang_in_c_is_killed_at_the_wall_clock(anyio_backend: str) -> None:
    async with SubprocessSandbox(SandboxLimits(timeout_s=0.2), kill_grace_s=0.2) as sandbox:
        [first] = sandbox.pids
        found = await failure(sandbox, program_of(f"return {CATASTROPHIC}"))
        assert found.kind == "timeout"
        assert "worker was killed" in found.problem
        assert not _alive(first)
        assert (await run(sandbox, program_of("return hint('back')"))).effect["text"] == "back"


async def test_a_memory_bomb_hits_rlimit_as(anyio_backend: str) -> None:
    async with SubprocessSandbox(LIMITS, memory_bytes=256 * 1024 * 1024) as sandbox:
        found = await failure(sandbox, program_of('x = "a".ljust(10**9)'))
        assert found.kind == "memory"
        assert (await run(sandbox, program_of("return hint('back')"))).effect["text"] == "back"


async def test_a_cancelled_call_kills_the_worker_and_the_sandbox_goes_on(
    anyio_backend: str,
) -> None:
    async with SubprocessSandbox(SandboxLimits(timeout_s=30.0), cpu_seconds=30) as sandbox:
        [first] = sandbox.pids
        with anyio.move_on_after(0.3):
            await run(sandbox, program_of(f"return {CATASTROPHIC}"))
        assert not _alive(first)
        assert (await run(sandbox, program_of("return hint('back')"))).effect["text"] == "back"


async def test_several_workers_serve_concurrent_calls(anyio_backend: str) -> None:
    async with SubprocessSandbox(LIMITS, workers=2) as sandbox:
        assert len(set(sandbox.pids)) == 2
        results: list[Any] = []

        async def one(number: int) -> None:
            program = program_of(f"return hint('{number}')")
            results.append((await run(sandbox, program)).effect["text"])

        async with anyio.create_task_group() as group:
            for number in range(6):
                group.start_soon(one, number)
    assert sorted(results) == [str(n) for n in range(6)]


async def test_a_sandbox_that_is_not_open_is_an_infrastructure_error(anyio_backend: str) -> None:
    with pytest.raises(SandboxInfrastructureError, match="not open") as caught:
        await run(SubprocessSandbox(LIMITS), program_of("return None"))
    assert caught.value.cause == "infrastructure"


async def test_a_worker_that_cannot_start_is_an_infrastructure_error(anyio_backend: str) -> None:
    with pytest.raises(SandboxInfrastructureError, match="could not start a sandbox worker"):
        async with SubprocessSandbox(LIMITS, python="/nonexistent/python"):
            pass
    with pytest.raises(SandboxInfrastructureError, match="did not start"):
        async with SubprocessSandbox(LIMITS, python="/bin/false"):
            pass


def test_bad_settings_are_refused() -> None:
    from envharness.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="at least 1 worker"):
        SubprocessSandbox(workers=0)
    with pytest.raises(ConfigurationError, match="cpu_seconds >= 1"):
        SubprocessSandbox(cpu_seconds=0)
    with pytest.raises(ConfigurationError, match="timeout_s must be > 0"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ConfigurationError, match="max_lines must be at least 1"):
        SandboxLimits(max_lines=0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); a reaped process does not
        return (
            Path(f"/proc/{pid}").exists()
            and b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower()
        )
    except FileNotFoundError:
        return False
