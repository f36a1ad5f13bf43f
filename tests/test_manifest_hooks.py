"""Hooks in a manifest: ``hooks = "module:attribute"`` or a stored ``harness = "harness-vN"``.

Good input runs the experiment under the hooks and records their version; every bad input is a
:class:`ManifestError` naming the file, the line and the key, with nothing written.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from envharness import Hooks
from envharness.cli import app
from envharness.manifest import Manifest, ManifestError, load_manifest
from envharness.records import ActionBlocked, HookCalled
from envharness.store import RecordFilter, read_store
from examples.hooked_session import unlock_first

ROOT = Path(__file__).resolve().parent.parent
ME = "tests.test_manifest_hooks"

TEMPLATE = """\
[experiment]
name = "{name}"
turns = {turns}
{hooks}

[environment]
factory = "{module}:{environment}"

[agents.alice]
factory = "{module}:{agent}"
{scenarios}"""
DOOR = TEMPLATE.format(
    name="door", turns=3, hooks=f'hooks = "{ME}:DOOR_HOOKS"', module="examples.hooked_session",
    environment="Door", agent="Pusher",
    scenarios='\n[[scenarios.items]]\nid = "locked-door"\ninput = { locked = true }\n',
)  # fmt: skip
DESK = TEMPLATE.format(
    name="desk", turns=8, hooks='harness = "harness-v1"', module="envharness.demos.support_desk",
    environment="SupportDesk", agent="RefundFirstPolicy",
    scenarios="".join(
        f'\n[[scenarios.items]]\nid = "live-{n}"\n'
        f'input = {{ order_id = "A-{2000 + n}", customer = "{who}", amount = {20.0 + n} }}\n'
        for n, who in enumerate(("Ada", "Grace"))
    ),
)  # fmt: skip

DOOR_HOOKS = Hooks("door-hooks@1", on_before_action=unlock_first)
NOT_HOOKS = 42


def make_door_hooks() -> Hooks:
    return DOOR_HOOKS


def broken_factory() -> Hooks:
    raise RuntimeError("the hooks need a model key")


def gives_text() -> Any:
    return "door-hooks"


@pytest.fixture(scope="module")
def desk_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose optimizer accepted ``harness-v1`` for the support desk (the selftest)."""
    store = tmp_path_factory.mktemp("desk") / "store"
    done = CliRunner().invoke(app, ["--store", str(store), "selftest", "--sandbox", "local"])
    assert done.exit_code == 0, done.output
    return store


def write(folder: Path, text: str) -> Path:
    path = folder / "experiment.toml"
    path.write_text(text)
    return path


def edited(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def vetoes(store: Path, session_id: str) -> int:
    """How many of the session's actions a hook blocked."""
    found = payloads(store, session_id, "action.blocked")
    return sum(1 for p in found if isinstance(p, ActionBlocked) and p.by == "hook")


def hook_calls(store: Path, session_id: str) -> list[HookCalled]:
    """The session's ``hook`` records: each call that intervened, or failed (its budget is
    wall-clock time, which a loaded machine can overrun: then it is recorded as failed)."""
    return [p for p in payloads(store, session_id, "hook") if isinstance(p, HookCalled)]


def payloads(store: Path, session_id: str, kind: str) -> list[object]:
    async def read() -> list[object]:
        reader = await read_store(store)
        return [r.payload async for r in reader.records(session_id, RecordFilter(kinds=(kind,)))]

    return anyio.run(read)


def refusal(folder: Path, text: str, build: Callable[[Manifest], object]) -> ManifestError:
    """The error ``build`` raises on the manifest ``text``; the store beside it stays unmade."""
    manifest = load_manifest(write(folder, text))
    with pytest.raises(ManifestError) as caught:
        build(manifest)
    assert not (folder / "store").exists()
    return caught.value


def line_of(text: str, key: str) -> int:
    [number] = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith(f"{key} =")]
    return number


# -- good input --------------------------------------------------------------------------------


