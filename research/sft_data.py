"""SFT pairs from a store: each accepted patch, with the prompt that asked for it.

An optimizer run's chain says, iteration by iteration, which measurement was the reference (the
baseline, then each accepted version's rerun), which patch was already accepted, what each
engineer answered and which answer was accepted — and the failure packet each engineer was shown
(an ``artifact`` record, :data:`envharness.optimizer.runlog.PACKET_MEDIA_TYPE`), which is read
back as it was. A run recorded before packets were (or in a format this version does not read)
has its packets rebuilt exactly as the loop built them
(:func:`envharness.optimizer.engineers.packets.build_packet` over the reference experiment's
sessions of the run's training scenarios, with the accepted patch so far). Either is rendered
with the engineer's prompt (:func:`envharness.llm.render_packet`), so a training prompt is the
inference prompt. The answer is written in the patch protocol:
``<think>…</think><patch>…</patch>`` with the engineer's reasoning and the patch as accepted.

The evidence behind the pairs — the failed sessions the packets show and the reruns that proved
each patch — must be admissible training data: it is frozen as one snapshot with the declared
entitlement (or taken from a given snapshot) and admitted as an envharness dataset, whose
admission refuses incomplete, non-terminal, non-entitled or unrewarded trajectories and names
each one (:class:`envharness.trajectories.errors.AdmissionError`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["SftPair", "admit_evidence", "answer_text", "sft_pairs"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SftPair:
    """One failure packet -> accepted patch example, and the sessions it rests on."""

    messages: tuple[dict[str, str], ...]
    answer: str
    run_id: str
    iteration: int
    candidate: int
    version: str
    engineer: str
    mean_reward: float
    evidence: tuple[str, ...]

    def row(self, *, dataset: str | None, snapshot: str | None) -> dict[str, Any]:
        return {
            "prompt": [dict(m) for m in self.messages],
            "completion": [{"role": "assistant", "content": self.answer}],
            "run": self.run_id,
            "iteration": self.iteration,
            "candidate": self.candidate,
            "version": self.version,
            "engineer": self.engineer,
            "mean_reward": self.mean_reward,
            "dataset": dataset,
            "snapshot": snapshot,
        }


def answer_text(think: str, patch: Any) -> str:
    """The accepted answer in the patch protocol, normalised (the raw text may wrap it)."""
    return f"<think>{think}</think><patch>{json.dumps(patch, ensure_ascii=False)}</patch>"


async def sft_pairs(
    store: Any,
    environment: Any,
    *,
    runs: Sequence[str] | None = None,
    prompt: str = "engineer-v1",
) -> tuple[list[SftPair], list[str]]:
    """Every accepted patch of the store's optimizer runs on ``environment``'s spec.

    Returns the pairs and notes on runs that were skipped (another environment, no accepted
    version), so a caller can say why a dataset is smaller than expected.
    """
    from envharness.errors import EnvharnessError
    from envharness.llm import RenderLimits, load_prompt, render_packet
    from envharness.optimizer import HarnessPatch
    from envharness.optimizer.engineers.evidence import experiment_traces
    from envharness.optimizer.engineers.packets import build_packet
    from envharness.optimizer.patches.parse import parse_answer
    from envharness.optimizer.runlog import read_packet, read_run
    from envharness.optimizer.versions import harness_version

    template = load_prompt(prompt)
    spec = environment.spec
    known = [info.id for info in await store.optimizer_runs()]
    chosen = list(runs) if runs else known
    missing = [run for run in chosen if run not in known]
    if missing:
        raise ValueError(
            f"no optimizer run {', '.join(missing)} in the store; "
            f"runs: {', '.join(known) or 'none'}"
        )
    pairs: list[SftPair] = []
    notes: list[str] = []
    for run_id in chosen:
        _, memo = await read_run(store, run_id)
        config = memo.config
        baseline = next((m for m in reversed(memo.measured) if m.role == "baseline"), None)
        proposals = {(p.iteration, p.candidate): p for ps in memo.proposals.values() for p in ps}
        if config is None or baseline is None or baseline.experiment_id is None:
            notes.append(f"{run_id}: no recorded baseline; skipped")
            continue
        if config.environment.name != spec.name:
            notes.append(f"{run_id}: environment {config.environment.name}, not {spec.name}")
            continue
        if not memo.accepted:
            notes.append(f"{run_id}: no accepted version")
            continue
        current: Any = None
        if config.base_version:
            current = HarnessPatch.from_dict(
                (await harness_version(store, config.base_version)).patch
            )
        reference = baseline.experiment_id
        train = set(config.scenarios)
        for version in sorted(memo.accepted.values(), key=lambda a: a.iteration):
            traces = [
                t for t in await experiment_traces(store, reference) if t.scenario_id in train
            ]
            packet = None
            shown = memo.packets.get(version.iteration)
            if shown is not None:
                try:
                    packet = await read_packet(store, shown)
                except EnvharnessError as exc:
                    notes.append(f"{run_id}: {exc}; rebuilt the packet of {version.version}")
            if packet is None:  # recorded before packets were: rebuilt as the loop built it
                so_far = current.to_dict() if current is not None and current.hooks else None
                packet = await build_packet(
                    store, traces, environment, metric=config.metric, current_patch=so_far
                )
            proposal = proposals.get((version.iteration, version.candidate))
            if proposal is None or proposal.patch is None:
                notes.append(f"{run_id}: the accepted answer of {version.version} is not recorded")
                break
            think = parse_answer(proposal.text).think if proposal.text else ""
            messages = render_packet(template, packet, RenderLimits())
            rerun = [] if version.experiment_id is None else [
                t.session_id for t in await experiment_traces(store, version.experiment_id)
            ]  # fmt: skip
            pairs.append(
                SftPair(
                    messages=tuple({"role": m.role, "content": m.content} for m in messages),
                    answer=answer_text(think, proposal.patch),
                    run_id=run_id,
                    iteration=version.iteration,
                    candidate=version.candidate,
                    version=version.version,
                    engineer=proposal.engineer,
                    mean_reward=version.mean_reward,
                    evidence=tuple(t.session_id for t in traces) + tuple(rerun),
                )
            )
            if version.experiment_id is not None:
                reference = version.experiment_id
            current = HarnessPatch.from_dict(version.patch)
    return pairs, notes


async def admit_evidence(
    store: Any,
    sessions: Sequence[str],
    *,
    name: str,
    entitlement: str | None = None,
    snapshot: str | None = None,
) -> tuple[str, str]:
    """Admit ``sessions`` as an envharness dataset; returns (dataset id, snapshot id).

    With ``entitlement`` the sessions are frozen as a new snapshot declaring it; with
    ``snapshot`` that snapshot must hold every session. Admission is the datasets layer's:
    :class:`~envharness.trajectories.errors.AdmissionError` names each refused trajectory.
    """
    from envharness.trajectories.datasets import create_dataset
    from envharness.trajectories.model import Entitlement
    from envharness.trajectories.snapshots import freeze, snapshot_trajectories

    if (entitlement is None) == (snapshot is None):
        raise ValueError(
            "SFT data trains a model on recorded evidence: declare the basis with "
            "--entitle-training BASIS, or give --snapshot ID of a snapshot declaring it"
        )
    if snapshot is None:
        frozen = await freeze(
            store,
            sorted(set(sessions)),
            label=f"{name} evidence",
            entitlement=Entitlement(basis=entitlement or ""),
        )
        snapshot = frozen.metadata.id
    else:
        held = {t.session_id async for t in snapshot_trajectories(store, snapshot)}
        absent = sorted(set(sessions) - held)
        if absent:
            raise ValueError(
                f"snapshot {snapshot} lacks {len(absent)} session(s) the pairs rest on: "
                f"{', '.join(absent[:8])}{' …' if len(absent) > 8 else ''}"
            )
    dataset = await create_dataset(store, name, [snapshot])
    return dataset.id, snapshot
