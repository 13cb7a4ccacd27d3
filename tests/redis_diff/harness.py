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

# Note of a logged command whose reply the test never saw (e.g. a MONITOR capture's rows
# of a voided workload attempt): replayed and judged by the tables, not by its outcome.
UNJUDGED = "unjudged"


@dataclass
class Verdict:
    label: str
    commands: int
    rejected_by_server: int
    outcome_mismatches: list[str] = field(default_factory=list)
    change_mismatches: list[str] = field(default_factory=list)
    changes_checked: int = 0
    table_mismatches: list[tuple[int, list[Mismatch]]] = field(default_factory=list)
    rows_compared: int = 0
    checkpoints: int = 0
    replay_s: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.outcome_mismatches or self.table_mismatches or self.change_mismatches)

    def summary(self) -> str:
        return (
            f"{self.label}: {self.commands} commands ({self.rejected_by_server} rejected by the "
            f"server), {self.checkpoints} checkpoints + end, {self.rows_compared} rows compared, "
            f"{self.changes_checked} commands' ownership_changes checked against their replies, "
            f"replay {self.replay_s:.2f}s, outcome mismatches {len(self.outcome_mismatches)}, "
            f"change mismatches {len(self.change_mismatches)}, "
            f"table mismatches {sum(len(m) for _, m in self.table_mismatches)}"
        )

    def report(self, limit: int = 20) -> str:
        lines = [self.summary()]
        if self.outcome_mismatches:
            lines.append("command outcomes (server vs model), first ones:")
            lines += ["  " + m for m in self.outcome_mismatches[:limit]]
        if self.change_mismatches:
            lines.append("ownership_changes vs the server's replies, first ones:")
            lines += ["  " + m for m in self.change_mismatches[:limit]]
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


def _reply_ids(entries: Any) -> list[str]:
    """IDs of a reply's entries (``[id, fields]`` pairs or bare IDs), skipping nil entries."""
    out = []
    for entry in entries or []:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, list) and entry and entry[1] is not None:
            out.append(entry[0])
    return out


def expected_changes(rec: Record) -> dict[tuple[str, str], list[str]] | None:
    """The ``ownership_changes`` a command made, as its reply tells: {(key, kind): ids}.

    Kinds: ``delivery`` (delivered, reassigned or redelivered), ``claimed``,
    ``dropped``, and for XACK / DELCONSUMER only how many (``["?"] * n``).
    ``None`` when the reply does not say (the command is not checked).
    """
    if rec.error is not None:
        return {}
    upper = [a.upper() for a in rec.argv]
    name = upper[0]
    reply = rec.reply
    if name == "XREADGROUP":
        if reply is None:
            return {}
        streams = upper.index("STREAMS") + 1
        noack = "NOACK" in upper[:streams]
        n = (len(rec.argv) - streams) // 2
        new_reads: dict[str, set[bool]] = {}
        for key, id_arg in zip(
            rec.argv[streams : streams + n], rec.argv[streams + n :], strict=True
        ):
            new_reads.setdefault(key, set()).add(id_arg == ">")
        out: dict[tuple[str, str], list[str]] = {}
        for key, entries in reply:
            if len(new_reads[key]) > 1:
                return None  # the same key read both ways: the reply does not say which
            if not (noack and True in new_reads[key]):  # NOACK matters to '>' reads only
                out.setdefault((key, "delivery"), []).extend(_reply_ids(entries))
        return out
    if name == "XCLAIM":
        return {(rec.argv[1], "claimed"): _reply_ids(reply)}
    if name == "XAUTOCLAIM":
        return {(rec.argv[1], "claimed"): _reply_ids(reply[1]), (rec.argv[1], "dropped"): reply[2]}
    if name == "XACK":
        return {(rec.argv[1], "acked"): ["?"] * int(reply)}
    if name == "XGROUP" and len(upper) > 1 and upper[1] == "DELCONSUMER":
        return {(rec.argv[2], "consumer_deleted"): ["?"] * int(reply)}
    return None


_KIND = {
    "delivered": "delivery",
    "reassigned": "delivery",
    "redelivered": "delivery",
    "claimed": "claimed",
    "dropped": "dropped",
    "acked": "acked",
    "consumer_deleted": "consumer_deleted",
}


def _ended_while_blocked(rec: Record) -> bool:
    """A blocked read whose wait the server ended with an error (its group or key went
    away): the call itself was accepted, and the model counts it applied. Redis 7.0
    says the group or key "no longer exists"; Valkey runs the read again, which fails
    with NOGROUP."""
    error = rec.error or ""
    return rec.note == "blocked" and ("no longer exists" in error or error.startswith("NOGROUP"))


