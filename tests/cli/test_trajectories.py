"""``trajectories``, ``snapshot …``, ``export snapshot ID`` and ``dataset …`` from the shell."""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import msgspec
import pytest

from envharness import EnvironmentHarness
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment
from tests.cli._support import Invoke
from tests.trajectories._support import MISS, REACH, flip_payload_byte


def synthetic_store(store: Path) -> list[str]:
    runner = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    return [runner.run(REACH, turns=5).id, runner.run(MISS, turns=2).id]


def snapshot_of(invoke: Invoke, store: Path, *arguments: str) -> str:
    result = invoke("--store", store, "snapshot", "create", *arguments)
    assert result.exit_code == 0, result.output
    snapshot_id = result.stdout.strip()
    assert snapshot_id.startswith("snp_")
    return snapshot_id


def test_trajectories_lists_every_session_with_its_states(
    invoke: Invoke, quickstart_master: Path
) -> None:
    result = invoke("--store", quickstart_master, "trajectories")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "session", "execution", "collection", "termination", "outcome", "segs", "records",
    ]  # fmt: skip
    assert len(rows) == 16  # 14 sessions, then the 2 episodes of the imported source
    assert any("finished (completed)" in row and "complete" in row for row in rows)
    assert [row.split()[0] for row in rows[-2:]] == [
        "quickstart/replay:game-1", "quickstart/replay:game-2",
    ]  # fmt: skip
    as_json = invoke("--store", quickstart_master, "trajectories", "--json")
    trajectories = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [t["provenance"]["origin"] for t in trajectories] == ["native"] * 14 + ["imported"] * 2
    first = trajectories[0]["session_id"]
    one = invoke("--store", quickstart_master, "trajectories", first, "--json")
    assert json.loads(one.stdout) == trajectories[0]


@pytest.mark.parametrize(
    ("options", "count", "origin"),
    [
        (("--origin", "native"), 14, "native"),
        (("--origin", "imported"), 2, "imported"),
        (("--source", "quickstart/replay"), 2, "imported"),
        (("--origin", "imported", "--source", "quickstart/replay"), 2, "imported"),
    ],
)
def test_trajectories_can_list_one_origin_or_one_source(
    invoke: Invoke, quickstart_master: Path, options: tuple[str, ...], count: int, origin: str
) -> None:
    result = invoke("--store", quickstart_master, "trajectories", *options, "--json")
    assert result.exit_code == 0, result.output
    found = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t["provenance"]["origin"] for t in found] == [origin] * count


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (("--origin", "remote"), "--origin 'remote' is not one of: native, imported"),
        (("--origin", "native", "--source", "a/b"), "it cannot go with --origin native"),
        (("ses_x", "--origin", "native"), "give trajectory ids, or --origin/--source"),
        (("--source", "quickstart/nope"), "no records of source 'quickstart/nope'"),
    ],
    ids=["unknown-origin", "native-source", "ids-and-filter", "unknown-source"],
)
def test_trajectories_refuses_filters_that_cannot_apply(
    invoke: Invoke, quickstart_master: Path, arguments: tuple[str, ...], problem: str
) -> None:
    result = invoke("--store", quickstart_master, "trajectories", *arguments)
    assert result.exit_code == 2
    assert problem in result.stderr
    assert result.stdout == ""


def test_trajectories_of_an_empty_store_says_so(invoke: Invoke, tmp_path: Path) -> None:
    synthetic_store(tmp_path)
    result = invoke("--store", tmp_path, "trajectories", "--origin", "imported")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no trajectories in" in result.stderr


def test_snapshot_create_is_content_addressed(invoke: Invoke, tmp_path: Path) -> None:
    first, second = synthetic_store(tmp_path)
    snapshot_id = snapshot_of(invoke, tmp_path, first, second, "--label", "pair")
    assert snapshot_of(invoke, tmp_path, second, first, "--label", "pair") == snapshot_id
    assert snapshot_of(invoke, tmp_path, first) != snapshot_id
    listed = invoke("--store", tmp_path, "snapshot", "list")
    assert listed.exit_code == 0
    assert snapshot_id in listed.stdout
    assert "pair" in listed.stdout
    shown = invoke("--store", tmp_path, "snapshot", "show", snapshot_id[:12])
    assert shown.exit_code == 0, shown.output
    assert f"snapshot {snapshot_id}  (verified)" in shown.stdout
    assert first in shown.stdout
    as_json = invoke("--store", tmp_path, "snapshot", "list", "--json")
    assert {json.loads(line)["id"] for line in as_json.stdout.splitlines()} >= {snapshot_id}