@pytest.mark.parametrize("reference", ["DOOR_HOOKS", "make_door_hooks"])
def test_hooks_or_a_factory_of_them_wrap_every_session(tmp_path: Path, reference: str) -> None:
    text = edited(DOOR, f"{ME}:DOOR_HOOKS", f"{ME}:{reference}")
    manifest = load_manifest(write(tmp_path, text))
    assert (manifest.hooks, manifest.harness_version) == (f"{ME}:{reference}", None)

    experiment = manifest.experiment(tmp_path / "store")
    result = experiment.run()

    assert experiment.aio.config.harness_version == "door-hooks@1"
    [session] = result.sessions
    assert session.result.status == "completed"  # the hook taught the pusher to unlock first


def test_without_hooks_the_same_experiment_never_opens_the_door(tmp_path: Path) -> None:
    text = edited(DOOR, f'hooks = "{ME}:DOOR_HOOKS"\n', "")
    experiment = load_manifest(write(tmp_path, text)).experiment(tmp_path / "store")
    result = experiment.run()

    assert experiment.aio.config.harness_version is None
    assert result.sessions[0].result.turns_completed == 3


def test_a_stored_harness_version_runs_in_the_store_it_was_accepted_into(
    tmp_path: Path, desk_store: Path
) -> None:
    manifest = load_manifest(write(tmp_path, DESK))
    assert manifest.harness_version == "harness-v1"

    experiment = manifest.experiment(desk_store)
    result = experiment.run()

    assert experiment.aio.config.harness_version == "harness-v1"
    assert result.completed == result.total == 2
    for session in result.sessions:  # the stored hook code ran on the refund-first policy
        calls = hook_calls(desk_store, session.result.id)
        assert {(call.hook, call.harness_version) for call in calls} == {
            ("on_before_action", "harness-v1")
        }


@pytest.mark.anyio
async def test_async_code_loads_a_stored_version_first(tmp_path: Path, desk_store: Path) -> None:
    manifest = load_manifest(write(tmp_path, DESK))
    hooks = await manifest.async_load_hooks(desk_store)
    assert hooks is not None
    assert hooks.version == "harness-v1"
    assert hooks.defined == {"on_before_action"}

    experiment = manifest.async_experiment(desk_store, hooks=hooks)
    result = await experiment.run()

    assert experiment.config.harness_version == "harness-v1"
    assert result.completed == 2


def test_the_documented_hooks_example_runs(tmp_path: Path) -> None:
    section = (ROOT / "docs" / "manifests.md").read_text().split("\n## Hooks\n")[1]
    section = section.split("\n## ")[0]
    [toml] = re.findall(r"```toml\n(.*?)```", section, flags=re.DOTALL)
    [python] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    (tmp_path / "my_hooks.py").write_text(python)
    try:
        experiment = load_manifest(write(tmp_path, toml)).experiment(tmp_path / "store")
        result = experiment.run()
    finally:
        sys.modules.pop("my_hooks", None)
        sys.path.remove(str(tmp_path))

    assert experiment.aio.config.harness_version == "door-hooks@1"
    assert result.completed == 1
    assert vetoes(tmp_path / "store", result.sessions[0].result.id) == 1


# -- bad input, found when loading -------------------------------------------------------------


LOAD_ERRORS = [
    pytest.param(f'hooks = "{ME}:DOOR_HOOKS"', 'hooks = "no_colon"', "experiment.hooks",
                 "'no_colon' is not module:attribute, e.g. my_package.hooks:HOOKS",
                 id="not-a-reference"),
    pytest.param(f'hooks = "{ME}:DOOR_HOOKS"', "hooks = 3", "experiment.hooks",
                 "expected string, got integer", id="hooks-type"),
    pytest.param(f'hooks = "{ME}:DOOR_HOOKS"', 'harness = ""', "experiment.harness",
                 'name an accepted harness version, e.g. harness = "harness-v2"',
                 id="blank-version"),
    pytest.param(f'hooks = "{ME}:DOOR_HOOKS"', "harness = ['harness-v1']", "experiment.harness",
                 "expected string, got array", id="version-type"),
    pytest.param(f'hooks = "{ME}:DOOR_HOOKS"', f'hooks = "{ME}:DOOR_HOOKS"\nharness = "harness-v1"',
                 "experiment.harness", "give hooks = ... (line 4) or harness = ..., not both",
                 id="both"),
    pytest.param(f'hooks = "{ME}:DOOR_HOOKS"', 'hook = "x:y"', "experiment.hook",
                 "unknown key 'hook' in [experiment]; did you mean 'hooks'?", id="misspelt"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "key", "problem"), LOAD_ERRORS)
