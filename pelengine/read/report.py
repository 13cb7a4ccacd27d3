"""The operational report: what needs a person's attention in a snapshot.

Five tables, each built from the output tables of one root (no replay):

* ``report_poison`` — poison candidates: pending entries delivered at least
  ``poison_count`` times (``pel.delivery_count >= N``);
* ``report_stuck`` — stuck entries: pending entries idle longer than
  ``stuck_idle_ms`` (``idle > T``, idle measured at ``now_ms``: the snapshot's
  ``as_of_ms`` unless given);
* ``report_dead_consumers`` — consumers that own pending entries and were inactive
  longer than ``dead_inactive_ms``: ``now - active_time_ms``, or ``now -
  seen_time_ms`` where the active time is null (Redis < 7.2 has none);
  ``inactive_basis`` says which;
* ``report_dangling`` — pending entries whose stream entry is gone
  (``entry_exists`` false: deleted or trimmed while pending; ``XCLAIM`` of them
  only removes them from the PEL);
* ``report_lag`` — groups whose lag grew: the ``groups`` table compared with its
  previous Delta versions (every run rewrites it, so its history holds the earlier
  snapshots; versions with the same ``as_of_seq`` as a newer one are the same
  snapshot and are skipped). ``trend = 'growing'``: the lag rose strictly in each
  of the last ``lag_runs`` runs; ``trend = 'unknown'``: the group is in every
  compared snapshot but its lag is nil in one of them (Redis cannot compute it:
  ``XINFO GROUPS`` shows nil), so growth cannot be told. Groups missing from an
  older snapshot (new groups) are not compared.

Library use (the notebook, jobs)::

    from pelengine.read.report import Thresholds, build_report, write_report
    rep = build_report(spark, "out", Thresholds(poison_count=3))
    rep.tables["report_poison"].show()      # DataFrames, nothing written yet
    write_report(spark, "out", rep)         # Delta tables out/report_*
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType

from pelengine import storage
from pelengine.settings import Thresholds  # conf report: (pelengine/conf/defaults.yaml)

REPORT_TABLES = (
    "report_poison",
    "report_stuck",
    "report_dead_consumers",
    "report_dangling",
    "report_lag",
)
_ENTRY = (
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "consumer",
    "delivery_count",
    "delivery_time_ms",
)
MAX_SNAPSHOT_LOOKBACK = 50  # Delta versions of groups looked at to find lag_runs+1 snapshots


@dataclass
class OperationalReport:
    """The report's DataFrames (``tables``, by name) and what they were built from."""

    tables: dict[str, DataFrame]
    thresholds: Thresholds
    as_of_ms: int | None
    as_of_seq: int | None
    now_ms: int | None
    lag_versions: list[int] = field(default_factory=list)  # groups versions compared
    notes: list[str] = field(default_factory=list)

    def facts(self) -> dict[str, Any]:
        """JSON-friendly description (thresholds, moment, versions, notes)."""
        return {
            "thresholds": asdict(self.thresholds),
            "as_of_ms": self.as_of_ms,
            "as_of_seq": self.as_of_seq,
            "now_ms": self.now_ms,
            "lag_versions_compared": self.lag_versions,
            "notes": list(self.notes),
        }


# ---- the categories (pure DataFrame functions) --------------------------------------------


def _now(now_ms: int | None) -> Column:
    return F.col("as_of_ms") if now_ms is None else F.lit(now_ms).cast("long")


def poison_candidates(pel: DataFrame, min_count: int) -> DataFrame:
    """Pending entries with ``delivery_count >= min_count``, most delivered first."""
    return (
        pel.filter(F.col("delivery_count") >= F.lit(min_count))
        .select(*_ENTRY, "idle_ms", "entry_exists", "as_of_ms", "as_of_seq")
        .orderBy(F.desc("delivery_count"), F.desc("idle_ms"), "db", "key", "group", "id_ms")
    )


