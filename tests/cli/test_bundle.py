"""The Databricks asset bundle (databricks.yml): its structure, that it asks nothing
serverless refuses, that the job's entry point runs with the parameters the bundle gives
it, and the package's Databricks code path (no master, no sparkContext, no _jvm, no stop,
no os._exit).

The Databricks CLI is not available here: `databricks bundle validate` is not run; these
tests check what can be checked without a workspace.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pelengine import cli, storage

REPO = Path(__file__).resolve().parents[2]
JOB_PARAM = re.compile(r"\{\{\s*job\.parameters\.([A-Za-z0-9_]+)\s*\}\}")
BUNDLE_VAR = re.compile(r"\$\{var\.([A-Za-z0-9_]+)\}")


@pytest.fixture(scope="module")
def bundle() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "databricks.yml").read_text("utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))


def _job(bundle: dict[str, Any]) -> dict[str, Any]:
    jobs = bundle["resources"]["jobs"]
    assert len(jobs) == 1, "one nightly job"
    return dict(next(iter(jobs.values())))


def _task(bundle: dict[str, Any]) -> dict[str, Any]:
    tasks = _job(bundle)["tasks"]
    assert len(tasks) == 1
    return dict(tasks[0])


def _strings(node: Any, values: bool = True) -> Iterator[str]:
    """Every key of ``node``'s dicts, at every depth, and (``values``) every other value,
    as text."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value, values)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value, values)
    elif values and node is not None:
        yield str(node)


# ---- structure -------------------------------------------------------------------------


