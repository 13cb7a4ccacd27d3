"""Building the SparkSession of the CLI entry points (library code never builds one)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pelengine.settings import Config, ConfigError
from pelengine.storage import on_databricks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the Spark Connect server to use, as PySpark and spark-submit --remote name it: the
#: environment variable, or the Spark conf key (the configuration's ``spark.conf``)
REMOTE_ENV = "SPARK_REMOTE"
REMOTE_CONF = "spark.remote"


def launched_by_spark_submit() -> bool:
    """Whether this Python driver was started by spark-submit (its JVM already runs)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def connect_url(conf: Config) -> str | None:
    """The Spark Connect server the session connects to (``sc://HOST[:PORT][/;k=v...]``):
    ``SPARK_REMOTE``, or ``spark.remote`` in the configuration's ``spark.conf``; None
    without either (a classic session). ConfigError when the two differ or the URL is not
    an ``sc://`` URL (PySpark's ``local`` remote would start a server inside this process:
    ``spark.master: local[N]`` is that same Spark without Connect). None on Databricks,
    whose own session is used as it is, whatever its environment says."""
    if on_databricks():
        return None
    env = os.environ.get(REMOTE_ENV) or None
    key = conf.spark.conf.get(REMOTE_CONF) or None
    if env and key and env != key:
        raise ConfigError(
            f"{REMOTE_ENV}={display_url(env)} and spark.conf {REMOTE_CONF}="
            f"{display_url(key)} name two Spark Connect servers: give one"
        )
    url = env or key
    if url is not None and not url.startswith("sc://"):
        where = REMOTE_ENV if env else f"spark.conf {REMOTE_CONF}"
        raise ConfigError(
            f"{where}={display_url(url)}: not a Spark Connect URL (sc://HOST[:PORT]); for a "
            "local Spark without Connect set spark.master (local[N]) instead"
        )
    return url


#: the Spark conf that can put Delta on the classpath itself (local jars; the
#: configuration refuses spark.jars.packages, a download at session start): the session
#: decides
_CLASSPATH_CONF = "spark.jars"


def sessionless_reason(conf: Config, paths: list[str | None]) -> str | None:
    """Why a command that only writes the tables at ``paths`` needs no Spark session (no
    JVM): the store is the embedded one (asked for, or no delta-spark jars) and every
    path is a path, not a catalog name; None when it needs one (Databricks, Spark Connect,
    spark-submit, a catalog table, delta-spark, jars in the configuration's own
    ``spark.jars``, or a store choice the session must refuse in its own words)."""
    from pelengine.storage import Table, table_ref
    from pelengine.storage.jars import EXTENSIONS_CONF, StoreChoiceError, session_conf

    if on_databricks() or launched_by_spark_submit() or connect_url(conf) is not None:
        return None
    if conf.spark.conf.get(_CLASSPATH_CONF):
        return None
    if any(isinstance(table_ref(p), Table) for p in paths if p):
        return None
    try:
        choice = session_conf(
            conf.storage.store, conf.storage.delta_jars, conf.spark.conf.get(EXTENSIONS_CONF)
        )
    except StoreChoiceError:
        return None
    if choice.conf:
        return None
    return f"storage embedded ({choice.why}): no Spark session is needed to append the rows"


def display_url(url: str) -> str:
    """``url`` without its parameters (``/;token=...``: never printed)."""
    return url.split(";", 1)[0].rstrip("/") if ";" in url else url


