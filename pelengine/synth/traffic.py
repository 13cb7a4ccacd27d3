"""The services' commands: producers' ``XADD`` (with the IDs Redis would generate,
some trimming), workers' ``XREADGROUP`` (several streams, ``NOACK``, ``BLOCK``, history
reads), their acks, crashes and restarts, and ``XCLAIM``/``XAUTOCLAIM`` of what others
left pending; each applied to the simulation as Redis 7.0 would."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import wraps
from typing import Any

from pelengine.synth.choice import Choice
from pelengine.synth.world import (
    EVENT_KINDS,
    GROUP_NAMES,
    MIN_IDLES,
    ZERO,
    Group,
    Key,
    Sid,
    Worker,
    fmt_id,
    has_id,
)


def _on_claim_target(
    step: Callable[[Traffic, Group, Worker], bool],
) -> Callable[[Traffic], bool]:
    """A claiming step as a step of the workload: it acts on a group with pending entries
    and a live worker of it (:meth:`Choice.claim_target`), and emits nothing without one."""

    @wraps(step)
    def run(self: Traffic) -> bool:
        target = self.claim_target()
        return target is not None and step(self, *target)

    return run


class Traffic(Choice):
    """Steps of producers and consumers (each returns whether it emitted a row)."""

    # ---- producers ----------------------------------------------------------

    def step_xadd(self, k: Key | None = None) -> bool:
        if k is None:
            k = self.pick_key()
        now = self.now
        last_ms, last_seq = k.last_id
        sid = (now, 0) if now > last_ms else (last_ms, last_seq + 1)
        r = self.rnd()
        argv = ["XADD", k.name]
        nomkstream = r < 0.03
        if nomkstream:
            argv.append("NOMKSTREAM")
        adds = k.adds + 1 if k.exists else 1
        minid: Sid | None = None
        if k.maxlen:
            if r < 0.5:
                argv += ["MAXLEN", str(k.maxlen)]
            else:
                argv += ["MAXLEN", "=", str(k.maxlen)]
        elif k.minid_retention and adds % 10 == 0:
            minid = (max(0, now - k.minid_retention), 0)
            argv += ["MINID", fmt_id(minid)]
        argv.append(f"{sid[0]}-*" if 0.97 < r < 0.98 else f"{sid[0]}-{sid[1]}")
        argv += ["kind", EVENT_KINDS[adds % len(EVENT_KINDS)], "n", str(adds)]
        self.emit(argv, k.db, k.producer)
        if nomkstream and not k.exists:
            return True
        k.exists = True
        k.adds = adds
        k.entries.append(sid)
        k.last_id = sid
        entries = k.entries
        if k.maxlen and len(entries) > k.maxlen:
            del entries[: len(entries) - k.maxlen]
        elif minid is not None:
            del entries[: bisect_left(entries, minid)]
        return True

    # ---- consumers ------------------------------------------------------------

    def step_read(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        r = self.rnd()
        if r < 0.004:
            self.crash(g.name)
            return False
        if r < 0.014 and self.restart():
            return True
        w = self.alive_worker(g.name)
        if w is None:
            return False
        if r < 0.04:
            return self.history_read(g, w)
        k = g.key
        count = self.pick((1, 2, 5, 10, 10, 20, 50))
        keys = [k]
        if r > 0.9:
            for other in self.keys_by_db[k.db]:
                if other is not k and g.name in other.groups and len(keys) < 3:
                    keys.append(other)
        noack = 0.04 < r < 0.08
        block = 0.08 < r < 0.13 and len(keys) == 1
        argv = ["XREADGROUP", "GROUP", g.name, w.name, "COUNT", str(count)]
        groups = [kk.groups[g.name] for kk in keys]
        if block:
            # only when data is there already: the read is served at once
            if bisect_right(k.entries, g.last_id) >= len(k.entries):
                block = False
            else:
                argv += ["BLOCK", self.pick(("100", "1000", "5000"))]
        if noack:
            argv.append("NOACK")
        argv.append("STREAMS")
        argv += [kk.name for kk in keys]
        argv += [">"] * len(keys)
        now = self.now
        self.emit(argv, k.db, w.client)
        for gg in groups:
            entries = gg.key.entries
            i = bisect_right(entries, gg.last_id)
            ids = entries[i : i + count]
            if not ids:
                continue
            gg.last_id = ids[-1]
            gg.consumers[w.name] = None
            if noack:
                continue
            pel = gg.pel
            for sid in ids:
                if sid in pel:
                    del pel[sid]
                pel[sid] = [w.name, now]
            self.acks.append((gg, w, w.epoch, ids))
        return True

    def history_read(self, g: Group, w: Worker, count: int = 0) -> bool:
        """A worker re-reads its own pending entries (`0` instead of `>`)."""
        if not count:
            count = self.pick((10, 100))
        owned = sorted(sid for sid, p in g.pel.items() if p[0] == w.name)[:count]
        k = g.key
        start = "0" if self.rnd() < 0.7 else "0-0"
        argv = ["XREADGROUP", "GROUP", g.name, w.name, "COUNT", str(count), "STREAMS", k.name]
        argv.append(start)
        self.emit(argv, k.db, w.client)
        g.consumers[w.name] = None
        now = self.now
        pel = g.pel
        for sid in owned:
            if has_id(k.entries, sid):
                p = pel.pop(sid)
                p[1] = now
                pel[sid] = p
        if owned:
            self.acks.append((g, w, w.epoch, owned))
        return True

    def crash(self, group_name: str) -> None:
        """A worker dies: its unacked deliveries stay pending."""
        pool = self.pools[group_name]
        alive = [w for w in pool if w.alive]
        if len(alive) > 1:
            w = self.pick(alive)
            w.alive = False
            w.epoch += 1

    def restart(self) -> bool:
        """A crashed worker comes back and first reads its own history."""
        for name in GROUP_NAMES:
            for w in self.pools[name]:
                if not w.alive:
                    w.alive = True
                    for g in self.pairs:
                        if g.name == name and any(p[0] == w.name for p in g.pel.values()):
                            return self.history_read(g, w, 100)
                    return False
        return False

    def step_ack(self) -> bool:
        acks = self.acks
        while acks:
            g, w, epoch, ids = acks.popleft()
            if not g.alive or w.epoch != epoch:
                continue
            if len(ids) > 1 and self.rnd() < 0.3:
                # one entry failed processing: it stays pending until claimed
                ids = list(ids)
                del ids[int(self.rnd() * len(ids))]
            argv = ["XACK", g.key.name, g.name]
            argv += [f"{s[0]}-{s[1]}" for s in ids]
            self.emit(argv, g.key.db, w.client)
            pel = g.pel
            for sid in ids:
                pel.pop(sid, None)
            return True
        return False

    @_on_claim_target
    def step_claim(self, g: Group, claimer: Worker) -> bool:
        k = g.key
        now = self.now
        cands: list[Sid] = []
        least_idle = 1 << 62
        for sid, p in g.pel.items():
            if p[0] != claimer.name:
                cands.append(sid)
                least_idle = min(least_idle, now - p[1])
                if len(cands) >= 1 + int(self.rnd() * 5):
                    break
        if not cands:
            return False
        r = self.rnd()
        if r < 0.85:
            min_idle = max(m for m in MIN_IDLES if m <= max(0, least_idle))
        else:
            min_idle = self.pick(MIN_IDLES)
        force = justid = False
        idle = when = retry = -1
        lastid: Sid | None = None
        opts: list[str] = []
        if self.rnd() < 0.08:
            idle = self.pick((0, 50, 1000, 100000))
            opts += ["IDLE", str(idle)]
        elif self.rnd() < 0.05:
            when = now - self.pick((0, 10, 2000)) + (5000 if self.rnd() < 0.2 else 0)
            opts += ["TIME", str(when)]
        if self.rnd() < 0.08:
            retry = self.pick((0, 1, 3, 7))
            opts += ["RETRYCOUNT", str(retry)]
        if self.rnd() < 0.05 and k.entries:
            force = True
            extra = k.entries[int(self.rnd() * len(k.entries))]
            if extra not in cands:
                cands.append(extra)
            opts.append("FORCE")
        if self.rnd() < 0.25:
            justid = True
            opts.append("JUSTID")
        if self.rnd() < 0.04:
            lastid = g.last_id if self.rnd() < 0.5 or not k.entries else k.entries[-1]
            opts += ["LASTID", fmt_id(lastid)]
        argv = ["XCLAIM", k.name, g.name, claimer.name, str(min_idle)]
        argv += [fmt_id(s) for s in cands]
        argv += opts
        self.emit(argv, k.db, claimer.client)
        # apply (Redis 7.0 rules for what the simulation tracks)
        if lastid is not None and lastid > g.last_id:
            g.last_id = lastid
        delivery = now
        if idle >= 0:
            delivery = now - idle
        elif when >= 0:
            delivery = when
        if delivery < 0 or delivery > now:
            delivery = now
        pel = g.pel
        claimed: list[Sid] = []
        for sid in cands:
            found = pel.get(sid)
            if not has_id(k.entries, sid):
                if found is not None:
                    del pel[sid]
                continue
            if found is None:
                if not force:
                    continue
                entry: list[Any] = [None, now]
            elif found[0] is not None and min_idle > 0 and now - found[1] < min_idle:
                continue
            else:
                entry = pel.pop(sid)
            entry[0] = claimer.name
            entry[1] = delivery
            pel[sid] = entry
            claimed.append(sid)
        if claimed:
            g.consumers[claimer.name] = None
            if not justid or self.rnd() < 0.5:
                self.acks.append((g, claimer, claimer.epoch, claimed))
        return True

    @_on_claim_target
    def step_autoclaim(self, g: Group, claimer: Worker) -> bool:
        k = g.key
        now = self.now
        min_idle = self.pick(MIN_IDLES[:6])
        start = g.cursor if self.rnd() < 0.8 else ZERO
        argv = ["XAUTOCLAIM", k.name, g.name, claimer.name, str(min_idle)]
        argv.append("0" if start == ZERO and self.rnd() < 0.5 else fmt_id(start))
        count = 100
        if self.rnd() < 0.7:
            count = self.pick((1, 5, 10, 25))
            argv += ["COUNT", str(count)]
        justid = self.rnd() < 0.2
        if justid:
            argv.append("JUSTID")
        self.emit(argv, k.db, claimer.client)
        pel = g.pel
        ids = sorted(pel)
        i = bisect_left(ids, start)
        attempts = count * 10
        claimed: list[Sid] = []
        while attempts and count and i < len(ids):
            attempts -= 1
            sid = ids[i]
            i += 1
            p = pel[sid]
            if not has_id(k.entries, sid):
                del pel[sid]
                count -= 1
                continue
            if min_idle and now - p[1] < min_idle:
                continue
            del pel[sid]
            p[0] = claimer.name
            p[1] = now
            pel[sid] = p
            claimed.append(sid)
            count -= 1
        g.cursor = ids[i] if i < len(ids) else ZERO
        if claimed:
            g.consumers[claimer.name] = None
            self.acks.append((g, claimer, claimer.epoch, claimed))
        return True
