"""Catalog tables (tables by name) in the storage seam and the CLI.

Native Delta Lake cannot run here (no jars, no Maven): what is tested is the naming, the
decision (paths vs names, native required), the message, the calls made for native Delta
(a recording fake), and the saveAsTable path itself through Spark's session catalog with
Parquet standing in for Delta. Not tested here: a real Delta saveAsTable, DESCRIBE HISTORY
and VERSION AS OF on a catalog table, txnAppId/txnVersion through saveAsTable.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pelengine import cli, storage
from pelengine.config import ConfigError, load_config
from pelengine.runs.output import write_outputs

# ---- names -------------------------------------------------------------------------------


def test_three_part_names_are_tables_everything_else_paths() -> None:
    assert storage.table_ref("main.redis.events") == storage.Table("`main`.`redis`.`events`")
    assert storage.table_ref("`my cat`.s.`e``v`") == storage.Table("`my cat`.`s`.`e``v`")
    for path in (
        "events",
        "redis.events",
        "./a.b.c",
        "/data/a.b.c",
        "s3://bucket/a.b.c",
        "a.b.c.d",
        "C:\\x.y.z",
    ):
        assert storage.table_ref(path) == path


def test_output_by_path_and_by_name() -> None:
    by_path = storage.Output(root="/data/out")
    assert not by_path.by_name
    assert by_path.table("pel") == os.path.join("/data/out", "pel")
    assert by_path.describe() == {"path": "/data/out"}
    managed = storage.Output(catalog="main", schema="redis_state")
    assert managed.table("pel") == storage.Table("`main`.`redis_state`.`pel`", None)
    assert managed.table("_state").name == "`main`.`redis_state`.`_state`"
    assert str(managed) == "main.redis_state"
    external = storage.Output(root="s3://b/out", schema="redis_state")
    assert external.table("pel") == storage.Table("`redis_state`.`pel`", "s3://b/out/pel")
    assert external.describe() == {"path": "s3://b/out", "catalog": None, "schema": "redis_state"}
    with pytest.raises(ValueError, match="a catalog needs a schema"):
        storage.Output(root="/x", catalog="main")
    with pytest.raises(ValueError, match="no output"):
        storage.Output()


def test_delta_package_is_the_installed_delta_sparks_coordinate() -> None:
    """The --packages coordinate in the message (and README) is the one delta-spark's own
    helper derives for the installed pyspark and delta-spark."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = configure_spark_with_delta_pip(SparkSession.Builder())
    assert builder._options["spark.jars.packages"] == storage.DELTA_PACKAGE


# ---- CLI and configuration -----------------------------------------------------------------


