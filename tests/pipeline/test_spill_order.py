"""The replay keeps each stream's seq order when its sort spills to disk.

A stream replayed by one task (no split by group) once reached the grouped UDF through
a second sort by the grouping keys alone (the optimizer had dropped the constant
``unit`` key from the sort by seq; it does so when no blocking read and no FLUSH adds
rows through a union, as on a hot stream). That sort is stable only in memory: once it spills,
its merge interleaves the spill runs of one key in any order, and one stream of 20M
events failed with "seq 1 after 11184910". Here a job in its own process forces the
sorts to spill every 1,000 rows (``spark.shuffle.spill.numElementsForceSpillThreshold``
is fixed when a session starts, so the shared session cannot take it) on one stream of
about 2,700 events (XADD, XREADGROUP, XACK, XCLAIM; nothing blocks, nothing flushes),
and its tables must equal those of the same run in memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.settings import Settings
from pelengine.storage import read_table, write_table

REPO = Path(__file__).resolve().parents[2]
GROUPS = ("g0", "g1")

SPILL_CONF = """\
reconstruct:
  split_groups: 0
spark:
  master: "local[1]"
  conf:
    spark.sql.shuffle.partitions: 1
    spark.shuffle.spill.numElementsForceSpillThreshold: 1000
"""


def _one_stream(cycles: int) -> list[dict[str, Any]]:
    """Per cycle: 5 XADDs (MAXLEN ~ 1000), a read of them per group, an ack of the read
    two cycles back except its first entry, and every 10th cycle a claim of an entry of
    g0 (a new owner, one more delivery)."""
    argvs: list[list[str]] = [["XGROUP", "CREATE", "hot", g, "$", "MKSTREAM"] for g in GROUPS]
    for cycle in range(cycles):
        ms = 1_000 + cycle
        ids = [f"{ms}-{i}" for i in range(5)]
        argvs += [["XADD", "hot", "MAXLEN", "~", "1000", sid, "f", "v"] for sid in ids]
        for g in GROUPS:
            argvs.append(
                ["XREADGROUP", "GROUP", g, f"c{cycle % 3}", "COUNT", "5", "STREAMS", "hot", ">"]
            )
            if cycle >= 2:
                argvs.append(["XACK", "hot", g, *[f"{ms - 2}-{i}" for i in range(1, 5)]])
        if cycle % 10 == 9:
            argvs.append(["XCLAIM", "hot", "g0", "rescuer", "0", f"{ms - 5}-0"])
    return [
        {
            "seq": i,
            "ts_ms": 1_700_000_000_000 + i,
            "argv": argv,
            "db": 0,
            "client": "app",
            "source": "test",
        }
        for i, argv in enumerate(argvs, start=1)
    ]


@pytest.mark.spark
def test_replay_keeps_seq_order_when_the_sort_spills(spark: Any, tmp_path: Path) -> None:
    events = str(tmp_path / "events")
    write_table(spark.createDataFrame(_one_stream(300), EVENTS_SCHEMA), events)
    in_memory = str(tmp_path / "in_memory")
    run_reconstruct(spark, events, in_memory, Settings(split_groups=0))

    conf = tmp_path / "spill.yaml"
    conf.write_text(SPILL_CONF)
    spilled = str(tmp_path / "spilled")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "reconstruct.py"),
            "--events",
            events,
            "--out",
            spilled,
            "--conf",
            str(conf),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads((Path(spilled) / "_run_report.json").read_text())
    assert report["events"]["applied"] > 2_500, report["events"]
    for table in OUTPUT_TABLES:
        assert_df_equality(
            read_table(spark, f"{spilled}/{table}"),
            read_table(spark, f"{in_memory}/{table}"),
            ignore_row_order=True,
            ignore_nullable=True,
        )
