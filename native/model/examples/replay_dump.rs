//! Replays a log given as JSON lines `[seq, ts_ms, argv, db, client]` on stdin and
//! prints every outcome, the counters, the history rows and the final state as one
//! JSON document (for comparing with the Python model: `replay_dump PROFILE [spill]`).

use pelmodel::history::HistoryTables;
use pelmodel::{commands, format_id, Replayer, Unit, Value};
use serde_json::{json, Value as J};
use std::io::{BufRead, Read};

fn tables(t: &HistoryTables) -> J {
    let c = &t.ownership_changes;
    let v = &t.pel_history;
    let s = &t.delivery_segments;
    let i = &t.group_incarnations;
    json!({
        "changes": [c.db, c.key, c.group, c.id, c.id_ms, c.id_seq, c.seq, c.request_seq, c.ts_ms,
                    c.command, c.change, c.from_consumer, c.to_consumer, c.delivery_count,
                    c.delivery_time_ms],
        "versions": [v.db, v.key, v.group, v.id, v.id_ms, v.id_seq, v.consumer, v.delivery_time_ms,
                     v.delivery_count, v.entry_exists, v.valid_from_seq, v.valid_from_ms,
                     v.valid_to_seq, v.valid_to_ms],
        "segments": [s.db, s.key, s.group, s.group_created_seq, s.id, s.id_ms, s.id_seq,
                     s.delivery_count, s.deliveries, s.owner_names, s.first_delivery_ms,
                     s.last_delivery_ms, s.status, s.closed_ms, s.segment_n],
        "incarnations": [i.db, i.key, i.group, i.group_created_seq],
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let profile = args.get(1).map(String::as_str).unwrap_or("7.0");
    let spill = args.get(2).is_some_and(|a| a == "spill");
    let mut r = Replayer::new(profile, true, 100, 4096, spill).expect("profile");
    let mut input = String::new();
    std::io::stdin()
        .lock()
        .read_to_string(&mut input)
        .expect("stdin");
    let mut outcomes = Vec::new();
    let mut drained = HistoryTables::default();
    for line in input.lines() {
        let row: J = serde_json::from_str(line).expect("json");
        let argv: Vec<String> = row[2]
            .as_array()
            .expect("argv")
            .iter()
            .map(|a| a.as_str().expect("str").to_string())
            .collect();
        let client = row[4].as_str();
        if row.get(5).is_some_and(|a| a == "activity") {
            r.client_activity(row[1].as_i64().unwrap(), client, Unit::Follow);
            outcomes.push(json!("activity"));
            continue;
        }
        match r.apply(
            row[0].as_i64().unwrap(),
            row[1].as_i64().unwrap(),
            &argv,
            row[3].as_i64(),
            client,
            Unit::Follow,
        ) {
            Ok(o) => outcomes.push(json!([o.kind, o.error])),
            Err(e) => outcomes.push(json!(["exception", e])),
        }
        drained.extend(r.drain_tables());
    }
    let settled = r.settle().err();
    drained.extend(r.drain_tables());
    let mut streams = Vec::new();
    for (db, key, s) in r.streams() {
        let mut groups = Vec::new();
        for g in s.groups.values() {
            groups.push(json!({
                "name": g.name, "last_id": format_id(&g.last_id), "entries_read": g.entries_read,
                "created_seq": g.created_seq,
                "lag": commands::group_lag(s, g, r.profile.strict_lag),
                "pel": g.pel.iter().map(|(id, n)| json!([format_id(id), n.consumer, n.delivery_time,
                    n.delivery_count, n.version.as_ref().map(|v| json!([v.consumer, v.delivery_time,
                    v.delivery_count, v.entry_exists, v.from_seq, v.from_ms]))])).collect::<Vec<_>>(),
                "consumers": g.consumers.values().map(|c| json!([c.name, c.seen_time, c.active_time,
                    c.pel.iter().map(format_id).collect::<Vec<_>>()])).collect::<Vec<_>>(),
                "records": g.records.iter().map(|(id, x)| json!([format_id(id), x.delivery_count,
                    x.deliveries, x.owners, x.first_delivery_ms, x.last_delivery_ms, x.status,
                    x.closed_ms])).collect::<Vec<_>>(),
            }));
        }
        streams.push(json!({
            "db": db, "key": key,
            "entries": s.entries.iter().map(format_id).collect::<Vec<_>>(),
            "last_id": format_id(&s.last_id), "entries_added": s.entries_added,
            "max_deleted": format_id(&s.max_deleted_entry_id), "first_id": format_id(&s.first_id),
            "nodes": s.nodes.iter().map(|n| json!([format_id(&n.master_id), n.total, n.live,
                format_id(&n.last_id), n.fields, n.nbytes])).collect::<Vec<_>>(),
            "groups": groups,
        }));
    }
    let others: Vec<J> = r
        .keys
        .iter()
        .filter_map(|((db, k), v)| match v {
            Value::Other(t) => Some(json!([db, k, t])),
            Value::Stream(_) => None,
        })
        .collect();
    let c = &r.counters;
    let out = json!({
        "outcomes": outcomes, "settle": settled,
        "counters": [c.applied, c.ignored, c.failed,
            c.errors.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            c.commands.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()],
        "tables": tables(&drained),
        "closed": r.closed.iter().map(|(db, k, g, cs, id, x)| json!([db, k, g, cs, format_id(id),
            x.delivery_count, x.deliveries, x.owners, x.first_delivery_ms, x.last_delivery_ms,
            x.status, x.closed_ms])).collect::<Vec<_>>(),
        "segment_n": r.segment_n,
        "streams": streams, "others": others,
        "key_order": r.keys.keys().map(|(db, k)| json!([db, k])).collect::<Vec<_>>(),
        "blocked": r.blocked_clients().iter().map(|b| json!([b.seq, b.client, b.db, b.keys,
            b.group, b.consumer, b.count, b.noack, b.deadline.map(|d| d.to_string())])).collect::<Vec<_>>(),
    });
    let _ = std::io::stdin().lock().lines();
    println!("{out}");
}
