"""Spark Connect (#31): the job, a night and the readers through the real CLI against a local
Spark Connect server with delta-spark behind it.

A Spark Connect server (pyspark's own jar, `spark-submit --class SparkConnectServer`) starts
on 127.0.0.1 with delta-spark's jars, its extension and catalog; its Python workers run this
virtualenv's Python. The `pelengine` console script runs with SPARK_REMOTE set, so it starts
no JVM of its own: the nightly job (`reconstruct --incremental`) for its first run (a full
replay) and for a night after rows were appended, and the readers (`sql`, `pending`,
`summary`, `report`, `pel-as-of`). Every table must equal one local (classic, delta-spark)
reconstruct of the same events, every reader must print what it prints on the local session
over the same output (and `report` write the same tables), and the run reports must say
storage delta-spark. A plain `reconstruct` (no --incremental) over Connect is in the heavier
matrix (PELENGINE_TEST_HEAVY=1, suite time, issue #31): the job's first run is the same full
replay through the same table writes over Connect (the plain run adds `runs/full.py`'s few
session-agnostic lines), and a third run on the server cost the module about a third of its
server work. What needed the JVM has its Connect path checked in
a client of its own (the replay plan check, the heartbeat's stage details, the Delta probe,
caching); what cannot work over Connect is refused, and the refusals are asserted: a server
without Delta Lake (a second server) and one with Delta Lake's extension and catalog confs but
not its jars (a third), the embedded store asked for, bad URLs.

The module's steps print their wall and CPU time (`pytest -s`): the machine may be shared.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pelengine import cli, storage
from pelengine.progress import quiet
from pelengine.read.report import REPORT_TABLES
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.session import build_session, connect_url
from pelengine.settings import ConfigError, Settings, load_config
from pelengine.storage.jars import (
    CATALOG_CONF,
    DELTA_CATALOG,
    DELTA_EXTENSION,
    EXTENSIONS_CONF,
    LOCAL_DELTA_CONF,
    find_delta_jars,
)
from pelengine.synth import generate_events
from tests.processes import free_port, group_alive, stop_group, tail

# the tests with a Spark session or a Connect server are marked spark one by one: the
# rest decide on facts handed to them, with no session
pytestmark = pytest.mark.delta_spark

SPARK_HOME = Path(pyspark.__file__).parent
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
PELENGINE = Path(sys.executable).with_name("pelengine")
# a small log in two nights: the first written and reconstructed locally, the second
# appended and replayed over Connect
EVENTS, KEYS, SEED, NIGHT = 400, 4, 5, 300
START_TIMEOUT_S = 180
CLI_TIMEOUT_S = 300
TABLES = (*OUTPUT_TABLES, "rejected_events")


# ---- the servers ------------------------------------------------------------------------


@dataclass
class Server:
    """A Spark Connect server process (the leader of its own process group)."""

    name: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes]
    ready: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The server's URL once it accepts connections; fails the test if it exits or
        does not listen within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.ready:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the {self.name} server exited ({self.proc.returncode}):\n{tail(self.log)}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    self.ready = True
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the {self.name} server did not listen:\n{tail(self.log)}")
                time.sleep(0.3)
        return self.url

    def stop(self) -> None:
        """Stop the process group; returns when none of its processes (the JVM, its Python
        workers) is alive."""
        stop_group(self.proc, grace_s=20.0)
        assert not group_alive(self.proc.pid), f"the {self.name} server left processes behind"


def _start_server(name: str, logs: Path, *, delta: bool, confs_only: bool = False) -> Server:
    """Start (not wait for) a local[2] Spark Connect server; ``delta``: with delta-spark's
    jars (the checkout's jars/lib), its extension and catalog, as docs/deploy.md says;
    ``confs_only``: the extension and catalog confs without the jars (a server set up
    half-way)."""
    port = free_port()
    args = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", CONNECT_SERVER]
    args += ["--master", "local[2]", "--driver-memory", "1g"]
    confs = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
    }
    if delta:
        jars, origin = find_delta_jars()
        assert jars, f"no delta-spark jars in {origin}: run `make install`"
        args += ["--jars", ",".join(jars)]
        confs.update({EXTENSIONS_CONF: DELTA_EXTENSION, CATALOG_CONF: DELTA_CATALOG})
        confs.update(LOCAL_DELTA_CONF)
    elif confs_only:
        confs.update({EXTENSIONS_CONF: DELTA_EXTENSION, CATALOG_CONF: DELTA_CATALOG})
    for key, value in confs.items():
        args += ["--conf", f"{key}={value}"]
    args.append("spark-internal")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_REMOTE", "PYSPARK_GATEWAY_PORT", "PYSPARK_DRIVER_PYTHON")
    }
    # the server's Python workers (the replay UDFs) run this virtualenv's Python
    env.update(SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    log = logs / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Server(name, port, log, proc)


@dataclass
class Servers:
    delta: Server
    bare: Server
    confs_only: Server


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One server with delta-spark for the module, one without Delta Lake and one with
    Delta Lake's confs but not its jars (those two started at once, waited for only by the
    test that needs them); all stopped at the end."""
    logs = tmp_path_factory.mktemp("connect-logs")
    delta = _start_server("delta", logs, delta=True)
    bare = confs_only = None
    try:
        bare = _start_server("bare", logs, delta=False)
        confs_only = _start_server("confs-only", logs, delta=False, confs_only=True)
        yield Servers(delta, bare, confs_only)
    finally:
        for client in _CLIENTS:  # left running by a failure: the servers go next
            if client.proc.poll() is None:
                client.proc.kill()
                client.proc.wait()
        for server in (delta, bare, confs_only):
            if server is not None:
                server.stop()


# ---- running the CLI ----------------------------------------------------------------------


@dataclass
class Client:
    """A console script running as a Spark Connect client (its output goes to files, so
    it never waits on a full pipe while the test does local work)."""

    proc: subprocess.Popen[str]
    out: Any
    err: Any

    def done(self) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once it ended."""
        try:
            self.proc.wait(timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"{self.proc.args} did not end within {CLI_TIMEOUT_S} s")
        texts = []
        for stream in (self.out, self.err):
            stream.seek(0)
            texts.append(stream.read())
            stream.close()
        return self.proc.returncode, texts[0], texts[1]

    def ok(self) -> str:
        code, out, err = self.done()
        assert code == 0, f"{self.proc.args[1:]} exited {code}\n{out}\n{err}"
        return out


_CLIENTS: list[Client] = []


def _cli(url: str, *args: str) -> Client:
    """The real console script started as a Spark Connect client of ``url`` (not waited
    for: the module runs clients side by side with the local session's work)."""
    environ = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    environ["SPARK_REMOTE"] = url
    # closed by Client.done, once the client ended
    out = tempfile.TemporaryFile("w+")  # noqa: SIM115
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(PELENGINE), *args],
        stdout=out,
        stderr=err,
        text=True,
        env=environ,
        stdin=subprocess.DEVNULL,
    )
    _CLIENTS.append(Client(proc, out, err))
    return _CLIENTS[-1]


