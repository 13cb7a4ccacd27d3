//! `persist`: a model dumped and loaded continues exactly as the one never
//! interrupted (every outcome, every drained history row, the final state), and
//! `load` never panics, whatever the data (mutated dumps, then replayed further).

// a test may unwrap: a panicking test is a failing test (../Cargo.toml, [workspace.lints])
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use pelmodel::history::HistoryTables;
use pelmodel::persist::{self, Datum, PlainSections, StateData, StateError, STATE_SCHEMA};
use pelmodel::{Replayer, Unit};

mod common;

use common::{argv, profile, profiles, Rng};

#[derive(Clone, Debug)]
enum Step {
    Apply {
        seq: i64,
        ts: i64,
        argv: Vec<String>,
        db: Option<i64>,
        client: Option<&'static str>,
        unit: Unit,
    },
    Activity {
        ts: i64,
        client: Option<&'static str>,
        unit: Unit,
    },
    Settle,
    Restart,
}

const WAITERS: &[&str] = &["w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"];

/// The steps of `no_panic`'s random replays, as data (to run on several replayers).
fn steps(seed: u64, n: i64) -> Vec<Step> {
    let mut rng = Rng(seed);
    let clients: &[Option<&'static str>] = &[None, Some("c1"), Some("c2"), Some("lua"), Some("x")];
    let mut ts: i64 = 1000;
    let mut out = Vec::new();
    for seq in 0..n {
        ts = match rng.below(400) {
            0 => i64::MAX - rng.below(3) as i64,
            1 => -5,
            _ => ts.saturating_add(rng.below(50) as i64),
        };
        let client = clients[rng.below(clients.len())];
        let unit = common::unit(&mut rng);
        out.push(match rng.below(40) {
            0 => Step::Activity { ts, client, unit },
            // a reader that blocks and stays blocked until served (its client never
            // sends anything else)
            3..=5 => Step::Apply {
                seq,
                ts,
                argv: ["XREADGROUP", "GROUP", rng.pick(&["g", "h"]), "w", "BLOCK"]
                    .into_iter()
                    .chain([
                        rng.pick(&["0", "0", "100"]),
                        "STREAMS",
                        rng.pick(&["a", "b", "c"]),
                        ">",
                    ])
                    .map(str::to_string)
                    .collect(),
                db: Some(0),
                client: Some(WAITERS[rng.below(WAITERS.len())]),
                unit: Unit::Follow,
            },
            1 => Step::Settle,
            2 => Step::Restart,
            _ => {
                let db = if rng.chance(10) {
                    None
                } else {
                    Some(rng.below(2) as i64)
                };
                let seq = if rng.chance(1) { i64::MAX } else { seq };
                Step::Apply {
                    seq,
                    ts,
                    argv: argv(&mut rng),
                    db,
                    client,
                    unit,
                }
            }
        });
    }
    out
}

/// One step, then a drain: what it returned and the history rows it recorded.
fn run(r: &mut Replayer, step: &Step) -> (String, HistoryTables) {
    let said = match step {
        Step::Apply {
            seq,
            ts,
            argv,
            db,
            client,
            unit,
        } => format!("{:?}", r.apply(*seq, *ts, argv, *db, *client, *unit)),
        Step::Activity { ts, client, unit } => {
            r.client_activity(*ts, *client, *unit);
            "activity".to_string()
        }
        Step::Settle => format!("{:?}", r.settle()),
        Step::Restart => {
            r.restart_open_records();
            "restart".to_string()
        }
    };
    (said, r.drain_tables())
}

fn round_trip(r: &Replayer) -> Result<(StateData, Replayer), String> {
    let data = persist::dump(r)?;
    let loaded = persist::load(&data, &profile).map_err(|e| format!("load: {e}"))?;
    // a loaded model dumps as what it was loaded from
    assert_eq!(persist::dump(&loaded).as_ref(), Ok(&data));
    Ok((data, loaded))
}

#[test]
fn dumped_and_loaded_continues_as_never_interrupted() {
    let configs: &[(bool, i64, i64, bool)] = &[
        (true, 100, 4096, false),
        (true, 2, 60, true),
        (true, 1, 1, false),
        (false, 3, 200, true),
        (true, 5, 300, false),
    ];
    let (mut cuts, mut skipped, mut rows, mut streams) = (0, 0, 0, 0);
    // cuts whose saved model has pending entries, blocked readers, open units, keys
    // signalled (with their calls), closed records
    let mut held = [0usize; 5];
    for (i, profile) in profiles().iter().enumerate() {
        for (j, &(record, entries, bytes, spill)) in configs.iter().enumerate() {
            let seed = 0x51a7_e5ee_d000_0000 ^ ((i as u64) << 8 | j as u64);
            let log = steps(seed, 1200);
            let new = || Replayer::new(profile.clone(), record, entries, bytes, spill);
            let mut whole = new();
            let expected: Vec<_> = log.iter().map(|s| run(&mut whole, s)).collect();
            let mut resumed = new();
            for (n, step) in log.iter().enumerate() {
                if n > 0 && n % 40 == 0 {
                    match round_trip(&resumed) {
                        Ok((data, loaded)) => {
                            cuts += 1;
                            streams += data.state.streams.len();
                            let st = &data.state;
                            for (n, rows) in [
                                st.pending.len(),
                                st.blocked.len(),
                                st.units.len(),
                                st.ready.len(),
                                st.closed_records.len(),
                            ]
                            .into_iter()
                            .enumerate()
                            {
                                held[n] += usize::from(rows > 0);
                            }
                            resumed = loaded;
                        }
                        Err(e) => {
                            assert!(
                                e.contains("internal error not reported")
                                    || e.contains("does not fit"),
                                "{e}"
                            );
                            skipped += 1;
                        }
                    }
                }
                let got = run(&mut resumed, step);
                assert_eq!(
                    got, expected[n],
                    "{} config {j}: step {n} ({step:?}) differs after resuming",
                    profile.name
                );
                rows += got.1.ownership_changes.len() + got.1.pel_history.len();
            }
            assert_eq!(
                persist::dump(&resumed),
                persist::dump(&whole),
                "{} config {j}: final state",
                profile.name
            );
            assert_eq!(resumed.counters, whole.counters);
        }
    }
    eprintln!(
        "{cuts} cuts ({skipped} skipped), {streams} streams saved, {rows} history rows; \
         cuts with pending, blocked, units, ready, closed: {held:?}"
    );
    assert!(held.iter().all(|n| *n > 3), "{held:?}");
    assert!(
        cuts > 10 * skipped && cuts > 100,
        "{cuts} cuts, {skipped} skipped"
    );
    assert!(
        rows > 1000 && streams > 100,
        "{rows} rows, {streams} streams"
    );
}

#[test]
fn versions_and_refusals() {
    let mut r = Replayer::with_defaults(profile("7.4").unwrap());
    let argv = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
    r.apply(1, 10, &argv("XADD k 1-1 f v"), Some(0), None, Unit::Follow)
        .unwrap();
    r.apply(
        2,
        10,
        &argv("XGROUP CREATE k g 0"),
        Some(0),
        None,
        Unit::Follow,
    )
    .unwrap();
    r.apply(
        3,
        11,
        &argv("XREADGROUP GROUP g c STREAMS k >"),
        Some(0),
        None,
        Unit::Follow,
    )
    .unwrap();
    let err = persist::dump(&r).unwrap_err();
    assert!(
        err.starts_with(
            "the replayer holds output rows not drained yet (1 ownership_changes): drain"
        ),
        "{err}"
    );
    r.drain_tables();
    let data = persist::dump(&r).unwrap();
    assert_eq!(data.state_version, persist::STATE_SCHEMA_VERSION);
    assert_eq!(data.state.keys[0].r#type, "stream");
    assert_eq!(data.state.calls.len(), 1);
    assert_eq!(data.state.model[0].last_call, Some(0));

    let mut other = data.clone();
    // the layouts before nodes carried their runs (2) and before changed_*/moved_* (1)
    for old in [2, 1] {
        other.state_version = old;
        assert_eq!(
            persist::load(&other, &profile).err(),
            Some(StateError::Version(format!(
                "state schema version {old} is not supported (this pelengine reads version 3)"
            )))
        );
    }
    assert_eq!(
        persist::check_version(None).unwrap_err().message(),
        "state schema version is missing (this pelengine reads version 3)"
    );
    let refused = |edit: &dyn Fn(&mut StateData)| {
        let mut d = data.clone();
        edit(&mut d);
        persist::load(&d, &profile).err().map(|e| e.to_string())
    };
    assert_eq!(
        refused(&|d| d.state.model.clear()).as_deref(),
        Some("the model section has 0 rows, not one")
    );
    assert_eq!(
        refused(&|d| d.state.model[0].profile = "6.2".into()).as_deref(),
        // the resolver's error (Python's resolver raises the ValueError it words)
        Some("a malformed saved model: ValueError: unknown Redis version '6.2' (a test's)")
    );
    assert_eq!(
        refused(&|d| d.state.model[0].last_call = Some(1)).as_deref(),
        Some("a malformed saved model: IndexError: no call at position 1 (of 1)")
    );
    assert_eq!(
        refused(&|d| d.state.counts[0].kind = "x".into()).as_deref(),
        Some("a malformed saved model: KeyError: 'x'")
    );
    assert_eq!(
        refused(&|d| d.state.keys[0].key = "k'".into()).as_deref(),
        Some("a malformed saved model: KeyError: (0, \"k'\")")
    );
    assert_eq!(
        refused(&|d| d.state.streams[0].entry_seq.push(1)).as_deref(),
        Some("a malformed saved model: StateError: entry ID lists of 1 and 2 parts")
    );
    assert_eq!(
        refused(&|d| d.state.keys.clear()).as_deref(),
        Some("a malformed saved model: StateError: streams without a key row: [(0, 'k')]")
    );
    assert_eq!(
        refused(&|d| d.state.consumers[0].group = "h".into()).as_deref(),
        Some("a malformed saved model: KeyError: (0, 'k', 'h')")
    );
    assert_eq!(
        refused(&|d| d.state.pending[0].consumer = Some("d\n".into())).as_deref(),
        Some("a malformed saved model: KeyError: 'd\\n'")
    );
    // what Python loads but this model cannot hold
    assert!(refused(&|d| d.state.pending[0].version_from_ms = None)
        .is_some_and(|e| e.contains("open version with null fields")));
    // a consumer holding an entry its group's PEL gives another loads, and is refused
    // when saved again (as in Python)
    let mut d = data.clone();
    let mut row = d.state.pending[0].clone();
    d.state.consumers.push(persist::ConsumerRow {
        consumer: "d".into(),
        ..d.state.consumers[0].clone()
    });
    row.consumer = Some("d".into());
    d.state.pending.push(row);
    let loaded = persist::load(&d, &profile).unwrap();
    assert_eq!(
        persist::dump(&loaded).unwrap_err(),
        "db 0 key 'k' group 'g': consumer 'c' holds entries its group's PEL does not give \
         it: the model is inconsistent"
    );

    // the entries are a multiset (Python's SortedList): an ID twice stays twice
    let mut d = data.clone();
    d.state.streams[0].entry_ms = vec![2, 1, 1];
    d.state.streams[0].entry_seq = vec![0, 1, 1];
    let again = persist::dump(&persist::load(&d, &profile).unwrap()).unwrap();
    assert_eq!(again.state.streams[0].entry_ms, [1, 1, 2]);
    assert_eq!(again.state.streams[0].entry_seq, [1, 1, 0]);

    // plain data: the schema is checked as Python checks it
    let plain = data.to_plain();
    assert!(persist::schema_problems(&plain, 10).is_empty());
    assert_eq!(
        StateData::from_plain(&Datum::Int(persist::STATE_SCHEMA_VERSION), &plain).as_ref(),
        Ok(&data)
    );
    let mut bad = plain.clone();
    bad[2].1[0][0].1 = Datum::Int(1 << 40);
    bad[1].1[0].swap(0, 1);
    assert_eq!(
        persist::schema_problems(&bad, 10),
        [
            "counts[0]: fields ['name', 'kind', 'count'], declared ['kind', 'name', 'count']",
            "keys[0].db: 1099511627776 is no int"
        ]
    );
    let mut missing = plain.clone();
    missing.remove(3);
    missing.push(("extra".into(), vec![]));
    assert_eq!(
        StateData::from_plain(&Datum::Int(persist::STATE_SCHEMA_VERSION), &missing)
            .unwrap_err()
            .to_string(),
        "the saved model's sections: missing ['streams'], unknown ['extra']"
    );
    assert_eq!(
        StateData::from_plain(&Datum::Str("2".into()), &plain).unwrap_err(),
        StateError::Version(
            "state schema version '2' is not supported (this pelengine reads version 3)".into()
        )
    );
    assert_eq!(STATE_SCHEMA[2].1[2], ("type", "string"));
}

fn mutate(rng: &mut Rng, plain: &mut PlainSections) {
    let section = rng.below(plain.len());
    let (name, rows) = &mut plain[section];
    let fields = STATE_SCHEMA
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, f)| *f)
        .unwrap();
    if rows.is_empty() {
        return;
    }
    let at = rng.below(rows.len());
    match rng.below(10) {
        0 if name != "model" => {
            rows.remove(at);
        }
        1 => {
            let row = rows[at].clone();
            rows.insert(rng.below(rows.len() + 1), row);
        }
        2 => {
            let other = rng.below(rows.len());
            rows.swap(at, other);
        }
        _ => {
            let field = rng.below(fields.len());
            let type_name = fields[field].1;
            let value = &mut rows[at][field].1;
            *value = match value.clone() {
                Datum::Int(v) => {
                    let n = match rng.below(8) {
                        0 => i64::MAX,
                        1 => i64::MIN,
                        2 => -1,
                        3 => v.wrapping_add(1),
                        4 => v.wrapping_sub(1),
                        5 => 0,
                        _ => rng.below(5) as i64,
                    };
                    if type_name.starts_with("int") {
                        Datum::Int(n.clamp(-2, 3))
                    } else {
                        Datum::Int(n)
                    }
                }
                Datum::Bool(b) => Datum::Bool(!b),
                Datum::Str(_) => Datum::Str(
                    rng.pick(&[
                        "", "a", "b", "k", "g", "h", "c1", "c2", "stream", "list", "7.0",
                        "pending", "error", "note", "command",
                    ])
                    .to_string(),
                ),
                Datum::Null if type_name.ends_with('?') && !type_name.contains("string") => {
                    Datum::Int(rng.below(3) as i64)
                }
                Datum::Null => Datum::Null,
                Datum::List(mut items) => {
                    if !items.is_empty() {
                        match rng.below(3) {
                            0 => {
                                items.remove(rng.below(items.len()));
                            }
                            1 => {
                                let item = items[rng.below(items.len())].clone();
                                items.push(item);
                            }
                            _ => items.clear(),
                        }
                    }
                    Datum::List(items)
                }
            };
        }
    }
}

