"""Stage 1: conform and validate the events, once.

The events DataFrame is cast to the input contract (docs/input.md), rows that are not
commands leave with a ``reason`` (``rejected_events``), rows without ``db`` take the db
of the latest ``SELECT`` before them, and ``--as-of-*`` cuts the log at a point in time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DateType,
    IntegerType,
    IntegralType,
    LongType,
    MapType,
    NullType,
    NumericType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from pyspark.sql.window import Window

from pelengine.model.routing import DB_INDEX_PATTERN
from pelengine.pipeline.units import is_lua_row, opens_multi
from pelengine.schemas import (
    EVENTS_SCHEMA,
    OPTIONAL_EVENT_COLUMNS,
    REQUIRED_EVENT_COLUMNS,
)


class InputContractError(ValueError):
    """The events table does not follow the input contract (docs/input.md)."""


# the contract's types (docs/input.md) as the one sentence a refused table gets
_CONTRACT_TYPE = {
    "seq": "BIGINT",
    "ts_ms": "BIGINT (Unix milliseconds)",
    "argv": "ARRAY<STRING> or ARRAY<BINARY>",
    "db": "INT",
    "client": "STRING",
    "source": "STRING",
}
# the column holding why a value could not be cast (null: every value was); dropped with
# ``reason`` by :func:`split_tagged`
CAST_REASON = "_cast_reason"
# between a reason and the value it quotes: the report counts reasons without their values
REASON_VALUE = ": '"


def _is_number(t: DataType) -> bool:
    return isinstance(t, (NumericType, NullType))


def _type_problem(name: str, t: DataType) -> str | None:
    """Why a column of type ``t`` cannot be cast to the contract's type (None: it can)."""
    if name in ("seq", "ts_ms", "db"):
        if _is_number(t) or isinstance(t, StringType):
            return None
        hint = ""
        if isinstance(t, (TimestampType, TimestampNTZType, DateType)) and name == "ts_ms":
            hint = " (a timestamp converts with unix_millis(...))"
        return f"{_CONTRACT_TYPE[name]}{hint}"
    if name == "argv":
        if isinstance(t, NullType):
            return None
        if isinstance(t, ArrayType) and isinstance(
            t.elementType, (StringType, BinaryType, NumericType, NullType)
        ):
            return None
        hint = ""
        if isinstance(t, StringType):
            hint = (
                " (one element per argument: a command line split on spaces would lose arguments)"
            )
        return f"{_CONTRACT_TYPE[name]}{hint}"
    if isinstance(t, (ArrayType, MapType, StructType)):
        return _CONTRACT_TYPE[name]
    return None


def check_event_types(schema: StructType) -> None:
    """Refuse, in one sentence per column, an events table whose columns are missing or
    of a type the contract's cannot be cast from (docs/input.md)."""
    names = {f.name for f in schema.fields}
    missing = [c for c in REQUIRED_EVENT_COLUMNS if c not in names]
    if missing:
        raise InputContractError(
            f"events table lacks required column(s) {', '.join(missing)}; "
            f"it has {', '.join(sorted(names)) or 'no columns'} (see docs/input.md)"
        )
    wrong = []
    for f in schema.fields:
        if f.name in _CONTRACT_TYPE:
            want = _type_problem(f.name, f.dataType)
            if want is not None:
                wrong.append(
                    f"column {f.name} is {f.dataType.simpleString().upper()}, the contract "
                    f"wants {want}"
                )
    if wrong:
        raise InputContractError(
            "events table has columns of the wrong type: "
            + "; ".join(wrong)
            + " (see docs/input.md)"
        )