def stuck_entries(pel: DataFrame, min_idle_ms: int, now_ms: int | None = None) -> DataFrame:
    """Pending entries idle longer than ``min_idle_ms`` at ``now_ms`` (default: as_of_ms)."""
    idle = (_now(now_ms) - F.col("delivery_time_ms")).cast("long")
    return (
        pel.withColumn("idle_ms", idle)
        .filter(F.col("idle_ms") > F.lit(min_idle_ms))
        .select(*_ENTRY, "idle_ms", "entry_exists", "as_of_ms", "as_of_seq")
        .orderBy(F.desc("idle_ms"), "db", "key", "group", "consumer")
    )


def dead_consumers(
    ownership: DataFrame, min_inactive_ms: int, now_ms: int | None = None
) -> DataFrame:
    """Consumers owning pending entries, inactive longer than ``min_inactive_ms``.

    Inactive since ``active_time_ms``, or ``seen_time_ms`` where the active time is
    null (``inactive_basis`` says which)."""
    basis = (
        F.when(F.col("active_time_ms").isNotNull(), F.lit("active_time"))
        .when(F.col("seen_time_ms").isNotNull(), F.lit("seen_time"))
        .cast(StringType())
    )
    since = F.coalesce(F.col("active_time_ms"), F.col("seen_time_ms"))
    return (
        ownership.filter(F.col("pending") > 0)
        .withColumn("inactive_basis", basis)
        .withColumn("inactive_since_ms", since)
        .withColumn("inactive_ms", (_now(now_ms) - since).cast("long"))
        .filter(F.col("inactive_ms") > F.lit(min_inactive_ms))
        .select(
            "db",
            "key",
            "group",
            "consumer",
            "pending",
            "inactive_ms",
            "inactive_basis",
            "inactive_since_ms",
            "seen_time_ms",
            "active_time_ms",
            "oldest_pending_id",
            "max_delivery_count",
            "as_of_ms",
            "as_of_seq",
        )
        .orderBy(F.desc("inactive_ms"), "db", "key", "group", "consumer")
    )


def dangling_entries(pel: DataFrame) -> DataFrame:
    """Pending entries whose stream entry no longer exists."""
    return (
        pel.filter(~F.col("entry_exists"))
        .select(*_ENTRY, "idle_ms", "as_of_ms", "as_of_seq")
        .orderBy("db", "key", "group", "id_ms", "id_seq")
    )


def growing_lag(snapshots: list[tuple[int, DataFrame]], runs: int = 1) -> DataFrame:
    """Groups whose lag rose in each of the last ``runs`` runs, or cannot be told (nil lag).

    ``snapshots``: ``(version, groups DataFrame)`` newest first, at least ``runs + 1`` of
    them (the first ``runs + 1`` are compared). Columns: ``db, key, group, trend``
    (``growing``/``unknown``), ``lag`` (now), ``previous_lag``, ``lag_growth`` (now minus
    previous), ``lags`` and ``versions`` (oldest first), ``as_of_ms``,
    ``previous_as_of_ms``, ``note``, ``as_of_seq``."""
    if len(snapshots) < runs + 1:
        raise ValueError(f"growing lag over {runs} run(s) needs {runs + 1} snapshots")
    chosen = list(reversed(snapshots[: runs + 1]))  # oldest first
    keys = ["db", "key", "group"]
    joined: DataFrame | None = None
    for i, (_, df) in enumerate(chosen):
        part = df.select(
            *keys,
            F.col("lag").alias(f"_lag{i}"),
            F.col("as_of_ms").alias(f"_ms{i}"),
            F.col("as_of_seq").alias(f"_seq{i}"),
        )
        joined = part if joined is None else joined.join(part, keys, "inner")
    assert joined is not None
    last = len(chosen) - 1
    lags = [F.col(f"_lag{i}") for i in range(len(chosen))]
    versions = [version for version, _ in chosen]
    nil_in = [
        F.when(lag.isNull(), F.lit(f"v{version}"))
        for lag, (version, _) in zip(lags, chosen, strict=True)
    ]
    rising = lags[1] > lags[0]
    for i in range(2, len(lags)):
        rising = rising & (lags[i] > lags[i - 1])
    any_nil = F.lit(False)
    for lag in lags:
        any_nil = any_nil | lag.isNull()
    trend = F.when(any_nil, F.lit("unknown")).when(rising, F.lit("growing"))
    note = F.when(
        any_nil,
        F.concat(
            F.lit("lag is nil (Redis cannot compute it) in groups version(s) "),
            F.concat_ws(", ", *nil_in),
        ),
    ).otherwise(F.lit(f"lag rose in each of the last {runs} run(s)"))
    return (
        joined.withColumn("trend", trend)
        .filter(F.col("trend").isNotNull())
        .select(
            *keys,
            "trend",
            lags[last].alias("lag"),
            lags[last - 1].alias("previous_lag"),
            (lags[last] - lags[last - 1]).alias("lag_growth"),
            F.array(*lags).cast(ArrayType(LongType())).alias("lags"),
            F.array(*(F.lit(v).cast("long") for v in versions)).alias("versions"),
            F.col(f"_ms{last}").alias("as_of_ms"),
            F.col(f"_ms{last - 1}").alias("previous_as_of_ms"),
            note.alias("note"),
            F.col(f"_seq{last}").alias("as_of_seq"),
        )
        .orderBy(F.desc_nulls_last("lag_growth"), *keys)
    )


