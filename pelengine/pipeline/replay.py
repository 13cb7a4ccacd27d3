"""Stage 4: replay. The one shuffle by family, the sort by (family, ``seq``) within
partitions and one Arrow function per partition (``mapInArrow``) of the engine
(pelengine.engine) streaming each family's events, one family after another, through
the model.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
)

from pelengine.engine.udf import make_replay_function, make_unpacker
from pelengine.pipeline.route import whole_family_unit
from pelengine.pipeline.units import EXEC_UNIT
from pelengine.schemas import (
    REPLAY_PACKED_SCHEMA,
    REPLAY_TABLE_SCHEMAS,
    SAVED_STATE_TYPE,
)
from pelengine.settings import Settings


def replay_stage(
    routed_rows: DataFrame,
    settings: Settings,
    as_of_ms: int,
    as_of_seq: int,
    partitions: int,
    *,
    mark_seq: int | None = None,
    unit_groups: dict[tuple[int, str, str], list[str]] | None = None,
    engine: str = "python",
    check: bool = True,
) -> DataFrame:
    """The one shuffle and sort: (family, unit)s hashed to partitions, each partition's
    events sorted by (family, unit, seq), then one Arrow function over each partition
    (``mapInArrow``) that replays its families one after another as their runs of rows
    go by: one Python call per partition, not one per family, and the output of many
    small families packed together (``engine.udf._Packer``).
    ``unit_groups``: the groups of each unit of the families split by group.

    With ``settings.incremental`` the rows may include one ``state`` row per family (its saved
    model, at the family's last applied seq, so it sorts first) and the replay emits
    each family's model at the end.

    ``engine``: "python" or "native" (resolved by the caller, ``engine.native``).

    ``unit`` is a key only when some family is split: otherwise it is the literal null.
    The function reads straight from the one sort by (keys..., seq): a sort by the keys
    alone would not keep the seq order once it spills (its merge interleaves the spill
    runs of one key in any order; seen with a grouped UDF over one stream of 20M events,
    "seq 1 after 11184910"). ``check_replay_plan`` refuses any other plan before it runs
    (``check`` False: the caller checks it, on the plan it keeps, so that it is planned
    once)."""
    keys = ("db", "family", "unit") if unit_groups else ("db", "family")
    replayed = (
        routed_rows.repartition(partitions, *keys)
        .sortWithinPartitions(*keys, "seq")
        .mapInArrow(
            make_replay_function(
                settings,
                as_of_ms,
                as_of_seq,
                mark_seq=mark_seq,
                unit_groups=unit_groups,
                engine=engine,
            ),
            REPLAY_PACKED_SCHEMA,
        )
    )
    if check:
        check_replay_plan(replayed)
    return replayed


def replayed_table(replayed: DataFrame, table: str) -> DataFrame:
    """The rows of one ``table`` of the replay's packed output (``replay_stage``), in the
    table's own columns (``REPLAY_TABLE_SCHEMAS``): only its batches are decoded."""
    return (
        replayed.filter(F.col("table") == table)
        .select("payload")
        .mapInArrow(make_unpacker(table), REPLAY_TABLE_SCHEMAS[table])
    )


#: The physical plan's node of the replay function (``mapInArrow``).
REPLAY_NODE = "MapInArrow"


class ReplayPlanError(RuntimeError):
    """The physical plan of the replay would not deliver each family's events in seq order."""


def physical_plan(df: DataFrame) -> str | None:
    """The physical plan Spark would run for ``df`` as text: the JVM's ``executedPlan`` on
    classic Spark (py4j), the server's ``explain`` on Spark Connect (the same tree under an
    ``== Physical Plan ==`` title); None when the DataFrame offers neither."""
    jdf = getattr(df, "_jdf", None)
    if jdf is not None:
        return str(jdf.queryExecution().executedPlan().toString())
    explain = getattr(df, "_explain_string", None)  # Spark Connect's DataFrame
    if explain is None:
        return None
    text = str(explain(mode="simple"))
    title = "== Physical Plan =="
    return text.split(title, 1)[1].strip("\n") if title in text else text


def check_replay_plan(replayed: DataFrame) -> None:
    """Refuse a replay plan whose Arrow function does not read straight from the one sort
    by (keys..., seq) over the one exchange: with any other sort between them (one by the
    keys alone, which is not stable once it spills) or none, the replay would fail hours
    later with ``SeqOrderError`` (or, without that check, write wrong tables). The plan is
    the JVM's on classic Spark, the server's physical plan (``explain``) on Spark Connect;
    a DataFrame offering neither is left to the function's own check. A persisted
    ``replayed`` is checked on the plan its cache holds (planned once, when persisted)."""
    plan = physical_plan(replayed)
    if plan is None:
        return
    lines = plan.splitlines()
    start = next((i for i, line in enumerate(lines) if REPLAY_NODE in line), None)
    if start is None:
        raise ReplayPlanError(f"no replay function ({REPLAY_NODE}) in the plan:\n{plan}")
    end = next((i for i in range(start, len(lines)) if "Exchange" in lines[i]), len(lines))
    sorts = [line.strip() for line in lines[start:end] if "Sort [" in line]
    if len(sorts) != 1 or "seq" not in sorts[0]:
        raise ReplayPlanError(
            "the replay plan would not keep seq order (expected exactly one sort, by the "
            f"family keys and seq, under the replay function; found {sorts}):\n{plan}"
        )


#: How a saved model travels to the replay: a list of at most one ``SAVED_STATE_TYPE``,
#: empty on every event row. Not a null struct: for a null struct of lists, Spark's Arrow
#: writer re-walks every null list of the batch each time it measures the batch (once
#: per row), which made a 5M-event incremental run's replay quadratic in the batch size.
#: The UDF turns the list back into the struct (``engine.udf.unwrap_state``).
STATE_TRANSPORT_TYPE = ArrayType(SAVED_STATE_TYPE, containsNull=False)


def without_state(rows: DataFrame) -> DataFrame:
    """``rows`` with an empty ``state`` list (no saved model)."""
    return rows.withColumn("state", F.array().cast(STATE_TRANSPORT_TYPE))


def seed_rows(rows: DataFrame, states: DataFrame) -> DataFrame:
    """``rows`` with an empty ``state`` list, plus the saved state of every family they
    reach (a list of one)."""
    rows = without_state(rows)
    reached = rows.select("db", "family").distinct()
    seeds = states.join(reached, ["db", "family"], "inner").select(
        F.col("applied_seq").alias("seq"),
        F.lit(0).cast("long").alias("ts_ms"),
        F.lit(None).cast(ArrayType(StringType())).alias("argv"),
        "db",
        F.lit(None).cast("string").alias("client"),
        F.lit(False).alias("fanout"),
        "family",
        F.lit(False).alias("marker"),
        F.lit(None).cast(LongType()).alias(EXEC_UNIT),
        *whole_family_unit(),
        F.array(F.struct("state_version", "state", "agg_n", "agg_x"))
        .cast(STATE_TRANSPORT_TYPE)
        .alias("state"),
    )
    return rows.unionByName(seeds)
