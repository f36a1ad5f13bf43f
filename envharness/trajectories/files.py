"""Dataset rows as files: JSON lines (no extra needed), Parquet, or a Hugging Face ``Dataset``.

Parquet and ``datasets.Dataset`` need the ``datasets`` extra (``pip install
'envharness[datasets]'``: pyarrow and datasets); nothing else in envharness imports them.
Parquet is written in row groups of :data:`ROW_GROUP` rows as they stream, so memory stays
bounded; the file is written beside its target and renamed into place when complete.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterable, Iterable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from envharness.errors import ConfigurationError
from envharness.trajectories.datasets import DatasetRow

__all__ = [
    "ROW_GROUP",
    "jsonl_line",
    "output_file",
    "require_pyarrow",
    "to_hf_dataset",
    "write_parquet",
]

ROW_GROUP = 256
"""Rows per Parquet row group (and per trip to the writer thread)."""

_encoder = msgspec.json.Encoder()


def jsonl_line(row: DatasetRow) -> bytes:
    return _encoder.encode(row) + b"\n"


def output_file(path: Path, *, what: str = "output") -> Path:
    """The regular file an export to ``path`` replaces: ``path``, or the file it links to.

    An export is written beside its target and renamed over it when complete. Renamed over a
    symbolic link, that would replace the link with a file, so the link is followed; renamed
    over a device, pipe or socket (``/dev/stdout``, ``/dev/full``, a FIFO), it would replace
    the special file itself and report success, so those are refused.
    """
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    if target.is_dir():
        raise ConfigurationError(f"{what} {str(path)!r} is a directory; give a file path")
    if target.exists() and not target.is_file():
        raise ConfigurationError(
            f"{what} {str(path)!r} is not a regular file (a device, pipe or socket): an export "
            "is written beside its file and renamed into place when complete, so give a file "
            "path; for a pipe or terminal, export JSON lines to stdout (no --output)"
        )
    return target


def require_pyarrow() -> Any:
    """The ``pyarrow`` module, or a clear error naming the extra that provides it."""
    try:
        return importlib.import_module("pyarrow")
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise ConfigurationError(
            "Parquet and Hugging Face exports need the datasets extra: "
            "pip install 'envharness[datasets]' (JSONL export needs nothing)"
        ) from exc


def _schema(pa: Any) -> Any:
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema(
        [
            ("messages", pa.list_(message)),
            ("reward", pa.float64()),
            ("passed", pa.bool_()),
            ("dataset", pa.string()),
            ("snapshot_id", pa.string()),
            ("session_id", pa.string()),
            ("participant", pa.string()),
            ("scenario_id", pa.string()),
            ("environment", pa.string()),
            ("scorer_version", pa.string()),
            ("score_seq", pa.int64()),
            ("score_digest", pa.string()),
            ("head_digest", pa.string()),
            ("reward_metric", pa.string()),
            ("reward_scope", pa.string()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("step_rewards", pa.list_(pa.float64())),
        ]
    )


def _table(pa: Any, rows: Iterable[DatasetRow]) -> Any:
    plain = [msgspec.to_builtins(row) for row in rows]
    for row in plain:
        if any(len(message) > 2 for message in row["messages"]):
            # Arrow would drop the fields its schema lacks without a word.
            raise ConfigurationError(
                f"the conversation of {row['participant']!r} in {row['session_id']} has tool "
                "calls, which Parquet and Hugging Face exports do not hold yet (their messages "
                "are role and content): export JSON lines (--format jsonl) and load them with "
                "datasets.load_dataset('json', data_files=...)"
            )
    return pa.Table.from_pylist(plain, schema=_schema(pa))


async def write_parquet(rows: AsyncIterable[DatasetRow], path: Path) -> int:
    """Write ``rows`` to a Parquet file at ``path``; returns how many were written."""
    pa = require_pyarrow()
    pq = importlib.import_module("pyarrow.parquet")

    path = output_file(path)
    partial = path.with_name(f".{path.name}.partial")
    writer = await anyio.to_thread.run_sync(lambda: pq.ParquetWriter(partial, _schema(pa)))
    written = 0
    try:
        batch: list[DatasetRow] = []
        async for row in rows:
            batch.append(row)
            if len(batch) >= ROW_GROUP:
                await anyio.to_thread.run_sync(writer.write_table, _table(pa, batch))
                written += len(batch)
                batch = []
        if batch:
            await anyio.to_thread.run_sync(writer.write_table, _table(pa, batch))
            written += len(batch)
        await anyio.to_thread.run_sync(writer.close)
        await anyio.to_thread.run_sync(os.replace, partial, path)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(writer.close)
            await anyio.to_thread.run_sync(lambda: partial.unlink(missing_ok=True))
        raise
    return written


def to_hf_dataset(rows: Iterable[DatasetRow]) -> Any:
    """A Hugging Face ``datasets.Dataset`` (in memory) of ``rows``, with the Parquet columns."""
    pa = require_pyarrow()
    try:
        datasets = importlib.import_module("datasets")
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise ConfigurationError(
            "a Hugging Face Dataset needs the datasets extra: pip install 'envharness[datasets]'"
        ) from exc
    return datasets.Dataset(_table(pa, rows))