def _local(spark: SparkSession, *args: str) -> str:
    """The same command in this process on the local (classic) session: its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.run(list(args), spark=spark, progress=quiet)
    assert code == 0, f"local {args[0]} exited {code}:\n{out.getvalue()}"
    return out.getvalue()


def _contents(spark: SparkSession, root: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """Each table's columns (names and types; nullability aside) and rows (JSON, sorted),
    read on the local session in one Spark job for all of them."""
    frames, found = [], {}
    for name in names:
        df = storage.read_table(spark, str(root / name))
        found[name] = {"columns": [(f.name, f.dataType.simpleString()) for f in df.schema]}
        frames.append(
            df.select(F.lit(name).alias("t"), F.to_json(F.struct(*df.columns)).alias("r"))
        )
    rows = functools.reduce(DataFrame.unionAll, frames).collect()
    for name in names:
        found[name]["rows"] = sorted(r["r"] for r in rows if r["t"] == name)
    return found


def _assert_same(found: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    """Table by table: the same columns and the same rows in any order (what the suite's
    assert_tables_equal asks)."""
    assert found.keys() == expected.keys()
    for name in expected:
        assert found[name]["columns"] == expected[name]["columns"], f"{what}: {name}"
        mine, theirs = found[name]["rows"], expected[name]["rows"]
        only = sorted(set(mine) ^ set(theirs))[:5]
        assert mine == theirs, f"{what}: {name}: {len(mine)} vs {len(theirs)} rows: {only}"


# ---- the job and the readers over Connect -------------------------------------------------


@dataclass
class Runs:
    events: Path
    out: Path  # the job's output: its first run and a night over Connect
    local: Path  # one reconstruct of the same events on the local session
    first: dict[str, Any]  # the run reports
    night: dict[str, Any]
    readers: dict[str, tuple[str, str]]  # command -> what it printed (over Connect, local)
    report_tables: list[dict[str, Any]]  # what report wrote (over Connect, local)


def _reader_commands(spark: SparkSession, out: Path) -> dict[str, list[str]]:
    """The readers, as the CLI takes them (``--out`` added by the caller)."""
    first = storage.read_table(spark, str(out / "pel")).orderBy("key", "group", "id").first()
    assert first is not None, "the generated log leaves nothing pending"
    as_of = storage.read_run_report(str(out))
    assert as_of is not None
    query = (
        "SELECT key, `group`, count(*) AS n, max(delivery_count) AS d FROM pel "
        "GROUP BY key, `group` ORDER BY key, `group`"
    )
    key, group = first["key"], first["group"]
    return {
        "sql": ["sql", query, "--json"],
        "pending": ["pending", key, group, "--start", "-", "--end", "+", "--count", "50"],
        "summary": ["summary"],
        "pel-as-of": ["pel-as-of", "--as-of-seq", str(as_of["as_of_seq"] // 2), "--limit", "50"],
        "report": ["report", "--json"],
    }


def _cpu_s() -> float:
    """CPU seconds this process and everything it started have used so far: itself, the
    children it reaped, and its live descendants (the servers, the local session's JVM,
    their Python workers, running clients; Linux /proc)."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    usage: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            parent[int(entry)] = int(fields[1])
            usage[int(entry)] = sum(int(f) for f in fields[11:15]) / tick  # and reaped kids
    me = os.getpid()
    for pid in parent:
        ancestor = parent.get(pid)
        while ancestor and ancestor != me:
            ancestor = parent.get(ancestor)
        if ancestor == me:
            total += usage[pid]
    return total


