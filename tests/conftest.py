"""Shared fixtures: one Spark session for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pelengine.settings import DELTA_SPARK, EMBEDDED, STORE_ALIASES

# The JVMs the suite starts besides its shared session (the CLI children, the notebook
# kernel, the standalone cluster) are short-lived and do little JVM-side work: C1-only JIT
# and the serial GC cut the CPU they spend compiling and collecting (the suite on 2 cores: a
# file of CLI and history tests took 166 s instead of 222 s). Set before any JVM starts;
# inherited.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The shared session's JVM lives as long as its worker (tens of minutes, hundreds of runs
#: planned and committed): there C2's compiled code pays for itself (a warm run of 20,000
#: events on delta-spark: 13.5 s against 18.3 s with C1 only).
LONG_LIVED_JVM = "-XX:+UseSerialGC"
os.environ.setdefault("JAVA_TOOL_OPTIONS", SHORT_LIVED_JVM)

# Spark's code generation (whole-stage, and the projections and predicates it compiles with
# Janino) pays off over millions of rows; the suite's runs have hundreds, and most plans
# carry a run's own literals, so each run compiles anew. Profiled (JFR) on a warm session,
# a 300-event run on delta-spark spent about a sixth of its JVM time in Janino; with code
# generation off it took 8.9 JVM CPU-s instead of 11.1, and its first run 50 instead of 61
# (tables and plans are Spark's either way: interpreted evaluation is its fallback for
# every expression). The suite's sessions and every JVM its children start through
# spark-submit (CLI children, the Connect server) get it through a spark-defaults.conf;
# PELENGINE_TEST_CODEGEN=1 keeps code generation on, as users' sessions have it.
TEST_SPARK_CONF = (
    {}
    if os.environ.get("PELENGINE_TEST_CODEGEN", "") == "1"
    else {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    }
)
if TEST_SPARK_CONF and "SPARK_CONF_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _conf_dir = tempfile.mkdtemp(prefix="pelengine-test-spark-conf-")
    atexit.register(shutil.rmtree, _conf_dir, True)
    with open(os.path.join(_conf_dir, "spark-defaults.conf"), "w") as _defaults:
        _defaults.writelines(f"{k} {v}\n" for k, v in TEST_SPARK_CONF.items())
    os.environ["SPARK_CONF_DIR"] = _conf_dir


#: The Delta Lake this test run's sessions use: "delta-spark" (Delta Lake on the JVM:
#: delta-spark's jars, which `make install` fetches into jars/lib; "native", its older name,
#: is read as it) or "embedded" (delta-rs). `make test` runs the suite on delta-spark, then
#: the tests marked `stores` (and `embedded`) again on the embedded store.
#: The CLI children the tests start inherit it through PELENGINE_STORE.
_ASKED = os.environ.get("PELENGINE_TEST_STORE", DELTA_SPARK)
STORE = STORE_ALIASES.get(_ASKED, _ASKED)
if STORE not in (DELTA_SPARK, EMBEDDED):
    raise pytest.UsageError(f"PELENGINE_TEST_STORE={STORE!r}: expected {DELTA_SPARK} or {EMBEDDED}")
os.environ["PELENGINE_STORE"] = STORE


def pytest_report_header() -> str:
    return f"pelengine store: {STORE} (PELENGINE_TEST_STORE)"


#: "stores": the embedded store's second pass of `make test`, which runs only the tests
#: marked `stores` (both stores) and `embedded` (the embedded store itself)
PASS = os.environ.get("PELENGINE_TEST_PASS", "")

#: PELENGINE_TEST_HEAVY=1: also the tests marked ``heavy`` (on the stores the mark names,
#: every store when it names none): the heavier store matrix, a case another test already
#: covers on that store. Deselected otherwise, and counted as deselected.
HEAVY = os.environ.get("PELENGINE_TEST_HEAVY", "") == "1"


def _heavy_here(item: pytest.Item) -> bool:
    """Whether ``item`` is marked heavy on this run's store."""
    for mark in item.iter_markers("heavy"):
        stores = {STORE_ALIASES.get(s, s) for s in mark.args} or {DELTA_SPARK, EMBEDDED}
        if STORE in stores:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) what this run's store cannot run: on delta-spark the tests of
    the embedded store itself (`embedded`), on the embedded store those needing delta-spark
    (`delta_spark`); in the second pass only the `stores` and `embedded` tests; without
    PELENGINE_TEST_HEAVY=1 the tests marked `heavy` on this store."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        if STORE == DELTA_SPARK:
            runs = "embedded" not in marks
        else:
            runs = "delta_spark" not in marks
            if PASS == "stores":
                runs = runs and bool(marks & {"embedded", "stores"})
        if runs and not HEAVY and _heavy_here(item):
            runs = False
        (keep if runs else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    # the longest files first (stable: every other file keeps its place, after them)
    items.sort(key=lambda item: SLOWEST_RANK.get(item.nodeid.split("::")[0], len(SLOWEST_FILES)))


#: The suite's longest files, longest first: worker-seconds in `make test` (both passes
#: summed), measured on 2026-11-29. pytest-xdist hands its workers whole files in the
#: order collected (`make test` turns off its reordering by test count, which put the
#: files of many quick cases first and these last). Given last, one of them kept one
#: worker busy long after the other had run out of files: in that run the two workers
#: were busy 85% of pass 1 (4,925 worker-seconds in 2,907 s) and 82% of pass 2. First,
#: the quick files fill in behind them. A file missing here only runs later.
SLOWEST_FILES = (
    "tests/runs/test_crash.py",  # 564
    "tests/runs/test_incremental_native_delta.py",  # 462
    "tests/runs/test_night_writes.py",  # 401
    "tests/storage/test_catalog_tables.py",  # 379
    "tests/runs/test_incremental.py",  # 361
    "tests/connect/test_connect.py",  # 310
    "tests/storage/test_cross_store.py",  # 279
    "tests/runs/test_whole_runs.py",  # 260
    "tests/runs/test_incremental_log.py",  # 255 and more
    "tests/pipeline/test_pipeline.py",  # 224
    "tests/redis_diff/test_commands_monitor.py",  # 208
    "tests/runs/test_two_writers.py",  # 149
    "tests/redis_diff/test_differential_job.py",  # 139
    "tests/cluster/test_spark_submit.py",  # 128
    "tests/redis_diff/test_pending_cli.py",  # 115
    "tests/pipeline/test_spill_order.py",  # 111
    "tests/redis_diff/test_differential_model.py",  # 104
    "tests/redis_diff/test_scenarios.py",  # 102
    "tests/redis_diff/test_scenarios_kinds.py",  # 99
    "tests/redis_diff/test_effects_aof.py",  # 97
    "tests/read/test_notebook.py",  # 87
    "tests/storage/test_storage.py",  # 81
    "tests/read/test_history.py",  # 75
    "tests/runs/test_run.py",  # 72
    "tests/runs/test_incremental_compaction.py",  # 68 and more
)
SLOWEST_RANK = {path: rank for rank, path in enumerate(SLOWEST_FILES)}


#: fixtures that hand a test a Spark session. A test that uses one must be marked `spark`
#: (its own mark or its module's ``pytestmark``), so that ``-m "not spark"`` runs the fast
#: room alone; :func:`pytest_runtest_setup` fails one that is not, before the session
#: starts. Tests that start Spark another way (a CLI child, a Connect server, a cluster)
#: carry the mark by hand.
SPARK_FIXTURES = frozenset({"spark"})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    used = sorted(SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())))
    if used and item.get_closest_marker("spark") is None:
        pytest.fail(
            f"{item.nodeid} uses the Spark session (fixture {', '.join(used)}) but is not "
            "marked spark: add @pytest.mark.spark (or to its module's pytestmark)",
            pytrace=False,
        )


def spark_builder(app_name: str = "pelengine-tests") -> object:
    """The builder of the suite's sessions (local[2], 2 shuffle partitions, UTC, UI off),
    with this run's store chosen the way the CLI chooses it."""
    from pyspark.sql import SparkSession

    from pelengine.storage.jars import session_conf

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
    )
    for key, value in TEST_SPARK_CONF.items():
        builder = builder.config(key, value)
    for key, value in session_conf(STORE).conf.items():
        builder = builder.config(key, value)
    return builder


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] Spark session with the project's storage seam installed (UTC, UI off), on
    this run's store."""
    from pelengine.storage import install_storage, storage_mode

    ours = os.environ.get("JAVA_TOOL_OPTIONS") == SHORT_LIVED_JVM  # not the caller's own
    if ours:
        os.environ["JAVA_TOOL_OPTIONS"] = LONG_LIVED_JVM
    try:
        session = spark_builder().getOrCreate()  # type: ignore[attr-defined]
    finally:
        if ours:
            os.environ["JAVA_TOOL_OPTIONS"] = SHORT_LIVED_JVM
    install_storage(session)
    assert storage_mode(session) == STORE, (
        f"asked for {STORE}, the session has {storage_mode(session)}"
    )
    yield session
    session.stop()