def test_snapshot_create_takes_an_experiment(invoke: Invoke, quickstart_store: Path) -> None:
    experiments = invoke("--store", quickstart_store, "experiments", "--json")
    experiment = json.loads(experiments.stdout.splitlines()[0])
    result = invoke(
        "--store", quickstart_store, "snapshot", "create", "--experiment", experiment["id"]
    )
    assert result.exit_code == 0, result.output
    assert f"{sum(experiment['sessions'].values())} trajectories" in result.stderr


def test_export_snapshot_streams_checked_lines(invoke: Invoke, tmp_path: Path) -> None:
    sessions = synthetic_store(tmp_path)
    snapshot_id = snapshot_of(invoke, tmp_path, *sessions)
    result = invoke("--store", tmp_path, "export", "snapshot", snapshot_id)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["type"] == "snapshot"
    assert lines[0]["id"] == snapshot_id
    assert [line["trajectory"]["session_id"] for line in lines if line["type"] == "trajectory"] == (
        sorted(sessions)
    )
    records = [line["record"] for line in lines if line["type"] == "record"]
    assert len(records) == lines[0]["content"]["records"]
    # `export SESSION` still exports a session.
    session = invoke("--store", tmp_path, "export", sessions[0])
    assert session.exit_code == 0
    assert json.loads(session.stdout.splitlines()[0])["session_id"] == sessions[0]


def test_export_of_a_tampered_snapshot_is_refused_naming_the_record(
    invoke: Invoke, tmp_path: Path
) -> None:
    sessions = synthetic_store(tmp_path)
    snapshot_id = snapshot_of(invoke, tmp_path, *sessions)
    flip_payload_byte(tmp_path, sessions[1], 4)
    result = invoke("--store", tmp_path, "export", "snapshot", snapshot_id)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"trajectory {sessions[1]}: record seq 4" in result.stderr
    shown = invoke("--store", tmp_path, "snapshot", "show", snapshot_id)
    assert shown.exit_code == 2
    assert "record seq 4" in shown.stderr


