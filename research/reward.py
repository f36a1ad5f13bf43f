"""The GRPO reward: a sampled patch's measured rerun improvement on its failure batch.

For each completion the trainer sampled, :class:`RerunReward`

1. parses and validates the answer (patch protocol → schema → AST policy → sandbox smoke test,
   the optimizer's own code). An answer that fails is **invalid and earns 0**, as in the paper;
2. reruns the batch's scenarios with the patch stacked on the batch's accepted harness, through
   the optimizer's evaluation code, with the **same scenario identities and seeds** as the
   baseline the batch recorded, and returns **Δ = mean(patched - baseline)** over the batch;
3. counts a session the patch broke (its hooks crashed or overran, the session failed because
   of them) as a failed session, and takes ``crash_penalty`` x the share of such sessions off Δ:
   on a failure batch the baseline is already 0, so without the penalty a crashing patch would
   earn exactly what a harmless no-op earns, and crashing would be a free way out of a negative
   reward.

Rewards are cached by (patch digest, batch identity): a patch sampled twice — in one group, in
another step, or before an interruption when the cache file is kept — is measured once.
Distinct patches of one call are measured concurrently; the evaluator bounds how many reruns
run at once (the optimizer's capacity limiter).

The evaluator is a seam (:class:`PatchEvaluator`): :mod:`research.rerun` adapts the optimizer's
evaluation to it; tests use a fake to pin the contract.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

__all__ = [
    "INVALID_REWARD",
    "Invalid",
    "Measured",
    "PatchEvaluator",
    "Prepared",
    "RerunReward",
    "RewardEntry",
    "batch_identity",
    "completion_text",
]

INVALID_REWARD = 0.0
"""What an answer that does not parse or validate earns (Harness-R1's choice)."""


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed, validated patch ready to be rerun; ``digest`` identifies it in the cache."""

    digest: str
    patch: Any = None


class Invalid(msgspec.Struct, frozen=True, kw_only=True):
    """Why an answer is not a usable patch (the parser's or the policy's message)."""

    problem: str


class Measured(msgspec.Struct, frozen=True, kw_only=True):
    """One rerun of a batch with a patch: each scenario's baseline and patched score.

    ``patch_failures`` names the scenarios whose sessions the patch broke; their ``patched``
    score is the failure score the optimizer gives them. ``seconds`` is the rerun's wall time.
    ``infrastructure`` says why the rerun could not be measured at all (the sandbox itself
    failed): that says nothing about the patch, so it earns no reward (``None``, which TRL
    treats as missing) and is not cached — a later sample of the same patch is measured again.
    """

    baseline: dict[str, float]
    patched: dict[str, float]
    patch_failures: tuple[str, ...] = ()
    seconds: float = 0.0
    infrastructure: str | None = None


class PatchEvaluator(Protocol):
    """What the reward needs from the optimizer (see :mod:`research.rerun`)."""

    async def prepare(self, text: str, batch: str) -> Prepared | Invalid:
        """Parse, check and smoke-test ``text`` as a patch for ``batch``."""
        ...

    async def rerun(self, prepared: Prepared, batch: str) -> Measured:
        """Rerun ``batch`` with the patch, same scenarios and seeds as its baseline."""
        ...


class RewardEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One cached reward, as kept in ``rewards.jsonl``."""

    digest: str
    batch: str
    reward: float
    delta: float
    patch_failures: int = 0
    sessions: int = 0
    seconds: float = 0.0


def completion_text(completion: Any) -> str:
    """The answer text of a TRL completion (a message list, conversational) or a plain string."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    return ""


class RerunReward:
    """The reward function GRPOTrainer calls: ``reward(prompts, completions, batch=…) → floats``.

    ``evaluator`` prepares and reruns patches; ``cache_file`` (optional) keeps every measured
    reward as JSON lines, so a resumed training run does not rerun what it already measured.
    ``stats`` counts calls, cache hits, invalid answers and the seconds spent rerunning.
    ``runner`` runs the async measurement from the trainer's thread: ``anyio.run`` by default,
    or a blocking portal's ``call`` so the evaluator can keep a store open across steps.
    """

    __name__ = "rerun_delta"  # TRL names reward functions in its logs by ``__name__``

    def __init__(
        self,
        evaluator: PatchEvaluator,
        *,
        crash_penalty: float = 1.0,
        cache_file: Path | None = None,
        runner: Callable[..., Any] | None = None,
    ) -> None:
        if crash_penalty < 0:
            raise ValueError(f"crash_penalty must be >= 0, not {crash_penalty!r}")
        self._evaluator = evaluator
        self._crash_penalty = crash_penalty
        self._cache: dict[tuple[str, str], RewardEntry] = {}
        self._cache_file = cache_file
        self._run = runner or anyio.run
        self._lock = threading.Lock()
        self.stats: dict[str, float] = {
            "completions": 0,
            "invalid": 0,
            "cache_hits": 0,
            "reruns": 0,
            "infrastructure": 0,
            "rerun_seconds": 0.0,
            "reward_seconds": 0.0,
        }
        self.invalid_reasons: dict[str, int] = {}
        """Why answers were invalid (the first clause of each problem) and how often."""
        if cache_file is not None and cache_file.is_file():
            decoder = msgspec.json.Decoder(RewardEntry)
            for line in cache_file.read_bytes().splitlines():
                if line.strip():
                    entry = decoder.decode(line)
                    self._cache[(entry.digest, entry.batch)] = entry

    @property
    def cached(self) -> Mapping[tuple[str, str], RewardEntry]:
        return dict(self._cache)

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        batch: Sequence[str] | None = None,
        **_: Any,
    ) -> list[float | None]:
        started = time.perf_counter()
        if batch is None or len(batch) != len(completions):
            raise ValueError(
                "each GRPO row needs a 'batch' column naming its failure batch "
                "(research/rerun.py writes it with each prompt)"
            )
        texts = [completion_text(c) for c in completions]
        rewards = self.score(texts, list(batch))
        self.stats["reward_seconds"] += time.perf_counter() - started
        return rewards

    def score(self, texts: Sequence[str], batches: Sequence[str]) -> list[float | None]:
        """Rewards for answer ``texts[i]`` on batch ``batches[i]`` (blocking; see the module)."""
        self.stats["completions"] += len(texts)
        result: list[float | None] = self._run(self._score_all, list(texts), list(batches))
        return result

    async def _score_all(self, texts: list[str], batches: list[str]) -> list[float | None]:
        keys: list[tuple[str, str] | None] = []
        todo: dict[tuple[str, str], Prepared] = {}
        for text, batch in zip(texts, batches, strict=True):
            prepared = await self._evaluator.prepare(text, batch)
            if isinstance(prepared, Invalid):
                self.stats["invalid"] += 1
                reason = prepared.problem.split(";")[0][:120]
                self.invalid_reasons[reason] = self.invalid_reasons.get(reason, 0) + 1
                keys.append(None)
                continue
            key = (prepared.digest, batch)
            keys.append(key)
            if key in self._cache or key in todo:
                self.stats["cache_hits"] += 1
            else:
                todo[key] = prepared
        if todo:
            await self._measure_all(todo)
        rewards: list[float | None] = []
        for wanted in keys:
            if wanted is None:
                rewards.append(INVALID_REWARD)
            else:
                entry = self._cache.get(wanted)
                rewards.append(entry.reward if entry is not None else None)
        return rewards

    async def _measure_all(self, todo: Mapping[tuple[str, str], Prepared]) -> None:
        try:
            async with anyio.create_task_group() as group:
                for key, prepared in todo.items():
                    group.start_soon(self._measure, key, prepared)
        except ExceptionGroup as failed:
            # One failed rerun cancels its siblings; the caller gets the error that happened.
            raise _first_leaf(failed) from None

    async def _measure(self, key: tuple[str, str], prepared: Prepared) -> None:
        started = time.perf_counter()
        measured = await self._evaluator.rerun(prepared, key[1])
        if measured.infrastructure is not None:
            with self._lock:
                self.stats["infrastructure"] += 1
            return
        entry = self.entry(key, measured, time.perf_counter() - started)
        with self._lock:
            self.stats["reruns"] += 1
            self.stats["rerun_seconds"] += entry.seconds
            self._cache[key] = entry
            if self._cache_file is not None:
                with self._cache_file.open("ab") as handle:
                    handle.write(msgspec.json.encode(entry) + b"\n")

    def entry(self, key: tuple[str, str], measured: Measured, seconds: float) -> RewardEntry:
        """Δ and the reward for one measurement (the arithmetic of the module doc)."""
        scenarios = sorted(measured.baseline)
        missing = [s for s in scenarios if s not in measured.patched]
        if not scenarios or missing:
            raise ValueError(
                f"the rerun of batch {key[1]} did not measure scenario(s) {missing or '(none)'}"
            )
        delta = sum(measured.patched[s] - measured.baseline[s] for s in scenarios) / len(scenarios)
        broken = len(set(measured.patch_failures) & set(scenarios))
        reward = delta - self._crash_penalty * broken / len(scenarios)
        return RewardEntry(
            digest=key[0],
            batch=key[1],
            reward=reward,
            delta=delta,
            patch_failures=broken,
            sessions=len(scenarios),
            seconds=measured.seconds or seconds,
        )


def _first_leaf(group: BaseExceptionGroup[Exception]) -> Exception:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def batch_identity(parts: Mapping[str, Any]) -> str:
    """A short stable id for a failure batch from what makes it one (scenarios, seeds, base)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return "batch-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
