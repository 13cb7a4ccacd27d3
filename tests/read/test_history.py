"""The PEL at a past moment from pel_history equals the pel table of a replay cut there.

One generated log (``ts_ms`` made non-decreasing) is reconstructed once and
written; ``pel_as_of`` over the written ``pel_history`` is then compared with
the ``pel`` table of ``reconstruct`` cut at the same seq or time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from pelengine import cli, storage
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.read.pel_as_of import pel_as_of
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, TABLE_COLUMNS
from pelengine.settings import Settings
from pelengine.synth import generate_events

pytestmark = pytest.mark.spark

PEL = TABLE_COLUMNS["pel"]


def _rows() -> list[dict[str, Any]]:
    rows = sorted(generate_events(1500, 5, seed=21), key=lambda r: r["seq"] or 0)
    top = 0
    for r in rows:  # time never goes backwards (the generator moves it back now and then)
        if r["ts_ms"] is not None:
            top = max(top, r["ts_ms"])
            r["ts_ms"] = top
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return _rows()


@pytest.fixture(scope="module")
def events(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame(rows, EVENTS_SCHEMA)


@pytest.fixture(scope="module")
def out(spark: SparkSession, events: DataFrame, tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("history")
    events_path = str(root / "events")
    storage.write_table(events, events_path)
    out = str(root / "out")
    run_reconstruct(spark, events_path, out, Settings())
    return out


@pytest.fixture(scope="module")
def history(spark: SparkSession, out: str) -> DataFrame:
    return storage.read_table(spark, os.path.join(out, "pel_history"))


@pytest.fixture(scope="module")
def run_as_of(spark: SparkSession, out: str) -> tuple[int, int]:
    """The run's own moment, from its ``_runs`` row (the history carries none)."""
    run = storage.newest_run(spark, out)
    assert run is not None and run["as_of_seq"] is not None and run["as_of_ms"] is not None
    return run["as_of_seq"], run["as_of_ms"]


def _same(got: DataFrame, expected: DataFrame, columns: list[str]) -> None:
    assert_df_equality(
        got.select(*columns),
        expected.select(*columns),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def _seq_at(rows: list[dict[str, Any]], fraction: float) -> int:
    seqs = sorted(r["seq"] for r in rows if r["seq"] is not None)
    return seqs[int(len(seqs) * fraction)]


def _handover(history: DataFrame, fraction: float, unit: str) -> int:
    """A seq (or ms) where a version ends and another starts: a cut that tells ``<`` from
    ``<=`` at both ends."""
    rows = history.select(f"valid_from_{unit}", f"valid_to_{unit}").collect()
    ends = {r[1] for r in rows if r[1] is not None}
    both = sorted(ends & {r[0] for r in rows})
    return both[int(len(both) * fraction)]


# the columns a cut by one coordinate alone cannot give: by seq, the time idle is measured
# against; by time, the seq
UNKNOWN_ALONE = {"seq": ("idle_ms", "as_of_ms"), "ms": ("as_of_seq",)}


@pytest.mark.parametrize(
    ("unit", "fraction"), [("seq", 0.25), ("seq", 0.85), ("ms", 0.35), ("ms", 0.75)]
)
def test_pel_as_of_equals_the_replay_up_to_that_cut(
    spark: SparkSession,
    events: DataFrame,
    history: DataFrame,
    run_as_of: tuple[int, int],
    unit: str,
    fraction: float,
) -> None:
    at = {f"as_of_{unit}": _handover(history, fraction, unit)}
    other = "as_of_ms" if unit == "seq" else "as_of_seq"
    cut = reconstruct(spark, events, Settings(**at))
    try:
        expected = cut.tables["pel"]
        assert expected.count() > 0, "the cut leaves the PEL empty: the test is too weak"
        alone = pel_as_of(history, **at, run_as_of=run_as_of)
        _same(alone, expected, [c for c in PEL if c not in UNKNOWN_ALONE[unit]])
        # given the replay's other coordinate too, every column
        other_at = getattr(cut, other)
        assert other_at is not None
        _same(
            pel_as_of(history, **at, **{other: other_at}, run_as_of=run_as_of),
            expected,
            list(PEL),
        )
    finally:
        cut.unpersist()


def test_pel_as_of_the_end_is_the_pel_table(
    spark: SparkSession, out: str, history: DataFrame, run_as_of: tuple[int, int]
):
    pel = storage.read_table(spark, os.path.join(out, "pel"))
    (as_of_seq, as_of_ms), *_ = {(r["as_of_seq"], r["as_of_ms"]) for r in pel.collect()}
    assert (as_of_seq, as_of_ms) == run_as_of  # the _runs row's moment is the snapshot's
    _same(pel_as_of(history, as_of_seq=as_of_seq, run_as_of=run_as_of), pel, list(PEL))
    _same(pel_as_of(history, as_of_ms=as_of_ms, run_as_of=run_as_of), pel, list(PEL))
    with pytest.raises(ValueError, match="as_of_seq, as_of_ms or both"):
        pel_as_of(history, run_as_of=run_as_of)


def test_cli_pel_as_of(
    spark: SparkSession,
    out: str,
    history: DataFrame,
    run_as_of: tuple[int, int],
    rows: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    n = _seq_at(rows, 0.55)
    expected = pel_as_of(history, as_of_seq=n, run_as_of=run_as_of).collect()
    key = max({r["key"] for r in expected}, key=lambda k: sum(r["key"] == k for r in expected))
    mine = sorted(
        (r for r in expected if r["key"] == key), key=lambda r: (r["db"], r["id_ms"], r["id_seq"])
    )
    assert len(mine) > 3
    argv = ["pel-as-of", "--out", out, "--as-of-seq", str(n), "--key", key, "--limit", "3"]
    assert cli.run(argv, spark=spark, progress=lambda _: None) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"PEL as of seq {n} / ")
    assert f"(key {key}): {len(mine)} pending entries" in printed[0]
    body = printed[2:5]
    assert [line.split()[3] for line in body] == [r["id"] for r in mine[:3]]
    assert [line.split()[4] for line in body] == [r["consumer"] for r in mine[:3]]
    assert printed[5].strip() == f"... {len(mine) - 3} more (--limit)"
    # nothing pending before the first delivery
    assert cli.run([*argv[:4], "0"], spark=spark, progress=lambda _: None) == 0
    assert capsys.readouterr().out.strip() == (
        "PEL as of seq 0: 0 pending entries (0 dangling: deleted from the stream while pending)"
    )
    # an output root without pel_history (an older version wrote it) is a usage error
    (tmp_path / "old" / "pel").mkdir(parents=True)
    code = cli.run(
        ["pel-as-of", "--out", str(tmp_path / "old"), "--as-of-ms", "5"],
        spark=spark,
        progress=lambda _: None,
    )
    assert code == 2
    assert "no pel_history table there" in capsys.readouterr().err
