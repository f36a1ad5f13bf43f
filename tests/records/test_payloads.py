"""Payloads: one tagged Struct per evidence kind, and how they survive encoding."""

from __future__ import annotations

import math
import typing
from typing import Any

import msgspec
import pytest

from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Artifact,
    Branch,
    CandidateVerdict,
    Checkpoint,
    Cost,
    DecisionRequested,
    DecisionSelected,
    EnvironmentRef,
    ErrorInfo,
    ExperimentConfig,
    ExperimentCreated,
    ExperimentStatus,
    Finding,
    Hint,
    HookCalled,
    Intervention,
    Log,
    Observation,
    OperationReceipt,
    OperationRef,
    OptimizerAccepted,
    OptimizerConfigRef,
    OptimizerDecision,
    OptimizerMeasured,
    OptimizerProposal,
    OptimizerStarted,
    OptimizerStatus,
    Outcome,
    ParticipantOutcome,
    ParticipantRef,
    Payload,
    ProtocolViolation,
    ScenarioRef,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    Transcript,
    canonical,
    decode_payload,
)

# The kinds DESIGN.md ("Core concepts" → Kinds) names; the union must hold exactly these.
DESIGN_KINDS = {
    "session.created",
    "session.status",
    "segment.started",
    "segment.ended",
    "observation",
    "action.attempted",
    "action.executed",
    "action.blocked",
    "outcome",
    "hint",
    "cost",
    "score",
    "finding",
    "artifact",
    "checkpoint",
    "branch",
    "intervention",
    "operation.receipt",
    "decision.requested",
    "decision.selected",
    "protocol.violation",
    "log",
}

CONFIG = SessionConfig(
    environment=EnvironmentRef(
        name="grid",
        version="2",
        turn_order="sequential",
        roles=("mover", "watcher"),
        input_type="tests.Input",
        action_type="tests.Action",
        observation_type="tests.Observation",
        input_schema={"type": "object"},
    ),
    participants={
        "alice": ParticipantRef(role="mover", implementation="a@1"),
        "bob": ParticipantRef(role="watcher", implementation="b@2"),
    },
    scenario=ScenarioRef(id="s-1", input={"size": 3}, reference=[1, 2], metadata={"tag": "x"}),
    seed=7,
    turns=12,
    envharness_version="0.1.0",
    harness_version="h@1",
    scoring_version="score@1",
    experiment_id="exp_1",
    trial=2,
    operations=(OperationRef(name="engine", version="3", config={"depth": 2}),),
    action_timeout=4.5,
)
ERROR = ErrorInfo(type="ValueError", message="bad", traceback="Traceback ...", stderr_tail="oops")