#[test]
fn odd_saved_models_never_panic() {
    let (mut loaded, mut refused) = (0, 0);
    for (i, profile) in profiles().iter().enumerate() {
        for spill in [false, true] {
            let seed = 0xbad_5eed ^ ((i as u64) << 4 | spill as u64);
            let log = steps(seed, 900);
            let mut r = Replayer::new(profile.clone(), true, 3, 300, spill);
            let mut rng = Rng(seed ^ 0x77);
            for (n, step) in log.iter().enumerate() {
                run(&mut r, step);
                if n % 100 != 99 {
                    continue;
                }
                let Ok(data) = persist::dump(&r) else {
                    continue;
                };
                let plain = data.to_plain();
                for _ in 0..25 {
                    let mut odd = plain.clone();
                    for _ in 0..1 + rng.below(4) {
                        mutate(&mut rng, &mut odd);
                    }
                    let Ok(odd) =
                        StateData::from_plain(&Datum::Int(persist::STATE_SCHEMA_VERSION), &odd)
                    else {
                        continue;
                    };
                    match persist::load(&odd, &common::profile) {
                        Err(_) => refused += 1,
                        Ok(mut m) => {
                            loaded += 1;
                            for step in &log[n + 1..(n + 60).min(log.len())] {
                                run(&mut m, step);
                            }
                            let _ = m.settle();
                            m.drain_tables();
                            let _ = persist::dump(&m);
                        }
                    }
                }
            }
        }
    }
    eprintln!("odd saved models: {loaded} loaded, {refused} refused");
    assert!(
        loaded > 500 && refused > 50,
        "{loaded} loaded, {refused} refused"
    );
}