def _readable_argv(argv: Column, element: DataType) -> Column:
    """``argv`` as ARRAY<STRING> in the text form of :mod:`pelengine.model.text`
    (docs/input.md). A binary argument is its bytes: itself when they are UTF-8 without
    ``\\x``, else escaped (every byte of 0x80 or more and every backslash as ``\\xhh``).
    A string argument is already text in that form (the form the ingest commands write:
    a ``\\xhh`` in it stands for the byte hh) unless its bytes are not UTF-8; then it is
    escaped as a binary one would be."""
    binary = isinstance(element, BinaryType)
    if isinstance(element, NullType):
        return argv.cast(ArrayType(StringType()))

    def one(x: Column) -> Column:
        raw = x.cast(BinaryType()) if not isinstance(element, NumericType) else x
        text = raw.cast(StringType())
        if isinstance(element, NumericType):
            return text
        escaped = F.concat_ws(
            "",
            F.transform(
                F.sequence(F.lit(1), F.greatest(F.octet_length(raw), F.lit(1))),
                lambda i: F.when(
                    (F.hex(F.substring(raw, i, 1)) < F.lit("80"))
                    & (F.hex(F.substring(raw, i, 1)) != F.lit("5C")),
                    F.substring(raw, i, 1).cast(StringType()),
                ).otherwise(F.concat(F.lit("\\x"), F.lower(F.hex(F.substring(raw, i, 1))))),
            ),
        )
        return (
            F.when(x.isNull(), F.lit(None).cast(StringType()))
            .when(
                F.is_valid_utf8(text) & ~text.contains("\\x") if binary else F.is_valid_utf8(text),
                text,
            )
            .otherwise(escaped)
        )

    if isinstance(element, NumericType):
        return argv.cast(ArrayType(StringType()))
    # One check per row, compiled (a lambda over the elements would be interpreted, 12x
    # slower): UTF-8 sequences never span an ASCII separator, so the arguments joined by
    # one are valid exactly when each is (and a "\\x" cannot span one either). The
    # escaping runs only for a row that needs it.
    text = argv.cast(ArrayType(StringType()))
    joined = F.concat_ws("\n", text)
    as_is = F.is_valid_utf8(joined) & ~joined.contains("\\x") if binary else F.is_valid_utf8(joined)
    return F.when(as_is, text).otherwise(F.transform(argv, one))


def _cast_number(
    name: str, column: Column, source: DataType, target: DataType
) -> tuple[Column, Column | None]:
    """(the column cast to ``target``, why a value could not be: null when it could).
    A value casts only exactly: text must be a whole number, a fraction is refused."""
    fits = isinstance(source, NullType) or (
        isinstance(source, IntegralType)
        and (isinstance(target, LongType) or isinstance(source, (ByteType, ShortType, IntegerType)))
    )
    if fits:
        return column.cast(target), None
    cast = column.try_cast(target)
    exact = cast.isNotNull()
    if not isinstance(source, StringType):  # decimal, float, double, a long for an int
        exact = exact & (cast.cast(source) == column)
    words = _CONTRACT_TYPE[name].split(" ")[0]
    article = "an" if words[0] in "AEIOU" else "a"
    why = F.when(
        column.isNotNull() & ~F.coalesce(exact, F.lit(False)),
        F.concat(
            F.lit(f"{name} is not {article} {words}{REASON_VALUE}"),
            column.cast(StringType()),
            F.lit("'"),
        ),
    )
    return F.when(exact, cast), why


