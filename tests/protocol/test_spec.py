"""protocol/README.md: its examples are real messages and it names every type and violation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envharness.protocol import (
    AGENT_MESSAGE_TYPES,
    HOST_MESSAGE_TYPES,
    OFFENDING_LIMIT,
    VIOLATION_CODES,
    Limits,
    decode_agent_message,
    decode_host_message,
    message_type,
)

SPEC = Path(__file__).resolve().parents[2] / "protocol" / "README.md"
TEXT = SPEC.read_text("utf-8")
HOST_PART, AGENT_PART = TEXT.split("### 2.2 Agent → host")
EXAMPLES = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


def examples(part: str) -> list[str]:
    return EXAMPLES.findall(part)


@pytest.mark.parametrize("line", examples(HOST_PART))
def test_host_examples_decode(line: str) -> None:
    assert "\n" not in line
    assert message_type(decode_host_message(line.encode())) in HOST_MESSAGE_TYPES


@pytest.mark.parametrize("line", examples(AGENT_PART))
def test_agent_examples_decode(line: str) -> None:
    assert "\n" not in line
    assert message_type(decode_agent_message(line.encode())) in AGENT_MESSAGE_TYPES


def test_every_message_type_has_an_example() -> None:
    host = {message_type(decode_host_message(line.encode())) for line in examples(HOST_PART)}
    agent = {message_type(decode_agent_message(line.encode())) for line in examples(AGENT_PART)}
    assert host == HOST_MESSAGE_TYPES
    assert agent == AGENT_MESSAGE_TYPES


def test_every_violation_code_is_in_the_table() -> None:
    table = set(re.findall(r"^\| `([a-z_0-9]+)` \|", TEXT, flags=re.MULTILINE))
    assert set(VIOLATION_CODES) <= table


def test_the_spec_states_the_defaults_the_host_uses() -> None:
    limits = Limits()
    assert f"| `max_line_bytes` | {limits.max_line_bytes} |" in TEXT
    assert f"| `max_log_messages` | {limits.max_log_messages} |" in TEXT
    assert f"at most {OFFENDING_LIMIT // 1024} KiB" in TEXT