# One payload per kind, every field set away from its default so a lost field shows.
SAMPLES: list[Any] = [
    ExperimentCreated(
        config=ExperimentConfig(
            name="sweep",
            scenarios=(CONFIG.scenario,),
            trials=2,
            seed=42,
            turns=5,
            max_concurrency=4,
            environment=CONFIG.environment,
            participants=CONFIG.participants,
            envharness_version="0.1.0",
        )
    ),
    ExperimentStatus(status="completed", total=2, completed=1, failed=1),
    SessionCreated(config=CONFIG),
    SessionStatus(status="failed", reason="agent raised", error=ERROR),
    SegmentStarted(segment=2, cause="resume", previous=1, state="ab" * 32),
    SegmentEnded(segment=2, status="interrupted"),
    Observation(observation={"total": 3, "seen": [1, 2]}),
    ActionAttempted(action={"value": 1}, seconds=0.25),
    ActionExecuted(action={"value": 1}, outcome={"total": 4}),
    ActionBlocked(action={"value": 99}, reason="out of range", by="hook"),
    Outcome(state="cd" * 32, done=True, signals={"total": 4.0}),
    Observation(observation={"row": 1}, text="\x1b[43m \x1b[0m|"),
    ActionExecuted(action={"value": 2}, outcome=None, reward=-1.0),
    Outcome(state="ce" * 32, truncated=True),
    ParticipantOutcome(outcome={"winner": "alice"}, reward=-1.0),
    Transcript(
        messages=(
            {"role": "user", "content": "Your move."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "act", "arguments": '{"move": 2}'},
                    }
                ],
            },
        )
    ),
    Score(version="s@1", metrics={}, per_participant={"alice": {"chips": 1.0}}),
    Hint(text="try smaller steps", source="make_pre_hint"),
    HookCalled(
        hook="on_before_action", effect="block_and_prompt", detail={"message": "look first"}
    ),
    Cost(input_tokens=10, output_tokens=20, usd=0.5, seconds=1.5, model="m-1"),
    Score(version="score@1", metrics={"total": 4.0}, passed=True, uncertainty={"total": 0.1}),
    Finding(title="went negative", detail="at turn 3", severity="medium", cites=(4, 9)),
    Artifact(name="board.png", sha256="ef" * 32, size=123, media_type="image/png"),
    Checkpoint(label="t3", state="01" * 32, agents={"alice": {"memory": [1]}}, notebook=[1]),
    Branch(parent_session="ses_1", checkpoint_seq=17, intervention={"kind": "x"}, reason="why"),
    Intervention(intervention={"kind": "reset-total"}, reason="test", state="23" * 32),
    OperationReceipt(
        operation="engine", version="3", request={"q": 1}, result={"a": 2}, error=ERROR
    ),
    DecisionRequested(decision="pick", options=("a", "b"), operations=(3, 4)),
    DecisionSelected(decision="pick", selected="b", operations=(5,)),
    ProtocolViolation(problem="invalid JSON", artifact="45" * 32, excerpt="{nope"),
    Log(message="hello", level="warning", stream="stderr"),
    OptimizerStarted(
        config=OptimizerConfigRef(
            name="desk",
            environment=CONFIG.environment,
            participants=CONFIG.participants,
            engineer="mining",
            engineer_version="mining@1",
            scenarios=("s-1", "s-2"),
            held_out=("h-1",),
            regression=("r-1",),
            candidates=4,
            iterations=2,
            turns=8,
            trials=2,
            seed=3,
            capacity=2,
            sandbox="local",
            alpha=0.1,
            confidence=0.9,
            metric="reward",
            solved=0.5,
            min_improvement=0.1,
            resamples=100,
            smoke_test=False,
            stop_when_solved=False,
            max_concurrency=3,
            base_version="harness-v1",
            base_digest="ab" * 32,
            directory="/tmp/run",
            envharness_version="0.1.0",
        )
    ),
    OptimizerStatus(status="failed", reason="engineer down", error=ERROR),
    OptimizerProposal(
        iteration=1,
        candidate=2,
        engineer="mining",
        text="<patch>[]</patch>",
        error="timeout",
        problem="line 1: import is not allowed",
        patch={"hooks": []},
        digest="cd" * 32,
    ),
    OptimizerMeasured(
        iteration=1,
        role="candidate",
        candidate=2,
        digest="cd" * 32,
        version="candidate-cdcd",
        experiment_id="exp_1",
        values={"s-1": 1.0, "s-2": None},
        failures={"s-2": "patch"},
        hooks={"on_before_action:block_and_prompt": 3},
        hook_errors=1,
        tokens=120,
        seconds=2.5,
        error=ERROR,
    ),
    OptimizerDecision(
        iteration=1,
        verdicts=(
            CandidateVerdict(
                candidate=2,
                status="rejected",
                reason="breaks s-3",
                digest="cd" * 32,
                mean_reward=0.5,
                interval=(0.0, 1.0),
                p_value=0.25,
                improved=("s-1",),
                regressions=("s-3",),
            ),
        ),
        selected=2,
        reason="best reward",
        engineer_tokens=7,
        rerun_tokens=9,
        seconds=1.25,
    ),
    OptimizerAccepted(
        version="harness-v2",
        iteration=1,
        candidate=2,
        digest="cd" * 32,
        patch={"hooks": []},
        parent="harness-v1",
        experiment_id="exp_1",
        mean_reward=0.5,
        interval=(0.25, 0.75),
        p_value=0.03,
        score=1.0,
        engineer_tokens=10,
        rerun_tokens=20,
        seconds=3.5,
    ),
]