def conform_events(events: DataFrame) -> DataFrame:
    """Check the columns' presence and types once (:func:`check_event_types`), cast them
    to the contract's types and add missing optional ones. A value that does not cast
    (text that is not a number, a fraction) becomes null and its row is rejected with the
    reason :data:`CAST_REASON` holds; arguments that are not UTF-8 text are made readable
    (:func:`_readable_argv`)."""
    check_event_types(events.schema)
    types = {f.name: f.dataType for f in events.schema.fields}
    out = events
    reasons: list[Column] = []
    for f in EVENTS_SCHEMA.fields:
        if f.name not in types:
            if f.name in OPTIONAL_EVENT_COLUMNS:
                out = out.withColumn(f.name, F.lit(None).cast(f.dataType))
            continue
        source = types[f.name]
        if f.name == "argv":
            element = source.elementType if isinstance(source, ArrayType) else NullType()
            out = out.withColumn("argv", _readable_argv(F.col("argv"), element))
        elif f.name in ("seq", "ts_ms", "db"):
            cast, why = _cast_number(f.name, F.col(f.name), source, f.dataType)
            if why is not None:
                out = out.withColumn(CAST_REASON + f.name, why)
                reasons.append(F.col(CAST_REASON + f.name))
            out = out.withColumn(f.name, cast)
        else:
            out = out.withColumn(f.name, F.col(f.name).cast(f.dataType))
    firsts = [c for c in out.columns if c.startswith(CAST_REASON) and c != CAST_REASON]
    out = out.withColumn(
        CAST_REASON, F.coalesce(*reasons) if reasons else F.lit(None).cast(StringType())
    )
    return out.drop(*firsts)


def tag_rejected(events: DataFrame, shared: bool) -> DataFrame:
    """``events`` with ``reason``: null for a command to replay, else why the row is
    rejected. ``shared`` (see :func:`retag_shared`): some seq is shared, so the rows
    go through the window by seq that compares whole rows; without it no row can be a
    duplicate and the window (a shuffle of every row) is left out.

    A ``seq`` shared by identical rows keeps one of them (the others are
    ``duplicate row``); a ``seq`` shared by different rows rejects them all,
    since which one the server ran cannot be known.
    """
    if not shared:
        ranked = events.withColumn("_n", F.lit(1)).withColumn("_variants", F.lit(1))
        ranked = ranked.withColumn("_rank", F.lit(1))
    else:
        signature = F.sha2(
            F.to_json(F.struct(F.col("ts_ms"), F.col("argv"), F.col("db"), F.col("client"))),
            256,
        )
        by_seq = Window.partitionBy("seq")
        ranked = (
            events.withColumn("_sig", signature)
            .withColumn("_n", F.count(F.lit(1)).over(by_seq))
            .withColumn("_variants", F.size(F.collect_set("_sig").over(by_seq)))
            .withColumn("_rank", F.row_number().over(by_seq.orderBy("_sig")))
        )
    cast_reason = F.col(CAST_REASON) if CAST_REASON in events.columns else F.lit(None)
    reason = (
        F.when(cast_reason.isNotNull(), cast_reason)
        .when(F.col("seq").isNull(), F.lit("null seq"))
        .when(F.col("ts_ms").isNull(), F.lit("null ts_ms"))
        .when(F.col("argv").isNull(), F.lit("null argv"))
        .when(F.size("argv") == 0, F.lit("empty argv"))
        .when(F.col("argv")[0].isNull() | (F.col("argv")[0] == ""), F.lit("no command name"))
        .when(F.size(F.array_compact("argv")) < F.size("argv"), F.lit("null argument in argv"))
        .when(
            (F.col("_n") > 1) & (F.col("_variants") > 1),
            F.concat(F.lit("conflicting rows share seq ("), F.col("_n").cast("string"), F.lit(")")),
        )
        .when((F.col("_n") > 1) & (F.col("_rank") > 1), F.lit("duplicate row (same seq)"))
    )
    return ranked.withColumn("reason", reason).drop("_sig", "_n", "_variants", "_rank")


def shared_seqs(events: DataFrame) -> DataFrame:
    """The seqs two rows or more share (one column ``seq``; one aggregation of ``seq``)."""
    return (
        events.filter(F.col("seq").isNotNull())
        .groupBy("seq")
        .count()
        .filter("count > 1")
        .select("seq")
    )


# at most this many shared seqs are named in a filter; more go through joins
SHARED_SEQS_LISTED = 10_000


