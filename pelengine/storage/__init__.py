"""The storage seam: the one module that knows paths and Delta Lake.

Job code reads with ``spark.read.format("delta").load(path)`` and writes with
``df.write.format("delta").mode(m).option(...).save(path)`` (or the helpers below). With
delta-spark on the classpath (Databricks; delta-spark's jars, which ``make install``
fetches and :mod:`pelengine.storage.jars` gives the sessions the project builds) those calls
go to it unchanged; otherwise :func:`install_storage` registers an embedded Python data
source named ``delta`` backed by delta-rs (:mod:`pelengine.storage.embedded`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pelengine.settings import DELTA_SPARK as DELTA_SPARK
from pelengine.settings import EMBEDDED as EMBEDDED
from pelengine.storage.deltalog import DataFile as DataFile
from pelengine.storage.deltalog import TableState as TableState
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

MODE_CONF = "pelengine.storage.mode"
#: why the session has the store it has (the run report's ``storage_reason``)
REASON_CONF = "pelengine.storage.reason"
DELTA_SOURCE_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"
#: the Maven coordinate of delta-spark for this project's pins (pyspark 4.2.0,
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
    """The session has delta-spark's classes but not the rest it needs (or was given
    its jars too late): never answered by falling back to the embedded store."""


def on_databricks() -> bool:
    """Whether this process runs on Databricks (a job task, classic or serverless)."""
    return bool(os.environ.get("DATABRICKS_RUNTIME_VERSION"))


def is_remote_session(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (Databricks serverless and standard access
    mode among them): no py4j gateway, no ``sparkContext``."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def persist_where_allowed(df: DataFrame) -> DataFrame | None:
    """``df`` persisted, or None where the platform refuses caching (Databricks serverless,
    a Spark Connect platform: ``NOT_SUPPORTED_WITH_SERVERLESS``); the caller then uses ``df``
    as it is (recomputed when used again) and has nothing to unpersist. Spark Connect
    servers of open-source Spark cache as classic sessions do."""
    try:
        return df.persist()
    except Exception as exc:
        if "NOT_SUPPORTED_WITH_SERVERLESS" not in str(exc):
            raise
        return None


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


#: a table function Delta Lake's SQL extension registers in every session it extends
DELTA_TABLE_FUNCTION = "table_changes"


def probe_connect_delta(spark: SparkSession) -> bool | None:
    """Spark Connect (no py4j): whether the server's sessions have Delta Lake's SQL
    extension loaded, i.e. its table functions (``table_changes``) exist: asked through the
    catalog, without a job or an error on the server. False for a server without Delta
    (or with the extension or catalog configured and its jars missing: then the lookup
    itself fails to load Delta's catalog class); None when it cannot be asked."""
    try:
        return bool(spark.catalog.functionExists(DELTA_TABLE_FUNCTION))
    except Exception as exc:
        text = str(exc)
        missing = "ClassNotFoundException" in text or "Cannot find catalog plugin class" in text
        return False if missing else None


def _conf(spark: SparkSession, key: str) -> str:
    try:
        return str(spark.conf.get(key, "") or "")
    except Exception:
        return ""


@dataclass(frozen=True)
class SessionFacts:
    """What decides the store, read off a running session: whether the JVM loads Delta's
    data source (None: cannot be asked), the SQL extensions, the session catalog, and the
    jars and packages it was given; ``remote``: a Spark Connect session (the server's
    confs, read over Connect, and in place of the JVM probe whether the server's sessions
    have Delta's extension loaded: :func:`probe_connect_delta`)."""

    has_delta_class: bool | None
    extensions: str = ""
    catalog: str = ""
    jars: str = ""
    remote: bool = False

    @classmethod
    def of(cls, spark: SparkSession) -> SessionFacts:
        jars = ",".join(_conf(spark, k) for k in ("spark.jars", "spark.jars.packages"))
        remote = is_remote_session(spark)
        return cls(
            probe_connect_delta(spark) if remote else probe_jvm_delta(spark),
            _conf(spark, EXTENSIONS_CONF),
            _conf(spark, CATALOG_CONF),
            jars,
            remote,
        )


#: Why a Spark Connect server without delta-spark is refused rather than served by
#: the embedded store: it is a Python data source, so over Connect its readers, writers
#: and commits would run in the server's Python processes, while this client reads the same
#: tables' Delta logs itself; nothing the client can set up or check. (It was seen to work
#: only where client and server share one machine, one filesystem and one Python.)
CONNECT_NEEDS_DELTA_SPARK = (
    "this Spark Connect server {what}, and the embedded delta-rs store is not "
    "offered over Spark Connect (its reads, writes and commits would run in the server's "
    "Python processes, which this client can neither provide nor check). Start the server "
    "with Delta Lake: spark-submit --class "
    "org.apache.spark.sql.connect.service.SparkConnectServer --jars <delta-spark's jars: "
    "$(cat jars/lib/classpath) after `make install`, or --packages "
    + DELTA_PACKAGE
    + ") --conf "
    + EXTENSIONS_CONF
    + "="
    + DELTA_EXTENSION
    + " --conf "
    + CATALOG_CONF
    + "="
    + DELTA_CATALOG
    + "; or run without Spark Connect (unset SPARK_REMOTE and spark.remote)"
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
    """(delta-spark or embedded, why) for a session with ``facts``; ``register`` installs the
    embedded source (may raise). ``why`` is what the session builder knew (where the jars
    came from, or why there were none).

    delta-spark wherever its classes are: a loadable class (on Spark Connect: the Delta
    extension loaded in the server's sessions), or where that cannot be asked the Delta
    extension configured. With
    the classes, the extension and catalog must be configured too; Delta's jars given but
    its classes missing means they came after the JVM started. Both are errors, never a
    fall back to the embedded store. A Spark Connect server without delta-spark is refused
    (:data:`CONNECT_NEEDS_DELTA_SPARK`): the embedded store is not offered over Connect."""
    if facts.has_delta_class is False and "delta-spark" in facts.jars and not facts.remote:
        raise StorageSetupError(
            "this session was given delta-spark's jars (spark.jars or spark.jars.packages) "
            "but its JVM cannot load Delta Lake's classes: the jars came after the JVM "
            "started (a Spark session already running in this process, or a conf set on a "
            "running session). Give them when the JVM starts: spark-submit --jars, or the "
            "first session's builder"
        )
    delta_spark = facts.has_delta_class or (
        facts.has_delta_class is None and DELTA_EXTENSION in facts.extensions
    )
    if delta_spark:
        missing = _delta_setup_missing(facts)
        if missing:
            build = "start the Spark Connect server" if facts.remote else "build the session"
            raise StorageSetupError(
                "Delta Lake's classes are on this session's classpath but "
                + " and ".join(missing)
                + f": {build} with --conf {EXTENSIONS_CONF}={DELTA_EXTENSION} "
                f"--conf {CATALOG_CONF}={DELTA_CATALOG} (pelengine will not write a Delta "
                "table through the embedded store while delta-spark is present)"
            )
        connect = facts.remote or facts.has_delta_class is None
        where = "this Spark Connect server has" if connect else "has"
        reason = f"Delta Lake on the JVM: the session {where} delta-spark's classes"
        return DELTA_SPARK, reason + (f" ({why})" if why else "")
    if facts.remote:
        if DELTA_EXTENSION in facts.extensions:
            what = (
                f"lists {DELTA_EXTENSION} in {EXTENSIONS_CONF} but its sessions do not have "
                f"it (no {DELTA_TABLE_FUNCTION} function): Delta Lake's jars are missing there"
            )
        else:
            what = f"has no Delta Lake ({EXTENSIONS_CONF} does not list {DELTA_EXTENSION})"
        raise StorageSetupError(CONNECT_NEEDS_DELTA_SPARK.format(what=what))
    try:
        register()
    except Exception as exc:
        if _is_already_exists(exc):
            return DELTA_SPARK, "Delta Lake on the JVM: a delta data source is already registered"
        raise RuntimeError(
            f"No delta-spark found and the embedded delta data source could not be "
            f"registered: {exc}"
        ) from exc
    reason = "embedded delta-rs store: no delta-spark classes on the classpath"
    return EMBEDDED, reason + (f" ({why})" if why else "")


def _is_already_exists(exc: BaseException) -> bool:
    text = str(exc)
    return "DATA_SOURCE_ALREADY_EXISTS" in text or "already exists" in text.lower()


def install_storage(spark: SparkSession, why: str = "") -> str:
    """Make ``format("delta")`` work in this session; returns "delta-spark" or "embedded", and
    records it and why (:func:`storage_reason`). ``why``: what the session builder knew
    (:func:`pelengine.storage.jars.session_conf`).

    On Databricks Delta Lake is the platform's own: delta-spark, without probing (no ``_jvm``, no
    data source registration: neither exists on serverless)."""
    current = _installed_mode(spark)
    if current is not None:
        return current

    if on_databricks():
        mode, reason = DELTA_SPARK, "Delta Lake on the JVM: the Databricks runtime's own"
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
    return value if value in (DELTA_SPARK, EMBEDDED) else None


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


#: A table: a path (str) or a :class:`Table` known by name (needs delta-spark).
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
      the embedded delta-rs source and with delta-spark);
    * ``schema`` (and optionally ``catalog``): each table is written by name as
      ``<catalog>.<schema>.<table>`` (``saveAsTable``, needs delta-spark), managed, or
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


CATALOG_NEEDS_DELTA_SPARK = (
    "catalog tables ({what}) need delta-spark, and this session has the embedded "
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


class DeltaSparkRequiredError(RuntimeError):
    """Tables by name were asked for in a session without delta-spark."""


class CatalogNameError(RuntimeError):
    """Tables by name in a catalog or schema the session does not have: refused before any
    work (a run never creates a schema; Spark's own ``saveAsTable`` would fail the same
    way, but only after the whole replay)."""


def _require_delta_spark(spark: SparkSession, what: str) -> None:
    if storage_mode(spark) != DELTA_SPARK:
        raise DeltaSparkRequiredError(CATALOG_NEEDS_DELTA_SPARK.format(what=what))


def _missing_namespace(spark: SparkSession, catalog: str | None, schema: str) -> str | None:
    """Why the session cannot write or read tables in ``[catalog.]schema`` (one clause), or
    None when the schema exists."""
    from pyspark.errors import AnalysisException

    name = ".".join(quote_identifier(p) for p in (catalog, schema) if p)
    try:
        if spark.catalog.databaseExists(name):
            return None
    except AnalysisException:
        pass
    if catalog:
        try:
            catalogs = sorted(c.name for c in spark.catalog.listCatalogs())
        except Exception:
            catalogs = []
        if catalogs and catalog not in catalogs:
            return (
                f"this session has no catalog {catalog} (it has {', '.join(catalogs)}): name "
                f"one it has, or run where {catalog} exists (on Databricks a Unity Catalog "
                f"catalog, elsewhere one configured with spark.sql.catalog.{catalog})"
            )
    return (
        f"there is no schema {name}, and pelengine does not create schemas: create it first "
        f"(CREATE SCHEMA {name}, with the LOCATION or MANAGED LOCATION its managed tables "
        "should use), or name an existing one"
    )


def check_output(spark: SparkSession, out: str | Output) -> Output:
    """The :class:`Output` of ``out``, refused before any work when it names catalog tables
    and the session has no delta-spark, or no such schema (:class:`CatalogNameError`:
    a run does not create the schema, as ``saveAsTable`` does not)."""
    output = as_output(out)
    if output.by_name:
        _require_delta_spark(spark, f"output {output}")
        assert output.schema is not None
        missing = _missing_namespace(spark, output.catalog, output.schema)
        if missing is not None:
            raise CatalogNameError(f"output {output}: {missing}")
    return output


def check_input(spark: SparkSession, ref: TableRef) -> None:
    """Refuse, before any work, an input table by name without delta-spark, or in a
    catalog or schema the session does not have."""
    if isinstance(ref, Table):
        _require_delta_spark(spark, f"--events {ref}")
        parts = _split_name(ref.name)
        if len(parts) == 3:
            missing = _missing_namespace(spark, parts[0], parts[1])
            if missing is not None:
                raise CatalogNameError(f"--events {'.'.join(parts)}: {missing}")


# --------------------------------------------------------------------------- conflicts

#: Delta Lake's exceptions for a commit that another writer's commit made impossible
#: (``io.delta.exceptions.*``), and their error classes (what Spark Connect, Databricks'
#: serverless among them, may carry alone)
_DELTA_CONFLICT = re.compile(
    r"\b(Concurrent(?:Append|DeleteRead|DeleteDelete|Transaction|Write)Exception"
    r"|MetadataChangedException|ProtocolChangedException)\b"
)
_DELTA_CONFLICT_CLASS = re.compile(
    r"\b(DELTA_CONCURRENT_(?:APPEND|DELETE_READ|DELETE_DELETE|TRANSACTION|WRITE)"
    r"|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED)\b"
)


class ConcurrentWriteError(RuntimeError):
    """Delta Lake refused a commit of this run: another writer committed to the same table
    since this run's write began (two runs on one output without a lease: catalog tables
    without a root). One sentence naming the table; the Delta exception is its cause."""

    def __init__(self, table: str, conflict: str) -> None:
        self.table = table
        self.conflict = conflict
        super().__init__(
            f"another run committed to {table} while this run was writing it, so Delta Lake "
            f"refused this run's commit ({conflict}); readers still see the last complete run: "
            "run again once the other run has finished, and keep to one run per output at a "
            "time (catalog tables without --out have no run lease: give --out as well, or "
            "schedule one run at a time)"
        )


def delta_conflict(exc: BaseException) -> str | None:
    """The name of the Delta Lake conflict exception (or error class) ``exc`` is or was
    caused by, whatever wraps it (py4j, PySpark, Spark Connect); None for any other error."""
    texts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(texts) < 20:
        texts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    for pattern in (_DELTA_CONFLICT, _DELTA_CONFLICT_CLASS):
        for text in texts:
            match = pattern.search(text)
            if match:
                return match.group(1)
    return None


def concurrent_write_error(
    exc: BaseException, table: str | None = None
) -> ConcurrentWriteError | None:
    """``exc`` as a :class:`ConcurrentWriteError` on ``table`` when it is (or was caused
    by) a Delta Lake conflict; None otherwise."""
    if isinstance(exc, ConcurrentWriteError):
        return exc
    conflict = delta_conflict(exc)
    if conflict is None:
        return None
    return ConcurrentWriteError(table or "a Delta table of this run", conflict)


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
    _require_delta_spark(spark, str(runs))
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
    by name (delta-spark only)."""
    if isinstance(path, Table):
        _require_delta_spark(spark, str(path))
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
    A :class:`Table` is written by name with ``saveAsTable`` (delta-spark only; external at
    its ``location`` when it has one, managed otherwise). A commit Delta Lake refuses because
    another writer committed to the table meanwhile raises :class:`ConcurrentWriteError`.
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
        _require_delta_spark(spark, str(path))
        writer = df.write.format(TABLE_FORMAT).mode(save_mode)
        for key, value in options.items():
            writer = writer.option(key, value)
        if path.location:
            writer = writer.option("path", path.location)
        try:
            writer.saveAsTable(path.name)
        except Exception as exc:
            _raise_conflict(exc, str(path))
            raise
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
    try:
        writer.save(path)
    except Exception as exc:
        _raise_conflict(exc, path)
        raise


def _raise_conflict(exc: BaseException, table: str) -> None:
    """Raise :class:`ConcurrentWriteError` (from ``exc``) when ``exc`` is a Delta Lake
    conflict on ``table``; return otherwise (the caller re-raises ``exc``)."""
    conflict = concurrent_write_error(exc, table)
    if conflict is not None:
        raise conflict from exc


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
    and a remote path by Delta (``DESCRIBE HISTORY``, delta-spark; delta-rs, embedded)."""
    if isinstance(path, Table):
        _require_delta_spark(spark, str(path))
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


class ChangesUnknownError(Exception):
    """What a range of a table's versions did cannot be told from its log; the message says
    why (for the run report)."""


@dataclass(frozen=True)
class TableChanges:
    """What the commits after version ``since`` up to ``until`` did to a table, and which
    rows to read to know it.

    ``added``/``removed``: the data files the newer snapshot holds that the older did not and
    the reverse, each known by its path and deletion vector. An append only adds; a DELETE,
    UPDATE, MERGE, OPTIMIZE or overwrite removes the files it rewrote and adds their new
    versions; with deletion vectors a row-level change removes a file with one vector and
    adds it back with another.

    The rows to compare: those of ``read_new`` at ``until`` with those of ``read_old`` at
    ``since`` (None: no row can be gone: appends, and rewrites that change no data such as
    OPTIMIZE, which are not read at all), or with ``change_feed`` delta-spark's change
    data feed. ``how``: ``commit files`` (the Delta log read as files: local paths),
    ``spark snapshots`` (Delta through Spark: tables by name, paths this process cannot
    read) or ``delta-rs snapshots`` (the embedded store, such paths). ``note``: what else
    the report should say. ``state_new``/``state_old``: the table's metadata and protocol
    at both ends (from the log)."""

    since: int
    until: int
    added: tuple[DataFile, ...] = ()
    removed: tuple[DataFile, ...] = ()
    change_feed: bool = False
    read_new: tuple[DataFile, ...] = ()
    read_old: tuple[DataFile, ...] | None = None
    how: str = "commit files"
    note: str = ""
    state_new: TableState | None = None
    state_old: TableState | None = None

    @property
    def files_read(self) -> int:
        return len(self.read_new) + len(self.read_old or ())


def expected_rows(files: tuple[DataFile, ...] | None) -> int | None:
    """The rows ``files`` hold by the log's statistics (None: some file has none)."""
    counts = [f.rows for f in files or ()]
    return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


def table_changes(spark: SparkSession, ref: TableRef, since: int, until: int) -> TableChanges:
    """What versions ``since+1 .. until`` of the table did (:class:`TableChanges`), from its
    Delta log read as files for a local path (either store), else from Delta through Spark
    (delta-spark) or delta-rs' snapshots (embedded). ChangesUnknownError, saying why, when the log
    cannot tell: a commit of the range is no longer in the log (log retention), a file
    the range removed is gone (vacuumed), or (Spark's route) deletion vectors are on."""
    if since >= until:
        raise ChangesUnknownError(f"events version {until} does not follow {since}")
    local = local_path(ref) if isinstance(ref, str) else None
    if local is not None:
        from pelengine.storage.deltalog import has_log

        table_dir = os.path.abspath(local)
        if has_log(table_dir):
            return _log_changes(spark, table_dir, since, until)
    if isinstance(ref, str) and storage_mode(spark) == EMBEDDED:
        return _embedded_changes(ref, since, until)
    return _delta_spark_changes(spark, ref, since, until)


def _log_changes(spark: SparkSession, table_dir: str, since: int, until: int) -> TableChanges:
    """:func:`table_changes` from the commit files of a local table (no Spark job).

    Appends and data-preserving rewrites (OPTIMIZE: ``dataChange`` false) only: the rows are
    those of the files the commits added rows with, nothing else is read. When a commit
    removed rows (DELETE, UPDATE, MERGE, overwrite), or a file added with rows was rewritten
    again within the range: on delta-spark with the change data feed on for every commit
    of the range, the feed (only the changed rows: files written for it, or the difference
    of two deletion vectors); otherwise every file added against every file removed."""
    from pelengine.storage.deltalog import LogUnreadableError, gone_files, read_changes, spans

    try:
        log = read_changes(table_dir, since, until)
    except LogUnreadableError as exc:
        raise ChangesUnknownError(str(exc)) from None
    versions = f"{since + 1}..{until}"
    gone = gone_files(table_dir, log.removed)
    if gone:
        raise ChangesUnknownError(
            f"{len(gone)} file(s) that events versions {versions} removed are gone from "
            f"storage (vacuumed), {gone[0]} among them: the rows they held cannot be compared"
        )
    embedded = storage_mode(spark) == EMBEDDED
    if embedded:
        from pelengine.storage.embedded import SCAN_ONLY_FEATURES

        uses: set[str] = set()
        for state in (log.state_since, log.state_until):
            if state is not None:
                uses |= state.reader_features & SCAN_ONLY_FEATURES
                if state.column_mapping:
                    uses.add("columnMapping")
        if uses and (log.added or log.removed):
            raise ChangesUnknownError(
                f"the table uses {', '.join(sorted(uses))}, and the embedded store reads "
                "such tables whole, not file by file"
            )
    base = TableChanges(
        since,
        until,
        log.added,
        log.removed,
        state_new=log.state_until,
        state_old=log.state_since,
    )
    if not log.rows_removed and log.appends_kept:
        return replace(base, read_new=tuple(f for f in log.added if f.data_change))
    if not embedded and log.rows_removed and not log.feed_off:
        return replace(base, change_feed=True)
    note = ""
    if not embedded and log.rows_removed and len(log.feed_off) < until - since:
        note = f"the change data feed was off for events versions {spans(log.feed_off)}"
    return replace(base, read_new=log.added, read_old=log.removed or None, note=note)


def _embedded_changes(ref: str, since: int, until: int) -> TableChanges:
    """The embedded store, a table this process cannot read as files (an object store):
    delta-rs' snapshots' file lists."""
    from pelengine.storage.embedded import normalize_table_uri, snapshot_files

    uri = normalize_table_uri(ref)
    try:
        old, new = snapshot_files(uri, since), snapshot_files(uri, until)
    except Exception as exc:
        raise ChangesUnknownError(
            f"delta-rs could not list the files of version {since} or {until}: {_first_line(exc)}"
        ) from None
    if old is None or new is None:
        raise ChangesUnknownError(
            f"delta-rs cannot list versions {since} and {until} file by file (a version "
            "is no longer in the log, or the table uses deletion vectors)"
        )
    added = tuple(DataFile(p) for p in sorted(new - old))
    removed = tuple(DataFile(p) for p in sorted(old - new))
    return TableChanges(
        since,
        until,
        added,
        removed,
        read_new=added,
        read_old=removed or None,
        how="delta-rs snapshots",
    )


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _delta_spark_changes(
    spark: SparkSession, ref: TableRef, since: int, until: int
) -> TableChanges:
    """delta-spark through Spark (a table by name, a path this process cannot read): the
    change data feed where the table has it on now, else the snapshots' file lists
    (``inputFiles``), which cannot see row-level changes when deletion vectors are on."""
    from pelengine.storage.deltalog import hadoop_uri

    name = ref.name if isinstance(ref, Table) else "delta.`" + ref.replace("`", "``") + "`"
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
        properties = dict(detail["properties"] or {}) if detail is not None else {}
        if str(properties.get("delta.enableChangeDataFeed", "")).lower() == "true":
            return TableChanges(since, until, change_feed=True, how="spark snapshots")
        features = set(detail["tableFeatures"] or []) if detail is not None else set()
        if (
            "deletionVectors" in features
            or str(properties.get("delta.enableDeletionVectors", "")).lower() == "true"
        ):
            raise ChangesUnknownError(
                "deletion vectors are on and the table's Delta log cannot be read as files "
                "here (a table by name, or a path elsewhere): Spark's file lists do not "
                "show a row-level delete"
            )
        old = {hadoop_uri(p) for p in read_table(spark, ref, since).inputFiles()}
        new = {hadoop_uri(p) for p in read_table(spark, ref, until).inputFiles()}
    except ChangesUnknownError:
        raise
    except Exception as exc:
        raise ChangesUnknownError(
            f"Delta could not list the files of versions {since} and {until}: {_first_line(exc)}"
        ) from None
    added = tuple(DataFile(p) for p in sorted(new - old))
    removed = tuple(DataFile(p) for p in sorted(old - new))
    return TableChanges(
        since,
        until,
        added,
        removed,
        read_new=added,
        read_old=removed or None,
        how="spark snapshots",
    )


def read_changes(
    spark: SparkSession, ref: TableRef, changes: TableChanges
) -> tuple[DataFrame, DataFrame | None]:
    """(the rows to count as added, the rows to count as removed or None when no row can be
    gone) for ``changes``: the change data feed's, or the files'."""
    if changes.change_feed:
        return read_change_feed(spark, ref, changes)
    new = read_table_files(spark, ref, changes.until, changes.read_new, changes.state_new)
    if changes.read_old is None:
        return new, None
    old = read_table_files(spark, ref, changes.since, changes.read_old, changes.state_old)
    return new, old


def read_table_files(
    spark: SparkSession,
    ref: TableRef,
    version: int,
    files: Sequence[DataFile | str],
    state: TableState | None = None,
) -> DataFrame:
    """The rows of ``files`` (as :func:`table_changes` names them: paths as the Delta log
    writes them, or absolute URIs) of the snapshot at ``version``; no rows for no files.

    Embedded store: its reader is given the files. delta-spark: where the table's metadata
    at ``version`` (``state``) allows, the files without a deletion vector are read as the
    Parquet files they are (with their partition values), the others through Delta,
    filtered on ``_metadata.file_path``: exact, but Delta then opens every file of the
    snapshot."""
    wanted = [f if isinstance(f, DataFile) else DataFile(f) for f in files]
    if isinstance(ref, str) and storage_mode(spark) == EMBEDDED:
        from urllib.parse import unquote

        return (
            spark.read.format("delta")
            .option("versionAsOf", str(version))
            .option(FILES_OPTION, json.dumps([unquote(f.path) for f in wanted]))
            .load(ref)
        )
    local = local_path(ref) if isinstance(ref, str) else None
    direct: list[DataFile] = []
    through = wanted
    if local is not None and state is not None and _parquet_readable(state):
        from pelengine.storage.deltalog import local_file

        table_dir = os.path.abspath(local)
        direct = [
            f
            for f in wanted
            if f.deletion_vector is None and local_file(table_dir, f.path) is not None
        ]
        through = [f for f in wanted if f not in direct]
        if len({f.partition_values for f in direct}) > _MAX_PARTITION_READS:
            direct, through = [], wanted
    parts: list[DataFrame] = []
    if direct:
        assert local is not None and state is not None
        parts.append(_read_parquet(spark, os.path.abspath(local), state, direct))
    if through or not direct:
        table = read_table(spark, ref, version)
        parts.append(table.where(_file_filter(through)) if through else table.limit(0))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


#: partitions of a night read as Parquet one read each, past which Delta reads them
_MAX_PARTITION_READS = 64
#: reader features whose tables' data files hold exactly their rows (deletion vectors apart,
#: which are read through Delta): no column mapping, no type widening, no unknown feature
_PARQUET_FEATURES = frozenset(
    {"deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
)
#: partition column types whose values (the log's strings) cast back exactly
_PARTITION_TYPES = ("string", "byte", "short", "integer", "long", "boolean", "date")


def _parquet_readable(state: TableState) -> bool:
    """Whether a data file without a deletion vector of a table with this metadata and
    protocol can be read as Parquet and give what Delta gives."""
    schema = state.schema_string
    if schema is None or state.column_mapping or "__CHAR_VARCHAR_TYPE_STRING" in schema:
        return False
    if not state.reader_features <= _PARQUET_FEATURES:
        return False
    if int(state.protocol.get("minReaderVersion") or 1) > 3:
        return False
    try:
        fields = {f["name"]: f["type"] for f in json.loads(schema)["fields"]}
    except (ValueError, KeyError, TypeError):
        return False
    return all(fields.get(c) in _PARTITION_TYPES for c in state.partition_columns)


def _read_parquet(
    spark: SparkSession, table_dir: str, state: TableState, files: list[DataFile]
) -> DataFrame:
    """``files`` (no deletion vectors) read as Parquet: the data columns from the files,
    the partition columns from the log's partition values, in the table's column order."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from pelengine.storage.deltalog import local_file
    from pelengine.storage.embedded import spark_schema_from_delta

    assert state.schema_string is not None
    schema = spark_schema_from_delta(state.schema_string)
    partitions = {c.lower() for c in state.partition_columns}
    data = StructType([f for f in schema.fields if f.name.lower() not in partitions])
    groups: dict[tuple[tuple[str, str | None], ...], list[str]] = {}
    for file in files:
        path = local_file(table_dir, file.path)
        assert path is not None
        groups.setdefault(file.partition_values, []).append(_glob_escaped(path))
    frames = []
    for values, paths in groups.items():
        given = {k.lower(): v for k, v in values}
        columns = []
        for field in schema.fields:
            if field.name.lower() in partitions:
                value = given.get(field.name.lower()) or None  # "" is null too
                columns.append(F.lit(value).cast(field.dataType).alias(field.name))
            else:
                columns.append(F.col(quote_identifier(field.name)))
        frames.append(spark.read.schema(data).parquet(*paths).select(*columns))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _glob_escaped(path: str) -> str:
    """``path`` for Spark's file reader, which expands glob patterns in the paths it is
    given: its glob characters escaped."""
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", path)


def _file_filter(files: Sequence[DataFile]) -> Any:
    """The rows of ``files`` of a Delta read: ``_metadata.file_path`` (the file's absolute
    URI, escaped as the log's relative path is) is one of the absolute URIs, or ends with
    one of the relative paths (compared on as many ``/``-separated parts as they have)."""
    from pyspark.sql import functions as F

    column = F.col("_metadata.file_path")
    absolute = [f.path for f in files if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", f.path)]
    by_parts: dict[int, list[str]] = {}
    for f in files:
        if f.path not in absolute:
            by_parts.setdefault(f.path.count("/") + 1, []).append(f.path)
    tests = [column.isin(absolute)] if absolute else []
    tests += [F.substring_index(column, "/", -n).isin(paths) for n, paths in by_parts.items()]
    out = tests[0]
    for test in tests[1:]:
        out = out | test
    return out


def read_change_feed(
    spark: SparkSession, ref: TableRef, changes: TableChanges
) -> tuple[DataFrame, DataFrame]:
    """(rows inserted, rows deleted) by the commits of ``changes`` from delta-spark's change
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
