"""``envharness import`` and ``envharness sources``: imports from the shell, and source health."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envharness.store.database import connect
from envharness.trajectories.sources import SourceChain, encode_source_row
from tests.cli._support import Invoke
from tests.trajectories.sources._support import (
    AT,
    OTEL_FIXTURE,
    SOURCE,
    database,
    dump,
    episode,
    lines,
)


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    chain = SourceChain(SOURCE)
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(lines([*episode(chain, "run-1"), *episode(chain, "run-2")])))
    return path


def test_import_stores_a_file_and_an_identical_retry_stores_nothing(
    invoke: Invoke, store_path: Path, run_file: Path
) -> None:
    result = invoke("--store", store_path, "import", SOURCE, run_file)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        f"imported 10 new records into {SOURCE} (envharness, positions 0..9, 0 already held); "
        "acknowledged position 9, hash "
    )
    before = dump(store_path)
    again = invoke("--store", store_path, "import", SOURCE, run_file, "--json")
    assert again.exit_code == 0, again.output
    receipt = json.loads(again.output)
    assert (receipt["stored"], receipt["duplicates"], receipt["head_position"]) == (0, 10, 9)
    assert dump(store_path) == before


def test_a_conflicting_import_exits_2_naming_the_position_and_changes_nothing(
    invoke: Invoke, store_path: Path, run_file: Path, tmp_path: Path
) -> None:
    assert invoke("--store", store_path, "import", SOURCE, run_file).exit_code == 0
    before = dump(store_path)
    chain = SourceChain(SOURCE)
    other = tmp_path / "other.jsonl"
    other.write_bytes(encode_source_row(chain.seal("run-1", "note", {"x": 1}, at=AT)) + b"\n")
    result = invoke("--store", store_path, "import", SOURCE, other)
    assert result.exit_code == 2
    assert result.output.startswith(
        f"error: other.jsonl: source '{SOURCE}' position 0 is already imported"
    )
    assert "Traceback" not in result.output
    assert dump(store_path) == before


@pytest.mark.parametrize(
    ("mangle", "expected"),
    [
        (
            lambda rows: [rows[0], rows[2]],
            "error: run.jsonl line 2: position 2 follows position 0: position(s) 1 are missing",
        ),
        (
            lambda rows: [rows[0], rows[1].replace(b'"cells":[1,2]', b'"cells":[1,9]')],
            "error: run.jsonl line 2: position 1: its hash",
        ),
        (
            lambda rows: [rows[0].replace(b'"schema_version":1', b'"schema_version":7')],
            "error: run.jsonl line 1 (position 0): schema_version 7 is not one this envharness "
            "reads (1); upgrade envharness",
        ),
    ],
)
def test_bad_input_exits_2_with_the_line_named(
    invoke: Invoke, store_path: Path, tmp_path: Path, mangle: object, expected: str
) -> None:
    rows = [line.rstrip(b"\n") for line in lines(episode(SourceChain(SOURCE)))]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(mangle(rows)) + b"\n")  # type: ignore[operator]
    result = invoke("--store", store_path, "import", SOURCE, path)
    assert result.exit_code == 2
    assert result.output.startswith(expected), result.output
    assert dump(store_path)[0] == []


def test_import_reads_opentelemetry_genai_spans(invoke: Invoke, store_path: Path) -> None:
    result = invoke(
        "--store", store_path, "import", "otel/weather-agent", OTEL_FIXTURE,
        "--format", "otel-genai", "--training",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "imported 5 new records into otel/weather-agent (otel-genai" in result.output
    wrong = invoke("--store", store_path, "import", "otel/other", OTEL_FIXTURE)
    assert wrong.exit_code == 2
    assert "import it with --format otel-genai" in wrong.output


def test_import_refuses_bad_arguments_before_reading(
    invoke: Invoke, store_path: Path, run_file: Path
) -> None:
    unnamespaced = invoke("--store", store_path, "import", "evals", run_file)
    assert unnamespaced.exit_code == 2
    assert "give it as NAMESPACE/NAME" in unnamespaced.output
    unknown = invoke("--store", store_path, "import", SOURCE, run_file, "--format", "csv")
    assert unknown.exit_code == 2
    assert "unknown import format 'csv'; choose one of: envharness, otel-genai" in unknown.output
    missing = invoke("--store", store_path, "import", SOURCE, "nowhere.jsonl")
    assert missing.exit_code == 2
    assert "cannot read 'nowhere.jsonl'" in missing.output


def test_sources_shows_health(invoke: Invoke, store_path: Path, tmp_path: Path) -> None:
    chain = SourceChain(SOURCE)
    rows = [
        *episode(chain),
        chain.seal("run-2", "capture.failed", {"detail": "queue full", "lost": 4}, at=AT),
        chain.seal("run-2", "step", {}, at=AT),
        chain.seal("run-2", "step", {}, at=AT),
    ]
    head, skipping = tmp_path / "head.jsonl", tmp_path / "skip.jsonl"
    head.write_bytes(b"".join(lines(rows[:6])))
    skipping.write_bytes(b"".join(lines(rows[7:])))
    assert invoke("--store", store_path, "import", SOURCE, head).exit_code == 0
    assert invoke("--store", store_path, "import", SOURCE, skipping).exit_code == 2
    result = invoke("--store", store_path, "sources")
    assert result.exit_code == 1, result.output  # the gap makes the source unhealthy
    header, row, *notes = result.stdout.splitlines()
    assert header.split() == [
        "source", "head", "hash", "records", "episodes", "backlog", "gaps", "capture",
        "failures", "refused",
    ]  # fmt: skip
    assert row.split() == [SOURCE, "5", rows[5].hash[:12], "6", "2", "2", "6", "1", "1"]
    assert notes[0].startswith(f"{SOURCE}: last refused: skip.jsonl: source '{SOURCE}' position 7")
    assert notes[1] == f"{SOURCE}: last capture failure: position 5: queue full"
    assert result.stderr == (
        f"unhealthy: {SOURCE}: position(s) 6 were never imported (a refused import skipped "
        "them); import them, then the refused records again\n"
    )
    as_json = invoke("--store", store_path, "sources", SOURCE, "--json")
    assert as_json.exit_code == 1
    health = json.loads(as_json.stdout)
    assert (health["head_hash"], health["gaps"]) == (rows[5].hash, [{"first": 6, "last": 6}])
    assert as_json.stderr.startswith(f"unhealthy: {SOURCE}: position(s) 6 were never imported")


def test_sources_on_a_store_without_imports(invoke: Invoke, store_path: Path) -> None:
    store_path.mkdir()
    missing = invoke("--store", store_path, "sources")
    assert missing.exit_code == 2  # no store there: reading never creates one
    assert "no evidence store" in missing.output
    connect(store_path, create=True).close()
    empty = invoke("--store", store_path, "sources")
    assert empty.exit_code == 0
    assert "no imported sources in" in empty.output


def test_import_reads_standard_input(invoke: Invoke, store_path: Path) -> None:
    from typer.testing import CliRunner

    from envharness.cli import app

    data = b"".join(lines(episode(SourceChain(SOURCE))))
    result = CliRunner().invoke(
        app, ["--store", str(store_path), "import", SOURCE, "-"], input=data
    )
    assert result.exit_code == 0, result.output
    assert "imported 5 new records" in result.output


def test_sources_exits_0_when_every_source_is_sound(
    invoke: Invoke, store_path: Path, tmp_path: Path
) -> None:
    chain = SourceChain(SOURCE)
    rows = [*episode(chain), chain.seal("run-2", "capture.failed", {"detail": "lost"}, at=AT)]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(lines(rows)))
    assert invoke("--store", store_path, "import", SOURCE, path).exit_code == 0
    result = invoke("--store", store_path, "sources")
    assert result.exit_code == 0, result.output  # a capture failure is shown, not counted
    assert "last capture failure: position 5: lost" in result.stdout
    assert result.stderr == ""


def test_sources_names_a_refused_conflict_until_an_import_stores_again(
    invoke: Invoke, store_path: Path, run_file: Path, tmp_path: Path
) -> None:
    assert invoke("--store", store_path, "import", SOURCE, run_file).exit_code == 0
    other = tmp_path / "other.jsonl"
    other.write_bytes(lines([SourceChain(SOURCE).seal("run-1", "note", {"x": 1}, at=AT)])[0])
    assert invoke("--store", store_path, "import", SOURCE, other).exit_code == 2

    result = invoke("--store", store_path, "sources")

    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"unhealthy: {SOURCE}: its last 1 import(s) were refused: other.jsonl: source "
        f"'{SOURCE}' position 0 is already imported"
    )


def test_sources_recomputes_the_chain_and_names_a_break(
    invoke: Invoke, store_path: Path, run_file: Path
) -> None:
    assert invoke("--store", store_path, "import", SOURCE, run_file).exit_code == 0
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET payload = ? WHERE source = ? AND position = 3",
            (b'{"forged":true}', SOURCE),
        )

    result = invoke("--store", store_path, "sources")

    assert result.exit_code == 1
    assert result.stdout.splitlines()[1].split()[0] == SOURCE  # still listed
    assert result.stderr.startswith(
        f"unhealthy: {SOURCE}: its stored chain is broken at position 3: position 3: its "
        "stored hash"
    )
    assert "restore the store from a backup" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        ("their-records", "the record belongs to source 'acme/nightly-evals', but it is being "
         "imported as 'acme/nigthly-evals'"),
        ("a-gap", "position(s) 0..1 were never imported (it holds no records yet)"),
        ("a-bad-hash", "position 0: its hash"),
    ],
)  # fmt: skip
def test_a_refused_import_into_a_mistyped_source_leaves_the_store_as_it_was(
    invoke: Invoke, store_path: Path, run_file: Path, tmp_path: Path, batch: str, problem: str
) -> None:
    assert invoke("--store", store_path, "import", SOURCE, run_file).exit_code == 0
    before = dump(store_path), imports(store_path)
    typo = "acme/nigthly-evals"
    theirs = lines(episode(SourceChain(typo)))
    path = tmp_path / "typo.jsonl"
    path.write_bytes(
        {
            "their-records": run_file.read_bytes(),
            "a-gap": b"".join(theirs[2:]),
            "a-bad-hash": theirs[0].replace(b"maze-3", b"maze-4"),
        }[batch]
    )

    refused = invoke("--store", store_path, "import", typo, path)

    assert refused.exit_code == 2
    assert problem in refused.stderr
    assert (dump(store_path), imports(store_path)) == before
    listed = invoke("--store", store_path, "sources")
    assert listed.exit_code == 0, listed.output
    assert typo not in listed.output
    missing = invoke("--store", store_path, "sources", typo)
    assert missing.exit_code == 2
    assert f"no source '{typo}'" in missing.stderr


@pytest.mark.parametrize("damage", ["gap", "hash", "not-json", "other-source"])
def test_a_refused_import_into_a_store_that_does_not_exist_creates_nothing(
    invoke: Invoke, store_path: Path, tmp_path: Path, damage: str
) -> None:
    rows = episode(SourceChain(SOURCE))
    data = {
        "gap": b"".join(lines(rows[2:])),
        "hash": lines(rows)[0].replace(b'"participants"', b'"participantz"'),
        "not-json": b"{not json\n",
        "other-source": b"".join(lines(episode(SourceChain("acme/other")))),
    }[damage]
    path = tmp_path / "run.jsonl"
    path.write_bytes(data)

    result = invoke("--store", store_path, "import", SOURCE, path)

    assert result.exit_code == 2
    assert result.stderr.startswith("error: run.jsonl")
    assert not store_path.exists()


def imports(store: Path) -> list[tuple[object, ...]]:
    with database(store) as connection:
        return connection.execute("SELECT * FROM source_imports ORDER BY rowid").fetchall()
