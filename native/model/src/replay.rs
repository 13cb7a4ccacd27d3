//! The replayer: applies logged commands in order and reports the resulting state.
//!
//! `Replayer::apply` takes one command as the server executed it (its `seq`,
//! its time, argv, db and client) and changes the model exactly as Redis would,
//! or leaves it untouched when Redis would have replied with an error. It keeps
//! what Redis does not: every change of a pending entry (`ownership_changes`),
//! the life of each delivered entry (`delivery_counts`) and every version of
//! each pending entry (`pel_history`: what the PEL showed, from when to when).
//! It appends those history rows column by column (`history`), and hands
//! them on when drained.
//!
//! The state tables at a moment (pel, ownership, groups, streams, delivery rows) are
//! rendered from the replayer by the snapshot (not part of this crate).

use crate::IndexMap;

use crate::calls::{BlockedRead, Profile};
use crate::commands::{
    self as cmd, ClosedRecord, Fail, Keys, Model, Recorder, Trigger, Waits, LOAD_COMMAND,
};
use crate::history::HistoryTables;
use crate::repr::py_repr;
use crate::state::{Counters, Stream, Value};
use crate::units::{LUA_CLIENT, SCRIPT_CALLS};

pub const PROFILES: [Profile; 4] = [
    Profile {
        name: "7.0",
        active_time: false,
        eager_consumers: false,
        xsetid_checks_max_deleted: false,
        unit_time_snapshot: false,
        strict_lag: false,
        script_block: false,
    },
    Profile {
        name: "7.2",
        active_time: true,
        eager_consumers: true,
        xsetid_checks_max_deleted: true,
        unit_time_snapshot: true,
        strict_lag: false,
        script_block: false,
    },
    Profile {
        name: "7.4",
        active_time: true,
        eager_consumers: true,
        xsetid_checks_max_deleted: true,
        unit_time_snapshot: true,
        strict_lag: false,
        script_block: true,
    },
    Profile {
        name: "valkey-8.1",
        active_time: true,
        eager_consumers: true,
        xsetid_checks_max_deleted: true,
        unit_time_snapshot: true,
        strict_lag: true,
        script_block: true,
    },
];

/// The profile named `name` exactly.
pub fn profile_named(name: &str) -> Option<Profile> {
    PROFILES.iter().find(|p| p.name == name).copied()
}

const ALL_PATCHES: (u128, u128) = (0, 1_000_000);

/// Server versions one profile describes, and how that is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerFamily {
    /// "redis" or "valkey"
    pub server: &'static str,
    pub major_minor: (u128, u128),
    pub profile: &'static str,
    pub basis: &'static str,
    /// the patch levels covered (inclusive)
    pub patches: (u128, u128),
}

impl ServerFamily {
    pub fn covers(&self, server: &str, major_minor: (u128, u128), patch: Option<u128>) -> bool {
        let (lo, hi) = self.patches;
        let line = server == self.server && major_minor == self.major_minor;
        match patch {
            // "7.4": the whole line, only when every patch is covered
            None => line && lo == 0,
            Some(patch) => line && lo <= patch && patch <= hi,
        }
    }

    pub fn describe(&self) -> String {
        let (lo, hi) = self.patches;
        let line = format!(
            "{}-{}.{}",
            self.server, self.major_minor.0, self.major_minor.1
        );
        if (lo, hi) == ALL_PATCHES {
            format!("{line}.x")
        } else if hi == ALL_PATCHES.1 {
            format!("{line}.{lo}+")
        } else {
            format!("{line}.{lo}-{hi}")
        }
    }
}

/// Every server version a profile is known to describe. "measured": the live
/// differential suite runs it (tests/redis_diff); "source": read from the server's
/// source, not run here. Redis 7.4.2+ back-ported estimate fixes of its own (unlike
/// Valkey's): not described.
pub const SERVER_FAMILIES: [ServerFamily; 6] = [
    ServerFamily {
        server: "redis",
        major_minor: (7, 0),
        profile: "7.0",
        basis: "measured live against Redis 7.0.15",
        patches: ALL_PATCHES,
    },
    ServerFamily {
        server: "redis",
        major_minor: (7, 2),
        profile: "7.2",
        basis: "the 7.2+ family, from the 7.2.4 source",
        patches: ALL_PATCHES,
    },
    ServerFamily {
        server: "redis",
        major_minor: (7, 4),
        profile: "7.4",
        basis: "the 7.2+ family, from the 7.4.1 source",
        patches: (0, 1),
    },
    ServerFamily {
        server: "valkey",
        major_minor: (8, 0),
        profile: "7.4",
        basis: "from the Valkey 8.0.1 source (as Redis 7.4.1)",
        patches: ALL_PATCHES,
    },
    ServerFamily {
        server: "valkey",
        major_minor: (8, 1),
        profile: "valkey-8.1",
        basis: "measured live against Valkey 8.1.8",
        patches: (1, 1_000_000),
    },
    ServerFamily {
        server: "valkey",
        major_minor: (9, 1),
        profile: "valkey-8.1",
        basis: "measured live against Valkey 9.1.2",
        patches: ALL_PATCHES,
    },
];

