"""The storage seam: format("delta") through the embedded delta-rs source (no Delta jars here)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pelengine import storage
from pelengine.storage.embedded import DeltaStorageError, schema_differences
from tests.storage.delta_fixtures import write_dv_column_mapping_table

# the embedded delta-rs store itself: its own pass of `make test` (conftest.py)
pytestmark = [pytest.mark.spark, pytest.mark.embedded]

UTC = dt.UTC
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("n", IntegerType()),
        StructField("s", StringType()),
        StructField("ok", BooleanType()),
        StructField("x", DoubleType()),
        StructField("ts", TimestampType()),
        StructField("ids", ArrayType(LongType())),
        StructField("tags", ArrayType(StringType())),
    ]
)
ROWS = [
    (1, 10, "a", True, 1.5, dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC), [1, 2], ["x", None]),
    (2, None, None, None, None, None, None, None),
    (3, -3, "", False, -0.25, dt.datetime(1999, 12, 31, 23, 59, 59, 123456, tzinfo=UTC), [], []),
    (4, 4, "dé", True, 4.0, dt.datetime(2030, 6, 1, tzinfo=UTC), [None], ["z"]),
    (5, 5, "e", False, 5.0, dt.datetime(2024, 2, 29, tzinfo=UTC), [5], ["a", "b"]),
    (6, 6, "f", True, 6.0, dt.datetime(2024, 3, 1, tzinfo=UTC), [6, 6], None),
]


def _df(spark: SparkSession, rows: list[tuple[Any, ...]] = ROWS, parts: int = 3) -> DataFrame:
    return spark.createDataFrame(rows, SCHEMA).repartition(parts)


def _versions(path: Path) -> list[int]:
    return sorted(h["version"] for h in DeltaTable(str(path)).history())


def _parquet_files(path: Path) -> set[str]:
    return {f for f in os.listdir(path) if f.endswith(".parquet")}


def _sorted_pydict(table: pa.Table, key: str = "id") -> dict[str, list[Any]]:
    return table.sort_by(key).to_pydict()


# --------------------------------------------------------------------------- install / guard


def test_install_is_embedded_and_idempotent(spark: SparkSession) -> None:
    assert storage.storage_mode(spark) == "embedded"
    assert storage.install_storage(spark) == "embedded"
    assert storage.probe_jvm_delta(spark) is False  # no Delta jars in this environment


class _FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _FakeDeltaSparkSpark:
    """Just enough of a session with delta-spark for the DESCRIBE HISTORY path."""

    def __init__(self, versions: dict[str, int]) -> None:
        self.conf = _FakeConf({storage.MODE_CONF: "delta-spark"})
        self.versions = versions
        self.queries: list[str] = []

    def sql(self, query: str) -> Any:
        from pyspark.errors import AnalysisException

        self.queries.append(query)
        path = query.split("delta.`", 1)[1].rsplit("`", 1)[0].replace("``", "`")
        if path not in self.versions:
            raise AnalysisException(f"`{path}` is not a Delta table.")
        version = self.versions[path]

        class Result:
            def collect(self) -> list[dict[str, int]]:
                return [{"version": version}]

        return Result()


def test_native_table_version_of_a_remote_path_uses_describe_history() -> None:
    """An object store path (no S3 here: a fake session) is asked of delta-spark; a local
    path is answered from its _delta_log listing (test_a_local_tables_version_is_its_log)."""
    fake = _FakeDeltaSparkSpark({"s3://b/odd`name": 7})
    spark: Any = fake
    assert storage.install_storage(spark) == "delta-spark"  # already chosen: idempotent
    assert storage.table_version(spark, "s3://b/odd`name") == 7
    assert fake.queries == ["DESCRIBE HISTORY delta.`s3://b/odd``name` LIMIT 1"]
    assert storage.table_version(spark, "s3://b/none") is None
    assert not storage.table_exists(spark, "s3://b/none")


def test_a_local_tables_version_is_its_log(tmp_path: Path) -> None:
    """The newest ``<version>.json`` of ``_delta_log`` (checkpoints and checksums aside);
    no log, no table. Asks no session."""
    log = tmp_path / "t" / "_delta_log"
    assert storage.table_version(None, str(tmp_path / "t")) is None  # type: ignore[arg-type]
    log.mkdir(parents=True)
    assert storage.table_version(None, str(tmp_path / "t")) is None  # type: ignore[arg-type]
    for name in (
        "00000000000000000000.json",
        "00000000000000000010.checkpoint.parquet",
        "00000000000000000011.json",
        "00000000000000000012.crc",
        "_last_checkpoint",
    ):
        (log / name).write_text("")
    assert storage.table_version(None, str(tmp_path / "t")) == 11  # type: ignore[arg-type]
    assert storage.table_version(None, f"file://{tmp_path}/t") == 11  # type: ignore[arg-type]


# --------------------------------------------------------------------------- round trips


def test_spark_to_delta_round_trip_one_commit(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    df = _df(spark)
    storage.write_table(df, str(path))

    assert _versions(path) == [0]
    assert len(DeltaTable(str(path)).file_uris()) == 3  # one file per task, one commit
    expected = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in ROWS])
    got = DeltaTable(str(path)).to_pyarrow_table()
    assert got.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert _sorted_pydict(got) == _sorted_pydict(expected)

    back = storage.read_table(spark, str(path))
    assert back.rdd.getNumPartitions() == 3  # one input partition per data file
    assert_df_equality(back, df, ignore_row_order=True)
    assert storage.table_version(spark, str(path)) == 0
    assert storage.table_exists(spark, str(path))


def test_files_carry_statistics(spark: SparkSession, tmp_path: Path) -> None:
    """Each file the embedded writer adds has Delta statistics (numRecords, min/max of its
    integer and string columns, null counts; expected values written by hand), which
    readers skip files by (delta-rs 1.6's own merge does not: it scans every file)."""
    path = str(tmp_path / "t")
    schema = "id long, name string, tag string"
    first = [(1, "a", None), (5, "c", "x")]
    second = [(10, "b", "y"), (12, "d", "y"), (11, "z" * 70, None)]
    storage.write_table(spark.createDataFrame(first, schema).coalesce(1), path, "overwrite")
    storage.write_table(spark.createDataFrame(second, schema).coalesce(1), path, "append")
    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    got = sorted(
        (
            a["num_records"],
            a["min.id"],
            a["max.id"],
            a.get("min.name"),
            a.get("max.name"),
            a["null_count.tag"],
        )
        for a in adds
    )
    # the 70-character name keeps the second file's name statistics out (too long)
    assert got == [(2, 1, 5, "a", "c", 1), (3, 10, 12, None, None, 1)]
    # filters by a column with statistics still find every row
    assert storage.read_table(spark, path).filter("id = 4").count() == 0
    assert DeltaTable(path).to_pyarrow_table(filters=[("id", "=", 11)]).num_rows == 1


def test_deltalake_written_table_reads_in_spark(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "rs")
    data = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "k": ["a", "a", "b", None],
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=UTC), None, None, dt.datetime(2024, 1, 2)],
                pa.timestamp("us", tz="UTC"),
            ),
            "vals": pa.array([[1.0], None, [], [None, 2.5]], pa.list_(pa.float64())),
        }
    )
    write_deltalake(path, data, partition_by=["k"])
    write_deltalake(path, data.slice(0, 1), mode="append")

    df = storage.read_table(spark, path)
    assert df.rdd.getNumPartitions() == len(DeltaTable(path).file_uris()) == 4
    expected = spark.createDataFrame(
        [*data.to_pylist(), data.to_pylist()[0]],
        "id long, k string, ts timestamp, vals array<double>",
    )
    assert_df_equality(df, expected.select(*df.columns), ignore_row_order=True)


