"""Random command logs for the engine-equality property tests.

A log is a list of events ``(seq, ts_ms, argv, db, client)``: mostly well-formed stream
commands on a few keys, groups and consumers (so that they meet: entries get delivered,
claimed, acked, deleted, trimmed), mixed with what a real log holds and a model must
survive: wrong arity, unknown options, odd IDs (``-``, ``+``, ``$``, ``>``, ``ms-*``,
u64 limits, blanks, signs, non-ASCII), other types on stream keys, transactions
(MULTI/EXEC/DISCARD), scripts (an EVAL row then its ``lua`` rows), blocking reads
(``BLOCK``) served by later writes or timed out, snapshot rows (``PELENGINE.LOAD``),
clocks that stand still or go back, several dbs and null clients.

Nothing here knows what the model does with a log: the tests only ask that both engines
do the same.
"""

from __future__ import annotations

import random
from typing import Any

Event = tuple[int, int, list[str], int | None, str | None]

KEYS = ["s1", "s2", "s3"]
GROUPS = ["g1", "g2"]
CONSUMERS = ["c1", "c2", "c3"]
CLIENTS = ["10.0.0.1:1", "10.0.0.1:2", "10.0.0.2:1", None]
ODD_IDS = [
    "-",
    "+",
    "$",
    ">",
    "*",
    "0",
    "0-0",
    "0-1",
    "1-*",
    "18446744073709551615-18446744073709551615",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807-0",
    "9223372036854775808-1",
    "-1",
    " 3",
    "+3",
    "003-1",
    "3-",
    "-3",
    "3--1",
    "abc",
    "",
    "1\u00e9-1",
    "\u0663-1",
]
ODD_NUMBERS = [
    "0",
    "1",
    "-1",
    "2",
    "10",
    "abc",
    "",
    " 5",
    "+5",
    "05",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "1e3",
    "\u0665",
]
OTHER_COMMANDS = [
    ["SET", "{k}", "v"],
    ["LPUSH", "{k}", "a"],
    ["SADD", "{k}", "a"],
    ["HSET", "{k}", "f", "v"],
    ["INCR", "{k}"],
    ["GET", "{k}"],
    ["PING"],
    ["XINFO", "STREAM", "{k}"],
    ["XLEN", "{k}"],
    ["XRANGE", "{k}", "-", "+"],
    ["XACKDEL", "{k}", "g1", "IDS", "1", "1-1"],
    ["SELECT", "1"],
    ["MSET", "{k}", "v", "other", "w"],
    ["EXPIRE", "{k}", "10"],
]


def _case(rng: random.Random, word: str) -> str:
    """An option word as a client may send it (any case; now and then a non-ASCII look-alike)."""
    roll = rng.random()
    if roll < 0.6:
        return word
    if roll < 0.85:
        return word.lower()
    if roll < 0.97:
        return "".join(c.lower() if rng.random() < 0.5 else c for c in word)
    return word.replace("S", "\u017f", 1) if "S" in word else word + "\u00df"


