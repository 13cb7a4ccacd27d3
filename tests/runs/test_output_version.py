"""An output root of output contract version 1 is never read as version 2: readers refuse
it with one sentence saying what to run, and one full recomputation rewrites it.

The version-1 root is made the way version 1 left one: the tables of a run, its history
tables stamped with ``as_of_*``, a ``_run_report.json`` and no ``_runs`` table.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pelengine import cli, storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, HISTORY_TABLES
from pelengine.settings import Settings
from pelengine.synth import generate_events

pytestmark = [pytest.mark.spark, pytest.mark.stores]


def _version_one(spark: SparkSession, out: Path) -> None:
    """Turn a version-2 root into what version 1 wrote."""
    report = storage.newest_run(spark, str(out))
    assert report is not None
    shutil.rmtree(out / storage.RUNS_TABLE)
    (out / storage.RUN_REPORT).write_text(report["report"])
    for name in HISTORY_TABLES:
        old = storage.read_table(spark, str(out / name)).withColumns(
            {"as_of_ms": F.lit(report["as_of_ms"]), "as_of_seq": F.lit(report["as_of_seq"])}
        )
        old = old.localCheckpoint()  # read before it is overwritten
        storage.write_table(old, str(out / name), "overwrite", overwrite_schema=True)


def test_a_version_one_root_is_refused_then_rewritten_by_a_full_run(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events, out = str(tmp_path / "events"), tmp_path / "out"
    rows = list(generate_events(300, 3, seed=5))
    storage.write_table(spark.createDataFrame(rows, EVENTS_SCHEMA), events)
    run_reconstruct(spark, events, str(out), Settings())
    _version_one(spark, out)

    capsys.readouterr()
    code = cli.run(
        ["sql", "SELECT count(*) FROM pel", "--out", str(out)], spark=spark, progress=lambda _: None
    )
    assert code == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "written by output contract version 1" in err and "full recomputation" in err, err

    report = run_reconstruct(spark, events, str(out), Settings())
    assert report["output_version"] == 2
    for name in HISTORY_TABLES:
        assert "as_of_ms" not in storage.read_table(spark, str(out / name)).columns, name
    runs = storage.read_table(spark, str(out / storage.RUNS_TABLE)).collect()
    assert [(r["mode"], r["output_version"]) for r in runs] == [("full", 2)]
    assert json.loads(runs[0]["report"])["run_id"] == report["run_id"]
    assert (
        cli.run(
            ["sql", "SELECT count(*) FROM pel", "--out", str(out)],
            spark=spark,
            progress=lambda _: None,
        )
        == 0
    )