def test_bad_hooks_keys_are_named_with_their_line(
    tmp_path: Path, old: str, new: str, key: str, problem: str
) -> None:
    text = edited(DOOR, old, new)
    with pytest.raises(ManifestError) as caught:
        load_manifest(write(tmp_path, text))

    error = caught.value
    assert (error.key, error.line) == (key, line_of(text, key.split(".")[-1]))
    assert problem in error.problem


# -- bad input, found when the hooks are imported or read --------------------------------------


IMPORT_ERRORS = [
    pytest.param("no_such_hooks_4c1e:HOOKS", "no module named 'no_such_hooks_4c1e'", id="module"),
    pytest.param(f"{ME}:DOOR_HOKS", "has no attribute 'DOOR_HOKS'; did you mean 'DOOR_HOOKS'?",
                 id="attribute"),
    pytest.param(f"{ME}:NOT_HOOKS", f"'{ME}:NOT_HOOKS' gave int, not hooks: hooks must "
                 "implement HarnessHooks", id="not-hooks"),
    pytest.param(f"{ME}:gives_text", "gave str, not hooks", id="factory-gives-text"),
    pytest.param(f"{ME}:broken_factory", f"calling '{ME}:broken_factory' to make the hooks "
                 "raised RuntimeError: the hooks need a model key", id="factory-raises"),
]  # fmt: skip


@pytest.mark.parametrize(("reference", "problem"), IMPORT_ERRORS)
def test_hooks_that_do_not_import_or_are_not_hooks_are_named(
    tmp_path: Path, reference: str, problem: str
) -> None:
    text = edited(DOOR, f"{ME}:DOOR_HOOKS", reference)
    store = tmp_path / "store"
    builds: list[Callable[[Manifest], object]] = [
        lambda manifest: manifest.experiment(store),
        lambda manifest: manifest.async_harness(store),
    ]
    for build in builds:
        error = refusal(tmp_path, text, build)
        assert (error.key, error.line) == ("experiment.hooks", 4)
        assert problem in error.problem


def test_an_unknown_version_lists_the_versions_in_the_store(
    tmp_path: Path, desk_store: Path
) -> None:
    text = edited(DESK, "harness-v1", "harness-v9")
    error = refusal(tmp_path, text, lambda manifest: manifest.experiment(desk_store))

    assert (error.key, error.line) == ("experiment.harness", 4)
    assert "no harness version 'harness-v9'" in error.problem
    assert "(versions: harness-v1)" in error.problem
    assert "`envharness --store STORE harness list` shows the versions" in error.problem


def test_a_stored_version_needs_the_store_it_lives_in(tmp_path: Path) -> None:
    error = refusal(tmp_path, DESK, lambda manifest: manifest.experiment(tmp_path / "store"))

    assert error.key == "experiment.harness"
    assert "no evidence store at" in error.problem


def test_a_version_learned_on_another_environment_is_refused(
    tmp_path: Path, desk_store: Path
) -> None:
    text = edited(DOOR, f'hooks = "{ME}:DOOR_HOOKS"', 'harness = "harness-v1"')
    error = refusal(tmp_path, text, lambda manifest: manifest.experiment(desk_store))

    assert (error.key, error.line) == ("experiment.harness", 4)
    assert (
        "harness-v1 was learned on environment support-desk@1, but this experiment's "
        "environment is door@1"
    ) in error.problem


def test_async_code_is_told_to_load_a_stored_version_first(tmp_path: Path) -> None:
    error = refusal(tmp_path, DESK, lambda manifest: manifest.async_experiment(tmp_path / "store"))

    assert error.key == "experiment.harness"
    assert "hooks=await manifest.async_load_hooks(store)" in error.problem
