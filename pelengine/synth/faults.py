"""Rare events and faults, at positions planned when the workload starts: a group
destroyed, a key deleted, an ``XSETID``, the clock stepping back, a ``MULTI`` block;
and (``faults=True``) commands Redis rejects, rows that are not commands, a ``seq``
used twice (the package docstring says how each is marked)."""

from __future__ import annotations

from pelengine.synth.admin import Admin
from pelengine.synth.traffic import Traffic
from pelengine.synth.world import (
    ADMIN_CLIENT,
    GROUP_NAMES,
    SOURCE_BAD,
    SOURCE_DUP,
    SOURCE_INVALID,
    ZERO,
    fmt_id,
)

# Rare events, placed at deterministic positions: rate per event, minimum count
# once the log has at least `_RARE_MIN_EVENTS` rows (so every kind shows up).
_RARE_MIN_EVENTS = 500
_RARE_RATES: dict[str, float] = {
    "destroy": 1 / 4000,
    "del": 1 / 6000,
    "xsetid": 1 / 4000,
    "clock_back": 1 / 5000,
    "multi": 1 / 1500,
}
_FAULT_RATES: dict[str, float] = {
    "invalid": 1 / 1000,
    "null_argv": 1 / 20000,
    "empty_argv": 1 / 20000,
    "dup_seq": 1 / 10000,
}
_INVALID_KINDS = (
    "arity_xadd",
    "bad_id_xack",
    "nogroup_read",
    "id_not_greater",
    "busygroup",
    "arity_xack",
    "bad_id_xadd",
    "nogroup_claim",
    "bad_subcommand",
    "create_no_key",
    "bad_count",
    "xsetid_small",
)


class Faults(Traffic, Admin):
    """The rare steps, each built from the traffic's and the admin tool's."""

    def build_schedule(self, faults: bool) -> None:
        n = self.n_events
        rates = dict(_RARE_RATES)
        if faults:
            rates.update(_FAULT_RATES)
        plan: list[tuple[int, str]] = []
        if n >= _RARE_MIN_EVENTS:
            for kind, rate in rates.items():
                count = max(1, int(n * rate))
                for _ in range(count):
                    # leave the first rows to set the scene
                    plan.append((self.rng.randrange(n // 10, n - 4), kind))
        plan.sort(reverse=True)
        self.plan = plan

    def rare(self, kind: str) -> bool:
        if kind == "destroy":
            return self.step_destroy()
        if kind == "del":
            return self.step_del()
        if kind == "xsetid":
            return self.step_xsetid()
        if kind == "clock_back":
            self.now -= 1 + int(self.rnd() * 200)
            return False
        if kind == "multi":
            return self.multi_block()
        if kind == "invalid":
            self.invalid()
            return True
        if kind == "null_argv":
            self.emit(None, 0, None, SOURCE_BAD)
            return True
        if kind == "empty_argv":
            self.emit([], 0, None, SOURCE_BAD)
            return True
        if kind == "dup_seq":
            k = self.pick_key()
            self.emit(["XLEN", k.name], k.db, ADMIN_CLIENT)
            self.seq -= 1
            self.emit(["GET", "cache:dup"], k.db, ADMIN_CLIENT, SOURCE_DUP)
            return True
        raise AssertionError(kind)

    def multi_block(self) -> bool:
        """`MULTI`, ack one batch, forward it to another stream, `EXEC` (one time)."""
        if not self.acks or self.n_events - self.emitted < 4:
            return False
        g, w = self.acks[0][0], self.acks[0][1]
        first = len(self.out)
        self.emit(["MULTI"], g.key.db, w.client)
        self.step_ack()
        targets = self.keys_by_db[g.key.db]
        self.step_xadd(targets[int(self.rnd() * len(targets))])
        self.emit(["EXEC"], g.key.db, w.client)
        for row in self.out[first:]:
            # one connection sends the whole transaction
            row["client"] = w.client
            row["db"] = g.key.db
        return True

    def invalid(self) -> None:
        """One command Redis rejects; the simulation applies nothing."""
        kind = _INVALID_KINDS[self.invalid_turn % len(_INVALID_KINDS)]
        self.invalid_turn += 1
        g = self.pick_group()
        k = g.key if g is not None else self.pick_key()
        gname = g.name if g is not None else GROUP_NAMES[0]
        top = fmt_id(k.last_id) if k.exists and k.last_id != ZERO else "0-0"
        argv: list[str]
        if kind == "arity_xadd":
            argv = ["XADD", k.name]
        elif kind == "arity_xack":
            argv = ["XACK", k.name]
        elif kind == "bad_id_xack":
            argv = ["XACK", k.name, gname, "12-abc"]
        elif kind == "bad_id_xadd":
            argv = ["XADD", k.name, "not-an-id", "kind", "oops"]
        elif kind == "nogroup_read":
            argv = ["XREADGROUP", "GROUP", "no-such-group", "ghost", "STREAMS", k.name, ">"]
        elif kind == "nogroup_claim":
            argv = ["XCLAIM", k.name, "no-such-group", "ghost", "0", top]
        elif kind == "id_not_greater":
            argv = ["XADD", k.name, top, "kind", "late"]
        elif kind == "busygroup" and g is not None:
            argv = ["XGROUP", "CREATE", k.name, g.name, "$"]
        elif kind == "bad_subcommand":
            argv = ["XGROUP", "FROBNICATE", k.name, gname]
        elif kind == "bad_count":
            argv = ["XREADGROUP", "GROUP", gname, "ghost", "COUNT", "many", "STREAMS", k.name]
            argv.append(">")
        elif kind == "xsetid_small" and k.entries:
            argv = ["XSETID", k.name, "1-0"]
        else:
            missing = f"missing:{self.invalid_turn}"
            argv = ["XGROUP", "CREATE", missing, gname, "$"]  # no MKSTREAM, no key
        self.emit(argv, k.db, ADMIN_CLIENT, SOURCE_INVALID)