/// The accepted `--redis-version` values, for messages.
pub fn known_versions() -> String {
    let mut names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
    names.sort_unstable();
    let families: Vec<String> = SERVER_FAMILIES.iter().map(ServerFamily::describe).collect();
    format!(
        "profile names {}; server versions {}",
        names.join(", "),
        families.join(", ")
    )
}

/// The first code point of every run of ten Unicode decimal digits (category Nd, as
/// Python 3.11's `\d` and `int()` know them).
const ND_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66,
    0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90,
    0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10,
    0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650,
    0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
    0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
];

fn decimal_value(c: char) -> Option<u32> {
    let code = c as u32;
    let index = ND_ZEROS
        .partition_point(|zero| *zero <= code)
        .checked_sub(1)?;
    let digit = code - ND_ZEROS[index];
    (digit < 10).then_some(digit)
}

/// A pattern letter matched as Python's `re.IGNORECASE` matches it.
fn ci_letter(c: char, letter: char) -> bool {
    match letter {
        'i' => matches!(c, 'i' | 'I' | '\u{130}' | '\u{131}'),
        's' => matches!(c, 's' | 'S' | '\u{17f}'),
        'k' => matches!(c, 'k' | 'K' | '\u{212a}'),
        _ => c.is_ascii() && c.to_ascii_lowercase() == letter,
    }
}

fn match_word(chars: &[char], pos: usize, word: &str) -> Option<usize> {
    let mut at = pos;
    for letter in word.chars() {
        if !ci_letter(*chars.get(at)?, letter) {
            return None;
        }
        at += 1;
    }
    Some(at)
}

/// `\d+` at `pos`: the digits' values and the position after them.
fn match_digits(chars: &[char], pos: usize) -> Option<(Vec<u32>, usize)> {
    let mut at = pos;
    let mut digits = Vec::new();
    while let Some(d) = chars.get(at).and_then(|c| decimal_value(*c)) {
        digits.push(d);
        at += 1;
    }
    (!digits.is_empty()).then_some((digits, at))
}

/// Python's `int()` of decimal digits (with its 4300-digit limit); large values
/// saturate (they only meet small ones in comparisons).
fn py_int(digits: &[u32]) -> Result<u128, String> {
    if digits.len() > 4300 {
        return Err(format!(
            "ValueError: Exceeds the limit (4300 digits) for integer string conversion: \
             value has {} digits",
            digits.len()
        ));
    }
    Ok(digits.iter().fold(0u128, |acc, d| {
        acc.saturating_mul(10).saturating_add(u128::from(*d))
    }))
}

type VersionMatch = (Option<String>, Vec<u32>, Vec<u32>, Option<Vec<u32>>);

/// `^(?:(?P<server>redis|valkey)[-_ ]?(?:v(?:ersion)?)?[-_ ]?)?(?P<major>\d+)\.(?P<minor>\d+)
/// (?:\.(?P<patch>\d+))?$` with `re.IGNORECASE`.
fn match_version(text: &str) -> Option<VersionMatch> {
    let chars: Vec<char> = text.chars().collect();
    let sep = |at: usize| matches!(chars.get(at), Some('-' | '_' | ' '));
    let mut pos = 0;
    let mut server = None;
    for word in ["redis", "valkey"] {
        if let Some(end) = match_word(&chars, 0, word) {
            server = Some(chars[..end].iter().collect::<String>());
            pos = end;
            if sep(pos) {
                pos += 1;
            }
            if let Some(after_v) = match_word(&chars, pos, "v") {
                pos = match_word(&chars, after_v, "ersion").unwrap_or(after_v);
            }
            if sep(pos) {
                pos += 1;
            }
            break;
        }
    }
    let (major, at) = match_digits(&chars, pos)?;
    if chars.get(at) != Some(&'.') {
        return None;
    }
    let (minor, mut at) = match_digits(&chars, at + 1)?;
    let mut patch = None;
    if chars.get(at) == Some(&'.') {
        if let Some((digits, end)) = match_digits(&chars, at + 1) {
            patch = Some(digits);
            at = end;
        }
    }
    (at == chars.len()).then_some((server, major, minor, patch))
}

