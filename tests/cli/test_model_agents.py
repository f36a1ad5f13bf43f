"""``--agent NAME=model:MODEL``: a model plays from the command line, against a real
OpenAI-compatible server on loopback (research/serve_openai.py) with a scripted model.

What is checked: the endpoint comes from ``--base-url`` or ``$OPENAI_BASE_URL``, the key only
from a variable and never into the store, a hosted endpoint without its key is refused before
anything is recorded, the settings reach the endpoint and the evidence, and a session stopped
by its budget resumes with a larger one, its conversation intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._model_server import ScriptedChat, scripted_server
from tests.cli._support import Invoke

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
TO_TWO = '{"starting_total": 0, "target": 2}'
KEY = "sk-test-0f9e8d7c6b5a-never-stored"
MODEL = "scripted-chat"


@pytest.fixture(scope="module")
def chat() -> ScriptedChat:
    return ScriptedChat(MODEL)


@pytest.fixture(scope="module")
def keyed_root(chat: ScriptedChat) -> Iterator[str]:
    """An endpoint that wants ``Bearer KEY``."""
    with scripted_server(chat, api_key=KEY) as root:
        yield root


@pytest.fixture(scope="module")
def open_root(chat: ScriptedChat) -> Iterator[str]:
    """An endpoint that wants no key, as a local server usually does."""
    with scripted_server(chat) as root:
        yield root


@pytest.fixture(autouse=True)
def no_endpoint_settings(monkeypatch: pytest.MonkeyPatch, chat: ScriptedChat) -> None:
    """Only what a test sets: no developer's key or endpoint leaks in."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    chat.requests.clear()
    chat.options.clear()


def _run(invoke: Invoke, store: Path, *args: str) -> tuple[int, str, str]:
    result = invoke("--store", store, "run", SYNTHETIC, "--input", TO_TWO, *args)
    return result.exit_code, result.stdout, result.stderr


def _implementation(invoke: Invoke, store: Path, session: str) -> str:
    shown = invoke("--store", store, "show", session).stdout
    [line] = [line for line in shown.splitlines() if "participant alice" in line]
    return line.split("role agent, ", 1)[1]


def _session(out: str) -> str:
    return out.splitlines()[0].split()[1]