def lag_snapshots(
    spark: SparkSession, out_path: str | storage.Output, wanted: int
) -> tuple[list[tuple[int, DataFrame]], int]:
    """Up to ``wanted`` distinct snapshots of ``groups`` (newest first) from its Delta
    history, and how many versions were looked at. A version with the same
    ``as_of_seq`` as the newer one kept (a rerun on the same events) is skipped; so is
    one that can no longer be read (vacuumed)."""
    path = storage.table_path(out_path, "groups")
    versions = storage.table_versions(spark, path, MAX_SNAPSHOT_LOOKBACK)
    newest = storage.run_versions(out_path, spark).get("groups")
    if newest is not None:  # not the versions of a run that did not complete
        versions = [v for v in versions if v <= newest]
    kept: list[tuple[int, DataFrame]] = []
    last_seq: object = object()
    looked = 0
    for version in versions:
        if len(kept) >= wanted:
            break
        looked += 1
        df = storage.read_table(spark, path, version)
        try:
            moment = df.agg(F.max("as_of_seq")).first()
        except Exception:  # files of an old version vacuumed away
            continue
        seq = moment[0] if moment else None
        if seq is None or seq == last_seq:
            continue  # an empty table, or the same snapshot again
        last_seq = seq
        kept.append((version, df))
    return kept, looked


# ---- the whole report ---------------------------------------------------------------------


def _empty_lag(groups: DataFrame) -> DataFrame:
    return growing_lag([(0, groups), (0, groups)], 1).limit(0)


def build_report(
    spark: SparkSession,
    out_path: str | storage.Output,
    thresholds: Thresholds | None = None,
    *,
    now_ms: int | None = None,
) -> OperationalReport:
    """Every report table as a DataFrame (nothing written). ``now_ms``: measure idle and
    inactive times at this moment instead of each snapshot's ``as_of_ms``."""
    thresholds = thresholds or Thresholds()
    run = storage.run_versions(out_path, spark)  # every table as one run left it
    pel = storage.read_output_table(spark, out_path, "pel", run)
    ownership = storage.read_output_table(spark, out_path, "ownership", run)
    groups = storage.read_output_table(spark, out_path, "groups", run)
    moment = groups.agg(F.max("as_of_ms"), F.max("as_of_seq")).first()
    as_of_ms, as_of_seq = (moment[0], moment[1]) if moment else (None, None)
    notes: list[str] = []
    snapshots, looked = lag_snapshots(spark, out_path, thresholds.lag_runs + 1)
    if len(snapshots) >= thresholds.lag_runs + 1:
        lag = growing_lag(snapshots, thresholds.lag_runs)
        lag_versions = sorted(v for v, _ in snapshots)
    else:
        lag = _empty_lag(groups)
        lag_versions = []
        notes.append(
            f"growing lag not computed: the groups table has {len(snapshots)} distinct "
            f"snapshot(s) in its last {looked} Delta version(s); comparing "
            f"{thresholds.lag_runs} run(s) needs {thresholds.lag_runs + 1} (run reconstruct "
            "again after new events)"
        )
    tables = {
        "report_poison": poison_candidates(pel, thresholds.poison_count),
        "report_stuck": stuck_entries(pel, thresholds.stuck_idle_ms, now_ms),
        "report_dead_consumers": dead_consumers(ownership, thresholds.dead_inactive_ms, now_ms),
        "report_dangling": dangling_entries(pel),
        "report_lag": lag,
    }
    return OperationalReport(tables, thresholds, as_of_ms, as_of_seq, now_ms, lag_versions, notes)


