"""Training throughput of the smoke configuration, and where GRPO's wall time goes.

What it measures, on the tiny model (a 2-layer Llama, hidden 64, tokenizer trained locally):

- **SFT**: steps per second of ``research.training.train_sft`` (TRL's SFTTrainer) against a raw
  PyTorch loop over the same model, the same tokenised rows and AdamW, measured in the same run
  (the ratio is the trainer's overhead: data collation, logging, checkpoint bookkeeping);
- **GRPO**: steps per second of ``train_grpo`` with the real rerun reward on the support desk
  (``research.rerun``: baseline, failure batches, sandboxed reruns through the optimizer's own
  evaluation), and the share of the wall time spent generating (TRL's sampling) and rerunning
  (the reward), plus the reruns' parallelism: the sum of the reruns' own times over the wall
  time of the reward calls (above 1 when they overlap under the capacity limiter). Generation is
  also compared with a raw ``model.generate`` of the same K samples.

So that GRPO samples real patches, the tiny model is first taught (SFT, lr 3e-3, ``--warm``
steps) the mining engineer's first ``--answers`` answers to the support desk's failure packet;
with random weights every sample would be invalid and nothing would be rerun. Reruns use the
subprocess sandbox, the optimizer's default (``--sandbox local`` for the in-process one).

Run it from the repository root::

    .venv/bin/python tools/bench/engineer_training.py              # 20 SFT steps, 5 GRPO steps, K=8
    .venv/bin/python tools/bench/engineer_training.py --capacity 1 # reruns one at a time
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def mining_rows(inputs: Any) -> list[dict[str, Any]]:
    """SFT rows: each failure batch's prompt -> each mining answer (what GRPO will sample)."""
    from envharness.optimizer import MiningEngineer

    rows = []
    for batch in inputs.batches:
        for proposal in MiningEngineer().answers(batch.packet, 8):
            completion = [{"role": "assistant", "content": proposal.text}]
            rows.append({"prompt": [dict(m) for m in batch.messages], "completion": completion})
    return rows


