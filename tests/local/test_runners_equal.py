"""The local runner (``reconstruct --runner local``: one process, no JVM) against the Spark
runner: the same events give the same tables and the same counts.

The logs are the generator's (with its faults: rows the contract rejects, seqs shared by
equal and by different rows) with what it never writes spliced in: readers that block,
SELECT rows without db and the rows after them, MULTI/EXEC units, a script and the
commands it ran (client ``lua``), a RENAME of a stream with groups, FLUSHDB and FLUSHALL.
Each log runs on a 7.0 profile (the live clock) and a 7.2+ one (one clock per unit),
whole and cut by ``--as-of-seq`` / ``--as-of-ms``. The live servers judge the local
runner too: tests/redis_diff/test_differential_job.py replays every recorded log on both.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pelengine.local.reconstruct import reconstruct_local
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.runs.events import EVENTS_ARROW_SCHEMA
from pelengine.schemas import OUTPUT_TABLES
from pelengine.settings import Settings
from pelengine.synth import generate_events
from tests.frames import assert_same_rows
from tests.runs.test_incremental import _with_blocking

pytestmark = pytest.mark.spark

EVENTS_ARROW = EVENTS_ARROW_SCHEMA


def _splice(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """``rows`` with the commands the generator never writes spliced in at random places
    (see the module docstring); seqs renumbered (a null seq stays null)."""
    rng = random.Random(seed)
    n = len(rows)

    def row(argv: list[str], client: str | None = "x", db: int | None = 0) -> dict[str, Any]:
        return {"argv": argv, "client": client, "db": db, "source": "t"}

    pieces: dict[int, list[dict[str, Any]]] = {}

    def at(i: int, extra: list[dict[str, Any]]) -> None:
        pieces.setdefault(i, []).extend(extra)

    # an early FLUSHALL: what came before it is gone, what follows builds again
    at(n // 12, [row(["XADD", "gone", "*", "f", "v"]), row(["FLUSHALL"])])
    # SELECT without db: the rows after it (db null) go to db 3, until SELECT 0
    at(
        rng.randint(n // 6, n // 3),
        [
            row(["SELECT", "3"], db=None),
            row(["XADD", "sel", "*", "f", "1"], db=None),
            row(["XGROUP", "CREATE", "sel", "g", "0"], db=None),
            row(["XREADGROUP", "GROUP", "g", "c", "STREAMS", "sel", ">"], db=None),
            # a SELECT the server refuses (not an integer) leaves the db as it was;
            # Spark's cast trims DEL around a number as it does blanks
            row(["SELECT", "two"], db=None),
            row(["XADD", "sel", "*", "f", "3"], db=None),
            row(["SELECT", "1.5"], db=None),
            row(["SELECT", "\x7f0\x7f"], db=None),
            row(["XADD", "sel", "*", "f", "2"], db=None),
        ],
    )
    # a transaction, and a script's call row with the commands it ran
    at(
        rng.randint(n // 3, n // 2),
        [
            row(["MULTI"], "m1"),
            row(["XADD", "tx", "*", "f", "1"], "m1"),
            row(["XGROUP", "CREATE", "tx", "g", "0"], "m1"),
            row(["XREADGROUP", "GROUP", "g", "c", "STREAMS", "tx", ">"], "m1"),
            row(["EXEC"], "m1"),
            row(["EVAL", "return 1", "1", "lx"], "e1"),
            row(["XADD", "lx", "*", "f", "1"], "lua"),
            row(["XGROUP", "CREATE", "lx", "g", "0"], "lua"),
            row(["XREADGROUP", "GROUP", "g", "c", "STREAMS", "lx", ">"], "lua"),
        ],
    )
    # a stream with a group renamed, then read under its new name; a db flushed
    at(
        rng.randint(n // 2, 3 * n // 4),
        [
            row(["XADD", "old", "*", "f", "1"]),
            row(["XGROUP", "CREATE", "old", "g", "0"]),
            row(["XREADGROUP", "GROUP", "g", "c", "STREAMS", "old", ">"]),
            row(["RENAME", "old", "new"]),
            row(["XADD", "new", "*", "f", "2"]),
            row(["XREADGROUP", "GROUP", "g", "c", "STREAMS", "new", ">"]),
            row(["XADD", "f5", "*", "f", "1"], db=5),
            row(["XGROUP", "CREATE", "f5", "g", "0"], db=5),
            row(["FLUSHDB"], db=5),
        ],
    )
    out: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        for extra in pieces.get(i, []):
            out.append({**extra, "ts_ms": r["ts_ms"] if r["ts_ms"] is not None else 0})
        out.append(dict(r))
    for number, r in enumerate(out, start=1):
        if r.get("seq", 0) is not None:
            r["seq"] = number
    return out


def _log(seed: int, events: int = 1200) -> pa.Table:
    rows = _splice(_with_blocking(list(generate_events(events, 6, seed=seed)), seed), seed)
    return pa.Table.from_pylist(rows, schema=EVENTS_ARROW)


def _spark_tables(spark: Any, events: pa.Table, settings: Settings) -> tuple[dict, dict]:
    result = reconstruct(spark, spark.createDataFrame(events), settings)
    try:
        tables = {name: df.toArrow() for name, df in result.tables.items()}
        tables["rejected_events"] = result.rejected.toArrow()
        return tables, result.report
    finally:
        result.unpersist()


def _same_counts(local: dict[str, Any], spark: dict[str, Any]) -> None:
    for key in ("as_of_ms", "as_of_seq", "stopped_before_seq", "starting_state", "notes"):
        assert local.get(key) == spark.get(key), key
    assert local["events"] == spark["events"]


CASES = [
    pytest.param(11, "7.0", {}, id="7.0"),
    pytest.param(12, "valkey-9.1", {}, id="valkey-9.1"),
    pytest.param(13, "7.4", {"as_of_seq": 700}, id="7.4-as-of-seq"),
    pytest.param(14, "7.0", {"as_of_ms": "middle"}, id="7.0-as-of-ms"),
]


@pytest.mark.parametrize(("seed", "profile", "cut"), CASES)
def test_local_runner_equals_the_spark_runner(
    spark: Any, seed: int, profile: str, cut: dict[str, Any]
) -> None:
    events = _log(seed)
    if cut.get("as_of_ms") == "middle":
        times = sorted(t for t in events.column("ts_ms").to_pylist() if t is not None)
        cut = {"as_of_ms": times[len(times) // 2]}
    settings = Settings(profile=profile, **cut)
    want, want_report = _spark_tables(spark, events, settings)
    got = reconstruct_local(events, settings)
    for name in OUTPUT_TABLES:
        assert_same_rows(got.tables[name], want[name], what=name)
    assert_same_rows(got.rejected, want["rejected_events"], what="rejected_events")
    _same_counts(got.report, want_report)
    # the log has what it is meant to have (up to the cut), so the comparison covers it
    assert got.report["events"]["rejected_by_reason"], "no rejected rows"
    by_command = got.report["events"]["by_command"]
    for command in ("SELECT", "MULTI", "EVAL", "FLUSHALL", "XREADGROUP"):
        assert by_command.get(command), command
    if not cut:
        assert by_command.get("RENAME") and by_command.get("FLUSHDB")
    else:
        assert got.report["as_of_seq"] < events.num_rows


def test_the_python_engine_gives_the_same_tables(spark: Any) -> None:
    """The local runner on the Python engine (the reference) and on the native one, where
    it is installed, give the Spark runner's tables."""
    events = _log(21, 800)
    settings = Settings(profile="7.2", engine="python")
    want, want_report = _spark_tables(spark, events, settings)
    got = reconstruct_local(events, settings)
    assert got.report["engine"] == "python"
    for name in OUTPUT_TABLES:
        assert_same_rows(got.tables[name], want[name], what=name)
    _same_counts(got.report, want_report)


