"""docs/research.md names only scripts and options that exist."""

from __future__ import annotations

import re
import subprocess

from tests.research.conftest import ROOT, script

PAGE = ROOT / "docs" / "research.md"


def documented_commands() -> list[list[str]]:
    commands = []
    for block in re.findall(r"```\n(.*?)```", PAGE.read_text(), flags=re.DOTALL):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = line.split("#")[0].split()
            if len(words) > 1 and words[0] == "python" and words[1].startswith("research/"):
                commands.append(words[1:])
    return commands


def test_every_documented_command_uses_real_options() -> None:
    commands = documented_commands()
    assert {c[0] for c in commands} >= {
        "research/build_sft_dataset.py",
        "research/train_engineer.py",
        "research/serve_openai.py",
        "research/ablations.py",
    }
    helps: dict[tuple[str, ...], str] = {}
    for words in commands:
        path = words[0]
        assert (ROOT / path).is_file(), path
        key = (path, words[1]) if path.endswith("train_engineer.py") else (path,)
        if key not in helps:
            done = subprocess.run(
                [*script(path.removeprefix("research/")), *key[1:], "--help"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            helps[key] = done.stdout
        for option in (w for w in words if w.startswith("-") and w != "-"):
            assert option in helps[key], f"{' '.join(key)} has no option {option}"