class _Steps:
    """Wall and CPU time of each step of the module's work (printed: pytest shows it with
    -s and on failure; the machine may be shared, CPU is what the work costs)."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.cpu = _cpu_s()

    def __call__(self, what: str) -> None:
        now, cpu = time.monotonic(), _cpu_s()
        print(
            f"connect: {what}: {now - self.last:.1f}s, {cpu - self.cpu:.1f} CPU s "
            f"(at {now - self.started:.1f}s)"
        )
        self.last, self.cpu = now, cpu


@pytest.fixture(scope="module")
def runs(spark: SparkSession, servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The nightly job as Databricks runs it (`reconstruct --incremental`) over Connect: its
    first run (a full reconstruct: nothing saved yet) on the first night's events, then a
    night after rows were appended, beside one reconstruct of all the events on the local
    session. Then the readers over Connect on the job's
    output, the local session running each on the same output after it (``report`` last:
    both sides write its tables, which ``sql`` would read)."""
    step = _Steps()
    root = tmp_path_factory.mktemp("connect")
    events, out, local = root / "events", root / "out", root / "local"
    rows = list(generate_events(EVENTS, KEYS, SEED))
    storage.write_table(spark.createDataFrame(rows[:NIGHT], EVENTS_SCHEMA), str(events))
    url = servers.delta.wait_ready()
    step("the first night's events written, the server up")
    job = ("reconstruct", "--incremental", "--events", str(events), "--out", str(out), "--json")
    first = json.loads(_cli(url, *job).ok())
    step("the job's first run over Connect")
    storage.write_table(spark.createDataFrame(rows[NIGHT:], EVENTS_SCHEMA), str(events), "append")
    started = _cli(url, *job)
    run_reconstruct(spark, str(events), str(local), Settings())
    step("reconstruct locally")
    night = json.loads(started.ok())
    step("a night over Connect")

    commands = _reader_commands(spark, out)
    readers, written = {}, []
    for batch in ([n for n in commands if n != "report"], ["report"]):
        clients = {name: _cli(url, *commands[name], "--out", str(out)) for name in batch}
        for name in batch:
            remote = clients[name].ok()
            if name == "report":  # the tables it wrote over Connect, then locally
                written.append(_contents(spark, out, REPORT_TABLES))
            readers[name] = (remote, _local(spark, *commands[name], "--out", str(out)))
        step(", ".join(batch) + " over Connect and locally")
    written.append(_contents(spark, out, REPORT_TABLES))
    return Runs(events, out, local, first, night, readers, written)


