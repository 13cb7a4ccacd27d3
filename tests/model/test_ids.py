"""Stream ID parsing, ordering and increment, as Redis' streamGenericParseIDOrReply,
string2ll and string2ull (strict parse, then a strtoull fallback) behave."""

from __future__ import annotations

import pytest

from pelengine.model import snapshot_tables
from pelengine.model.ids import (
    MAX_ID,
    U64_MAX,
    ZERO_ID,
    ParseError,
    StreamID,
    format_id,
    incr_id,
    parse_id,
    parse_ll,
    parse_strict_id,
    parse_ull,
    to_signed,
)
from tests.model._support import S, check_facts, check_outcomes, run

M = U64_MAX


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1-2", (1, 2)),
        ("0-0", (0, 0)),
        ("5", (5, 0)),  # missing sequence: 0 by default
        (f"{M}-{M}", (M, M)),
        (f"{M}", (M, 0)),
        # string2ll refuses these, the strtoull fallback accepts them:
        ("007", (7, 0)),
        ("007-010", (7, 10)),
        ("+5", (5, 0)),
        ("+5-+6", (5, 6)),
        (" 5", (5, 0)),
        ("\t5-\n1", (5, 1)),
        ("1- 2", (1, 2)),
        ("1--0", (1, 0)),
        ("0" * 127, (0, 0)),  # 127 bytes still fit the parser's buffer
        ("00000000000000000000001-1", (1, 1)),
        # strtoull negates a leading minus modulo 2**64 (no error):
        ("1--05", (1, M - 4)),
        ("1- -5", (1, M - 4)),
        (f"1--{M}", (1, 1)),
    ],
)
def test_parse_accepts(text: str, expected: tuple[int, int]) -> None:
    assert parse_id(text) == (StreamID(*expected), True)
    assert parse_strict_id(text) == StreamID(*expected)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-5",  # the ms part before the first '-' is empty
        "1--5",  # a plain negative sequence is refused by string2ll and string2ull
        "1-",
        "-1-1",
        "1-2-3",
        "5 ",  # trailing blank: strtoull stops early
        "5-1 ",
        "abc",
        "1-x",
        "0x10",
        "1.5",
        "1e3",
        "+",
        "-",
        "*",
        "5-*",  # only XADD accepts ms-*
        "5-**",
        "18446744073709551616",  # 2**64: overflow
        "1-18446744073709551616",
        "1--18446744073709551616",
        "99999999999999999999999",
        "\u0661-1",  # non-ASCII digits
        "0" * 128,  # longer than the parser's 127-byte buffer
    ],
)
def test_strict_parse_refuses(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_strict_id(text)
    assert info.value.kind == "invalid_id"


def test_dash_and_plus_are_extremes_only_when_not_strict() -> None:
    assert parse_id("-") == (ZERO_ID, True)
    assert parse_id("+") == (MAX_ID, True)
    for text in ("-", "+"):
        with pytest.raises(ParseError):
            parse_id(text, strict=True)
    # "+1" and "-" with more characters are not the special forms.
    assert parse_id("+1") == (StreamID(1, 0), True)


def test_missing_sequence_takes_the_given_default() -> None:
    assert parse_id("5", missing_seq=M) == (StreamID(5, M), True)
    assert parse_id("5-3", missing_seq=M) == (StreamID(5, 3), True)


def test_ms_star_form_only_where_allowed() -> None:
    assert parse_id("5-*", strict=True, allow_seq_star=True) == (StreamID(5, 0), False)
    assert parse_id("0-*", strict=True, allow_seq_star=True) == (StreamID(0, 0), False)
    assert parse_id("5-3", strict=True, allow_seq_star=True) == (StreamID(5, 3), True)
    for text in ("*", "*-1", "-*", "5-*1", "5-**"):
        with pytest.raises(ParseError):
            parse_id(text, strict=True, allow_seq_star=True)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("1", 1),
        ("-1", -1),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None),
        ("-9223372036854775809", None),
        ("01", None),
        ("-0", None),
        ("+1", None),
        (" 1", None),
        ("1 ", None),
        ("", None),
        ("-", None),
        ("1.0", None),
    ],
)
def test_strict_signed_parse(text: str, value: int | None) -> None:
    assert parse_ll(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("-0", 0),
        ("-1", None),
        ("9223372036854775808", 2**63),
        (str(M), M),
        (str(M + 1), None),
        ("007", 7),
        ("", None),
    ],
)
def test_unsigned_parse(text: str, value: int | None) -> None:
    assert parse_ull(text) == value


def test_ordering_is_by_ms_then_seq() -> None:
    ids = [StreamID(2, 0), StreamID(1, M), StreamID(1, 10), StreamID(1, 9), ZERO_ID, MAX_ID]
    assert sorted(ids) == [
        ZERO_ID,
        StreamID(1, 9),
        StreamID(1, 10),
        StreamID(1, M),
        StreamID(2, 0),
        MAX_ID,
    ]
    assert StreamID(1, 10) > StreamID(1, 9)
    assert StreamID(2, 0) > StreamID(1, M)


def test_increment() -> None:
    assert incr_id(StreamID(1, 2)) == StreamID(1, 3)
    assert incr_id(StreamID(1, M)) == StreamID(2, 0)
    assert incr_id(StreamID(M, M - 1)) == MAX_ID
    assert incr_id(MAX_ID) is None


def test_formatting_and_signed_storage() -> None:
    assert str(StreamID(5, 3)) == "5-3"
    assert format_id(StreamID(M, 0)) == f"{M}-0"
    assert format_id(None) is None
    assert to_signed(0) == 0
    assert to_signed(2**63 - 1) == 2**63 - 1
    assert to_signed(2**63) == -(2**63)
    assert to_signed(M) == -1


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_lenient_ids_reach_the_commands(profile: str) -> None:
    steps = [
        S(1000, ["XADD", "s", "+5-01", "f", "v"]),
        S(1000, ["XADD", "s", " 6", "f", "v"]),
        S(1000, ["XADD", "s", "7-1 ", "f", "v"], "error:invalid_id"),
        S(1000, ["XADD", "s", "1--05", "f", "v"], "error:id_too_small"),
        S(1000, ["XADD", "s", "0006-*", "f", "v"]),
        S(1000, ["XGROUP", "CREATE", "s", "g", "0"]),
        S(1000, ["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"]),
        S(1001, ["XACK", "s", "g", "005-1"]),
    ]
    r, outcomes = run(profile, steps)
    check_outcomes(steps, outcomes)
    check_facts(
        snapshot_tables(r, 1001, len(steps)),
        {"pel_ids": {("s", "g"): ["6-0", "6-1"]}, "streams": {("s",): (3, "6-1", "0-0", 3)}},
    )
