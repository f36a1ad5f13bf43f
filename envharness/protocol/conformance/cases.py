"""The cases: each checks one rule of protocol v1 against a fresh process of the program."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import anyio

from envharness.protocol.conformance.program import (
    CaseFailure,
    CaseRun,
    CaseSkipped,
    ConformanceCase,
    as_json,
    excerpt,
    exit_status_within,
)
from envharness.protocol.errors import AgentReportedError
from envharness.protocol.messages import Feedback

UNSUPPORTED_VERSION: Final = 999
"""A protocol version no agent speaks: offered alone, it must be refused with ``error``."""

LARGE_OBSERVATION_BYTES: Final = 256 * 1024
"""Larger than an OS pipe buffer and than the 64 KiB a default line reader often stops at
(Go's ``bufio.Scanner``, for one); protocol lines may be up to 1 MiB."""


def _synthetic(total: int, turn: int, target: int | None = 3) -> dict[str, Any]:
    """An observation shaped like ``envharness.fixtures.SyntheticEnvironment``'s."""
    return {"total": total, "turn": turn, "target": target, "my_contributions": []}


async def _handshake_case(run: CaseRun) -> str:
    async with run.agent() as agent:
        # An unknown capability must be ignored (spec section 5).
        await agent.handshake(capabilities=("snapshot", "x-conformance-unknown"))
        ready = agent.channel.ready
        assert ready is not None
        named = (
            f"implementation {ready.implementation!r}"
            if ready.implementation
            else "no implementation named (recommended: name@version)"
        )
        capabilities = ", ".join(ready.capabilities) or "none"
        return f"protocol {ready.protocol}, {named}, capabilities: {capabilities}"


async def _unsupported_version_case(run: CaseRun) -> str:
    async with run.agent() as agent:
        try:
            await agent.handshake(protocols=(UNSUPPORTED_VERSION,))
        except AgentReportedError as exc:
            message = exc.message
        else:
            raise CaseFailure(
                f"the agent answered ready with protocol {UNSUPPORTED_VERSION}, a version it "
                "cannot speak; when no offered version is supported, answer `error` and exit"
            )
        agent.step = "exit after error"
        status = await exit_status_within(agent, run.settings.shutdown_grace)
        if status is not None:
            return f"refused with error {excerpt(message)!r}, then exited with status {status}"
        raise CaseFailure(
            f"the agent answered error but was still running {run.settings.shutdown_grace:g} s "
            "later; after refusing every offered version, exit"
        )


async def _act_case(run: CaseRun) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        action = await agent.act(1, _synthetic(0, 0))
        return f"answered with action {excerpt(as_json(action))}"


async def _act_sequence_case(run: CaseRun) -> str:
    turns = 5
    async with run.agent() as agent:
        await agent.handshake()
        for turn in range(1, turns + 1):
            await agent.act(turn, _synthetic(turn - 1, turn - 1))
        return f"answered {turns} acts, each with its own id"


async def _feedback_case(run: CaseRun) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        first = await agent.reply("act (turn 1)", agent.channel.act(1, _synthetic(0, 0)))
        agent.step = "executed feedback (turn 1)"
        await agent.channel.feedback(
            Feedback(turn=1, act_id=first.id, status="executed", action=first.action, outcome={})
        )
        second = await agent.reply("act (turn 2)", agent.channel.act(2, _synthetic(0, 1)))
        agent.step = "blocked feedback (turn 2)"
        await agent.channel.feedback(
            Feedback(
                turn=2,
                act_id=second.id,
                status="blocked",
                action=second.action,
                reason="conformance: this action is blocked on purpose",
            )
        )
        # Any answer to either feedback arrives before this act's action and fails it.
        await agent.act(3, _synthetic(0, 2))
        return "took executed and blocked feedback without answering"


async def _logs_case(run: CaseRun) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        for turn in (1, 2, 3):
            await agent.act_and_feedback(turn, _synthetic(turn - 1, turn - 1))
        agent.step = "shutdown"
        with anyio.move_on_after(run.settings.shutdown_grace):
            await agent.channel.shutdown("conformance: logs case")
        if not agent.logs:
            return "sent no log messages (they are optional)"
        levels = Counter(log.level for log in agent.logs)
        counted = ", ".join(f"{count} {level}" for level, count in sorted(levels.items()))
        return f"{len(agent.logs)} well-formed log messages ({counted})"


_TRICKY_TEXT = 'héllo wörld — 你好 🎲 "quoted" back\\slash\nnew line\ttab \u2028 \x00 end'


async def _observation_values_case(run: CaseRun) -> str:
    observations: list[tuple[str, Any]] = [
        (
            "nested object with unicode",
            {
                "text": _TRICKY_TEXT,
                "ключ": ["значение", {"深い": [[[{"id": "not-the-id", "type": "shutdown"}]]]}],
                "numbers": [0, -1, 2.5, -3e-10, 1e300, 2**63 - 1],
                "flags": [True, False, None],
                "empty": [{}, [], ""],
                "id": "decoy",
                "type": "act",
                "total": 7,
                "target": None,
            },
        ),
        ("a string", _TRICKY_TEXT),
        ("null", None),
        ("an array", [1, "two", {"three": [3]}]),
        ("a number", -42),
    ]
    async with run.agent() as agent:
        await agent.handshake()
        for turn, (what, observation) in enumerate(observations, start=1):
            agent.step = f"act (turn {turn}, observation: {what})"
            await agent.act(turn, observation, actions=[{"value": 1}, {"value": -1}])
        return f"answered {len(observations)} acts: " + ", ".join(w for w, _ in observations)


async def _large_observation_case(run: CaseRun) -> str:
    blob = "0123456789abcdef" * (LARGE_OBSERVATION_BYTES // 16)
    async with run.agent() as agent:
        await agent.handshake()
        await agent.act(1, {**_synthetic(0, 0), "blob": blob})
        await agent.act(2, _synthetic(0, 1))
        return f"answered an act of {len(blob) // 1024} KiB and the act after it"


async def _snapshot_restore_case(run: CaseRun) -> str:
    async with run.agent() as first:
        await first.handshake()
        if "snapshot" not in first.channel.capabilities:
            raise CaseSkipped("the agent did not declare the 'snapshot' capability (optional)")
        for turn in (1, 2):
            await first.act_and_feedback(turn, _synthetic(turn - 1, turn - 1))
        state = await first.reply("snapshot", first.channel.snapshot())
        await first.act(3, _synthetic(2, 2))  # it goes on after a snapshot
    async with run.agent() as second:
        await second.handshake()
        await second.reply("restore", second.channel.restore(state))
        again = await second.reply("snapshot after restore", second.channel.snapshot())
        if again != state:
            raise CaseFailure(
                f"a snapshot right after restoring {excerpt(as_json(state))} returned "
                f"{excerpt(as_json(again))}; restore must put the agent back exactly where the "
                "snapshot was taken (branches and resumed sessions rely on it)"
            )
        await second.act(3, _synthetic(2, 2))  # and it acts after a restore
    return f"state {excerpt(as_json(state))} survived snapshot, restore and snapshot again"


async def _shutdown_case(run: CaseRun) -> str:
    grace = run.settings.shutdown_grace
    async with run.agent() as agent:
        await agent.handshake()
        await agent.act_and_feedback(1, _synthetic(0, 0))
        agent.step = "shutdown"
        started = anyio.current_time()
        with anyio.move_on_after(grace):
            await agent.channel.shutdown("conformance: shutdown case")
            status = await agent.process.wait()
            seconds = anyio.current_time() - started
            if status != 0:
                raise CaseFailure(f"the agent exited with status {status} after shutdown; exit 0")
            return f"exited with status 0 after {seconds:.2f} s"
        raise CaseFailure(
            f"the agent was still running {grace:g} s after shutdown (it would get SIGTERM); "
            "exit when shutdown arrives"
        )


async def _end_of_input_case(run: CaseRun) -> str:
    grace = run.settings.shutdown_grace
    async with run.agent() as agent:
        await agent.handshake()
        await agent.act_and_feedback(1, _synthetic(0, 0))
        agent.step = "end of input"
        assert agent.process.stdin is not None
        await agent.process.stdin.aclose()
        status = await exit_status_within(agent, grace)
        if status is not None:
            return f"exited with status {status} when its input ended"
        raise CaseFailure(
            f"the agent was still running {grace:g} s after its input ended; an agent that "
            "reads end of input must exit as if it had received shutdown"
        )


async def _stdout_case(run: CaseRun) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        for turn in (1, 2, 3):
            await agent.act_and_feedback(turn, _synthetic(turn - 1, turn - 1))
        extra = ""
        if "snapshot" in agent.channel.capabilities:
            await agent.reply("snapshot", agent.channel.snapshot())
            extra = ", a snapshot"
        agent.step = "shutdown (reading the output to its end)"
        with anyio.move_on_after(run.settings.shutdown_grace):
            await agent.channel.shutdown("conformance: stdout case")
        return (
            f"every line was a protocol message through a handshake, 3 acts with feedback{extra}"
            " and shutdown"
        )


CASES: Final[tuple[ConformanceCase, ...]] = (
    ConformanceCase(
        "handshake", "answers hello with ready and an offered version", _handshake_case
    ),
    ConformanceCase(
        "unsupported-version",
        "refuses a hello offering no version it speaks with error, then exits",
        _unsupported_version_case,
    ),
    ConformanceCase("act", "answers act with an action object repeating the act's id", _act_case),
    ConformanceCase(
        "act-sequence", "answers several acts in turn, each with its id", _act_sequence_case
    ),
    ConformanceCase(
        "feedback", "takes executed and blocked feedback without answering", _feedback_case
    ),
    ConformanceCase("logs", "sends only well-formed log messages between answers", _logs_case),
    ConformanceCase(
        "observation-values",
        "accepts unicode, nested values and observations of any JSON kind",
        _observation_values_case,
    ),
    ConformanceCase(
        "large-observation",
        "reads an act line larger than a pipe buffer (256 KiB)",
        _large_observation_case,
    ),
    ConformanceCase(
        "snapshot-restore",
        "round-trips its state through snapshot and restore (capability snapshot)",
        _snapshot_restore_case,
    ),
    ConformanceCase(
        "shutdown", "exits with status 0 within the grace period after shutdown", _shutdown_case
    ),
    ConformanceCase(
        "end-of-input", "exits when its input ends without shutdown", _end_of_input_case
    ),
    ConformanceCase(
        "stdout-protocol-only",
        "writes nothing but protocol lines on stdout through a whole session",
        _stdout_case,
    ),
)
"""Every case, in the order they run; ``handshake`` comes first because all others need it."""
