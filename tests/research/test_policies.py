"""The likelihood policy: scores match a plain forward pass, and the choice is a menu action."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from research.policies import LikelihoodPolicy, ScoreMemo, desk_menu, score_candidates

OBSERVATION = {
    "ticket": "Ada asks for a refund of 20.00 on order A-1000. Refund it and reply.",
    "order_id": "A-1000",
    "amount_requested": 20.0,
    "done": [],
}


@pytest.fixture(scope="module")
def loaded(tiny_model: Path) -> tuple[Any, Any]:
    from research.models import load_model, load_tokenizer

    return load_model(str(tiny_model), dtype="float32"), load_tokenizer(str(tiny_model))


def naive_scores(model: Any, tokenizer: Any, messages: Any, answers: list[str]) -> list[float]:
    """One full forward pass per answer, no cache: the definition the fast path must meet."""
    import torch

    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    scores = []
    for answer in answers:
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + ids])).logits[0]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        total = sum(float(logprobs[len(prompt) + i - 1, t]) for i, t in enumerate(ids))
        scores.append(total / len(ids))
    return scores


def test_the_shared_prompt_cache_gives_the_plain_scores(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    messages, candidates = desk_menu(OBSERVATION)
    answers = [json.dumps(c) for c in candidates]
    fast = score_candidates(model, tokenizer, messages, answers)
    assert fast == pytest.approx(naive_scores(model, tokenizer, messages, answers), abs=1e-4)


def test_the_policy_takes_the_most_likely_menu_action(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    policy = LikelihoodPolicy(model, tokenizer, desk_menu, implementation="tiny-likelihood@1")
    action = policy.act(OBSERVATION)
    _, candidates = desk_menu(OBSERVATION)
    assert action in candidates
    assert policy.act(OBSERVATION) == action  # deterministic: reruns are comparable
    messages, _ = desk_menu(OBSERVATION)
    scores = score_candidates(model, tokenizer, messages, [json.dumps(c) for c in candidates])
    assert action == candidates[scores.index(max(scores))]


def test_a_prompt_seen_before_is_not_run_through_the_model_again(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    memo = ScoreMemo()
    first = LikelihoodPolicy(model, tokenizer, desk_menu, implementation="t@1", memo=memo)
    again = LikelihoodPolicy(model, tokenizer, desk_menu, implementation="t@1", memo=memo)
    chosen = first.act(OBSERVATION)
    assert again.act(OBSERVATION) == chosen
    assert (first.scored, again.scored) == (1, 0)
    looked_up = {**OBSERVATION, "done": [{"tool": "lookup_order", "order_id": "A-1000"}]}
    again.act(looked_up)  # another prompt: scored
    assert again.scored == 1
    messages, candidates = desk_menu(looked_up)
    scores = score_candidates(model, tokenizer, messages, [json.dumps(c) for c in candidates])
    assert again.choices[-1] == candidates[scores.index(max(scores))]


def test_the_memo_forgets_the_least_recently_used_past_its_size() -> None:
    memo = ScoreMemo(size=2)
    memo.put("a", [1.0])
    memo.put("b", [2.0])
    assert memo.get("a") == [1.0]  # now the most recently used
    memo.put("c", [3.0])
    assert memo.get("b") is None
    assert (memo.get("a"), memo.get("c")) == ([1.0], [3.0])
    with pytest.raises(ValueError, match="at least 1 prompt's scores; size=0"):
        ScoreMemo(size=0)


def test_the_desk_menu_shows_what_the_agent_has_seen() -> None:
    seen = {
        **OBSERVATION,
        "done": [{"tool": "lookup_order", "order_id": "A-1000"}],
        "order": {"id": "A-1000", "paid": 31.0},
        "hints": ["reply to the customer now"],
    }
    messages, candidates = desk_menu(seen)
    assert "lookup_order" in messages[1]["content"]
    assert '"paid": 31.0' in messages[1]["content"]
    assert "Note: reply to the customer now" in messages[1]["content"]
    assert [c["tool"] for c in candidates] == ["lookup_order", "issue_refund", "reply", "reply"]
