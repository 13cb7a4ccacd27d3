//! Random argvs of every command and option word, odd IDs and numbers, through a
//! `Replayer` on every profile, with units (MULTI/EXEC, scripts and their `lua` rows),
//! blocking reads and client activity: nothing may panic, whatever the input.

// a test may unwrap: a panicking test is a failing test (../Cargo.toml, [workspace.lints])
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use pelmodel::{Replayer, Unit};

mod common;

use common::{argv, profile, profiles, Rng};

/// Replays 3000 random rows; returns how many commands applied and how many
/// history rows were recorded.
fn run(
    name: &str,
    seed: u64,
    node_max_entries: i64,
    node_max_bytes: i64,
    spill: bool,
) -> (i64, usize) {
    let mut rng = Rng(seed);
    let mut r = Replayer::new(
        profile(name).expect("a known profile"),
        true,
        node_max_entries,
        node_max_bytes,
        spill,
    );
    let clients: &[Option<&str>] = &[None, Some("c1"), Some("c2"), Some("lua"), Some("x")];
    let mut ts: i64 = 1000;
    let mut rows = 0;
    for seq in 0..3000i64 {
        ts = match rng.below(200) {
            0 => i64::MAX - rng.below(3) as i64,
            1 => i64::MIN + rng.below(3) as i64,
            2 => -5,
            _ => ts.saturating_add(rng.below(50) as i64),
        };
        let client = clients[rng.below(clients.len())];
        let unit = common::unit(&mut rng);
        match rng.below(30) {
            0 => r.client_activity(ts, client, unit),
            1 => {
                let _ = r.settle();
            }
            2 => {
                let tables = r.drain_tables();
                assert_eq!(
                    tables.ownership_changes.db.len(),
                    tables.ownership_changes.len()
                );
                rows += tables.ownership_changes.len();
            }
            3 => r.restart_open_records(),
            _ => {
                let argv = argv(&mut rng);
                let db = if rng.chance(10) {
                    None
                } else {
                    Some(rng.below(2) as i64)
                };
                let seq = if rng.chance(2) { i64::MAX } else { seq };
                let _ = r.apply(seq, ts, &argv, db, client, unit);
            }
        }
        for (_, _, stream) in r.streams() {
            for group in stream.groups.values() {
                let _ = pelmodel::lag::group_lag(stream, group, r.profile.strict_lag);
            }
        }
    }
    let _ = r.settle();
    rows += r.drain_tables().ownership_changes.len();
    (r.counters.applied, rows)
}

#[test]
fn random_argvs_never_panic() {
    let configs: &[(i64, i64, bool)] = &[
        (100, 4096, false),
        (2, 60, true),
        (0, 0, false),
        (-3, i64::MAX, true),
        (1, 1, false),
    ];
    let (mut applied, mut rows) = (0, 0);
    for (i, profile) in profiles().iter().enumerate() {
        for (j, &(entries, bytes, spill)) in configs.iter().enumerate() {
            let seed = 0x9e37_79b9_7f4a_7c15 ^ ((i as u64) << 8 | j as u64);
            let (a, n) = run(&profile.name, seed, entries, bytes, spill);
            applied += a;
            rows += n;
        }
    }
    // the random rows reach the handlers' effects, not only their argument checks
    eprintln!("applied {applied}, ownership_changes rows {rows}");
    assert!(
        applied > 5000 && rows > 500,
        "applied {applied}, rows {rows}"
    );
}

#[test]
fn loaded_states_never_panic() {
    // PELENGINE.LOAD rows in odd orders: nodes out of order, duplicates, extreme counters
    let rows: &[&[&str]] = &[
        &[
            "PELENGINE.LOAD",
            "STREAM",
            "k",
            "5-0",
            "9223372036854775807",
            "9-9",
            "0-0",
        ],
        &[
            "PELENGINE.LOAD",
            "NODE",
            "k",
            "1-0",
            "9223372036854775800",
            "1",
            "f",
            "5-0",
            "1",
            "0-1",
            "1",
        ],
        &[
            "PELENGINE.LOAD",
            "NODE",
            "k",
            "0-2",
            "10",
            "0",
            "0-3",
            "1",
            "5-0",
            "1",
        ],
        &[
            "PELENGINE.LOAD",
            "GROUP",
            "k",
            "g",
            "0-0",
            "9223372036854775807",
        ],
        &["PELENGINE.LOAD", "CONSUMER", "k", "g", "c", "1", "-1"],
        &[
            "PELENGINE.LOAD",
            "PENDING",
            "k",
            "g",
            "5-0",
            "c",
            "-9223372036854775808",
            "9223372036854775807",
        ],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", "0"],
        &["XCLAIM", "k", "g", "d", "0", "5-0"],
        &["XADD", "k", "MAXLEN", "1", "*", "f", "v"],
        &["XDEL", "k", "5-0", "0-1", "0-3"],
        &["XDEL", "k", "5-0"],
        &["XTRIM", "k", "MINID", "9"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", ">"],
        &[
            "XSETID",
            "k",
            "18446744073709551615-18446744073709551615",
            "ENTRIESADDED",
            "9223372036854775807",
        ],
        &["XADD", "k", "*", "f", "v"],
        &["PELENGINE.LOAD", "BEGIN"],
    ];
    for profile in profiles() {
        let mut r = Replayer::new(profile.clone(), true, 1, 1, true);
        for (seq, row) in rows.iter().enumerate() {
            let argv: Vec<String> = row.iter().map(|s| s.to_string()).collect();
            let _ = r.apply(seq as i64, i64::MAX, &argv, Some(0), None, Unit::Follow);
            for (_, _, stream) in r.streams() {
                for group in stream.groups.values() {
                    let _ = pelmodel::lag::group_lag(stream, group, profile.strict_lag);
                }
            }
        }
    }
}
