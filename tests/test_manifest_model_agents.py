"""Model agents in manifests: ``[agents.NAME] model = "..."`` with its endpoint, settings, price
and budgets, run against a real OpenAI-compatible server on loopback (a scripted model behind
research/serve_openai.py), and every mistake named by file, line and key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envharness.cli import app
from envharness.contracts.budget import Budget
from envharness.llm import Price
from envharness.manifest import ManifestError, load_manifest
from tests._model_server import ScriptedChat, scripted_server

MODEL = "local-model"

BASE = """\
[experiment]
name = "model sweep"
turns = 4
seed = 3

[environment]
factory = "envharness.fixtures:SyntheticEnvironment"

[agents.alice]
model = "local-model"

[[scenarios.items]]
id = "to-two"
input = { starting_total = 0, target = 2 }
"""


@pytest.fixture(scope="module")
def chat() -> ScriptedChat:
    return ScriptedChat(MODEL)


@pytest.fixture(scope="module")
def root(chat: ScriptedChat) -> Iterator[str]:
    with scripted_server(chat) as served:
        yield served


@pytest.fixture(autouse=True)
def no_endpoint_settings(monkeypatch: pytest.MonkeyPatch, chat: ScriptedChat) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ENVHARNESS_STORE", raising=False)
    chat.requests.clear()
    chat.options.clear()


def write(folder: Path, text: str) -> Path:
    path = folder / "experiment.toml"
    path.write_text(text)
    return path


def edited(new: str, old: str = 'model = "local-model"\n', text: str = BASE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def run(store: Path, manifest: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--store", str(store), "run", str(manifest)])
    return result.exit_code, result.stdout, result.stderr


def test_OPENAI_BASE_URL_runs_a_manifest_whose_agent_is_a_model(
    tmp_path: Path, root: str, chat: ScriptedChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", root)  # a local endpoint: no key needed
    code, out, err = run(tmp_path / "store", write(tmp_path, BASE))

    assert code == 0, err
    assert "1 completed, 0 failed of 1" in out.splitlines()
    assert len(chat.requests) == 2  # {"value": 1} twice reaches the target


def test_every_setting_is_read_and_reaches_the_endpoint(
    tmp_path: Path, root: str, chat: ScriptedChat
) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "terse.md").write_text(
        "<!-- envharness:system -->\n$system\n$action_format\n"
        "<!-- envharness:user -->\n$observation\n$ask\n"
    )
    text = edited(
        f'model = "local-model"\nbase_url = "{root}"\napi_key_env = ""\ntemperature = 0.25\n'
        'max_tokens = 9\ntemplate = "prompts/terse.md"\nsystem = "You count."\n'
        'action_format = "text"\nprice = { input_per_million = 1.0, output_per_million = 2.0 }\n'
        "budget = { usd = 5.0, tokens = 100000, seconds = 600 }\n"
    )
    manifest = load_manifest(write(tmp_path, text))
    [alice] = manifest.agents
    assert alice.model is not None
    assert alice.model.template == str(tmp_path / "prompts" / "terse.md")  # beside the file
    assert alice.model.price == Price(input_per_million=1.0, output_per_million=2.0)
    assert alice.model.budget == Budget(usd=5.0, tokens=100000, seconds=600)

    code, _, err = run(tmp_path / "store", manifest.path)
    assert code == 0, err
    assert chat.options[0]["temperature"] == 0.25
    assert chat.options[0]["max_tokens"] == 9
    assert chat.requests[0][0]["content"].startswith("You count.")


def test_an_experiment_and_its_sessions_have_budgets(tmp_path: Path, root: str) -> None:
    text = BASE.replace(
        "seed = 3\n",
        "seed = 3\nbudget = { tokens = 1000000 }\nsession_budget = { tokens = 20 }\n",
    ).replace('model = "local-model"\n', f'model = "local-model"\nbase_url = "{root}"\n')
    manifest = load_manifest(write(tmp_path, text))
    assert manifest.budget == Budget(tokens=1000000)
    assert manifest.session_budget == Budget(tokens=20)

    code, out, _ = run(tmp_path / "store", manifest.path)
    assert code == 1
    assert " stopped" in out.splitlines()[1]
    assert out.splitlines()[2].startswith("  reason  budget: used ")


def test_the_agents_own_budget_stops_it_before_a_call_it_cannot_afford(
    tmp_path: Path, root: str
) -> None:
    text = edited(f'model = "local-model"\nbase_url = "{root}"\nbudget = {{ tokens = 20 }}\n')
    code, out, _ = run(tmp_path / "store", write(tmp_path, text))

    assert code == 1
    assert " stopped" in out.splitlines()[1]
    assert "budget: " in out.splitlines()[2]


def test_a_hosted_endpoint_without_its_key_is_named_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, edited('model = "gpt-4o-mini"\n'))
    with pytest.raises(ManifestError) as caught:
        load_manifest(path).async_harness(tmp_path / "store")

    assert (caught.value.line, caught.value.key) == (10, "agents.alice.model")
    assert "https://api.openai.com/v1 needs an API key and $OPENAI_API_KEY is not set" in str(
        caught.value
    )
    assert not (tmp_path / "store").exists()


BAD = [
    pytest.param('model = "m"\nfactory = "a:b"\n', 9, "agents.alice", "not both",
                 id="model-and-factory"),
    pytest.param('model = " "\n', 10, "agents.alice.model", "name the model", id="blank-model"),
    pytest.param('model = "m"\nimplementation = "m@1"\n', 11, "agents.alice.implementation",
                 "a model agent's is made from its model, endpoint and template", id="model-impl"),
    pytest.param('model = "m"\ncwd = "x"\n', 11, "agents.alice.cwd",
                 "applies to command agents only", id="model-cwd"),
    pytest.param('factory = "envharness.fixtures:SyntheticAgent"\ntemperature = 0.5\n', 11,
                 "agents.alice.temperature", "applies to model agents (model = ...) only",
                 id="factory-temperature"),
    pytest.param('model = "m"\ntemperature = 3\n', 11, "agents.alice.temperature",
                 "expected float <= 2", id="temperature-range"),
    pytest.param('model = "m"\nmax_tokens = 0\n', 11, "agents.alice.max_tokens",
                 "expected integer >= 1", id="max-tokens"),
    pytest.param('model = "m"\naction_format = "xml"\n', 11, "agents.alice.action_format",
                 "action_format 'xml' is not one of auto, tools, json, text", id="action-format"),
    pytest.param('model = "m"\nbudget = {}\n', 11, "agents.alice.budget",
                 "name at least one limit", id="empty-budget"),
    pytest.param('model = "m"\nbudget = { usd = 0 }\n', 11, "agents.alice.budget.usd",
                 "expected float > 0", id="zero-budget"),
    pytest.param('model = "m"\nbudget = { dollars = 1 }\n', 11, "agents.alice.budget.dollars",
                 "unknown key 'dollars'", id="budget-key"),
    pytest.param('model = "m"\nprice = { input_per_million = 1 }\n', 11,
                 "agents.alice.price.output_per_million", "required key is missing",
                 id="half-a-price"),
    pytest.param('model = "m"\nbase_url = ""\n', 11, "agents.alice.base_url",
                 "give the API root", id="blank-base-url"),
    pytest.param('model = "m"\nbase_url = "ftp://127.0.0.1/v1"\n', 11, "agents.alice.base_url",
                 "must be an http(s) URL", id="base-url-scheme"),
    pytest.param('model = "m"\nbase_url = "http://127.0.0.1:9/v1"\ntemplate = "agent-v9"\n', 12,
                 "agents.alice.template", "there is no packaged template 'agent-v9'",
                 id="unknown-template"),
    pytest.param('model = "m"\nbase_url = "http://127.0.0.1:9/v1"\ntemplate = "bad.md"\n', 12,
                 "agents.alice.template", "unknown field(s) $score", id="template-field"),
]  # fmt: skip


@pytest.mark.parametrize(("new", "line", "key", "message"), BAD)
def test_a_bad_model_agent_names_the_line_and_key(
    tmp_path: Path, new: str, line: int, key: str, message: str
) -> None:
    (tmp_path / "bad.md").write_text(
        "<!-- envharness:system -->\nPlay.\n<!-- envharness:user -->\n$observation $score\n"
    )
    path = write(tmp_path, edited(new))
    with pytest.raises(ManifestError) as caught:
        load_manifest(path).async_harness(tmp_path / "store")

    assert (caught.value.line, caught.value.key) == (line, key)
    assert message in str(caught.value)
    assert not (tmp_path / "store").exists()


def test_a_budget_on_the_command_line_is_refused_next_to_a_manifest_resume(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, BASE)
    result = CliRunner().invoke(
        app,
        ["--store", str(tmp_path / "s"), "resume", "exp_0", str(path), "--budget-tokens", "9"],
    )
    assert result.exit_code == 2
    assert "the manifest holds the budgets" in result.stderr
