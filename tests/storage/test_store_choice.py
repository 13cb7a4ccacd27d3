"""Which Delta Lake a session gets: decided in one place (pelengine.storage.jars before the
JVM starts, pelengine.storage.install_storage on the running session), said in the report.

The decision is tested on the facts a session shows (pure), then on real JVMs: the suite's
own session, and child interpreters whose sessions get the jars, no jars, the jars without
the extension, and the jars after the JVM started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pelengine import storage
from pelengine.settings import ConfigError, load_config
from pelengine.storage import SessionFacts, StorageSetupError, choose_storage_mode
from pelengine.storage.jars import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    LOCAL_DELTA_CONF,
    StoreChoiceError,
    find_delta_jars,
    session_conf,
)
from tests.conftest import STORE

REPO = Path(__file__).resolve().parents[2]


def _must_not_register() -> None:
    raise AssertionError("must not register when delta-spark is present")


DELTA_SPARK_FACTS = SessionFacts(True, "foo.Bar," + DELTA_EXTENSION, DELTA_CATALOG, "x.jar")


# ---- the decision on a session's facts ------------------------------------------------------


def test_delta_classes_with_extension_and_catalog_are_delta_spark() -> None:
    mode, why = choose_storage_mode(DELTA_SPARK_FACTS, _must_not_register, "jars from jars/lib")
    assert mode == "delta-spark"
    assert (
        why == "Delta Lake on the JVM: the session has delta-spark's classes (jars from jars/lib)"
    )


@pytest.mark.parametrize(
    ("facts", "missing"),
    [
        (SessionFacts(True, "", DELTA_CATALOG), "spark.sql.extensions does not list"),
        (SessionFacts(True, DELTA_EXTENSION, ""), "spark_catalog is unset"),
        (SessionFacts(None, DELTA_EXTENSION, "x.Other"), "spark_catalog is x.Other"),
    ],
)
def test_delta_classes_without_extension_or_catalog_are_an_error(
    facts: SessionFacts, missing: str
) -> None:
    with pytest.raises(StorageSetupError, match=missing) as caught:
        choose_storage_mode(facts, _must_not_register)
    assert "will not write a Delta table through the embedded store" in str(caught.value)


def test_jars_given_after_the_jvm_started_are_an_error() -> None:
    facts = SessionFacts(False, DELTA_EXTENSION, DELTA_CATALOG, "/j/delta-spark_4.2_2.13-4.4.0.jar")
    with pytest.raises(StorageSetupError, match="came after the JVM started"):
        choose_storage_mode(facts, _must_not_register)


def test_no_delta_classes_registers_the_embedded_store_and_says_why() -> None:
    calls: list[int] = []
    mode, why = choose_storage_mode(
        SessionFacts(False), lambda: calls.append(1), "no delta-spark jars in /x"
    )
    assert (mode, calls) == ("embedded", [1])
    assert why == (
        "embedded delta-rs store: no delta-spark classes on the classpath "
        "(no delta-spark jars in /x)"
    )


def test_spark_connect_counts_the_extension_as_delta_spark() -> None:
    """A Connect session cannot be probed: its server's configured extension decides."""
    facts = SessionFacts(None, DELTA_EXTENSION, DELTA_CATALOG)
    mode, why = choose_storage_mode(facts, _must_not_register)
    assert mode == "delta-spark" and "Spark Connect server" in why


def test_refused_registration_means_native_other_failures_are_reported() -> None:
    def refuse() -> None:
        raise RuntimeError("[DATA_SOURCE_ALREADY_EXISTS] Data source 'delta' already exists.")

    assert choose_storage_mode(SessionFacts(None), refuse)[0] == "delta-spark"

    def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="could not be registered: boom"):
        choose_storage_mode(SessionFacts(None), broken)


def test_probe_without_jvm_is_unknown() -> None:
    class ConnectLike:
        @property
        def _jvm(self) -> Any:
            raise AttributeError("no py4j on Spark Connect")

    assert storage.probe_jvm_delta(ConnectLike()) is None  # type: ignore[arg-type]


# ---- what a session builder is given ----------------------------------------------------------