def test_append_and_overwrite(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    storage.write_table(_df(spark, ROWS[:2], 1), path)
    storage.write_table(_df(spark, ROWS[2:4], 2), path, "append")
    assert storage.read_table(spark, path).count() == 4
    old = spark.read.format("delta").option("versionAsOf", 0).load(path)
    assert sorted(r.id for r in old.collect()) == [1, 2]
    storage.write_table(_df(spark, ROWS[4:], 1), path, "overwrite")
    assert _versions(Path(path)) == [0, 1, 2]
    ids = sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist())
    assert ids == [5, 6]
    assert_df_equality(storage.read_table(spark, path), _df(spark, ROWS[4:]), ignore_row_order=True)


def test_empty_dataframe_creates_table_with_schema(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "empty")
    storage.write_table(spark.createDataFrame([], SCHEMA), path)
    assert storage.table_version(spark, path) == 0
    back = storage.read_table(spark, path)
    assert back.count() == 0
    assert back.schema == SCHEMA


def test_other_types_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    df = spark.createDataFrame(
        [
            (dt.date(2024, 1, 2), Decimal("1.25"), (1, "a"), {"k": 1}, b"xy", [[1], []], 7, 1.5),
            (None, None, None, None, None, [None], None, None),
        ],
        "d date, dec decimal(10,2), st struct<a:int,b:string>, m map<string,int>, "
        "bin binary, nested array<array<long>>, sh short, f float",
    ).withColumn("ntz", F.lit(dt.datetime(2024, 1, 1, 1, 2, 3)).cast("timestamp_ntz"))
    storage.write_table(df, path)
    got = DeltaTable(path).to_pyarrow_table().to_pylist()
    assert sorted(got, key=lambda r: r["d"] is None)[0]["st"] == {"a": 1, "b": "a"}
    back = storage.read_table(spark, path)
    assert back.schema.simpleString() == df.schema.simpleString()
    by_null_date = lambda r: r.d is None  # noqa: E731 (maps cannot be sorted by Spark)
    assert sorted(back.collect(), key=by_null_date) == sorted(df.collect(), key=by_null_date)


