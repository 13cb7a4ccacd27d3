"""The local runner's first stage: the events conformed and validated, as the Spark
runner's ``pipeline.conform`` does it (``conform_events``, ``tag_rejected`` with
``retag_shared``, ``split_tagged``, ``tagged_facts``), over one Arrow table.

Columns are checked by the same function (``check_event_types``, one sentence per wrong
column) and cast to the input contract: a value that does not cast exactly (text that is
not a whole number, a fraction, a number too large) becomes null and rejects its row,
saying why; arguments that are not UTF-8 text are made readable (each byte of 0x80 or
more, and each backslash, as ``\\xhh``). Rows that are not commands get their reason, in
the Spark stage's order; a seq shared by equal rows keeps one of them, one shared by
different rows rejects them all. The common case (numbers already numbers, arguments
already text, no shared seq) is Arrow compute; Python loops only over the values that
need Spark's cast rules and over the rows that share a seq.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pelengine.model.routing import db_index
from pelengine.model.units import LUA_CLIENT

#: between a reason and the value it quotes (``pipeline.conform.REASON_VALUE``)
REASON_VALUE = ": '"
_WORDS = {"seq": "BIGINT", "ts_ms": "BIGINT", "db": "INT"}
_TARGET = {"seq": pa.int64(), "ts_ms": pa.int64(), "db": pa.int32()}
_BITS = {"seq": 64, "ts_ms": 64, "db": 32}
EVENT_TYPES = {
    "seq": pa.int64(),
    "ts_ms": pa.int64(),
    # (the item named as Spark names it: Spark's Arrow and the written tables agree)
    "argv": pa.list_(pa.field("element", pa.string())),
    "db": pa.int32(),
    "client": pa.string(),
    "source": pa.string(),
}
OPTIONAL = ("db", "client", "source")


@dataclass
class Conformed:
    """What the first stage gives the next: the valid rows (the contract's columns and
    types, in the input's order), the rejected rows (the input's columns conformed, and
    ``reason``), the facts the later stages ask of the rows, and the rejected rows'
    counts by reason (without the values they quote)."""

    valid: pa.Table
    rejected: pa.Table
    facts: dict[str, Any]
    rejected_by_reason: dict[str, int]
    #: every row, conformed (valid and rejected, in the input's order; no ``reason``)
    rows: pa.Table | None = None


def nonzero(mask: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The positions of the true values of ``mask`` (``pc.indices_nonzero``), taken over
    one chunk: pyarrow 23 crashes the interpreter on a chunked array of no chunks (the
    column of a table of no rows can be one)."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    return pc.indices_nonzero(mask)


def conform_table(events: pa.Table, schema: Any = None) -> Conformed:
    """``events`` conformed and validated (see the module docstring). ``schema``: the
    table's Spark schema (the Delta table's), for the refusal of wrong columns; else
    derived from the Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from pelengine.pipeline.conform import check_event_types

    check_event_types(schema if schema is not None else from_arrow_schema(events.schema))
    n = events.num_rows
    names = events.column_names
    columns: list[pa.ChunkedArray | pa.Array] = []
    fields: list[pa.Field] = []
    reasons: list[pa.Array] = []
    for name in names:
        column = events.column(name)
        if name in ("seq", "ts_ms", "db"):
            column, why = _cast_number(name, column)
            if why is not None:
                reasons.append(why)
        elif name == "argv":
            column = _readable_argv(column)
        elif name in EVENT_TYPES:
            column = _to_text(column)
        columns.append(column)
        fields.append(pa.field(name, EVENT_TYPES.get(name, column.type)))
    for name in OPTIONAL:
        if name not in names:
            columns.append(pa.nulls(n, EVENT_TYPES[name]))
            fields.append(pa.field(name, EVENT_TYPES[name]))
    conformed = pa.Table.from_arrays(
        [c.cast(f.type) for c, f in zip(columns, fields, strict=True)], schema=pa.schema(fields)
    )
    reason = _reasons(conformed, reasons)
    tagged = conformed.append_column("reason", reason)
    if reason.null_count == n:  # every row a command: nothing to filter (or copy)
        valid, rejected = tagged.select(list(EVENT_TYPES)), tagged.slice(0, 0)
    else:
        is_valid = pc.is_null(reason)
        valid = tagged.filter(is_valid).select(list(EVENT_TYPES))
        rejected = tagged.filter(pc.invert(is_valid))
    return Conformed(valid, rejected, facts_of(valid), _by_reason(rejected), conformed)


