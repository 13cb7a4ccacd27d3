"""Rows as text: an aligned table, JSON or CSV (used by ``pelengine sql`` and ``report``)."""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import io
import json
from collections.abc import Sequence
from typing import Any

NULL = "null"


def _plain(value: Any) -> Any:
    """A JSON-friendly value: Rows become objects, lists stay lists."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def cell(value: Any) -> str:
    """One value as table text (``null`` for None, JSON for nested values)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    plain = _plain(value)
    if isinstance(plain, dict | list):
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    return str(plain)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned text table (numbers right-aligned), a header and a rule."""
    texts = [[cell(v) for v in row] for row in rows]
    numeric = [
        all(_is_number(row[i]) or row[i] is None for row in rows) and bool(rows)
        for i in range(len(columns))
    ]
    widths = [max([len(c), *(len(t[i]) for t in texts)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(columns)), "  ".join("-" * w for w in widths)]
    out += [line(t) for t in texts]
    return "\n".join(out)


def format_json(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A JSON array with one object per row, one row per line."""
    if not rows:
        return "[]"
    objects = [
        json.dumps(
            {c: _plain(v) for c, v in zip(columns, row, strict=True)},
            ensure_ascii=False,
            default=str,
        )
        for row in rows
    ]
    return "[\n" + ",\n".join(objects) + "\n]"


def format_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """CSV with a header row; null is an empty field, nested values are JSON."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else cell(v) for v in row])
    return buf.getvalue().rstrip("\n")