def raw_sft_steps_per_second(model_dir: str, rows: list[dict[str, Any]], steps: int) -> float:
    """A bare loop: tokenise once, then forward, loss on the answer tokens, backward, AdamW."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batches = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        full = tokenizer.apply_chat_template(row["prompt"] + row["completion"])
        full = list(full["input_ids"] if hasattr(full, "keys") else full)
        labels = [-100] * len(prompt) + full[len(prompt) :]
        batches.append((torch.tensor([full]), torch.tensor([labels])))
    model.train()
    started = time.perf_counter()
    for step in range(steps):
        ids, labels = batches[step % len(batches)]
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return steps / (time.perf_counter() - started)


def raw_generate_seconds(
    model_dir: str, messages: list[dict[str, str]], k: int, tokens: int
) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    started = time.perf_counter()
    with torch.no_grad():
        model.generate(
            **encoded, do_sample=True, temperature=0.7, top_p=0.95, max_new_tokens=tokens,
            num_return_sequences=k, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sft-steps", type=int, default=20)
    parser.add_argument("--grpo-steps", type=int, default=5)
    parser.add_argument("-K", type=int, default=8)
    parser.add_argument("--tickets", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--warm", type=int, default=300, help="SFT steps that teach patches")
    parser.add_argument("--answers", type=int, default=3, help="mining answers taught")
    parser.add_argument("--sandbox", choices=("subprocess", "local"), default="subprocess")
    parser.add_argument("--max-completion-length", type=int, default=384)
    args = parser.parse_args()

    import trl.trainer.grpo_trainer as grpo_module

    from envharness.api.harness import AsyncEnvironmentHarness
    from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk
    from envharness.demos.support_desk import tickets as make_tickets
    from research.conversations import texts_of
    from research.rerun import RerunSettings, grpo_inputs
    from research.tiny import build_tiny
    from research.training import GRPOSettings, SFTSettings, train_grpo, train_sft

    with tempfile.TemporaryDirectory(prefix="bench-research-") as scratch:
        work = Path(scratch)
        harness = AsyncEnvironmentHarness(
            work / "store", environment=SupportDesk, agents={"agent": RefundFirstPolicy}
        )
        settings = RerunSettings(
            turns=8, sandbox=args.sandbox, batch_size=args.tickets, capacity=args.capacity
        )
        with grpo_inputs(harness, make_tickets(args.tickets), settings=settings) as inputs:
            rows = mining_rows(inputs)
            tiny = str(build_tiny(texts_of(rows), work / "tiny"))
            print(f"{len(rows)} SFT rows (support-desk packet -> mining answers), tiny model")

            record = train_sft(tiny, rows, work / "sft", SFTSettings(max_steps=args.sft_steps))
            sft_rate = record["global_step"] / record["train_metrics"]["train_runtime"]
            raw_rate = raw_sft_steps_per_second(tiny, rows, args.sft_steps)
            print(
                f"SFT  {args.sft_steps} steps: trainer {sft_rate:.1f} steps/s, raw loop "
                f"{raw_rate:.1f} steps/s, ratio {sft_rate / raw_rate:.2f}"
            )

            # The mining engineer's first answers, learned (nearly) by heart.
            teach = SFTSettings(max_steps=args.warm, learning_rate=3e-3, save_steps=10_000)
            warm = train_sft(tiny, rows[: args.answers], work / "warm", teach)
            print(
                f"warm start: {args.warm} SFT steps at lr 3e-3 on {args.answers} answer(s), loss "
                f"{warm['first_loss']:.2f} -> {warm['last_loss']:.3f}"
            )

            generation = {"seconds": 0.0, "calls": 0.0}
            original = grpo_module.GRPOTrainer._generate_single_turn

            def timed(self: Any, *a: Any, **k: Any) -> Any:
                started = time.perf_counter()
                try:
                    return original(self, *a, **k)
                finally:
                    generation["seconds"] += time.perf_counter() - started
                    generation["calls"] += 1

            grpo_module.GRPOTrainer._generate_single_turn = timed
            grpo = GRPOSettings(
                max_steps=args.grpo_steps,
                num_generations=args.K,
                max_completion_length=args.max_completion_length,
                save_steps=10_000,
            )
            done = train_grpo(str(work / "warm"), inputs.rows, inputs.reward, work / "grpo", grpo)
            stats = inputs.reward.stats
            reasons = sorted(inputs.reward.invalid_reasons.items(), key=lambda i: -i[1])
        runtime = done["train_metrics"]["train_runtime"]
        steps = done["global_step"]
        print(f"GRPO {steps} steps, K={args.K}: {steps / runtime:.2f} steps/s ({runtime:.1f} s)")
        print(
            f"  generation {generation['seconds']:.1f} s = "
            f"{generation['seconds'] / runtime:.0%} of the train loop"
        )
        print(
            f"  reward     {stats['reward_seconds']:.1f} s = "
            f"{stats['reward_seconds'] / runtime:.0%} (completions {int(stats['completions'])}, "
            f"invalid {int(stats['invalid'])}, reruns {int(stats['reruns'])}, "
            f"cache hits {int(stats['cache_hits'])})"
        )
        rest = runtime - generation["seconds"] - stats["reward_seconds"]
        print(
            f"  the rest (log-probs, loss, backward, optimizer) {rest:.1f} s = {rest / runtime:.0%}"
        )
        if stats["reward_seconds"] > 0 and stats["reruns"]:
            print(
                f"  reruns: {stats['rerun_seconds']:.1f} s of rerun time in "
                f"{stats['reward_seconds']:.1f} s of reward wall time = parallelism "
                f"{stats['rerun_seconds'] / stats['reward_seconds']:.2f} at capacity "
                f"{args.capacity}"
            )
        for reason, count in reasons[:3]:
            print(f"  invalid x{count}: {reason}")
        raw = raw_generate_seconds(
            str(work / "warm"), inputs.rows[0]["prompt"], args.K, args.max_completion_length
        )
        per_call = generation["seconds"] / max(generation["calls"], 1)
        print(
            f"  one generation call: TRL {per_call:.2f} s, raw model.generate {raw:.2f} s "
            f"(ratio {per_call / raw:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
