//! One handler per Redis command, applying its effects to the model, and the table
//! of the commands the model follows (`stream_command`, `other_writer`).
//!
//! Every handler receives the model (`Model`: the keyspace, the history recorder and
//! the wait queue, borrowed apart from the `Replayer` so that a handler can change a
//! group and record its history in one scope) and the call (argv, db, the command's
//! "now"). A handler that finds an argument Redis would refuse returns
//! `Fail::Command` before changing anything, so that a rejected command has no
//! effect, as in Redis. Parsing order follows the server, so the same malformed
//! command fails for the same reason.
//!
//! The behaviour of each command is described in its doc comment: syntax, effects on
//! the stream and its groups, and side effects (consumer creation, seen and active
//! times). Differences between version profiles are named where they apply.
//!
//! One module per command family: `entries` (XADD, XTRIM, XDEL), `xreadgroup`
//! (XREADGROUP and the readers it blocks), `claims` (XCLAIM, XAUTOCLAIM, XACK),
//! `groups` (XGROUP, XSETID), `keyspace` (DEL, RENAME, FLUSHDB, and the writers of
//! other types), `load` (PELENGINE.LOAD, a snapshot's state).

pub mod claims;
pub mod entries;
pub mod groups;
pub mod keyspace;
pub mod load;
pub mod xreadgroup;

use crate::IndexMap;

use crate::calls::Call;
use crate::fail::{internal, Fail};
use crate::ids::{parse_id, parse_ll, parse_strict_id, StreamId};
use crate::model::Model;
use crate::state::{Consumer, Entries, Group, KeyRef, Keys, Stream, Value};

pub use load::LOAD_COMMAND;
pub use xreadgroup::serve_ready;

/// A command handler.
pub type HandlerFn = fn(&mut Model, &Call) -> Result<(), Fail>;

/// How a command is applied.
#[derive(Clone, Copy)]
pub enum Handler {
    Plain(HandlerFn),
    /// a command that creates or updates a value of this type (`keyspace::type_writer`)
    Writer(&'static str),
}

impl Handler {
    pub fn run(self, m: &mut Model, call: &Call) -> Result<(), Fail> {
        match self {
            Handler::Plain(run) => run(m, call),
            Handler::Writer(type_name) => keyspace::type_writer(m, call, type_name),
        }
    }
}

/// A stream command: name -> (handler, arity as Redis declares it: n exact, -n at
/// least n).
pub fn stream_command(name: &str) -> Option<(Handler, i64)> {
    let (handler, arity): (HandlerFn, i64) = match name {
        "XADD" => (entries::xadd, -5),
        "XTRIM" => (entries::xtrim, -4),
        "XDEL" => (entries::xdel, -3),
        "XREADGROUP" => (xreadgroup::xreadgroup, -7),
        "XCLAIM" => (claims::xclaim, -6),
        "XAUTOCLAIM" => (claims::xautoclaim, -6),
        "XACK" => (claims::xack, -4),
        "XGROUP" => (groups::xgroup, -2),
        "XSETID" => (groups::xsetid, -3),
        "DEL" | "UNLINK" => (keyspace::del_keys, -2),
        "RENAME" | "RENAMENX" => (keyspace::rename, 3),
        "FLUSHDB" | "FLUSHALL" => (keyspace::flush, -1),
        LOAD_COMMAND => (load::load, -2),
        _ => return None,
    };
    Some((Handler::Plain(handler), arity))
}

/// Commands on other types that matter only because they can replace a stream
/// key or make a later stream command fail with WRONGTYPE.
pub fn other_writer(name: &str) -> Option<(Handler, i64)> {
    let type_name = match name {
        "SET" => return Some((Handler::Plain(keyspace::set_string), -3)),
        "MSET" => return Some((Handler::Plain(keyspace::mset), -3)),
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

// --------------------------------------------------------------------------
// What the handlers share: arguments, consumers, streams
// --------------------------------------------------------------------------

/// `argv[i]`; a missing argument is Python's IndexError.
pub(crate) fn arg(argv: &[String], i: usize) -> Result<&str, Fail> {
    argv.get(i)
        .map(String::as_str)
        .ok_or_else(|| Fail::Internal(format!("IndexError: list index out of range ({i})")))
}

/// A Redis integer argument (`not_an_integer` else).
pub(crate) fn ll(text: &str) -> Result<i64, Fail> {
    parse_ll(text).ok_or(Fail::Command("not_an_integer"))
}

/// A stream ID argument, `ms-seq` or `ms` (`invalid_id` else).
pub(crate) fn strict_id(text: &str) -> Result<StreamId, Fail> {
    Ok(parse_strict_id(text)?)
}

/// Every argument from `argv[from]` on as a stream ID (one malformed ID fails the
/// command).
pub(crate) fn strict_ids(argv: &[String], from: usize) -> Result<Vec<StreamId>, Fail> {
    let rest = argv.get(from..).unwrap_or_default();
    rest.iter().map(|a| strict_id(a)).collect()
}

/// A stream ID argument, `-` and `+` allowed.
pub(crate) fn any_id(text: &str) -> Result<StreamId, Fail> {
    Ok(parse_id(text, 0, false, false)?.0)
}

/// A command's options from one argument on, taken in server order.
pub(crate) struct Options<'a> {
    argv: &'a [String],
    /// the next argument to take
    pub at: usize,
}

impl<'a> Options<'a> {
    pub(crate) fn new(argv: &'a [String], at: usize) -> Self {
        Options { argv, at }
    }

    /// The next option's name in lower case and how many arguments follow it (None: no
    /// more).
    pub(crate) fn next_option(&mut self) -> Option<(String, usize)> {
        let name = self.argv.get(self.at)?;
        self.at += 1;
        Some((lower(name), self.argv.len() - self.at))
    }

    /// The argument after the option just taken (taken too).
    pub(crate) fn value(&mut self) -> Result<&'a str, Fail> {
        let value = arg(self.argv, self.at)?;
        self.at += 1;
        Ok(value)
    }
}

/// Python's `str.lower()` (Unicode-aware).
pub(crate) fn lower(text: &str) -> String {
    text.to_lowercase()
}

/// The consumer `name`, created (seen now) if missing.
pub(crate) fn get_or_create_consumer<'c>(
    consumers: &'c mut IndexMap<String, Consumer>,
    name: &str,
    now: i64,
) -> &'c mut Consumer {
    // look up by &str first: no owned key for a consumer that exists
    let at = match consumers.get_index_of(name) {
        Some(at) => at,
        None => {
            consumers
                .insert_full(name.to_string(), Consumer::new(name, now))
                .0
        }
    };
    &mut consumers[at]
}