def retag_shared(tagged: DataFrame) -> DataFrame | None:
    """``tagged`` (by :func:`tag_rejected` with ``shared=False``) with the rows that share a
    seq tagged again through the window that compares whole rows, or None when no seq is
    shared. Only those rows are shuffled by seq: the others keep their tags (their window
    partition would hold one row, so the whole-log window gives them the same reason)."""
    found = shared_seqs(tagged).limit(SHARED_SEQS_LISTED + 1).collect()
    if not found:
        return None
    columns = tagged.columns
    if len(found) <= SHARED_SEQS_LISTED:  # the usual case: a few, named in a filter
        is_shared = F.coalesce(F.col("seq").isin([row["seq"] for row in found]), F.lit(False))
        others = tagged.filter(~is_shared)
        sharing = tagged.filter(is_shared).drop("reason")
    else:
        shared = shared_seqs(tagged)
        others = tagged.join(shared, "seq", "left_anti").select(*columns)
        sharing = tagged.join(shared, "seq", "left_semi").drop("reason")
    return others.unionByName(tag_rejected(sharing, shared=True).select(*columns))


#: at most this many rows sharing seqs are tagged again and brought to the driver by
#: :func:`retag_shared_rows`; with more, the caller caches the re-tagged events
SHARED_ROWS_COLLECTED = 100_000


def retag_shared_rows(
    spark: SparkSession, tagged: DataFrame, found_seqs: list[int] | None = None
) -> tuple[DataFrame | None, bool, pa.Table | None]:
    """:func:`retag_shared` without a second materialization of the events: when the rows
    sharing a seq are few (seqs named in a filter, at most :data:`SHARED_ROWS_COLLECTED`
    rows), they are tagged again in one action and brought to the driver, and the result is
    ``tagged`` less those rows plus them as a local relation (a cheap projection of
    ``tagged``'s cache). Returns (the re-tagged events or None when no seq is shared,
    whether the caller should cache them: True only when the rows were too many to
    collect), and the rows tagged again when they were brought to the driver (as tagged
    again, with their ``reason``). ``found_seqs``: the shared seqs when the caller found
    them (at most :data:`SHARED_SEQS_LISTED` + 1 of them, as :func:`first_facts` gives
    them)."""
    if found_seqs is None:
        found = shared_seqs(tagged).limit(SHARED_SEQS_LISTED + 1).collect()
        found_seqs = [row["seq"] for row in found]
    if not found_seqs:
        return None, False, None
    if len(found_seqs) > SHARED_SEQS_LISTED:
        return retag_shared(tagged), True, None
    columns = tagged.columns
    is_shared = F.coalesce(F.col("seq").isin(found_seqs), F.lit(False))
    others = tagged.filter(~is_shared)
    retagged = tag_rejected(tagged.filter(is_shared).drop("reason"), shared=True)
    retagged = retagged.select(*columns)
    rows = retagged.limit(SHARED_ROWS_COLLECTED + 1).toArrow()
    if rows.num_rows > SHARED_ROWS_COLLECTED:
        return others.unionByName(retagged), True, None
    return others.unionByName(spark.createDataFrame(rows, schema=tagged.schema)), False, rows


#: the reasons :func:`tag_rejected` gives only to rows sharing a seq (the rows with none of
#: them were valid before the rows sharing a seq were compared, or rejected for another
#: reason, which they keep)
SHARED_REASONS = ("conflicting rows share seq (", "duplicate row (same seq)")


def shared_rows_change(
    rows: pa.Table, initial_db: int
) -> tuple[list[tuple[int, list[str]]], list[tuple[int, list[str]]]]:
    """Of the rows :func:`retag_shared_rows` tagged again (``rows``, with their new
    ``reason``): (db, argv) of those that were valid before, and of those valid now (db
    null: ``initial_db``)."""
    before: list[tuple[int, list[str]]] = []
    after: list[tuple[int, list[str]]] = []
    for row in rows.select(["db", "argv", "reason"]).to_pylist():
        reason = row["reason"]
        db = initial_db if row["db"] is None else row["db"]
        if reason is None or reason.startswith(SHARED_REASONS):
            before.append((db, row["argv"]))
        if reason is None:
            after.append((db, row["argv"]))
    return before, after


