"""Asking the engineer for candidates and checking each answer before anything is rerun.

Each answer is parsed (:func:`~envharness.optimizer.patches.parse.parse_answer`), stacked on the
accepted patch, checked by the AST policy (:meth:`ExecutableHarness.from_patch`) and
smoke-tested in the sandbox on contexts from the failure packet; an answer that fails a stage is
recorded as invalid, with why. The packet is recorded before the engineer is asked, and every
answer (``optimizer.proposal``) before it is rerun, so a resumed run takes the recorded answers
and never asks the engineer again.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

from envharness.errors import EnvharnessError
from envharness.optimizer.context import RunContext
from envharness.optimizer.engineers.contract import FailurePacket, Proposal
from envharness.optimizer.patches.errors import PatchError, SandboxInfrastructureError
from envharness.optimizer.patches.executable import ExecutableHarness, contexts_from_packet
from envharness.optimizer.patches.parse import parse_answer
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.rerun import candidate_version
from envharness.optimizer.runlog import read_packet
from envharness.optimizer.state import Proposed, RunState
from envharness.records import OptimizerProposal

__all__ = ["propose"]


async def propose(
    run: RunContext, iteration: int, packet: FailurePacket, state: RunState
) -> list[Proposed]:
    """The iteration's candidates: the recorded ones when the run is resumed, else the
    engineer's answers to ``packet`` (recorded first; a resumed run shows the engineer the
    packet it recorded), each checked and recorded."""
    recorded = run.memo.proposals.get(iteration)
    if recorded is not None:  # a resumed run: the answers were given and checked already
        return [_restack(run, record, state) for record in recorded]
    shown = run.memo.packets.get(iteration)
    if shown is None:
        run.memo.packets[iteration] = await run.log.packet(iteration, packet)
    else:
        packet = await read_packet(run.store, shown)
    answers = await _ask(run, iteration, packet)
    costs = [answer.cost for answer in answers if answer.cost is not None]
    run.memo.costs[iteration] = costs
    await run.log.costs(iteration, costs)
    contexts = contexts_from_packet(packet)
    proposed = []
    for index, answer in enumerate(answers):
        item = await _check(run, iteration, index, answer, state, contexts)
        await run.append(item.record)
        proposed.append(item)
    run.memo.proposals[iteration] = [item.record for item in proposed]
    valid = sum(1 for item in proposed if item.stacked is not None)
    run.say(
        f"iteration {iteration}: {len(proposed)} answer(s) from {run.engineer.name}, {valid} valid"
    )
    return proposed


async def _ask(run: RunContext, iteration: int, packet: FailurePacket) -> list[Proposal]:
    """K answers; an engineer that fails or overruns its timeout costs its candidates only."""
    count = run.config.candidates
    name = run.engineer.name
    try:
        with anyio.fail_after(run.config.engineer_timeout):
            answers = await run.engineer.propose(
                packet, count, seed=run.config.seed * 1000 + iteration
            )
    except TimeoutError:
        return [Proposal(engineer=name, error="the engineer did not answer in time")] * count
    except Exception as exc:  # noqa: BLE001 - an engineer's failure costs its candidates only
        problem = f"the engineer failed: {type(exc).__name__}: {exc}"
        return [Proposal(engineer=name, error=problem)] * count
    checked: list[Proposal] = []
    for answer in list(answers)[:count]:
        if not isinstance(answer, Proposal):
            answer = Proposal(engineer=name, error=f"not a Proposal: {answer!r:.200}")
        checked.append(answer)
    return checked


async def _check(
    run: RunContext,
    iteration: int,
    index: int,
    answer: Proposal,
    state: RunState,
    contexts: list[Any],
) -> Proposed:
    base = OptimizerProposal(
        iteration=iteration,
        candidate=index,
        engineer=answer.engineer or run.engineer.name,
        text=answer.text,
        error=answer.error,
    )
    if answer.error is not None:
        return Proposed(base)
    try:
        candidate = parse_answer(answer.text).patch
        stacked = state.patch.stacked(candidate)
        executable = ExecutableHarness.from_patch(
            stacked,
            sandbox=run.sandbox,
            version=candidate_version(stacked.digest()),
            forbidden_terms=run.terms,
        )
        if run.config.smoke_test:
            (await executable.smoke_test(contexts)).raise_for_failure()
    except PatchError as exc:
        return Proposed(msgspec.structs.replace(base, problem=str(exc)))
    except SandboxInfrastructureError as exc:
        problem = f"infrastructure: the sandbox failed during the smoke test: {exc}"
        return Proposed(msgspec.structs.replace(base, error=problem))
    record = msgspec.structs.replace(base, patch=candidate.to_dict(), digest=stacked.digest())
    return Proposed(record, stacked)


def _restack(run: RunContext, record: OptimizerProposal, state: RunState) -> Proposed:
    if record.patch is None or record.digest is None:
        return Proposed(record)
    stacked = state.patch.stacked(HarnessPatch.from_dict(record.patch))
    if stacked.digest() != record.digest:
        raise EnvharnessError(
            f"optimizer run {run.run_id}: the recorded candidate {record.candidate} of "
            f"iteration {record.iteration} no longer stacks to its recorded digest"
        )
    return Proposed(record, stacked)
