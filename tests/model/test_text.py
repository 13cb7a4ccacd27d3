"""The one text form of an argument's bytes (docs/input.md)."""

from __future__ import annotations

import random

from pelengine.model.listpack import str_element
from pelengine.model.text import byte_length, raw_bytes, readable, sds_repr


def test_utf8_is_itself() -> None:
    assert readable("é€ x\\y\\".encode()) == "é€ x\\y\\"
    assert readable(b"") == ""


def test_not_utf8_has_every_high_byte_and_backslash_escaped() -> None:
    assert readable(b"k\xfe") == "k\\xfe"
    assert readable(b"\x00a\x7f\x80") == "\x00a\x7f\\x80"
    # a valid sequence inside an argument that is not UTF-8 is escaped too
    assert readable("€".encode() + b"\xff") == "\\xe2\\x82\\xac\\xff"
    # msgpack {"a": 1}
    assert readable(b"\x81\xa1a\x01") == "\\x81\\xa1a\x01"
    assert readable(b"\\\xfe") == "\\x5c\\xfe"


def test_text_that_looks_escaped_is_escaped_so_nothing_collides() -> None:
    # the characters k \ x f e and the bytes k 0xfe are two names
    assert readable(b"k\\xfe") == "k\\x5cxfe"
    assert readable(b"k\xfe") == "k\\xfe"
    assert raw_bytes("k\\x5cxfe") == b"k\\xfe"
    assert raw_bytes("k\\xfe") == b"k\xfe"


def test_the_form_is_lossless_on_random_bytes() -> None:
    rng = random.Random(19)
    alphabet = [b"\\", b"x", b"f", b"e", b"0", b"a", b"\xfe", b"\xc3\xa9", b"\xe2\x82", b"\x00"]
    seen: dict[str, bytes] = {}
    for _ in range(20000):
        raw = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        text = readable(raw)
        text.encode("utf-8")  # always valid text
        assert raw_bytes(text) == raw
        assert byte_length(text) == len(raw)
        assert seen.setdefault(text, raw) == raw  # one text, one byte string


def test_a_node_counts_escaped_bytes_once() -> None:
    assert str_element(readable(b"\xff\xfe")) == str_element("ab") == 4
    assert str_element(readable(b"\xff" * 70)) == str_element("x" * 70)


def test_sds_repr_quotes_as_the_server_does() -> None:
    assert sds_repr(b"XADD") == '"XADD"'
    assert sds_repr(b'a"b\\c') == '"a\\"b\\\\c"'
    assert sds_repr(b"\n\r\t\x07\x08") == '"\\n\\r\\t\\a\\b"'
    assert sds_repr(b"\x00 ~\x7f\xff") == '"\\x00 ~\\x7f\\xff"'
    assert sds_repr("é".encode()) == '"\\xc3\\xa9"'
    assert sds_repr(b"") == '""'