def split_tagged(tagged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid, rejected) of rows :func:`tag_rejected` tagged."""
    valid = tagged.filter(F.col("reason").isNull()).drop("reason", CAST_REASON)
    return valid, tagged.filter(F.col("reason").isNotNull()).drop(CAST_REASON)


def split_rejected(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid, rejected): rows that are not commands get a ``reason`` and leave the replay
    (:func:`tag_rejected`)."""
    tagged = tag_rejected(events, shared=False)
    return split_tagged(retag_shared(tagged) or tagged)


def _db_index(argument: Column) -> Column:
    """The db a SELECT's argument selects, null when the server would refuse it
    (:func:`pelengine.model.routing.db_index`)."""
    return F.when(argument.rlike(DB_INDEX_PATTERN), argument.try_cast("int"))


def select_without_db() -> Column:
    """True on a SELECT row without ``db``: where one is, rows take their db from the
    SELECTs before them (a window over the whole log in seq order)."""
    return (F.upper(F.get(F.col("argv"), 0)) == "SELECT") & F.col("db").isNull()


def selects_without_db(valid: DataFrame) -> bool:
    """Whether some row of ``valid`` is a :func:`select_without_db`."""
    return valid.filter(select_without_db()).limit(1).count() > 0


def resolve_db(
    spark: SparkSession, valid: DataFrame, initial_db: int = 0, needs: bool | None = None
) -> DataFrame:
    """Give rows without ``db`` the db of the latest SELECT before them (an AOF's way), else
    ``initial_db`` (0, or where the previous incremental run's last SELECT left it).
    ``needs``: :func:`selects_without_db` of ``valid`` when the caller knows it."""
    is_select = F.upper(F.get(F.col("argv"), 0)) == "SELECT"
    if needs is None:
        needs = selects_without_db(valid)
    if not needs:
        return valid.withColumn("db", F.coalesce(F.col("db"), F.lit(initial_db)))
    selected = F.when(is_select & F.col("db").isNull(), _db_index(F.get(F.col("argv"), 1)))
    window = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        valid.withColumn("_sel", F.last(selected, ignorenulls=True).over(window))
        .withColumn("db", F.coalesce(F.col("db"), F.col("_sel"), F.lit(initial_db)))
        .drop("_sel")
    )


def last_select() -> Column:
    """An aggregate: the db of the last SELECT without ``db`` that selects one (a refused
    SELECT leaves the db as it was), by seq; null when there is none."""
    selected = F.when(
        select_without_db() & (F.size("argv") > 1), _db_index(F.get(F.col("argv"), 1))
    )
    return F.max_by(selected, F.when(selected.isNotNull(), F.col("seq")))


def tagged_facts(tagged: DataFrame) -> tuple[dict[str, Any], dict[str, int]]:
    """What the stages ask of the rows :func:`tag_rejected` tagged before they change them,
    in one aggregate (one Spark action): of the valid rows ``rows``, ``max_seq``,
    ``max_ts``, whether a SELECT lacks its db (``selects_without_db``), a MULTI is there
    (``multi``), a script ran commands (``lua``), and the db argument of the last SELECT
    without db (``select_db``, None: none, or not a number); and the rejected rows'
    count by reason (the reason without its value)."""
    return _read_facts(_facts_frame(tagged).collect())


def _facts_frame(tagged: DataFrame) -> DataFrame:
    """:func:`tagged_facts`'s aggregate: one row per ``kind`` of reason (null: valid)."""
    kind = F.split(F.col("reason"), REASON_VALUE, 2)[0]
    return tagged.groupBy(kind.alias("kind")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.max("seq").alias("max_seq"),
        F.max("ts_ms").alias("max_ts"),
        F.bool_or(select_without_db()).alias("selects_without_db"),
        F.bool_or(opens_multi()).alias("multi"),
        F.bool_or(is_lua_row()).alias("lua"),
        last_select().alias("select_db"),
    )