def _jar_folder(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_session_conf_puts_the_jars_extension_and_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PELENGINE_STORE", raising=False)
    monkeypatch.delenv("PELENGINE_DELTA_JARS", raising=False)
    folder = _jar_folder(tmp_path, "delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar")
    choice = session_conf("auto", str(folder), extensions="my.Ext")
    assert choice.conf["spark.jars"] == ",".join(
        str(folder / n) for n in ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar")
    )
    assert choice.conf["spark.sql.extensions"] == "my.Ext," + DELTA_EXTENSION
    assert choice.conf["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    # nothing else: the jars by path, never coordinates Spark would download at session start
    assert set(choice.conf) == {
        "spark.jars",
        "spark.sql.extensions",
        "spark.sql.catalog.spark_catalog",
        *LOCAL_DELTA_CONF,
    }
    assert choice.why == f"delta-spark's jars from storage.delta_jars={folder}"
    assert session_conf("embedded", str(folder)).conf == {}


def test_session_conf_without_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PELENGINE_STORE", raising=False)
    empty = _jar_folder(tmp_path, "unrelated-1.0.jar")
    monkeypatch.setenv("PELENGINE_DELTA_JARS", str(empty))
    auto = session_conf("auto")
    assert auto.conf == {}
    assert "no delta-spark jars in PELENGINE_DELTA_JARS=" in auto.why and "make install" in auto.why
    with pytest.raises(
        StoreChoiceError, match="storage.store is delta-spark but no delta-spark jars"
    ):
        session_conf("delta-spark")
    monkeypatch.setenv("PELENGINE_STORE", "embedded")
    assert session_conf("delta-spark").conf == {}, "PELENGINE_STORE wins over storage.store"
    monkeypatch.setenv("PELENGINE_STORE", "jvm")
    with pytest.raises(StoreChoiceError, match="'jvm' is not one of auto, delta-spark, embedded"):
        session_conf("auto")


def test_storage_store_is_validated_once_in_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("storage:\n  store: embedded\n  delta_jars: /opt/jars\n")
    loaded = load_config([conf])
    assert (loaded.storage.store, loaded.storage.delta_jars) == ("embedded", "/opt/jars")
    assert load_config().storage.store == "auto"
    conf.write_text("storage:\n  store: jvm\n")
    with pytest.raises(ConfigError, match="'storage.store': 'jvm' is not one of"):
        load_config([conf])


def test_native_is_an_old_name_of_delta_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configurations written before the rename keep working: `native` means delta-spark
    in storage.store, PELENGINE_STORE and PELENGINE_TEST_STORE."""
    conf = tmp_path / "c.yaml"
    conf.write_text("storage:\n  store: native\n")
    assert load_config([conf]).storage.store == "delta-spark"
    monkeypatch.delenv("PELENGINE_STORE", raising=False)
    monkeypatch.setenv("PELENGINE_DELTA_JARS", str(_jar_folder(tmp_path, "unrelated-1.0.jar")))
    with pytest.raises(StoreChoiceError, match="storage.store is delta-spark but no delta-spark"):
        session_conf("native")
    monkeypatch.setenv("PELENGINE_STORE", "native")
    with pytest.raises(StoreChoiceError, match="storage.store is delta-spark but no delta-spark"):
        session_conf("embedded")
    env = {**os.environ, "PELENGINE_TEST_STORE": "native"}
    header = _python(env, "-m", "pytest", "--co", "-p", "no:cacheprovider", "tests/test_layers.py")
    assert "pelengine store: delta-spark (PELENGINE_TEST_STORE)" in header.stdout, header.stderr


def test_the_checkout_has_the_fetched_jars_when_this_run_is_on_delta_spark() -> None:
    """`make install` fetched the coordinate the installed delta-spark and pyspark name."""
    if STORE != "delta-spark":
        return  # the embedded pass: nothing fetched is needed (and none is asserted)
    jars, origin = find_delta_jars()
    names = {Path(j).name for j in jars}
    assert "delta-spark_4.2_2.13-4.4.0.jar" in names, origin
    assert storage.DELTA_PACKAGE == "io.delta:delta-spark_4.2_2.13:4.4.0"
    manifest = (REPO / "jars" / "lib" / "MANIFEST").read_text().splitlines()
    assert manifest[0] == storage.DELTA_PACKAGE
    # what Spark ships is left out: no second Scala, Hadoop, Parquet or Jackson core
    import pyspark

    shipped = {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in names:
        stem = jar.rsplit("-", 1)[0]
        assert not any(s.startswith(stem + "-") for s in shipped), jar


# ---- real JVMs ----------------------------------------------------------------------------------


@pytest.mark.spark
def test_the_suite_session_has_the_store_it_asked_for(spark: Any) -> None:
    assert storage.storage_mode(spark) == STORE
    why = storage.storage_reason(spark)
    if STORE == "delta-spark":
        assert storage.probe_jvm_delta(spark) is True
        assert why.startswith("Delta Lake on the JVM: the session has delta-spark's classes")
    else:
        assert storage.probe_jvm_delta(spark) is False
        assert why.startswith("embedded delta-rs store: no delta-spark classes")


CHILD = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession
    from pelengine import storage
    from pelengine.storage.jars import session_conf
    case = sys.argv[1]
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    conf = session_conf("delta-spark").conf
    if case == "late":
        first = builder.getOrCreate()  # a JVM without the jars, then the jars
        for k, v in conf.items():
            builder = builder.config(k, v)
    elif case == "no-extension":
        builder = builder.config("spark.jars", conf["spark.jars"])
    elif case == "no-catalog":  # the jars and the extension, not Delta's session catalog
        for k, v in conf.items():
            if k != "spark.sql.catalog.spark_catalog":
                builder = builder.config(k, v)
    else:
        for k, v in conf.items():
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        mode = storage.install_storage(spark)
        print(json.dumps({"mode": mode, "why": storage.storage_reason(spark)}))
    except storage.StorageSetupError as exc:
        print(json.dumps({"error": str(exc)}))
    """
)


def _python(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """This interpreter with ``argv`` in the checkout, its output captured."""
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def _child(case: str) -> dict[str, str]:
    env = {**os.environ, "PELENGINE_STORE": "delta-spark"}
    env.pop("PELENGINE_DELTA_JARS", None)
    done = _python(env, "-c", CHILD, case)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.spark
@pytest.mark.delta_spark
def test_sessions_with_jars_too_late_or_without_the_extension_are_refused() -> None:
    """Jars present but the extension and catalog missing, the extension set but the catalog
    missing, and jars given to a running JVM: each a clear error, never the embedded store
    and never "table missing"."""
    assert "spark.sql.extensions does not list" in _child("no-extension")["error"]
    error = _child("no-catalog")["error"]
    assert "does not list" not in error, error  # (the extension is there)
    assert "spark.sql.catalog.spark_catalog is unset, not " in error, error
    assert "org.apache.spark.sql.delta.catalog.DeltaCatalog" in error, error
    assert "came after the JVM started" in _child("late")["error"]


# ---- nothing downloaded at session start ----------------------------------------------------


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    """What install_storage reads of a classic session started elsewhere."""

    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)


def test_a_session_started_with_packages_is_refused_before_any_store_is_chosen() -> None:
    """A session started by spark-submit --packages, a spark-defaults.conf or a builder's
    spark.jars.packages downloaded jars as its JVM started: refused in one sentence naming
    the key and the install step; a session with local jars only is not."""
    session = _Session({"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"})
    with pytest.raises(StorageSetupError, match=r"spark\.jars\.packages \(io\.delta.*make jars"):
        storage.install_storage(session)  # type: ignore[arg-type]
    assert "pelengine.storage.mode" not in session.conf.values


def test_what_the_launcher_reads_is_checked_before_the_jvm_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Besides pelengine's configuration (which refuses the key), the launcher reads
    PYSPARK_SUBMIT_ARGS and spark-defaults.conf: --packages or spark.jars.packages there
    is refused before a JVM starts (build_session raises without launching one)."""
    from pelengine.session import build_session
    from pelengine.settings import Config
    from pelengine.storage.jars import download_at_launch

    assert download_at_launch({}) is None
    assert download_at_launch({"PYSPARK_SUBMIT_ARGS": "--jars /a.jar pyspark-shell"}) is None
    for args in (
        "--packages io.delta:delta-spark_2.13:4.0.0 pyspark-shell",
        "--packages=io.delta:delta-spark_2.13:4.0.0 pyspark-shell",
        "--conf spark.jars.packages=io.delta:delta-spark_2.13:4.0.0 pyspark-shell",
    ):
        found = download_at_launch({"PYSPARK_SUBMIT_ARGS": args})
        assert found is not None and "io.delta:delta-spark_2.13:4.0.0" in found, args
        assert found.startswith("PYSPARK_SUBMIT_ARGS"), found
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    defaults = conf_dir / "spark-defaults.conf"
    defaults.write_text("spark.jars /opt/a.jar\n# spark.jars.packages commented\n")
    assert download_at_launch({"SPARK_CONF_DIR": str(conf_dir)}) is None
    for line in ("spark.jars.packages   g:a:1\n", "spark.jars.packages=g:a:1\n"):
        defaults.write_text(line)
        found = download_at_launch({"SPARK_CONF_DIR": str(conf_dir)})
        assert found is not None and str(defaults) in found and "g:a:1" in found, line
        found = download_at_launch({"SPARK_HOME": str(tmp_path)})
        assert found is not None and str(defaults) in found, line

    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--packages g:a:1 pyspark-shell")
    with pytest.raises(StorageSetupError, match=r"PYSPARK_SUBMIT_ARGS \(--packages\) asks for"):
        build_session(Config())
