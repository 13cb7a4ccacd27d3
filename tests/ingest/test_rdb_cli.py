"""``pelengine ingest-rdb`` end to end on hand-built files (tests/ingest/test_rdb.py's builders):
a damaged file fails (exit 1) with a message naming the file and the offset and writes
nothing; a good one writes its ``PELENGINE.LOAD`` rows, and a second run appends after
the table's largest seq."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pelengine import cli
from pelengine.ingest.rdb import parse_rdb
from pelengine.ingest.rdb.starting_state import load_rows
from pelengine.model.commands import LOAD_COMMAND
from tests.ingest.test_rdb import one_stream_file

pytestmark = pytest.mark.spark


def ingest(spark: Any, path: Path, events: Path, *extra: str) -> int:
    argv = ["ingest-rdb", str(path), "--events", str(events), *extra]
    return cli.run(argv, spark=spark, progress=lambda _: None)


def events_rows(spark: Any, events: Path) -> list[dict[str, Any]]:
    from pelengine.storage import read_table

    return [r.asDict() for r in read_table(spark, str(events)).orderBy("seq").collect()]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def damaged_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """(file, what its error must say): truncated inside the stream, and a checksum that
    does not match the bytes."""
    good = one_stream_file()
    cut = write(tmp_path / "truncated.rdb", good[: len(good) // 2])
    bad = bytearray(good)
    bad[-1] ^= 0x01
    corrupt = write(tmp_path / "corrupt.rdb", bytes(bad))
    return [(cut, r"offset \d+: "), (corrupt, r"offset \d+: checksum mismatch")]


def test_a_damaged_file_fails_and_writes_nothing(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, message in damaged_files(tmp_path):
        events = tmp_path / f"events-{path.stem}"
        assert ingest(spark, path, events) == cli.EXIT_FAILED
        err = capsys.readouterr().err
        assert re.search(re.escape(str(path)) + ": " + message, err), err
        assert "nothing written" in err
        assert not events.exists(), f"{path.name}: the events path was created"


def test_a_good_file_writes_its_rows_and_a_second_run_appends(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = one_stream_file()
    path = write(tmp_path / "dump.rdb", data)
    events = tmp_path / "events"
    expected = load_rows(parse_rdb(data, str(path)))
    n = len(expected)
    assert n > 3 and expected[0]["argv"] == [LOAD_COMMAND, "BEGIN"]

    assert ingest(spark, path, events) == cli.EXIT_OK
    assert f"wrote {n} load rows (seq 1..{n})" in capsys.readouterr().out
    rows = events_rows(spark, events)
    assert [(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"], r["source"]) for r in rows] == [
        (e["seq"], e["ts_ms"], e["argv"], e["db"], e["client"], "rdb") for e in expected
    ]

    # a damaged file on an existing table: an error, the table as it was
    for bad, _message in damaged_files(tmp_path):
        assert ingest(spark, bad, events) == cli.EXIT_FAILED
    capsys.readouterr()
    assert len(events_rows(spark, events)) == n

    assert ingest(spark, path, events) == cli.EXIT_OK
    assert f"appended {n} load rows (seq {n + 1}..{2 * n})" in capsys.readouterr().out
    rows = events_rows(spark, events)
    assert [r["seq"] for r in rows] == list(range(1, 2 * n + 1))
    assert [r["argv"] for r in rows[n:]] == [e["argv"] for e in expected]

    assert ingest(spark, path, events, "--overwrite") == cli.EXIT_OK
    assert [r["seq"] for r in events_rows(spark, events)] == list(range(1, n + 1))