def _conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_output_options_over_conf(tmp_path: Path) -> None:
    parse = cli.build_parser().parse_args
    conf = load_config([_conf(tmp_path, "output:\n  catalog: main\n  schema: redis_state\n")])
    assert (conf.output.catalog, conf.output.schema) == ("main", "redis_state")
    args = parse(["reconstruct", "--events", "e", "--schema", "other"])
    assert cli.reconstruct_output(args, conf) == storage.Output(None, "main", "other")
    # empty values (a Databricks job parameter left empty) mean "not given here"
    args = parse(["reconstruct", "--events", "e", "--out", "o", "--catalog", "", "--schema", ""])
    assert cli.reconstruct_output(args, load_config()) == storage.Output(root="o")
    assert cli.reconstruct_output(args, conf) == storage.Output("o", "main", "redis_state")
    with pytest.raises(ConfigError, match="'output.catalog' needs 'output.schema'"):
        load_config([_conf(tmp_path, "output:\n  catalog: main\n")])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--catalog", "main"], "a catalog needs a schema"),
        ([], "no output: give --out PATH, or --schema S"),
    ],
)
def test_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    sentinel: Any = object()  # a usage error stops before any session use
    code = cli.run(["reconstruct", "--events", str(tmp_path), *argv], spark=sentinel)
    assert code == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.parametrize(
    "argv",
    [
        ["--events", "{tmp}", "--catalog", "main", "--schema", "redis_state"],
        ["--events", "main.redis.events", "--out", "{tmp}/out"],
    ],
)
def test_catalog_tables_without_native_delta_say_what_to_do(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert storage.storage_mode(spark) == storage.EMBEDDED
    args = ["reconstruct", *(a.format(tmp=tmp_path) for a in argv)]
    assert cli.run(args, spark=spark, progress=lambda _: None) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "need native Delta Lake" in err
    assert storage.DELTA_PACKAGE in err and storage.DELTA_CATALOG in err
    assert "--out PATH" in err and "CREATE TABLE" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists(), "refused before any work"


# ---- the calls made for native Delta (recording fakes) ----------------------------------------


class _Recorder:
    def __init__(self, calls: list[tuple[Any, ...]], *prefix: Any) -> None:
        self.calls = calls
        self.prefix = prefix

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> _Recorder:
            self.calls.append((*self.prefix, name, *args))
            return self

        return call


class _NativeSpark:
    def __init__(self, tables: dict[str, int]) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.conf = _Conf({storage.MODE_CONF: storage.NATIVE})
        self.tables = tables
        self.read = _Recorder(self.calls, "read")
        outer = self

        class Catalog:
            def tableExists(self, name: str) -> bool:  # noqa: N802 (Spark's name)
                outer.calls.append(("tableExists", name))
                return name in outer.tables

        self.catalog = Catalog()

    def sql(self, query: str) -> Any:
        self.calls.append(("sql", query))
        name = query.split()[2]
        version = self.tables[name]

        class Result:
            def collect(self) -> list[dict[str, int]]:
                return [{"version": version}]

        return Result()


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _DataFrame:
    def __init__(self, spark: _NativeSpark) -> None:
        self.sparkSession = spark
        self.write = _Recorder(spark.calls, "write")


def test_native_writes_by_name_with_saveastable() -> None:
    spark = _NativeSpark({"`main`.`s`.`pel`": 4})
    df: Any = _DataFrame(spark)
    managed = storage.Output(catalog="main", schema="s").table("pel")
    storage.write_table(df, managed, "overwrite", txn_app_id="app", txn_version=7)
    assert spark.calls == [
        ("write", "format", "delta"),
        ("write", "mode", "overwrite"),
        ("write", "option", "txnAppId", "app"),
        ("write", "option", "txnVersion", "7"),
        ("write", "saveAsTable", "`main`.`s`.`pel`"),
    ]
    spark.calls.clear()
    external = storage.Output(root="/lake/out", catalog="main", schema="s").table("pel")
    storage.write_table(df, external, "append", overwrite_schema=True)
    assert spark.calls == [
        ("write", "format", "delta"),
        ("write", "mode", "append"),
        ("write", "option", "overwriteSchema", "true"),
        ("write", "option", "path", "/lake/out/pel"),
        ("write", "saveAsTable", "`main`.`s`.`pel`"),
    ]


def test_native_reads_and_versions_by_name() -> None:
    spark: Any = _NativeSpark({"`main`.`s`.`pel`": 4})
    table = storage.Table("`main`.`s`.`pel`")
    storage.read_table(spark, table)
    assert spark.calls[-1] == ("read", "table", "`main`.`s`.`pel`")
    assert storage.table_version(spark, table) == 4
    assert spark.calls[-2:] == [
        ("tableExists", "`main`.`s`.`pel`"),
        ("sql", "DESCRIBE HISTORY `main`.`s`.`pel` LIMIT 1"),
    ]
    assert storage.table_version(spark, storage.Table("`main`.`s`.`none`")) is None
    spark.calls.clear()
    spark.sql = lambda q: spark.calls.append(("sql", q))
    storage.read_table(spark, table, version=3)
    assert spark.calls == [("sql", "SELECT * FROM `main`.`s`.`pel` VERSION AS OF 3")]


# ---- saveAsTable through Spark's session catalog (Parquet standing in for Delta) --------------


@pytest.fixture
def parquet_as_native(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This session's catalog tables written as Parquet under the "native" decision (the
    embedded source stays registered for paths); restored afterwards."""
    monkeypatch.setattr(storage, "TABLE_FORMAT", "parquet")
    spark.conf.set(storage.MODE_CONF, storage.NATIVE)
    try:
        yield
    finally:
        spark.conf.set(storage.MODE_CONF, storage.EMBEDDED)


@pytest.mark.spark
def test_write_outputs_by_name_in_the_session_catalog(
    spark: Any, tmp_path: Path, parquet_as_native: None
) -> None:
    schema = "pelengine_catalog_test"
    spark.sql(f"CREATE SCHEMA {schema} LOCATION '{tmp_path / 'warehouse'}'")
    try:
        pel = spark.createDataFrame(
            [(0, "k", "g", "1-0")], "db int, key string, group string, id string"
        )
        streams = spark.createDataFrame([(0, "k", 1)], "db int, key string, length long")
        managed = storage.Output(catalog="spark_catalog", schema=schema)
        rows = write_outputs(
            spark, [("pel", pel), ("streams", streams)], managed, txn_app_id=None, txn_version=None
        )
        assert rows == {"pel": 1, "streams": 1}
        # ad-hoc SQL finds them by name; managed: stored under the schema's location
        assert spark.sql(f"SELECT key, id FROM {schema}.pel").collect()[0]["id"] == "1-0"
        assert (tmp_path / "warehouse" / "pel").is_dir()
        # a second night overwrites by name
        write_outputs(spark, [("pel", pel.union(pel))], managed, txn_app_id=None, txn_version=None)
        assert spark.table(f"spark_catalog.{schema}.pel").count() == 2
        # with an output root too: external tables stored at <root>/<table>
        external = storage.Output(root=str(tmp_path / "ext"), schema=schema)
        write_outputs(spark, [("groups", streams)], external, txn_app_id=None, txn_version=None)
        assert storage.table_row_count(spark, external.table("groups")) == 1
        assert any(f.endswith(".parquet") for f in os.listdir(tmp_path / "ext" / "groups"))
        location = [
            r["data_type"]
            for r in spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.groups").collect()
            if r["col_name"] == "Location"
        ]
        assert location and location[0].rstrip("/").endswith("ext/groups")
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# ---- whole runs by name: the _runs record (Parquet standing in for Delta) --------------------


@pytest.fixture
def catalog_schema(spark: Any, tmp_path: Path, parquet_as_native: None) -> Iterator[str]:
    schema = "pelengine_runs_test"
    spark.sql(f"CREATE SCHEMA {schema} LOCATION '{tmp_path / 'warehouse'}'")
    try:
        yield schema
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.spark
def test_a_run_by_name_ends_by_recording_its_versions_in_runs(
    spark: Any, catalog_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finish_report's last write appends the run (each table's version) to ``_runs``;
    readers by name take the newest row's versions. (Versions come from DESCRIBE HISTORY,
    which Parquet has not: they are given here.)"""
    from pelengine.runs.output import finish_report
    from pelengine.settings import Settings

    output = storage.Output(catalog="spark_catalog", schema=catalog_schema)
    assert storage.run_versions(output, spark) == {}, "no run recorded yet"
    for night, version in enumerate((3, 7), start=1):
        monkeypatch.setattr(
            storage,
            "table_version",
            lambda _spark, ref, v=version: v if ref.name.endswith("`pel`") else v + 1,
        )
        report = finish_report(
            {"as_of_seq": 100 * night, "as_of_ms": 5}, spark, output, Settings(), 0.0
        )
        assert report["tables"]["pel"] == version
    rows = spark.sql(
        f"SELECT as_of_seq, tables['pel'] AS pel, tables['groups'] AS groups, report "
        f"FROM spark_catalog.{catalog_schema}._runs ORDER BY finished_at"
    ).collect()
    assert [(r["as_of_seq"], r["pel"], r["groups"]) for r in rows] == [(100, 3, 4), (200, 7, 8)]
    assert '"as_of_seq": 200' in rows[-1]["report"]
    newest = storage.run_versions(output, spark)
    assert (newest["pel"], newest["groups"], newest["rejected_events"]) == (7, 8, 8)


@pytest.mark.spark
def test_sql_by_name_reads_every_table_at_the_recorded_run(
    spark: Any,
    catalog_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``pelengine sql --schema S`` registers each table at the version the newest ``_runs``
    row names (the VERSION AS OF query itself: test_native_reads_and_versions_by_name)."""
    output = storage.Output(catalog="spark_catalog", schema=catalog_schema)
    pel = spark.createDataFrame(
        [(0, "k", "g", "1-0")], "db int, key string, group string, id string"
    )
    groups = spark.createDataFrame([(0, "k", "g")], "db int, key string, group string")
    write_outputs(
        spark, [("pel", pel), ("groups", groups)], output, txn_app_id=None, txn_version=None
    )
    for tables in ({"pel": 1, "groups": 1}, {"pel": 4, "groups": 2}):
        storage.record_run(spark, output, {"tables": tables})
    existing = {output.table(n).name for n in ("pel", "groups")}
    read_at: dict[str, int | None] = {}
    real_read = storage.read_table

    def read_table(spark_: Any, ref: Any, version: int | None = None) -> Any:
        if ref.name in existing:
            read_at[ref.name.split(".")[-1].strip("`")] = version
            return real_read(spark_, ref)  # Parquet: one version
        return real_read(spark_, ref, version)

    monkeypatch.setattr(storage, "table_exists", lambda _s, ref: ref.name in existing)
    monkeypatch.setattr(storage, "read_table", read_table)
    argv = ["sql", "SELECT count(*) AS n FROM pel JOIN groups USING (db, key, `group`)"]
    code = cli.run(
        [*argv, "--catalog", "spark_catalog", "--schema", catalog_schema, "--json"],
        spark=spark,
        progress=lambda _: None,
    )
    assert code == cli.EXIT_OK, capsys.readouterr().err
    assert '"n": 1' in capsys.readouterr().out
    assert read_at == {"pel": 4, "groups": 2}


@pytest.mark.spark
def test_sql_by_name_without_native_delta_says_what_to_do(
    spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert storage.storage_mode(spark) == storage.EMBEDDED
    code = cli.run(["sql", "SELECT 1", "--schema", "redis_state"], spark=spark)
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "need native Delta Lake" in err and "Traceback" not in err


def test_sql_needs_an_output(capsys: pytest.CaptureFixture[str]) -> None:
    sentinel: Any = object()  # a usage error stops before any session use
    assert cli.run(["sql", "SELECT 1"], spark=sentinel) == cli.EXIT_USAGE
    assert "no output: give --out PATH, or --schema S" in capsys.readouterr().err
