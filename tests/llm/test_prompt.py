"""Prompt files: packaged and shipped in the wheel, versioned by digest, checked when loaded."""

from __future__ import annotations

import importlib.resources
import re
import zipfile
from pathlib import Path

import msgspec
import pytest

from envharness.errors import ConfigurationError
from envharness.llm import RenderLimits, load_prompt, packaged_prompts, render_packet
from envharness.optimizer import FailureCluster, FailureExample, FailurePacket, FailureStep

ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_prompts_load_through_importlib_resources() -> None:
    assert "engineer-v1" in packaged_prompts()
    resource = importlib.resources.files("envharness.llm.prompts") / "engineer-v1.md"
    assert resource.is_file()
    prompt = load_prompt("engineer-v1")
    assert prompt.name == "engineer-v1"
    assert prompt.version.startswith("engineer-v1@")
    assert len(prompt.version) == len("engineer-v1@") + 12
    assert "<patch>" in prompt.system
    assert "$state_keys" in prompt.user


@pytest.mark.slow
def test_the_prompts_ship_in_the_wheel(tmp_path: Path) -> None:
    import hatchling.builders.wheel as wheel_builder  # the build backend (in the dev extra)

    [wheel] = list(
        wheel_builder.WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    )
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for name in packaged_prompts():
        assert f"envharness/llm/prompts/{name}.md" in names


def write(tmp_path: Path, text: str, name: str = "mine-v3.md") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_prompt_file_by_path_is_versioned_by_its_bytes(tmp_path: Path) -> None:
    text = (
        "note\n<!-- envharness:system -->\nYou write hooks; costs $5.\n"
        "<!-- envharness:user -->\nEnv ${environment}; $$HOME"
    )
    first = load_prompt(write(tmp_path, text))
    assert first.name == "mine-v3"
    assert first.system == "You write hooks; costs $5."
    second = load_prompt(str(write(tmp_path, text + ".")))
    assert first.version != second.version
    packet = FailurePacket(environment="desk", hooks=("on_init",))
    _, user = render_packet(first, packet)
    assert user.content == "Env desk; $HOME"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no markers at all", "exactly one <!-- envharness:system --> line"),
        (
            "<!-- envharness:user -->\nx\n<!-- envharness:system -->\ny",
            "before a non-empty <!-- envharness:user --> part",
        ),
        ("<!-- envharness:system -->\ns\n<!-- envharness:user -->\n$answer", "$answer"),
        ("<!-- envharness:system -->\ns\n<!-- envharness:user -->\ncosts $ 5", "write '$$'"),
    ],
)
def test_a_bad_prompt_file_is_named(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_prompt(write(tmp_path, text))
    assert problem in str(caught.value)
    assert "mine-v3.md" in str(caught.value)


def test_a_missing_prompt_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read the prompt file"):
        load_prompt(tmp_path / "absent.md")


def test_rendering_keeps_the_prompt_compact() -> None:
    steps = tuple(
        FailureStep(step=n, participant="a", action={"say": "x" * 1000}, outcome=n)
        for n in range(30)
    )
    example = FailureExample(session_id="s", scenario_id="c", passed=False, steps=steps)
    clusters = tuple(
        FailureCluster(signature=f"sig-{n}", description="d", sessions=("s",), example=example)
        for n in range(4)
    )
    packet = FailurePacket(environment="e", hooks=("on_post_step",), clusters=clusters)
    limits = RenderLimits(clusters=2, steps_per_example=3, value_chars=50)
    _, user = render_packet(load_prompt("engineer-v1"), packet, limits)
    text = user.content
    assert "sig-1" in text
    assert "sig-2" not in text
    assert "(2 smaller clusters not shown)" in text
    assert "(27 earlier steps not shown)" in text
    assert "- step 29 [a]" in text
    assert "- step 26 [a]" not in text
    assert "x" * 60 not in text
    assert "(none exposed)" in text  # no state keys: said, not left blank


def test_the_example_patch_in_the_prompt_parses_passes_the_policy_and_runs() -> None:
    """The prompt teaches the patch protocol by example: that example must be a valid patch."""
    from envharness.hooks import HookContext, StepSummary
    from envharness.optimizer.patches.parse import parse_answer
    from envharness.optimizer.patches.policy import check_patch
    from envharness.optimizer.patches.sandbox import HookProgram, LocalSandbox

    system = load_prompt("engineer-v1").system
    examples = [e for e in re.findall(r"<patch>(\[.*?\])</patch>", system) if "..." not in e]
    assert len(examples) == 1
    patch = parse_answer(f"<think>t</think><patch>{examples[0]}</patch>").patch
    check_patch(patch)
    repeat = {"tool": "issue_refund"}
    ctx = HookContext(
        hook="on_before_action",
        session_id="s",
        participant="a",
        role="agent",
        step=2,
        action=repeat,
        last_outcome={"error": "no"},
        history=(StepSummary(step=1, action=repeat, outcome={"error": "no"}),),
    )
    outcome = LocalSandbox().run_sync(
        HookProgram.from_patch(patch), "on_before_action", msgspec.to_builtins(ctx), {}
    )
    assert outcome.effect is not None
    assert outcome.effect["effect"] == "block_and_prompt"
    fresh = msgspec.to_builtins(msgspec.structs.replace(ctx, history=()))
    assert (
        LocalSandbox().run_sync(HookProgram.from_patch(patch), "on_before_action", fresh, {}).effect
        is None
    )


def test_the_builtins_and_errors_the_prompt_names_are_offered_to_hooks() -> None:
    from envharness.optimizer.patches.sandbox._hookrt import CATCHABLE, SAFE_BUILTINS

    system = load_prompt("engineer-v1").system
    [builtins_line] = re.findall(r"- Builtins: (.*?)\.\n", system, flags=re.DOTALL)
    named = set(re.findall(r"`(\w+)`", builtins_line))
    assert named
    assert named <= set(SAFE_BUILTINS)
    [errors] = re.findall(r"`try`/`except` naming specific errors \((.*?)\)", system)
    assert set(re.findall(r"`(\w+)`", errors)) <= set(CATCHABLE)


def test_a_current_patch_that_is_not_a_harness_patch_is_shown_as_json() -> None:
    packet = FailurePacket(environment="e", hooks=(), current_patch={"odd": [1]})
    _, user = render_packet(load_prompt("engineer-v1"), packet)
    assert '"odd": [' in user.content
    empty = FailurePacket(environment="e", hooks=(), current_patch={"ops": []})
    _, user = render_packet(load_prompt("engineer-v1"), empty)
    assert "(none: the harness has no hooks yet)" in user.content