def tag(payload_type: Any) -> str:
    return str(payload_type.__struct_config__.tag)


# Kinds beyond DESIGN.md's list: an experiment keeps its frozen configuration in its own chain,
# and so does an optimizer run (its answers, measurements, decisions and accepted versions); a
# model agent's answers keep the messages they added to its conversation (``transcript``).
KINDS = DESIGN_KINDS | {
    "outcome.participant",
    "transcript",
    "experiment.created",
    "experiment.status",
    "hook",
    "optimizer.started",
    "optimizer.status",
    "optimizer.proposal",
    "optimizer.measured",
    "optimizer.decision",
    "optimizer.accepted",
}


def test_the_union_holds_the_design_kinds_and_ours() -> None:
    members = typing.get_args(Payload)
    assert {tag(member) for member in members} == KINDS
    assert len(members) == len(KINDS), "two payload types share a kind"


def test_there_is_a_sample_of_every_kind() -> None:
    assert {tag(type(sample)) for sample in SAMPLES} == KINDS


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (Observation(observation=1), b'{"kind":"observation","observation":1}'),
        (
            ActionExecuted(action={}, outcome=None),
            b'{"action":{},"kind":"action.executed","outcome":null}',
        ),
        (
            Outcome(state="ab", done=True),
            b'{"done":true,"kind":"outcome","signals":{},"state":"ab"}',
        ),
        (
            Score(version="1", metrics={"m": 1.0}),
            b'{"kind":"score","metrics":{"m":1.0},"passed":null,"uncertainty":{},"version":"1"}',
        ),
    ],
)
def test_fields_added_since_a_kind_was_first_written_leave_its_old_bytes_alone(
    payload: Any, expected: bytes
) -> None:
    """Text views, rewards, truncation and per-participant scores are absent unless given: a
    session that uses none of them seals exactly the bytes it sealed before they existed."""
    assert canonical(payload) == expected


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: tag(type(p)))
def test_every_kind_round_trips_through_the_tagged_union(payload: Any) -> None:
    data = canonical(payload)
    assert msgspec.json.decode(data)["kind"] == tag(type(payload))
    decoded = decode_payload(data)
    assert type(decoded) is type(payload)
    assert decoded == payload
    assert canonical(decoded) == data, "re-encoding a decoded payload changed its bytes"


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: tag(type(p)))
def test_canonical_bytes_have_sorted_keys_at_every_level(payload: Any) -> None:
    data = canonical(payload)
    assert data == canonical(msgspec.json.decode(data))


def test_defaults_fill_in_when_an_older_payload_lacks_a_newer_field() -> None:
    decoded = decode_payload(b'{"kind":"log","message":"old"}')
    assert decoded == Log(message="old", level="info", stream=None)


def test_unknown_fields_from_a_newer_writer_are_ignored() -> None:
    decoded = decode_payload(b'{"kind":"hint","text":"t","added_later":{"x":1}}')
    assert decoded == Hint(text="t")


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="kind"):
        decode_payload(b'{"kind":"no.such.kind"}')


def test_a_field_of_the_wrong_type_is_refused_with_its_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.segment"):
        decode_payload(b'{"kind":"segment.ended","segment":"two","status":"completed"}')


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_recorded_as_null_and_still_decode(value: float) -> None:
    outcome = Outcome(state="00" * 32, signals={"ratio": value, "fine": 1.0})
    decoded = decode_payload(canonical(outcome))
    assert isinstance(decoded, Outcome)
    assert decoded.signals == {"ratio": None, "fine": 1.0}
    score = Score(version="v", metrics={"m": value}, uncertainty={"m": value})
    decoded_score = decode_payload(canonical(score))
    assert isinstance(decoded_score, Score)
    assert decoded_score.metrics == {"m": None}
    assert decoded_score.uncertainty == {"m": None}


def test_payloads_are_frozen() -> None:
    log = Log(message="x")
    with pytest.raises(AttributeError):
        log.message = "y"  # type: ignore[misc]
