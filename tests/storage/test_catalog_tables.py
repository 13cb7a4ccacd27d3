"""Catalog tables (tables by name) in the storage seam and the CLI.

- Pure: the naming, :class:`storage.Output`, the CLI's options and usage errors.
- The embedded store (``embedded``): tables by name are refused before any work, saying
  what to do.
- delta-spark (``delta_spark``), for real:
  * across processes, against a Hive metastore that outlives them (Spark's Hive support,
    its embedded Derby under the test's temp dir): a run refused for a schema that does not
    exist, runs by name (managed, and external with ``--out``) with ``--events`` by name,
    an idempotent re-run (``txnAppId``/``txnVersion`` through ``saveAsTable``: no table
    version moves), an incremental night after appended events, then ``pelengine sql
    --schema`` reading every table at the versions the newest ``_runs`` row names and a
    ``VERSION AS OF`` query by name giving the older run's rows;
  * in the test session (Spark's in-memory catalog): ``saveAsTable``'s txn skip, ``VERSION
    AS OF`` and ``DESCRIBE HISTORY`` by name, the refusal of a catalog or schema the session
    has not, and two writers of one table without a lease: Delta Lake's own conflict
    exception, reported by the CLI as one sentence.

No fake stands in for Delta here. What needs Databricks itself (a serverless session) is
faked in tests/cli/test_bundle.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pelengine import cli, storage
from pelengine.commands.args import reconstruct_output
from pelengine.settings import ConfigError, load_config
from pelengine.storage import jars
from tests.storage.racing import held_udf, other_writer

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


@pytest.mark.delta_spark
def test_delta_package_is_the_installed_delta_sparks_coordinate() -> None:
    """The coordinate the project names (and `make install` fetched into jars/lib, the jars
    a session gets as ``spark.jars``) is the one the installed pieces themselves say: the
    delta-spark jar's own manifest (group, name, version), the pip delta-spark of the same
    version, and pyspark's Spark line and Scala version (its spark-core jar)."""
    import re
    import zipfile
    from importlib.metadata import version

    import pyspark

    from pelengine.storage.jars import find_delta_jars

    jars, origin = find_delta_jars()
    spark_jars = [j for j in jars if Path(j).name.startswith("delta-spark_")]
    assert len(spark_jars) == 1, (origin, jars)
    with zipfile.ZipFile(spark_jars[0]) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    fields = dict(re.findall(r"^([\w-]+): (.+?)\s*$", manifest, re.MULTILINE))
    core = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar")]
    scala = re.fullmatch(r"spark-core_(\d+\.\d+)-.*\.jar", core[0])
    assert len(core) == 1 and scala, core
    line = ".".join(pyspark.__version__.split(".")[:2])
    release = fields["Implementation-Version"]
    assert release == version("delta-spark")
    artifact = f"{fields['Implementation-Title']}_{line}_{scala.group(1)}"
    assert f"{fields['Implementation-Vendor-Id']}:{artifact}:{release}" == storage.DELTA_PACKAGE
    assert Path(spark_jars[0]).name == f"{artifact}-{release}.jar"


def test_delta_conflicts_are_recognised_however_wrapped() -> None:
    """py4j's text (the JVM class), Spark Connect's (the error class), a cause chain."""
    jvm = RuntimeError(
        "An error occurred while calling o80.saveAsTable.\n: io.delta.exceptions."
        "ConcurrentAppendException: [DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction ..."
    )
    assert storage.delta_conflict(jvm) == "ConcurrentAppendException"
    connect = RuntimeError("[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata")
    assert storage.delta_conflict(connect) == "MetadataChangedException"
    assert storage.delta_conflict(RuntimeError("[DELTA_PROTOCOL_CHANGED] ...")) == (
        "DELTA_PROTOCOL_CHANGED"
    )
    try:
        try:
            raise jvm
        except RuntimeError as inner:
            raise ValueError("while writing") from inner
    except ValueError as outer:
        error = storage.concurrent_write_error(outer, "`c`.`s`.`pel`")
    assert error is not None and "`c`.`s`.`pel`" in str(error) and "\n" not in str(error)
    assert storage.delta_conflict(RuntimeError("java.util.ConcurrentModificationException")) is None
    assert storage.concurrent_write_error(ValueError("schema mismatch")) is None


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
    assert reconstruct_output(args, conf) == storage.Output(None, "main", "other")
    # empty values (a Databricks job parameter left empty) mean "not given here"
    args = parse(["reconstruct", "--events", "e", "--out", "o", "--catalog", "", "--schema", ""])
    assert reconstruct_output(args, load_config()) == storage.Output(root="o")
    assert reconstruct_output(args, conf) == storage.Output("o", "main", "redis_state")
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


