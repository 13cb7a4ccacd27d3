"""The storage seam: the one module that knows paths and Delta Lake.

Job code reads with ``spark.read.format("delta").load(path)`` and writes with
``df.write.format("delta").mode(m).option(...).save(path)`` (or the helpers below). With
native Delta Lake on the classpath (Databricks; delta-spark's jars, which ``make install``
fetches and :mod:`pelengine.storage.jars` gives the sessions the project builds) those calls
go to it unchanged; otherwise :func:`install_storage` registers an embedded Python data
source named ``delta`` backed by delta-rs (:mod:`pelengine.storage.embedded`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pelengine.storage.jars import (
    CATALOG_CONF,
    DELTA_CATALOG,
    DELTA_EXTENSION,
    EXTENSIONS_CONF,
)
from pelengine.storage.lease import RunInProgressError as RunInProgressError
from pelengine.storage.lease import run_lease as run_lease
from pelengine.storage.paths import FILES_OPTION, local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NATIVE = "native"
EMBEDDED = "embedded"
MODE_CONF = "pelengine.storage.mode"
#: why the session has the store it has (the run report's ``storage_reason``)
REASON_CONF = "pelengine.storage.reason"
DELTA_SOURCE_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"
#: the Maven coordinate of native Delta Lake for this project's pins (pyspark 4.2.0,
#: delta-spark 4.4.0; since Delta 4.x the artifact names its Spark line); ``make install``
#: fetches it and what it needs into jars/lib (jars/fetch.py)
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
#: Format of tables written by name (catalog tables).
TABLE_FORMAT = "delta"
RUN_REPORT = "_run_report.json"
#: Catalog tables: the run record, one row per complete run (the run's last write).
RUNS_TABLE = "_runs"
RUNS_SCHEMA = (
    "finished_at timestamp, as_of_seq bigint, as_of_ms bigint, "
    "tables map<string,bigint>, report string"
)
_SAVE_MODES = {
    "overwrite": "overwrite",
    "append": "append",
    "ignore": "ignore",
    "error": "errorifexists",
    "errorifexists": "errorifexists",
    "default": "errorifexists",
}


# --------------------------------------------------------------------------- the guard


class StorageSetupError(RuntimeError):
    """The session has native Delta Lake's classes but not the rest it needs (or was given
    its jars too late): never answered by falling back to the embedded store."""


def on_databricks() -> bool:
    """Whether this process runs on Databricks (a job task, classic or serverless)."""
    return bool(os.environ.get("DATABRICKS_RUNTIME_VERSION"))


def is_remote_session(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (Databricks serverless and standard access
    mode among them): no py4j gateway, no ``sparkContext``."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def probe_jvm_delta(spark: SparkSession) -> bool | None:
    """True/False if the JVM can/cannot load Delta's data source class; None if unknowable
    (Spark Connect / serverless: no py4j gateway, ``_jvm`` is not touched)."""
    if is_remote_session(spark):
        return None
    try:
        jvm = spark._jvm
    except Exception:
        return None
    if jvm is None:
        return None
    try:
        jvm.org.apache.spark.util.Utils.classForName(DELTA_SOURCE_CLASS, False, False)
        return True
    except Exception as exc:  # py4j wraps ClassNotFoundException
        return False if "ClassNotFoundException" in str(exc) else None


def _conf(spark: SparkSession, key: str) -> str:
    try:
        return str(spark.conf.get(key, "") or "")
    except Exception:
        return ""


@dataclass(frozen=True)
class SessionFacts:
    """What decides the store, read off a running session: whether the JVM loads Delta's
    data source (None: cannot be asked, Spark Connect), the SQL extensions, the session
    catalog, and the jars and packages it was given."""

    has_delta_class: bool | None
    extensions: str = ""
    catalog: str = ""
    jars: str = ""

    @classmethod
    def of(cls, spark: SparkSession) -> SessionFacts:
        jars = ",".join(_conf(spark, k) for k in ("spark.jars", "spark.jars.packages"))
        return cls(
            probe_jvm_delta(spark),
            _conf(spark, EXTENSIONS_CONF),
            _conf(spark, CATALOG_CONF),
            jars,
        )


def _delta_setup_missing(facts: SessionFacts) -> list[str]:
    missing = []
    if DELTA_EXTENSION not in [e.strip() for e in facts.extensions.split(",")]:
        missing.append(f"{EXTENSIONS_CONF} does not list {DELTA_EXTENSION}")
    if facts.catalog != DELTA_CATALOG:
        missing.append(f"{CATALOG_CONF} is {facts.catalog or 'unset'}, not {DELTA_CATALOG}")
    return missing


def choose_storage_mode(
    facts: SessionFacts, register: Callable[[], None], why: str = ""
) -> tuple[str, str]:
    """(native or embedded, why) for a session with ``facts``; ``register`` installs the
    embedded source (may raise). ``why`` is what the session builder knew (where the jars
    came from, or why there were none).

    Native Delta wherever its classes are: a loadable class, or on Spark Connect (which
    cannot be probed) the Delta extension. With the classes, the extension and catalog must
    be configured too; Delta's jars given but its classes missing means they came after the
    JVM started. Both are errors, never a fall back to the embedded store."""
    if facts.has_delta_class is False and "delta-spark" in facts.jars:
        raise StorageSetupError(
            "this session was given delta-spark's jars (spark.jars or spark.jars.packages) "
            "but its JVM cannot load Delta Lake's classes: the jars came after the JVM "
            "started (a Spark session already running in this process, or a conf set on a "
            "running session). Give them when the JVM starts: spark-submit --jars, or the "
            "first session's builder"
        )
    native = facts.has_delta_class or (
        facts.has_delta_class is None and DELTA_EXTENSION in facts.extensions
    )
    if native:
        missing = _delta_setup_missing(facts)
        if missing:
            raise StorageSetupError(
                "Delta Lake's classes are on this session's classpath but "
                + " and ".join(missing)
                + f": build the session with --conf {EXTENSIONS_CONF}={DELTA_EXTENSION} "
                f"--conf {CATALOG_CONF}={DELTA_CATALOG} (pelengine will not write a Delta "
                "table through the embedded store while native Delta is present)"
            )
        where = "this Spark Connect server has" if facts.has_delta_class is None else "has"
        reason = f"native Delta Lake: the session {where} delta-spark's classes"
        return NATIVE, reason + (f" ({why})" if why else "")
    try:
        register()
    except Exception as exc:
        if _is_already_exists(exc):
            return NATIVE, "native Delta Lake: a delta data source is already registered"
        raise RuntimeError(
            f"No native Delta Lake found and the embedded delta data source could not be "
            f"registered: {exc}"
        ) from exc
    reason = "embedded delta-rs store: no delta-spark classes on the classpath"
    return EMBEDDED, reason + (f" ({why})" if why else "")


def _is_already_exists(exc: BaseException) -> bool:
    text = str(exc)
    return "DATA_SOURCE_ALREADY_EXISTS" in text or "already exists" in text.lower()


def install_storage(spark: SparkSession, why: str = "") -> str:
    """Make ``format("delta")`` work in this session; returns "native" or "embedded", and
    records it and why (:func:`storage_reason`). ``why``: what the session builder knew
    (:func:`pelengine.storage.jars.session_conf`).

    On Databricks Delta Lake is the platform's own: native, without probing (no ``_jvm``, no
    data source registration: neither exists on serverless)."""
    current = _installed_mode(spark)
    if current is not None:
        return current

    if on_databricks():
        mode, reason = NATIVE, "native Delta Lake: the Databricks runtime's own"
    else:

        def register() -> None:
            from pelengine.storage.embedded import DeltaDataSource

            spark.dataSource.register(DeltaDataSource)

        mode, reason = choose_storage_mode(SessionFacts.of(spark), register, why)
    spark.conf.set(MODE_CONF, mode)
    spark.conf.set(REASON_CONF, reason)
    return mode


def _installed_mode(spark: SparkSession) -> str | None:
    try:
        value = spark.conf.get(MODE_CONF, None)
    except Exception:
        return None
    return value if value in (NATIVE, EMBEDDED) else None


def storage_reason(spark: SparkSession) -> str:
    """Why :func:`install_storage` chose this session's store."""
    return _conf(spark, REASON_CONF)