# ---- casts ----------------------------------------------------------------------------


def _cast_number(name: str, column: pa.ChunkedArray) -> tuple[pa.Array, pa.Array | None]:
    """(``column`` cast to the contract's type, why a value could not be: null where it
    could), by ``pipeline.conform._cast_number``'s rules: a value casts only exactly."""
    target, source = _TARGET[name], column.type
    if pa.types.is_null(source) or (
        pa.types.is_integer(source)
        and (target == pa.int64() or source in (pa.int8(), pa.int16(), pa.int32()))
        and not pa.types.is_unsigned_integer(source)
    ):
        return column.cast(target).combine_chunks(), None
    values = column.to_pylist()
    out: list[int | None] = []
    why: list[str | None] = []
    article = "an" if _WORDS[name][0] in "AEIOU" else "a"
    for value in values:
        got = _exact(value, _BITS[name])
        out.append(got)
        if value is not None and got is None:
            why.append(f"{name} is not {article} {_WORDS[name]}{REASON_VALUE}{_text(value)}'")
        else:
            why.append(None)
    return pa.array(out, target), pa.array(why, pa.string())


def _exact(value: Any, bits: int) -> int | None:
    """``value`` as a whole number of ``bits`` when it is one exactly (Spark's ``try_cast``
    and the check that it casts back to the same value), else None."""
    if value is None:
        return None
    if isinstance(value, str):
        return spark_integral(value, bits)
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value != math.floor(value):
            return None
        whole = int(value)
    elif isinstance(value, Decimal):
        if value != value.to_integral_value():
            return None
        whole = int(value)
    else:
        whole = int(value)
    limit = 1 << (bits - 1)
    return whole if -limit <= whole < limit else None


#: what Spark trims around text it casts to a number: ASCII control characters, the
#: space and DEL (0x7F)
_TRIMMED = "".join(chr(c) for c in range(0x21)) + "\x7f"


def spark_integral(text: str, bits: int) -> int | None:
    """``text`` as Spark's ``try_cast`` of a string to an integral type gives it: blanks
    and control characters (DEL too) trimmed at both ends, an optional sign, digits; a fraction, an
    exponent or anything else is not one; out of range is not one."""
    s = text.strip(_TRIMMED)
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(s)
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def _text(value: Any) -> str:
    """``value`` as Spark casts it to a string (for the reason that quotes it)."""
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes it (shortest digits; plain between 1e-3
    and 1e7, else ``d.dddE±n``)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    x = abs(x)
    digits, exponent = _shortest(x)
    if 1e-3 <= x < 1e7:
        point = exponent + 1
        if point <= 0:
            body = "0." + "0" * (-point) + digits
        elif point >= len(digits):
            body = digits + "0" * (point - len(digits)) + ".0"
        else:
            body = digits[:point] + "." + digits[point:]
        return sign + body
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{exponent}"


def _shortest(x: float) -> tuple[str, int]:
    """The shortest decimal digits that read back as ``x`` (positive) and the power of ten
    of the first."""
    _, digits, exponent = Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    stripped = len(digits) - len("".join(map(str, digits)).lstrip("0"))
    assert isinstance(exponent, int)
    return text.lstrip("0") or "0", len(digits) - stripped + exponent - 1


def _to_text(column: pa.ChunkedArray) -> pa.Array:
    """A column of text (``client``, ``source``) as Spark casts it to a string."""
    if pa.types.is_string(column.type) or pa.types.is_null(column.type):
        return column.cast(pa.string()).combine_chunks()
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.string()).combine_chunks()
    return pa.array([None if v is None else _text(v) for v in column.to_pylist()], pa.string())


def _readable_argv(column: pa.ChunkedArray) -> pa.Array:
    """``argv`` as lists of text (``pipeline.conform._readable_argv``): text stays as it
    is; bytes that are UTF-8 without a ``\\x`` are that text, others escaped; numbers in
    their text form."""
    kind = column.type
    if pa.types.is_null(kind):
        return pa.nulls(len(column), EVENT_TYPES["argv"])
    element = kind.value_type
    if pa.types.is_string(element) or pa.types.is_large_string(element):
        return column.cast(EVENT_TYPES["argv"]).combine_chunks()
    if pa.types.is_null(element) or pa.types.is_integer(element):
        return column.cast(EVENT_TYPES["argv"]).combine_chunks()
    rows = column.to_pylist()
    if pa.types.is_binary(element) or pa.types.is_large_binary(element):
        return pa.array(
            [None if row is None else [_readable_bytes(a) for a in row] for row in rows],
            EVENT_TYPES["argv"],
        )
    return pa.array(
        [None if row is None else [None if a is None else _text(a) for a in row] for row in rows],
        EVENT_TYPES["argv"],
    )


