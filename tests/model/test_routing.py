"""Which stream keys a command touches (routing to replays) and which keys it links."""

from __future__ import annotations

import pytest

from pelengine.model.routing import (
    SCOPE_ALL,
    SCOPE_DB,
    SCOPE_KEYS,
    SCOPE_NONE,
    is_stream_command,
    linked_keys,
    touched_keys,
)


def argv(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize(
    ("command", "scope", "keys"),
    [
        # single-key stream commands
        ("XADD s * f v", SCOPE_KEYS, ["s"]),
        ("xadd s MAXLEN 5 * f v", SCOPE_KEYS, ["s"]),
        ("XTRIM s MAXLEN 0", SCOPE_KEYS, ["s"]),
        ("XDEL s 1-0 2-0", SCOPE_KEYS, ["s"]),
        ("XCLAIM s g c 0 1-0", SCOPE_KEYS, ["s"]),
        ("XAUTOCLAIM s g c 0 0", SCOPE_KEYS, ["s"]),
        ("XACK s g 1-0", SCOPE_KEYS, ["s"]),
        ("XSETID s 5-0", SCOPE_KEYS, ["s"]),
        ("XADD", SCOPE_NONE, []),
        ("XACK", SCOPE_NONE, []),
        # XGROUP: the key is the third word
        ("XGROUP CREATE s g $ MKSTREAM", SCOPE_KEYS, ["s"]),
        ("XGROUP SETID s g 0", SCOPE_KEYS, ["s"]),
        ("XGROUP DESTROY s g", SCOPE_KEYS, ["s"]),
        ("xgroup createconsumer s g c", SCOPE_KEYS, ["s"]),
        ("XGROUP DELCONSUMER s g c", SCOPE_KEYS, ["s"]),
        ("XGROUP HELP", SCOPE_NONE, []),
        ("XGROUP", SCOPE_NONE, []),
        # XREADGROUP: keys found the way the server parses its options
        ("XREADGROUP GROUP g c STREAMS s >", SCOPE_KEYS, ["s"]),
        ("XREADGROUP GROUP g c COUNT 1 BLOCK 0 NOACK STREAMS a b > >", SCOPE_KEYS, ["a", "b"]),
        ("XREADGROUP COUNT 1 NOACK BLOCK 5 GROUP g c STREAMS a b > 0", SCOPE_KEYS, ["a", "b"]),
        ("xreadgroup group g c streams a >", SCOPE_KEYS, ["a"]),
        ("XREADGROUP GROUP g STREAMS STREAMS s >", SCOPE_KEYS, ["s"]),
        ("XREADGROUP GROUP STREAMS c STREAMS s >", SCOPE_KEYS, ["s"]),
        ("XREADGROUP GROUP g c STREAMS STREAMS >", SCOPE_KEYS, ["STREAMS"]),
        ("XREADGROUP GROUP g c COUNT STREAMS s >", SCOPE_NONE, []),
        ("XREADGROUP GROUP g c STREAMS a b >", SCOPE_NONE, []),
        ("XREADGROUP GROUP g c", SCOPE_NONE, []),
        # key-level commands
        ("DEL a b c", SCOPE_KEYS, ["a", "b", "c"]),
        ("UNLINK a", SCOPE_KEYS, ["a"]),
        ("DEL", SCOPE_NONE, []),
        ("RENAME a b", SCOPE_KEYS, ["a", "b"]),
        ("RENAMENX a b", SCOPE_KEYS, ["a", "b"]),
        ("FLUSHDB", SCOPE_DB, []),
        ("flushdb async", SCOPE_DB, []),
        ("FLUSHALL", SCOPE_ALL, []),
        ("FLUSHALL SYNC", SCOPE_ALL, []),
        # writers of other types: they can replace a stream or meet WRONGTYPE
        ("SET k v", SCOPE_KEYS, ["k"]),
        ("MSET a 1 b 2", SCOPE_KEYS, ["a", "b"]),
        ("LPUSH l x", SCOPE_KEYS, ["l"]),
        ("HSET h f v", SCOPE_KEYS, ["h"]),
        # nothing a stream depends on
        ("GET k", SCOPE_NONE, []),
        ("XINFO STREAM s", SCOPE_NONE, []),
        ("XPENDING s g", SCOPE_NONE, []),
        ("XRANGE s - +", SCOPE_NONE, []),
        ("XREAD STREAMS s 0", SCOPE_NONE, []),
        ("MULTI", SCOPE_NONE, []),
        ("EXEC", SCOPE_NONE, []),
        ("SELECT 1", SCOPE_NONE, []),
        ("PING", SCOPE_NONE, []),
        ("XACKDEL s g IDS 1 1-0", SCOPE_NONE, []),
    ],
)
def test_touched_keys(command: str, scope: str, keys: list[str]) -> None:
    assert touched_keys(argv(command)) == (scope, keys)


@pytest.mark.parametrize("empty", [None, []])
def test_no_argv_touches_nothing(empty: list[str] | None) -> None:
    assert touched_keys(empty) == (SCOPE_NONE, [])
    assert linked_keys(empty) == []


@pytest.mark.parametrize(
    ("command", "linked"),
    [
        ("RENAME a b", ["a", "b"]),
        ("RENAMENX a b", ["a", "b"]),
        ("rename a a", ["a"]),
        ("RENAME a", []),
        ("RENAME a b c", []),
        ("XREADGROUP GROUP g c STREAMS a b > >", ["a", "b"]),
        ("XREADGROUP COUNT 2 GROUP g STREAMS STREAMS a b c > > >", ["a", "b", "c"]),
        ("XREADGROUP GROUP g c STREAMS a a > >", []),
        ("XREADGROUP GROUP g c STREAMS a >", []),
        ("DEL a b", []),
        ("FLUSHALL", []),
        ("XADD s * f v", []),
        ("SET k v", []),
    ],
)
def test_linked_keys(command: str, linked: list[str]) -> None:
    assert linked_keys(argv(command)) == linked


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("XADD", True),
        ("xreadgroup", True),
        ("XGROUP", True),
        ("XSETID", True),
        ("RENAME", True),
        ("FLUSHALL", True),
        ("UNLINK", True),
        ("SET", False),
        ("XINFO", False),
        ("XPENDING", False),
        ("XACKDEL", False),
        ("GET", False),
    ],
)
def test_is_stream_command(name: str, expected: bool) -> None:
    assert is_stream_command(name) is expected