def storage_mode(spark: SparkSession) -> str:
    """What :func:`install_storage` chose for this session."""
    mode = _installed_mode(spark)
    if mode is None:
        raise RuntimeError("pelengine storage is not installed: call install_storage(spark) first")
    return mode


# --------------------------------------------------------------------------- where tables are


@dataclass(frozen=True)
class Table:
    """A table known by name to the session's catalog: ``name`` is its quoted multi-part
    identifier (``catalog.schema.table`` or ``schema.table``); ``location`` makes it an
    external table stored there, else it is managed (the catalog picks the storage)."""

    name: str
    location: str | None = None

    def __str__(self) -> str:
        return self.name


#: A table: a path (str) or a :class:`Table` known by name (needs native Delta).
TableRef = str | Table

_IDENTIFIER = r"(?:[A-Za-z_][A-Za-z0-9_-]*|`(?:[^`]|``)+`)"
_THREE_PART = re.compile(rf"^{_IDENTIFIER}\.{_IDENTIFIER}\.{_IDENTIFIER}$")


def quote_identifier(part: str) -> str:
    """``part`` as one backquoted SQL identifier (backquotes doubled)."""
    return "`" + part.replace("`", "``") + "`"


def _split_name(name: str) -> list[str]:
    parts = re.findall(rf"{_IDENTIFIER}", name)
    return [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]


