"""ExecutableHarness: the validation pipeline, HarnessHooks calls, blame, and a real session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from random import Random
from typing import Any

import msgspec
import pytest

from envharness import AsyncEnvironmentHarness, EnvironmentSpec, HookView, Resolution, Scenario
from envharness.errors import ConfigurationError
from envharness.hooks import BlockAndPrompt, HarnessHooks, HookFailure, Rewrite
from envharness.optimizer import (
    ExecutableHarness,
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
    HarnessPatch,
    LocalSandbox,
    PatchFailure,
    PatchPolicyError,
    PatchSchemaError,
    PatchSmokeTestError,
    Sandbox,
    SandboxInfrastructureError,
    SandboxLimits,
    SubprocessSandbox,
    contexts_from_packet,
    parse_answer,
    smoke_contexts,
    validate_patch,
)
from envharness.optimizer.patches.sandbox import HookOutcome, HookProgram
from envharness.records import HookCalled, SessionCreated

from ._sandboxes import context, hook_code, patch_of

pytestmark = pytest.mark.anyio

LIMITS = SandboxLimits(timeout_s=2.0, max_lines=20_000)
NEEDS_LOOKUP = """
if ctx.action.get("tool") == "refund" and not ctx.predicates.get("looked_up"):
    nb["vetoes"] = nb.get("vetoes", 0) + 1
    return block_and_prompt("look the order up first: use lookup")
return None
"""


@pytest.fixture(params=["local", "subprocess"])
async def sandbox(request: pytest.FixtureRequest, anyio_backend: str) -> AsyncIterator[Sandbox]:
    if request.param == "local":
        yield LocalSandbox(LIMITS)
    else:
        async with SubprocessSandbox(LIMITS) as opened:
            yield opened


# -- building --------------------------------------------------------------------------------


async def test_from_patch_takes_a_patch_or_its_json_and_names_a_version(anyio_backend: str) -> None:
    patch = patch_of(NEEDS_LOOKUP)
    harness = ExecutableHarness.from_patch(patch, sandbox=LocalSandbox())
    assert isinstance(harness, HarnessHooks)
    assert harness.version == f"patch-{patch.digest()[:12]}"
    assert harness.defined == frozenset({"on_before_action"})
    assert harness.patch == patch
    again = ExecutableHarness.from_patch(
        json.loads(json.dumps(patch.to_dict())), sandbox=LocalSandbox(), version="desk-v2"
    )
    assert again.version == "desk-v2"
    assert again.patch == patch
    assert "desk-v2" in repr(again)


def test_from_patch_refuses_bad_input() -> None:
    with pytest.raises(PatchSchemaError, match="unknown operation"):
        ExecutableHarness.from_patch([{"op": "remove"}], sandbox=LocalSandbox())
    with pytest.raises(PatchPolicyError, match="line 2: import"):
        ExecutableHarness.from_patch(patch_of("import os"), sandbox=LocalSandbox())
    with pytest.raises(PatchPolicyError, match="forbidden term #1"):
        ExecutableHarness.from_patch(
            patch_of("return hint('order 7 costs 20 EUR')"),
            sandbox=LocalSandbox(),
            forbidden_terms=["20 EUR"],
        )
    with pytest.raises(ConfigurationError, match="sandbox must be"):
        ExecutableHarness.from_patch(patch_of("return None"), sandbox=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty string"):
        ExecutableHarness.from_patch(patch_of("return None"), sandbox=LocalSandbox(), version="")


# -- calling -----------------------------------------------------------------------------------


async def test_call_returns_typed_effects_and_the_notebook(sandbox: Sandbox) -> None:
    harness = ExecutableHarness.from_patch(patch_of(NEEDS_LOOKUP), sandbox=sandbox)
    ctx = context(action={"tool": "refund"})
    effect, notebook = await harness.call("on_before_action", ctx, {"vetoes": 1})
    assert effect == BlockAndPrompt(message="look the order up first: use lookup")
    assert notebook == {"vetoes": 2}
    assert await harness.call("on_post_step", ctx, {"x": 1}) == (None, {"x": 1})


async def test_a_failing_hook_is_a_patch_failure_and_a_hook_failure(sandbox: Sandbox) -> None:
    harness = ExecutableHarness.from_patch(patch_of("return nb['missing']"), sandbox=sandbox)
    with pytest.raises(PatchFailure) as caught:
        await harness.call("on_before_action", context(), {})
    assert isinstance(caught.value, HookFailure)  # what the runtime catches and records
    assert (caught.value.cause, caught.value.kind) == ("patch", "exception")
    assert "KeyError" in str(caught.value)


async def test_a_rewrite_must_be_admissible(sandbox: Sandbox) -> None:
    patch = patch_of("return rewrite({'tool': 'lookup'}, reason='look up first')")
    harness = ExecutableHarness.from_patch(patch, sandbox=sandbox)
    allowed = context(admissible=[{"tool": "lookup"}, {"tool": "reply"}])
    effect, _ = await harness.call("on_before_action", allowed, {})
    assert effect == Rewrite(action={"tool": "lookup"}, reason="look up first")
    refused = context(admissible=[{"tool": "reply"}])
    with pytest.raises(PatchFailure, match="not one of the 1 admissible") as caught:
        await harness.call("on_before_action", refused, {})
    assert caught.value.kind == "inadmissible"
    effect, _ = await harness.call("on_before_action", context(admissible=None), {})
    assert isinstance(effect, Rewrite)


class FakeSandbox:
    """A sandbox that answers what it is told to (for blame the real ones cannot produce)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    name = "fake"
    limits = LIMITS

    async def run(
        self, program: HookProgram, hook: Any, ctx: Mapping[str, Any], notebook: Mapping[str, Any]
    ) -> HookOutcome:
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert isinstance(self.answer, HookOutcome)
        return self.answer


