"""An import's spool checks each record once: itself, unless its reader already did."""

from __future__ import annotations

import pytest

from envharness.store.sources import RowSpool, SourceChainError, SourceRow
from envharness.trajectories.sources import SourceChain, encode_source_row, read_source_lines
from envharness.trajectories.sources.importing import importer_for

SOURCE = "bench/spool"


def rows() -> list[SourceRow]:
    chain = SourceChain(SOURCE)
    return [
        chain.seal("run", "step", {"n": n}, at="2026-01-05T09:00:00Z", turn=n) for n in range(3)
    ]


def test_a_spool_refuses_a_record_that_does_not_chain() -> None:
    first, _, third = rows()
    spool = RowSpool(SOURCE, prefix="run.jsonl: ")
    try:
        spool.add(first)
        with pytest.raises(SourceChainError, match=r"run\.jsonl: .*position\(s\) 1 are missing"):
            spool.add(third)
    finally:
        spool.close()


def test_only_the_reader_that_checks_every_record_itself_skips_the_spool_check() -> None:
    assert importer_for("envharness").checks_chain
    assert not importer_for("otel-genai").checks_chain  # it seals records; the spool checks


def test_the_reader_refuses_what_the_spool_would_before_yielding_it() -> None:
    # The check a `checked` spool skips is the reader's own: a broken link never gets past it.
    first, _, third = rows()
    lines = [encode_source_row(row) for row in (first, third)]
    read = read_source_lines(SOURCE, lines, origin="run.jsonl")
    assert next(read) == first
    with pytest.raises(SourceChainError, match=r"run\.jsonl line 2: .*are missing"):
        next(read)
