"""Experiment manifests: the TOML format, and every mistake named by file, line and key."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import msgspec
import pytest

from envharness.manifest import PYTHON, ManifestError, load_manifest
from envharness.runtime.experiment import derive_seed

ROOT = Path(__file__).resolve().parent.parent

BASE = """\
[experiment]
name = "sweep"
turns = 3
trials = 2
seed = 7

[environment]
factory = "envharness.fixtures:SyntheticEnvironment"

[agents.alice]
factory = "envharness.fixtures:SyntheticAgent"

[agents.bob]
command = ["{python}", "agent.py"]
implementation = "bob@1"

[[scenarios.items]]
id = "low"
input = { starting_total = -2 }

[[scenarios.items]]
id = "high"
input = { starting_total = 2, target = 0 }
reference = { turns = 2 }
"""

PYTHON_ONLY = BASE.replace(
    '[agents.bob]\ncommand = ["{python}", "agent.py"]\nimplementation = "bob@1"\n',
    '[agents.bob]\nfactory = "envharness.fixtures:SyntheticAgent"\n',
)


def write(folder: Path, text: str, name: str = "experiment.toml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def edited(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def load_error(tmp_path: Path, text: str) -> ManifestError:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path).async_harness(tmp_path / "store")
    assert not (tmp_path / "store").exists()
    return caught.value


# -- valid manifests ---------------------------------------------------------------------------


def test_an_inline_manifest_loads_every_key(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, BASE))

    assert (manifest.name, manifest.turns, manifest.trials, manifest.seed) == ("sweep", 3, 2, 7)
    assert (manifest.max_concurrency, manifest.action_timeout) == (4, 120.0)
    assert manifest.environment == "envharness.fixtures:SyntheticEnvironment"
    alice, bob = manifest.agents
    assert (alice.name, alice.factory, alice.command) == ("alice", alice.factory, None)
    assert bob.command is not None
    assert bob.command.argv == (sys.executable, "agent.py")  # "{python}" is this interpreter
    assert bob.command.implementation == "bob@1"
    assert bob.command.command.cwd == tmp_path  # programs run beside the manifest by default
    low, high = manifest.scenarios
    assert (low.id, low.input, low.reference) == ("low", {"starting_total": -2}, None)
    assert (high.id, high.reference) == ("high", {"turns": 2})


def test_a_manifest_runs_its_experiment(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, PYTHON_ONLY))
    result = manifest.experiment(tmp_path / "store").run()

    assert (result.name, result.completed, result.total) == ("sweep", 4, 4)
    assert [(s.scenario_id, s.trial) for s in result.sessions] == [
        ("low", 0),
        ("low", 1),
        ("high", 0),
        ("high", 1),
    ]
    assert all(s.seed == derive_seed(7, s.scenario_id, s.trial) for s in result.sessions)


def test_scenarios_come_from_a_jsonl_file_relative_to_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = BASE.split("[[scenarios.items]]")[0] + '[scenarios]\nfile = "data/cases.jsonl"\n'
    path = write(tmp_path / "project", text)
    write(
        tmp_path / "project" / "data",
        '{"id": "a", "input": {"starting_total": 1}, "metadata": {"tag": "x"}}\n'
        "\n"
        '{"id": "b", "input": {"starting_total": 5, "target": 4}, "reference": [1, 2]}\n',
        "cases.jsonl",
    )
    monkeypatch.chdir(tmp_path)  # elsewhere: the path is the manifest's, not the shell's

    manifest = load_manifest(Path("project") / "experiment.toml")

    assert [(s.id, s.input, s.reference, s.metadata) for s in manifest.scenarios] == [
        ("a", {"starting_total": 1}, None, {"tag": "x"}),
        ("b", {"starting_total": 5, "target": 4}, [1, 2], {}),
    ]
    assert manifest.path == Path("project") / "experiment.toml"
    assert path.exists()


def test_command_forms_cwd_env_and_a_zero_timeout(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    text = edited(
        '[agents.bob]\ncommand = ["{python}", "agent.py"]\n',
        '[agents.bob]\ncommand = "{python} \'my agent.py\' --fast"\ncwd = "agents"\n'
        'env = { MODEL = "small" }\ninherit_env = ["SECRET_FOR_TEST"]\n',
        edited("seed = 7", "seed = 7\naction_timeout = 0\nmax_concurrency = 2"),
    )
    manifest = load_manifest(write(tmp_path, text))

    bob = manifest.agents[1].command
    assert bob is not None
    assert bob.argv == (sys.executable, "my agent.py", "--fast")
    assert bob.command.cwd == tmp_path / "agents"
    assert bob.command.env["MODEL"] == "small"
    assert (manifest.action_timeout, manifest.max_concurrency) == (None, 2)
    assert PYTHON == "{python}"


def test_inherit_env_passes_named_variables_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_FOR_TEST", "s3cret")
    monkeypatch.setenv("OTHER_SECRET_FOR_TEST", "no")
    text = edited(
        'implementation = "bob@1"', 'implementation = "bob@1"\ninherit_env = ["SECRET_FOR_TEST"]'
    )
    bob = load_manifest(write(tmp_path, text)).agents[1].command

    assert bob is not None
    assert bob.command.env["SECRET_FOR_TEST"] == "s3cret"
    assert "OTHER_SECRET_FOR_TEST" not in bob.command.env


def test_keys_are_found_in_dotted_quoted_and_inline_forms(tmp_path: Path) -> None:
    agents = (
        '[agents]\nalice.factory = "envharness.fixtures:SyntheticAgent"\n'
        '"bob smith" = { command = ["{python}", "a.py"], implementation = "b@1", role = 5 }\n'
        'carol = { factory = "envharness.fixtures:SyntheticAgent" }\n'
    )
    text = edited(
        '[agents.alice]\nfactory = "envharness.fixtures:SyntheticAgent"\n\n[agents.bob]\n'
        'command = ["{python}", "agent.py"]\nimplementation = "bob@1"\n',
        agents,
        edited('name = "sweep"', 'name = """a\nturns = "not a key"\n"""'),
    )
    error = load_error(tmp_path, text)

    assert (error.line, error.key) == (14, 'agents."bob smith".role')
    assert "expected string, got integer" in str(error)


# -- invalid manifests, found when loading -----------------------------------------------------

BAD = [
    pytest.param("seed = 7", "seed = = 7", 5, None, "invalid TOML at column 8", id="syntax"),
    pytest.param("turns = 3", "trns = 3", 3, "experiment.trns",
                 "unknown key 'trns' in [experiment]; did you mean 'turns'?", id="unknown-key"),
    pytest.param("[experiment]", "[experimant]", 1, "experimant",
                 "did you mean 'experiment'?", id="unknown-table"),
    pytest.param('id = "high"', 'name = "high"', 22, "scenarios.items[1].name",
                 "the keys there are id, input, reference, metadata", id="unknown-no-match"),
    pytest.param("turns = 3", 'turns = "3"', 3, "experiment.turns",
                 "expected integer, got string", id="wrong-type"),
    pytest.param("turns = 3", "turns = 0", 3, "experiment.turns", ">= 1", id="too-small"),
    pytest.param("trials = 2", "trials = 9223372036854775808", 4, "experiment.trials",
                 "<= 9223372036854775807", id="too-large"),
    pytest.param("seed = 7", "seed = 7\naction_timeout = -1", 6, "experiment.action_timeout",
                 ">= 0", id="negative-timeout"),
    pytest.param('reference = { turns = 2 }', 'metadata = "x"', 24,
                 "scenarios.items[1].metadata", "expected table, got string", id="metadata"),
    pytest.param("turns = 3\n", "", 1, "experiment.turns",
                 "required key is missing from [experiment]", id="missing-key"),
    pytest.param("input = { starting_total = -2 }\n", "", 17, "scenarios.items[0].input",
                 "required key is missing", id="missing-input"),
    pytest.param('name = "sweep"', 'name = " "', 2, "experiment.name", "give the experiment a name",
                 id="blank-name"),
    pytest.param('implementation = "bob@1"\n', "", 13, "agents.bob.implementation",
                 'a command agent needs implementation = "name@version"', id="no-implementation"),
    pytest.param('command = ["{python}", "agent.py"]', "command = 5", 14, "agents.bob.command",
                 "expected string or array, got integer", id="command-type"),
    pytest.param('command = ["{python}", "agent.py"]', "command = []", 14, "agents.bob.command",
                 "is empty", id="command-empty"),
    pytest.param('command = ["{python}", "agent.py"]', "command = \"{python} 'open\"", 14,
                 "agents.bob.command", "cannot split", id="command-quotes"),
    pytest.param('command = ["{python}", "agent.py"]', 'command = ["no-such-program-4c1e"]', 14,
                 "agents.bob.command", "was not found on the PATH", id="command-missing"),
    pytest.param("[agents.bob]\n", '[agents.bob]\ncwd = "nowhere"\n', 14, "agents.bob.cwd",
                 "does not exist", id="cwd-missing"),
    pytest.param("[agents.bob]\n", '[agents.bob]\nfactory = "a:b"\n', 13, "agents.bob",
                 "not both", id="agent-both"),
    pytest.param('command = ["{python}", "agent.py"]\nimplementation = "bob@1"\n', 'role = "x"\n',
                 13, "agents.bob", "give either factory", id="agent-neither"),
    pytest.param('factory = "envharness.fixtures:SyntheticAgent"',
                 'factory = "envharness.fixtures:SyntheticAgent"\nimplementation = "a@1"', 12,
                 "agents.alice.implementation", "applies to command agents only",
                 id="factory-impl"),
    pytest.param('factory = "envharness.fixtures:SyntheticEnvironment"',
                 'command = ["no-such-program-4c1e"]', 8, "environment.command",
                 "was not found on the PATH", id="environment-command"),
    pytest.param('factory = "envharness.fixtures:SyntheticEnvironment"', "", 7, "environment",
                 'give factory = "module:attribute"', id="environment-empty"),
    pytest.param('factory = "envharness.fixtures:SyntheticEnvironment"',
                 'factory = "SyntheticEnvironment"', 8, "environment.factory",
                 "is not module:attribute", id="not-a-reference"),
    pytest.param('id = "high"', 'id = "low"', 22, "scenarios.items[1].id",
                 "scenario id 'low' appears twice, at lines 18 and 22", id="duplicate-id"),
    pytest.param('id = "high"', 'id = "has space"', 22, "scenarios.items[1].id",
                 "is not valid", id="bad-id"),
    pytest.param("[[scenarios.items]]\nid = \"low\"",
                 '[scenarios]\nfile = "s.jsonl"\n\n[[scenarios.items]]\nid = "low"', 18,
                 "scenarios.file", "not both", id="inline-and-file"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "line", "key", "message"), BAD)
def test_a_bad_manifest_names_the_line_and_key(
    tmp_path: Path, old: str, new: str, line: int, key: str | None, message: str
) -> None:
    error = load_error(tmp_path, edited(old, new))

    assert (error.line, error.key) == (line, key)
    where = f"{tmp_path / 'experiment.toml'}:{line}: "
    assert str(error).startswith(where + (f"{key}: " if key else ""))
    assert message in str(error)


def test_a_missing_table_is_named(tmp_path: Path) -> None:
    text = BASE.replace('[environment]\nfactory = "envharness.fixtures:SyntheticEnvironment"\n', "")
    error = load_error(tmp_path, text)

    assert (error.line, error.key) == (None, "environment")
    assert "the [environment] table is missing" in str(error)


def test_no_agents_and_no_scenarios_are_errors(tmp_path: Path) -> None:
    no_agents = re.sub(r"\[agents\.alice\].*?(?=\[\[)", "[agents]\n\n", BASE, flags=re.DOTALL)
    no_scenarios = BASE.split("[[scenarios.items]]")[0] + "[scenarios]\n"

    assert "no agents" in str(load_error(tmp_path, no_agents))
    assert "give [[scenarios.items]] tables" in str(load_error(tmp_path, no_scenarios))


def test_a_file_that_is_missing_or_not_text(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such manifest file"):
        load_manifest(tmp_path / "absent.toml")
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe[x]")
    with pytest.raises(ManifestError, match="is not UTF-8 text"):
        load_manifest(tmp_path / "binary.toml")
    with pytest.raises(ManifestError, match="is a directory"):
        load_manifest(tmp_path)


# -- invalid JSONL scenarios -------------------------------------------------------------------

JSONL_MANIFEST = BASE.split("[[scenarios.items]]")[0] + '[scenarios]\nfile = "cases.jsonl"\n'
GOOD_LINE = '{"id": "a", "input": {"starting_total": 1}}'

BAD_JSONL = [
    pytest.param('{"id": "b", "input": {', 2, None, "not valid JSON", id="invalid-json"),
    pytest.param("[1, 2]", 2, None, "expected a JSON object with id and input, got an array",
                 id="not-an-object"),
    pytest.param('{"id": "b", "inptu": {}}', 2, "inptu", "did you mean 'input'?", id="unknown"),
    pytest.param('{"id": "b", "input": {}, "metadata": 3}', 2, "metadata",
                 "expected table, got integer", id="wrong-type"),
    pytest.param('{"input": {}}', 2, "id", "required key is missing", id="missing-id"),
    pytest.param('{"id": "bad id", "input": {}}', 2, "id", "is not valid", id="bad-id"),
    pytest.param('{"id": "c", "input": {}}\n\n' + GOOD_LINE, 4, "id",
                 "scenario id 'a' appears twice, at lines 1 and 4", id="duplicate"),
]  # fmt: skip


@pytest.mark.parametrize(("second", "line", "key", "message"), BAD_JSONL)
def test_a_bad_jsonl_line_names_the_file_and_line(
    tmp_path: Path, second: str, line: int, key: str | None, message: str
) -> None:
    write(tmp_path, GOOD_LINE + "\n" + second + "\n", "cases.jsonl")
    error = load_error(tmp_path, JSONL_MANIFEST)

    assert (error.file, error.line, error.key) == (tmp_path / "cases.jsonl", line, key)
    assert str(error).startswith(f"{tmp_path / 'cases.jsonl'}:{line}: ")
    assert message in str(error)


def test_a_missing_jsonl_file_names_the_manifest_line(tmp_path: Path) -> None:
    error = load_error(tmp_path, JSONL_MANIFEST)

    assert (error.file, error.line, error.key) == (
        tmp_path / "experiment.toml",
        18,
        "scenarios.file",
    )
    assert "relative to the manifest's folder" in str(error)


# -- invalid manifests, found when importing ---------------------------------------------------

BAD_IMPORTS = [
    pytest.param('factory = "envharness.fixtures:SyntheticEnvironment"',
                 'factory = "envharness.fixtures:SynthEnvironment"', 8, "environment.factory",
                 "has no attribute 'SynthEnvironment'; did you mean 'SyntheticEnvironment'?",
                 id="attribute"),
    pytest.param('factory = "envharness.fixtures:SyntheticEnvironment"',
                 'factory = "no_such_module_4c1e:Environment"', 8, "environment.factory",
                 "no module named 'no_such_module_4c1e' (looked beside the manifest", id="module"),
    pytest.param('factory = "envharness.fixtures:SyntheticAgent"',
                 'factory = "envharness.fixtures:Nobody"', 11, "agents.alice.factory",
                 "has no attribute 'Nobody'", id="agent"),
    pytest.param("input = { starting_total = -2 }", "input = { startng_total = -2 }", 19,
                 "scenarios.items[0].input", "did you mean 'starting_total'?", id="input"),
    pytest.param("[agents.alice]\n", '[agents.alice]\nrole = "boss"\n', 11, "agents.alice.role",
                 "role 'boss' is not a role of environment 'synthetic-total'", id="role"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "line", "key", "message"), BAD_IMPORTS)
def test_a_bad_reference_or_input_names_the_line_and_key(
    tmp_path: Path, old: str, new: str, line: int, key: str, message: str
) -> None:
    error = load_error(tmp_path, edited(old, new))

    assert (error.line, error.key) == (line, key)
    assert message in str(error)


def test_a_jsonl_input_the_environment_rejects_names_its_line(tmp_path: Path) -> None:
    write(tmp_path, GOOD_LINE + '\n{"id": "b", "input": {"starting_total": "x"}}\n', "cases.jsonl")
    error = load_error(tmp_path, JSONL_MANIFEST)

    assert (error.file, error.line, error.key) == (tmp_path / "cases.jsonl", 2, "input")
    assert "scenario 'b': input does not match SyntheticScenarioInput" in str(error)


def test_modules_beside_the_manifest_import(tmp_path: Path) -> None:
    write(
        tmp_path,
        "from envharness.fixtures import SyntheticEnvironment as Local4c1e\n",
        "local_env_4c1e.py",
    )
    text = edited("envharness.fixtures:SyntheticEnvironment", "local_env_4c1e:Local4c1e")
    try:
        load_manifest(write(tmp_path, text)).async_harness(tmp_path / "store")
    finally:
        sys.modules.pop("local_env_4c1e", None)
        sys.path.remove(str(tmp_path))


# -- the documentation and the example agree ---------------------------------------------------


def test_the_documented_manifest_is_the_example(tmp_path: Path) -> None:
    docs = (ROOT / "docs" / "manifests.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", docs, flags=re.DOTALL)
    example = ROOT / "examples" / "manifest" / "experiment.toml"
    assert tomllib.loads(blocks[0]) == tomllib.loads(example.read_text())
    for block in blocks[1:]:
        tomllib.loads(block)  # the fragments are valid TOML
    [jsonl] = re.findall(r"```json\n(.*?)```", docs, flags=re.DOTALL)
    lines = (ROOT / "examples" / "manifest" / "scenarios.jsonl").read_text()
    assert [msgspec.json.decode(line) for line in jsonl.splitlines()] == [
        msgspec.json.decode(line) for line in lines.splitlines()
    ]
    assert len(load_manifest(example).scenarios) == 2