/// The consumer `name` (created if missing) seen now: what every read and claim does
/// to the consumer it names.
pub(crate) fn touch_consumer(consumers: &mut IndexMap<String, Consumer>, name: &str, now: i64) {
    get_or_create_consumer(consumers, name, now).seen_time = now;
}

/// The consumer `name`, which the handler made sure exists.
pub(crate) fn consumer_mut<'c>(
    consumers: &'c mut IndexMap<String, Consumer>,
    name: &str,
) -> Result<&'c mut Consumer, Fail> {
    consumers
        .get_mut(name)
        .ok_or_else(|| internal("KeyError: the consumer vanished"))
}

/// `Model::lookup_stream` on the keyspace alone.
pub(crate) fn lookup_stream_in<'k>(
    keys: &'k mut Keys,
    db: i64,
    key: &str,
) -> Result<Option<&'k mut Stream>, Fail> {
    match keys.get_mut(&KeyRef(db, key)) {
        None => Ok(None),
        Some(Value::Other(_)) => Err(Fail::Command("wrongtype")),
        Some(Value::Stream(stream)) => Ok(Some(stream)),
    }
}

/// The stream a handler found at `key` before, on the keyspace alone.
pub(crate) fn stream_in<'k>(
    keys: &'k mut Keys,
    db: i64,
    key: &str,
) -> Result<&'k mut Stream, Fail> {
    match keys.get_mut(&KeyRef(db, key)) {
        Some(Value::Stream(stream)) => Ok(stream),
        _ => Err(internal("KeyError: the stream vanished")),
    }
}

/// A stream's entries beside its group `name` (None: no such group), borrowed apart.
pub(crate) fn group_of<'s>(
    stream: &'s mut Stream,
    name: &str,
) -> Option<(&'s Entries, &'s mut Group)> {
    let Stream {
        entries, groups, ..
    } = stream;
    Some((entries, groups.get_mut(name)?))
}

/// A group the handler found before is gone.
pub(crate) fn vanished() -> Fail {
    internal("KeyError: the group vanished")
}