@pytest.mark.spark
def test_the_job_and_a_night_over_connect_equal_a_local_run(
    spark: SparkSession, runs: Runs
) -> None:
    """The job's first run replayed every event of the first night, the night only what was
    appended (continuing the state the first run saved over Connect), all on the server's
    delta-spark; every table the night left equals one local reconstruct of all the
    events."""
    for report in (runs.first, runs.night):
        assert report["storage"] == storage.DELTA_SPARK, report["storage_reason"]
        assert "Spark Connect server has delta-spark's classes" in report["storage_reason"]
    assert runs.first["incremental"]["mode"] == "full", runs.first["incremental"]
    assert runs.first["events"]["read"] == NIGHT
    assert runs.night["incremental"]["mode"] == "incremental", runs.night["incremental"]
    assert runs.night["events"]["read"] == EVENTS - NIGHT
    replayed = runs.night["incremental"]["families_replayed"]
    assert 1 <= replayed < runs.night["incremental"]["families_total"]  # others carried over
    assert runs.night == storage.read_run_report(str(runs.out))
    expected = _contents(spark, runs.local, TABLES)
    assert all(expected[name]["rows"] for name in OUTPUT_TABLES), "an empty table proves little"
    _assert_same(_contents(spark, runs.out, TABLES), expected, "the job over Connect")


@pytest.mark.spark
@pytest.mark.heavy("delta-spark")
def test_a_plain_reconstruct_over_connect_equals_a_local_run(
    spark: SparkSession, servers: Servers, runs: Runs, tmp_path: Path
) -> None:
    """A plain `reconstruct` (no --incremental) of all the events over Connect equals the
    local reconstruct. Heavy (see the module docstring): by default the job's first run
    covers the full replay and its writes over Connect."""
    whole = tmp_path / "whole"
    argv = ("reconstruct", "--events", str(runs.events), "--out", str(whole), "--json")
    full = json.loads(_cli(servers.delta.wait_ready(), *argv).ok())
    assert full["storage"] == storage.DELTA_SPARK, full["storage_reason"]
    assert "Spark Connect server has delta-spark's classes" in full["storage_reason"]
    assert full["events"]["read"] == EVENTS and full["options"]["incremental"] is False
    expected = _contents(spark, runs.local, TABLES)
    _assert_same(_contents(spark, whole, TABLES), expected, "reconstruct over Connect")


