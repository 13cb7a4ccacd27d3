import json, random, sys
sys.path.insert(0, "/work/main")

def realistic(seed, n):
    from tests.model.test_pel_history import _log
    from tests.model.test_persist import _units_and_waits
    steps = _units_and_waits(_log(seed, n), seed)
    return [[s, t, a, d, c] for s, t, a, d, c in steps]

KEYS = ["a", "b", "c"]
GROUPS = ["g", "h"]
CONS = ["c1", "c2", "c3"]
def rid(rnd, top=30):
    k = rnd.random()
    if k < 0.05: return rnd.choice(["-", "+", "0-0", "0", "$", ">", "18446744073709551615-18446744073709551615", "1-*", " 12", "+5", "", "x", "(5-0", "(0-1", "9223372036854775808-1", "5-18446744073709551615"])
    if k < 0.5: return f"{rnd.randint(0, top)}-{rnd.randint(0, 3)}"
    return str(rnd.randint(0, top))

def fuzz(seed, n):
    rnd = random.Random(seed)
    rows = []
    ts = 0
    seq = 0
    for _ in range(n):
        seq += 1
        ts += rnd.choice([0, 1, 1, 2, 5, 10])
        k = rnd.choice(KEYS); g = rnd.choice(GROUPS); c = rnd.choice(CONS)
        client = rnd.choice([None, "x1", "x2", "x3", "lua"]) if rnd.random() < 0.3 else "x0"
        r = rnd.random()
        def small():
            return rnd.choice(["0", "1", "2", "5", "-1", "100", "abc", "10"])
        def num():
            return rnd.choice(["0", "1", "2", "5", "-1", "100", "abc", "9223372036854775807", "10"])
        choices = [
            lambda: ["XADD", k] + rnd.choice([[], ["MAXLEN", "~", num()], ["MAXLEN", num()], ["MINID", rid(rnd)], ["NOMKSTREAM"], ["MAXLEN", "~", num(), "LIMIT", num()]]) + [rnd.choice(["*", "*", "*", rid(rnd), f"{rnd.randint(0,40)}-*"])] + rnd.choice([["f", "v"], ["f", "v", "g", "w"], ["f"], ["f", "123"], ["h" * 70, "v"]]),
            lambda: ["XREADGROUP", "GROUP", g, c] + rnd.choice([[], ["COUNT", num()], ["NOACK"], ["BLOCK", rnd.choice(["0", "5", "100"])], ["COUNT", "2", "BLOCK", "0"]]) + ["STREAMS", k] + ([rnd.choice(KEYS)] if rnd.random() < 0.2 else []),
            lambda: ["XACK", k, g] + [rid(rnd) for _ in range(rnd.randint(1, 3))],
            lambda: ["XCLAIM", k, g, c, num()] + [rid(rnd) for _ in range(rnd.randint(1, 3))] + rnd.choice([[], ["FORCE"], ["JUSTID"], ["IDLE", num()], ["TIME", num()], ["RETRYCOUNT", num()], ["LASTID", rid(rnd)], ["FORCE", "RETRYCOUNT", "3"]]),
            lambda: ["XAUTOCLAIM", k, g, c, num(), rid(rnd)] + rnd.choice([[], ["COUNT", num()], ["JUSTID"], ["COUNT", "1", "JUSTID"]]),
            lambda: ["XGROUP", "CREATE", k, g, rnd.choice(["$", "0", rid(rnd)])] + rnd.choice([[], ["MKSTREAM"], ["ENTRIESREAD", small()], ["MKSTREAM", "ENTRIESREAD", num()]]),
            lambda: ["XGROUP", "SETID", k, g, rnd.choice(["$", "0", rid(rnd)])] + rnd.choice([[], ["ENTRIESREAD", small()]]),
            lambda: ["XGROUP", rnd.choice(["DESTROY", "CREATECONSUMER", "DELCONSUMER", "help", "bogus"]), k, g] + ([c] if rnd.random() < 0.8 else []),
            lambda: ["XDEL", k] + [rid(rnd) for _ in range(rnd.randint(1, 3))],
            lambda: ["XTRIM", k, rnd.choice(["MAXLEN", "MINID", "maxlen"])] + rnd.choice([[], ["~"], ["="]]) + [rnd.choice([num(), rid(rnd)])] + rnd.choice([[], ["LIMIT", num()]]),
            lambda: ["XSETID", k, rid(rnd)] + rnd.choice([[], ["ENTRIESADDED", small()], ["MAXDELETEDID", rid(rnd)]]),
            lambda: rnd.choice([["DEL", k], ["RENAME", k, rnd.choice(KEYS)], ["RENAMENX", k, rnd.choice(KEYS)], ["FLUSHDB"], ["FLUSHALL", "SYNC"], ["UNLINK", k, rnd.choice(KEYS)]]),
            lambda: rnd.choice([["SET", k, "v"], ["SET", k, "v", "NX"], ["SET", k, "v", "GET"], ["LPUSH", k, "x"], ["MSET", k, "1", "z", "2"], ["INCR", k], ["GET", k]]),
            lambda: rnd.choice([["MULTI"], ["EXEC"], ["DISCARD"], ["EVAL", "s", "1", k], ["PING"]]),
            lambda: rnd.choice([["PELENGINE.LOAD", "STREAM", k, rid(rnd), small(), "0-0", "0-0"],
                                ["PELENGINE.LOAD", "GROUP", k, g, rid(rnd), small()],
                                ["PELENGINE.LOAD", "CONSUMER", k, g, c, num(), num()],
                                ["PELENGINE.LOAD", "NODE", k, rid(rnd), "50", "1", "f", rid(rnd), "1", rid(rnd), rnd.choice(["0", "1"])],
                                ["PELENGINE.LOAD", "PENDING", k, g, rid(rnd), c, num(), num()],
                                ["PELENGINE.LOAD", "KEY", k, "list"]]),
        ]
        weights = [30, 20, 8, 8, 5, 6, 2, 3, 4, 3, 2, 2, 1, 3, 2]
        argv = rnd.choices(choices, weights)[0]()
        if rnd.random() < 0.03:
            argv[0] = argv[0].lower()
        if rnd.random() < 0.05:
            rows.append([seq, ts, [], 0, client, "activity"])
            continue
        rows.append([seq, ts, argv, rnd.choice([0, 0, 0, 1]), client])
    return rows

if __name__ == "__main__":
    kind, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rows = realistic(seed, n) if kind == "real" else fuzz(seed, n)
    for r in rows:
        print(json.dumps(r))
