"""The model engineer: packet in, K concurrent calls, proposals with costs or errors back."""

from __future__ import annotations

import logging

import msgspec
import pytest

from envharness.errors import ConfigurationError
from envharness.llm import (
    Completion,
    ModelEngineer,
    OpenAICompatibleProvider,
    ProviderError,
    RenderLimits,
    ScriptedCall,
    ScriptedProvider,
    total_cost,
)
from envharness.optimizer import (
    CodeHook,
    Engineer,
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
    HarnessPatch,
)
from envharness.records import canonical
from tests.llm._support import KEY, FakeEndpoint, completion, status

pytestmark = pytest.mark.anyio

ANSWER = "<think>look up first</think><patch>[]</patch>"


def packet() -> FailurePacket:
    refund_first = FailureStep(
        step=0,
        participant="alice",
        action={"tool": "issue_refund", "order": "A-17"},
        outcome={"error": "order not looked up"},
        state={"order_looked_up": False},
        predicates={"order_looked_up": False},
        admissible=[{"tool": "lookup_order"}, {"tool": "issue_refund"}, {"tool": "reply"}],
    )
    failed = FailureExample(
        session_id="s-1",
        scenario_id="refund-17",
        trial=0,
        task="Refund order A-17.",
        passed=False,
        reward=0.0,
        steps=(refund_first,),
    )
    passed = FailureExample(
        session_id="s-9",
        scenario_id="refund-18",
        passed=True,
        reward=1.0,
        steps=(
            FailureStep(step=0, participant="alice", action={"tool": "lookup_order"}),
            FailureStep(step=1, participant="alice", action={"tool": "issue_refund"}),
        ),
    )
    return FailurePacket(
        environment="support-desk",
        hooks=("on_init", "make_pre_hint", "on_before_action", "on_post_step"),
        state_keys=("order_looked_up", "refunded"),
        predicate_keys=("order_looked_up",),
        action_examples=({"tool": "lookup_order", "order": "A-17"},),
        clusters=(
            FailureCluster(
                signature="issue_refund-before-lookup_order",
                description="The refund was attempted before the order was looked up.",
                sessions=("s-1", "s-2", "s-3"),
                example=failed,
            ),
        ),
        passing=(passed,),
        current_patch=HarnessPatch(
            hooks=(
                CodeHook(
                    hook="on_post_step",
                    code="def on_post_step(ctx, nb):\n    return None",
                    description="an earlier accepted hook",
                ),
            )
        ).to_dict(),
        forbidden_terms=("A-17-SECRET-ANSWER",),
        task="Handle the customer's refund request.",
    )


async def test_count_proposals_come_back_in_call_order_with_costs() -> None:
    def answer(call: ScriptedCall) -> Completion:
        # Calls run concurrently and arrive in any order; the seed says which call this is.
        n = (call.seed or 0) - 7
        return Completion(text=f"answer {n}", model="m", input_tokens=100, output_tokens=n, usd=0.5)

    provider = ScriptedProvider([answer] * 3, model="m")
    engineer = ModelEngineer(provider)
    assert isinstance(engineer, Engineer)
    proposals = await engineer.propose(packet(), 3, seed=7)
    assert [p.text for p in proposals] == ["answer 0", "answer 1", "answer 2"]
    assert all(p.error is None and p.engineer == "scripted-model" for p in proposals)
    assert [p.cost.output_tokens for p in proposals if p.cost] == [0, 1, 2]
    total = total_cost(p.cost for p in proposals)
    assert (total.input_tokens, total.output_tokens, total.usd, total.model) == (300, 3, 1.5, "m")
    # Sampling as the paper does, one seed per call so seeded endpoints still differ.
    assert {(c.temperature, c.top_p, c.max_tokens) for c in provider.calls} == {(0.7, 0.95, 4096)}
    assert sorted(c.seed for c in provider.calls if c.seed is not None) == [7, 8, 9]


async def test_a_single_proposal_is_greedy_unless_told_otherwise() -> None:
    provider = ScriptedProvider([ANSWER, ANSWER])
    await ModelEngineer(provider).propose(packet(), 1, seed=3)
    await ModelEngineer(provider, greedy_single=False, temperature=0.3).propose(packet(), 1, seed=3)
    assert [(c.temperature, c.top_p) for c in provider.calls] == [(0.0, 1.0), (0.3, 0.95)]


async def test_a_failed_call_costs_one_candidate_not_the_run() -> None:
    def by_seed(call: ScriptedCall) -> str:
        if call.seed == 1:
            raise ProviderError("POST x failed after 4 attempts: 503")
        if call.seed == 2:
            raise ValueError("provider plugin bug")
        return ANSWER

    provider = ScriptedProvider([by_seed] * 4)
    proposals = await ModelEngineer(provider).propose(packet(), 4, seed=0)
    assert [p.text for p in proposals] == [ANSWER, "", "", ANSWER]
    assert proposals[1].error == "POST x failed after 4 attempts: 503"
    assert proposals[2].error == "ValueError: provider plugin bug"
    assert proposals[1].cost is not None
    assert proposals[1].cost.model == "scripted"
    assert proposals[1].cost.seconds is not None


