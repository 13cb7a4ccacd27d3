//! The random logs the integration tests share: argvs of every command and option
//! word, odd IDs and numbers (mostly well-formed commands on few keys, groups and
//! consumers).

#![allow(dead_code)]

use pelmodel::{Profile, Unit};

/// The version profiles the tests run on, as `pelengine.model.replay.PROFILES` has
/// them (the library has no table of profiles: its caller resolves them; the Python
/// property tests run both engines on the real table).
pub fn profiles() -> Vec<Profile> {
    let profile = |name: &str, newer: bool, script_block: bool, strict_lag: bool| Profile {
        name: name.to_string(),
        active_time: newer,
        eager_consumers: newer,
        xsetid_checks_max_deleted: newer,
        unit_time_snapshot: newer,
        strict_lag,
        script_block,
    };
    vec![
        profile("7.0", false, false, false),
        profile("7.2", true, false, false),
        profile("7.4", true, true, false),
        profile("valkey-8.1", true, true, true),
    ]
}

/// The profile `name` of `profiles()`; else the error Python's resolver raises.
pub fn profile(name: &str) -> Result<Profile, String> {
    profiles()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| format!("ValueError: unknown Redis version '{name}' (a test's)"))
}

/// xorshift64*: small and deterministic.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

pub const COMMANDS: &[&str] = &[
    "XADD",
    "XTRIM",
    "XDEL",
    "XREADGROUP",
    "XCLAIM",
    "XAUTOCLAIM",
    "XACK",
    "XGROUP",
    "XSETID",
    "DEL",
    "UNLINK",
    "RENAME",
    "RENAMENX",
    "FLUSHDB",
    "FLUSHALL",
    "PELENGINE.LOAD",
    "SET",
    "MSET",
    "SETNX",
    "APPEND",
    "INCR",
    "LPUSH",
    "RPUSH",
    "SADD",
    "HSET",
    "ZADD",
    "GETSET",
    "MULTI",
    "EXEC",
    "DISCARD",
    "EVAL",
    "EVALSHA",
    "FCALL",
    "XACKDEL",
    "XNACK",
    "GET",
    "PING",
    "xadd",
    "xreadgroup",
    "ﬂushdb",
    "xaddſ",
    "",
];

pub const WORDS: &[&str] = &[
    "MAXLEN",
    "MINID",
    "LIMIT",
    "NOMKSTREAM",
    "~",
    "=",
    "*",
    "GROUP",
    "COUNT",
    "BLOCK",
    "NOACK",
    "STREAMS",
    ">",
    "$",
    "FORCE",
    "JUSTID",
    "IDLE",
    "TIME",
    "RETRYCOUNT",
    "LASTID",
    "CREATE",
    "SETID",
    "DESTROY",
    "CREATECONSUMER",
    "DELCONSUMER",
    "HELP",
    "MKSTREAM",
    "ENTRIESREAD",
    "ENTRIESADDED",
    "MAXDELETEDID",
    "ASYNC",
    "SYNC",
    "NX",
    "XX",
    "GET",
    "BEGIN",
    "KEY",
    "STREAM",
    "NODE",
    "PENDING",
    "CONSUMER",
    "maxlen",
    "streams",
    "group",
    "\u{212a}ey",
    "ſtreams",
    "string",
    "list",
];

pub const IDS: &[&str] = &[
    "-",
    "+",
    "0-0",
    "0",
    "1",
    "1-0",
    "1-1",
    "2-5",
    "3",
    "5-0",
    "9-9",
    "10",
    "18446744073709551615",
    "18446744073709551615-18446744073709551615",
    "18446744073709551615-18446744073709551614",
    "18446744073709551614-18446744073709551615",
    "1-*",
    "5-*",
    " 12",
    "+5",
    "-1",
    "",
    "(1-0",
    "(18446744073709551615-18446744073709551615",
    "00000000000000000000000000001-1",
    "1--1",
    "\t-3",
    "1- 2",
    "é",
    "1-é",
    "9223372036854775808-9223372036854775808",
];

pub const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "10",
    "100",
    "-1",
    "-2",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999",
    "+5",
    " 5",
    "05",
    "abc",
    "",
    "1.5",
    "٣",
    "576460752303423487",
    "576460752303423488",
];

pub const KEYS: &[&str] = &["a", "b", "c", "é", ""];
pub const NAMES: &[&str] = &["g", "h", "c1", "c2", "", "ü"];

/// The execution unit a row is given: mostly none (follow the log), sometimes none
/// said outright, sometimes one of three.
pub fn unit(rng: &mut Rng) -> Unit {
    match rng.below(10) {
        0 => Unit::Known(None),
        1 => Unit::Known(Some(rng.below(3) as i64)),
        _ => Unit::Follow,
    }
}

pub fn token(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=2 => rng.pick(IDS).to_string(),
        3..=4 => rng.pick(NUMBERS).to_string(),
        5..=6 => rng.pick(WORDS).to_string(),
        7 => rng.pick(KEYS).to_string(),
        8 => rng.pick(NAMES).to_string(),
        _ => "x".repeat(rng.below(5000)),
    }
}

pub fn small_id(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => rng.pick(IDS).to_string(),
        1..=4 => format!("{}-{}", rng.below(40), rng.below(3)),
        _ => format!("{}", rng.below(40)),
    }
}

