"""Write protocol/schema/*.json from the msgspec types, or check they are current.

    python tools/gen_protocol_schema.py           # (re)write the schema files
    python tools/gen_protocol_schema.py --check   # exit 1 and name the stale files, write nothing

The schema is generated, never edited by hand: the message types in envharness.protocol and the
trajectory types in envharness.trajectories are the single source, and
tests/protocol/test_schema.py runs the check so a stale file fails the suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envharness.protocol import render_schemas
from envharness.trajectories.json_schema import render_trajectory_schemas

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "protocol" / "schema"


def stale_files(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names of schema files that are missing, different, or no longer generated."""
    wanted = _wanted()
    stale = [
        name
        for name, text in wanted.items()
        if not (directory / name).is_file() or (directory / name).read_text("utf-8") != text
    ]
    stale += [path.name for path in directory.glob("*.json") if path.name not in wanted]
    return sorted(stale)


def _wanted() -> dict[str, str]:
    """Every schema file: the agent protocol's and the trajectory contract's."""
    return {**render_schemas(), **render_trajectory_schemas()}


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    """Bring ``directory`` up to date; returns the names of the files it changed."""
    changed = stale_files(directory)
    directory.mkdir(parents=True, exist_ok=True)
    wanted = _wanted()
    for name in changed:
        path = directory / name
        if name in wanted:
            path.write_text(wanted[name], "utf-8")
        else:
            path.unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.dir)
        for name in stale:
            print(f"stale: {args.dir / name}", file=sys.stderr)
        if stale:
            print("run: python tools/gen_protocol_schema.py", file=sys.stderr)
        return 1 if stale else 0
    for name in write(args.dir):
        print(f"wrote {args.dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
