"""The ``re`` helpers: the same answers as ``re`` in every sandbox, and a match that cannot hold
the host (issue 18: a backtracking match held ``LocalSandbox``'s whole process in C)."""

from __future__ import annotations

import os
import re
import signal
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from envharness.optimizer import LocalSandbox, PatchFailure, SandboxLimits, SubprocessSandbox
from envharness.optimizer.patches.sandbox import _hookrt
from envharness.optimizer.patches.sandbox.regex_workers import RegexWorkers

from ._sandboxes import ctx_json, program_of

CATASTROPHIC = 're.match("(a+)+$", "a" * 40 + "b")'  # longer than anyone will wait, in C
FAST = SandboxLimits(timeout_s=0.2)
WORKER_ONLY = 'return hint(str(re.findall(r"(\\d)\\1", "a112")))'  # a backreference: no proof


@pytest.fixture(scope="module")
def workers() -> Any:
    pool = RegexWorkers()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def shared() -> Any:
    """One sandbox (and its regex worker) for the tests that only read answers."""
    sandbox = LocalSandbox()
    yield sandbox
    sandbox.close()


# -- which matches may run in place ------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [r"abc", r"rm(?:\s|/|$)", r"\d{3}-\d{4}", r"^(?:ab|cd)x$", r"(?!foo)\w\w\w", r"[a-z]",
     r"order (\d+)", r"[ab]*c", r"(?:ab)+", r"a*?b", r"(?=\d+)\d"],
)  # fmt: skip
def test_patterns_that_cannot_backtrack_far_on_a_short_text_have_a_cost(pattern: str) -> None:
    cost = _hookrt.regex_cost(pattern, re.UNICODE, 40)
    assert cost is not None
    assert 0 < cost <= _hookrt.REGEX_FAST_STEPS


def test_a_repeat_is_bounded_only_on_a_short_text() -> None:
    """``(n + 1)`` counts from each of ``n + 1`` starts, each path ``n`` steps long."""
    assert _hookrt.regex_cost(r"\d+x", re.UNICODE, 40) is not None
    assert _hookrt.regex_cost(r"\d+x", re.UNICODE, 10_000) is None
    assert _hookrt.regex_cost(r"abc", re.UNICODE, 10_000) is not None


@pytest.mark.parametrize(
    "pattern",
    [r"(a+)+$", r"(ab|cd)*", r"(a|aa)*c", r"(?:a?)+", r"(?:\b)*", r"(a)\1", r"(a)?(?(1)b|c)",
     r"(ab|a){40}c", r"(?:a*){100}"],
)  # fmt: skip
def test_repeated_choices_and_backreferences_have_no_bound(pattern: str) -> None:
    assert _hookrt.regex_cost(pattern, re.UNICODE, 10) is None


def test_the_mining_engineers_prefix_pattern_runs_in_place() -> None:
    from envharness.optimizer.engineers.grammar import _prefix_pattern

    assert _hookrt.regex_cost(_prefix_pattern("rm -rf"), re.UNICODE, 200) is not None


# -- the same answers as re, in place and in a worker -----------------------------------------

CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("search", r"(\d+)-(?P<b>\d+)?", "x 12- 3-4", {}),
    ("match", r"(\w+) (\w+)", "ab cd ef", {}),
    ("fullmatch", r"[a-c]+", "abcab", {}),
    ("search", r"zz", "abc", {}),
    ("finditer", r"(a)(b)?", "ab a ab", {}),
    ("findall", r"(\w)(\d)", "a1 b2 c", {}),
    ("findall", r"\d", "a1b22", {}),
    ("sub", r"(\d)", "abc1d2", {"repl": r"<\1>", "count": 0}),
    ("split", r",\s*", "a, b,c", {"maxsplit": 1}),
]


@pytest.mark.parametrize(("op", "pattern", "string", "extra"), CASES)
def test_a_worker_answers_as_re_does_in_place(
    workers: RegexWorkers, op: str, pattern: str, string: str, extra: dict[str, Any]
) -> None:
    request = {"op": op, "pattern": pattern, "flags": re.UNICODE, "string": string, **extra}
    here = _hookrt.regex_op(request)
    assert workers.run(request, _deadline(5)) == here
    compiled = re.compile(pattern)
    if op in ("search", "match", "fullmatch") and here is not None:
        found = getattr(compiled, op)(string)
        assert here == [list(found.span(g)) for g in range(compiled.groups + 1)]


