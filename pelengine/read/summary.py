"""``pelengine summary``: a short text summary of an output root."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pelengine import storage


def summarize(spark: SparkSession, out_path: str | storage.Output, limit: int = 10) -> str:
    """A short readable summary of the PEL and ownership tables under ``out_path``."""
    run = storage.run_versions(out_path, spark)  # every table as one run left it
    pel = storage.read_output_table(spark, out_path, "pel", run)
    own = storage.read_output_table(spark, out_path, "ownership", run)
    groups = storage.read_output_table(spark, out_path, "groups", run)
    streams = storage.read_output_table(spark, out_path, "streams", run)
    n_pel = pel.count()
    dangling = pel.filter(~F.col("entry_exists")).count()
    lines = [
        f"{streams.count()} streams, {groups.count()} groups, {own.count()} consumers, "
        f"{n_pel} pending entries ({dangling} dangling: deleted from the stream while pending)",
        "",
        "Consumers holding the most pending entries:",
    ]
    top = (
        own.orderBy(F.desc("pending"), "db", "key", "group", "consumer")
        .select(
            "db", "key", "group", "consumer", "pending", "max_delivery_count", "oldest_pending_id"
        )
        .limit(limit)
        .collect()
    )
    lines.append(
        f"  {'db':>3} {'key':<16} {'group':<12} {'consumer':<14} {'pending':>7} "
        f"{'max_dc':>6} oldest"
    )
    for r in top:
        lines.append(
            f"  {r['db']:>3} {r['key']:<16.16} {r['group']:<12.12} {r['consumer']:<14.14} "
            f"{r['pending']:>7} {r['max_delivery_count'] or '-':>6} {r['oldest_pending_id'] or '-'}"
        )
    lines += ["", "Most delivered pending entries (poison candidates):"]
    worst = (
        pel.orderBy(F.desc("delivery_count"), F.desc("idle_ms"))
        .select("db", "key", "group", "id", "consumer", "delivery_count", "idle_ms")
        .limit(limit)
        .collect()
    )
    for r in worst:
        lines.append(
            f"  db {r['db']} {r['key']} {r['group']} {r['id']} held by {r['consumer']}: "
            f"delivered {r['delivery_count']}x, idle {r['idle_ms'] / 1000:.1f} s"
        )
    return "\n".join(lines)