@pytest.mark.spark
def test_readers_over_connect_print_and_write_what_they_do_locally(
    spark: SparkSession, runs: Runs
) -> None:
    """Each reader prints over Connect what it prints on the local session over the same
    output, and ``report`` writes the same tables."""
    assert list(runs.readers) == ["sql", "pending", "summary", "pel-as-of", "report"]
    for name, (remote, local) in runs.readers.items():
        assert remote == local, f"{name} over Connect:\n{remote}\nlocally:\n{local}"
        assert remote.strip(), f"{name} printed nothing"
    assert json.loads(runs.readers["sql"][0]), "the query found no pending entries"
    rows = json.loads(runs.readers["report"][0])["rows"]
    assert set(rows) == set(REPORT_TABLES) and any(rows.values()), rows
    remote, local = runs.report_tables
    _assert_same(remote, local, "report over Connect")


# ---- what needs the JVM, over Connect ------------------------------------------------------

JVM_PATHS = """
    import json, threading, time
    from pyspark.sql import SparkSession, functions as F
    from pelengine import storage
    from pelengine.pipeline.replay import ReplayPlanError, check_replay_plan, physical_plan
    from pelengine.progress import spark_status

    spark = SparkSession.builder.getOrCreate()  # SPARK_REMOTE
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    found = {"remote": storage.is_remote_session(spark)}
    found["probe"] = storage.probe_connect_delta(spark)
    found["jvm_probe"] = storage.probe_jvm_delta(spark)

    def nothing(batches):
        yield from ()

    rows = spark.range(1, 30).select(
        F.col("id").alias("seq"), (F.col("id") % 2).alias("db"),
        F.concat(F.lit("k"), (F.col("id") % 3).cast("string")).alias("family"),
    )
    def replay_like(df, *sort):
        return (df.repartition(2, "db", "family").sortWithinPartitions(*sort)
                .mapInArrow(nothing, "seq long"))
    good = replay_like(rows, "db", "family", "seq")
    check_replay_plan(good)
    found["plan"] = physical_plan(good)
    try:
        # sorted by the keys alone: the seq order is not kept
        check_replay_plan(replay_like(rows, "db", "family"))
        found["bad_plan"] = "accepted"
    except ReplayPlanError as exc:
        found["bad_plan"] = str(exc)

    status = spark_status(spark)
    seen = []
    job = threading.Thread(target=lambda: spark.range(0, 2, 1, 2).selectExpr(
        "reflect('java.lang.Thread', 'sleep', cast(3000 as bigint))").collect())
    job.start()
    while job.is_alive():
        line = status() if status else None
        if line:
            seen.append(line)
        time.sleep(0.1)
    found["status"] = seen[:1]
    found["status_after"] = status() if status else "no status"

    cached = storage.persist_where_allowed(rows)
    found["cached"] = cached is not None and cached.count() == 29
    if cached is not None:
        cached.unpersist()
    print(json.dumps(found))
"""


@pytest.mark.spark
def test_what_needs_the_jvm_has_a_connect_path(servers: Servers) -> None:
    """The replay plan check reads the server's physical plan and still refuses a plan that
    would lose the seq order; the heartbeat gets stage details from the server's progress
    reports; the store probe asks the catalog (never py4j); caching works."""
    url = servers.delta.wait_ready()
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(JVM_PATHS)],
        capture_output=True,
        text=True,
        env={**env, "SPARK_REMOTE": url},
        timeout=CLI_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["remote"] is True
    assert found["probe"] is True and found["jvm_probe"] is None
    assert "MapInArrow" in found["plan"] and "Physical Plan" not in found["plan"]
    assert "would not keep seq order" in found["bad_plan"]
    assert found["status"] and found["status"][0].startswith("spark stage "), found["status"]
    assert "tasks done" in found["status"][0]
    assert found["status_after"] is None  # the job is done: nothing running
    assert found["cached"] is True


