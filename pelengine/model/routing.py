"""Which stream keys a command touches: how the pipeline routes events to replays.

Events are replayed per *family* of keys: keys that one command can tie
together (``RENAME src dst``, an ``XREADGROUP`` over several streams) must be
replayed by the same model, because the outcome for one key depends on the
other. ``FLUSHDB``/``FLUSHALL`` reach every family of their db (or of all dbs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pelengine.model.commands import LOAD_COMMAND
from pelengine.model.replay import OTHER_WRITERS, STREAM_COMMANDS, command_name

SCOPE_KEYS = "keys"
SCOPE_DB = "db"
SCOPE_ALL = "all"
SCOPE_NONE = "none"

#: a db index as ``SELECT`` reads it (the server's ``string2ll``: digits, no sign, no
#: blank, no leading zero) that fits an int (the events table's ``db``); a SELECT whose
#: argument is anything else is refused by the server and selects nothing (Java's regex
#: dialect for the Spark stage, where ``\z`` is the end of the text)
DB_INDEX_PATTERN = r"^(0|[1-9][0-9]{0,9})\z"
_DB_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")


def db_index(text: str) -> int | None:
    """The db ``SELECT text`` selects (:data:`DB_INDEX_PATTERN`), None when it selects
    none."""
    if _DB_INDEX.fullmatch(text) is None:
        return None
    index = int(text)
    return index if index < 1 << 31 else None


_SINGLE_KEY = frozenset({"XADD", "XTRIM", "XDEL", "XCLAIM", "XAUTOCLAIM", "XACK", "XSETID"})


def parse_xreadgroup(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(group, keys) of an XREADGROUP, found the way the server parses its options:
    the last ``GROUP <group> <consumer>`` before STREAMS wins; the keys are the first half
    of what follows STREAMS (none when that is odd or missing)."""
    group = None
    i = 1
    argc = len(argv)
    while i < argc:
        low = argv[i].lower()
        moreargs = argc - i - 1
        if low in ("block", "count") and moreargs:
            i += 2
        elif low == "streams" and moreargs:
            if moreargs % 2:
                return group, []
            return group, list(argv[i + 1 : i + 1 + moreargs // 2])
        elif low == "group" and moreargs >= 2:
            group = argv[i + 1]
            i += 3
        else:
            i += 1
    return group, []


def xreadgroup_keys(argv: Sequence[str]) -> list[str]:
    """The stream keys of an XREADGROUP (see ``parse_xreadgroup``)."""
    return parse_xreadgroup(argv)[1]


def touched_keys(argv: Sequence[str] | None) -> tuple[str, list[str]]:
    """(scope, keys), see ``_touched_keys``; a command naming no key reaches no stream."""
    scope, keys = _touched_keys(argv)
    if scope == SCOPE_KEYS and not keys:
        return SCOPE_NONE, []
    return scope, keys


def _touched_keys(argv: Sequence[str] | None) -> tuple[str, list[str]]:
    """(scope, keys): the keys whose state the command may read or change.

    Scope ``db``/``all`` means every stream of the command's db / of every db.
    Scope ``none`` means the command cannot affect any stream (it is counted as
    ignored without being replayed).
    """
    if not argv:
        return SCOPE_NONE, []
    name = command_name(argv)
    if name in ("FLUSHDB", "FLUSHALL"):
        return (SCOPE_DB if name == "FLUSHDB" else SCOPE_ALL), []
    if name == LOAD_COMMAND:  # BEGIN replaces every key; the others name theirs
        if len(argv) == 2 and argv[1].upper() == "BEGIN":
            return SCOPE_ALL, []
        return (SCOPE_KEYS, [argv[2]]) if len(argv) > 2 else (SCOPE_NONE, [])
    if name in _SINGLE_KEY or name in OTHER_WRITERS and name != "MSET":
        return (SCOPE_KEYS, [argv[1]]) if len(argv) > 1 else (SCOPE_NONE, [])
    if name == "MSET":
        return SCOPE_KEYS, list(argv[1::2])
    if name == "XGROUP":
        return (SCOPE_KEYS, [argv[2]]) if len(argv) > 2 else (SCOPE_NONE, [])
    if name == "XREADGROUP":
        return SCOPE_KEYS, xreadgroup_keys(argv)
    if name in ("DEL", "UNLINK"):
        return SCOPE_KEYS, list(argv[1:])
    if name in ("RENAME", "RENAMENX"):
        return SCOPE_KEYS, list(argv[1:3])
    return SCOPE_NONE, []


def linked_keys(argv: Sequence[str] | None) -> list[str]:
    """Keys that must share one replay (same family) because of this command."""
    if not argv:
        return []
    name = command_name(argv)
    if name in ("RENAME", "RENAMENX") and len(argv) == 3:
        return list(dict.fromkeys(argv[1:3]))
    if name == "XREADGROUP":
        keys = list(dict.fromkeys(xreadgroup_keys(argv)))
        return keys if len(keys) > 1 else []
    return []


def tie_families(
    links: list[list[tuple[int, str]]],
    prior: dict[tuple[int, str], str] | None = None,
    saved: set[tuple[int, str]] | None = None,
    renamed: dict[tuple[int, str], str] | None = None,
) -> dict[tuple[int, str], str]:
    """The family of every key that ``links`` tie to others: each link a list of
    (db, key) that must share one replay (:func:`linked_keys` of a RENAME or a
    multi-stream XREADGROUP), a family named by its smallest key. ``prior``: the
    families of a previous run (incremental), ``saved``: the (db, family) that have
    saved state. Saved families keep their names; when the links tie several of them
    together, the merged family takes the smallest name and ``renamed`` gets
    ``(db, old name) -> new name`` for the others (their saved models are merged).
    A key in no link is its own family (and not in the map)."""
    links = list(links)
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(node: tuple[int, str]) -> tuple[int, str]:
        root = node
        while parent.get(root, root) != root:
            root = parent[root]
        while node != root:
            parent[node], node = root, parent.get(node, node)
        return root

    if prior:
        by_family: dict[tuple[int, str], list[tuple[int, str]]] = {}
        for (db, key), fam in prior.items():
            by_family.setdefault((db, fam), []).append((db, key))
        links += [[(db, fam), *keys] for (db, fam), keys in by_family.items()]
    for keys in links:
        for other in keys[1:]:
            a, b = find(keys[0]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    names = {root: root[1] for root in {find(n) for n in parent}}
    if prior or saved:
        # a component keeps the name of the one saved family it contains
        holders: dict[tuple[int, str], set[str]] = {}
        for node in set(parent) | {find(n) for n in list(parent)}:  # roots are not in parent
            holder: str | None = (prior or {}).get(node)
            if holder is None and node in (saved or set()):
                holder = node[1]
            if holder is not None:
                holders.setdefault(find(node), set()).add(holder)
        for root, fams in holders.items():
            chosen = min(fams)
            names[root] = chosen
            if renamed is not None:
                renamed.update({(root[0], f): chosen for f in fams if f != chosen})
    return {node: names[find(node)] for node in parent} | {
        root: names[root] for root in {find(n) for n in parent}
    }


def is_stream_command(name: str) -> bool:
    """True for the commands the engine applies (and counts as applied or failed)."""
    return name.upper() in STREAM_COMMANDS


# XGROUP subcommands whose effects stay inside the one consumer group they name (as do
# XREADGROUP, XACK, XCLAIM and XAUTOCLAIM: ``command_group``): a family's replay can be
# split by group and each of these sent to its group's replay only.
_XGROUP_GROUP_ONLY = frozenset({"SETID", "CREATECONSUMER", "DELCONSUMER"})
_XGROUP_STREAM_LEVEL = frozenset({"CREATE", "DESTROY"})


def xreadgroup_group(argv: Sequence[str]) -> str | None:
    """The group an XREADGROUP names, or None (see ``parse_xreadgroup``)."""
    return parse_xreadgroup(argv)[0]


def command_group(argv: Sequence[str] | None) -> tuple[str | None, bool]:
    """(group, group_only): the consumer group a command names, and whether what it
    reads and changes is that group plus stream state no group command changes.

    ``group_only`` commands (XREADGROUP, XACK, XCLAIM, XAUTOCLAIM, XGROUP SETID /
    CREATECONSUMER / DELCONSUMER) can be replayed by a model that sees only that group's
    commands and every stream-level command. XGROUP CREATE and DESTROY name a group
    but change what every group's replay must know (the stream may be created, the
    group count of XINFO STREAM changes): they go to every group's replay. A command
    too short to name a group fails the same way everywhere: (None, False).
    """
    if not argv:
        return None, False
    name = command_name(argv)
    argc = len(argv)
    if name == "XREADGROUP":
        group = xreadgroup_group(argv)
        return group, group is not None
    if name == "XACK" and argc >= 4 or name in ("XCLAIM", "XAUTOCLAIM") and argc >= 6:
        return argv[2], True
    if name == "XGROUP" and argc >= 4:
        sub = argv[1].upper()
        if sub in _XGROUP_GROUP_ONLY:
            return argv[3], True
        if sub in _XGROUP_STREAM_LEVEL:
            return argv[3], False
    return None, False