def test_a_local_run_writes_the_tables_the_report_and_the_run_record(
    spark: Any, tmp_path: Path
) -> None:
    """``run_local`` writes each table (partitioned as the Spark runner writes them), the
    report and the ``_runs`` row; a second run with the same txn version moves no table."""
    from pelengine.runs.local import run_local
    from pelengine.storage import sessionless
    from pelengine.storage.run_record import newest_run_sessionless
    from tests.delta_rs import delta_rs_table

    events = _log(31, 600)
    path = tmp_path / "events"
    from pelengine.schemas import EVENTS_SCHEMA

    sessionless.write_arrow(events, str(path), EVENTS_SCHEMA, "overwrite")
    out = tmp_path / "out"
    settings = Settings(txn_app_id="nightly", txn_version=7)
    local = dataclasses.replace(settings, runner="local")
    report = run_local(str(path), str(out), local)
    assert report["runner"] == "local" and report["storage"] == "embedded"
    assert report["spark_jobs"] == 0
    want, _ = _spark_tables(spark, events, settings)
    for name in (*OUTPUT_TABLES, "rejected_events"):
        got = delta_rs_table(out / name).select(want[name].column_names)
        assert_same_rows(got, want[name], what=name)
        assert report["output"]["rows"][name] == want[name].num_rows
    from deltalake import DeltaTable

    assert DeltaTable(str(out / "delivery_counts")).metadata().partition_columns == ["status"]
    assert DeltaTable(str(out / "pel_history")).metadata().partition_columns == ["is_current"]
    newest = newest_run_sessionless(str(out))
    assert newest is not None and newest["run_id"] == report["run_id"]
    assert newest["tables"] == report["tables"]
    again = run_local(str(path), str(out), local)
    assert again["tables"] == report["tables"], "a re-run with the same txn version wrote"


