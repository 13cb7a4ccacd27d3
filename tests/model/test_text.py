"""The one text form of an argument's bytes (docs/input.md)."""

from __future__ import annotations

from pelengine.model.text import readable


def test_utf8_is_itself() -> None:
    assert readable("é€ x\\xff".encode()) == "é€ x\\xff"
    assert readable(b"") == ""


def test_not_utf8_has_every_high_byte_escaped() -> None:
    assert readable(b"k\xfe") == "k\\xfe"
    assert readable(b"\x00a\x7f\x80") == "\x00a\x7f\\x80"
    # a valid sequence inside an argument that is not UTF-8 is escaped too
    assert readable("€".encode() + b"\xff") == "\\xe2\\x82\\xac\\xff"
    # msgpack {"a": 1}
    assert readable(b"\x81\xa1a\x01") == "\\x81\\xa1a\x01"