def write_report(
    spark: SparkSession, out_path: str | storage.Output, report: OperationalReport
) -> dict[str, int]:
    """Write every report table as ``out_path/<name>`` (overwrite, one commit each);
    returns the rows written per table."""
    rows: dict[str, int] = {}
    for name, df in report.tables.items():
        path = storage.table_path(out_path, name)
        storage.write_table(df, path, "overwrite", overwrite_schema=True)
        rows[name] = storage.table_row_count(spark, path)
    return rows


# ---- printing -----------------------------------------------------------------------------

_SECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "report_poison": (
        "Poison candidates (delivered >= {poison_count} times)",
        ("db", "key", "group", "id", "consumer", "delivery_count", "idle_ms", "entry_exists"),
    ),
    "report_stuck": (
        "Stuck entries (idle > {stuck_idle_ms} ms)",
        ("db", "key", "group", "id", "consumer", "idle_ms", "delivery_count", "entry_exists"),
    ),
    "report_dead_consumers": (
        "Dead consumers (pending > 0, inactive > {dead_inactive_ms} ms)",
        ("db", "key", "group", "consumer", "pending", "inactive_ms", "inactive_basis"),
    ),
    "report_dangling": (
        "Dangling entries (pending, but deleted from the stream)",
        ("db", "key", "group", "id", "consumer", "delivery_count", "idle_ms"),
    ),
    "report_lag": (
        "Groups with growing lag (rose in each of the last {lag_runs} run(s); nil lag: unknown)",
        ("db", "key", "group", "trend", "lag", "previous_lag", "lag_growth", "lags"),
    ),
}


def describe(
    report: OperationalReport,
    counts: dict[str, int],
    out_path: str | storage.Output,
    limit: int = 20,
) -> str:
    """The report as readable text: per table its count (``counts``, e.g. what
    :func:`write_report` wrote) and its first ``limit`` rows in the table's order (persist
    ``report.tables`` first to not compute them twice)."""
    from pelengine.tabular import format_table

    when = f"seq {report.as_of_seq} ({report.as_of_ms} ms)"
    now = (
        f"idle/inactive times at --now-ms {report.now_ms}"
        if report.now_ms is not None
        else "idle/inactive times at the snapshot's as_of_ms"
    )
    lines = [f"Operational report of {out_path}, snapshot as of {when}; {now}"]
    th = asdict(report.thresholds)
    for name, (title, columns) in _SECTIONS.items():
        n = counts.get(name, 0)
        lines += ["", f"{title.format(**th)}: {n}"]
        if not n:
            continue
        rows = report.tables[name].select(*columns).limit(limit).collect()
        table = format_table(list(columns), [tuple(r) for r in rows])
        lines += ["  " + line for line in table.splitlines()]
        if n > len(rows):
            lines.append(f"  ... {n - len(rows)} more (table {name}, or --limit)")
    lines.append("")
    lines += [f"note: {note}" for note in report.notes]
    if report.lag_versions:
        lines.append(f"lag compared across groups versions {report.lag_versions}")
    lines.append(
        "rows: "
        + ", ".join(f"{name} {counts.get(name, 0)}" for name in report.tables)
        + f" (written under {out_path})"
    )
    return "\n".join(lines)