@pytest.mark.parametrize(
    ("answer", "error", "cause"),
    [
        pytest.param(OSError("pipe broke"), SandboxInfrastructureError, "infrastructure", id="os"),
        pytest.param(
            SandboxInfrastructureError("worker gone"), SandboxInfrastructureError,
            "infrastructure", id="infra",
        ),
        pytest.param(
            HookOutcome({"effect": "teleport"}, {}, 1, 0.0), PatchFailure, "patch", id="effect"
        ),
        pytest.param(HookOutcome(None, {"x": (1, 2)}, 1, 0.0), PatchFailure, "patch", id="nb"),
    ],
)  # fmt: skip
async def test_blame_is_told_apart(
    anyio_backend: str, answer: Any, error: type[HookFailure], cause: str
) -> None:
    harness = ExecutableHarness.from_patch(patch_of("return None"), sandbox=FakeSandbox(answer))
    with pytest.raises(error) as caught:
        await harness.call("on_before_action", context(), {})
    assert caught.value.cause == cause  # type: ignore[attr-defined]


# -- the smoke test ----------------------------------------------------------------------------


async def test_the_smoke_test_calls_each_hook_once(sandbox: Sandbox) -> None:
    patch = HarnessPatch.from_dict(
        [
            {"op": "add_code_hook", "hook": "on_init", "code": hook_code(
                "nb['started'] = True", "on_init")},
            {"op": "add_code_hook", "hook": "on_before_action", "code": hook_code(
                "return hint('seen ' + str(nb.get('started')))")},
        ]
    )  # fmt: skip
    report = await ExecutableHarness.from_patch(patch, sandbox=sandbox).smoke_test()
    assert report.ok
    assert [(r.hook, r.effect) for r in report.results] == [
        ("on_init", None),
        ("on_before_action", "hint"),
    ]
    assert "passed" in str(report)
    report.raise_for_failure()


async def test_a_failed_smoke_test_says_which_hook_and_why(sandbox: Sandbox) -> None:
    patch = patch_of("return ctx.action['tool']")  # the synthetic action is {}
    harness = ExecutableHarness.from_patch(patch, sandbox=sandbox)
    report = await harness.smoke_test()
    assert not report.ok
    [failed] = report.failures
    assert (failed.hook, failed.kind) == ("on_before_action", "exception")
    assert "KeyError" in (failed.problem or "")
    assert "on_before_action at step 1: FAILED (exception)" in str(report)
    with pytest.raises(PatchSmokeTestError, match="FAILED") as caught:
        report.raise_for_failure()
    assert caught.value.report == report


async def test_validate_patch_runs_the_whole_pipeline(sandbox: Sandbox) -> None:
    text = (
        "<think>refunds before lookups fail</think><patch>"
        + json.dumps([{"op": "add_code_hook", "hook": "on_before_action",
                       "code": hook_code(NEEDS_LOOKUP)}])
        + "</patch>"
    )  # fmt: skip
    patch = parse_answer(text).patch
    harness = await validate_patch(patch, sandbox=sandbox, version="v1")
    assert harness.version == "v1"
    with pytest.raises(PatchSmokeTestError):
        await validate_patch(patch_of("return ctx.action['tool']"), sandbox=sandbox)


async def test_an_infrastructure_failure_is_not_a_smoke_test_verdict(anyio_backend: str) -> None:
    sandbox = FakeSandbox(SandboxInfrastructureError("no worker"))
    harness = ExecutableHarness.from_patch(patch_of("return None"), sandbox=sandbox)
    with pytest.raises(SandboxInfrastructureError):
        await harness.smoke_test()


