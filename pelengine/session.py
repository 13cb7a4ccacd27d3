"""Building the SparkSession of the CLI entry points (library code never builds one)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pelengine.config import Config
from pelengine.storage import on_databricks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def launched_by_spark_submit() -> bool:
    """Whether this Python driver was started by spark-submit (its JVM already runs)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(conf: Config, progress: Callable[[str], None] | None = None) -> SparkSession:
    """A SparkSession from `conf.spark`, with the project's storage installed.

    The store is chosen here, before the JVM starts (`conf.storage`,
    :func:`pelengine.storage.jars.session_conf`): with native Delta the session gets
    delta-spark's jars (`spark.jars`), the Delta SQL extension and catalog. Under
    spark-submit the JVM already runs: its `--jars` and `--conf` decide, and
    :func:`pelengine.storage.install_storage` refuses a half-configured native Delta.

    `spark.master` from the config applies only outside spark-submit, whose
    `--master` (and driver settings) win. On Databricks the platform's session is used as
    it is: no master, no `spark.conf` keys, no log level (serverless refuses them, and
    there is no `sparkContext` there); set Spark confs in the job's compute instead.
    """
    from pyspark.sql import SparkSession

    from pelengine.storage import install_storage, is_remote_session, storage_reason
    from pelengine.storage.jars import EXTENSIONS_CONF, session_conf

    if on_databricks():
        spark = SparkSession.builder.getOrCreate()
        mode = install_storage(spark)
        if progress is not None:
            runtime = os.environ.get("DATABRICKS_RUNTIME_VERSION")
            progress(f"spark {spark.version} (Databricks runtime {runtime}), storage {mode}")
        return spark
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
    if progress is not None:
        where = "Spark Connect" if is_remote_session(spark) else spark.sparkContext.master
        progress(f"spark {spark.version} ({where}), storage {mode}: {storage_reason(spark)}")
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