def check_changes(rec: Record, changes: list[dict[str, Any]]) -> list[str]:
    """Compare the model's ownership_changes rows of one command with what its reply says."""
    expected = expected_changes(rec)
    if expected is None:
        return []
    got: dict[tuple[str, str], list[str]] = {}
    consumers: set[str | None] = set()
    for row in changes:
        kind = _KIND.get(row["change"])
        if kind is None:
            continue
        counted = "?" if kind in ("acked", "consumer_deleted") else row["id"]
        got.setdefault((row["key"], kind), []).append(counted)
        if kind in ("delivery", "claimed"):
            consumers.add(row["to_consumer"])
    exp = {k: sorted(v) for k, v in expected.items() if v}
    act = {k: sorted(v) for k, v in got.items() if v}
    if rec.argv[0].upper() == "XCLAIM":
        act.pop((rec.argv[1], "dropped"), None)  # the reply does not list dropped IDs
    problems = []
    if exp != act:
        problems.append(f"{rec.describe()} || changes by reply {exp} != model {act}")
    name = rec.argv[0].upper()
    want = None
    if rec.error is not None:
        pass  # no changes at all expected (checked above)
    elif name in ("XCLAIM", "XAUTOCLAIM"):
        want = rec.argv[3]
    elif name == "XREADGROUP":
        want = rec.argv[[a.upper() for a in rec.argv].index("GROUP") + 2]
    if want is not None and consumers - {want}:
        problems.append(f"{rec.describe()} || to_consumer {sorted(map(str, consumers))} != {want}")
    return problems


def check_job_changes(records: list[Record], changes: list[dict[str, Any]]) -> list[str]:
    """``check_changes`` for every command, on a job's ownership_changes table (by seq)."""
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for row in changes:
        # a blocked read served by a later write changes the PEL at that write's seq;
        # request_seq names the read whose reply shows the change
        by_seq.setdefault(int(row.get("request_seq", row["seq"])), []).append(row)
    problems: list[str] = []
    for rec in records:
        problems += check_changes(rec, by_seq.get(rec.seq, []))
    return problems


def history(records: Iterable[Record], db: int, key: str, upto_seq: int, n: int = 15) -> list[str]:
    """The last ``n`` logged commands of ``db`` that name ``key`` (or flush the db) up to a
    seq; with the ``MULTI`` and ``EXEC``/``DISCARD`` rows of a transaction that has one
    (a script's call row names its keys itself)."""
    rows = [r for r in records if r.seq <= upto_seq and r.db == db]
    shown = {
        i
        for i, r in enumerate(rows)
        if key in r.argv[1:] or r.argv[0].upper() in ("FLUSHDB", "FLUSHALL")
    }
    opened: dict[str | None, int] = {}
    for i, r in enumerate(rows):
        name = r.argv[0].upper()
        if name == "MULTI":
            opened[r.client] = i
        elif name in ("EXEC", "DISCARD") and r.client in opened:
            first = opened.pop(r.client)
            if shown & set(range(first, i)):
                shown |= {first, i}
    return [rows[i].describe() for i in sorted(shown)][-n:]


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
    start: Iterable[dict[str, Any]] = (),
    tolerance_ms: int = 2,
) -> Verdict:
    """``start``: events rows applied first, unjudged (e.g. a snapshot's load rows);
    ``tolerance_ms``: how far times may be from the server's (``compare.compare_table``)."""
    from tests.native.twin import TwinReplayer as Replayer
    from tests.native.twin import twin_snapshot_tables as snapshot_tables

    tables = tuple(tables)
    # a command's time is known to the span of its round trip (a script or MULTI unit runs
    # its commands somewhere in it; a blocked read's span is its wait, not its uncertainty)
    spans = [r.ts_after_ms - r.ts_ms for r in records if "BLOCK" not in map(str.upper, r.argv)]
    tolerance_ms = max(tolerance_ms, *spans) if spans else tolerance_ms
    verdict = Verdict(
        label=label,
        commands=len(records),
        rejected_by_server=sum(1 for r in records if r.error is not None),
        checkpoints=len(checkpoints),
    )
    replayer = Replayer(profile=profile)
    for row in start:
        replayer.apply(row["seq"], row["ts_ms"], row["argv"], row.get("db") or 0, row["client"])
    replayer.drain_changes()
    pending = sorted(checkpoints, key=lambda c: c[0])
    t0 = time.perf_counter()
    # changes are checked once every command ran: a blocked read's changes come
    # during the later write that served it (their request_seq names the read)
    changes_by_request: dict[int, list[dict[str, Any]]] = {}
    for rec in records:
        out = replayer.apply(
            seq=rec.seq, ts_ms=rec.ts_ms, argv=rec.argv, db=rec.db, client=rec.client
        )
        for row in replayer.drain_changes():
            changes_by_request.setdefault(int(row["request_seq"]), []).append(row)
        name = rec.argv[0].upper()
        if name in STREAM_WRITES and rec.note != UNJUDGED:
            server_failed = rec.error is not None and not _ended_while_blocked(rec)
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
            got = snapshot_tables(replayer, as_of_ms=rec.ts_after_ms, as_of_seq=rec.seq)
            problems = compare_tables(
                expected, got, tables, tolerance_ms
            ) + pending_delivery_counts(expected, got)
            verdict.rows_compared += _count_rows(expected)
            if problems:
                verdict.table_mismatches.append((seq, problems))
    last = records[-1] if records else None
    got = snapshot_tables(
        replayer, as_of_ms=last.ts_after_ms if last else 0, as_of_seq=last.seq if last else 0
    )
    for rec in records:
        if rec.note != UNJUDGED and expected_changes(rec) is not None:
            verdict.changes_checked += 1
            verdict.change_mismatches += check_changes(rec, changes_by_request.get(rec.seq, []))
    verdict.replay_s = time.perf_counter() - t0
    problems = compare_tables(truth, got, tables, tolerance_ms) + pending_delivery_counts(
        truth, got
    )
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