#: the facts :func:`tagged_facts` gives
_FACT_NAMES = ("rows", "max_seq", "max_ts", "selects_without_db", "multi", "lua", "select_db")


def _read_facts(found: list[Any]) -> tuple[dict[str, Any], dict[str, int]]:
    facts: dict[str, Any] = {"rows": 0, "max_seq": None, "max_ts": None, "select_db": None}
    by_reason: dict[str, int] = {}
    for row in found:
        if row["kind"] is None:
            facts = {k: row[k] for k in _FACT_NAMES}
        else:
            by_reason[row["kind"]] = row["rows"]
    for flag in ("selects_without_db", "multi", "lua"):
        facts[flag] = bool(facts.get(flag))
    return facts, by_reason


@dataclass
class FirstFacts:
    """What :func:`first_facts` found in one action: the shared seqs (at most
    :data:`SHARED_SEQS_LISTED` + 1), :func:`tagged_facts`'s facts and counts by reason,
    and the rows of the ``extra`` DataFrame it was given (each as a dict of its columns)."""

    shared: list[int]
    facts: dict[str, Any]
    rejected_by_reason: dict[str, int]
    extra: list[dict[str, Any]]


def first_facts(tagged: DataFrame, extra: DataFrame | None = None) -> FirstFacts:
    """The first action over the rows :func:`tag_rejected` tagged (``shared=False``): the
    seqs rows share (:func:`shared_seqs`), :func:`tagged_facts`, and the rows of ``extra``
    (a small DataFrame the caller derives from ``tagged``: the family links), collected
    together. The facts and ``extra`` count the rows as tagged: when a seq is shared its
    rows are tagged again, and the caller asks for both again."""
    columns = dict(_FIRST_COLUMNS)
    if extra is not None:
        for f in extra.schema.fields:
            columns.setdefault(f.name, f.dataType.simpleString())
    parts = [
        ("shared", shared_seqs(tagged).limit(SHARED_SEQS_LISTED + 1)),
        ("facts", _facts_frame(tagged)),
    ]
    if extra is not None:
        parts.append(("extra", extra))
    union: DataFrame | None = None
    for name, df in parts:
        part = df.select(
            F.lit(name).alias("_part"),
            *(
                (F.col(c) if c in df.columns else F.lit(None)).cast(t).alias(c)
                for c, t in columns.items()
            ),
        )
        union = part if union is None else union.unionByName(part)
    assert union is not None
    rows: dict[str, list[Any]] = {"shared": [], "facts": [], "extra": []}
    for row in union.collect():
        rows[row["_part"]].append(row)
    facts, by_reason = _read_facts(rows["facts"])
    wanted = extra.columns if extra is not None else []
    return FirstFacts(
        shared=[row["seq"] for row in rows["shared"]],
        facts=facts,
        rejected_by_reason=by_reason,
        extra=[{c: row[c] for c in wanted} for row in rows["extra"]],
    )


#: the columns every part of :func:`first_facts`'s union has (null where a part has none)
_FIRST_COLUMNS = {
    "seq": "bigint",
    "kind": "string",
    "rows": "bigint",
    "max_seq": "bigint",
    "max_ts": "bigint",
    "selects_without_db": "boolean",
    "multi": "boolean",
    "lua": "boolean",
    "select_db": "int",
}


def cut_as_of(
    valid: DataFrame, as_of_ms: int | None, as_of_seq: int | None
) -> tuple[DataFrame, int | None]:
    """Keep the events up to the point asked; returns them and the first seq left out."""
    out = valid
    if as_of_seq is not None:
        out = out.filter(F.col("seq") <= as_of_seq)
    stop_seq: int | None = None
    if as_of_ms is not None:
        first_late = out.filter(F.col("ts_ms") > as_of_ms).agg(F.min("seq")).first()
        stop_seq = first_late[0] if first_late is not None else None
        if stop_seq is not None:
            out = out.filter(F.col("seq") < stop_seq)
    return out, stop_seq
