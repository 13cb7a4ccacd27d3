"""The router's two engines give the same columns.

``make_router(engine="python")`` (``pelengine.model.routing`` and a blank Python model for
the rows that reach no stream) and ``make_router(engine="native")`` (``pelengine_native``'s
``Router``: ``pelmodel::routing`` and a blank native model) route the same batches: random
logs (valid and invalid commands, odd names and IDs, units, loads, blocking reads,
several dbs and null dbs) on every profile, with some keys tied into families. Every
added column of every row must be equal, and the input columns must pass unchanged.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from pelengine.engine.errors import ReplayRowError
from pelengine.engine.udf import make_router
from pelengine.model.replay import PROFILES
from pelengine.settings import Settings
from tests.native.random_logs import random_log

SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("ts_ms", pa.int64()),
        ("argv", pa.list_(pa.string())),
        ("db", pa.int32()),
        ("client", pa.string()),
    ]
)


# hand-picked corners: multi-key writers, units of loads, the last GROUP winning, odd
# case mappings (the Kelvin sign lower-cases to "k", a long s does not to "s")
CORNERS = [
    ["MSET", "a", "1", "b", "2"],
    ["mset", "a"],
    ["RENAME", "a", "b"],
    ["renamenx", "b"],
    ["DEL", "a", "b", "a"],
    ["FLUSHALL"],
    ["flushdb", "x"],
    ["PELENGINE.LOAD", "BEGIN"],
    ["pelengine.load", "begin", "x"],
    ["PELENGINE.LOAD", "KEY", "k"],
    ["XGROUP", "CREATECONSUMER", "k", "g", "c"],
    ["XGROUP", "destroy", "k", "g"],
    ["XGROUP", "HELP"],
    ["XREADGROUP", "GROUP", "g", "c", "GROUP", "h", "d", "STREAMS", "a", "b", ">", ">"],
    ["XREADGROUP", "GROUP", "g", "c", "BLOC\u212a", "5", "STREAMS", "k", ">"],
    ["xreadgroup", "group", "g", "c", "\u017ftreams", "k", ">"],
    ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", "a", ">"],
    ["XACK", "k", "g"],
    ["XCLAIM", "k", "g", "c", "0", "1-1"],
    ["XAUTOCLAIM", "k", "g", "c", "0", "0"],
    ["SET", "k"],
    ["SET", "k", "v"],
    [""],
    ["\u00df"],
    ["XADD"],
    [],
]


def _batches(events: list[Any], rows: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, len(events), rows):
        part = events[start : start + rows]
        out.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array([e[0] for e in part], pa.int64()),
                    pa.array([e[1] for e in part], pa.int64()),
                    pa.array([e[2] for e in part], pa.list_(pa.string())),
                    pa.array([e[3] for e in part], pa.int32()),
                    pa.array([e[4] for e in part], pa.string()),
                ],
                schema=SCHEMA,
            )
        )
    return out


def _family_of(events: list[Any], rng: random.Random) -> dict[tuple[int, str], str]:
    keys = sorted({(e[3], e[2][1]) for e in events if e[3] is not None and len(e[2]) > 1})
    tied = rng.sample(keys, min(len(keys), 12))
    return {k: rng.choice(tied)[1] for k in tied}


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("seed", range(4))
def test_router_engines_equal(profile: str, seed: int) -> None:
    import pelengine_native  # noqa: F401 - fails (never skips) when the core is missing

    rng = random.Random(seed * 31 + 7)
    events = random_log(seed + 500, 1500)
    # null dbs too: the router must not tie a key of no db to a family
    events = [e if rng.random() > 0.02 else (e[0], e[1], e[2], None, e[4]) for e in events]
    last = events[-1]
    events += [(last[0] + i + 1, last[1], argv, i % 3, None) for i, argv in enumerate(CORNERS)]
    family_of = _family_of(events, rng)
    batches = _batches(events, rng.choice([1, 37, 500, 5000]))
    settings = Settings(profile=profile)
    py = list(make_router(settings, family_of, engine="python")(iter(batches)))
    nat = list(make_router(settings, family_of, engine="native")(iter(batches)))
    assert [b.num_rows for b in py] == [b.num_rows for b in nat]
    assert py[0].schema.names == nat[0].schema.names
    for p, n, given in zip(py, nat, batches, strict=True):
        for name in given.schema.names:
            assert n.column(name).equals(given.column(name)), name
        for name in p.schema.names[len(given.schema.names) :]:
            assert p.column(name).to_pylist() == n.column(name).to_pylist(), name


def test_the_native_router_refuses_a_null_argv_element() -> None:
    """The validation stage rejects such rows ("null argument in argv") before routing;
    a router that still got one says which row rather than route it."""
    import pelengine_native  # noqa: F401

    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([1], pa.int64()),
            pa.array([5], pa.int64()),
            pa.array([["XADD", None, "*", "f", "v"]], pa.list_(pa.string())),
            pa.array([0], pa.int32()),
            pa.array([None], pa.string()),
        ],
        schema=SCHEMA,
    )
    with pytest.raises(ReplayRowError, match="routing failed at the event seq 1 .*element 1"):
        list(make_router(Settings(), {}, engine="native")(iter([batch])))
