"""Input a hostile but fair user writes: binary arguments, columns of other types, values
that do not cast. Each is a small Delta table; none may fail the run (only a table whose
columns cannot be read at all is refused, in one sentence), and every row is accounted
for: read = applied + ignored + failed + rejected, each rejected row with its reason.

The expected tables are written by hand from what Redis would hold."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, _parse_datatype_string

from pelengine import storage
from pelengine.model.text import readable
from pelengine.pipeline.conform import (
    InputContractError,
    check_event_types,
    conform_events,
    split_rejected,
    tag_rejected,
    tagged_facts,
)
from pelengine.runs.full import run_reconstruct

pytestmark = pytest.mark.spark

MSGPACK = b"\x82\xa1a\x01\xa1b\xc3"  # {"a": 1, "b": true}: not UTF-8
BINARY_ROWS = [
    (1, 1000, [b"XADD", b"s", b"1-0", b"payload", MSGPACK]),
    (2, 1001, [b"XADD", b"k\xfe", b"1-0", b"f", b"v"]),
    (3, 1002, [b"XGROUP", b"CREATE", b"s", b"g", b"0"]),
    (4, 1003, [b"XREADGROUP", b"GROUP", b"g", b"c\xff", b"STREAMS", b"s", b">"]),
    (5, 1004, [b"XADD", b"s", b"2-0", b"f\xc3\xa9", "é".encode()]),
]
BINARY_SCHEMA = "seq BIGINT, ts_ms BIGINT, argv ARRAY<BINARY>"


def _run(spark: SparkSession, df: DataFrame, root) -> tuple[dict, dict[str, list]]:
    events, out = str(root / "events"), str(root / "out")
    storage.write_table(df, events)
    report = run_reconstruct(spark, events, out)
    tables = {
        name: storage.read_output_table(spark, out, name).collect()
        for name in ("streams", "pel", "ownership", "rejected_events")
    }
    return report, tables


def _check_binary_result(report: dict, tables: dict[str, list]) -> None:
    # names that are not UTF-8: bytes >= 0x80 as \xhh; valid UTF-8 stays itself
    streams = sorted((r["key"], r["length"], r["last_generated_id"]) for r in tables["streams"])
    assert streams == [("k\\xfe", 1, "1-0"), ("s", 2, "2-0")]
    pel = [(r["key"], r["group"], r["id"], r["consumer"]) for r in tables["pel"]]
    assert pel == [("s", "g", "1-0", "c\\xff")]
    assert [r["consumer"] for r in tables["ownership"]] == ["c\\xff"]
    assert tables["rejected_events"] == []
    events = report["events"]
    assert (events["read"], events["applied"], events["rejected"]) == (5, 5, 0)


def test_binary_argv_is_read_as_bytes(spark: SparkSession, tmp_path) -> None:
    df = spark.createDataFrame(BINARY_ROWS, BINARY_SCHEMA)
    _check_binary_result(*_run(spark, df, tmp_path))


def test_string_argv_holding_bytes_that_are_not_utf8(spark: SparkSession, tmp_path) -> None:
    """Spark strings are bytes: a writer can store ones that are not UTF-8. Before, the
    job died with UnicodeDecodeError in a Python worker."""
    df = spark.createDataFrame(BINARY_ROWS, BINARY_SCHEMA)
    df = df.withColumn("argv", F.col("argv").cast("array<string>"))
    assert df.schema["argv"].dataType == ArrayType(StringType())
    _check_binary_result(*_run(spark, df, tmp_path))


def test_spark_form_of_bytes_equals_the_ingest_form(spark: SparkSession) -> None:
    """The conform stage (Spark SQL) and the ingest commands (Python) write the same
    bytes as the same text."""
    rng = random.Random(19)
    pool = [b"", b"a", b"x", b"\\", "é€".encode(), b"\x00", b"\x7f", b"\x80", b"\xc3", b"\xff"]
    args = [b"".join(rng.choice(pool) for _ in range(rng.randrange(6))) for _ in range(300)]
    df = spark.createDataFrame([(i, 1, [b"XADD", a]) for i, a in enumerate(args)], BINARY_SCHEMA)
    got = {r["seq"]: r["argv"][1] for r in conform_events(df).collect()}
    assert [got[i] for i in range(len(args))] == [readable(a) for a in args]
    assert readable(b"k\xfe") == "k\\xfe"


def test_text_columns_are_cast_and_bad_values_rejected(spark: SparkSession, tmp_path) -> None:
    rows = [
        ("1", "1000", "0", ["XADD", "s", "1-0", "f", "v"]),
        ("2", "x", "0", ["XADD", "s", "2-0", "f", "v"]),
        ("3.5", "1002", "0", ["XADD", "s", "3-0", "f", "v"]),
        ("4", "1003", "zero", ["XADD", "s", "4-0", "f", "v"]),
        ("5", " 1004 ", "1", ["XADD", "s", "5-0", "f", "v"]),
        ("6", "1005", "99999999999", ["XADD", "s", "6-0", "f", "v"]),
    ]
    df = spark.createDataFrame(rows, "seq STRING, ts_ms STRING, db STRING, argv ARRAY<STRING>")
    report, tables = _run(spark, df, tmp_path)
    streams = sorted((r["db"], r["key"], r["length"]) for r in tables["streams"])
    assert streams == [(0, "s", 1), (1, "s", 1)]
    rejected = sorted((r["reason"], r["argv"][2]) for r in tables["rejected_events"])
    assert rejected == [
        ("db is not an INT: '99999999999'", "6-0"),
        ("db is not an INT: 'zero'", "4-0"),
        ("seq is not a BIGINT: '3.5'", "3-0"),
        ("ts_ms is not a BIGINT: 'x'", "2-0"),
    ]
    events = report["events"]
    assert (events["read"], events["applied"], events["rejected"]) == (6, 2, 4)
    # the report counts reasons without the values they quote
    assert events["rejected_by_reason"] == {
        "db is not an INT": 2,
        "seq is not a BIGINT": 1,
        "ts_ms is not a BIGINT": 1,
    }


def test_fractions_and_wide_numbers(spark: SparkSession) -> None:
    """A value casts only exactly: no fraction truncated, no number wrapped."""
    rows = [
        (1.0, 1000.0, 0, ["XADD", "s", "1-0"]),
        (2.5, 1001.0, 0, ["XADD", "s", "2-0"]),
        (3.0, 1e300, 0, ["XADD", "s", "3-0"]),
        (4.0, 1003.0, 2**40, ["XADD", "s", "4-0"]),
    ]
    df = spark.createDataFrame(rows, "seq DOUBLE, ts_ms DOUBLE, db BIGINT, argv ARRAY<STRING>")
    valid, rejected = split_rejected(conform_events(df))
    assert [(r["seq"], r["ts_ms"], r["db"]) for r in valid.collect()] == [(1, 1000, 0)]
    assert sorted(r["reason"] for r in rejected.collect()) == [
        "db is not an INT: '1099511627776'",
        "seq is not a BIGINT: '2.5'",
        "ts_ms is not a BIGINT: '1.0E300'",
    ]


@pytest.mark.parametrize(
    ("ddl", "says"),
    [
        (
            "seq BIGINT, ts_ms BIGINT, argv STRING",
            "column argv is STRING, the contract wants ARRAY<STRING> or ARRAY<BINARY>",
        ),
        (
            "seq BIGINT, ts_ms TIMESTAMP, argv ARRAY<STRING>",
            "column ts_ms is TIMESTAMP, the contract wants BIGINT (Unix milliseconds)"
            " (a timestamp converts with unix_millis",
        ),
        (
            "seq BOOLEAN, ts_ms BIGINT, argv ARRAY<STRING>",
            "column seq is BOOLEAN, the contract wants BIGINT",
        ),
        ("seq BIGINT, ts_ms BIGINT, argv MAP<STRING,STRING>", "column argv is MAP<STRING,STRING>"),
        (
            "seq BIGINT, ts_ms BIGINT, argv ARRAY<STRING>, client ARRAY<STRING>",
            "column client is ARRAY<STRING>, the contract wants STRING",
        ),
        ("seq BIGINT, argv ARRAY<STRING>", "lacks required column(s) ts_ms"),
    ],
)
def test_columns_of_a_type_that_cannot_be_cast_are_named(
    spark: SparkSession, ddl: str, says: str
) -> None:
    with pytest.raises(InputContractError) as caught:
        check_event_types(_parse_datatype_string(ddl))
    assert says in str(caught.value)


def test_types_that_cast_are_accepted(spark: SparkSession) -> None:  # parses DDL
    for ddl in (
        "seq INT, ts_ms DECIMAL(20,0), argv ARRAY<BINARY>, db BIGINT, client INT, source STRING",
        "seq STRING, ts_ms STRING, argv ARRAY<INT>, db STRING",
        "seq BIGINT, ts_ms BIGINT, argv ARRAY<STRING>, extra MAP<STRING,INT>",
    ):
        check_event_types(_parse_datatype_string(ddl))


def test_cli_refuses_a_string_argv_in_one_sentence(
    spark: SparkSession, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pelengine import cli

    events = str(tmp_path / "events")
    df = spark.createDataFrame(
        [(1, 1000, "XADD s 1-0 f v")], "seq BIGINT, ts_ms BIGINT, argv STRING"
    )
    storage.write_table(df, events)
    code = cli.run(
        ["reconstruct", "--events", events, "--out", str(tmp_path / "o")],
        spark=spark,
        progress=lambda _: None,
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "column argv is STRING, the contract wants ARRAY<STRING> or ARRAY<BINARY>" in err
    assert "AnalysisException" not in err and "Traceback" not in err


def test_one_aggregate_gives_the_probes_and_the_rejected_counts(spark: SparkSession) -> None:
    """``tagged_facts``: the valid rows' count, bounds and flags, the db argument of the last
    SELECT without db that selects one (by seq, not by row order), and the rejected rows by
    reason."""
    rows = [
        (5, 1005, None, ["SELECT", "3"]),
        (2, 1002, None, ["SELECT", "7"]),
        (3, 1003, 0, ["SELECT", "9"]),  # has its db: not a SELECT that sets one
        (4, 1004, 0, ["MULTI"]),
        (6, 1001, None, ["SELECT"]),  # no argument
        (7, 1000, None, ["SELECT", " 5"]),  # refused by the server: selects nothing
        (None, 1006, 0, ["XADD", "s", "1-0", "f", "v"]),
        (8, 1008, 0, None),
        (9, 1009, 0, []),
    ]
    df = spark.createDataFrame(rows, "seq BIGINT, ts_ms BIGINT, db INT, argv ARRAY<STRING>")
    tagged = tag_rejected(conform_events(df), shared=False)
    facts, by_reason = tagged_facts(tagged)
    assert facts == {
        "rows": 6,
        "max_seq": 7,
        "max_ts": 1005,
        "selects_without_db": True,
        "multi": True,
        "lua": False,
        "select_db": 3,
    }
    assert by_reason == {"null seq": 1, "null argv": 1, "empty argv": 1}
    # no SELECT that sets a db, no rejected row
    facts, by_reason = tagged_facts(tagged.filter("seq = 4"))
    assert (facts["rows"], facts["select_db"], facts["selects_without_db"]) == (1, None, False)
    assert by_reason == {}
    # nothing at all
    facts, by_reason = tagged_facts(tagged.filter("seq = 100"))
    assert (facts["rows"], facts["max_seq"], facts["multi"], by_reason) == (0, None, False, {})


def test_reads_a_shared_seq_rejects_tie_no_streams(spark: SparkSession) -> None:
    """The family links are counted in the first pass over the tagged rows, before rows
    sharing a seq are compared: a multi-stream read rejected then (conflicting rows) ties
    no keys, one kept (a duplicate's first) ties them, and a tie another row also makes
    stays."""
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.settings import Settings

    def read(consumer: str, a: str, b: str) -> list[str]:
        return ["XREADGROUP", "GROUP", "g", consumer, "STREAMS", a, b, ">", ">"]

    rows = [(i, 1000 + i, ["XADD", key, "1-0", "f", "v"]) for i, key in enumerate("abcdef", 1)]
    rows += [(10 + i, 1010 + i, ["XGROUP", "CREATE", k, "g", "0"]) for i, k in enumerate("abcdef")]
    rows += [
        (20, 1020, read("c1", "a", "b")),  # conflicting: both rejected, a and b stay apart
        (20, 1020, read("c2", "a", "b")),
        (21, 1021, read("c1", "c", "d")),  # duplicates: the first kept, c and d tied
        (21, 1021, read("c1", "c", "d")),
        (22, 1022, read("c1", "e", "f")),  # e and f tied here...
        (23, 1023, read("c1", "e", "f")),  # ...whatever this conflicting pair makes of it
        (23, 1023, read("c2", "f", "e")),
    ]
    events = spark.createDataFrame(rows, "seq BIGINT, ts_ms BIGINT, argv ARRAY<STRING>")
    result = reconstruct(spark, events, Settings(incremental=True))
    try:
        reasons = sorted(r["reason"] for r in result.rejected.collect())
        assert reasons == [
            "conflicting rows share seq (2)",
            "conflicting rows share seq (2)",
            "conflicting rows share seq (2)",
            "conflicting rows share seq (2)",
            "duplicate row (same seq)",
        ]
        assert result.carried["family_of"] == {
            (0, "c"): "c",
            (0, "d"): "c",
            (0, "e"): "e",
            (0, "f"): "e",
        }
    finally:
        result.unpersist()


@pytest.mark.parametrize(
    ("extra", "told"),
    [
        # a duplicate of the last row: one kept, the largest seq and time stay
        ([(9, 1009, ["XADD", "s", "*", "f", "v"])], True),
        # conflicting rows at the last seq: the largest seq may have gone (asked again)
        ([(9, 1009, ["XADD", "s", "*", "f", "w"])], False),
        # conflicting rows in the middle, one of them the only MULTI (asked again)
        ([(4, 1004, ["XADD", "s", "*", "f", "v"]), (4, 1004, ["MULTI"])], False),
        # conflicting rows in the middle, a MULTI elsewhere: the rows tagged again cannot
        # tell that one stays (asked again)
        (
            [(4, 1004, ["XADD", "s", "*", "f", "v"]), (4, 1004, ["MULTI"]), (6, 1006, ["MULTI"])],
            False,
        ),
        # a MULTI twice at one seq, the last: one kept, the flag and the largest seq stay
        ([(20, 1020, ["MULTI"]), (20, 1020, ["MULTI"])], True),
        # conflicting SELECTs without db: the last SELECT may have gone (asked again)
        ([(4, 1004, ["SELECT", "3"]), (4, 1004, ["SELECT", "2"])], False),
        # a duplicate that also fails on its own (no command name) keeps that reason
        (
            [(5, 1005, ["", "x"]), (5, 1005, ["", "x"]), (3, 1003, ["XADD", "t", "*", "a", "b"])],
            True,
        ),
    ],
)
def test_facts_after_retag_equal_the_facts_asked_again(
    spark: SparkSession, extra: list, told: bool
) -> None:
    """The facts of the rows once shared seqs are compared, worked out on the driver from
    the facts before and the rows tagged again, equal those Spark gives over the rows
    tagged again; where they cannot be told, None (and the run asks Spark)."""
    from pelengine.local.validate import facts_after_retag
    from pelengine.pipeline.conform import first_facts, retag_shared_rows

    rows = [(i, 1000 + i, ["XADD", "s", "*", "f", "v"]) for i in range(1, 10)] + extra
    events = spark.createDataFrame(rows, "seq BIGINT, ts_ms BIGINT, argv ARRAY<STRING>")
    tagged = tag_rejected(conform_events(events), shared=False)
    probed = first_facts(tagged)
    retagged, recache, again = retag_shared_rows(spark, tagged, probed.shared)
    assert retagged is not None and not recache and again is not None
    got = facts_after_retag(probed.facts, probed.rejected_by_reason, again)
    assert (got is not None) == told
    if got is not None:
        assert got == tagged_facts(retagged)