/// Python's `str.strip()`: Unicode whitespace, and the separators \x1c-\x1f.
fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

/// The profile for a profile name ("7.0", "7.4", "valkey-8.1") or a server version as
/// the server reports it ("7.0.15", "7.4.1", "valkey-9.1.2"), with the reason.
pub fn resolve_profile(version: &str) -> Result<(Profile, String), String> {
    let text = py_strip(version);
    if let Some(profile) = profile_named(text) {
        return Ok((profile, format!("profile {text} named")));
    }
    if let Some((server, major, minor, patch)) = match_version(text) {
        let server = server.map_or_else(|| "redis".to_string(), |s| s.to_lowercase());
        let wanted = (py_int(&major)?, py_int(&minor)?);
        let patch = patch.map(|p| py_int(&p)).transpose()?;
        for family in &SERVER_FAMILIES {
            if family.covers(&server, wanted, patch) {
                if let Some(profile) = profile_named(family.profile) {
                    return Ok((profile, format!("{text}: {}", family.basis)));
                }
            }
        }
    }
    Err(format!(
        "unknown Redis version {}: no profile is known to describe it. Known: {}",
        py_repr(version),
        known_versions()
    ))
}

/// The profile for a profile name or a server version (see `resolve_profile`).
pub fn get_profile(name: &str) -> Result<Profile, String> {
    resolve_profile(name).map(|(profile, _)| profile)
}

/// What became of one command: `applied`, `ignored` or `error` (with its kind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub kind: &'static str,
    pub error: Option<String>,
}

impl Outcome {
    fn applied() -> Self {
        Outcome {
            kind: "applied",
            error: None,
        }
    }

    fn ignored() -> Self {
        Outcome {
            kind: "ignored",
            error: None,
        }
    }
}

/// The execution unit a command ran in: `Follow` lets the replayer follow the units
/// itself (Python's `unit=...`); `Known(u)` is the unit the caller knows (None: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Follow,
    Known(Option<i64>),
}

type HandlerFn = fn(&mut Model, &crate::calls::Call) -> Result<(), Fail>;

