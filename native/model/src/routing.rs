//! Which stream keys a command touches: how the pipeline routes events to replays
//! (`pelengine.model.routing`).
//!
//! Events are replayed per *family* of keys: keys that one command can tie
//! together (`RENAME src dst`, an `XREADGROUP` over several streams) must be
//! replayed by the same model, because the outcome for one key depends on the
//! other. `FLUSHDB`/`FLUSHALL` reach every family of their db (or of all dbs).

use crate::calls::command_name;
use crate::handlers::{is_other_writer, LOAD_COMMAND};

pub const SCOPE_KEYS: &str = "keys";
pub const SCOPE_DB: &str = "db";
pub const SCOPE_ALL: &str = "all";
pub const SCOPE_NONE: &str = "none";

const SINGLE_KEY: [&str; 7] = [
    "XADD",
    "XTRIM",
    "XDEL",
    "XCLAIM",
    "XAUTOCLAIM",
    "XACK",
    "XSETID",
];

/// (group, keys) of an XREADGROUP, found the way the server parses its options: the
/// last `GROUP <group> <consumer>` before STREAMS wins; the keys are the first half of
/// what follows STREAMS (none when that is odd or missing).
pub fn parse_xreadgroup(argv: &[String]) -> (Option<&str>, Vec<&str>) {
    let mut group = None;
    let argc = argv.len();
    let mut i = 1;
    while i < argc {
        let low = argv[i].to_lowercase();
        let moreargs = argc - i - 1;
        if (low == "block" || low == "count") && moreargs > 0 {
            i += 2;
        } else if low == "streams" && moreargs > 0 {
            if moreargs % 2 == 1 {
                return (group, Vec::new());
            }
            let keys = argv[i + 1..i + 1 + moreargs / 2]
                .iter()
                .map(String::as_str)
                .collect();
            return (group, keys);
        } else if low == "group" && moreargs >= 2 {
            group = Some(argv[i + 1].as_str());
            i += 3;
        } else {
            i += 1;
        }
    }
    (group, Vec::new())
}

/// (scope, keys), see `touched`; a command naming no key reaches no stream.
pub fn touched_keys(argv: &[String]) -> (&'static str, Vec<&str>) {
    let (scope, keys) = touched(argv);
    if scope == SCOPE_KEYS && keys.is_empty() {
        return (SCOPE_NONE, Vec::new());
    }
    (scope, keys)
}

/// (scope, keys): the keys whose state the command may read or change.
///
/// Scope `db`/`all` means every stream of the command's db / of every db. Scope
/// `none` means the command cannot affect any stream (it is counted as ignored
/// without being replayed).
fn touched(argv: &[String]) -> (&'static str, Vec<&str>) {
    if argv.is_empty() {
        return (SCOPE_NONE, Vec::new());
    }
    let name = command_name(argv);
    let name = name.as_str();
    let from = |at: usize| -> Vec<&str> { argv.iter().skip(at).map(String::as_str).collect() };
    let one = |at: usize| -> (&'static str, Vec<&str>) {
        match argv.get(at) {
            Some(key) => (SCOPE_KEYS, vec![key.as_str()]),
            None => (SCOPE_NONE, Vec::new()),
        }
    };
    match name {
        "FLUSHDB" => (SCOPE_DB, Vec::new()),
        "FLUSHALL" => (SCOPE_ALL, Vec::new()),
        // BEGIN replaces every key; the others name theirs
        LOAD_COMMAND if argv.len() == 2 && argv[1].to_uppercase() == "BEGIN" => {
            (SCOPE_ALL, Vec::new())
        }
        LOAD_COMMAND => one(2),
        "MSET" => (
            SCOPE_KEYS,
            argv.iter().skip(1).step_by(2).map(String::as_str).collect(),
        ),
        _ if SINGLE_KEY.contains(&name) || is_other_writer(name) => one(1),
        "XGROUP" => one(2),
        "XREADGROUP" => (SCOPE_KEYS, parse_xreadgroup(argv).1),
        "DEL" | "UNLINK" => (SCOPE_KEYS, from(1)),
        "RENAME" | "RENAMENX" => (
            SCOPE_KEYS,
            argv.iter().skip(1).take(2).map(String::as_str).collect(),
        ),
        _ => (SCOPE_NONE, Vec::new()),
    }
}

