"""Which store a session has: delta-spark (delta-spark's classes in the JVM, or on
Databricks the platform's own) or the embedded delta-rs data source, chosen once per
session by :func:`install_storage` and never by falling back when delta-spark is half
set up; what the session and the platform allow (Spark Connect, caching)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pelengine.settings import DELTA_SPARK as DELTA_SPARK
from pelengine.settings import DOWNLOAD_AT_START
from pelengine.settings import EMBEDDED as EMBEDDED
from pelengine.storage.errors import StorageSetupError
from pelengine.storage.jars import (
    CATALOG_CONF,
    DELTA_CATALOG,
    DELTA_EXTENSION,
    EXTENSIONS_CONF,
    download_at_start_refusal,
)

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
#: the confs a session needs for delta-spark, as spark-submit's options
DELTA_CONFS = f"--conf {EXTENSIONS_CONF}={DELTA_EXTENSION} --conf {CATALOG_CONF}={DELTA_CATALOG}"


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
    jars it was given; ``remote``: a Spark Connect session (the server's
    confs, read over Connect, and in place of the JVM probe whether the server's sessions
    have Delta's extension loaded: :func:`probe_connect_delta`)."""

    has_delta_class: bool | None
    extensions: str = ""
    catalog: str = ""
    jars: str = ""
    remote: bool = False

    @classmethod
    def of(cls, spark: SparkSession) -> SessionFacts:
        jars = _conf(spark, "spark.jars")
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
    "org.apache.spark.sql.connect.service.SparkConnectServer --jars <delta-spark's jars "
    "("
    + DELTA_PACKAGE
    + " and what it needs), fetched once: $(cat jars/lib/classpath) after `make jars`> "
    + DELTA_CONFS
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
            "this session was given delta-spark's jars (spark.jars) "
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
                + f": {build} with {DELTA_CONFS} (pelengine will not write a Delta "
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
        packages = "" if is_remote_session(spark) else _conf(spark, DOWNLOAD_AT_START)
        if packages.strip():
            # a session started by spark-submit --packages, a spark-defaults.conf or a
            # builder's config: its JVM downloaded them as it started
            raise StorageSetupError(
                download_at_start_refusal(
                    packages,
                    "this session (spark-submit --packages, spark-defaults.conf or its builder)",
                )
            )

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


#: how many of a run's table writes delta-spark makes at once (each its own Spark job
#: and Delta commit, from its own driver thread)
DELTA_SPARK_WRITERS = 4


def concurrent_writes(spark: SparkSession) -> int:
    """How many table writes a run may make at once on this session: on delta-spark a
    few (a small table's write is mostly the driver's planning and commit, which the
    other writes overlap; the tables of a run are independent, and readers pin every
    table to the ``_runs`` row written after them all); on the embedded store one (its
    ``delta`` data source is registered with the session from this thread, and a write
    from another thread does not find it)."""
    return DELTA_SPARK_WRITERS if storage_mode(spark) == DELTA_SPARK else 1