def test_sql_needs_an_output(capsys: pytest.CaptureFixture[str]) -> None:
    sentinel: Any = object()  # a usage error stops before any session use
    assert cli.run(["sql", "SELECT 1"], spark=sentinel) == cli.EXIT_USAGE
    assert "no output: give --out PATH, or --schema S" in capsys.readouterr().err


# ---- the embedded store: refused before any work, saying what to do ---------------------------


def _says_what_to_do(err: str) -> None:
    assert "need delta-spark" in err
    assert "make install" in err and "--jars" in err and jars.DELTA_CATALOG in err
    assert "--out PATH" in err and "CREATE TABLE" in err
    assert "Traceback" not in err


@pytest.mark.spark
@pytest.mark.embedded
@pytest.mark.parametrize(
    "argv",
    [
        ["--events", "{tmp}", "--catalog", "main", "--schema", "redis_state"],
        ["--events", "main.redis.events", "--out", "{tmp}/out"],
    ],
)
def test_catalog_tables_without_delta_spark_say_what_to_do(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert storage.storage_mode(spark) == storage.EMBEDDED
    args = ["reconstruct", *(a.format(tmp=tmp_path) for a in argv)]
    assert cli.run(args, spark=spark, progress=lambda _: None) == cli.EXIT_USAGE
    _says_what_to_do(capsys.readouterr().err)
    assert not (tmp_path / "out").exists(), "refused before any work"


@pytest.mark.spark
@pytest.mark.embedded
def test_sql_by_name_without_delta_spark_says_what_to_do(
    spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert storage.storage_mode(spark) == storage.EMBEDDED
    code = cli.run(["sql", "SELECT 1", "--schema", "redis_state"], spark=spark)
    assert code == cli.EXIT_USAGE
    _says_what_to_do(capsys.readouterr().err)


# ---- delta-spark in the test session (Spark's in-memory catalog) -------------------------


@pytest.fixture
def schema(spark: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A schema of the session catalog stored under the test's temp dir, dropped after."""
    name = "pelengine_" + request.node.name.split("[")[0].removeprefix("test_")[:40]
    spark.sql(f"CREATE SCHEMA spark_catalog.{name} LOCATION '{tmp_path / 'warehouse'}'")
    try:
        yield name
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS spark_catalog.{name} CASCADE")


def _log_versions(path: Path) -> list[int]:
    """The commits in a Delta table's log (no Spark job)."""
    return sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.json"))


@pytest.mark.spark
@pytest.mark.delta_spark
def test_saveastable_by_name_is_idempotent_and_time_travels(
    spark: Any, tmp_path: Path, schema: str
) -> None:
    """saveAsTable with txnAppId/txnVersion skips a write the table has seen; DESCRIBE
    HISTORY and VERSION AS OF by name; managed tables under the schema's location,
    external ones at their path."""
    first = spark.createDataFrame([(0, "k", "1-0")], "db int, key string, id string")
    second = spark.createDataFrame([(0, "k", "1-0"), (0, "k", "2-0")], first.schema)
    managed = storage.Output(catalog="spark_catalog", schema=schema).table("pel")
    assert isinstance(managed, storage.Table)
    assert storage.table_version(spark, managed) is None
    storage.write_table(first, managed, txn_app_id="nightly", txn_version=1)
    storage.write_table(second, managed, txn_app_id="nightly", txn_version=1)  # seen: skipped
    assert storage.table_version(spark, managed) == 0
    assert spark.table(managed.name).count() == 1
    storage.write_table(second, managed, txn_app_id="nightly", txn_version=2)
    assert storage.table_version(spark, managed) == 1
    assert storage.table_versions(spark, managed) == [1, 0]
    assert storage.read_table(spark, managed, 0).count() == 1  # VERSION AS OF by name
    assert storage.read_table(spark, managed).count() == 2
    assert _log_versions(tmp_path / "warehouse" / "pel") == [0, 1]
    # with a root: an external table at <root>/<table>, written and read by name
    external = storage.Output(root=str(tmp_path / "ext"), schema=schema).table("groups")
    storage.write_table(first, external, txn_app_id="nightly", txn_version=1)
    storage.write_table(second, external, txn_app_id="nightly", txn_version=1)
    assert _log_versions(tmp_path / "ext" / "groups") == [0]
    assert storage.table_row_count(spark, external) == 1
    location = [
        r["data_type"]
        for r in spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.groups").collect()
        if r["col_name"] == "Location"
    ]
    assert location and location[0].rstrip("/").endswith("ext/groups")


@pytest.mark.spark
@pytest.mark.delta_spark
def test_nights_over_events_by_name_read_the_change_feed_or_say_why_not(
    spark: Any, tmp_path: Path, schema: str
) -> None:
    """Events by name: with the change data feed on, a night reads the feed through the
    catalog (``readChangeFeed`` by name); with deletion vectors on and no feed, Spark's file
    lists cannot show a row-level delete, so the night checks every row against the state's
    digest and says why. Either night's tables equal one full run over the same events."""
    from pelengine.runs.full import run_reconstruct
    from pelengine.schemas import EVENTS_SCHEMA
    from pelengine.settings import Settings
    from pelengine.synth import generate_events
    from tests.runs.test_incremental import assert_equals_full_run

    rows = list(generate_events(300, 3, seed=5, faults=False))
    cut = 200
    for label, feature in (
        ("feed", "delta.enableChangeDataFeed"),
        ("vectors", "delta.enableDeletionVectors"),
    ):
        name = f"spark_catalog.{schema}.events_{label}"
        spark.createDataFrame(rows[:cut], EVENTS_SCHEMA).createOrReplaceTempView("first_rows")
        spark.sql(
            f"CREATE TABLE {name} USING delta TBLPROPERTIES ({feature} = true) "
            "AS SELECT * FROM first_rows"
        )
        out = tmp_path / label
        first = run_reconstruct(spark, name, str(out), Settings(incremental=True))
        assert first["incremental"]["mode"] == "full", first["incremental"]
        spark.createDataFrame(rows[cut:], EVENTS_SCHEMA).write.format("delta").mode(
            "append"
        ).saveAsTable(name)
        night = run_reconstruct(spark, name, str(out), Settings(incremental=True))["incremental"]
        read = night["read"]
        print(f"events by name, {feature} on: {night['mode']}, {read}")
        assert night["mode"] == "incremental", night
        if label == "feed":
            assert (read["from"], read["via"], read["versions"]) == (
                "change data feed",
                "spark snapshots",
                "1..1",
            ), read
            assert read["change_feed"] and read["rows_new"] == len(rows) - cut, read
        else:
            assert read["from"] == "every row (digest)", read
            assert read["why"].startswith("deletion vectors are on"), read
            assert read["rows_checked"] == cut, read
        assert_equals_full_run(spark, storage.table_ref(name), out)
    spark.catalog.dropTempView("first_rows")


@pytest.mark.spark
@pytest.mark.delta_spark
def test_a_catalog_or_schema_the_session_has_not_is_refused_before_any_work(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run does not create a missing schema (Spark's saveAsTable does not either, but
    only after the whole replay): one sentence, exit code 2, nothing read or written."""
    events = str(tmp_path / "events")  # never read: not even created
    os.makedirs(events)
    cases = [
        (
            ["reconstruct", "--events", events, "--catalog", "spark_catalog", "--schema", "nope"],
            "there is no schema `spark_catalog`.`nope`, and pelengine does not create schemas",
        ),
        (
            ["sql", "SELECT 1", "--schema", "nope"],
            "CREATE SCHEMA `nope`",
        ),
        (
            ["reconstruct", "--events", "main.redis.events", "--out", str(tmp_path / "out")],
            "--events main.redis.events: this session has no catalog main (it has spark_catalog)",
        ),
        (
            ["reconstruct", "--events", events, "--catalog", "main", "--schema", "redis_state"],
            "output main.redis_state: this session has no catalog main",
        ),
    ]
    for argv, message in cases:
        assert cli.run(argv, spark=spark, progress=lambda _: None) == cli.EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert message in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["events"], "refused before any work"


@pytest.mark.spark
@pytest.mark.delta_spark
def test_two_writers_of_a_table_by_name_get_one_sentence(
    spark: Any,
    tmp_path: Path,
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Catalog tables without a root have no run lease: two runs can write one table at
    once, and Delta Lake refuses the later commit. Made deterministic here: this run's
    write of ``streams`` is held (a UDF waits) after its Delta transaction began, while
    another writer overwrites the same table by name; Delta's own ConcurrentAppendException
    then reaches the CLI, which says it in one sentence (exit code 1, no traceback) and
    records no run."""
    from pyspark.sql import functions as F

    from pelengine.schemas import EVENTS_SCHEMA, table_schema
    from pelengine.synth import generate_events

    events = str(tmp_path / "events")
    rows = list(generate_events(120, 2, seed=3, faults=False))
    storage.write_table(spark.createDataFrame(rows, EVENTS_SCHEMA), events)
    output = storage.Output(catalog="spark_catalog", schema=schema)
    target = output.table("streams")
    assert isinstance(target, storage.Table)
    storage.write_table(spark.createDataFrame([], table_schema("streams")), target)  # earlier
    started, go = str(tmp_path / "started"), str(tmp_path / "go")

    # nondeterministic: the filter stays above coalesce(1), in this write's one task
    held = held_udf(started, go)

    real_write: Callable[..., None] = storage.write_table
    other: list[BaseException] = []

    def racing_write(df: Any, ref: Any, mode: str = "overwrite", **options: Any) -> None:
        if ref != target:
            return real_write(df, ref, mode, **options)
        # the other run's write of the same table, while this one's is held
        errors: list[BaseException] = []
        try:
            with other_writer(started, go, lambda: real_write(df, ref, "overwrite")) as errors:
                real_write(df.coalesce(1).where(held(F.lit(1))), ref, mode, **options)
        finally:  # (the other writer's thread has ended)
            other.extend(errors)

    monkeypatch.setattr(storage, "write_table", racing_write)
    argv = ["reconstruct", "--events", events, "--catalog", "spark_catalog", "--schema", schema]
    code = cli.run(argv, spark=spark, progress=lambda _: None)
    err = capsys.readouterr().err
    assert not other, other
    assert code == cli.EXIT_FAILED, err
    (line,) = err.strip().splitlines()
    assert line.startswith("pelengine: reconstruct failed: ConcurrentWriteError: another run ")
    assert f"committed to {target.name} while this run was writing it" in line
    assert "Concurrent" in line and "run again once the other run has finished" in line
    assert storage.table_version(spark, target) == 1, "the other run's commit stands"
    assert not spark.catalog.tableExists(output.table(storage.RUNS_TABLE).name), "no run row"


# ---- delta-spark across processes: a Hive metastore that outlives them ------------------

#: what each process runs first: a session on the --conf (argv[1]), and ``run(step, argv)``
#: calling cli.run in it; the process's steps follow, then it prints
#: {step: [exit code, stdout, stderr]}
PROCESS = """
import contextlib, io, json, sys, time
from pelengine import cli, storage
from pelengine.settings import load_config
from pelengine.session import build_session, stop_session

started = time.monotonic()
conf, *args = sys.argv[1:]
spark = build_session(load_config([conf]))
results = {}
seconds = {"session": round(time.monotonic() - started, 1)}

def run(step, argv):
    began = time.monotonic()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.run([*json.loads(argv), "--conf", conf], spark=spark, progress=lambda _: None)
    results[step] = [code, out.getvalue(), err.getvalue()]
    seconds[step] = round(time.monotonic() - began, 1)

%s
stop_session(spark)
print("steps (s):", json.dumps(seconds), file=sys.stderr)
print(json.dumps(results))
"""

#: process 1: refused for a missing schema; then the schemas, the events table registered
#: by name, and two runs by name (managed --incremental, and external with --out and txn
#: options)
FIRST_PROCESS = (
    PROCESS
    % """
events, ext, managed, external = args
run("refused", managed)
spark.sql("CREATE SCHEMA spark_catalog.redis_state")
spark.sql("CREATE SCHEMA spark_catalog.redis_ext")
spark.sql(f"CREATE TABLE spark_catalog.redis_state.events USING delta LOCATION '{events}'")
run("managed", managed)
run("external", external)
"""
)

#: process 2, a new JVM on the same metastore: the external run again (same txn options),
#: a night by name after appended events, a later run killed after writing pel (a pel
#: version no _runs row names, written by path), then sql by name
SECOND_PROCESS = (
    PROCESS
    % """
pel, external, managed, sql = args
run("external", external)
run("managed", managed)
storage.write_table(storage.read_table(spark, pel).limit(0), pel)
run("sql", sql)
"""
)

EVENTS_BY_NAME = "spark_catalog.redis_state.events"
MANAGED = [
    "reconstruct",
    "--incremental",
    "--events",
    EVENTS_BY_NAME,
    "--catalog",
    "spark_catalog",
    "--schema",
    "redis_state",
    "--json",
]


def _hive_conf(tmp_path: Path) -> Path:
    """The CLI's --conf of a session on Spark's Hive support with its Derby metastore (and
    derby.log) and warehouse under ``tmp_path``."""
    path = tmp_path / "hive.yaml"
    conf = {
        "spark": {
            "conf": {
                "spark.sql.catalogImplementation": "hive",
                "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
                "spark.hadoop.javax.jdo.option.ConnectionURL": (
                    f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true"
                ),
                # Hive refuses (and logs an ERROR for) the column change a Delta table's
                # CREATE OR REPLACE asks of its placeholder schema; Spark then stores it in
                # its own format anyway
                "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
                "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp_path}",
            }
        }
    }
    path.write_text(json.dumps(conf))  # JSON is YAML
    return path


def _process(tmp_path: Path, label: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """One process of ``argv`` (the test's store through PELENGINE_STORE) in ``tmp_path``;
    prints its wall time and its steps' seconds (``pytest -s``: where the test's time
    goes)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600, check=False
    )
    steps = [line for line in done.stderr.splitlines() if line.startswith("steps (s):")]
    print(f"{label}: {time.monotonic() - started:.1f} s; " + (steps[-1] if steps else ""))
    with (tmp_path / "processes.log").open("a") as log:  # kept for a failure's inspection
        log.write(f"==== {label}: {argv[1:]}\n{done.stderr}\n")
    return done


def _rows(spark: Any, path: Path, version: int | None = None) -> list[tuple[Any, ...]]:
    """A table read by path (no catalog), key columns sorted."""
    df = storage.read_table(spark, str(path), version)
    return sorted(tuple(r) for r in df.select("key", "group", "id", "consumer").collect())


@pytest.mark.spark
@pytest.mark.delta_spark
def test_catalog_tables_outlive_the_process(spark: Any, tmp_path: Path) -> None:
    from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES, SNAPSHOT_TABLES
    from pelengine.synth import generate_events

    tables = (*OUTPUT_TABLES, "rejected_events")
    rows = list(generate_events(300, 3, seed=11))
    cut = len(rows) * 2 // 3
    events, ext = tmp_path / "events", tmp_path / "ext"
    storage.write_table(spark.createDataFrame(rows[:cut], EVENTS_SCHEMA), str(events))
    _hive_conf(tmp_path)
    external = ["reconstruct", "--events", EVENTS_BY_NAME, "--schema", "redis_ext"]
    external += ["--out", str(ext), "--txn-app-id", "nightly", "--txn-version", "1", "--json"]

    # process 1: refused (no schema), then by name: managed, and external with --out
    argv = [str(tmp_path / "hive.yaml"), str(events), str(ext)]
    argv += [json.dumps(MANAGED), json.dumps(external)]
    done = _process(tmp_path, "process 1", [sys.executable, "-c", FIRST_PROCESS, *argv])
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(done.stdout.strip().splitlines()[-1])
    code, _, err = first["refused"]
    assert code == cli.EXIT_USAGE, err
    assert err.strip().splitlines() == [
        "pelengine reconstruct: error: output spark_catalog.redis_state: there is no schema "
        "`spark_catalog`.`redis_state`, and pelengine does not create schemas: create it first "
        "(CREATE SCHEMA `spark_catalog`.`redis_state`, with the LOCATION or MANAGED LOCATION "
        "its managed tables should use), or name an existing one"
    ]
    for step in ("managed", "external"):
        assert first[step][0] == cli.EXIT_OK, first[step][2][-3000:]
    managed_1 = json.loads(first["managed"][1])
    external_1 = json.loads(first["external"][1])
    assert managed_1["storage"] == "delta-spark" and managed_1["incremental"]["mode"] == "full"
    assert managed_1["input"] == {"path": EVENTS_BY_NAME, "delta_version": 0}
    # a night's record names its state too
    assert managed_1["tables"] == dict.fromkeys((*tables, "_state"), 0)
    assert external_1["tables"] == dict.fromkeys(tables, 0)
    state = tmp_path / "warehouse" / "redis_state.db"  # managed: the metastore chose where
    assert {t for t in tables if (state / t / "_delta_log").is_dir()} == set(tables)
    assert (state / "_state" / "_delta_log").is_dir() and (state / "_runs").is_dir()
    assert all((ext / t / "_delta_log").is_dir() for t in (*tables, "_runs"))
    assert (tmp_path / "derby.log").exists() and (tmp_path / "metastore_db").is_dir()

    # process 2, a new JVM: the external run again (same txnAppId/txnVersion: Delta skips
    # every write), a night with --incremental after appended events (the events by name),
    # a later run killed after writing pel (a version no _runs row names), then sql by name
    # reading the recorded versions, and VERSION AS OF the older run's
    logs = {t: _log_versions(ext / t) for t in tables}
    storage.write_table(spark.createDataFrame(rows[cut:], EVENTS_SCHEMA), str(events), "append")
    pel = state / "pel"
    columns = "key, `group`, id, consumer"
    query = (
        f"SELECT 'recorded' AS v, {columns} FROM pel UNION ALL "
        f"SELECT 'first', {columns} FROM spark_catalog.redis_state.pel VERSION AS OF 0 UNION ALL "
        f"SELECT 'latest', {columns} FROM spark_catalog.redis_state.pel"
    )
    sql = ["sql", query, "--catalog", "spark_catalog", "--schema", "redis_state", "--json"]
    sql += ["--limit", "0"]
    argv = [str(tmp_path / "hive.yaml"), str(pel), json.dumps(external), json.dumps(MANAGED)]
    argv.append(json.dumps(sql))
    done = _process(tmp_path, "process 2", [sys.executable, "-c", SECOND_PROCESS, *argv])
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads(done.stdout.strip().splitlines()[-1])
    for step in ("external", "managed", "sql"):
        assert second[step][0] == cli.EXIT_OK, second[step][2][-3000:]

    external_2 = json.loads(second["external"][1])
    assert external_2["tables"] == external_1["tables"]
    assert {t: _log_versions(ext / t) for t in tables} == logs, "no table version moved"
    assert [r["tables"] for r in storage.read_table(spark, str(ext / "_runs")).collect()] == [
        external_1["tables"]
    ] * 2

    managed_3 = json.loads(second["managed"][1])
    assert managed_3["incremental"]["mode"] == "incremental"
    # the events by name: the new rows found through Delta itself (DESCRIBE DETAIL, the
    # two snapshots' inputFiles(), the new files read by _metadata.file_path), not by
    # checking every row against the state's digest
    read = managed_3["incremental"]["read"]
    assert (read["from"], read["via"], read["versions"]) == ("delta log", "spark snapshots", "1..1")
    assert read["files_added"] > 0 and read["files_read"] == read["files_added"], read
    assert read["rows_new"] > 0 and read["rows_gone"] == read["rows_late"] == 0, read
    assert managed_3["input"]["delta_version"] == 1
    # the snapshot tables and the state move; a history table only where the night
    # changed rows (version 2: nothing to change, no commit)
    written = managed_3["output"]["rows"]
    assert managed_3["tables"] == {
        **{t: 1 if t in SNAPSHOT_TABLES or written[t] else 0 for t in tables},
        "_state": 1,
    }
    assert written["ownership_changes"] > 0
    runs = storage.read_table(spark, str(state / "_runs")).orderBy("finished_at").collect()
    assert [r["tables"] for r in runs] == [managed_1["tables"], managed_3["tables"]]
    assert [r["as_of_seq"] for r in runs] == [managed_1["as_of_seq"], managed_3["as_of_seq"]]
    assert _log_versions(pel) == [0, 1, 2]

    answer = json.loads(second["sql"][1])
    seen: dict[str, list[tuple[Any, ...]]] = {"recorded": [], "first": [], "latest": []}
    for row in answer:
        seen[row["v"]].append((row["key"], row["group"], row["id"], row["consumer"]))
    assert sorted(seen["recorded"]) == _rows(spark, pel, 1) and seen["recorded"]
    assert sorted(seen["first"]) == _rows(spark, pel, 0) != _rows(spark, pel, 1)
    assert seen["latest"] == []
