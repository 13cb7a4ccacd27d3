"""Shared fixtures: one Spark session for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Every JVM the suite starts (the shared session, the CLI children, the notebook kernel,
# the standalone cluster) is short-lived and does little JVM-side work: C1-only JIT and the
# serial GC cut the CPU they spend compiling and collecting (the suite on 2 cores: a file of
# CLI and history tests took 166 s instead of 222 s). Set before any JVM starts; inherited.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] Spark session with the project's storage seam installed (UTC, UI off)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pelengine-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    from pelengine.storage import install_storage

    install_storage(session)
    yield session
    session.stop()
