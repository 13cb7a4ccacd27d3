"""The admin tool's commands (``XDEL``, ``XTRIM``, ``XGROUP ...``, ``DEL``, ``XSETID``)
and the commands the engine ignores (other data types, stream reads), each applied to
the simulation."""

from __future__ import annotations

from bisect import bisect_left

from pelengine.synth.choice import Choice
from pelengine.synth.world import ADMIN_CLIENT, ZERO, Group, Worker, fmt_id


class Admin(Choice):
    """Steps of the admin tool and of read-only or non-stream clients."""

    def admin_db(self, db: int) -> int | None:
        # the admin tool's capture has no db column for db 0 (null means 0)
        return None if db == 0 else db

    def step_xdel(self) -> bool:
        k = self.pick_key()
        if not k.entries:
            return False
        entries = k.entries
        n = 1 + int(self.rnd() * 3)
        ids = [entries[int(self.rnd() * len(entries) * 0.6)] for _ in range(n)]
        if self.rnd() < 0.2:
            ids.append((k.last_id[0] + 1, 0))  # not there: XDEL counts 0 for it
        self.emit(["XDEL", k.name, *(fmt_id(s) for s in ids)], self.admin_db(k.db), ADMIN_CLIENT)
        for sid in ids:
            i = bisect_left(entries, sid)
            if i < len(entries) and entries[i] == sid:
                del entries[i]
        return True

    def step_xtrim(self) -> bool:
        k = self.pick_key()
        if len(k.entries) < 4:
            return False
        entries = k.entries
        if self.rnd() < 0.5:
            keep = len(entries) // 2
            argv = ["XTRIM", k.name, "MAXLEN"]
            if self.rnd() < 0.3:
                argv.append("=")
            argv.append(str(keep))
            del entries[: len(entries) - keep]
        else:
            minid = entries[len(entries) // 3]
            argv = ["XTRIM", k.name, "MINID", fmt_id(minid)]
            del entries[: bisect_left(entries, minid)]
        self.emit(argv, self.admin_db(k.db), ADMIN_CLIENT)
        return True

    def step_group_create(self) -> None:
        k, name = self.missing.pop(int(self.rnd() * len(self.missing)))
        r = self.rnd()
        argv = ["XGROUP", "CREATE", k.name, name]
        if k.exists:
            if r < 0.5:
                last, spec = k.last_id, "$"
            elif r < 0.9 or not k.entries:
                last, spec = ZERO, "0"
            else:
                last = k.entries[len(k.entries) // 2]
                spec = fmt_id(last)
            argv.append(spec)
            if self.rnd() < 0.3:
                argv.append("MKSTREAM")
            if spec == "$" and self.rnd() < 0.2:
                argv += ["ENTRIESREAD", str(k.adds)]
        else:
            last = ZERO
            argv += ["$" if r < 0.6 else "0", "MKSTREAM"]
            k.exists = True
            k.adds = 0
        self.emit(argv, self.admin_db(k.db), ADMIN_CLIENT)
        g = Group(name, k, last)
        k.groups[name] = g
        self.pairs.append(g)

    def step_setid(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        k = g.key
        r = self.rnd()
        argv = ["XGROUP", "SETID", k.name, g.name]
        if r < 0.4 or not k.entries:
            argv.append("$")
            g.last_id = k.last_id
            if self.rnd() < 0.3:
                argv += ["ENTRIESREAD", str(k.adds)]
        elif r < 0.85:
            g.last_id = k.entries[int(self.rnd() * len(k.entries))]
            argv.append(fmt_id(g.last_id))
        else:
            g.last_id = ZERO
            argv.append("0")
        self.emit(argv, self.admin_db(k.db), ADMIN_CLIENT)
        return True

    def step_createconsumer(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        pool = self.pools[g.name]
        if len(pool) < 8 and self.rnd() < 0.5:
            n = len(pool) + 1
            w = Worker(f"{g.name}-{n}", f"10.0.2.{n}:{43000 + len(self.pairs)}")
            pool.append(w)
        else:
            w = self.pick(pool)
        self.emit(["XGROUP", "CREATECONSUMER", g.key.name, g.name, w.name], g.key.db, w.client)
        g.consumers[w.name] = None
        return True

    def step_delconsumer(self) -> bool:
        g = self.pick_group()
        if g is None or not g.consumers:
            return False
        names = list(g.consumers)
        dead = {w.name for w in self.pools[g.name] if not w.alive}
        pick = [n for n in names if n in dead] or names
        name = self.pick(pick)
        self.emit(
            ["XGROUP", "DELCONSUMER", g.key.name, g.name, name],
            self.admin_db(g.key.db),
            ADMIN_CLIENT,
        )
        del g.consumers[name]
        for sid in [s for s, p in g.pel.items() if p[0] == name]:
            del g.pel[sid]
        return True

    def drop_group(self, g: Group) -> None:
        g.alive = False
        del g.key.groups[g.name]
        self.pairs.remove(g)
        self.missing.append((g.key, g.name))

    def step_destroy(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        self.emit(["XGROUP", "DESTROY", g.key.name, g.name], self.admin_db(g.key.db), ADMIN_CLIENT)
        self.drop_group(g)
        return True

    def step_del(self) -> bool:
        k = self.pick_existing_key()
        if k is None:
            return False
        self.emit(
            ["DEL" if self.rnd() < 0.7 else "UNLINK", k.name], self.admin_db(k.db), ADMIN_CLIENT
        )
        for g in list(k.groups.values()):
            self.drop_group(g)
        k.exists = False
        k.entries = []
        k.last_id = ZERO
        k.adds = 0
        return True

    def step_xsetid(self) -> bool:
        k = self.pick_existing_key()
        if k is None:
            return False
        new = (max(k.last_id[0], self.now) + 1 + int(self.rnd() * 2000), 0)
        self.emit(["XSETID", k.name, fmt_id(new)], self.admin_db(k.db), ADMIN_CLIENT)
        k.last_id = new
        return True

    def step_other(self) -> bool:
        """Commands the engine ignores: other data types and stream reads."""
        k = self.pick_key()
        r = self.rnd()
        client = ADMIN_CLIENT
        cache = f"cache:{int(r * 1000) % 17}"
        if r < 0.25:
            argv = ["SET", cache, str(self.now)]
        elif r < 0.4:
            argv = ["GET", cache]
        elif r < 0.5:
            argv = ["INCR", "stats:reads"]
        elif r < 0.6:
            argv = ["XINFO", "STREAM", k.name]
        elif r < 0.65:
            argv = ["XINFO", "GROUPS", k.name]
        elif r < 0.75 and k.groups:
            g = self.pick(list(k.groups.values()))
            argv = ["XPENDING", k.name, g.name]
            if self.rnd() < 0.5:
                argv += ["-", "+", "10"]
        elif r < 0.8 and k.groups:
            g = self.pick(list(k.groups.values()))
            argv = ["XINFO", "CONSUMERS", k.name, g.name]
        elif r < 0.9:
            argv = ["XRANGE", k.name, "-", "+", "COUNT", "5"]
        elif r < 0.95:
            argv = ["xlen", k.name]
        else:
            argv = ["PING"]
        self.emit(argv, k.db, client)
        return True