pub fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A mostly well-formed command on few keys, groups and consumers.
pub fn sensible(rng: &mut Rng) -> Vec<String> {
    let key = rng.pick(&["a", "b", "c"]);
    let group = rng.pick(&["g", "h"]);
    let consumer = rng.pick(&["c1", "c2", "c3"]);
    let num = |rng: &mut Rng| {
        rng.pick(&["0", "1", "2", "5", "-1", "100", "10", "abc"])
            .to_string()
    };
    let mut argv = match rng.below(12) {
        0..=3 => {
            let mut v = strings(&["XADD", key]);
            match rng.below(6) {
                0 => v.extend(["MAXLEN".into(), "~".into(), num(rng)]),
                1 => v.extend(["MAXLEN".into(), num(rng)]),
                2 => v.extend(["MINID".into(), small_id(rng)]),
                _ => {}
            }
            v.push(if rng.chance(80) {
                "*".into()
            } else {
                small_id(rng)
            });
            v.extend(strings(&["f", "v"]));
            v
        }
        4..=5 => {
            let mut v = strings(&["XREADGROUP", "GROUP", group, consumer]);
            if rng.chance(30) {
                v.extend(["COUNT".into(), num(rng)]);
            }
            if rng.chance(30) {
                v.extend(strings(&["BLOCK", rng.pick(&["0", "5", "100"])]));
            }
            if rng.chance(10) {
                v.push("NOACK".into());
            }
            v.extend(strings(&["STREAMS", key]));
            v.push(if rng.chance(75) {
                ">".into()
            } else {
                small_id(rng)
            });
            v
        }
        6 => {
            let mut v = strings(&["XGROUP", "CREATE", key, group, rng.pick(&["$", "0", "5"])]);
            if rng.chance(60) {
                v.push("MKSTREAM".into());
            }
            v
        }
        7 => strings(&["XACK", key, group, &small_id(rng), &small_id(rng)]),
        8 => {
            let mut v = strings(&[
                "XCLAIM",
                key,
                group,
                consumer,
                &num(rng),
                &small_id(rng),
                &small_id(rng),
            ]);
            if rng.chance(40) {
                v.push(rng.pick(&["FORCE", "JUSTID", "RETRYCOUNT", "IDLE"]).into());
                v.push(num(rng));
            }
            v
        }
        9 => strings(&[
            "XAUTOCLAIM",
            key,
            group,
            consumer,
            &num(rng),
            &small_id(rng),
        ]),
        10 => strings(&["XDEL", key, &small_id(rng)]),
        _ => match rng.below(6) {
            0 => strings(&["XGROUP", "DESTROY", key, group]),
            1 => strings(&["XGROUP", "DELCONSUMER", key, group, consumer]),
            2 => strings(&["RENAME", key, rng.pick(&["a", "b", "c"])]),
            3 => strings(&["DEL", key]),
            4 => strings(&["XTRIM", key, "MAXLEN", &num(rng)]),
            _ => strings(&[rng.pick(&["MULTI", "EXEC", "EVAL", "SET", "FLUSHDB"]), key]),
        },
    };
    if argv[0] == "MULTI" || argv[0] == "EXEC" || argv[0] == "FLUSHDB" {
        argv.truncate(1);
    }
    argv
}

pub fn argv(rng: &mut Rng) -> Vec<String> {
    if rng.chance(70) {
        return sensible(rng);
    }
    let command = rng.pick(COMMANDS);
    let mut argv = vec![command.to_string()];
    // mostly well-formed heads (key, group, consumer), then anything
    match command.to_uppercase().as_str() {
        "XREADGROUP" => {
            argv.push("GROUP".into());
            argv.push(rng.pick(NAMES).into());
            argv.push(rng.pick(NAMES).into());
            if rng.chance(40) {
                argv.push("BLOCK".into());
                argv.push(
                    rng.pick(&["0", "5", "1000", "9223372036854775807", "-1"])
                        .into(),
                );
            }
            if rng.chance(30) {
                argv.push("COUNT".into());
                argv.push(rng.pick(NUMBERS).into());
            }
            argv.push("STREAMS".into());
            let n = 1 + rng.below(2);
            for _ in 0..n {
                argv.push(rng.pick(KEYS).into());
            }
            for _ in 0..n {
                argv.push(rng.pick(&[">", ">", "0", "0-0", "+", "$", "1-1"]).into());
            }
            if rng.chance(10) {
                argv.push(token(rng));
            }
            return argv;
        }
        "XGROUP" => {
            argv.push(
                rng.pick(&[
                    "CREATE",
                    "SETID",
                    "DESTROY",
                    "CREATECONSUMER",
                    "DELCONSUMER",
                    "help",
                    "x",
                ])
                .into(),
            );
            argv.push(rng.pick(KEYS).into());
            argv.push(rng.pick(NAMES).into());
        }
        "PELENGINE.LOAD" => {
            argv.push(
                rng.pick(&[
                    "BEGIN", "KEY", "STREAM", "NODE", "GROUP", "CONSUMER", "PENDING", "x",
                ])
                .into(),
            );
            argv.push(rng.pick(KEYS).into());
        }
        "XCLAIM" | "XAUTOCLAIM" | "XACK" => {
            argv.push(rng.pick(KEYS).into());
            argv.push(rng.pick(NAMES).into());
            argv.push(rng.pick(NAMES).into());
        }
        _ => argv.push(rng.pick(KEYS).into()),
    }
    let extra = rng.below(9);
    for _ in 0..extra {
        argv.push(token(rng));
    }
    if command.eq_ignore_ascii_case("XADD") && rng.chance(70) {
        argv.push(rng.pick(&["*", "*", "1-*", "5-0"]).into());
        argv.push("f".into());
        argv.push(rng.pick(NUMBERS).into());
    }
    argv
}
