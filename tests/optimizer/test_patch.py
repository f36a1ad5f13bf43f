"""HarnessPatch: the JSON an engineer writes, its canonical form, digest and stacking."""

from __future__ import annotations

import json

import pytest

from envharness.optimizer import CodeHook, HarnessPatch, PatchSchemaError
from envharness.optimizer.patches.patch import MAX_CODE_CHARS

CODE = "def on_before_action(ctx, nb):\n    return None"
OP = {"op": "add_code_hook", "hook": "on_before_action", "code": CODE, "description": "noop"}


def test_the_list_form_reads_and_round_trips_through_to_dict() -> None:
    patch = HarnessPatch.from_dict([OP])
    assert patch.hooks == (CodeHook(hook="on_before_action", code=CODE, description="noop"),)
    assert patch.to_dict() == {"ops": [OP]}
    assert HarnessPatch.from_dict(patch.to_dict()) == patch
    assert HarnessPatch.from_dict(json.loads(json.dumps(patch.to_dict()))) == patch


def test_a_single_operation_object_and_the_ops_object_are_accepted() -> None:
    assert HarnessPatch.from_dict(OP) == HarnessPatch.from_dict({"ops": [OP]})


def test_description_is_optional() -> None:
    op = {k: v for k, v in OP.items() if k != "description"}
    assert HarnessPatch.from_dict([op]).hooks[0].description == ""


def test_the_digest_is_sha256_of_canonical_json_and_stable() -> None:
    import hashlib

    import msgspec

    patch = HarnessPatch.from_dict([OP])
    canonical = msgspec.json.encode(patch.to_dict(), order="sorted")
    assert patch.digest() == hashlib.sha256(canonical).hexdigest()
    assert patch.digest() == HarnessPatch.from_dict({"ops": [dict(reversed(OP.items()))]}).digest()
    other = HarnessPatch.from_dict([{**OP, "description": "other words"}])
    assert other.digest() != patch.digest()
    assert other.code_digest() == patch.code_digest()


def test_stacking_puts_the_newer_hooks_after_the_accepted_ones() -> None:
    accepted = HarnessPatch.from_dict([OP])
    candidate = HarnessPatch.from_dict([{**OP, "hook": "on_post_step", "code": CODE.replace(
        "on_before_action", "on_post_step")}])  # fmt: skip
    stacked = accepted.stacked(candidate)
    assert [h.hook for h in stacked.hooks] == ["on_before_action", "on_post_step"]
    assert stacked.hook_names == frozenset({"on_before_action", "on_post_step"})
    assert stacked.digest() != candidate.stacked(accepted).digest()  # order matters
    assert HarnessPatch().stacked(accepted) == accepted
    with pytest.raises(TypeError, match="HarnessPatch"):
        accepted.stacked({"ops": []})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("nope", "a patch is a list of operations, not a string", id="not-a-list"),
        pytest.param({"hooks": []}, r"unknown key\(s\) hooks", id="unknown-top-key"),
        pytest.param({}, 'has no "ops"', id="no-ops"),
        pytest.param([1], r"ops\[0\] is a int", id="op-not-object"),
        pytest.param([{"hook": "on_init"}], r'ops\[0\] has no "op"', id="no-op"),
        pytest.param(
            [{**OP, "op": "add_code_hok"}],
            "unknown operation 'add_code_hok'.*did you mean add_code_hook",
            id="unknown-op",
        ),
        pytest.param(
            [{**OP, "hook": "on_post_stepp"}],
            r"ops\[0\]\.hook: 'on_post_stepp' is not a hook.*"
            "did you mean on_post_step",
            id="unknown-hook",
        ),
        pytest.param([{**OP, "hook": None}], r"ops\[0\]\.hook: missing", id="missing-hook"),
        pytest.param([{**OP, "code": "   "}], r"ops\[0\]\.code is empty", id="empty-code"),
        pytest.param(
            [{**OP, "code": ["def"]}], r"ops\[0\]\.code must be the source", id="code-list"
        ),
        pytest.param([{**OP, "code": "x" * (MAX_CODE_CHARS + 1)}], "over the", id="code-too-long"),
        pytest.param([{**OP, "extra": 1}], r"unknown key\(s\) extra", id="unknown-op-key"),
        pytest.param(
            [{**OP, "description": 3}], "description must be a string", id="bad-description"
        ),
    ],
)
def test_bad_patches_name_the_problem(value: object, message: str) -> None:
    with pytest.raises(PatchSchemaError, match=message):
        HarnessPatch.from_dict(value)