def table_ref(text: str) -> TableRef:
    """An input table as given on the command line: ``catalog.schema.table`` (exactly three
    dot-separated names, no ``/``) is a catalog table, anything else a path."""
    if "/" not in text and "\\" not in text and _THREE_PART.match(text):
        return Table(".".join(quote_identifier(p) for p in _split_name(text)))
    return text


@dataclass(frozen=True)
class Output:
    """Where a run writes its tables.

    * ``root`` only: each table is the Delta table at ``<root>/<table>`` (paths; works with
      the embedded delta-rs source and with native Delta);
    * ``schema`` (and optionally ``catalog``): each table is written by name as
      ``<catalog>.<schema>.<table>`` (``saveAsTable``, needs native Delta), managed, or
      external at ``<root>/<table>`` when ``root`` is given too.

    The run report (``_run_report.json``) goes under ``root`` when there is one.
    """

    root: str | None = None
    catalog: str | None = None
    schema: str | None = None

    def __post_init__(self) -> None:
        if self.catalog and not self.schema:
            raise ValueError("a catalog needs a schema: give --schema (or output.schema)")
        if not self.root and not self.schema:
            raise ValueError("no output: give --out PATH, or --schema S for catalog tables")

    @property
    def by_name(self) -> bool:
        """Whether the tables are written and read by name (catalog tables)."""
        return bool(self.schema)

    def table(self, name: str) -> TableRef:
        """Where the output table ``name`` is."""
        path = os.path.join(self.root, name) if self.root else None
        if not self.by_name:
            assert path is not None
            return path
        assert self.schema is not None
        parts = [p for p in (self.catalog, self.schema, name) if p]
        return Table(".".join(quote_identifier(p) for p in parts), path)

    def describe(self) -> dict[str, Any]:
        """For the run report: ``path`` (the root), plus ``catalog``/``schema`` by name."""
        out: dict[str, Any] = {"path": self.root}
        if self.by_name:
            out.update(catalog=self.catalog, schema=self.schema)
        return out

    def __str__(self) -> str:
        if not self.by_name:
            return str(self.root)
        where = ".".join(p for p in (self.catalog, self.schema) if p)
        return f"{where} (external tables under {self.root})" if self.root else where


def as_output(out: str | Output) -> Output:
    """An :class:`Output` for a root path or an output already described."""
    return out if isinstance(out, Output) else Output(root=out)


CATALOG_NEEDS_NATIVE = (
    "catalog tables ({what}) need native Delta Lake, and this session has the embedded "
    "delta-rs store, which reads and writes paths only. Either run where Delta Lake is "
    "installed (Databricks; locally `make install` fetches its jars into jars/lib; "
    "spark-submit --jars $(cat jars/lib/classpath) --conf "
    + EXTENSIONS_CONF
    + "="
    + DELTA_EXTENSION
    + " --conf "
    + CATALOG_CONF
    + "="
    + DELTA_CATALOG
    + "), or write paths: drop --catalog/--schema (and output.catalog/"
    "output.schema), give --out PATH, and register the tables later where Delta Lake is "
    "available (CREATE TABLE <name> USING delta LOCATION '<PATH>/<table>')."
)


