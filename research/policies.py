"""A real model as a frozen agent policy: it picks its next tool call by likelihood.

The optimizer's premise is a frozen model whose systematic failures a harness can fix without
touching it. To show that with a real model, offline and on a CPU, :class:`LikelihoodPolicy`
shows the model the observation as a chat prompt and scores each action on the environment's
menu by the mean log-probability the model gives its JSON; it takes the most likely one. That
is deterministic (same prompt, same action: reruns with the same seeds are comparable), always
yields a well-formed action, and is still the model's own choice — a small model's preferences,
including its mistakes, are what the harness has to work around.

:class:`SmolDeskPolicy` is that policy with SmolLM2-135M-Instruct on the support desk
(:mod:`envharness.demos.support_desk`): ``--agent agent=research.policies:SmolDeskPolicy``.
The model is loaded once per process and shared by every session's agent (a fresh agent per
session, as the runtime requires; scoring is serialised by a lock), and so are the scores of
prompts already seen (:class:`ScoreMemo`): reruns show the model the same prompts again.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

__all__ = [
    "LikelihoodPolicy",
    "Menu",
    "ScoreMemo",
    "SmolDeskPolicy",
    "desk_menu",
    "score_candidates",
]

Menu = Callable[[Any], tuple[list[dict[str, str]], list[dict[str, Any]]]]
"""observation → (chat messages, candidate actions)."""

DESK_SYSTEM = (
    "You are a support agent. Tools: lookup_order checks an order; issue_refund pays; "
    "reply answers and closes the ticket. Give the JSON of your next tool call."
)
"""Short on purpose: on a CPU the prompt's length is most of each step's cost."""


def desk_menu(observation: Any) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The support desk's prompt and its four possible tool calls."""
    order_id = observation["order_id"]
    done = observation.get("done") or []
    lines = [observation["ticket"]]
    lines.append(
        "Done so far: " + ("; ".join(json.dumps(step) for step in done) if done else "nothing")
    )
    if "order" in observation:
        lines.append(f"Order record: {json.dumps(observation['order'])}")
    for hint in observation.get("hints") or ():  # what the harness says (hints, vetoes)
        lines.append(f"Note: {hint}")
    candidates: list[dict[str, Any]] = [
        {"tool": "lookup_order", "order_id": order_id},
        {"tool": "issue_refund", "order_id": order_id, "amount": observation["amount_requested"]},
        {"tool": "reply", "template": "refund_issued"},
        {"tool": "reply", "template": "refund_denied"},
    ]
    messages = [
        {"role": "system", "content": DESK_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
    return messages, candidates


def score_candidates(
    model: Any, tokenizer: Any, messages: Sequence[dict[str, str]], answers: Sequence[str]
) -> list[float]:
    """Mean log-probability of each answer's tokens after the chat prompt.

    The prompt is run once and its key/value cache shared by the answers, which are then scored
    in one batch: on a CPU the prompt is most of the cost, so it is not paid once per answer.
    """
    import torch

    prompt = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
    if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    prompt_ids = list(prompt)
    answer_ids = [list(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
    if not answer_ids or not all(answer_ids):
        raise ValueError("every candidate answer must have at least one token")
    device = model.device
    width = max(len(ids) for ids in answer_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with torch.no_grad():
        head = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True)
        first = torch.log_softmax(head.logits[0, -1].float(), dim=-1)
        cache = _cache_of(head)
        cache.batch_repeat_interleave(len(answer_ids))
        rows = [ids + [pad] * (width - len(ids)) for ids in answer_ids]
        mask = [
            [1] * len(prompt_ids) + [1] * len(ids) + [0] * (width - len(ids)) for ids in answer_ids
        ]
        tail = model(
            input_ids=torch.tensor(rows, device=device),
            attention_mask=torch.tensor(mask, device=device),
            use_cache=True,
            **{_cache_argument(model): cache},
        )
        logprobs = torch.log_softmax(tail.logits.float(), dim=-1)
    scores = []
    for row, ids in enumerate(answer_ids):
        total = float(first[ids[0]])
        total += sum(float(logprobs[row, i - 1, ids[i]]) for i in range(1, len(ids)))
        scores.append(total / len(ids))
    return scores


def _cache_argument(model: Any) -> str:
    """``cache`` in transformers >= 5.2x, ``past_key_values`` before (deprecated since)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


class ScoreMemo:
    """Scores already computed, by prompt and answers; the oldest go first past ``size``.

    The scores are a pure function of the prompt and the answers, and an optimizer reruns the
    same scenarios with the same seeds: most prompts come again (in the suite's optimizer run on
    the support desk, 14 prompts are 5 distinct ones), and each costs a forward pass of the
    model. Not thread-safe by itself: the policy holds its scoring lock around it.
    """

    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ValueError(f"a score memo keeps at least 1 prompt's scores; size={size!r}")
        self._size = size
        self._scores: OrderedDict[str, list[float]] = OrderedDict()

    def get(self, key: str) -> list[float] | None:
        scores = self._scores.get(key)
        if scores is not None:
            self._scores.move_to_end(key)
        return scores

    def put(self, key: str, scores: list[float]) -> None:
        self._scores[key] = scores
        if len(self._scores) > self._size:
            self._scores.popitem(last=False)


class LikelihoodPolicy:
    """Takes the action on ``menu(observation)`` the model finds most likely (see module)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        menu: Menu,
        *,
        implementation: str,
        lock: Any = None,
        memo: ScoreMemo | None = None,
    ) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._menu = menu
        self._lock = lock or threading.Lock()
        self._memo = memo if memo is not None else ScoreMemo()
        self.implementation = implementation
        self.choices: list[dict[str, Any]] = []
        self.scored = 0
        """Prompts this policy ran through the model (the others were remembered)."""

    def act(self, observation: Any) -> dict[str, Any]:
        messages, candidates = self._menu(observation)
        answers = [json.dumps(candidate) for candidate in candidates]
        key = json.dumps([messages, answers], sort_keys=True)
        with self._lock:
            scores = self._memo.get(key)
            if scores is None:
                scores = score_candidates(self._model, self._tokenizer, messages, answers)
                self._memo.put(key, scores)
                self.scored += 1
        best = max(range(len(candidates)), key=lambda index: scores[index])
        self.choices.append(candidates[best])
        return candidates[best]


class SmolDeskPolicy(LikelihoodPolicy):
    """SmolLM2-135M-Instruct on the support desk; a class, so ``--agent …:SmolDeskPolicy`` works."""

    MODEL: ClassVar[str] = "smollm2"
    _shared: ClassVar[tuple[Any, Any] | None] = None
    _load_lock: ClassVar[threading.Lock] = threading.Lock()
    _score_lock: ClassVar[threading.Lock] = threading.Lock()
    _shared_memo: ClassVar[ScoreMemo] = ScoreMemo()  # shared, as the model is

    runs_inline = False  # scoring takes ~0.1-0.5 s of CPU: keep it off the event loop

    def __init__(self) -> None:
        model, tokenizer = self.shared()
        super().__init__(
            model,
            tokenizer,
            desk_menu,
            implementation="smollm2-135m-instruct-likelihood@1",
            lock=self._score_lock,
            memo=self._shared_memo,
        )

    @classmethod
    def shared(cls) -> tuple[Any, Any]:
        """The model and tokenizer, loaded on first use (once per process)."""
        with cls._load_lock:
            if cls._shared is None:
                from research.models import load_model, load_tokenizer, resolve_model

                location = resolve_model(cls.MODEL)
                model = load_model(location, dtype="auto")
                model.eval()
                cls._shared = (model, load_tokenizer(location))
            return cls._shared