#[derive(Clone, Copy)]
enum Handler {
    Plain(HandlerFn),
    /// a command that creates or updates a value of this type (`make_type_writer`)
    Writer(&'static str),
}

/// name -> (handler, arity as Redis declares it: n exact, -n at least n)
fn stream_command(name: &str) -> Option<(Handler, i64)> {
    let (handler, arity): (HandlerFn, i64) = match name {
        "XADD" => (cmd::xadd, -5),
        "XTRIM" => (cmd::xtrim, -4),
        "XDEL" => (cmd::xdel, -3),
        "XREADGROUP" => (cmd::xreadgroup, -7),
        "XCLAIM" => (cmd::xclaim, -6),
        "XAUTOCLAIM" => (cmd::xautoclaim, -6),
        "XACK" => (cmd::xack, -4),
        "XGROUP" => (cmd::xgroup, -2),
        "XSETID" => (cmd::xsetid, -3),
        "DEL" | "UNLINK" => (cmd::del_keys, -2),
        "RENAME" | "RENAMENX" => (cmd::rename, 3),
        "FLUSHDB" | "FLUSHALL" => (cmd::flush, -1),
        LOAD_COMMAND => (cmd::load, -2),
        _ => return None,
    };
    Some((Handler::Plain(handler), arity))
}

/// Commands on other types that matter only because they can replace a stream
/// key or make a later stream command fail with WRONGTYPE.
fn other_writer(name: &str) -> Option<(Handler, i64)> {
    let type_name = match name {
        "SET" => return Some((Handler::Plain(cmd::set_string), -3)),
        "MSET" => return Some((Handler::Plain(cmd::mset), -3)),
        "SETNX" | "APPEND" | "INCR" | "INCRBY" | "DECR" | "DECRBY" | "INCRBYFLOAT" | "SETRANGE"
        | "SETEX" | "PSETEX" | "GETSET" => "string",
        "LPUSH" | "RPUSH" => "list",
        "SADD" => "set",
        "HSET" | "HSETNX" | "HMSET" | "HINCRBY" | "HINCRBYFLOAT" => "hash",
        "ZADD" | "ZINCRBY" => "zset",
        _ => return None,
    };
    Some((Handler::Writer(type_name), -2))
}

/// Whether `name` (upper case) is one of the other types' writers the model follows.
pub fn is_other_writer(name: &str) -> bool {
    other_writer(name).is_some()
}

/// Key-level commands: applied when they reach a stream, ignored otherwise (the
/// model cannot tell a missing key from a key of another type it never saw).
pub const KEYSPACE_COMMANDS: [&str; 6] =
    ["DEL", "UNLINK", "RENAME", "RENAMENX", "FLUSHDB", "FLUSHALL"];

/// Stream commands of newer Redis versions: unknown to the profiles modelled here.
pub const NEWER_STREAM_COMMANDS: [&str; 3] = ["XACKDEL", "XDELEX", "XNACK"];

/// The upper-cased command name of an argv (Python's `str.upper()`, Unicode-aware).
pub fn command_name(argv: &[String]) -> String {
    let mut name = String::new();
    fill_command_name(argv, &mut name);
    name
}

/// `command_name` into `name` (its buffer reused): ASCII, the usual case, upper-cases
/// in place; anything else as `str::to_uppercase`.
pub fn fill_command_name(argv: &[String], name: &mut String) {
    name.clear();
    let Some(first) = argv.first() else {
        return;
    };
    if first.is_ascii() {
        name.push_str(first);
        name.make_ascii_uppercase();
    } else {
        name.push_str(&first.to_uppercase());
    }
}

/// How many forgotten calls a replayer keeps for their buffers.
const SPARE_CALLS: usize = 8;

/// A counter's `+= 1` (Python's ints do not overflow; a saved model may hold any
/// count: it stops at i64::MAX).
pub(crate) fn bump(value: &mut i64) {
    *value = value.saturating_add(1);
}

fn fail_message(fail: Fail) -> String {
    match fail {
        Fail::Command(kind) => format!("CommandError: {kind}"),
        Fail::Internal(message) => message,
    }
}

/// Replays stream commands against an exact model of Redis' stream state.
///
/// Spilling (`spill_closed_records`, see Python's `pelengine.model.delivery`): a
/// record leaves the model as a segment row when its entry leaves the PEL, a group
/// that ends leaves an incarnation row; both wait in the history sinks until
/// drained. Memory then follows the PEL, not the history.
#[derive(Clone, Debug)]
pub struct Replayer {
    pub profile: Profile,
    /// Redis' stream-node-max-entries: how many entries one internal node holds
    /// (decides what approximate trimming can drop).
    pub node_max_entries: i64,
    /// Redis' stream-node-max-bytes: the size limit of one node's listpack.
    pub node_max_bytes: i64,
    pub keys: Keys,
    pub counters: Counters,
    pub notes: IndexMap<String, i64>,
    pub record_changes: bool,
    pub last_seq: Option<i64>,
    pub last_ts_ms: Option<i64>,
    /// history rows not drained yet
    pub(crate) tables: HistoryTables,
    /// open MULTI blocks per client -> (the MULTI's seq, the unit's "now": None until
    /// its first command, and on 7.0 always); in insertion order, as Python's dict
    pub(crate) units: IndexMap<Option<String>, (i64, Option<i64>)>,
    /// blocked readers in the order they blocked
    pub(crate) blocked: Vec<BlockedRead>,
    /// keys signalled since the last serve, each with the last write that signalled it
    pub(crate) ready: IndexMap<(i64, String), Option<Trigger>>,
    /// records of groups that ended (db, key, group, created_seq, id, record)
    pub closed: Vec<ClosedRecord>,
    pub spill_closed_records: bool,
    pub segment_n: i64,
    /// the script whose `lua` rows follow: its clock and its unit
    pub(crate) script_now: Option<i64>,
    pub(crate) script_unit: Option<i64>,
    /// the unit the last command ran in
    pub(crate) unit: Option<i64>,
    /// the last applied command (its seq and now)
    pub(crate) call: Option<Trigger>,
    /// the whole call (as the command left it) of every trigger `call` and `ready`
    /// refer to, by `Trigger::id`: what `persist` saves of them (Python keeps the
    /// `Call` objects themselves)
    pub(crate) call_log: Vec<(u64, crate::calls::Call)>,
    /// an internal error of `client_activity` (which returns nothing), reported by the
    /// next `apply` or `settle`
    pub(crate) deferred_error: Option<String>,
    /// calls the log forgot, kept for their buffers: the next commands' `Call`s refill
    /// them instead of allocating every argument afresh (no state: never saved)
    spare_calls: Vec<crate::calls::Call>,
    /// the buffer `apply` upper-cases command names into
    name_buf: String,
}

impl Replayer {
    /// A replayer for `profile` (a profile name or a server version, see
    /// `resolve_profile`).
    pub fn new(
        profile: &str,
        record_changes: bool,
        node_max_entries: i64,
        node_max_bytes: i64,
        spill_closed_records: bool,
    ) -> Result<Self, String> {
        Ok(Replayer {
            profile: get_profile(profile)?,
            node_max_entries,
            node_max_bytes,
            keys: Keys::default(),
            counters: Counters::default(),
            notes: IndexMap::default(),
            record_changes,
            last_seq: None,
            last_ts_ms: None,
            tables: HistoryTables::default(),
            units: IndexMap::default(),
            blocked: Vec::new(),
            ready: IndexMap::default(),
            closed: Vec::new(),
            spill_closed_records,
            segment_n: 0,
            script_now: None,
            script_unit: None,
            unit: None,
            call: None,
            call_log: Vec::new(),
            deferred_error: None,
            spare_calls: Vec::new(),
            name_buf: String::new(),
        })
    }

