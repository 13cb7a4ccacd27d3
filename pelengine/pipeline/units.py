"""Stage 2: execution units. Every command gets the MULTI/EXEC or script unit it ran in
(``exec_unit``): on 7.2+ servers the commands of one unit share one "now", and on every
server blocked readers are served when a unit ends.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
)
from pyspark.sql.window import Window

from pelengine.model.units import LUA_CLIENT, SCRIPT_CALLS

_SYNTHETIC_SEQ = -(2**63)  # seqs of the rows standing for a unit a previous run left open


EXEC_UNIT = "exec_unit"


def opens_multi() -> Column:
    """True on a MULTI row."""
    return F.upper(F.get(F.col("argv"), 0)) == "MULTI"


def is_lua_row() -> Column:
    """True on a row a script ran (client ``lua``)."""
    return F.coalesce(F.col("client") == F.lit(LUA_CLIENT), F.lit(False))


#: at most this many rows inside a transaction are found by a narrow pass and joined
#: back from the driver (:func:`planned_units`); with more, the window runs over the rows
NARROW_UNIT_ROWS = 500_000


def mark_units(
    events: DataFrame,
    open_units: dict[str, int | None] | None = None,
    *,
    times: bool,
    present: tuple[bool, bool] | None = None,
) -> DataFrame:
    """``events`` with ``exec_unit`` (:func:`planned_units`, whichever way it marks them)."""
    return planned_units(events, open_units, times=times, present=present)[0]


def planned_units(
    events: DataFrame,
    open_units: dict[str, int | None] | None = None,
    *,
    times: bool,
    present: tuple[bool, bool] | None = None,
) -> tuple[DataFrame, bool]:
    """(``events`` with ``exec_unit``, whether it is worth caching: a window or a join
    over every row is in its plan), where ``exec_unit`` is the execution unit each
    command ran in (null: none).

    The same units as the model's (``Replayer._place``): what one client (``client``;
    null for an AOF's single stream) sends between MULTI and EXEC/DISCARD, named by the
    MULTI's seq; and a script: its ``EVAL``/``EVALSHA``/``FCALL`` row (named by its seq,
    or by the transaction's when it ran inside one) and the rows of the commands it
    ran, client ``lua``, which follow it (a ``lua`` row belongs to the script whose call
    is the nearest row before it that is not a ``lua`` row). A family's replay sees
    only its own rows: it learns the units from this column (a read inside one never
    blocks; the readers a unit's writes unblock are served once it ended).

    ``times`` (7.2+): every command of a unit takes the time of the unit's first row (a
    transaction's first command, a script's call row): the server reads its clock once
    per unit. ``open_units``: units a previous incremental run left open (client -> the
    unit's time, None if it had no command yet); they continue into these rows.
    ``present``: whether ``events`` hold a MULTI row and a ``lua`` row, when the caller
    counted them already (else two probes count them here).

    Costs: when the log has MULTI rows, a window per client over four narrow columns
    (client, seq, two flags) in one action, whose rows inside a transaction (at most
    :data:`NARROW_UNIT_ROWS`) come back from the driver through a broadcast join; with
    more of them (or units a previous run left open) the window runs over the rows
    themselves. When it has ``lua`` rows, one over the global order of (seq, two flags),
    joined back by seq; on 7.2+ (``times``) one per unit.
    """
    name = F.upper(F.get(F.col("argv"), 0))
    is_lua = is_lua_row()
    if present is None:
        present = (
            events.filter(opens_multi()).limit(1).count() > 0,
            events.filter(is_lua).limit(1).count() > 0,
        )
    has_multi, has_lua = bool(open_units) or present[0], present[1]
    if not (has_multi or has_lua):
        return events.withColumn(EXEC_UNIT, F.lit(None).cast(LongType())), False
    columns = events.columns
    df = events.unionByName(_open_unit_rows(events, open_units)) if open_units else events
    multi: Any = F.lit(None).cast(LongType())
    inside_rows = None if open_units or not has_multi else _inside_transactions(events)
    wide = has_lua or times or (has_multi and inside_rows is None)
    if inside_rows is not None:
        df = df.join(F.broadcast(inside_rows), "seq", "left")
        multi = F.col("_multi")
    elif has_multi:
        by_client = Window.partitionBy(F.coalesce(F.col("client"), F.lit(""))).orderBy("seq")
        upto = by_client.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        opened = F.last(F.when(name == "MULTI", F.col("seq")), ignorenulls=True).over(upto)
        closed = F.last(F.when(name.isin("EXEC", "DISCARD"), F.col("seq")), ignorenulls=True)
        inside = (
            (name != "MULTI")
            & opened.isNotNull()
            & (opened > F.coalesce(closed.over(upto), F.lit(-1)))
        )
        df = df.withColumn("_multi", F.when(inside, opened))
        multi = F.col("_multi")
    script = F.when(name.isin(*sorted(SCRIPT_CALLS)) & ~is_lua, F.coalesce(multi, F.col("seq")))
    unit: Any = F.coalesce(script, multi)
    if has_lua:
        narrow = df.select("seq", is_lua.alias("_lua"), script.alias("_script"))
        upto_all = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
        anchor = F.last(
            F.when(~F.col("_lua"), F.struct(F.col("_script").alias("unit"))), ignorenulls=True
        ).over(upto_all)
        lua_units = (
            narrow.withColumn("_anchor", anchor)
            .filter(F.col("_lua") & F.col("_anchor.unit").isNotNull())
            .select(F.col("seq").alias("_lua_seq"), F.col("_anchor.unit").alias("_lua_unit"))
        )
        df = df.join(lua_units, df["seq"] == lua_units["_lua_seq"], "left")
        unit = F.coalesce(F.col("_lua_unit"), unit)
    df = df.withColumn(EXEC_UNIT, unit)
    if times:
        same = Window.partitionBy(
            F.col(EXEC_UNIT).isNull(), F.coalesce(F.col(EXEC_UNIT), F.col("seq"))
        ).orderBy("seq")
        first_ts = F.first("ts_ms").over(same.rowsBetween(Window.unboundedPreceding, 0))
        df = df.withColumn(
            "ts_ms", F.when(F.col(EXEC_UNIT).isNotNull(), first_ts).otherwise(F.col("ts_ms"))
        )
    if open_units:
        df = df.filter(F.col("seq") > _SYNTHETIC_SEQ + 1)
    return df.select(*columns, EXEC_UNIT), wide


def _inside_transactions(events: DataFrame) -> DataFrame | None:
    """(``seq``, ``_multi``) of every row of ``events`` inside a transaction (``_multi``: the
    seq of its MULTI), found by the window per client over narrow columns, as a local
    relation; None when there are more than :data:`NARROW_UNIT_ROWS` of them. The rows'
    seqs are unique (the valid rows': rows sharing one were rejected or kept once)."""
    name = F.upper(F.get(F.col("argv"), 0))
    narrow = events.select(
        F.coalesce(F.col("client"), F.lit("")).alias("_c"),
        "seq",
        (name == "MULTI").alias("_m"),
        name.isin("EXEC", "DISCARD").alias("_x"),
    )
    upto = (
        Window.partitionBy("_c")
        .orderBy("seq")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    opened = F.last(F.when(F.col("_m"), F.col("seq")), ignorenulls=True).over(upto)
    closed = F.last(F.when(F.col("_x"), F.col("seq")), ignorenulls=True).over(upto)
    inside = ~F.col("_m") & opened.isNotNull() & (opened > F.coalesce(closed, F.lit(-1)))
    found = (
        narrow.select("seq", F.when(inside, opened).alias("_multi"))
        .filter(F.col("_multi").isNotNull())
        .limit(NARROW_UNIT_ROWS + 1)
        .toArrow()
    )
    if found.num_rows > NARROW_UNIT_ROWS:
        return None
    schema = "seq long, _multi long"
    return events.sparkSession.createDataFrame(found, schema=schema)


def _open_unit_rows(valid: DataFrame, open_units: dict[str, int | None]) -> DataFrame:
    """A MULTI (and, when the unit had a command, one carrying its time) per open unit."""
    rows: list[tuple[Any, ...]] = []
    for client, ts in open_units.items():
        rows.append((_SYNTHETIC_SEQ, 0, ["MULTI"], 0, client or None, None))
        if ts is not None:
            rows.append((_SYNTHETIC_SEQ + 1, ts, ["PING"], 0, client or None, None))
    return valid.sparkSession.createDataFrame(rows, valid.schema)


def open_units_after(
    valid: DataFrame, open_units: dict[str, int | None] | None
) -> dict[str, int | None]:
    """7.2+: the units still open after these rows (client -> unit time or None), for the
    next incremental run; ``valid`` is what ``mark_units`` returned."""
    name = F.upper(F.get(F.col("argv"), 0))
    rows = valid = valid.drop(EXEC_UNIT)
    if open_units:
        rows = rows.unionByName(_open_unit_rows(valid, open_units))
    client = F.coalesce(F.col("client"), F.lit(""))
    brackets = (
        rows.filter(name.isin("MULTI", "EXEC", "DISCARD"))
        .groupBy(client.alias("c"))
        .agg(
            F.max(F.when(name == "MULTI", F.col("seq"))).alias("opened"),
            F.max(F.when(name != "MULTI", F.col("seq"))).alias("closed"),
        )
        .filter(
            F.col("opened").isNotNull()
            & (F.col("closed").isNull() | (F.col("opened") > F.col("closed")))
        )
    )
    still = brackets.collect()
    out: dict[str, int | None] = {}
    for row in still:
        first = (
            rows.filter((client == row["c"]) & (F.col("seq") > row["opened"]))
            .orderBy("seq")
            .select("ts_ms")
            .first()
        )
        out[row["c"]] = None if first is None else int(first["ts_ms"])
    return out