def test_a_model_agent_plays_with_the_key_from_the_environment(
    invoke: Invoke, store_path: Path, keyed_root: str, chat: ScriptedChat,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    code, out, err = _run(
        invoke, store_path, "--agent", f"alice=model:{MODEL}", "--base-url", keyed_root,
        "--turns", "5",
    )  # fmt: skip

    assert code == 0, err
    assert out.splitlines()[1] == "status  completed after 2 turns"  # {"value": 1} twice
    # The server refuses tools with a 400 (a bearer it did not like would be a 401 and fail
    # the session): the agent fell back to JSON in text and went on.
    assert len(chat.requests) == 2
    implementation = _implementation(invoke, store_path, _session(out))
    assert implementation.startswith("model-agent@agent-v1@")
    assert implementation.endswith(f":openai/{MODEL} via {keyed_root}")

    exported = invoke("--store", store_path, "export", _session(out))
    assert exported.exit_code == 0
    files = [path for path in store_path.rglob("*") if path.is_file()]
    assert any(path.name == "evidence.sqlite3" for path in files)
    for path in files:  # the database, its WAL, the artifacts: the key is in none of them
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in out + err + exported.stdout


def test_OPENAI_BASE_URL_names_a_local_endpoint_that_needs_no_key(
    invoke: Invoke, store_path: Path, open_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", open_root)
    code, out, err = _run(invoke, store_path, "--agent", f"alice=model:{MODEL}", "--turns", "5")

    assert code == 0, err
    assert _implementation(invoke, store_path, _session(out)).endswith(f"via {open_root}")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((), "$OPENAI_API_KEY is not set"),
        (("--base-url", "https://models.example.invalid/v1"), "https://models.example.invalid/v1"),
        (("--api-key-env", "TEAM_MODEL_KEY"), "$TEAM_MODEL_KEY is not set"),
    ],
)
def test_a_hosted_endpoint_without_its_key_is_refused_before_anything_is_recorded(
    invoke: Invoke, store_path: Path, args: tuple[str, ...], named: str
) -> None:
    code, _, err = _run(invoke, store_path, "--agent", "driver=model:gpt-4o-mini", "--turns", "3",
                        *args)  # fmt: skip

    assert code == 2
    assert err.startswith("error: --agent driver=model:gpt-4o-mini: the endpoint ")
    assert "needs an API key" in err
    assert named in err
    assert "export " in err  # and how to fix it
    assert not store_path.exists() or invoke("--store", store_path, "sessions").stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--agent", "alice=model:"), "--agent alice=model:: name the model after model:"),
        (("--agent", "alice=model:m", "--action-format", "xml"),
         "--action-format 'xml' is not one of: auto, tools, json, text"),
        (("--agent", "alice=model:m", "--template", "agent-v9"),
         "there is no packaged template 'agent-v9'"),
        (("--agent", "alice=model:m", "--template", "missing/prompt.md"),
         "cannot read the template file missing/prompt.md"),
        (("--agent", "alice=model:m", "--base-url", "ftp://127.0.0.1/v1"),
         "must be an http(s) URL"),
        (("--agent", "alice=model:m", "--budget-usd", "0"),
         "--budget-usd 0.0 can let nothing run"),
        (("--agent", "alice=model:m", "--budget-tokens", "0"),
         "--budget-tokens 0 can let nothing run"),
        (("--agent", "alice=envharness.fixtures:SyntheticAgent", "--temperature", "0.5"),
         "--temperature applies to model agents, and no --agent NAME=model:MODEL is given"),
        (("--agent", "alice=envharness.fixtures:SyntheticAgent", "--base-url", "http://h/v1",
          "--api-key-env", "", "--price", "1/2"),
         "--base-url, --price, --api-key-env applies to model agents"),
    ],
)  # fmt: skip
def test_bad_model_options_are_named(
    invoke: Invoke, store_path: Path, args: tuple[str, ...], message: str,
    monkeypatch: pytest.MonkeyPatch, open_root: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_BASE_URL", open_root)
    code, _, err = _run(invoke, store_path, "--turns", "2", *args)

    assert code == 2
    assert message in err
    assert not store_path.exists() or invoke("--store", store_path, "sessions").stdout == ""


def test_the_settings_reach_the_endpoint_and_the_evidence(
    invoke: Invoke, store_path: Path, open_root: str, chat: ScriptedChat, tmp_path: Path
) -> None:
    template = tmp_path / "short.md"
    template.write_text(
        "<!-- envharness:system -->\nYou add numbers.\n$action_format\n"
        "<!-- envharness:user -->\n$feedback\n$observation\n$ask\n"
    )
    code, out, err = _run(
        invoke, store_path, "--agent", f"alice=model:{MODEL}", "--base-url", open_root,
        "--temperature", "0.5", "--max-tokens", "7", "--action-format", "text",
        "--template", str(template), "--turns", "1",
    )  # fmt: skip

    assert code == 0, err
    assert [(o["temperature"], o["max_tokens"]) for o in chat.options] == [(0.5, 7)]
    assert chat.requests[0][0]["content"].startswith("You add numbers.")
    implementation = _implementation(invoke, store_path, _session(out))
    assert implementation.startswith("model-agent@short@")
    assert implementation.endswith(f"via {open_root} (temperature=0.5, max_tokens=7, format=text)")


def test_a_budget_stops_the_session_and_a_larger_one_resumes_its_conversation(
    invoke: Invoke, store_path: Path, open_root: str, chat: ScriptedChat
) -> None:
    agent = ("--agent", f"alice=model:{MODEL}", "--base-url", open_root)
    code, out, _ = _run(invoke, store_path, *agent, "--turns", "5", "--budget-tokens", "20")

    assert code == 1
    session = _session(out)
    assert out.splitlines()[1] == "status  stopped after 1 turns"
    assert out.splitlines()[2].startswith("reason  budget: used ")
    assert "of a 20-token budget" in out
    [first] = chat.requests

    # Another model is another implementation: the resume is refused, naming the change.
    other = invoke("--store", store_path, "resume", session, SYNTHETIC, "--agent",
                   "alice=model:other-model", "--base-url", open_root)  # fmt: skip
    assert other.exit_code == 2
    assert "other-model" in other.stderr

    resumed = invoke("--store", store_path, "resume", session, SYNTHETIC, *agent,
                     "--budget-tokens", "100000")  # fmt: skip
    assert resumed.exit_code == 0, resumed.stderr
    assert resumed.stdout.strip() == f"resumed {session}: completed after 2 turns"
    second = chat.requests[-1]
    assert second[: len(first)] == first  # the same system and turn-1 question, then
    assert second[len(first)]["role"] == "assistant"  # the answer given before the stop
    assert json.loads(second[len(first)]["content"]) == {"value": 1}


def test_continue_takes_the_model_options_and_a_larger_budget(
    invoke: Invoke, store_path: Path, open_root: str
) -> None:
    agent = ("--agent", f"alice=model:{MODEL}", "--base-url", open_root)
    code, out, _ = _run(invoke, store_path, *agent, "--turns", "5", "--budget-tokens", "20")
    assert code == 1
    session = _session(out)

    def more(*args: str) -> tuple[int, str, str]:
        found = invoke("--store", store_path, "continue", session, SYNTHETIC, *agent, *args)
        return found.exit_code, found.stdout, found.stderr

    assert more("--turns", "1", "--budget-tokens", "20") == (
        1,
        f"continued {session}: stopped after 1 turns\n",
        "",
    )  # the same budget: spent already, so no turn is played
    assert more("--turns", "1", "--budget-tokens", "100000") == (
        0,
        f"continued {session}: completed after 2 turns\n",
        "",
    )
    unpriced = more("--turns", "1", "--budget-usd", "1")
    assert "--budget-usd counts the dollars an endpoint reports" in unpriced[2]
    wrong = invoke("--store", store_path, "continue", session, SYNTHETIC, "--agent",
                   "alice=envharness.fixtures:SyntheticAgent", "--temperature", "0.5")  # fmt: skip
    assert wrong.exit_code == 2
    assert "--temperature applies to model agents" in wrong.stderr


def test_a_usd_budget_counts_with_the_price_given(
    invoke: Invoke, store_path: Path, open_root: str
) -> None:
    agent = ("--agent", f"alice=model:{MODEL}", "--base-url", open_root, "--turns", "5")
    code, out, err = _run(invoke, store_path, *agent, "--price", "1000/1000", "--budget-usd", "0.1")

    assert code == 1
    assert err == ""
    assert out.splitlines()[1] == "status  stopped after 1 turns"
    assert "reason  budget: spent $0.1" in out  # a thousand dollars per million tokens

    unpriced = _run(invoke, store_path, *agent, "--budget-usd", "0.1")
    assert unpriced[0] == 0  # the endpoint reports no price: nothing counts against it
    assert "--budget-usd counts the dollars an endpoint reports" in unpriced[2]
    assert "--price IN/OUT" in unpriced[2]


@pytest.mark.parametrize("price", ["0.15", "a/b", "0.1/-1", "nan/1"])
def test_a_bad_price_is_named(invoke: Invoke, store_path: Path, price: str) -> None:
    code, _, err = _run(invoke, store_path, "--agent", "a=model:m", "--base-url",
                        "http://127.0.0.1:9/v1", "--price", price, "--turns", "1")  # fmt: skip
    assert code == 2
    assert f"--price {price!r}" in err


def test_a_manifest_is_refused_with_model_options_and_budgets(
    invoke: Invoke, store_path: Path
) -> None:
    manifest = Path(__file__).resolve().parents[2] / "examples" / "manifest" / "experiment.toml"
    for args in (("--base-url", "http://127.0.0.1:1/v1"), ("--budget-usd", "1")):
        result = invoke("--store", store_path, "run", manifest, *args)
        assert result.exit_code == 2
        assert f"{args[0]} cannot be given with a manifest" in result.stderr


def test_help_names_the_model_options(invoke: Invoke) -> None:
    shown = invoke("run", "--help").stdout
    for option in ("model:MODEL", "--base-url", "--api-key-env", "--temperature", "--template",
                   "--max-tokens", "--action-format", "--price", "--budget-usd", "--budget-tokens",
                   "--budget-seconds"):  # fmt: skip
        assert option in shown


def test_the_budget_note_is_left_out_where_a_published_price_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envharness import Budget
    from envharness.cli.model_agents import ModelOptions, unpriced_note

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    budget = Budget(usd=0.5)
    assert unpriced_note(["driver=model:gpt-4o-mini"], ModelOptions(), budget) is None
    local = ModelOptions(base_url="http://127.0.0.1:8000/v1")
    note = unpriced_note(["driver=model:gpt-4o-mini"], local, budget)
    assert note is not None
    assert "gpt-4o-mini at http://127.0.0.1:8000/v1 has neither" in note