@pytest.mark.parametrize("narrow", [True, False], ids=["narrow-pass", "window-over-rows"])
@pytest.mark.parametrize("times", [True, False], ids=["unit-time", "live-clock"])
def test_execution_units_equal_the_spark_stage(
    spark: Any, monkeypatch: pytest.MonkeyPatch, times: bool, narrow: bool
) -> None:
    """Units (and on 7.2+ their times) of a log that interleaves transactions, scripts and
    their ``lua`` rows of several clients at random, with unmatched EXEC/DISCARD, a
    MULTI inside a MULTI, ``lua`` rows first and clients without a name; the rows inside
    transactions found by the narrow pass, and (too many for it) by the window over the
    rows."""
    from pelengine.local.prepare import unit_columns
    from pelengine.local.validate import command_names
    from pelengine.pipeline import units
    from pelengine.pipeline.units import mark_units

    if not narrow:
        monkeypatch.setattr(units, "NARROW_UNIT_ROWS", 0)

    rng = random.Random(5)
    names = ["MULTI", "EXEC", "DISCARD", "EVAL", "FCALL", "XADD", "PING", "XACK"]
    rows, ts = [], 1_000
    for seq in range(1, 801):
        ts += rng.choice([0, 0, 1, 7])
        client = rng.choice([None, "a", "b", "c", "lua", "lua"])
        rows.append(
            {
                "seq": seq,
                "ts_ms": ts,
                "argv": [rng.choice(names), "k"],
                "db": 0,
                "client": client,
                "source": "t",
            }
        )
    events = pa.Table.from_pylist(rows, schema=EVENTS_ARROW_SCHEMA)
    want = (
        mark_units(spark.createDataFrame(events), times=times, present=(True, True))
        .select("seq", "exec_unit", "ts_ms")
        .toArrow()
        .sort_by("seq")
    )
    unit, timed = unit_columns(events, command_names(events.column("argv")), times=times)
    assert unit.to_pylist() == want.column("exec_unit").to_pylist()
    assert pa.chunked_array([timed]).to_pylist() == want.column("ts_ms").to_pylist()
    assert sum(u is not None for u in unit.to_pylist()) > 100