def test_void_columns_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.range(1).select(F.lit(None).alias("x"), F.array(F.lit(None)).alias("xs"))
    with pytest.raises(DeltaStorageError, match=r"column\(s\) \['x', 'xs\[\]'\] of type void"):
        storage.write_table(df, str(tmp_path / "t"))
    assert not os.path.exists(tmp_path / "t" / "_delta_log")


def test_append_widens_int_to_long(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    storage.write_table(spark.range(3), path)
    storage.write_table(
        spark.range(3, 5).select(F.col("id").cast("int").alias("id")), path, "append"
    )
    assert DeltaTable(path).schema().to_json() == storage_schema_json(["id"], "long")
    assert sorted(r.id for r in storage.read_table(spark, path).collect()) == [0, 1, 2, 3, 4]


def storage_schema_json(names: list[str], type_name: str) -> str:
    """Delta schemaString for nullable columns of one type (compact, as delta-rs renders it)."""
    fields = ",".join(
        f'{{"name":"{n}","type":"{type_name}","nullable":true,"metadata":{{}}}}' for n in names
    )
    return f'{{"type":"struct","fields":[{fields}]}}'


# --------------------------------------------------------------------------- modes / schema


def test_error_and_ignore_modes(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    storage.write_table(_df(spark, ROWS[:1], 1), path, "errorifexists")
    with pytest.raises(FileExistsError, match="already exists"):
        storage.write_table(_df(spark, ROWS[1:2], 1), path, "error")
    storage.write_table(_df(spark, ROWS[1:2], 1), path, "ignore")
    assert _versions(Path(path)) == [0]
    storage.write_table(_df(spark, ROWS[1:2], 1), str(tmp_path / "new"), "ignore")
    assert storage.table_version(spark, str(tmp_path / "new")) == 0
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        _df(spark, ROWS[:1], 1).write.format("delta").save(path)  # Spark's default mode
    with pytest.raises(ValueError, match="unknown save mode"):
        storage.write_table(_df(spark, ROWS[:1], 1), path, "upsert")


def test_overwrite_with_new_schema_needs_overwrite_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    storage.write_table(_df(spark, ROWS[:2], 1), path)
    other = spark.createDataFrame([("k", 1.0)], "key string, value double")
    with pytest.raises(DeltaStorageError, match="Schema mismatch on overwrite") as err:
        storage.write_table(other, path)
    assert "Set option overwriteSchema=true" in str(err.value)
    with pytest.raises(DeltaStorageError, match="Schema mismatch on append"):
        storage.write_table(other, path, "append")
    with pytest.raises(Exception, match="Schema mismatch on overwrite"):  # job-code form
        other.write.format("delta").mode("overwrite").save(path)
    assert _versions(Path(path)) == [0]

    storage.write_table(other, path, overwrite_schema=True)
    assert _versions(Path(path)) == [0, 1]
    assert DeltaTable(path).to_pyarrow_table().to_pydict() == {"key": ["k"], "value": [1.0]}
    assert_df_equality(storage.read_table(spark, path), other)


def test_schema_differences_are_named() -> None:
    table = storage_schema_json(["a", "b"], "long")
    data = storage_schema_json(["a", "c"], "string")
    assert schema_differences(table, data, allow_widening=True) == [
        "missing column 'b'",
        "new column 'c'",
        "column 'a' is string but the table has long",
    ]


# --------------------------------------------------------------------------- txn / atomicity


def test_txn_app_id_and_version_skip_reruns(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    df = _df(spark, ROWS[:2], 1)
    storage.write_table(df, path, "append", txn_app_id="job", txn_version=1)
    assert DeltaTable(path).transaction_version("job") == 1
    files = _parquet_files(tmp_path / "t")

    storage.write_table(df, path, "append", txn_app_id="job", txn_version=1)  # re-run
    storage.write_table(df, path, "overwrite", txn_app_id="job", txn_version=0)  # older
    assert storage.table_version(spark, path) == 0
    assert _parquet_files(tmp_path / "t") == files  # nothing written by skipped runs

    storage.write_table(df, path, "append", txn_app_id="other", txn_version=1)  # other app id
    storage.write_table(df, path, "append", txn_app_id="job", txn_version=2)
    assert storage.table_version(spark, path) == 2
    assert DeltaTable(path).transaction_version("job") == 2
    assert storage.read_table(spark, path).count() == 6

    direct = df.write.format("delta").mode("append").option("txnAppId", "job")
    direct.option("txnVersion", "2").save(path)  # plain job-code form is honoured too
    assert storage.table_version(spark, path) == 2
    direct.option("txnVersion", "3").save(path)
    assert storage.table_version(spark, path) == 3
    assert DeltaTable(path).transaction_version("job") == 3


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type")
def test_failing_write_leaves_no_version_and_no_files(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    storage.write_table(_df(spark, ROWS, 3), path)
    files = _parquet_files(tmp_path / "t")

    @F.udf("long")
    def explode_on_six(x: int) -> int:
        if x == 6:
            raise ValueError("task failure injected by test")
        return x

    bad = _df(spark, ROWS, 3).withColumn("id", explode_on_six("id"))
    with pytest.raises(Exception, match="task failure injected"):
        storage.write_table(bad, path, "append")
    assert _versions(Path(path)) == [0]
    # The log still names exactly the first write's files. The failing task deletes its own
    # file and the driver's abort deletes those of finished tasks; a task Spark had not yet
    # stopped when it aborted the job may still finish its file afterwards (a race seen in CI
    # on 2 cores). Such a file is named by no commit, so readers never see it; VACUUM removes it.
    assert {Path(uri).name for uri in DeltaTable(path).file_uris()} == files
    assert len(_parquet_files(tmp_path / "t") - files) <= 1
    assert storage.read_table(spark, path).count() == len(ROWS)


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type")
def test_failed_first_write_leaves_no_table(spark: SparkSession, tmp_path: Path) -> None:
    @F.udf("long")
    def fail(x: int) -> int:
        raise ValueError("task failure injected by test")

    path = str(tmp_path / "t")
    with pytest.raises(Exception, match="task failure injected"):
        storage.write_table(_df(spark, ROWS, 2).withColumn("id", fail("id")), path)
    assert not storage.table_exists(spark, path)
    assert storage.table_version(spark, path) is None


# --------------------------------------------------------------------------- reader features


def test_deletion_vectors_and_column_mapping_read_through_delta_rs(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "dv")
    first = pa.table({"id": pa.array(range(10), pa.int64()), "name": [f"n{i}" for i in range(10)]})
    second = pa.table({"id": pa.array([10, 11], pa.int64()), "name": ["n10", None]})
    write_dv_column_mapping_table(path, [(first, [2, 5, 9]), (second, [])])

    df = storage.read_table(spark, path)
    assert df.columns == ["id", "name"]  # logical names, not physical ones
    kept = [0, 1, 3, 4, 6, 7, 8, 10, 11]
    expected = spark.createDataFrame(
        [(i, f"n{i}" if i != 11 else None) for i in kept], "id long, name string"
    )
    assert_df_equality(df, expected, ignore_row_order=True)
    assert not any(f.metadata for f in df.schema.fields)  # physical names not leaked

    with pytest.raises(DeltaStorageError, match="uses column mapping; the embedded delta-rs"):
        storage.write_table(expected, path, "append")
    assert _versions(Path(path)) == [0]


def test_missing_table(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "nope")
    assert storage.table_version(spark, path) is None
    assert not storage.table_exists(spark, path)
    with pytest.raises(Exception, match="No Delta table at"):
        storage.read_table(spark, path).collect()


def test_new_table_is_created_with_its_data_in_one_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(i, f"v{i}") for i in range(50)], "k long, v string")
    storage.write_table(df.repartition(3), path, txn_app_id="night", txn_version=1)
    table = DeltaTable(path)
    # version 0 holds the data: no empty table is ever visible, even after a crash
    assert table.version() == 0
    assert len(table.history()) == 1
    assert table.to_pyarrow_table().num_rows == 50
    assert len(table.file_uris()) == 3
    assert table.transaction_version("night") == 1
    assert not [n for n in os.listdir(path) if n.startswith(".pelengine-commit-")]
    # a rerun of the same night is skipped by the txn recorded in version 0
    storage.write_table(df, path, txn_app_id="night", txn_version=1)
    assert DeltaTable(path).version() == 0


def test_small_batches_are_written_as_few_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded writer holds batches until they make a row group: a table given as
    hundreds of one-row batches (the state table: one family per batch) is one row group
    per file, not hundreds (every reader pays per column per group), and at the size the
    writer rolls at, a row group per that many rows; at the bound on the bytes it holds,
    it writes what it holds; the rows read back as written."""
    import glob

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from pelengine.storage import embedded, sessionless

    schema = StructType([StructField("n", LongType()), StructField("s", StringType())])
    batches = [
        pa.record_batch([pa.array([i], pa.int64()), pa.array([f"v{i}"])], names=["n", "s"])
        for i in range(450)
    ]
    rows = pa.Table.from_batches(batches)
    assert len(rows.to_batches()) == 450

    def groups(path: Path) -> list[int]:
        files = glob.glob(str(path / "*.parquet"))
        return [pq.ParquetFile(f).metadata.num_row_groups for f in files]

    sessionless.write_arrow(rows, str(tmp_path / "one"), schema, "overwrite")
    assert groups(tmp_path / "one") == [1]
    assert sessionless.read_arrow(str(tmp_path / "one")).to_pylist() == rows.to_pylist()

    monkeypatch.setattr(embedded, "ROW_GROUP_ROWS", 100)
    sessionless.write_arrow(rows, str(tmp_path / "five"), schema, "overwrite")
    assert groups(tmp_path / "five") == [5]  # 100, 100, 100, 100 and the last 50
    assert sessionless.read_arrow(str(tmp_path / "five")).to_pylist() == rows.to_pylist()

    # what a writing task holds is bounded in bytes too (all its files together)
    monkeypatch.setattr(embedded, "ROW_GROUP_BYTES", 1)
    sessionless.write_arrow(rows, str(tmp_path / "bound"), schema, "overwrite")
    assert groups(tmp_path / "bound") == [450]
    assert sessionless.read_arrow(str(tmp_path / "bound")).to_pylist() == rows.to_pylist()
