"""The run report's outcome counts and starting state, from the few rows the replay's
outcome parts give (the Spark runner's ``pipeline.assemble.report_facts`` and the local
runner's ``local.replay.count_outcomes`` collect them; both count by these rules)."""

from __future__ import annotations

from typing import Any

from pelengine.settings import Settings


def replay_report(
    settings: Settings,
    engine: tuple[str, str],
    moment: tuple[int | None, int | None, int | None],
    split: dict[str, int],
    events: dict[str, Any],
    timings: dict[str, float],
) -> dict[str, Any]:
    """The run report's part a replay fills (either runner): the profile and the engine
    and why, the server's node limits, the snapshot moment (``moment``: as_of_ms,
    as_of_seq, the first seq ``--as-of-ms`` left out), what was split by group, the
    events' counts so far and the stages' timings."""
    as_of_ms, as_of_seq, stop_seq = moment
    return {
        "profile": settings.model_profile.name,
        "profile_reason": settings.profile_reason,
        "engine": engine[0],
        "engine_reason": engine[1],
        "stream_node_max": {
            "entries": settings.node_max_entries,
            "bytes": settings.node_max_bytes,
        },
        "as_of_ms": as_of_ms,
        "as_of_seq": as_of_seq,
        "stopped_before_seq": stop_seq,
        "split_by_group": split,
        "events": events,
        "timings_s": timings,
    }


def starting_state(loads: list[Any]) -> list[dict[str, Any]]:
    """Where the replay's starting state came from: the snapshot rows (``PELENGINE.LOAD``,
    written by ``ingest-rdb`` or ``ingest-aof`` from an RDB) per source, in seq order;
    empty: none, the log starts from an empty server."""
    return [
        {
            "source": r["source"],
            "rows": int(r["n"]),
            "first_seq": r["first_seq"],
            "last_seq": r["last_seq"],
            "snapshot_ms": r["snapshot_ms"],
        }
        for r in sorted(loads, key=lambda r: r["first_seq"])
    ]


def count_outcomes(
    pre: list[Any], stats: list[Any], outcomes: list[Any], report: dict[str, Any]
) -> None:
    """Fill the report's applied / ignored / failed counts from the parts of
    :func:`pelengine.pipeline.assemble.report_facts` (or of the local runner's
    ``local.replay.count_outcomes``)."""
    events = report["events"]
    by_kind: dict[str, int] = {"applied": 0, "ignored": 0, "error": 0}
    errors: dict[str, int] = {}
    by_command: dict[str, int] = {}
    notes: dict[str, int] = {}
    for row in pre:
        n = int(row["n"])
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + n
        by_command[row["command"]] = by_command.get(row["command"], 0) + n
        if row["error"]:
            errors[row["error"]] = errors.get(row["error"], 0) + n
    for row in stats:
        kind, n = row["kind"], int(row["n"])
        if kind == "seen":
            by_command[row["command"]] = by_command.get(row["command"], 0) + n
        elif kind == "note":
            notes[row["error"]] = notes.get(row["error"], 0) + n
        else:
            by_kind[kind] = by_kind.get(kind, 0) + n
            if kind == "error":
                errors[row["error"]] = errors.get(row["error"], 0) + n
    for row in outcomes:
        kind, n = row["kind"], int(row["n"])
        by_kind[kind] = by_kind.get(kind, 0) + n
        by_command[row["command"]] = by_command.get(row["command"], 0) + n
        if kind == "error":
            errors[row["error"]] = errors.get(row["error"], 0) + n
    events["applied"] = by_kind.get("applied", 0)
    events["ignored"] = by_kind.get("ignored", 0)
    events["failed"] = by_kind.get("error", 0)
    events["failed_by_kind"] = dict(sorted(errors.items()))
    events["by_command"] = dict(sorted(by_command.items()))
    report["notes"] = notes