def _artifacts(bundle: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The bundle's artifacts by the directory they build in."""
    artifacts = bundle["artifacts"]
    by_path = {str(Path(a["path"])): dict(a) for a in artifacts.values()}
    assert len(by_path) == len(artifacts), "each artifact builds in its own directory"
    return by_path


def _environment(bundle: dict[str, Any]) -> dict[str, Any]:
    task = _task(bundle)
    (env,) = [
        e for e in _job(bundle)["environments"] if e["environment_key"] == task["environment_key"]
    ]
    return dict(env)


def test_bundle_builds_the_wheel_and_runs_its_console_script(
    bundle: dict[str, Any], pyproject: dict[str, Any]
) -> None:
    assert bundle["bundle"]["name"]
    artifact = _artifacts(bundle)["."]
    assert artifact["type"] == "whl"
    assert "pip wheel" in artifact["build"] and "--wheel-dir dist" in artifact["build"]
    task = _task(bundle)
    wheel_task = task["python_wheel_task"]
    assert wheel_task["package_name"] == pyproject["project"]["name"]
    scripts = pyproject["project"]["scripts"]
    assert wheel_task["entry_point"] in scripts, "entry_point must be a [project.scripts] name"
    module, _, func = scripts[wheel_task["entry_point"]].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    # serverless: the task names an environment whose dependencies are the built wheels
    env = _environment(bundle)
    assert env["spec"]["dependencies"][0] == "./dist/*.whl"
    assert str(env["spec"]["environment_version"]).isdigit()


def test_bundle_ships_the_native_wheel(bundle: dict[str, Any], pyproject: dict[str, Any]) -> None:
    """The native replay core (native/py, maturin) is the second artifact and the second
    dependency of the task's environment, the wheel of the version the `native` extra pins,
    with the manylinux tag `make dist` builds."""
    artifact = _artifacts(bundle).get("native/py")
    assert artifact is not None, "no artifact builds native/py (the pelengine-native wheel)"
    assert artifact["type"] == "whl"
    build = artifact["build"].split()
    assert build[:3] == ["python", "-m", "maturin"] and build[3] == "build", artifact["build"]
    assert "--release" in build
    # into its own <path>/dist: the CLI empties each whl artifact's dist before its build
    assert build[build.index("--out") + 1] == "dist"
    makefile = (REPO / "Makefile").read_text("utf-8")
    (compat,) = re.findall(r"^NATIVE_COMPAT \?= (\S+)$", makefile, re.MULTILINE)
    assert build[build.index("--compatibility") + 1] == compat, "the tag `make dist` builds"
    native = tomllib.loads((REPO / "native/py/pyproject.toml").read_text("utf-8"))["project"]
    assert pyproject["project"]["optional-dependencies"]["native"] == [
        f"{native['name']}=={native['version']}"
    ], "the `native` extra pins the version the bundle builds"
    dependencies = _environment(bundle)["spec"]["dependencies"]
    assert "./native/py/dist/*.whl" in dependencies, "the native wheel is not a dependency"
    # every dependency is a wheel an artifact builds, and every artifact's wheel is one
    built = {f"./{Path(a['path']) / 'dist' / '*.whl'}" for a in bundle["artifacts"].values()}
    assert set(dependencies) == built, dependencies
    assert len(dependencies) == len(set(dependencies))


def test_nightly_schedule_in_utc(bundle: dict[str, Any]) -> None:
    schedule = _job(bundle)["schedule"]
    assert schedule["timezone_id"] == "UTC"
    fields = schedule["quartz_cron_expression"].split()
    assert len(fields) in (6, 7), "Quartz: sec min hour day-of-month month day-of-week [year]"
    sec, minute, hour, dom, month, dow = fields[:6]
    assert sec.isdigit() and minute.isdigit() and hour.isdigit(), "once a day at a fixed time"
    assert (dom, month) == ("*", "*") and dow == "?"


def test_every_parameter_and_variable_is_declared(bundle: dict[str, Any]) -> None:
    job = _job(bundle)
    declared_params = {p["name"]: p for p in job["parameters"]}
    used_params = set(JOB_PARAM.findall(" ".join(_strings(_task(bundle)))))
    assert used_params == set(declared_params), "job parameters used == declared"
    variables = bundle["variables"]
    used_vars = set(BUNDLE_VAR.findall(" ".join(_strings(bundle))))
    assert used_vars <= set(variables), f"undeclared variables: {used_vars - set(variables)}"
    assert used_vars == set(variables), f"unused variables: {set(variables) - used_vars}"
    for name, var in variables.items():
        assert "default" in var and var.get("description"), f"variable {name}"
    for name, param in declared_params.items():
        assert param["default"] == "${var." + name + "}", "each job parameter from its variable"
    # the task's argument list is the CLI's: every option it passes exists
    values = {name: str(var["default"]) for name, var in variables.items()}
    parsed = cli.build_parser().parse_args(_task_argv(bundle, values))
    assert parsed.command == "reconstruct" and parsed.incremental


FORBIDDEN_KEYS = {
    "new_cluster",
    "job_clusters",
    "job_cluster_key",
    "existing_cluster_id",
    "spark_conf",
    "spark_submit_task",
    "init_scripts",
    "maven",
    "jar",
    "spark_jar_task",
    "libraries",  # serverless takes dependencies from the environment
}


def test_nothing_serverless_refuses(bundle: dict[str, Any]) -> None:
    keys = set(_strings(bundle, values=False))
    assert not keys & FORBIDDEN_KEYS, f"not serverless-friendly: {keys & FORBIDDEN_KEYS}"
    for text in _strings(bundle):
        low = text.lower()
        assert "local[" not in low and "spark.master" not in low, text
        assert "io.delta:" not in low and "--packages" not in low, f"Maven coordinate: {text}"
        assert "file:" not in low and "dbfs:" not in low, f"local or DBFS path: {text}"
        for word in text.split():
            if word.startswith("/"):
                assert word.startswith(("/Volumes/", "/Workspace/")), f"local path: {text}"
        assert "/work/" not in text and "/home/" not in text and "/tmp" not in text, text


# ---- the entry point with the bundle's parameters ----------------------------------------


def _task_argv(bundle: dict[str, Any], values: dict[str, str]) -> list[str]:
    """The task's parameters as Databricks passes them: job parameters resolved to their
    defaults, the defaults' ${var.X} to `values` (the variables a deployment would set)."""
    params = {p["name"]: p["default"] for p in _job(bundle)["parameters"]}

    def resolve(match: re.Match[str]) -> str:
        default = params[match.group(1)]
        return BUNDLE_VAR.sub(lambda m: values[m.group(1)], default)

    return [JOB_PARAM.sub(resolve, a) for a in _task(bundle)["python_wheel_task"]["parameters"]]


@pytest.mark.spark
def test_entry_point_runs_with_the_bundle_parameters(
    spark: Any, bundle: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The task's parameters, the variables set to what resolves here: on delta-spark a
    catalog deployment as the bundle's defaults have it (events by name, managed tables by
    name) in the local session catalog; on the embedded store a path deployment (empty
    catalog and schema). The bundle's own defaults name the catalog `main`, which this
    session has not: refused before any work, in one sentence."""
    from pelengine.runs.generate import write_generated_events
    from pelengine.schemas import OUTPUT_TABLES

    delta_spark = storage.storage_mode(spark) == storage.DELTA_SPARK
    events = str(tmp_path / "events")
    write_generated_events(spark, events, 400, 3, 5)
    defaults = {k: str(v["default"]) for k, v in bundle["variables"].items()}
    schema = "pelengine_bundle"
    if delta_spark:
        spark.sql(f"CREATE SCHEMA spark_catalog.{schema} LOCATION '{tmp_path / 'warehouse'}'")
        spark.sql(f"CREATE TABLE spark_catalog.{schema}.events USING delta LOCATION '{events}'")
        by_name = {"catalog": "spark_catalog", "schema": schema, "output_root": ""}
        values = {**defaults, "events_table": f"spark_catalog.{schema}.events", **by_name}
    else:
        by_path = {"catalog": "", "schema": "", "output_root": str(tmp_path / "out")}
        values = {**defaults, "events_table": events, **by_path}
    try:
        argv = _task_argv(bundle, values)
        assert argv[:2] == ["reconstruct", "--incremental"]
        assert cli.run(argv, spark=spark, progress=lambda _: None) == cli.EXIT_OK
        report = json.loads(capsys.readouterr().out)
        assert report["incremental"]["mode"] == "full"
        assert report["profile"] == defaults["redis_version"]
        tables = (*OUTPUT_TABLES, "rejected_events", "_state")  # a night names its state
        assert report["tables"] == dict.fromkeys(tables, 0)
        assert report["output"]["rows"]["streams"] == 3
        if delta_spark:
            assert report["output"] == {
                "path": None,
                "catalog": "spark_catalog",
                "schema": schema,
                "rows": report["output"]["rows"],
            }
            runs = spark.table(f"spark_catalog.{schema}._runs").collect()
            assert [r["tables"] for r in runs] == [report["tables"]]
            assert (tmp_path / "warehouse" / "pel" / "_delta_log").is_dir(), "managed"
        else:
            assert (tmp_path / "out" / "_run_report.json").exists()
    finally:
        if delta_spark:
            spark.sql(f"DROP SCHEMA IF EXISTS spark_catalog.{schema} CASCADE")
    # the bundle's own defaults name catalog tables in Unity Catalog's `main`: refused here,
    # before any work, in one sentence saying what to do
    code = cli.run(_task_argv(bundle, defaults), spark=spark, progress=lambda _: None)
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if delta_spark:
        assert "this session has no catalog main (it has spark_catalog)" in err
        assert "on Databricks a Unity Catalog catalog" in err
    else:
        assert "need delta-spark" in err and "make install" in err


# ---- the package's Databricks code path --------------------------------------------------


class _Forbidden:
    def __init__(self, what: str) -> None:
        self.what = what

    def __get__(self, obj: Any, owner: Any) -> Any:
        raise AssertionError(f"{self.what} used on the Databricks code path")


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _ServerlessSession:
    """What a serverless session allows: conf, version; no sparkContext, no _jvm, no
    registering data sources, no stop."""

    version = "4.0.0"
    sparkContext = _Forbidden("sparkContext")  # noqa: N815 (Spark's name)
    _jvm = _Forbidden("_jvm")
    dataSource = _Forbidden("dataSource.register")  # noqa: N815 (Spark's name)

    def __init__(self) -> None:
        self.conf = _Conf()

    def stop(self) -> None:
        raise AssertionError("the platform's session must not be stopped")


_ServerlessSession.__module__ = "pyspark.sql.connect.session"


class _Builder:
    def __init__(self, session: _ServerlessSession) -> None:
        self.session = session
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return self

        return record

    def getOrCreate(self) -> _ServerlessSession:  # noqa: N802 (Spark's name)
        self.calls.append("getOrCreate")
        return self.session


def test_databricks_session_path_touches_nothing_serverless_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql import SparkSession

    from pelengine.session import build_session, on_databricks, stop_session
    from pelengine.settings import load_config

    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.0")
    assert on_databricks()
    session = _ServerlessSession()
    builder = _Builder(session)
    monkeypatch.setattr(SparkSession, "builder", builder)
    lines: list[str] = []
    spark: Any = build_session(load_config(), lines.append)
    assert spark is session
    assert builder.calls == ["getOrCreate"], "no master, appName or conf on Databricks"
    assert storage.storage_mode(spark) == storage.DELTA_SPARK
    assert storage.probe_jvm_delta(spark) is None  # a Connect session: _jvm not touched
    assert "Databricks runtime client.4.0" in lines[0]
    stop_session(spark)  # left running


def test_databricks_entry_point_returns_instead_of_os_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.0")

    def no_os_exit(code: int) -> None:
        raise AssertionError("os._exit would end the platform's Python process")

    monkeypatch.setattr(cli, "exit_process", no_os_exit)
    monkeypatch.setattr(cli, "run", lambda argv: cli.EXIT_OK)
    monkeypatch.setattr("sys.argv", ["pelengine", "reconstruct"])
    assert cli.main() == cli.EXIT_OK
    monkeypatch.setattr(cli, "run", lambda argv: cli.EXIT_FAILED)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == cli.EXIT_FAILED
