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

    `spark.master` from the config applies only outside spark-submit, whose
    `--master` (and driver settings) win. On Databricks the platform's session is used as
    it is: no master, no `spark.conf` keys, no log level (serverless refuses them, and
    there is no `sparkContext` there); set Spark confs in the job's compute instead.
    """
    from pyspark.sql import SparkSession

    from pelengine.storage import install_storage

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
    spark = builder.getOrCreate()
    if conf.spark.log_level:
        spark.sparkContext.setLogLevel(conf.spark.log_level)
    mode = install_storage(spark)
    if progress is not None:
        progress(f"spark {spark.version} ({spark.sparkContext.master}), storage {mode}")
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