def test_dataset_create_and_export(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    sessions = synthetic_store(store)
    snapshot_id = snapshot_of(invoke, store, *sessions, "--entitle-training", "own data")
    created = invoke("--store", store, "dataset", "create", "sft", snapshot_id)
    assert created.exit_code == 0, created.output
    assert created.stdout.strip().startswith("dst_")
    assert "2 trajectories" in created.stderr
    listed = invoke("--store", store, "dataset", "list")
    assert listed.stdout.startswith("sft  dst_")
    exported = invoke("--store", store, "dataset", "export", "sft")
    assert exported.exit_code == 0, exported.output
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(row["reward"] for row in rows) == [0.0, 1.0]
    assert rows[0]["messages"][0]["role"] == "user"
    jsonl = tmp_path / "sft.jsonl"
    assert invoke("--store", store, "dataset", "export", "sft", "-o", jsonl).exit_code == 0
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == rows
    parquet = tmp_path / "sft.parquet"
    result = invoke(
        "--store", store, "dataset", "export", "sft", "--format", "parquet", "--output", parquet
    )
    assert result.exit_code == 0, result.output
    assert "wrote 2 rows" in result.stderr
    table = importlib.import_module("pyarrow.parquet").read_table(parquet)
    assert table.to_pylist() == rows


def test_dataset_export_to_stdout_refuses_altered_evidence_before_the_first_row(
    invoke: Invoke, tmp_path: Path
) -> None:
    # Rows on stdout cannot be taken back: the first trajectory's rows were written before
    # the second's altered record stopped the export.
    store = tmp_path / "store"
    sessions = sorted(synthetic_store(store))
    snapshot_id = snapshot_of(invoke, store, *sessions, "--entitle-training", "own data")
    assert invoke("--store", store, "dataset", "create", "sft", snapshot_id).exit_code == 0
    flip_payload_byte(store, sessions[1], 4)
    result = invoke("--store", store, "dataset", "export", "sft")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"trajectory {sessions[1]}: record seq 4" in result.stderr


def test_dataset_export_names_an_output_it_cannot_write(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snapshot_id = snapshot_of(invoke, store, *synthetic_store(store), "--entitle-training", "own")
    assert invoke("--store", store, "dataset", "create", "sft", snapshot_id).exit_code == 0
    missing = tmp_path / "no-such-directory"
    for extra in ((), ("--format", "parquet")):
        output = missing / ("rows.parquet" if extra else "rows.jsonl")
        result = invoke("--store", store, "dataset", "export", "sft", "-o", output, *extra)
        assert result.exit_code == 2, result.output
        assert f"there is no directory {str(missing)!r}; create it first" in result.stderr
        assert "Traceback" not in result.output
    assert not missing.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_dataset_export_never_replaces_a_special_file_or_a_link(
    invoke: Invoke, tmp_path: Path
) -> None:
    # `-o /dev/full` printed "wrote 20 rows" and renamed a regular file over the device node.
    store = tmp_path / "store"
    snapshot_id = snapshot_of(invoke, store, *synthetic_store(store), "--entitle-training", "own")
    assert invoke("--store", store, "dataset", "create", "sft", snapshot_id).exit_code == 0
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    for extra in ((), ("--format", "parquet")):
        result = invoke("--store", store, "dataset", "export", "sft", "-o", pipe, *extra)
        assert result.exit_code == 2, result.output
        assert f"--output {str(pipe)!r} is not a regular file" in result.stderr
        assert "export JSON lines to stdout" in result.stderr
        assert "Traceback" not in result.output
        assert stat.S_ISFIFO(pipe.lstat().st_mode)
    # A link to a file stays a link: the file it names receives the rows.
    for name, extra in (("rows.jsonl", ()), ("rows.parquet", ("--format", "parquet"))):
        target, link = tmp_path / name, tmp_path / f"link-{name}"
        target.write_bytes(b"old")
        link.symlink_to(target)
        result = invoke("--store", store, "dataset", "export", "sft", "-o", link, *extra)
        assert result.exit_code == 0, result.output
        assert link.is_symlink()
        assert target.read_bytes() != b"old"
    assert not list(tmp_path.glob(".*.partial"))


def test_dataset_export_names_a_directory_it_may_not_write(invoke: Invoke, tmp_path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("running as root: root writes anywhere, so permissions cannot block it")
    store = tmp_path / "store"
    snapshot_id = snapshot_of(invoke, store, *synthetic_store(store), "--entitle-training", "own")
    assert invoke("--store", store, "dataset", "create", "sft", snapshot_id).exit_code == 0
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = invoke("--store", store, "dataset", "export", "sft", "-o", locked / "rows.jsonl")
    finally:
        locked.chmod(0o700)
    assert result.exit_code == 2, result.output
    assert "cannot write --output" in result.stderr
    assert "Traceback" not in result.output


def test_dataset_refusals_are_named(invoke: Invoke, tmp_path: Path) -> None:
    sessions = synthetic_store(tmp_path)
    snapshot_id = snapshot_of(invoke, tmp_path, *sessions)
    result = invoke("--store", tmp_path, "dataset", "create", "sft", snapshot_id, "--verbose")
    assert result.exit_code == 2
    for session_id in sessions:
        assert f"{session_id} (snapshot {snapshot_id}): not training-entitled" in result.stderr
    assert invoke("--store", tmp_path, "dataset", "list").stdout == ""


def test_bad_input_gets_a_clear_error(invoke: Invoke, tmp_path: Path) -> None:
    sessions = synthetic_store(tmp_path)
    snapshot_id = snapshot_of(invoke, tmp_path, sessions[0])
    cases = [
        (("export", "snapshot"), "export snapshot needs the snapshot's id"),
        (("export", sessions[0], "extra"), "export takes one SESSION"),
        (("export", "snapshot", "nope"), "'nope' is not a snapshot id"),
        (("export", "snapshot", "snp_00000000"), "no snapshot 'snp_00000000'"),
        (("snapshot", "create"), "needs SESSION ids or --experiment"),
        (("snapshot", "create", "ses_nope"), "no session 'ses_nope'"),
        (("snapshot", "create", sessions[0], "--entitle-training", " "), "needs the basis"),
        (("snapshot", "create", sessions[0], "--declared-by", "me"), "goes with --entitle"),
        (("snapshot", "create", "--experiment", "exp_nope"), "no experiment 'exp_nope'"),
        (("trajectories", "ses_nope"), "no session 'ses_nope'"),
        (("dataset", "create", "d", "snp_nope1234"), "no snapshot 'snp_nope1234'"),
        (("dataset", "export", "nope"), "no dataset 'nope'"),
        (
            ("dataset", "export", "d", "--format", "csv"),
            "--format 'csv' is not one of: jsonl, parquet",
        ),
        (("dataset", "export", "d", "--format", "parquet"), "give --output PATH"),
        (("dataset", "export", "d", "-o", tmp_path), "is a directory"),
    ]
    for arguments, expected in cases:
        result = invoke("--store", tmp_path, *arguments)
        assert result.exit_code == 2, (arguments, result.output)
        assert expected in result.stderr, (arguments, result.stderr)
        assert "Traceback" not in result.output
    missing = invoke("--store", tmp_path / "absent", "trajectories")
    assert missing.exit_code == 2
    assert "no evidence store" in missing.stderr
    assert not (tmp_path / "absent").exists()
    assert snapshot_id in invoke("--store", tmp_path, "snapshot", "list").stdout
    assert (
        msgspec.json.decode(
            invoke("--store", tmp_path, "export", "snapshot", snapshot_id).stdout.splitlines()[0]
        )["id"]
        == snapshot_id
    )


def test_imported_episodes_are_trajectories_too(invoke: Invoke, tmp_path: Path) -> None:
    from tests.trajectories.test_datasets import imported_episode

    synthetic_store(tmp_path)
    episode = imported_episode(tmp_path, "acme/history", training=True)
    result = invoke("--store", tmp_path, "trajectories", episode, "--json")
    assert result.exit_code == 0, result.output
    trajectory = json.loads(result.stdout)
    assert trajectory["provenance"]["origin"] == "imported"
    assert trajectory["provenance"]["source"] == "acme/history"
    snapshot_id = snapshot_of(invoke, tmp_path, episode, "--entitle-training", "licensed")
    exported = invoke("--store", tmp_path, "export", "snapshot", snapshot_id)
    assert exported.exit_code == 0, exported.output
    types = [json.loads(line)["type"] for line in exported.stdout.splitlines()]
    assert types[:2] == ["snapshot", "trajectory"]
    assert set(types[2:]) == {"source_record"}


def corrupt_header(store: Path, snapshot_id: str, header: bytes) -> None:
    """What a bad disk or a hand edit would leave: the immutability trigger cannot stop it."""
    with sqlite3.connect(store / "evidence.sqlite3") as database:
        database.execute("DROP TRIGGER snapshots_are_immutable_update")
        database.execute("UPDATE snapshots SET header = ? WHERE id = ?", (header, snapshot_id))
    database.close()


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (b"{not json", "is not valid trajectory JSON"),
        (b'{"schema_version": 1, "label": 5}', "does not match the trajectory schema"),
    ],
    ids=["garbage", "wrong-shape"],
)
def test_snapshot_list_names_a_corrupt_snapshot_and_lists_the_others(
    invoke: Invoke, tmp_path: Path, header: bytes, problem: str
) -> None:
    first, second = synthetic_store(tmp_path)
    good = snapshot_of(invoke, tmp_path, first, "--label", "good")
    bad = snapshot_of(invoke, tmp_path, second, "--label", "bad")
    corrupt_header(tmp_path, bad, header)

    listed = invoke("--store", tmp_path, "snapshot", "list")
    as_json = invoke("--store", tmp_path, "snapshot", "list", "--json")

    for result in (listed, as_json):
        assert result.exit_code == 1
        assert good in result.stdout
        assert bad not in result.stdout
        assert f"corrupt: snapshot {bad} {problem}" in result.stderr
        assert f"  its trajectories: {second}\n" in result.stderr
        assert "1 of 2 snapshots cannot be read; the others are listed" in result.stderr
        assert "Traceback" not in result.stderr
    assert json.loads(as_json.stdout)["id"] == good
    assert listed.stdout.rstrip().endswith("good")


def test_snapshot_list_of_sound_snapshots_exits_0(invoke: Invoke, tmp_path: Path) -> None:
    first, _ = synthetic_store(tmp_path)
    empty = invoke("--store", tmp_path, "snapshot", "list")
    assert (empty.exit_code, empty.stdout) == (0, "")
    assert "no snapshots in" in empty.stderr
    snapshot_id = snapshot_of(invoke, tmp_path, first)
    listed = invoke("--store", tmp_path, "snapshot", "list")
    assert (listed.exit_code, listed.stderr) == (0, "")
    assert listed.stdout.startswith(snapshot_id)
