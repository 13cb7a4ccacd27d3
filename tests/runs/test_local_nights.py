"""Nights on the local runner (``reconstruct --runner local --incremental``) equal one full
run of the Spark runner over the same events, alone and alternating with nights of the
Spark runner on the same output root; a re-run moves no version; late and removed rows
replay every family from the full history, a compaction does not.

The logs: the generator's with readers that block (``test_incremental``) and the spliced
logs of ``tests/local/test_runners_equal`` (MULTI/EXEC units, scripts, a RENAME of a
stream with groups, FLUSHDB/FLUSHALL, SELECTs without db), cut into nights at random
points (units and blocked readers left open across a night), on a 7.0 profile and a
7.2+ one (whose units carry their time across nights).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures
from pyspark.sql import SparkSession

from pelengine.pipeline.reconstruct import reconstruct
from pelengine.runs import local
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES, STATE_TABLE
from pelengine.settings import Settings
from pelengine.storage import read_table, sessionless
from pelengine.synth import generate_events
from tests.delta_rs import delta_rs_table
from tests.frames import assert_same_rows
from tests.local.test_runners_equal import EVENTS_ARROW, _log
from tests.runs.test_incremental import _split, _with_blocking

pytestmark = pytest.mark.spark

TABLES = (*OUTPUT_TABLES, "rejected_events", STATE_TABLE)
#: more seeds: PELENGINE_INCREMENTAL_SEEDS=23,5,... (as tests/runs/test_incremental.py)
SEEDS = [int(s) for s in os.environ.get("PELENGINE_INCREMENTAL_SEEDS", "23").split(",")]
#: the mixed nights' cases; PELENGINE_TEST_HEAVY=1 adds more
#: (4 nights: local, spark, local, spark: each runner continues the other's state)
MIXED = [(42, "7.2", "local")]
if os.environ.get("PELENGINE_TEST_HEAVY") == "1":
    MIXED += [
        (41, "7.0", "local"),
        (43, "7.2", "spark"),
        (44, "7.0", "spark"),
        (45, "7.4", "local"),
    ]


def _append(events: Path, rows: list[dict[str, Any]], first: bool) -> None:
    sessionless.write_arrow(
        pa.Table.from_pylist(rows, schema=EVENTS_ARROW),
        str(events),
        EVENTS_SCHEMA,
        "overwrite" if first else "append",
    )


def _night(
    spark: SparkSession | None, events: Path, out: Path, runner: str, **options: Any
) -> dict[str, Any]:
    settings = Settings(incremental=True, runner=runner, deletion_vectors=False, **options)
    return run_reconstruct(spark if runner == "spark" else None, str(events), str(out), settings)


def _versions(out: Path) -> dict[str, int | None]:
    return {name: sessionless.table_version(str(out / name)) for name in TABLES}


def _assert_equals_spark_full_run(
    spark: SparkSession, events: Path, out: Path, settings: Settings
) -> None:
    """Every table under ``out`` holds the rows one full run of the Spark runner's pipeline
    gives over ``events`` (collected, not written)."""
    result = reconstruct(spark, read_table(spark, str(events)), settings)
    tables = {**result.tables, "rejected_events": result.rejected}
    try:
        for name in (*OUTPUT_TABLES, "rejected_events"):
            assert_same_rows(tables[name].toArrow(), delta_rs_table(out / name), what=name)
    finally:
        result.unpersist()


@pytest.fixture
def small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """``delivery_counts`` files of a few rows: the nights' rewrites of the files holding
    the rows they replace meet many files, of every status."""
    monkeypatch.setattr(local, "DELIVERY_COUNTS_FILE_ROWS", 16)


@pytest.mark.parametrize("seed", SEEDS)
def test_local_nights_equal_one_full_run(
    spark: SparkSession, tmp_path: Path, seed: int, small_files: None
) -> None:
    rows = _with_blocking(list(generate_events(1500, 6, seed=seed)), seed)
    cuts = _split(rows, seed)
    events, out = tmp_path / "events", tmp_path / "out"
    modes, replayed, rewrote = [], [], []
    start = 0
    for cut in cuts:
        _append(events, rows[start:cut], start == 0)
        start = cut
        report = _night(None, events, out, "local")
        assert (report["runner"], report["spark_jobs"]) == ("local", 0)
        night = report["incremental"]
        modes.append(night["mode"])
        rewrote.append(report["output"].get("merge_reads", {}).get("delivery_counts"))
        replayed.append((night["families_replayed"], night["families_total"]))
    print(f"seed {seed}: nights at {cuts}, modes {modes}, families replayed/total {replayed}")
    print(f"delivery_counts files rewritten: {rewrote}")
    assert modes[0] == "full" and all(m == "incremental" for m in modes[1:]), modes
    if len(cuts) > 1:
        assert any(n < total for n, total in replayed[1:]), "every family replayed every night"

    before = _versions(out)
    again = _night(None, events, out, "local")
    assert again["incremental"]["mode"] == "up-to-date"
    assert _versions(out) == before, "re-running a night moved a Delta version"
    _assert_equals_spark_full_run(spark, events, out, Settings())


@pytest.mark.parametrize(("seed", "profile", "first"), MIXED)
def test_nights_of_both_runners_continue_each_other(
    spark: SparkSession, tmp_path: Path, seed: int, profile: str, first: str, small_files: None
) -> None:
    log = _log(seed, 600).to_pylist()
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(50, len(log) - 50), 3)) + [len(log)]
    runners = ["local", "spark"] if first == "local" else ["spark", "local"]
    events, out = tmp_path / "events", tmp_path / "out"
    modes = []
    start = 0
    for i, cut in enumerate(cuts):
        _append(events, log[start:cut], start == 0)
        start = cut
        report = _night(spark, events, out, runners[i % 2], profile=profile)
        modes.append((runners[i % 2], report["incremental"]["mode"]))
    print(f"seed {seed} ({profile}): nights at {cuts}: {modes}")
    assert [m for _, m in modes] == ["full"] + ["incremental"] * (len(cuts) - 1), modes
    _assert_equals_spark_full_run(spark, events, out, Settings(profile=profile))


def test_late_and_removed_rows_replay_the_full_history_a_compaction_does_not(
    tmp_path: Path,
) -> None:
    rows = list(generate_events(900, 6, seed=9))
    adds = [r["seq"] for r in rows if r["seq"] is not None and r["argv"] and r["argv"][0] == "XADD"]
    hole = adds[len(adds) // 2]  # one XADD kept out of the first night: late when it comes
    events, out, full = tmp_path / "events", tmp_path / "out", tmp_path / "full"

    def night_then_compare(expected: str) -> dict[str, Any]:
        report = _night(None, events, out, "local")
        assert report["incremental"]["mode"] == expected, report["incremental"]
        run_reconstruct(None, str(events), str(full), Settings(runner="local"))
        for name in (*OUTPUT_TABLES, "rejected_events"):
            assert_same_rows(delta_rs_table(full / name), delta_rs_table(out / name), what=name)
        return report

    _append(events, [r for r in rows[:600] if r["seq"] != hole], True)
    night_then_compare("full")
    _append(events, [r for r in rows if r["seq"] == hole], False)
    late = night_then_compare("full (history changed)")
    assert late["incremental"]["read"]["rows_late"] == 1
    assert late["incremental"]["families_with_changed_history"], "the late row's family"

    # a compaction rewrites files without changing a row: still a night
    DeltaTable(str(events)).optimize.compact()
    _append(events, rows[600:750], False)
    compacted = night_then_compare("incremental")
    assert compacted["incremental"]["read"]["rows_new"] == 150

    # rows deleted: history changed
    DeltaTable(str(events)).delete(f"seq = {adds[3]}")
    _append(events, rows[750:], False)
    removed = night_then_compare("full (history changed)")
    assert removed["incremental"]["read"]["rows_gone"] == 1


def test_the_local_runner_refuses_to_continue_what_it_cannot_write(tmp_path: Path) -> None:
    from pelengine.storage import StoreCannotWriteError

    events, out = tmp_path / "events", tmp_path / "out"
    _append(events, list(generate_events(200, 3, seed=2)), True)
    _night(None, events, out, "local")
    # a table with deletion vectors (as delta-spark writes a night's merges by default)
    DeltaTable(str(out / "pel_history")).alter.add_feature(
        [TableFeatures.DeletionVectors], allow_protocol_versions_increase=True
    )
    with pytest.raises(StoreCannotWriteError, match="deletion vectors"):
        _night(None, events, out, "local")


def test_a_killed_local_night_leaves_the_last_run_readable_and_a_rerun_completes_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A local night killed (SIGKILL, a CLI child) once it has merged rows into
    ``delivery_counts`` and before its ``_runs`` row: the readers (pinned to the run
    record) see the previous night alone; the next night puts the tables the dead one
    moved back to the recorded versions, finishes, and leaves the tables of an
    uninterrupted night."""
    import shutil
    import signal
    import sys

    from pelengine import storage
    from tests.ingest.test_sessionless import _no_jvm_env
    from tests.processes import killed_at

    rows = _log(47, 20_000).to_pylist()
    cut = len(rows) * 2 // 3
    events, out, reference = tmp_path / "events", tmp_path / "out", tmp_path / "reference"
    _append(events, rows[:cut], True)
    first = _night(None, events, out, "local")
    _append(events, rows[cut:], False)
    shutil.copytree(out, reference)
    uninterrupted = _night(None, events, reference, "local")
    assert uninterrupted["incremental"]["mode"] == "incremental"

    env = _no_jvm_env()
    env.pop("PELENGINE_STORE")
    argv = [str(Path(sys.executable).with_name("pelengine")), "reconstruct", "--runner"]
    argv += ["local", "--incremental", "--events", str(events), "--out", str(out)]
    code, seen = killed_at(argv, "wrote delivery_counts", env)
    assert code == -signal.SIGKILL, f"the night ended before the kill ({code}): {seen[-5:]}"

    recorded = storage.run_versions(str(out), spark)
    assert recorded == first["tables"], "the killed night wrote no _runs row"
    moved = [t for t in TABLES if (sessionless.table_version(str(out / t)) or 0) > recorded[t]]
    assert "delivery_counts" in moved, moved
    newest = storage.newest_run(spark, out)
    assert newest is not None and newest["as_of_seq"] == first["as_of_seq"]
    for name in ("pel", "groups"):
        df = storage.read_output_table(spark, str(out), name, newest["tables"])
        seen_as_of = {r[0] for r in df.select("as_of_seq").distinct().collect()}
        assert seen_as_of <= {first["as_of_seq"]}, f"{name}: readers mix runs: {seen_as_of}"
    print(f"killed after {moved} were committed; readers see night 1 alone")

    rerun = _night(None, events, out, "local")
    assert rerun["incremental"]["mode"] == "incremental"
    assert rerun["as_of_seq"] == uninterrupted["as_of_seq"]
    for name in (*OUTPUT_TABLES, "rejected_events"):
        assert_same_rows(delta_rs_table(out / name), delta_rs_table(reference / name), what=name)
    assert storage.run_versions(str(out), spark) == rerun["tables"]


def test_local_nights_with_the_python_engine_equal_a_full_run(tmp_path: Path) -> None:
    """The Python engine (the reference) continues saved states on the local runner too."""
    rows = _with_blocking(list(generate_events(700, 4, seed=13)), 13)
    events, out, full = tmp_path / "events", tmp_path / "out", tmp_path / "full"
    modes = []
    for first, part in ((True, rows[:300]), (False, rows[300:500]), (False, rows[500:])):
        _append(events, part, first)
        report = _night(None, events, out, "local", engine="python")
        assert report["engine"] == "python"
        modes.append(report["incremental"]["mode"])
    assert modes == ["full", "incremental", "incremental"], modes
    run_reconstruct(None, str(events), str(full), Settings(runner="local"))
    for name in (*OUTPUT_TABLES, "rejected_events"):
        assert_same_rows(delta_rs_table(full / name), delta_rs_table(out / name), what=name)
