"""The local runner's merge of delivery segments in Arrow (``local.replay._merged_runs``)
equals the model's (``model.delivery.merge_delivery_segments``, through ``_merged``), row
for row and in the same order, on random segments with what the merge decides between:
several segments per entry, delivery times missing in some, owners unsorted and repeated
(and none), changes tied on ``changed_seq`` or missing, incarnations moved by a RENAME
(before, after or at the segments' last change) and ending under another key."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from pelengine.engine.udf import _arrow_schema
from pelengine.local.replay import _merged, _merged_runs
from pelengine.model.delivery import INCARNATION_COLUMNS, SEGMENT_COLUMNS
from pelengine.schemas import REPLAY_TABLE_SCHEMAS, table_schema

SCHEMA = _arrow_schema(table_schema("delivery_counts"))


def _maybe(rng: random.Random, value: Any, p: float = 0.3) -> Any:
    return None if rng.random() < p else value


def _case(rng: random.Random) -> tuple[pa.Table, pa.Table]:
    """Segments (sorted as ``delivery_counts`` sorts them) and incarnations, each named
    once."""
    segments: list[dict[str, Any]] = []
    incarnations: list[dict[str, Any]] = []
    names = ["alice", "bob", "c", "é", "Zed", "", "a b"]
    for db in range(rng.randint(1, 2)):
        for group in rng.sample(["g1", "g2", "G", "gé"], rng.randint(1, 3)):
            created = rng.randint(1, 50)
            key = rng.choice(["k", "s:1", "s:2"])
            if rng.random() < 0.6:
                moved = rng.random() < 0.5
                incarnations.append(
                    {
                        "db": db,
                        "key": rng.choice([key, "renamed"]),
                        "group": group,
                        "group_created_seq": created,
                        "moved_seq": rng.randint(1, 60) if moved else None,
                        "moved_ms": rng.randint(1_000, 2_000) if moved else None,
                    }
                )
            for ms, sq in sorted({(rng.randint(1, 9), rng.randint(0, 3)) for _ in range(6)}):
                for n in range(rng.randint(1, 4)):
                    first = _maybe(rng, rng.randint(100, 200))
                    change = _maybe(rng, rng.randint(1, 60))
                    segments.append(
                        {
                            "db": db,
                            "key": rng.choice([key, "other"]),
                            "group": group,
                            "group_created_seq": created,
                            "id": f"{ms}-{sq}",
                            "id_ms": ms,
                            "id_seq": sq,
                            "delivery_count": rng.randint(0, 9),
                            "deliveries": rng.randint(0, 5),
                            "owner_names": rng.choices(names, k=rng.randint(0, 4)),
                            "first_delivery_ms": first,
                            "last_delivery_ms": None
                            if first is None
                            else first + rng.randint(0, 9),
                            "status": rng.choice(["pending", "acked", "deleted"]),
                            "closed_ms": _maybe(rng, rng.randint(300, 400)),
                            "segment_n": n,
                            "changed_seq": change,
                            "changed_ms": None if change is None else 1_000 + change,
                        }
                    )
    rng.shuffle(segments)
    segment_schema = _arrow_schema(REPLAY_TABLE_SCHEMAS["delivery_segments"])
    table = pa.Table.from_pylist(segments, schema=segment_schema).select(list(SEGMENT_COLUMNS))
    order = ["db", "group", "group_created_seq", "id_ms", "id_seq", "id", "segment_n"]
    table = table.sort_by([(c, "ascending") for c in order])
    incarnation_schema = _arrow_schema(REPLAY_TABLE_SCHEMAS["group_incarnations"])
    return table, pa.Table.from_pylist(incarnations, schema=incarnation_schema).select(
        list(INCARNATION_COLUMNS)
    )


@pytest.mark.parametrize("seed", range(120))
def test_the_arrow_merge_equals_the_models(seed: int) -> None:
    segments, incarnations = _case(random.Random(seed))
    ours = _merged_runs(segments, incarnations, SCHEMA)
    model = _merged(segments.to_pylist(), incarnations.to_pylist(), SCHEMA)
    assert ours.schema == model.schema
    assert ours.to_pylist() == model.to_pylist()
