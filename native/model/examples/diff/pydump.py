import json, sys
sys.path.insert(0, "/work/main")
from pelengine.model.replay import Replayer
from pelengine.model.commands import group_lag
from pelengine.model.state import Stream, OtherValue

def fid(i): return f"{i[0]}-{i[1]}"

def dump(rows, profile, spill):
    r = Replayer(profile, spill_closed_records=spill)
    outcomes = []
    drained = {"ownership_changes": [], "pel_history": [], "delivery_segments": [], "group_incarnations": []}
    def drain():
        for k, cols in r.drain_tables().items():
            drained[k].append(cols.lists)
    for row in rows:
        seq, ts, argv, db, client = row[:5]
        if len(row) > 5 and row[5] == "activity":
            r.client_activity(ts, client)
            outcomes.append("activity")
            continue
        try:
            o = r.apply(seq, ts, argv, db, client)
            outcomes.append([o.kind, o.error])
        except Exception as e:
            outcomes.append(["exception", repr(e)])
        drain()
    settled = None
    try:
        r.settle()
    except Exception as e:
        settled = repr(e)
    drain()
    def merge(parts, n):
        cols = [[] for _ in range(n)]
        for p in parts:
            for c, more in zip(cols, p): c.extend(more)
        return cols
    tables = {
        "changes": merge(drained["ownership_changes"], 15),
        "versions": merge(drained["pel_history"], 14),
        "segments": merge(drained["delivery_segments"], 15),
        "incarnations": merge(drained["group_incarnations"], 4),
    }
    streams = []
    for db, key, s in r.streams():
        groups = []
        for g in s.groups.values():
            groups.append({
                "name": g.name, "last_id": fid(g.last_id), "entries_read": g.entries_read,
                "created_seq": g.created_seq, "lag": group_lag(s, g, r.profile.strict_lag),
                "pel": [[fid(i), n.consumer.name if n.consumer else None, n.delivery_time, n.delivery_count,
                         None if n.version is None else [n.version.consumer, n.version.delivery_time,
                         n.version.delivery_count, n.version.entry_exists, n.version.from_seq, n.version.from_ms]]
                        for i, n in g.pel.items()],
                "consumers": [[c.name, c.seen_time, c.active_time, [fid(i) for i in c.pel]] for c in g.consumers.values()],
                "records": [[fid(i), x.delivery_count, x.deliveries, sorted(x.owners), x.first_delivery_ms,
                             x.last_delivery_ms, x.status, x.closed_ms] for i, x in g.records.items()],
            })
        streams.append({
            "db": db, "key": key, "entries": [fid(i) for i in s.entries],
            "last_id": fid(s.last_id), "entries_added": s.entries_added,
            "max_deleted": fid(s.max_deleted_entry_id), "first_id": fid(s.first_id),
            "nodes": [[fid(n.master_id), n.total, n.live, fid(n.last_id), list(n.fields), n.nbytes] for n in s.nodes],
            "groups": groups,
        })
    c = r.counters
    return {
        "outcomes": outcomes, "settle": settled,
        "counters": [c.applied, c.ignored, c.failed, [[k, v] for k, v in c.errors.items()],
                     [[k, v] for k, v in c.commands.items()]],
        "tables": tables,
        "closed": [[db, k, g, cs, fid(i), x.delivery_count, x.deliveries, sorted(x.owners),
                    x.first_delivery_ms, x.last_delivery_ms, x.status, x.closed_ms]
                   for db, k, g, cs, i, x in r._closed],
        "segment_n": r._segment_n,
        "streams": streams,
        "others": [[db, k, v.type_name] for (db, k), v in r.keys.items() if isinstance(v, OtherValue)],
        "key_order": [[db, k] for (db, k) in r.keys],
        "blocked": [[b.seq, b.client, b.db, b.keys, b.group, b.consumer, b.count, b.noack,
                     None if b.deadline is None else str(b.deadline)] for b in r._blocked],
    }

if __name__ == "__main__":
    profile = sys.argv[1]
    spill = len(sys.argv) > 2 and sys.argv[2] == "spill"
    rows = [json.loads(l) for l in sys.stdin if l.strip()]
    print(json.dumps(dump(rows, profile, spill)))