def _readable_bytes(raw: bytes | None) -> str | None:
    """One binary argument as text: itself when UTF-8 without ``\\x``, else every byte of
    0x80 or more and every backslash as ``\\xhh``."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\\x" not in text:
        return text
    return "".join(chr(b) if b < 0x80 and b != 0x5C else f"\\x{b:02x}" for b in raw)


# ---- reasons --------------------------------------------------------------------------


def _first_arguments(argv: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Each row's argument count (null: no argv) and first argument (null: none)."""
    lengths = pc.list_value_length(argv)
    flat = pc.list_flatten(argv)
    starts = argv.offsets.to_numpy()[:-1]
    has = pc.fill_null(pc.greater(lengths, 0), False).to_numpy(zero_copy_only=False)
    at = np.where(has, starts, 0)
    if len(flat):
        firsts = flat.take(pa.array(at, pa.int64()))
        first = pc.if_else(pa.array(has), firsts, pa.scalar(None, pa.string()))
    else:
        first = pa.nulls(len(argv), pa.string())
    return lengths, first


def _reasons(rows: pa.Table, cast_reasons: list[pa.Array]) -> pa.Array:
    """Why each row is rejected (null: it is a command to replay), in
    ``pipeline.conform.tag_rejected``'s order."""
    n = rows.num_rows
    argv = rows.column("argv").combine_chunks()
    lengths, first = _first_arguments(argv)
    with_null = np.zeros(n, dtype=bool)
    flat = pc.list_flatten(argv)
    if flat.null_count:
        parents = pc.list_parent_indices(argv)
        with_null[pc.unique(pc.filter(parents, pc.is_null(flat))).to_numpy()] = True
    cast = cast_reasons[0] if cast_reasons else pa.nulls(n, pa.string())
    for more in cast_reasons[1:]:
        cast = pc.coalesce(cast, more)
    rules: list[tuple[Any, Any]] = [
        (pc.is_valid(cast), cast),
        (pc.is_null(rows.column("seq")), "null seq"),
        (pc.is_null(rows.column("ts_ms")), "null ts_ms"),
        (pc.is_null(argv), "null argv"),
        (pc.fill_null(pc.equal(lengths, 0), False), "empty argv"),
        (
            pc.fill_null(pc.or_kleene(pc.is_null(first), pc.equal(first, "")), False),
            "no command name",
        ),
        (pa.array(with_null), "null argument in argv"),
    ]
    reason = pa.nulls(n, pa.string())
    for condition, value in reversed(rules):
        chosen = value if isinstance(value, pa.Array) else pa.scalar(value, pa.string())
        reason = pc.if_else(pc.fill_null(condition, False), chosen, reason)
    return _shared(rows, reason)


def _shared(rows: pa.Table, reason: pa.Array) -> pa.Array:
    """``reason`` with the rows that share a seq tagged again (``retag_shared``): rows that
    are all equal (time, argv, db, client) keep the first, the others are duplicates; rows
    that differ are all rejected; a reason a row had already comes first."""
    seq = rows.column("seq")
    counts = pc.value_counts(pc.drop_null(seq))
    shared = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(shared) == 0:
        return reason
    at = nonzero(pc.fill_null(pc.is_in(seq, shared), False)).to_pylist()
    picked = rows.take(pa.array(at, pa.int64())).select(["seq", "ts_ms", "argv", "db", "client"])
    by_seq: dict[int, list[tuple[int, Any]]] = {}
    for i, row in zip(at, picked.to_pylist(), strict=True):
        signature = (
            row["ts_ms"],
            None if row["argv"] is None else tuple(row["argv"]),
            row["db"],
            row["client"],
        )
        by_seq.setdefault(row["seq"], []).append((i, signature))
    had = dict(zip(at, reason.take(pa.array(at, pa.int64())).to_pylist(), strict=True))
    changed: dict[int, str] = {}
    for members in by_seq.values():
        variants = {signature for _, signature in members}
        for rank, (i, _) in enumerate(members):
            if had[i] is not None:
                continue
            if len(variants) > 1:
                changed[i] = f"conflicting rows share seq ({len(members)})"
            elif rank > 0:
                changed[i] = "duplicate row (same seq)"
    if not changed:
        return reason
    # only the changed rows leave Arrow: the others (a million, most null) stay as they are
    where = np.zeros(len(reason), dtype=bool)
    where[sorted(changed)] = True
    values = pa.array([changed[i] for i in sorted(changed)], pa.string())
    return pc.replace_with_mask(reason, pa.array(where), values)


