"""The ingest commands on the embedded store start no JVM (#34): ``ingest-aof``,
``ingest-monitor`` and ``ingest-rdb`` run as CLI children whose environment has no
``java`` at all (a Spark session could not start), and write the same rows the session
path writes from the same files; the AOF's at-most-once rules hold without a session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pelengine.runs.ingest_aof import ingest_aof
from pelengine.storage import sessionless
from tests.delta_rs import delta_rs_table
from tests.ingest.test_ingest_aof import interrupted_run, resp
from tests.ingest.test_ingest_monitor import _capture, line
from tests.ingest.test_rdb import one_stream_file

REPO = Path(__file__).resolve().parents[2]


def _no_jvm_env() -> dict[str, str]:
    """The environment of a child that cannot start a JVM: only the interpreter's folder on
    PATH (no java, no spark-submit), no JAVA_HOME or SPARK_HOME; the embedded store."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_GATEWAY_PORT", "SPARK_REMOTE")
    }
    env["PATH"] = os.path.dirname(sys.executable)
    env["PELENGINE_STORE"] = "embedded"
    env["PYTHONPATH"] = str(REPO)
    assert shutil.which("java", path=env["PATH"]) is None
    return env


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("pelengine")), *argv],
        env=_no_jvm_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    return sorted(delta_rs_table(path).to_pylist(), key=lambda r: r["seq"])


def _aof(tmp_path: Path) -> Path:
    aof = tmp_path / "appendonly.aof"
    aof.write_bytes(
        resp("SELECT", "3")
        + resp("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        + resp("XADD", "s", "1-0", "f", "v\xe9")
        + resp("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    )
    return aof


def _monitor(tmp_path: Path) -> Path:
    return _capture(
        tmp_path / "capture.log",
        [
            "OK",
            line("1700000000.000100", 0, "127.0.0.1:1", "XADD", "s", "*", "f", "v"),
            "not a command",
            line("1700000000.002100", 2, "127.0.0.1:1", "XGROUP", "CREATE", "s", "g", "0"),
        ],
    )


def test_the_ingest_commands_run_where_no_jvm_can_start(tmp_path: Path) -> None:
    rdb = tmp_path / "dump.rdb"
    rdb.write_bytes(one_stream_file())
    events = tmp_path / "events"
    for argv in (
        ("ingest-rdb", str(rdb), "--events", str(events)),
        ("ingest-aof", str(_aof(tmp_path)), "--events", str(events)),
        ("ingest-monitor", str(_monitor(tmp_path)), "--events", str(events)),
    ):
        done = _cli(*argv)
        assert done.returncode == 0, (argv[0], done.stderr)
        assert "no Spark session is needed" in done.stderr, done.stderr
    rows = _rows(events)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    sources = [r["source"] for r in rows]
    aof_at = sources.index("aof")
    assert set(sources[:aof_at]) == {"rdb"}
    assert sources[aof_at:] == ["aof"] * 4 + ["monitor"] * 2
    assert [r["argv"] for r in rows[aof_at + 1 : aof_at + 3]] == [
        ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
        ["XADD", "s", "1-0", "f", "v\xe9"],
    ]
    again = _cli("ingest-aof", str(tmp_path / "appendonly.aof"), "--events", str(events))
    assert again.returncode == 0 and "nothing new" in again.stdout, again
    assert len(_rows(events)) == len(rows)


def test_a_catalog_table_still_asks_for_a_session(tmp_path: Path) -> None:
    """A table by name needs delta-spark: without a JVM the command fails, it does not
    write a path of that name."""
    done = _cli("ingest-aof", str(_aof(tmp_path)), "--events", "main.redis.events")
    assert done.returncode != 0
    assert "no Spark session is needed" not in done.stderr


def test_an_interrupted_run_is_not_appended_twice_without_a_session(tmp_path: Path) -> None:
    report = interrupted_run(None, tmp_path)
    assert (report["storage"], report["spark_session"]) == ("embedded", False)


def test_write_modes_without_a_session(tmp_path: Path) -> None:
    from pelengine.runs.events import EVENTS_ARROW_SCHEMA
    from pelengine.schemas import EVENTS_SCHEMA

    path = tmp_path / "t"
    one = pa.Table.from_pylist(
        [{"seq": 1, "ts_ms": 5, "argv": ["PING"], "db": 0, "client": "c", "source": "x"}],
        schema=EVENTS_ARROW_SCHEMA,
    )
    sessionless.write_arrow(one, str(path), EVENTS_SCHEMA, "errorifexists")
    with pytest.raises(FileExistsError, match="already exists"):
        sessionless.write_arrow(one, str(path), EVENTS_SCHEMA, "errorifexists")
    sessionless.write_arrow(one, str(path), EVENTS_SCHEMA, "ignore")
    sessionless.write_arrow(one, str(path), EVENTS_SCHEMA, "append")
    assert sessionless.read_arrow(str(path), ["seq", "nope"]).column_names == ["seq"]
    assert sessionless.read_arrow(str(path)).num_rows == 2
    sessionless.write_arrow(one, str(path), EVENTS_SCHEMA, "overwrite")
    assert _rows(path) == one.to_pylist()


@pytest.mark.spark
@pytest.mark.stores  # both stores' session paths (make test)
def test_the_session_path_writes_the_same_rows(spark: Any, tmp_path: Path) -> None:
    """The same files ingested through this run's Spark session (either store) and without
    one give the same rows."""
    from pelengine.runs.ingest_monitor import ingest_monitor
    from pelengine.runs.ingest_rdb import ingest_rdb

    rdb = tmp_path / "dump.rdb"
    rdb.write_bytes(one_stream_file())
    aof, capture = _aof(tmp_path), _monitor(tmp_path)
    tables = {}
    for name, session in (("with", spark), ("without", None)):
        events = tmp_path / name
        ingest_rdb(session, str(rdb), str(events))
        ingest_aof(session, str(aof), str(events))
        ingest_monitor(session, str(capture), str(events))
        # --ids-from-aof replays what the table already holds, read in seq order
        ingest_monitor(session, str(capture), str(events), ids_from_aof=str(aof))
        tables[name] = _rows(events)
        state = delta_rs_table(events / "_aof_ingest").drop_columns(["ingested_at_ms"])
        tables[name + " state"] = state.to_pylist()
    assert tables["with"] == tables["without"] and len(tables["with"]) > 8
    assert tables["with state"] == tables["without state"]
