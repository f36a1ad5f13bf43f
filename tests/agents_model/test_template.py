"""Templates: packaged and shipped in the wheel, versioned by digest, their fields checked."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from envharness.agents import DEFAULT_TEMPLATE, ModelAgent, load_template, packaged_templates
from envharness.agents.template import SYSTEM_FIELDS, USER_FIELDS, AgentTemplate
from envharness.errors import ConfigurationError
from envharness.llm import ScriptedProvider

ROOT = Path(__file__).resolve().parents[2]
MINE = (
    "note\n<!-- envharness:system -->\nPlay $role; costs $$5.\n"
    "<!-- envharness:user -->\n$observation\n\n\n\n$hints\n$ask"
)


def test_the_default_template_is_packaged_and_versioned_by_digest() -> None:
    assert DEFAULT_TEMPLATE in packaged_templates()
    template = load_template()
    assert template is load_template(DEFAULT_TEMPLATE)
    assert template.name == "agent-v1"
    assert template.version.startswith("agent-v1@")
    assert len(template.version) == len("agent-v1@") + 12
    assert "$action_format" in template.system
    assert "$observation" in template.user


def test_a_template_from_text_or_a_file_renders_without_blank_runs(tmp_path: Path) -> None:
    inline = load_template(MINE)
    assert (inline.name, inline.system) == ("inline", "Play $role; costs $$5.")
    values = {field: "" for field in USER_FIELDS} | {"observation": "total: 1", "ask": "Go."}
    assert inline.render_user(values) == "total: 1\n\nGo."
    assert inline.render_system({field: "x" for field in SYSTEM_FIELDS}) == "Play x; costs $5."
    path = tmp_path / "mine-v2.md"
    path.write_text(MINE)
    from_file = load_template(path)
    assert from_file.name == "mine-v2"
    assert from_file.version.startswith("mine-v2@")
    assert load_template(str(path)).version == from_file.version
    path.write_text(MINE + ".")
    assert load_template(path).version != from_file.version
    assert load_template(from_file) is from_file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "<!-- envharness:system -->\n$system $colour\n<!-- envharness:user -->\n$observation",
            "the system part of the template given as text uses unknown field(s) $colour; "
            "the system part knows $action_format, $action_schema, $environment",
        ),
        (
            "<!-- envharness:system -->\nhi\n<!-- envharness:user -->\n$hints ${action_schema}",
            "the user part of the template given as text uses unknown field(s) "
            "$action_schema; the user part knows $ask, $feedback, $hints, $observation",
        ),
        (
            "<!-- envharness:system -->\ncosts $5\n<!-- envharness:user -->\n$observation",
            "has a '$' that is not a field; write '$$' for a dollar sign",
        ),
        (
            "<!-- envharness:system -->\nhi\n<!-- envharness:user -->\n  \n",
            "must have its <!-- envharness:system --> part before a non-empty",
        ),
        (
            "<!-- envharness:user -->\nhi\n<!-- envharness:system -->\n$observation",
            "must have its <!-- envharness:system --> part before a non-empty",
        ),
        (
            "<!-- envharness:system -->\nhi <!-- envharness:system -->",
            "must contain exactly one <!-- envharness:system --> line and one",
        ),
    ],
)
def test_a_bad_template_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_template(text)
    assert message in str(caught.value)


def test_a_model_agent_refuses_a_bad_template_when_it_is_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"unknown field\(s\) \$board"):
        ModelAgent(
            ScriptedProvider([]),
            template="<!-- envharness:system -->\nx\n<!-- envharness:user -->\n$board",
        )
    with pytest.raises(
        ConfigurationError, match="there is no packaged template 'agent-v9'; choose one of agent-v1"
    ):
        ModelAgent(ScriptedProvider([]), template="agent-v9")
    with pytest.raises(ConfigurationError, match="cannot read the template file"):
        load_template(tmp_path / "missing.md")
    with pytest.raises(ConfigurationError, match="not int"):
        load_template(3)  # type: ignore[arg-type]


def test_the_template_version_is_part_of_the_implementation() -> None:
    provider = ScriptedProvider([], model="tiny", name="local")
    agent = ModelAgent(provider)
    assert agent.implementation == f"model-agent@{load_template().version}:local/tiny"
    other = ModelAgent(provider, template=AgentTemplate("t", "t@1", "s", "$observation"))
    assert other.implementation == "model-agent@t@1:local/tiny"
    assert ModelAgent(provider, implementation="mine@2").implementation == "mine@2"


@pytest.mark.slow
def test_the_templates_ship_in_the_wheel(tmp_path: Path) -> None:
    import hatchling.builders.wheel as wheel_builder  # the build backend (in the dev extra)

    [wheel] = list(
        wheel_builder.WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    )
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for name in packaged_templates():
        assert f"envharness/agents/prompts/{name}.md" in names