// Commands whose effects stay inside the one consumer group they name: a family's
// replay can be split by group and each of these sent to its group's replay only.
const XGROUP_GROUP_ONLY: [&str; 3] = ["SETID", "CREATECONSUMER", "DELCONSUMER"];
const XGROUP_STREAM_LEVEL: [&str; 2] = ["CREATE", "DESTROY"];

/// (group, group_only): the consumer group a command names, and whether what it reads
/// and changes is that group plus stream state no group command changes.
///
/// `group_only` commands (XREADGROUP, XACK, XCLAIM, XAUTOCLAIM, XGROUP SETID /
/// CREATECONSUMER / DELCONSUMER) can be replayed by a model that sees only that
/// group's commands and every stream-level command. XGROUP CREATE and DESTROY name a
/// group but change what every group's replay must know: they go to every group's
/// replay. A command too short to name a group fails the same way everywhere:
/// (None, false).
pub fn command_group(argv: &[String]) -> (Option<&str>, bool) {
    if argv.is_empty() {
        return (None, false);
    }
    let name = command_name(argv);
    let argc = argv.len();
    match name.as_str() {
        "XREADGROUP" => {
            let group = parse_xreadgroup(argv).0;
            (group, group.is_some())
        }
        "XACK" if argc >= 4 => (Some(argv[2].as_str()), true),
        "XCLAIM" | "XAUTOCLAIM" if argc >= 6 => (Some(argv[2].as_str()), true),
        "XGROUP" if argc >= 4 => {
            let sub = argv[1].to_uppercase();
            if XGROUP_GROUP_ONLY.contains(&sub.as_str()) {
                (Some(argv[3].as_str()), true)
            } else if XGROUP_STREAM_LEVEL.contains(&sub.as_str()) {
                (Some(argv[3].as_str()), false)
            } else {
                (None, false)
            }
        }
        _ => (None, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn scopes_and_groups() {
        let a = argv(&[
            "xreadgroup",
            "GROUP",
            "g",
            "c",
            "STREAMS",
            "a",
            "b",
            ">",
            ">",
        ]);
        assert_eq!(touched_keys(&a), (SCOPE_KEYS, vec!["a", "b"]));
        assert_eq!(command_group(&a), (Some("g"), true));
        let odd = argv(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", ">", ">"]);
        assert_eq!(touched_keys(&odd), (SCOPE_NONE, vec![]));
        assert_eq!(
            touched_keys(&argv(&["MSET", "a", "1", "b"])),
            (SCOPE_KEYS, vec!["a", "b"])
        );
        assert_eq!(touched_keys(&argv(&["SET"])), (SCOPE_NONE, vec![]));
        assert_eq!(touched_keys(&argv(&["flushall"])), (SCOPE_ALL, vec![]));
        assert_eq!(
            touched_keys(&argv(&[LOAD_COMMAND, "begin"])),
            (SCOPE_ALL, vec![])
        );
        assert_eq!(
            touched_keys(&argv(&[LOAD_COMMAND, "X", "k"])),
            (SCOPE_KEYS, vec!["k"])
        );
        assert_eq!(
            touched_keys(&argv(&["RENAME", "a"])),
            (SCOPE_KEYS, vec!["a"])
        );
        assert_eq!(touched_keys(&argv(&["GET", "a"])), (SCOPE_NONE, vec![]));
        assert_eq!(touched_keys(&[]), (SCOPE_NONE, vec![]));
        let x = argv(&["XGROUP", "createconsumer", "k", "g", "c"]);
        assert_eq!(command_group(&x), (Some("g"), true));
        let d = argv(&["XGROUP", "DESTROY", "k", "g"]);
        assert_eq!(command_group(&d), (Some("g"), false));
        assert_eq!(command_group(&argv(&["XACK", "k", "g"])), (None, false));
    }
}