class LogMaker:
    """Builds one random log; ``ids`` remembers IDs it added so later commands name them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seq = 0
        self.now = 1_000_000
        self.ids: list[str] = []
        self.events: list[Event] = []

    # -- pieces -----------------------------------------------------------------

    def key(self) -> str:
        rng = self.rng
        return rng.choice(KEYS) if rng.random() < 0.95 else rng.choice(["other", "s\u00e9", ""])

    def group(self) -> str:
        return self.rng.choice(GROUPS) if self.rng.random() < 0.95 else "nogroup"

    def consumer(self) -> str:
        return self.rng.choice(CONSUMERS)

    def some_id(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.55 and self.ids:
            return rng.choice(self.ids)
        if roll < 0.85:
            return f"{rng.randint(0, self.now // 1000 + 3)}-{rng.randint(0, 3)}"
        return rng.choice(ODD_IDS)

    def number(self, low: int = 0, high: int = 5) -> str:
        rng = self.rng
        return str(rng.randint(low, high)) if rng.random() < 0.9 else rng.choice(ODD_NUMBERS)

    def ids_list(self) -> list[str]:
        return [self.some_id() for _ in range(self.rng.randint(1, 3))]

    # -- commands ---------------------------------------------------------------

    def trim_args(self) -> list[str]:
        rng = self.rng
        out = [_case(rng, rng.choice(["MAXLEN", "MINID"]))]
        if rng.random() < 0.6:
            out.append(rng.choice(["=", "~"]))
        out.append(self.number(0, 8) if out[0].upper() == "MAXLEN" else self.some_id())
        if rng.random() < 0.2:
            out += [_case(rng, "LIMIT"), self.number(0, 200)]
        return out

    def xadd(self) -> list[str]:
        rng = self.rng
        argv = ["XADD", self.key()]
        if rng.random() < 0.1:
            argv.append(_case(rng, "NOMKSTREAM"))
        if rng.random() < 0.25:
            argv += self.trim_args()
        if rng.random() < 0.75:
            argv.append("*")
        else:
            argv.append(self.some_id())
        nfields = rng.choice([1, 1, 2, 3]) if rng.random() < 0.98 else 0
        for i in range(nfields):
            argv += [
                rng.choice(["f", "g", f"f{i}", "x" * rng.randint(1, 90)]),
                "v" * rng.randint(1, 3)
                if rng.random() < 0.9
                # escaped bytes (pelengine.model.text) count one byte each in a node
                else rng.choice(["\\xfe", "\\x5cx41", "\\x00\\xff" * rng.randint(1, 40)]),
            ]
        if rng.random() < 0.03:
            argv.pop()  # odd number of field/value arguments
        return argv

    def xreadgroup(self, block: bool = False) -> list[str]:
        rng = self.rng
        argv = ["XREADGROUP", _case(rng, "GROUP"), self.group(), self.consumer()]
        if rng.random() < 0.5:
            argv += [_case(rng, "COUNT"), self.number(0, 4)]
        if block or rng.random() < 0.1:
            argv += [_case(rng, "BLOCK"), rng.choice(["0", "100", "1000", "5", self.number(0, 50)])]
        if rng.random() < 0.15:
            argv.append(_case(rng, "NOACK"))
        keys = [self.key() for _ in range(rng.choice([1, 1, 1, 2]))]
        argv.append(_case(rng, "STREAMS"))
        argv += keys
        for _ in keys:
            argv.append(">" if rng.random() < 0.75 else self.some_id())
        if rng.random() < 0.03:
            argv.pop()
        return argv

    def xclaim(self) -> list[str]:
        rng = self.rng
        argv = ["XCLAIM", self.key(), self.group(), self.consumer(), self.number(0, 3000)]
        argv += self.ids_list()
        for word in ("IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID"):
            if rng.random() < 0.15:
                argv.append(_case(rng, word))
                if word in ("IDLE", "RETRYCOUNT"):
                    argv.append(self.number(0, 5000))
                elif word == "TIME":
                    argv.append(str(self.now + rng.randint(-5000, 5000)))
                elif word == "LASTID":
                    argv.append(self.some_id())
        return argv

    def xautoclaim(self) -> list[str]:
        rng = self.rng
        argv = ["XAUTOCLAIM", self.key(), self.group(), self.consumer(), self.number(0, 3000)]
        argv.append(self.some_id() if rng.random() < 0.7 else "0-0")
        if rng.random() < 0.5:
            argv += [_case(rng, "COUNT"), self.number(0, 5)]
        if rng.random() < 0.2:
            argv.append(_case(rng, "JUSTID"))
        return argv

    def xgroup(self) -> list[str]:
        rng = self.rng
        sub = rng.choice(["CREATE"] * 6 + ["DESTROY", "CREATECONSUMER", "DELCONSUMER", "SETID"])
        if rng.random() < 0.05:
            sub = rng.choice(["HELP", "BOGUS"])
        argv = ["XGROUP", _case(rng, sub), self.key(), self.group()]
        if sub == "CREATE":
            argv.append(rng.choice(["$", "0", "0-0", self.some_id()]))
            if rng.random() < 0.7:
                argv.append(_case(rng, "MKSTREAM"))
            if rng.random() < 0.2:
                argv += [_case(rng, "ENTRIESREAD"), self.number(-1, 6)]
        elif sub in ("CREATECONSUMER", "DELCONSUMER"):
            argv.append(self.consumer())
        elif sub == "SETID":
            argv.append(rng.choice(["$", "0", self.some_id()]))
            if rng.random() < 0.3:
                argv += [_case(rng, "ENTRIESREAD"), self.number(-1, 6)]
        return argv

    def xsetid(self) -> list[str]:
        rng = self.rng
        argv = ["XSETID", self.key(), self.some_id()]
        if rng.random() < 0.3:
            argv += [_case(rng, "ENTRIESADDED"), self.number(0, 20)]
        if rng.random() < 0.3:
            argv += [_case(rng, "MAXDELETEDID"), self.some_id()]
        return argv

    def load_rows(self) -> list[list[str]]:
        """A snapshot's rows for one key (sometimes malformed)."""
        rng = self.rng
        key = self.key()
        ms = self.now // 1000
        rows = [
            ["PELENGINE.LOAD", "STREAM", key, f"{ms}-2", "3", "0-0", f"{ms}-0"],
            [
                "PELENGINE.LOAD",
                "NODE",
                key,
                f"{ms}-0",
                "40",
                "1",
                "f",
                f"{ms}-0",
                "1",
                f"{ms}-1",
                "0",
                f"{ms}-2",
                "1",
            ],
            ["PELENGINE.LOAD", "GROUP", key, "g1", f"{ms}-2", "3"],
            ["PELENGINE.LOAD", "CONSUMER", key, "g1", "c1", str(self.now - 10), "-1"],
            [
                "PELENGINE.LOAD",
                "PENDING",
                key,
                "g1",
                f"{ms}-0",
                "c1",
                str(self.now - 20),
                "2",
                f"{ms}-2",
                "c1",
                str(self.now - 5),
                "1",
            ],
        ]
        if rng.random() < 0.2:
            rows.insert(0, ["PELENGINE.LOAD", "BEGIN"])
        if rng.random() < 0.3:
            row = rng.choice(rows)
            if len(row) > 3:
                row[rng.randrange(2, len(row))] = rng.choice(ODD_NUMBERS + ODD_IDS)
        return rows

    def command(self) -> list[str]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.24:
            return self.xadd()
        if roll < 0.44:
            return self.xreadgroup()
        if roll < 0.52:
            return self.xclaim()
        if roll < 0.58:
            return self.xautoclaim()
        if roll < 0.68:
            return ["XACK", self.key(), self.group(), *self.ids_list()]
        if roll < 0.72:
            return ["XDEL", self.key(), *self.ids_list()]
        if roll < 0.76:
            return ["XTRIM", self.key(), *self.trim_args()]
        if roll < 0.85:
            return self.xgroup()
        if roll < 0.87:
            return self.xsetid()
        if roll < 0.89:
            return [
                rng.choice(["DEL", "UNLINK"]),
                self.key(),
                *([self.key()] if rng.random() < 0.3 else []),
            ]
        if roll < 0.905:
            return [rng.choice(["RENAME", "RENAMENX"]), self.key(), self.key()]
        if roll < 0.91:
            return [rng.choice(["FLUSHDB", "FLUSHALL"])]
        if roll < 0.97:
            target = self.key() if rng.random() < 0.25 else "other"
            return [a.replace("{k}", target) for a in rng.choice(OTHER_COMMANDS)]
        # truncated or garbled versions of a stream command
        argv = rng.choice([self.xadd, self.xreadgroup, self.xclaim, self.xgroup])()
        cut = rng.randint(1, max(1, len(argv) - 1))
        return argv[:cut]

    # -- the log ----------------------------------------------------------------

    def emit(self, argv: list[str], client: str | None, db: int | None) -> None:
        rng = self.rng
        self.seq += rng.choice([1, 1, 1, 2, 7])
        step = rng.random()
        if step < 0.5:
            self.now += rng.randint(0, 40)
        elif step < 0.95:
            self.now += rng.randint(40, 2500)
        else:
            self.now -= rng.randint(1, 50)  # a clock that went back
        self.events.append((self.seq, self.now, argv, db, client))
        if argv and argv[0] == "XADD":
            # remember IDs near the ones "*" generates
            self.ids.append(f"{self.now}-0")

    def make(self, n: int) -> list[Event]:
        rng = self.rng
        for _ in range(rng.randint(0, 4)):
            key, group = rng.choice(KEYS), rng.choice(GROUPS)
            self.emit(["XGROUP", "CREATE", key, group, rng.choice(["$", "0"]), "MKSTREAM"], None, 0)
        while len(self.events) < n:
            db: int | None = 0 if rng.random() < 0.85 else rng.choice([1, None])
            client = rng.choice(CLIENTS)
            roll = rng.random()
            if roll < 0.06 and client is not None:
                # a transaction: MULTI, commands, EXEC (or DISCARD)
                self.emit(["MULTI"], client, db)
                for _ in range(rng.randint(0, 4)):
                    self.emit(self.command(), client, db)
                self.emit([rng.choice(["EXEC", "EXEC", "DISCARD"])], client, db)
            elif roll < 0.10:
                # a script: its call row, then what it ran (client lua)
                self.emit(["EVAL", "return 1", "1", self.key()], client, db)
                for _ in range(rng.randint(0, 3)):
                    self.emit(self.command(), "lua", db)
            elif roll < 0.16:
                # a blocking read, then (maybe) writes that serve it
                self.emit(self.xreadgroup(block=True), client, db)
            elif roll < 0.17:
                for row in self.load_rows():
                    self.emit(row, None, db)
            else:
                self.emit(self.command(), client, db)
        return self.events[:n]


def random_log(seed: int, n: int) -> list[Event]:
    """``n`` random events (deterministic for ``seed``)."""
    return LogMaker(seed).make(n)


def as_rows(events: list[Event]) -> list[dict[str, Any]]:
    return [{"seq": s, "ts_ms": t, "argv": a, "db": d, "client": c} for s, t, a, d, c in events]
