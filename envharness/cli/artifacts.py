"""``envharness artifact``: list a session's artifacts, or write one's bytes out.

Artifacts are the files a session kept beside its evidence (``Resolution.artifacts``; an
agent's offending bytes on a protocol violation), content-addressed by sha256. One is named by
its name (``frame.png``), or by its sha256 or a prefix of it; ``--turn`` chooses between files
of one name kept in several turns. The bytes are checked against their sha256 before a byte
is written, and never written raw to a terminal unless they are plain text: a binary file
would garble it, and escape sequences in text would act on it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import anyio
import typer

from envharness.api.harness import MAX_COUNT
from envharness.cli.edge import CliError, closing
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.errors import NotFoundError
from envharness.records import Artifact, ProtocolViolation, Record
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore, reading_store

__all__ = ["StoredArtifact", "app", "artifact"]

MIN_PREFIX = 8
"""Hex digits of a sha256 prefix that name an artifact (fewer could mean anything)."""
_HEX = re.compile(r"[0-9a-f]+")
_TEXT = re.compile(r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*")
"""Text safe on a terminal: no control character but tab, newline and carriage return."""

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds this command to the root."""


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    """An artifact a record of the session references."""

    seq: int
    turn: int | None
    participant: str | None
    name: str
    sha256: str
    size: int | None


@app.command("artifact")
def artifact(
    ctx: typer.Context,
    session: Annotated[
        str, typer.Argument(metavar="SESSION", help="A session id, or a unique prefix of one.")
    ],
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="[NAME|SHA256]",
            help="The artifact's name, or its sha256 (or a prefix of 8+ hex digits). Without "
            "it, the session's artifacts are listed.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="Write the bytes to FILE (- for stdout)."
        ),
    ] = None,
    turn: Annotated[
        int | None,
        typer.Option(
            "--turn",
            metavar="N",
            min=0,
            max=MAX_COUNT,
            help="Only the artifacts kept in this turn (to choose between files of one name).",
        ),
    ] = None,
) -> None:
    """Write an artifact's bytes to stdout or a file; or list a session's artifacts.

    The bytes are checked against their sha256 first. A file that is not plain text is
    written to a terminal only with -o: pipe it or name a file.
    """
    store = CliState.of(ctx, postgres=True).location

    async def read() -> tuple[str, list[StoredArtifact], bytes | None, StoredArtifact | None]:
        async with reading_store(store) as reader:
            info = await reader.session(session)
            found = await stored_artifacts(reader, info.id, turn)
            if name is None:
                return info.id, found, None, None
            chosen = choose(info.id, found, name, turn)
            return info.id, found, await reader.backend.artifact(chosen.sha256), chosen

    session_id, found, data, chosen = anyio.run(read)
    if data is None or chosen is None:
        _list(session_id, found, turn)
        return
    _write(data, chosen, output)


async def stored_artifacts(
    reader: AnyStore, session_id: str, turn: int | None
) -> list[StoredArtifact]:
    """Every artifact the session's records reference, in seq order."""
    selection = RecordFilter(kinds=("artifact", "protocol.violation"), turn=turn)
    found = []
    async with closing(reader.records(session_id, selection)) as records:
        async for record in records:
            stored = _referenced(record)
            if stored is not None:
                found.append(stored)
    return found


def choose(
    session_id: str, found: list[StoredArtifact], wanted: str, turn: int | None
) -> StoredArtifact:
    """The one artifact ``wanted`` names: by name, else by sha256 or a prefix of one."""
    matches = [item for item in found if item.name == wanted]
    lowered = wanted.lower()
    if not matches and len(lowered) >= MIN_PREFIX and _HEX.fullmatch(lowered):
        matches = [item for item in found if item.sha256.startswith(lowered)]
    in_turn = f" in turn {turn}" if turn is not None else ""
    if not matches:
        names = sorted({printable(item.name) for item in found})
        known = f": it has {', '.join(names)}" if names else ": it has none"
        raise NotFoundError(
            f"session {session_id} has no artifact named {printable(wanted)!r}{in_turn}{known} "
            f"(`envharness artifact {session_id}` lists them)"
        )
    if len({item.sha256 for item in matches}) > 1:
        listed = "; ".join(
            f"turn {item.turn} (seq {item.seq}) sha256 {item.sha256[:12]}" for item in matches
        )
        raise CliError(
            f"{len(matches)} different artifacts of session {session_id} match "
            f"{printable(wanted)!r}{in_turn}: {listed}. Choose one with --turn N or by its "
            "sha256 prefix"
        )
    return matches[-1]


def _referenced(record: Record) -> StoredArtifact | None:
    """The artifact ``record`` references, named as the service names it."""
    payload = record.payload
    if isinstance(payload, Artifact):
        name, sha256, size = payload.name, payload.sha256, payload.size
    elif isinstance(payload, ProtocolViolation) and payload.artifact:
        name, sha256, size = f"offending-bytes-{record.seq}.bin", payload.artifact, None
    else:
        return None
    return StoredArtifact(record.seq, record.turn, record.participant, name, sha256, size)


def _list(session_id: str, found: list[StoredArtifact], turn: int | None) -> None:
    if not found:
        in_turn = f" in turn {turn}" if turn is not None else ""
        typer.echo(f"session {session_id} kept no artifacts{in_turn}", err=True)
        return
    rows = [
        (
            str(item.seq),
            "" if item.turn is None else str(item.turn),
            item.participant or "",
            printable(item.name),
            "" if item.size is None else f"{item.size:,}",
            item.sha256[:16],
        )
        for item in found
    ]
    header = ("seq", "turn", "participant", "name", "bytes", "sha256")
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    right = {0, 1, 4}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    typer.echo(typer.style(line(header), bold=True))
    for row in rows:
        typer.echo(line(row))


def _write(data: bytes, chosen: StoredArtifact, output: Path | None) -> None:
    if output is not None and str(output) != "-":
        try:
            output.write_bytes(data)
        except OSError as error:
            raise CliError(f"cannot write {printable(str(output))}: {error.strerror}") from None
        typer.echo(f"wrote {len(data):,} bytes to {printable(str(output))}", err=True)
        return
    if output is None and _terminal() and not _plain_text(data):
        raise CliError(
            f"artifact {printable(chosen.name)!r} is not plain text ({len(data):,} bytes) and "
            "would garble this terminal: write it to a file with -o FILE, or pipe it"
        )
    out = typer.get_binary_stream("stdout")
    out.write(data)
    out.flush()


def _terminal() -> bool:
    return sys.stdout.isatty()


def _plain_text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _TEXT.fullmatch(text) is not None
