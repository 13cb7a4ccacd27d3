"""Two helpers of the local runner's prepare stage, against what they stand for:
``string_rank`` sorts as the strings sort, and ``_first_of_each`` keeps the first row of
each distinct (db, argv), whatever bytes the arguments hold (separators included)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pelengine.local.prepare import TAKE_SPLIT_ROWS, _first_of_each, string_rank, take_rows

ALPHABET = ["a", "b", "ab", "", "é", "\x00", "\x01", "\x02", "\x03", "\x01\x03", "a\x01", "Z"]


@pytest.mark.parametrize("seed", range(30))
def test_sorting_by_rank_is_sorting_by_the_strings(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(0, 80)
    rows = {
        "db": [rng.randint(0, 2) for _ in range(n)],
        "s": ["".join(rng.choices(ALPHABET, k=rng.randint(0, 3))) for _ in range(n)],
        "seq": [rng.randint(0, 4) for _ in range(n)],
        "i": list(range(n)),
    }
    table = pa.table(rows)
    # two chunks, as a table read in batches has
    chunked = pa.chunked_array(
        [table.column("s").slice(0, n // 2), table.column("s").slice(n // 2)]
    )
    by_rank = table.append_column("rank", string_rank(chunked)).sort_by(
        [("db", "ascending"), ("rank", "ascending"), ("seq", "ascending")]
    )
    expected = sorted(
        range(n), key=lambda i: (rows["db"][i], rows["s"][i].encode(), rows["seq"][i])
    )
    assert by_rank.column("i").to_pylist() == expected


@pytest.mark.parametrize("seed", range(30))
def test_the_first_row_of_each_distinct_argv_in_row_order(seed: int) -> None:
    rng = random.Random(seed)
    pool = [[rng.choice(ALPHABET) for _ in range(rng.randint(0, 3))] for _ in range(8)]
    # argvs that one string with a plain separator would confuse
    pool += [["a\x01\x03b"], ["a", "b"], [], [""], ["x\x01"], ["x", ""], ["x\x01\x02"]]
    pool += [["a\x01\x03", "b"], ["a", "\x01\x03b"]]
    n = rng.randint(0, 60)
    rows = [{"db": rng.randint(0, 1), "argv": rng.choice(pool), "i": i} for i in range(n)]
    table = pa.Table.from_pylist(
        rows,
        schema=pa.schema([("db", pa.int32()), ("argv", pa.list_(pa.string())), ("i", pa.int64())]),
    )
    seen: set[tuple[int, tuple[str, ...]]] = set()
    expected = []
    for row in rows:
        identity = (row["db"], tuple(row["argv"]))
        if identity not in seen:
            seen.add(identity)
            expected.append(row["i"])
    assert _first_of_each(table.slice(0)).column("i").to_pylist() == expected


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("extra", [-1, 7], ids=["one-take", "split"])
def test_rows_taken_in_parts_are_the_rows_in_their_order(workers: int, extra: int) -> None:
    """``take_rows`` gives what one ``take`` gives: the rows, repeated ones too, in the
    order asked, from indices in several chunks, whether it splits them or not."""
    n = TAKE_SPLIT_ROWS + extra
    rng = random.Random(workers)
    table = pa.table(
        {"seq": pa.array(range(n), pa.int64()), "argv": [["XADD", f"k{i % 97}"] for i in range(n)]}
    )
    order = [rng.randrange(n) for _ in range(n)]
    rows = pa.chunked_array(
        [pa.array(order[:1234], pa.int64()), pa.array(order[1234:], pa.int64())]
    )
    got = take_rows(table, rows, workers)
    assert got.num_rows == n
    assert got.to_pylist() == table.take(rows).to_pylist()


@pytest.mark.parametrize("workers", [2, 3])
def test_routing_in_parts_is_routing_once(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """The local runner's native router in ``workers`` threads, each routing its own run of
    rows with its own router (``prepare.route``), routes every row as one router routing
    them all in order does, and the run's tables are the same."""
    import pelengine.local.prepare as prepare
    from pelengine.local.reconstruct import reconstruct_local
    from pelengine.settings import Settings
    from tests.local.test_runners_equal import _log

    events = _log(11, events=3000)
    routed: list[pa.Table] = []
    original = prepare.route

    def route(valid: pa.Table, new_router: object, n: int = 1, batch_rows: int = 256) -> pa.Table:
        # small batches: each part is several batches, and a part boundary falls inside one
        routed.append(original(valid, new_router, n, batch_rows))  # type: ignore[arg-type]
        return routed[-1]

    monkeypatch.setattr(prepare, "route", route)
    settings = Settings(profile="7.0", engine="native")
    once = reconstruct_local(events, settings)
    monkeypatch.setattr(prepare, "ROUTE_SPLIT_ROWS", 0)
    monkeypatch.setattr(prepare, "ROUTE_WORKERS", workers)
    parts = reconstruct_local(events, settings)
    assert routed[0].num_rows > 1000
    assert routed[1].to_pylist() == routed[0].to_pylist()
    for name, table in once.tables.items():
        assert parts.tables[name].to_pylist() == table.to_pylist(), name
