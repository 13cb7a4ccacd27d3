"""Glue of the differential tests: replay recorded commands through the model and judge.

``check_model(result, truth)`` replays a workload's recorded rows through
``pelengine.model.Replayer`` and compares, against the real server:

* every command's outcome: a stream write the server rejected must be an error
  in the model, and one the server executed must not be;
* the tables at every checkpoint the workload read from the server mid-run (so a
  divergence that a later ``DEL`` or ``FLUSHDB`` would erase is still caught);
* the tables at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.redis_diff.capture import Record, dump_records
from tests.redis_diff.compare import Mismatch, compare_table, compare_tables, format_mismatches

# Commands whose success or failure changes state: their outcome must agree.
STREAM_WRITES = frozenset(
    {
        *("XADD", "XTRIM", "XDEL", "XREADGROUP", "XCLAIM", "XAUTOCLAIM", "XACK", "XGROUP"),
        *("XSETID", "DEL", "UNLINK", "RENAME", "RENAMENX", "FLUSHDB", "FLUSHALL"),
    }
)

KEYSPACE = frozenset({"DEL", "UNLINK", "RENAME", "RENAMENX", "FLUSHDB", "FLUSHALL"})


@dataclass
class Verdict:
    label: str
    commands: int
    rejected_by_server: int
    outcome_mismatches: list[str] = field(default_factory=list)
    table_mismatches: list[tuple[int, list[Mismatch]]] = field(default_factory=list)
    rows_compared: int = 0
    checkpoints: int = 0
    replay_s: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.outcome_mismatches and not self.table_mismatches

    def summary(self) -> str:
        return (
            f"{self.label}: {self.commands} commands ({self.rejected_by_server} rejected by the "
            f"server), {self.checkpoints} checkpoints + end, {self.rows_compared} rows compared, "
            f"replay {self.replay_s:.2f}s, outcome mismatches {len(self.outcome_mismatches)}, "
            f"table mismatches {sum(len(m) for _, m in self.table_mismatches)}"
        )

    def report(self, limit: int = 20) -> str:
        lines = [self.summary()]
        if self.outcome_mismatches:
            lines.append("command outcomes (server vs model), first ones:")
            lines += ["  " + m for m in self.outcome_mismatches[:limit]]
        for seq, problems in self.table_mismatches[:1]:
            where = "end of the log" if seq < 0 else f"checkpoint after seq {seq}"
            lines.append(f"tables at the {where} (first {limit}):")
            lines += ["  " + line for line in format_mismatches(problems, limit).splitlines()]
        if len(self.table_mismatches) > 1:
            lines.append(
                "later snapshots with mismatches: "
                + ", ".join(str(s) if s >= 0 else "end" for s, _ in self.table_mismatches[1:])
            )
        lines += self.details
        return "\n".join(lines)


def history(records: Iterable[Record], db: int, key: str, upto_seq: int, n: int = 15) -> list[str]:
    """The last ``n`` logged commands of ``db`` that name ``key`` (or flush the db) up to a seq."""
    out = [
        r.describe()
        for r in records
        if r.seq <= upto_seq
        and r.db == db
        and (key in r.argv[1:] or r.argv[0].upper() in ("FLUSHDB", "FLUSHALL"))
    ]
    return out[-n:]


def pending_delivery_counts(
    truth: dict[str, list[dict[str, Any]]], got: dict[str, list[dict[str, Any]]]
) -> list[Mismatch]:
    """``delivery_counts`` rows with status ``pending`` must be exactly the server's PEL.

    The server keeps no history, so this is the part of ``delivery_counts`` it can
    judge: which entries are pending and their delivery counter.
    """
    expected = [
        {
            "db": r["db"],
            "key": r["key"],
            "group": r["group"],
            "id": r["id"],
            "id_ms": r["id_ms"],
            "id_seq": r["id_seq"],
            "delivery_count": r["delivery_count"],
            "status": "pending",
        }
        for r in truth["pel"]
    ]
    if "delivery_counts" not in got:
        return [Mismatch("delivery_counts", (), "<table>", "present", "missing")]
    actual = [r for r in got["delivery_counts"] if r.get("status") == "pending"]
    return compare_table("delivery_counts", expected, actual)


def _count_rows(tables: dict[str, list[Any]]) -> int:
    return sum(len(v) for k, v in tables.items() if k in ("pel", "ownership", "groups", "streams"))


def check_model(
    label: str,
    records: list[Record],
    truth: dict[str, list[dict[str, Any]]],
    checkpoints: list[tuple[int, dict[str, list[dict[str, Any]]]]] = (),  # type: ignore[assignment]
    profile: str = "7.0",
    tables: Iterable[str] = ("pel", "ownership", "groups", "streams"),
) -> Verdict:
    from pelengine.model import Replayer

    tables = tuple(tables)
    verdict = Verdict(
        label=label,
        commands=len(records),
        rejected_by_server=sum(1 for r in records if r.error is not None),
        checkpoints=len(checkpoints),
    )
    replayer = Replayer(profile=profile)
    pending = sorted(checkpoints, key=lambda c: c[0])
    t0 = time.perf_counter()
    for rec in records:
        out = replayer.apply(
            seq=rec.seq, ts_ms=rec.ts_ms, argv=rec.argv, db=rec.db, client=rec.client
        )
        name = rec.argv[0].upper()
        if name in STREAM_WRITES:
            server_failed = rec.error is not None
            model_failed = out.kind == "error"
            if name in KEYSPACE and out.kind == "ignored":
                # DEL/RENAME/FLUSH* that reach no stream are "ignored" by design (a key the
                # model never saw may hold another type); their effect is checked by the
                # tables, and "applied"/"error" still have to agree with the server.
                model_failed = server_failed
            if server_failed != model_failed:
                verdict.outcome_mismatches.append(
                    f"{rec.describe()} || model: {out.kind}"
                    + (f" ({out.error})" if out.error else "")
                )
        while pending and pending[0][0] == rec.seq:
            seq, expected = pending.pop(0)
            got = replayer.snapshot(as_of_ms=rec.ts_after_ms, as_of_seq=rec.seq)
            problems = compare_tables(expected, got, tables) + pending_delivery_counts(
                expected, got
            )
            verdict.rows_compared += _count_rows(expected)
            if problems:
                verdict.table_mismatches.append((seq, problems))
    last = records[-1] if records else None
    got = replayer.snapshot(
        as_of_ms=last.ts_after_ms if last else 0, as_of_seq=last.seq if last else 0
    )
    verdict.replay_s = time.perf_counter() - t0
    problems = compare_tables(truth, got, tables) + pending_delivery_counts(truth, got)
    verdict.rows_compared += _count_rows(truth)
    if problems:
        verdict.table_mismatches.append((-1, problems))
    if verdict.table_mismatches:
        seq, problems = verdict.table_mismatches[0]
        first = problems[0]
        if len(first.key) >= 2:
            db, key = first.key[0], first.key[1]
            upto = seq if seq >= 0 else (last.seq if last else 0)
            verdict.details.append(f"commands on db {db} key {key!r} up to seq {upto}:")
            verdict.details += ["  " + line for line in history(records, db, key, upto)]
    return verdict


def save_failure(path: Path, records: list[Record], verdict: Verdict, meta: dict[str, Any]) -> Path:
    """Dump the log and the verdict so a failure can be replayed without the server."""
    dumped = dump_records(records, path, extra={**meta, "summary": verdict.summary()})
    dumped.with_suffix(".report.txt").write_text(verdict.report(limit=200), encoding="utf-8")
    return dumped
