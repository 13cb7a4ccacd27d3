//! Commands on whole keys: DEL, RENAME, FLUSHDB/FLUSHALL, and the writers of other
//! types (SET, MSET, LPUSH, ...), which matter only because they can replace a stream.

use crate::calls::Call;
use crate::fail::Fail;
use crate::model::Model;
use crate::state::Value;

use super::{arg, lower};

/// DEL key [key ...] / UNLINK key [key ...]
///
/// Removes each key that exists; a stream goes with its groups and PELs (their
/// pending entries close as `key_deleted`).
pub fn del_keys(m: &mut Model, call: &Call) -> Result<(), Fail> {
    for key in call.argv.iter().skip(1) {
        m.delete_key(call, call.db, key)?;
    }
    Ok(())
}

/// RENAME src dst / RENAMENX src dst
///
/// Moves the value of `src` to `dst`, replacing what `dst` held (RENAMENX
/// does nothing when `dst` exists). A missing `src` is an error; renaming a
/// key onto itself changes nothing. A stream keeps its groups, PELs and history.
pub fn rename(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let src = arg(&call.argv, 1)?;
    let dst = arg(&call.argv, 2)?;
    let nx = call.command == "RENAMENX";
    if m.lookup_any(call.db, src).is_none() {
        return Err(Fail::Command("no_such_key"));
    }
    if src == dst {
        return Ok(());
    }
    if nx && m.lookup_any(call.db, dst).is_some() {
        return Ok(());
    }
    m.delete_key(call, call.db, dst)?;
    m.move_key(call, call.db, src, dst)
}

/// FLUSHDB [ASYNC|SYNC] / FLUSHALL [ASYNC|SYNC]
///
/// Removes every key of the current database (FLUSHALL: of all databases).
pub fn flush(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    if argv.len() > 2 || (argv.len() == 2 && !matches!(lower(&argv[1]).as_str(), "async" | "sync"))
    {
        return Err(Fail::Command("syntax_error"));
    }
    let db = if call.command == "FLUSHALL" {
        None
    } else {
        Some(call.db)
    };
    m.flush(call, db)
}

/// SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT n|KEEPTTL]
///
/// Not a stream command, but it replaces whatever the key held, a stream
/// included (its pending entries close as `key_deleted`). With GET on a
/// non-string key it fails with WRONGTYPE and changes nothing. Expiry is not
/// modelled.
pub fn set_string(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let opts: Vec<String> = argv.iter().skip(3).map(|a| lower(a)).collect();
    let has = |word: &str| opts.iter().any(|o| o == word);
    let key = arg(argv, 1)?;
    let current = m.lookup_any(call.db, key);
    let is_string = matches!(current, Some(Value::Other(t)) if t == "string");
    if has("get") && current.is_some() && !is_string {
        return Err(Fail::Command("wrongtype"));
    }
    if (has("nx") && current.is_some()) || (has("xx") && current.is_none()) {
        return Ok(());
    }
    m.delete_key(call, call.db, key)?;
    m.set_other(call.db, key, "string");
    Ok(())
}

/// MSET key value [key value ...]: replaces every key named, streams included.
pub fn mset(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    if argv.len() < 3 || argv.len().is_multiple_of(2) {
        return Err(Fail::Command("wrong_arity"));
    }
    for key in argv.iter().skip(1).step_by(2) {
        m.delete_key(call, call.db, key)?;
        m.set_other(call.db, key, "string");
    }
    Ok(())
}

/// Writes a `type_name` value: creates the key if missing, WRONGTYPE on a stream key
/// (or a key of another type).
pub fn type_writer(m: &mut Model, call: &Call, type_name: &str) -> Result<(), Fail> {
    let key = arg(&call.argv, 1)?;
    match m.lookup_any(call.db, key) {
        None => {
            m.set_other(call.db, key, type_name);
            Ok(())
        }
        Some(Value::Other(t)) if t == type_name => Ok(()),
        Some(_) => Err(Fail::Command("wrongtype")),
    }
}