# ---- refusals --------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("server", ["bare", "confs_only"])
def test_a_server_without_delta_lake_is_refused(
    servers: Servers, tmp_path: Path, server: str
) -> None:
    """No Delta Lake on the server, or its extension and catalog confs without its jars
    (where a probe that read the confs would guess delta-spark): refused before any work,
    with what to do; the embedded store is not offered over Connect (nothing written)."""
    url = getattr(servers, server).wait_ready()
    (tmp_path / "events").mkdir()  # refused before it is read
    out = tmp_path / "out"
    code, _, err = _cli(
        url, "reconstruct", "--events", str(tmp_path / "events"), "--out", str(out)
    ).done()
    assert code == cli.EXIT_FAILED, err
    if server == "bare":
        assert "this Spark Connect server has no Delta Lake" in err, err
    else:  # the confs name the extension, the sessions lack it: said so, not guessed
        assert (
            f"this Spark Connect server lists {DELTA_EXTENSION} in {EXTENSIONS_CONF} but its "
            "sessions do not have it (no table_changes function): Delta Lake's jars are "
            "missing there"
        ) in err, err
    assert "embedded delta-rs store is not offered over Spark Connect" in err
    assert f"--conf {EXTENSIONS_CONF}={DELTA_EXTENSION}" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_the_embedded_store_is_refused_over_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for explicitly, before connecting (no server needed)."""
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    monkeypatch.setenv("PELENGINE_STORE", "embedded")
    with pytest.raises(storage.StorageSetupError, match="not offered over Spark Connect"):
        build_session(load_config())


def test_connect_urls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """SPARK_REMOTE or spark.conf's spark.remote; two different ones, or a URL that is not
    sc://, are usage errors (exit 2) naming the setting, never printing a token."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    conf = tmp_path / "remote.yaml"
    conf.write_text('spark:\n  conf:\n    spark.remote: "sc://h:15002/;token=secret"\n')
    assert connect_url(load_config()) is None
    assert connect_url(load_config([conf])) == "sc://h:15002/;token=secret"
    monkeypatch.setenv("SPARK_REMOTE", "sc://h:15002/;token=secret")
    assert connect_url(load_config([conf])) == "sc://h:15002/;token=secret"
    monkeypatch.setenv("SPARK_REMOTE", "sc://other:15002")
    with pytest.raises(ConfigError, match="two Spark Connect servers") as caught:
        connect_url(load_config([conf]))
    assert "secret" not in str(caught.value)
    monkeypatch.setenv("SPARK_REMOTE", "local[2]")
    with pytest.raises(ConfigError, match=r"SPARK_REMOTE=local\[2\]: not a Spark Connect URL"):
        connect_url(load_config())
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.0")
    assert connect_url(load_config()) is None  # the platform's own session, as it is
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION")
    (tmp_path / "out" / "pel" / "_delta_log").mkdir(parents=True)  # an output root
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.run(["summary", "--out", str(tmp_path / "out")])
    assert code == cli.EXIT_USAGE and "not a Spark Connect URL" in err.getvalue()


def test_store_choice_over_connect_never_guesses() -> None:
    """The decision on a Connect session's facts: delta-spark only where the server's sessions
    have Delta's extension loaded and both confs are set; everything else refused, never
    the embedded store (``register`` must not be called)."""

    def no_register() -> None:
        raise AssertionError("the embedded store was registered over Spark Connect")

    delta_spark = storage.SessionFacts(True, DELTA_EXTENSION, DELTA_CATALOG, remote=True)
    mode, why = storage.choose_storage_mode(delta_spark, no_register, "connect")
    assert (mode, why) == (
        storage.DELTA_SPARK,
        "Delta Lake on the JVM: the session this Spark Connect server has delta-spark's classes "
        "(connect)",
    )
    refusals = {
        # no Delta Lake at all
        storage.SessionFacts(False, "", "", remote=True): "has no Delta Lake",
        # the confs set, the jars missing (the catalog lookup cannot load Delta's class)
        storage.SessionFacts(False, DELTA_EXTENSION, DELTA_CATALOG, remote=True): (
            "jars are missing there"
        ),
        # the catalog cannot be asked and no extension is configured: not guessed
        storage.SessionFacts(None, "", "", remote=True): "has no Delta Lake",
        # the classes without the catalog conf
        storage.SessionFacts(True, DELTA_EXTENSION, "", remote=True): (
            "start the Spark Connect server with"
        ),
    }
    for facts, message in refusals.items():
        with pytest.raises(storage.StorageSetupError, match=message):
            storage.choose_storage_mode(facts, no_register)