def test_smoke_contexts_can_be_made_realistic() -> None:
    contexts = smoke_contexts(state={"looked_up": False}, action={"tool": "refund"})
    assert [c.hook for c in contexts] == ["on_init", "make_pre_hint", "on_before_action",
                                          "on_post_step"]  # fmt: skip
    assert contexts[2].action == {"tool": "refund"}
    assert contexts[0].action is None
    step = FailureStep(step=1, participant="alice", action={"tool": "refund"}, outcome="error",
                       state={"looked_up": False}, predicates={"looked_up": False})  # fmt: skip
    example = FailureExample(session_id="s", scenario_id="x", task="refund", steps=(step, step))
    packet = FailurePacket(
        environment="desk",
        hooks=("on_before_action",),
        clusters=(
            FailureCluster(signature="s", description="d", sessions=("s",), example=example),
        ),
    )
    made = contexts_from_packet(packet)
    assert [c.hook for c in made].count("on_init") == 1
    assert made[2].action == {"tool": "refund"}
    assert made[2].predicates == {"looked_up": False}
    assert made[-1].history[0].action == {"tool": "refund"}
    assert contexts_from_packet(FailurePacket(environment="e", hooks=()))[0].hook == "on_init"


# -- a real session ----------------------------------------------------------------------------


class DeskInput(msgspec.Struct, frozen=True):
    task: str = "refund order 7"


class Desk:
    """A refund works only after the order was looked up."""

    spec = EnvironmentSpec(name="desk", version="1", input_type=DeskInput)

    def initialize(self, input: DeskInput, rng: Random, roster: Any) -> dict[str, Any]:
        return {"looked_up": False, "refunded": False}

    def observe(self, state: dict[str, Any], participant: str) -> dict[str, Any]:
        return dict(state)

    def resolve(self, state: dict[str, Any], actions: Mapping[str, Any]) -> Resolution:
        [(name, action)] = actions.items()
        new = dict(state)
        if action.get("tool") == "lookup":
            new["looked_up"] = True
        elif action.get("tool") == "refund" and state["looked_up"]:
            new["refunded"] = True
        return Resolution(state=new, outcomes={name: "ok"}, done=new["refunded"])

    def intervene(self, state: dict[str, Any], intervention: Mapping[str, Any]) -> dict[str, Any]:
        return {**state, **intervention}

    def hook_view(self, state: dict[str, Any], participant: str) -> HookView:
        return HookView(state=dict(state), predicates={"looked_up": state["looked_up"]})


class Hasty:
    implementation = "hasty@1"

    def act(self, observation: Any) -> dict[str, str]:
        hints = observation.get("hints", []) if isinstance(observation, dict) else []
        return {"tool": "lookup" if any("lookup" in h for h in hints) else "refund"}


async def test_a_session_runs_with_an_executable_harness(sandbox: Sandbox, tmp_path: Path) -> None:
    harness = AsyncEnvironmentHarness(tmp_path / "store", environment=Desk, agents={"a": Hasty})
    hooks = ExecutableHarness.from_patch(patch_of(NEEDS_LOOKUP), sandbox=sandbox, version="desk-v1")
    session = await harness.run(Scenario(id="r", input=DeskInput()), turns=3, hooks=hooks)
    assert session.status == "completed"
    records = [record async for record in harness.records(session.id)]
    created = records[0].payload
    assert isinstance(created, SessionCreated)
    assert created.config.harness_version == "desk-v1"
    calls = [r.payload for r in records if isinstance(r.payload, HookCalled)]
    assert calls[0].effect == "block_and_prompt"
    assert {c.harness_version for c in calls} == {"desk-v1"}


async def test_a_crashing_patch_is_recorded_as_the_patchs_failure(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    harness = AsyncEnvironmentHarness(tmp_path / "store", environment=Desk, agents={"a": Hasty})
    loops = "for i in range(1000000):\n    for j in range(1000000):\n        pass"
    hooks = ExecutableHarness.from_patch(patch_of(loops), sandbox=sandbox, version="bad-v1")
    session = await harness.run(Scenario(id="r", input=DeskInput()), turns=2, hooks=hooks)
    records = [record async for record in harness.records(session.id)]
    errors = [r.payload.error for r in records if isinstance(r.payload, HookCalled)]
    assert errors
    assert all(e is not None and e.type == "PatchFailure" for e in errors)


# -- the guide ---------------------------------------------------------------------------------


def test_the_patches_guide_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Every Python block of docs/patches.md runs, in order, in one namespace."""
    import re

    guide = Path(__file__).resolve().parents[2] / "docs" / "patches.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {"__name__": "patches_guide"}
    for block in blocks:
        exec(compile(block, str(guide), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "BlockAndPrompt(message='look the order up first: call lookup_order')" in printed
    assert "{'blocked': 1}" in printed


def test_the_guides_policy_error_is_what_the_policy_says() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "patches.md").read_text()
    code = (
        "def on_before_action(ctx, nb):\n    import os\n"
        "    return hint('{0.__class__}'.format(ctx))"
    )
    with pytest.raises(PatchPolicyError) as caught:
        ExecutableHarness.from_patch(
            [{"op": "add_code_hook", "hook": "on_before_action", "code": code}],
            sandbox=LocalSandbox(),
        )
    assert str(caught.value) in guide