async def test_hook_code_reads_matches_as_on_re(anyio_backend: str, shared: LocalSandbox) -> None:
    program = program_of(
        r"""
        m = re.search(r"(?P<n>\d+)-(\d+)?", "x 12- 3")
        p = re.compile(r"(\w)(\d)", re.I)
        out = [m.group(), m.group(1, "n"), m["n"], m.groups(), m.groups("?"), m.groupdict(),
               m.start(1), m.end(), m.span("n"), m.string, p.pattern, p.flags & re.I,
               p.findall("a1 B2"), [x.group(2) for x in p.finditer("a1 b2")],
               p.sub(r"\2", "a1 b2"), p.split("xa1y"), re.escape("a.b"),
               re.fullmatch("ab", "ab") is not None, p.search("zz") is None,
               re.findall(p, "c3")]
        return hint(repr(out))
        """
    )
    outcome = await shared.run(program, "on_before_action", ctx_json(), {})
    async with SubprocessSandbox() as worker:  # matches run in place there: the same answers
        elsewhere = await worker.run(program, "on_before_action", ctx_json(), {})
    assert elsewhere.effect == outcome.effect
    m = re.search(r"(?P<n>\d+)-(\d+)?", "x 12- 3")
    p = re.compile(r"(\w)(\d)", re.I)
    assert m is not None
    expected = [
        m.group(), m.group(1, "n"), m["n"], m.groups(), m.groups("?"), m.groupdict(),
        m.start(1), m.end(), m.span("n"), m.string, p.pattern, p.flags & re.I,
        p.findall("a1 B2"), [x.group(2) for x in p.finditer("a1 b2")],
        p.sub(r"\2", "a1 b2"), p.split("xa1y"), re.escape("a.b"), True, True,
        re.findall(p, "c3"),
    ]  # fmt: skip
    assert outcome.effect["text"] == repr(expected)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('re.sub("a", len, "aaa")', "replacement must be a string"),
        ('re.search("a", "a", 128)', "flags must be made of re.I, re.M and re.S"),
        ('re.search("(", "a")', "not a regular expression"),
        ('re.search(b"a", "a")', "pattern must be a string"),
        ('re.match("a", "a").group(3)', "no such group"),
        ("re.compile('a').pattern = 'b'", None),
    ],
)
async def test_bad_regex_calls_fail_with_a_clear_error(
    anyio_backend: str, shared: LocalSandbox, body: str, words: str | None
) -> None:
    if words is None:  # assigning an attribute never passes the policy; the object refuses too
        pattern = _hookrt._Regex(_hookrt.run_regex_here, _budget()).compile("a")
        with pytest.raises(TypeError, match="read-only"):
            pattern.pattern = "b"  # type: ignore[misc]
        return
    with pytest.raises(PatchFailure) as caught:
        await shared.run(program_of(body), "on_before_action", ctx_json(), {})
    assert caught.value.kind == "exception"
    assert words in caught.value.problem


async def test_a_bad_pattern_is_a_value_error_the_hook_may_catch(
    anyio_backend: str, shared: LocalSandbox
) -> None:
    program = program_of('try:\n    re.compile("(")\nexcept ValueError:\n    return hint("bad")')
    outcome = await shared.run(program, "on_before_action", ctx_json(), {})
    assert outcome.effect == {"effect": "hint", "text": "bad"}


# -- a backtracking match cannot hold the host -------------------------------------------------


async def test_a_catastrophic_match_times_out_while_the_host_goes_on(anyio_backend: str) -> None:
    """Without the regex worker this call never returns and the loop never ticks: the match
    holds the GIL in C. Now the loop runs all along and the call fails at its deadline."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.lowlevel.checkpoint()
            ticks += 1

    async with LocalSandbox(FAST) as sandbox, anyio.create_task_group() as group:
        group.start_soon(tick)
        with pytest.raises(PatchFailure) as caught:
            await sandbox.run(program_of(f"return {CATASTROPHIC}"), "on_before_action",
                              ctx_json(), {})  # fmt: skip
        seen = ticks
        group.cancel_scope.cancel()
        assert sandbox.regex_pids == ()  # the worker that ran it was killed
        # the next call gets a fresh worker and works
        program = program_of('return hint(str(re.findall(r"\\d+", "a12b3")))')
        outcome = await sandbox.run(program, "on_before_action", ctx_json(), {})
        assert outcome.effect == {"effect": "hint", "text": "['12', '3']"}
    assert caught.value.kind == "timeout"
    assert "0.2s wall-clock timeout" in caught.value.problem
    assert seen > 0
    assert "abandoned" not in caught.value.problem  # stopped, not left running


def test_a_catastrophic_match_times_out_in_run_sync_too() -> None:
    sandbox = LocalSandbox(FAST)
    try:
        with pytest.raises(PatchFailure) as caught:
            sandbox.run_sync(program_of(f"return {CATASTROPHIC}"), "on_before_action",
                             ctx_json(), {})  # fmt: skip
        assert caught.value.kind == "timeout"
    finally:
        sandbox.close()


async def test_closing_the_sandbox_kills_its_regex_workers(anyio_backend: str) -> None:
    program = program_of(WORKER_ONLY)
    async with LocalSandbox() as sandbox:
        await sandbox.run(program, "on_before_action", ctx_json(), {})
        [pid] = sandbox.regex_pids
    assert sandbox.regex_pids == ()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(Exception, match="sandbox was closed") as caught:
        await sandbox.run(program, "on_before_action", ctx_json(), {})
    assert type(caught.value).__name__ == "SandboxInfrastructureError"


async def test_a_worker_that_died_idle_is_replaced_not_blamed(anyio_backend: str) -> None:
    program = program_of(WORKER_ONLY)
    async with LocalSandbox() as sandbox:
        await sandbox.run(program, "on_before_action", ctx_json(), {})
        [pid] = sandbox.regex_pids
        os.kill(pid, signal.SIGKILL)
        # dead (not reaped: the pool does that when it finds it dead)
        await anyio.to_thread.run_sync(os.waitid, os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        outcome = await sandbox.run(program, "on_before_action", ctx_json(), {})
        assert outcome.effect == {"effect": "hint", "text": "['1']"}
        assert sandbox.regex_pids != (pid,)


def _deadline(seconds: float) -> float:
    import time

    return time.monotonic() + seconds


def _budget() -> Any:
    return _hookrt._Budget(_hookrt.Limits())
