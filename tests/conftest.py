"""Shared fixtures: one Spark session for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


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