class NativeDeltaRequiredError(RuntimeError):
    """Tables by name were asked for in a session without native Delta Lake."""


def _require_native(spark: SparkSession, what: str) -> None:
    if storage_mode(spark) != NATIVE:
        raise NativeDeltaRequiredError(CATALOG_NEEDS_NATIVE.format(what=what))


def check_output(spark: SparkSession, out: str | Output) -> Output:
    """The :class:`Output` of ``out``, refused before any work when it names catalog tables
    and the session has no native Delta Lake."""
    output = as_output(out)
    if output.by_name:
        _require_native(spark, f"output {output}")
    return output


def check_input(spark: SparkSession, ref: TableRef) -> None:
    """Refuse, before any work, an input table by name without native Delta Lake."""
    if isinstance(ref, Table):
        _require_native(spark, f"--events {ref}")


def write_run_report(out: str | Output, report: dict[str, Any]) -> str | None:
    """Write ``report`` as ``<root>/_run_report.json``; returns where, or None when the output
    has no root (catalog tables only: the report is only printed).

    The report is the run's last write and names each table's version (``tables``):
    readers read those (:func:`read_output_table`), so it is written whole or not at all
    (a local file is written aside and renamed; an object store's put is atomic)."""
    output = as_output(out)
    if not output.root:
        return None
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    root = output.root
    local = local_path(root)
    if local is not None:
        os.makedirs(local, exist_ok=True)
        target = os.path.join(local, RUN_REPORT)
        aside = f"{target}.{os.getpid()}.tmp"
        with open(aside, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(aside, target)
        return target
    import pyarrow.fs as pa_fs

    fs, base = pa_fs.FileSystem.from_uri(root)
    target = f"{base.rstrip('/')}/{RUN_REPORT}"
    with fs.open_output_stream(target) as stream:
        stream.write(text.encode("utf-8"))
    return f"{root.rstrip('/')}/{RUN_REPORT}"


def read_run_report(out: str | Output) -> dict[str, Any] | None:
    """The last complete run's report under the output's root (None: no root, no report,
    or one that cannot be read)."""
    output = as_output(out)
    if not output.root:
        return None
    try:
        local = local_path(output.root)
        if local is not None:
            with open(os.path.join(local, RUN_REPORT), encoding="utf-8") as fh:
                text = fh.read()
        else:
            import pyarrow.fs as pa_fs

            fs, base = pa_fs.FileSystem.from_uri(output.root)
            with fs.open_input_stream(f"{base.rstrip('/')}/{RUN_REPORT}") as stream:
                text = stream.read().decode("utf-8")
        report = json.loads(text)
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def record_run(spark: SparkSession, out: str | Output, report: dict[str, Any]) -> None:
    """Catalog tables (an output written by name): append the run's record to the table
    ``_runs`` of the output's schema, as the run's last write. Its ``tables`` column names
    each table's Delta version as the run left it, which readers by name read
    (:func:`run_versions`), so catalog users see whole runs as path users do through
    ``_run_report.json``. Outputs by path keep only the JSON report."""
    output = as_output(out)
    if not output.by_name:
        return
    import datetime

    tables = report.get("tables") or {}
    row = (
        datetime.datetime.now(datetime.UTC),
        report.get("as_of_seq"),
        report.get("as_of_ms"),
        {str(k): int(v) for k, v in tables.items()},
        json.dumps(report, sort_keys=True, default=str),
    )
    record = spark.createDataFrame([row], RUNS_SCHEMA)
    write_table(record, output.table(RUNS_TABLE), "append")


def _recorded_versions(spark: SparkSession, output: Output) -> dict[str, Any]:
    """The ``tables`` of the newest row of the output's ``_runs`` table ({} when none)."""
    from pyspark.sql import functions as F

    runs = output.table(RUNS_TABLE)
    assert isinstance(runs, Table)
    _require_native(spark, str(runs))
    if not spark.catalog.tableExists(runs.name):
        return {}
    newest = read_table(spark, runs).orderBy(F.col("finished_at").desc()).first()
    return dict(newest["tables"] or {}) if newest is not None else {}


def run_versions(out: str | Output, spark: SparkSession | None = None) -> dict[str, int]:
    """Each table's Delta version as the last complete run left it: what readers read, so
    a run killed between two table writes is never seen half-written. From the run report
    under the output's root; for catalog tables without a root, from the newest row of
    ``_runs`` (:func:`record_run`; needs ``spark``). Empty when no record names them (a
    report from before they were recorded: the latest versions)."""
    output = as_output(out)
    if output.root:
        tables = (read_run_report(output) or {}).get("tables")
    elif spark is not None:
        tables = _recorded_versions(spark, output)
    else:
        tables = None
    if not isinstance(tables, dict):
        return {}
    return {str(k): int(v) for k, v in tables.items() if isinstance(v, int)}


# --------------------------------------------------------------------------- read / write


def read_table(spark: SparkSession, path: TableRef, version: int | None = None) -> DataFrame:
    """The Delta table at ``path`` (its snapshot at ``version`` when given: reading it
    again later gives the same rows, whatever was written since). A :class:`Table` is read
    by name (native Delta only)."""
    if isinstance(path, Table):
        _require_native(spark, str(path))
        if version is None:
            return spark.read.table(path.name)
        return spark.sql(f"SELECT * FROM {path.name} VERSION AS OF {int(version)}")
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    return reader.load(path)


def write_table(
    df: DataFrame,
    path: TableRef,
    mode: str = "overwrite",
    *,
    txn_app_id: str | None = None,
    txn_version: int | None = None,
    overwrite_schema: bool = False,
) -> None:
    """Write ``df`` as the Delta table at ``path`` (one commit).

    ``txn_app_id``/``txn_version`` make the write idempotent (skipped when ``txn_version`` is
    not greater than the one recorded for ``txn_app_id``); ``overwrite_schema`` lets an
    overwrite replace the table schema. Modes: overwrite, append, errorifexists/error, ignore.
    A :class:`Table` is written by name with ``saveAsTable`` (native Delta only; external at
    its ``location`` when it has one, managed otherwise).
    """
    save_mode = _SAVE_MODES.get(mode.lower())
    if save_mode is None:
        raise ValueError(f"unknown save mode {mode!r}; expected one of {sorted(_SAVE_MODES)}")
    if (txn_app_id is None) != (txn_version is None):
        raise ValueError("txn_app_id and txn_version must be given together")
    options: dict[str, str] = {}
    if txn_app_id is not None and txn_version is not None:
        options.update(txnAppId=txn_app_id, txnVersion=str(txn_version))
    if overwrite_schema:
        options["overwriteSchema"] = "true"
    spark = df.sparkSession
    if isinstance(path, Table):
        _require_native(spark, str(path))
        writer = df.write.format(TABLE_FORMAT).mode(save_mode)
        for key, value in options.items():
            writer = writer.option(key, value)
        if path.location:
            writer = writer.option("path", path.location)
        writer.saveAsTable(path.name)
        return
    if storage_mode(spark) == EMBEDDED:
        if save_mode in ("errorifexists", "ignore"):
            # Python data sources only take append/overwrite: apply Spark's rule here.
            if table_exists(spark, path):
                if save_mode == "ignore":
                    return
                raise FileExistsError(
                    f"Delta table already exists at {path} (mode 'errorifexists'); "
                    "use mode 'overwrite' or 'append'."
                )
            save_mode = "append"
        if _embedded_preflight_skips(df, path, save_mode == "overwrite", options):
            return
    writer = df.write.format("delta").mode(save_mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(path)


def _embedded_preflight_skips(
    df: DataFrame, path: str, overwrite: bool, options: dict[str, str]
) -> bool:
    """Run the embedded writer's driver checks before any task: raises the plain error
    (schema mismatch, unsupported table) and says whether the txn rule skips the write."""
    from pelengine.storage.embedded import DeltaWriter, normalize_table_uri

    return DeltaWriter(normalize_table_uri(path), df.schema, overwrite, options).skip


# --------------------------------------------------------------------------- table facts


def table_path(root: str | Output, name: str) -> TableRef:
    """Where the table ``name`` of an output lives: ``<root>/<name>`` for a root path, the
    catalog table for an :class:`Output` written by name."""
    return as_output(root).table(name)


def read_output_table(
    spark: SparkSession, root: str | Output, name: str, versions: dict[str, int] | None = None
) -> DataFrame:
    """The table ``name`` of the output root ``root`` at the version the last complete run
    left it (:func:`run_versions`; ``versions`` when the caller read them already, so that
    every table it reads comes from one run); FileNotFoundError naming both when there is
    no table."""
    path = table_path(root, name)
    if not table_exists(spark, path):
        raise FileNotFoundError(
            f"no {name} table under --out {root} (expected at {path}; written by "
            "pelengine reconstruct)"
        )
    version = (run_versions(root, spark) if versions is None else versions).get(name)
    return read_table(spark, path, version)


def table_versions(spark: SparkSession, path: TableRef, limit: int | None = None) -> list[int]:
    """Versions of the table at ``path`` its Delta history lists, newest first (at most
    ``limit``); empty when there is no table. Versions whose files were vacuumed may be
    listed yet no longer readable."""
    if isinstance(path, str) and storage_mode(spark) == EMBEDDED:
        from pelengine.storage.embedded import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        if table is None:
            return []
        versions = sorted(
            {int(h["version"]) for h in table.history(limit) if h.get("version") is not None},
            reverse=True,
        )
        return versions[:limit] if limit is not None else versions
    from pyspark.errors import AnalysisException

    quoted = path.name if isinstance(path, Table) else "delta.`" + path.replace("`", "``") + "`"
    query = f"DESCRIBE HISTORY {quoted}" + (f" LIMIT {int(limit)}" if limit else "")
    try:
        rows = spark.sql(query).select("version").collect()
    except AnalysisException:
        return []
    return sorted((int(r["version"]) for r in rows), reverse=True)


def _local_log_version(path: str) -> int | None | bool:
    """The newest commit of the Delta table at a local ``path``, from its ``_delta_log``
    listing (every commit is one ``<version>.json`` file; checkpoints never replace the
    newest): None when there is no table, False when ``path`` is not local (ask Delta)."""
    local = local_path(path)
    if local is None:
        return False
    try:
        names = os.listdir(os.path.join(local, "_delta_log"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    versions = [
        int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
    ]
    return max(versions) if versions else None


def table_version(spark: SparkSession, path: TableRef) -> int | None:
    """Current Delta version of the table at ``path``; None if there is no table. A local
    path is answered from its log's listing (either store: no Spark job), a table by name
    and a remote path by Delta (``DESCRIBE HISTORY``, native; delta-rs, embedded)."""
    if isinstance(path, Table):
        _require_native(spark, str(path))
        if not spark.catalog.tableExists(path.name):
            return None
        rows = spark.sql(f"DESCRIBE HISTORY {path.name} LIMIT 1").collect()
        return int(rows[0]["version"]) if rows else None
    listed = _local_log_version(path)
    if listed is not False:
        return listed
    if storage_mode(spark) == EMBEDDED:
        from pelengine.storage.embedded import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        return table.version() if table is not None else None
    from pyspark.errors import AnalysisException

    quoted = path.replace("`", "``")
    try:
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{quoted}` LIMIT 1").collect()
    except AnalysisException:
        return None
    return int(rows[0]["version"]) if rows else None


def table_row_count(spark: SparkSession, path: TableRef) -> int:
    """Rows of the current version of the table at ``path``: from the Delta log's file
    statistics where they are all there and no file has deletion vectors (a path, read by
    delta-rs whichever store wrote it), otherwise by reading the table."""
    if isinstance(path, str) and (storage_mode(spark) == EMBEDDED or local_path(path) is not None):
        counted = _rows_from_log(path)
        if counted is not None:
            return counted
    return read_table(spark, path).count()


def _rows_from_log(path: str) -> int | None:
    import pyarrow as pa

    from pelengine.storage.embedded import normalize_table_uri, open_table

    try:
        table = open_table(normalize_table_uri(path))
        if table is None:
            return None
        actions = pa.table(table.get_add_actions(flatten=True))
    except Exception:  # a protocol delta-rs does not read: let Delta count
        return None
    if "num_records" not in actions.column_names:
        return None
    counts = actions.column("num_records")
    dv = [c for c in actions.column_names if c.startswith("deletionVector")]
    if counts.null_count or any(actions.column(c).null_count < len(actions) for c in dv):
        return None
    return int(sum(counts.to_pylist()))


def table_exists(spark: SparkSession, path: TableRef) -> bool:
    """Whether a Delta table exists at ``path``."""
    return table_version(spark, path) is not None


# --------------------------------------------------------------------------- what changed


@dataclass(frozen=True)
class TableChanges:
    """What the commits after version ``since`` up to ``until`` did to a table, from its
    Delta log: the data files the newer snapshot holds that the older did not (``added``)
    and the reverse (``removed``). An append only adds; a DELETE, UPDATE, MERGE, OPTIMIZE or
    overwrite removes the files it rewrote and adds their new versions. ``change_feed``:
    native Delta with the change data feed on, whose inserted and deleted rows are read
    instead of files."""

    since: int
    until: int
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    change_feed: bool = False


def table_changes(
    spark: SparkSession, ref: TableRef, since: int, until: int
) -> TableChanges | None:
    """The files versions ``since+1 .. until`` of the table added and removed, or None when
    the log cannot say: the older version is no longer in the log (log retention), the
    table uses deletion vectors (a row-level delete leaves the file in place), or the
    versions do not follow each other."""
    if since >= until:
        return None
    if isinstance(ref, str) and storage_mode(spark) == EMBEDDED:
        from pelengine.storage.embedded import normalize_table_uri, snapshot_files

        uri = normalize_table_uri(ref)
        try:
            old, new = snapshot_files(uri, since), snapshot_files(uri, until)
        except Exception:
            return None
        if old is None or new is None:
            return None
        return TableChanges(since, until, tuple(sorted(new - old)), tuple(sorted(old - new)))
    return _native_changes(spark, ref, since, until)


def _native_changes(
    spark: SparkSession, ref: TableRef, since: int, until: int
) -> TableChanges | None:
    """Native Delta: the change data feed where the table has it on, else the snapshots'
    file lists (``inputFiles``) unless deletion vectors are on."""
    name = ref.name if isinstance(ref, Table) else "delta.`" + ref.replace("`", "``") + "`"
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
        properties = dict(detail["properties"] or {}) if detail is not None else {}
        if str(properties.get("delta.enableChangeDataFeed", "")).lower() == "true":
            return TableChanges(since, until, change_feed=True)
        features = set(detail["tableFeatures"] or []) if detail is not None else set()
        if (
            "deletionVectors" in features
            or str(properties.get("delta.enableDeletionVectors", "")).lower() == "true"
        ):
            return None
        old = set(read_table(spark, ref, since).inputFiles())
        new = set(read_table(spark, ref, until).inputFiles())
    except Exception:
        return None
    return TableChanges(since, until, tuple(sorted(new - old)), tuple(sorted(old - new)))


def read_table_files(
    spark: SparkSession, ref: TableRef, version: int, files: tuple[str, ...]
) -> DataFrame:
    """The rows of ``files`` (as :func:`table_changes` names them) of the snapshot at
    ``version``; no rows for no files."""
    if isinstance(ref, str) and storage_mode(spark) == EMBEDDED:
        return (
            spark.read.format("delta")
            .option("versionAsOf", str(version))
            .option(FILES_OPTION, json.dumps(list(files)))
            .load(ref)
        )
    from pyspark.sql import functions as F

    table = read_table(spark, ref, version)
    if not files:
        return table.limit(0)
    return table.where(F.col("_metadata.file_path").isin(list(files)))


def read_change_feed(
    spark: SparkSession, ref: TableRef, changes: TableChanges
) -> tuple[DataFrame, DataFrame]:
    """(rows inserted, rows deleted) by the commits of ``changes`` from native Delta's change
    data feed (an update is its post-image inserted and its pre-image deleted)."""
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", str(changes.since + 1))
        .option("endingVersion", str(changes.until))
    )
    feed = reader.table(ref.name) if isinstance(ref, Table) else reader.load(ref)
    kind = F.col("_change_type")
    drop = ("_change_type", "_commit_version", "_commit_timestamp")
    inserted = feed.where(kind.isin("insert", "update_postimage")).drop(*drop)
    deleted = feed.where(kind.isin("delete", "update_preimage")).drop(*drop)
    return inserted, deleted