def command_names(argv: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each row's command name, upper-cased (``F.upper(argv[0])``; rows with an argument
    or more)."""
    return pc.utf8_upper(pc.list_element(argv, 0))


# ---- facts ----------------------------------------------------------------------------


def facts_of(valid: pa.Table) -> dict[str, Any]:
    """``pipeline.conform.tagged_facts``'s facts of the valid rows."""
    n = valid.num_rows
    facts: dict[str, Any] = {"rows": n, "max_seq": None, "max_ts": None, "select_db": None}
    facts["selects_without_db"] = facts["multi"] = facts["lua"] = False
    if n == 0:
        return facts
    facts["max_seq"] = pc.max(valid.column("seq")).as_py()
    facts["max_ts"] = pc.max(valid.column("ts_ms")).as_py()
    names = command_names(valid.column("argv"))
    selects = pc.and_(pc.equal(names, "SELECT"), pc.is_null(valid.column("db")))
    facts["selects_without_db"] = bool(pc.any(selects).as_py())
    facts["multi"] = bool(pc.any(pc.equal(names, "MULTI")).as_py())
    facts["lua"] = bool(
        pc.fill_null(pc.any(pc.equal(valid.column("client"), LUA_CLIENT)), False).as_py()
    )
    if facts["selects_without_db"]:
        chosen = valid.filter(selects).select(["seq", "argv"]).to_pylist()
        dbs = [(r["seq"], db_index(r["argv"][1])) for r in chosen if len(r["argv"]) > 1]
        selected = [(seq, db) for seq, db in dbs if db is not None]
        if selected:
            facts["select_db"] = max(selected)[1]
    return facts


def facts_after_retag(
    facts: dict[str, Any], by_reason: dict[str, int], rows: pa.Table
) -> tuple[dict[str, Any], dict[str, int]] | None:
    """``pipeline.conform.tagged_facts`` of the rows once those sharing a seq are tagged
    again, from its facts before (``facts``, ``by_reason``) and the rows
    ``pipeline.conform.retag_shared_rows`` tagged again (``rows``, with their new
    ``reason``), with no Spark action (on the Spark runner's driver): the rows a shared
    seq rejects leave the valid rows (their count and their reasons' counts move). None
    when those rows held a maximum or a flag no valid row can be known to hold still
    (the caller then asks the rows again)."""
    from pelengine.pipeline.conform import SHARED_REASONS

    reason = rows.column("reason")
    shared = pc.fill_null(pc.starts_with(reason, SHARED_REASONS[0]), False)
    shared = pc.or_(shared, pc.fill_null(pc.equal(reason, SHARED_REASONS[1]), False))
    gone = facts_of(rows.filter(shared))  # valid before, rejected now
    if gone["rows"] == 0:
        return facts, by_reason
    kept = facts_of(rows.filter(pc.is_null(reason)))  # valid before and now
    after = dict(facts)
    after["rows"] = facts["rows"] - gone["rows"]
    for name in ("max_seq", "max_ts"):
        if gone[name] == facts[name] and kept[name] != facts[name]:
            return None  # the largest may have gone
    for flag in ("selects_without_db", "multi", "lua"):
        if gone[flag] and not kept[flag]:
            return None  # the only row with it may have gone
    if gone["select_db"] is not None:
        return None  # the last SELECT may have gone
    moved = dict(by_reason)
    for value in pc.filter(reason, shared).to_pylist():
        kind = value.split(REASON_VALUE, 1)[0]
        moved[kind] = moved.get(kind, 0) + 1
    return after, moved


def _by_reason(rejected: pa.Table) -> dict[str, int]:
    """The rejected rows' count by reason, without the value a reason quotes."""
    out: dict[str, int] = {}
    for reason in rejected.column("reason").to_pylist():
        kind = reason.split(REASON_VALUE, 1)[0]
        out[kind] = out.get(kind, 0) + 1
    return out