def build_session(conf: Config, progress: Callable[[str], None] | None = None) -> SparkSession:
    """A SparkSession from `conf.spark`, with the project's storage installed.

    The store is chosen here, before the JVM starts (`conf.storage`,
    :func:`pelengine.storage.jars.session_conf`): with delta-spark the session gets
    delta-spark's jars (`spark.jars`), the Delta SQL extension and catalog. Under
    spark-submit the JVM already runs: its `--jars` and `--conf` decide, and
    :func:`pelengine.storage.install_storage` refuses a half-configured delta-spark.
    Nothing is downloaded at session start: ``spark.jars.packages`` is refused in
    pelengine's configuration, in what the launcher reads besides it
    (:func:`pelengine.storage.jars.download_at_launch`) before the JVM starts, and on a
    session started elsewhere (:func:`pelengine.storage.install_storage`).

    `spark.master` from the config applies only outside spark-submit, whose
    `--master` (and driver settings) win. On Databricks the platform's session is used as
    it is: no master, no `spark.conf` keys, no log level (serverless refuses them, and
    there is no `sparkContext` there); set Spark confs in the job's compute instead.

    With a Spark Connect URL (:func:`connect_url`) the session is a Connect client:
    :func:`connect_session`.
    """
    from pyspark.sql import SparkSession

    from pelengine.storage import (
        DELTA_SPARK,
        EMBEDDED,
        install_storage,
        is_remote_session,
        storage_reason,
    )
    from pelengine.storage.errors import StorageSetupError
    from pelengine.storage.jars import (
        EXTENSIONS_CONF,
        STORE_ENV,
        StoreChoiceError,
        download_at_launch,
        session_conf,
        store_asked,
    )

    if on_databricks():
        spark = SparkSession.builder.getOrCreate()
        mode = install_storage(spark)
        if progress is not None:
            runtime = os.environ.get("DATABRICKS_RUNTIME_VERSION")
            progress(f"spark {spark.version} (Databricks runtime {runtime}), storage {mode}")
        return spark
    url = connect_url(conf)
    if url is not None:
        return connect_session(conf, url, progress)
    submitted = launched_by_spark_submit()
    if not submitted:
        # local mode: Python workers run the same interpreter as the driver
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(conf.spark.app_name)
    if conf.spark.master and not submitted:
        builder = builder.master(conf.spark.master)
    for key, value in conf.spark.conf.items():
        builder = builder.config(key, value)
    why = "spark-submit's --jars and --conf decide"
    if not submitted:
        # refused before the JVM starts (and downloads): what the launcher reads besides
        # pelengine's configuration (which refuses the key itself)
        refusal = download_at_launch()
        if refusal is not None:
            raise StorageSetupError(refusal)
        choice = session_conf(
            conf.storage.store, conf.storage.delta_jars, conf.spark.conf.get(EXTENSIONS_CONF)
        )
        for key, value in choice.conf.items():
            builder = builder.config(key, value)
        why = choice.why
    spark = builder.getOrCreate()
    if conf.spark.log_level and not is_remote_session(spark):
        spark.sparkContext.setLogLevel(conf.spark.log_level)
    mode = install_storage(spark, why)
    asked = store_asked(conf.storage.store)
    if asked in (DELTA_SPARK, EMBEDDED) and mode != asked:
        raise StoreChoiceError(
            f"the store asked for is {asked} (storage.store or {STORE_ENV}), but this "
            f"session has {mode}: {storage_reason(spark)}"
        )
    if progress is not None:
        where = "Spark Connect" if is_remote_session(spark) else spark.sparkContext.master
        progress(f"spark {spark.version} ({where}), storage {mode}: {storage_reason(spark)}")
    return spark


def connect_session(
    conf: Config, url: str, progress: Callable[[str], None] | None = None
) -> SparkSession:
    """A Spark Connect session on the server at ``url``, with the project's storage checked.

    The server is the Spark: its master, static confs, jars, Python and log level are its
    own business (set when it starts). Of the configuration's ``spark.conf`` only the keys
    the server lets a session change (runtime SQL confs: shuffle partitions, session time
    zone...) are set, on this session only; the others are named in the progress line.
    The store is the server's: delta-spark when its sessions have Delta's extension
    loaded and its catalog set, otherwise refused (:func:`install_storage`), and so is
    asking for the embedded store."""
    from pyspark.sql import SparkSession

    from pelengine.storage import EMBEDDED, StorageSetupError, install_storage, storage_reason
    from pelengine.storage.jars import STORE_ENV, store_asked

    store = store_asked(conf.storage.store)
    if store == EMBEDDED:
        raise StorageSetupError(
            f"storage.store (or {STORE_ENV}) is embedded, but over Spark Connect the store is "
            "the server's: delta-spark, started with the server (the embedded delta-rs "
            "store is not offered over Spark Connect); unset it or use auto/delta-spark"
        )
    spark = SparkSession.builder.remote(url).getOrCreate()
    kept = []
    for key, value in conf.spark.conf.items():
        if key == REMOTE_CONF:
            continue
        if spark.conf.isModifiable(key):
            spark.conf.set(key, value)
        else:
            kept.append(key)
    mode = install_storage(spark, "Spark Connect: the server's jars and confs decide")
    if progress is not None:
        left = f"; the server's own: {', '.join(kept)}" if kept else ""
        progress(
            f"spark {spark.version} (Spark Connect {display_url(url)}), storage {mode}: "
            f"{storage_reason(spark)}{left}"
        )
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop `spark`, never raising (used on the way out). On Databricks the session is the
    platform's and is left running."""
    if on_databricks():
        return
    try:
        spark.stop()
    except Exception as exc:  # a failed stop must not change the exit code
        print(f"pelengine: warning: stopping Spark failed: {exc}", file=sys.stderr)
