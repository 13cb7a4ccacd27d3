//! What the replayer, the command handlers and the snapshot share.
//!
//! * `Profile`: the behaviour that differs between server versions;
//! * `Call`: one command being applied, `command_name` its name; `Trigger`: the call a
//!   served key was signalled by; `BlockedRead`: a client waiting in
//!   `XREADGROUP ... BLOCK`.
//!
//! (Python's `Model` protocol is `model::Model`, its `Columns` the sinks of
//! `history`.)

use std::cell::Cell;

use crate::ids::StreamId;

/// Behaviour that differs between server versions (see docs/redis-semantics.md).
///
/// The model receives it resolved: which profiles exist and which server versions
/// each describes is known in one place, the Python model (`pelengine.model.replay`'s
/// `PROFILES` and `resolve_profile`), and the Python face builds this from the
/// resolved Python `Profile`, field by field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Profile {
    /// "7.0", "7.2", "7.4", "valkey-8.1", ...: what a saved model names
    pub name: String,
    pub active_time: bool,
    pub eager_consumers: bool,
    pub xsetid_checks_max_deleted: bool,
    pub unit_time_snapshot: bool,
    /// the entries_read/lag estimates of Valkey 8.1.1+ (see lag::range_has_tombstones)
    pub strict_lag: bool,
    /// a script's XREADGROUP may name BLOCK (it never blocks); 7.0 and 7.2 refuse it
    pub script_block: bool,
}

/// The command and moment a served key was signalled by (Python's `Call` in `_ready`).
///
/// `id` names the call as Python's object identity does: two triggers of one command
/// share it, two commands never do (even of one seq). The replayer keeps the whole
/// call of every id it still refers to (see `Replayer`), for `persist`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub seq: i64,
    pub now: i64,
    pub id: u64,
}

static NEXT_CALL_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Trigger {
    /// A trigger of a new call: an id no other call of this process has.
    pub fn fresh(seq: i64, now: i64) -> Self {
        let id = NEXT_CALL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Trigger { seq, now, id }
    }
}

/// The upper-cased command name of an argv (Python's `str.upper()`, Unicode-aware).
pub fn command_name<S: AsRef<str>>(argv: &[S]) -> String {
    let mut name = String::new();
    fill_command_name(argv, &mut name);
    name
}

/// `command_name` into `name` (its buffer reused): ASCII, the usual case, upper-cases
/// in place; anything else as `str::to_uppercase`.
pub fn fill_command_name<S: AsRef<str>>(argv: &[S], name: &mut String) {
    name.clear();
    let Some(first) = argv.first().map(AsRef::as_ref) else {
        return;
    };
    if first.is_ascii() {
        name.push_str(first);
        name.make_ascii_uppercase();
    } else {
        name.push_str(&first.to_uppercase());
    }
}

/// One command being applied: its arguments and its moment.
///
/// `touched_stream` and `result` are cells: a handler sets them through a shared
/// reference while it reads `argv`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Call {
    pub seq: i64,
    pub now: i64,
    pub db: i64,
    pub client: Option<String>,
    pub argv: Vec<String>,
    pub command: String,
    /// XADD: the new ID; XAUTOCLAIM: the cursor
    pub result: Cell<Option<StreamId>>,
    pub touched_stream: Cell<bool>,
    /// the command whose request this is: differs from `seq` for a blocked read
    /// served during a later command
    pub request_seq: Option<i64>,
}

impl Call {
    pub fn new(
        seq: i64,
        now: i64,
        db: i64,
        client: Option<String>,
        argv: Vec<String>,
        command: &str,
        request_seq: Option<i64>,
    ) -> Self {
        Call {
            seq,
            now,
            db,
            client,
            argv,
            command: command.to_string(),
            result: Cell::new(None),
            touched_stream: Cell::new(false),
            request_seq,
        }
    }
}

impl Call {
    /// This call made over as `Call::new(seq, now, db, client, argv, command, None)`,
    /// reusing its buffers (the replayer's spare calls).
    pub fn refill<S: AsRef<str>>(
        &mut self,
        seq: i64,
        now: i64,
        db: i64,
        client: Option<&str>,
        argv: &[S],
        command: &str,
    ) {
        self.seq = seq;
        self.now = now;
        self.db = db;
        match (client, &mut self.client) {
            (Some(text), Some(kept)) => {
                kept.clear();
                kept.push_str(text);
            }
            (client, kept) => *kept = client.map(str::to_owned),
        }
        self.argv.truncate(argv.len());
        for (kept, arg) in self.argv.iter_mut().zip(argv) {
            kept.clear();
            kept.push_str(arg.as_ref());
        }
        let have = self.argv.len();
        self.argv
            .extend(argv[have..].iter().map(|a| a.as_ref().to_owned()));
        self.command.clear();
        self.command.push_str(command);
        self.result.set(None);
        self.touched_stream.set(false);
        self.request_seq = None;
    }
}

/// A client waiting in `XREADGROUP ... BLOCK` for one of its keys.
///
/// Compared field by field (Python's dataclass equality).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedRead {
    pub seq: i64,
    pub client: Option<String>,
    pub db: i64,
    pub argv: Vec<String>,
    pub keys: Vec<String>,
    pub group: String,
    pub consumer: String,
    pub count: i64,
    pub noack: bool,
    /// ms; None for BLOCK 0 (forever). i128: `now + timeout` of two i64 (a Python int).
    pub deadline: Option<i128>,
}

#[cfg(test)]
mod tests {
    use super::command_name;

    #[test]
    fn names_upper_case_as_python() {
        let argv = |s: &str| vec![s.to_string()];
        assert_eq!(command_name(&argv("xadd")), "XADD");
        assert_eq!(command_name(&argv("ﬂushdb")), "FLUSHDB");
        assert_eq!(command_name(&argv("xaſ")), "XAS");
        assert_eq!(command_name::<String>(&[]), "");
    }
}