def test_probe_reads_a_missing_delta_catalog_class_as_no_delta() -> None:
    class Catalog:
        def __init__(self, error: Exception | None) -> None:
            self.error = error

        def functionExists(self, name: str) -> bool:  # noqa: N802 (Spark's name)
            assert name == "table_changes"
            if self.error is not None:
                raise self.error
            return True

    class Session:
        def __init__(self, error: Exception | None = None) -> None:
            self.catalog = Catalog(error)

    missing = RuntimeError(
        "Cannot find catalog plugin class for catalog 'spark_catalog': "
        "org.apache.spark.sql.delta.catalog.DeltaCatalog."
    )
    assert storage.probe_connect_delta(Session()) is True  # type: ignore[arg-type]
    assert storage.probe_connect_delta(Session(missing)) is False  # type: ignore[arg-type]
    assert storage.probe_connect_delta(Session(OSError("unreachable"))) is None  # type: ignore[arg-type]


def test_caching_is_skipped_where_the_platform_refuses_it() -> None:
    class Refused:
        def persist(self) -> Any:
            raise RuntimeError("[NOT_SUPPORTED_WITH_SERVERLESS] PERSIST TABLE is not supported")

    class Broken:
        def persist(self) -> Any:
            raise RuntimeError("boom")

    assert storage.persist_where_allowed(Refused()) is None  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="boom"):
        storage.persist_where_allowed(Broken())  # type: ignore[arg-type]


def test_a_merge_source_is_persisted_where_checkpoints_are_refused() -> None:
    from pelengine.storage.writes import _materialized

    class Frame:
        def __init__(self, checkpoint_error: Exception | None) -> None:
            self.checkpoint_error = checkpoint_error
            self.persisted = False
            self.sparkSession = object()  # a classic session's place

        def localCheckpoint(self, eager: bool) -> Any:  # noqa: N802 (Spark's name)
            assert eager
            if self.checkpoint_error is not None:
                raise self.checkpoint_error
            return "checkpointed"

        def persist(self) -> Any:
            self.persisted = True
            return self

    assert _materialized(Frame(None)) == ("checkpointed", "checkpoint")  # type: ignore[arg-type]
    refused = Frame(RuntimeError("[NOT_SUPPORTED_WITH_SERVERLESS] LOCAL CHECKPOINT"))
    assert _materialized(refused) == (refused, "cached")  # type: ignore[arg-type]
    assert refused.persisted
    with pytest.raises(RuntimeError, match="boom"):  # computing the rows failed: said
        _materialized(Frame(RuntimeError("boom")))  # type: ignore[arg-type]
    # a Connect client cannot send a checkpoint of a deep plan: persisted instead
    remote = Frame(AssertionError("a Connect DataFrame is not checkpointed"))
    remote.sparkSession = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    assert _materialized(remote) == (remote, "cached")  # type: ignore[arg-type]

    # a platform refusing both: the rows as they are, nothing to unpersist
    class Uncached(Frame):
        def persist(self) -> Any:
            raise RuntimeError("[NOT_SUPPORTED_WITH_SERVERLESS] PERSIST TABLE")

    bare = Uncached(RuntimeError("[NOT_SUPPORTED_WITH_SERVERLESS] LOCAL CHECKPOINT"))
    assert _materialized(bare) == (bare, None)  # type: ignore[arg-type]