    /// Python's defaults: profile "7.0", recording changes, nodes of 100 entries and
    /// 4096 bytes, no spilling.
    pub fn with_defaults(profile: &str) -> Result<Self, String> {
        Self::new(profile, true, 100, 4096, false)
    }

    fn model(&mut self) -> Model<'_> {
        Model {
            profile: &self.profile,
            node_max_entries: self.node_max_entries,
            node_max_bytes: self.node_max_bytes,
            keys: &mut self.keys,
            hist: Recorder {
                record_changes: self.record_changes,
                spill: self.spill_closed_records,
                tables: &mut self.tables,
                segment_n: &mut self.segment_n,
                closed: &mut self.closed,
            },
            waits: Waits {
                blocked: &mut self.blocked,
                ready: &mut self.ready,
                current: self.call,
                unit: self.unit,
                units: &self.units,
            },
        }
    }

    // -- applying commands -------------------------------------------------

    /// Apply one logged command; return whether it was applied, ignored or failed.
    ///
    /// `unit`: the execution unit the command ran in (see `place`), when the caller
    /// knows it: a replay that sees only some of the log's rows (one family) cannot
    /// tell it from them. `Unit::Follow`: the replayer follows the units itself.
    /// `db` None: 0. Err: what raises another exception than a command error in the
    /// Python model (the model is then as that exception left it).
    pub fn apply(
        &mut self,
        seq: i64,
        ts_ms: i64,
        argv: &[String],
        db: Option<i64>,
        client: Option<&str>,
        unit: Unit,
    ) -> Result<Outcome, String> {
        if let Some(error) = self.deferred_error.take() {
            return Err(error);
        }
        let mut name = std::mem::take(&mut self.name_buf);
        fill_command_name(argv, &mut name);
        // the body returns through this closure, so that the name's buffer always goes back
        let outcome = (|| -> Result<Outcome, String> {
            let name = name.as_str();
            match self.counters.commands.get_mut(name) {
                Some(count) => bump(count),
                None => {
                    self.counters.commands.insert(name.to_owned(), 1);
                }
            }
            self.last_seq = Some(seq);
            self.last_ts_ms = Some(ts_ms);
            let (now, placed) = self.place(seq, name, ts_ms, client);
            self.enter(match unit {
                Unit::Follow => placed,
                Unit::Known(unit) => unit,
            })
            .map_err(fail_message)?;
            if !self.blocked.is_empty() {
                self.end_waits(ts_ms, client);
            }
            let mut entry = stream_command(name);
            let is_stream = entry.is_some();
            if entry.is_none() {
                entry = other_writer(name);
            }
            let Some((handler, arity)) = entry else {
                if NEWER_STREAM_COMMANDS.contains(&name) {
                    return Ok(self.fail("unknown_command"));
                }
                bump(&mut self.counters.ignored);
                return Ok(Outcome::ignored());
            };
            let argc = argv.len() as i64;
            if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
                if !is_stream {
                    bump(&mut self.counters.ignored);
                    return Ok(Outcome::ignored());
                }
                return Ok(self.fail("wrong_arity"));
            }
            let mut call = self.spare_calls.pop().unwrap_or_default();
            call.refill(seq, now, db.unwrap_or(0), client, argv, name);
            let trigger = Trigger::fresh(seq, now);
            self.call = Some(trigger);
            // inside a unit, keys signalled by its earlier commands stay signalled
            let before = if self.unit.is_some() && !self.ready.is_empty() {
                self.ready.clone()
            } else {
                IndexMap::default()
            };
            let result = {
                let mut m = self.model();
                let done = match handler {
                    Handler::Plain(run) => run(&mut m, &call),
                    Handler::Writer(type_name) => cmd::type_writer(&mut m, &call, type_name),
                };
                done.and_then(|()| {
                    if !m.waits.ready.is_empty() && m.waits.unit.is_none() {
                        cmd::serve_ready(&mut m)
                    } else {
                        Ok(())
                    }
                })
            };
            let keyspace = KEYSPACE_COMMANDS.contains(&name);
            let touched = call.touched_stream.get();
            self.remember(trigger.id, call);
            match result {
                Err(Fail::Internal(message)) => Err(message),
                Err(Fail::Command(kind)) => {
                    self.ready = before;
                    if !is_stream || (keyspace && kind == "no_such_key") {
                        bump(&mut self.counters.ignored);
                        return Ok(Outcome::ignored());
                    }
                    Ok(self.fail(kind))
                }
                Ok(()) => {
                    if is_stream && (!keyspace || touched) {
                        bump(&mut self.counters.applied);
                        return Ok(Outcome::applied());
                    }
                    bump(&mut self.counters.ignored);
                    Ok(Outcome::ignored())
                }
            }
        })();
        self.name_buf = name;
        outcome
    }

    /// Keep the call a trigger names (as the command left it), and only the calls
    /// `call` and `ready` still refer to.
    fn remember(&mut self, id: u64, call: crate::calls::Call) {
        self.call_log.push((id, call));
        self.forget_calls();
    }

    pub(crate) fn forget_calls(&mut self) {
        if self.call_log.len() <= 1 && self.ready.is_empty() {
            return;
        }
        let current = self.call.map(|t| t.id);
        if self.ready.is_empty() {
            // the common case: only the current call is referred to
            let forgotten = self.call_log.extract_if(.., |(id, _)| Some(*id) != current);
            Self::keep_spares(&mut self.spare_calls, forgotten);
            return;
        }
        let mut kept: std::collections::HashSet<u64> =
            self.ready.values().flatten().map(|t| t.id).collect();
        kept.extend(current);
        let forgotten = self.call_log.extract_if(.., |(id, _)| !kept.contains(id));
        Self::keep_spares(&mut self.spare_calls, forgotten);
    }

    /// Keep a few forgotten calls for their buffers.
    fn keep_spares(
        spares: &mut Vec<crate::calls::Call>,
        forgotten: impl Iterator<Item = (u64, crate::calls::Call)>,
    ) {
        for (_, call) in forgotten {
            if spares.len() < SPARE_CALLS {
                spares.push(call);
            }
        }
    }

    /// The "now" of a command and the execution unit it belongs to (None: none).
    ///
    /// Units: what one client sends between `MULTI` and `EXEC`/`DISCARD` (named
    /// by the `MULTI`'s seq); and a script: its `EVAL`/`EVALSHA`/`FCALL` row
    /// followed by the rows of the commands it ran, client `lua`, as MONITOR shows
    /// them (named by the call row's seq, or by the transaction's when it ran inside
    /// one). A server runs a unit without running anything else, and serves blocked
    /// readers only once it ended; a read inside a unit never blocks.
    ///
    /// A 7.2+ server reads its clock once per unit, before the unit's first command:
    /// every command of the unit sees that one time (a transaction's first command's
    /// time; a script's call row's time). 7.0 reads the live clock on every call.
    fn place(
        &mut self,
        seq: i64,
        name: &str,
        ts_ms: i64,
        client: Option<&str>,
    ) -> (i64, Option<i64>) {
        let snapshot = self.profile.unit_time_snapshot;
        let mut ts_ms = ts_ms;
        if client == Some(LUA_CLIENT) {
            if snapshot {
                if let Some(script_now) = self.script_now {
                    ts_ms = script_now;
                }
            }
            return (ts_ms, self.script_unit);
        }
        let owner = client.map(str::to_string);
        let mut unit = None;
        if name == "MULTI" {
            self.units.insert(owner, (seq, None));
        } else if name == "EXEC" || name == "DISCARD" {
            self.units.shift_remove(&owner);
        } else if let Some((multi, unit_now)) = self.units.get_mut(&owner) {
            unit = Some(*multi);
            if snapshot {
                match unit_now {
                    None => *unit_now = Some(ts_ms),
                    Some(at) => ts_ms = *at,
                }
            }
        }
        // a script's rows follow its call row; any other client's row ends them
        if SCRIPT_CALLS.contains(&name) {
            self.script_now = Some(ts_ms);
            self.script_unit = Some(unit.unwrap_or(seq));
            unit = self.script_unit;
        } else {
            self.script_now = None;
            self.script_unit = None;
        }
        (ts_ms, unit)
    }

    /// The next command runs in `unit`: when the unit of the last one ended, the
    /// readers its writes unblocked are served first.
    fn enter(&mut self, unit: Option<i64>) -> Result<(), Fail> {
        if self.unit.is_some() && unit != self.unit {
            self.end_unit()?;
        }
        self.unit = unit;
        Ok(())
    }

    fn end_unit(&mut self) -> Result<(), Fail> {
        self.unit = None;
        if !self.ready.is_empty() {
            cmd::serve_ready(&mut self.model())?;
        }
        Ok(())
    }

    /// End the current execution unit: serve the readers its writes unblocked (the
    /// end of a log, or of the rows a caller has, ends a unit too).
    pub fn settle(&mut self) -> Result<(), String> {
        if let Some(error) = self.deferred_error.take() {
            return Err(error);
        }
        self.end_unit().map_err(fail_message)
    }

    /// Take over `other`'s keys, closed delivery records (or segments) and waiting
    /// clients.
    ///
    /// Used when new commands tie two families together (a RENAME or a multi-stream
    /// XREADGROUP across keys replayed apart until then): their keys are disjoint, so
    /// the union is the state one replay of both would have; waiting clients keep the
    /// order in which they blocked.
    pub fn absorb(&mut self, other: Replayer) {
        self.keys.extend(other.keys);
        self.closed.extend(other.closed);
        self.segment_n = self.segment_n.max(other.segment_n);
        self.tables.extend(other.tables);
        for (client, unit) in other.units {
            self.units.entry(client).or_insert(unit);
        }
        self.blocked.extend(other.blocked);
        self.blocked.sort_by_key(|b| b.seq);
        self.ready.extend(other.ready);
        self.call_log.extend(other.call_log);
        self.forget_calls();
        if let Some(other_seq) = other.last_seq {
            if self.last_seq.is_none_or(|seq| other_seq > seq) {
                self.last_seq = other.last_seq;
                self.last_ts_ms = other.last_ts_ms;
            }
        }
    }

    /// Start counting outcomes afresh (a saved model continuing in a new run).
    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
        self.notes = IndexMap::default();
    }

    fn fail(&mut self, kind: &str) -> Outcome {
        bump(&mut self.counters.failed);
        bump(self.counters.errors.entry(kind.to_string()).or_insert(0));
        Outcome {
            kind: "error",
            error: Some(kind.to_string()),
        }
    }

    /// Count something the run report should mention (not an error).
    pub fn note(&mut self, what: &str) {
        bump(self.notes.entry(what.to_string()).or_insert(0));
    }

    // -- blocked readers -------------------------------------------------------

    /// `client` sent a command this replay does not otherwise see (it touches other
    /// keys): a blocked connection sends nothing, so its wait here is over. `unit`:
    /// the execution unit of that command, as for `apply`.
    ///
    /// An internal error (see `apply`) while the unit it ends is settled is reported
    /// by the next `apply` or `settle`; `try_client_activity` reports it at once.
    pub fn client_activity(&mut self, ts_ms: i64, client: Option<&str>, unit: Unit) {
        if let Err(error) = self.try_client_activity(ts_ms, client, unit) {
            self.deferred_error.get_or_insert(error);
        }
    }

    /// `client_activity`, with its internal error.
    pub fn try_client_activity(
        &mut self,
        ts_ms: i64,
        client: Option<&str>,
        unit: Unit,
    ) -> Result<(), String> {
        if let Unit::Known(unit) = unit {
            self.enter(unit).map_err(fail_message)?;
        }
        if !self.blocked.is_empty() {
            self.end_waits(ts_ms, client);
        }
        Ok(())
    }

    /// The readers still waiting, in the order they blocked.
    pub fn blocked_clients(&self) -> &[BlockedRead] {
        &self.blocked
    }

    /// Before a command: waits past their timeout end, and so does the wait of the
    /// command's own client (a blocked connection sends nothing).
    fn end_waits(&mut self, now: i64, client: Option<&str>) {
        self.blocked.retain(|b| {
            b.deadline
                .is_none_or(|deadline| deadline >= i128::from(now))
                && (client.is_none() || b.client.as_deref() != client)
        });
    }

    // -- history -------------------------------------------------------------

    /// The history rows recorded since the last call, per output table
    /// (`history::HISTORY_TABLES`), column by column: `ownership_changes`, the closed
    /// `pel_history` versions (without `as_of_*`) and, spilling, the closed delivery
    /// segments and the group incarnations that ended. The open versions, segments
    /// and live incarnations are part of the snapshot.
    pub fn drain_tables(&mut self) -> HistoryTables {
        self.tables.take()
    }

    /// How many history rows wait to be drained (every table).
    pub fn undrained_rows(&self) -> usize {
        self.tables.len()
    }

    /// Spilling, once the snapshot gave the open records as segments and the model is
    /// saved to continue later: each open record starts a new, empty segment, so that
    /// the next run's segments hold only what happens after this point.
    pub fn restart_open_records(&mut self) {
        bump(&mut self.segment_n);
        for value in self.keys.values_mut() {
            if let Value::Stream(stream) = value {
                for group in stream.groups.values_mut() {
                    for rec in group.records.values_mut() {
                        rec.deliveries = 0;
                        rec.owners.clear();
                        rec.first_delivery_ms = None;
                        rec.last_delivery_ms = None;
                    }
                }
            }
        }
    }

    /// How many delivery records the model holds (closed ones kept included).
    pub fn record_count(&self) -> usize {
        let mut held = self.closed.len();
        for value in self.keys.values() {
            if let Value::Stream(stream) = value {
                held += stream
                    .groups
                    .values()
                    .map(|g| g.records.len())
                    .sum::<usize>();
            }
        }
        held
    }

    // -- state -----------------------------------------------------------------

    /// Every live stream as (db, key, stream), ordered by db and key.
    pub fn streams(&self) -> Vec<(i64, &str, &Stream)> {
        let mut out: Vec<(i64, &str, &Stream)> = self
            .keys
            .iter()
            .filter_map(|((db, key), value)| match value {
                Value::Stream(stream) => Some((*db, key.as_str(), stream)),
                Value::Other(_) => None,
            })
            .collect();
        out.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_resolve() {
        assert_eq!(get_profile("7.0").map(|p| p.name), Ok("7.0"));
        assert_eq!(get_profile(" 7.4 ").map(|p| p.name), Ok("7.4"));
        assert_eq!(get_profile("\x1c7.2\n").map(|p| p.name), Ok("7.2"));
        assert_eq!(get_profile("7.0.15").map(|p| p.name), Ok("7.0"));
        assert_eq!(get_profile("7.4.1").map(|p| p.name), Ok("7.4"));
        assert!(get_profile("7.4.2").is_err());
        assert!(get_profile("7.4").is_ok());
        assert_eq!(
            get_profile("valkey-9.1.2").map(|p| p.name),
            Ok("valkey-8.1")
        );
        assert_eq!(get_profile("VALKEY_v8.0.1").map(|p| p.name), Ok("7.4"));
        assert_eq!(get_profile("Redis version 7.2").map(|p| p.name), Ok("7.2"));
        assert_eq!(
            get_profile("val\u{212a}ey-8.1.8").map(|p| p.name),
            Ok("valkey-8.1")
        );
        assert!(get_profile("valkey-8.1").is_ok()); // the profile name
        assert!(get_profile("valkey-8.1.0").is_err());
        assert!(get_profile("redıs-7.0").is_err()); // matches, but lower() is not "redis"
        assert_eq!(get_profile("٧.٠").map(|p| p.name), Ok("7.0"));
        assert!(get_profile("7.0.").is_err());
        assert!(get_profile("x7.0").is_err());
        let err = get_profile("nope").unwrap_err();
        assert!(err.starts_with("unknown Redis version 'nope': "), "{err}");
        assert!(err.ends_with(
            "Known: profile names 7.0, 7.2, 7.4, valkey-8.1; server versions redis-7.0.x, \
             redis-7.2.x, redis-7.4.0-1, valkey-8.0.x, valkey-8.1.1+, valkey-9.1.x"
        ));
    }

    #[test]
    fn names_upper_case_as_python() {
        let argv = |s: &str| vec![s.to_string()];
        assert_eq!(command_name(&argv("xadd")), "XADD");
        assert_eq!(command_name(&argv("ﬂushdb")), "FLUSHDB");
        assert_eq!(command_name(&argv("xaſ")), "XAS");
        assert_eq!(command_name(&[]), "");
    }
}