async def test_the_prompt_shows_what_hooks_can_read() -> None:
    provider = ScriptedProvider([ANSWER])
    engineer = ModelEngineer(provider)
    await engineer.propose(packet(), 1, seed=0)
    [call] = provider.calls
    system, user = call.messages
    assert (system.role, user.role) == ("system", "user")
    assert "<patch>" in system.content
    for expected in (
        "support-desk",
        "Handle the customer's refund request.",
        "`order_looked_up`",
        "`refunded`",
        "issue_refund-before-lookup_order",
        "3 sessions",
        "The refund was attempted before the order was looked up.",
        '"order not looked up"',
        "s-9",  # the passing contrast
        # the accepted patch it stacks on, as code
        "on_post_step: an earlier accepted hook\n```python\ndef on_post_step(ctx, nb):\n",
        "1 term the environment marks as answers (not shown)",
        "on_before_action",
    ):
        assert expected in user.content, expected
    assert "$" not in user.content.replace("$$", "")
    assert "A-17-SECRET-ANSWER" not in system.content + user.content  # answers are not shown
    shown = ModelEngineer(provider, limits=RenderLimits(show_forbidden_terms=True))
    assert '"A-17-SECRET-ANSWER"' in shown.messages(packet())[1].content


async def test_proposals_over_http_run_concurrently(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.gate = 4  # each request is held until four are in flight at once
    fake.default = completion(ANSWER, prompt_tokens=50, completion_tokens=5)
    engineer = ModelEngineer(OpenAICompatibleProvider(url, "fake-model", backoff=0.0))
    assert engineer.name == "openai"
    assert engineer.version.startswith("engineer-v1@")
    assert engineer.version.endswith("/fake-model")
    proposals = await engineer.propose(packet(), 4, seed=100)
    assert fake.gate_opened
    assert fake.max_in_flight == 4
    assert [p.text for p in proposals] == [ANSWER] * 4
    assert sorted(r.body["seed"] for r in fake.requests) == [100, 101, 102, 103]
    total = total_cost(p.cost for p in proposals)
    assert (total.input_tokens, total.output_tokens) == (200, 20)


async def test_the_limiter_bounds_the_calls_in_flight(
    endpoint: tuple[FakeEndpoint, str], api_key: str
) -> None:
    fake, url = endpoint
    fake.gate = 2
    engineer = ModelEngineer(
        OpenAICompatibleProvider(url, "fake-model", backoff=0.0), max_concurrency=2
    )
    proposals = await engineer.propose(packet(), 5, seed=0)
    assert len(proposals) == 5
    assert all(p.error is None for p in proposals)
    assert fake.max_in_flight == 2


async def test_an_endpoint_failing_through_its_retries_gives_failed_proposals(
    endpoint: tuple[FakeEndpoint, str], api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="envharness.llm")
    fake, url = endpoint
    fake.queue(completion(ANSWER))
    fake.default = status(500, f'{{"error": "internal", "echo": "{KEY}"}}')
    engineer = ModelEngineer(
        OpenAICompatibleProvider(url, "fake-model", retries=2, backoff=0.0), max_concurrency=1
    )
    proposals = await engineer.propose(packet(), 2, seed=0)
    ok, failed = sorted(proposals, key=lambda p: p.error is not None)  # either call may be first
    assert ok.text == ANSWER
    assert ok.error is None
    assert failed.text == ""
    assert failed.error is not None
    assert "failed after 3 attempts: 500 Internal Server Error" in failed.error
    assert failed.cost is not None
    assert failed.cost.seconds is not None
    assert len(fake.requests) == 4
    # The key reached the endpoint, and nowhere else: not the errors, not the cost records.
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in fake.requests)
    for proposal in proposals:
        assert KEY not in msgspec.json.encode(proposal).decode()
        assert proposal.cost is not None
        assert KEY not in canonical(proposal.cost).decode()
    assert "[redacted]" in failed.error
    assert "retrying" in caplog.text
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"temperature": 3.0}, "temperature must be between 0 and 2"),
        ({"top_p": 0.0}, "top_p must be more than 0"),
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"max_concurrency": 0}, "max_concurrency must be at least 1"),
        ({"prompt": "engineer-v0"}, "no packaged prompt 'engineer-v0'; choose one of engineer-v1"),
    ],
)
def test_bad_settings_are_named(options: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        ModelEngineer(ScriptedProvider([]), **options)  # type: ignore[arg-type]


def test_a_provider_must_be_a_provider() -> None:
    with pytest.raises(ConfigurationError, match="provider must be a Provider"):
        ModelEngineer("gpt-4o")  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [0, -1, True, 2.0])
async def test_a_bad_count_is_named(count: object) -> None:
    with pytest.raises(ConfigurationError, match="count must be a positive integer"):
        await ModelEngineer(ScriptedProvider([])).propose(packet(), count, seed=0)  # type: ignore[arg-type]


async def test_a_scripted_provider_out_of_replies_says_so() -> None:
    with pytest.raises(ProviderError, match="has 0 replies and got call 1"):
        await ScriptedProvider([]).complete([])
