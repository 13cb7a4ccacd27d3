//! XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER) and XSETID.

use crate::calls::Call;
use crate::fail::{internal, Fail};
use crate::ids::ZERO_ID;
use crate::model::Model;
use crate::state::{Consumer, Group, INVALID_ENTRIES_READ};

use super::{any_id, arg, ll, lower, stream_in, strict_id};

/// XGROUP's subcommands with their arity (n exact, -n at least n).
fn xgroup_arity(sub: &str) -> Option<i64> {
    match sub {
        "create" | "setid" => Some(-5),
        "destroy" => Some(4),
        "createconsumer" | "delconsumer" => Some(5),
        _ => None,
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
/// XGROUP SETID key group id|$ [ENTRIESREAD n]
/// XGROUP DESTROY key group
/// XGROUP CREATECONSUMER key group consumer
/// XGROUP DELCONSUMER key group consumer
///
/// CREATE adds a group whose last_id is the given ID (`$`: the stream's
/// last_id) and whose entries_read is ENTRIESREAD or unknown; MKSTREAM creates
/// an empty stream when the key is missing. SETID moves last_id anywhere
/// (backwards too) and resets entries_read to ENTRIESREAD or unknown; the PEL
/// is untouched. DESTROY drops the group and its PEL. CREATECONSUMER adds an
/// idle consumer (seen time now). DELCONSUMER removes a consumer with all the
/// entries it holds.
pub fn xgroup(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let argc = argv.len();
    let sub = lower(arg(argv, 1)?);
    if sub == "help" {
        return Ok(());
    }
    let arity = xgroup_arity(&sub).ok_or(Fail::Command("unknown_subcommand"))?;
    let argc_i = argc as i64;
    if (arity > 0 && argc_i != arity) || (arity < 0 && argc_i < -arity) {
        return Err(Fail::Command("wrong_arity"));
    }
    let key = arg(argv, 2)?;
    let group_name = arg(argv, 3)?;
    let mut mkstream = false;
    let mut entries_read = INVALID_ENTRIES_READ;
    let mut i = 5;
    while i < argc {
        let low = lower(&argv[i]);
        if sub == "create" && low == "mkstream" {
            mkstream = true;
            i += 1;
        } else if (sub == "create" || sub == "setid") && low == "entriesread" && i + 1 < argc {
            entries_read = ll(&argv[i + 1])?;
            if entries_read < 0 && entries_read != INVALID_ENTRIES_READ {
                return Err(Fail::Command("out_of_range"));
            }
            i += 2;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    let (db, now) = (call.db, call.now);
    let stream_last = m.lookup_stream(db, key)?.map(|s| s.last_id);
    let mut group_exists = false;
    if !mkstream {
        let Some(stream) = m.lookup_stream(db, key)? else {
            return Err(Fail::Command("no_such_key"));
        };
        group_exists = stream.groups.contains_key(group_name);
        if !group_exists && matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Err(Fail::Command("nogroup"));
        }
    }
    if sub == "create" {
        if argc > 8 {
            return Err(Fail::Command("syntax_error"));
        }
        let start = if arg(argv, 4)? == "$" {
            stream_last.unwrap_or(ZERO_ID)
        } else {
            strict_id(arg(argv, 4)?)?
        };
        if stream_last.is_none() {
            m.create_stream(db, key);
        }
        let stream = m.stream_mut(db, key)?;
        if stream.groups.contains_key(group_name) {
            return Err(Fail::Command("busygroup"));
        }
        stream.groups.insert(
            group_name.to_string(),
            Group::new(group_name, start, entries_read, call.seq),
        );
        return Ok(());
    }
    let stream = stream_in(m.keys, db, key)?;
    match sub.as_str() {
        "setid" => {
            if argc != 5 && argc != 7 {
                return Err(Fail::Command("syntax_error"));
            }
            let new_last = if arg(argv, 4)? == "$" {
                stream.last_id
            } else {
                any_id(arg(argv, 4)?)?
            };
            let group = stream
                .groups
                .get_mut(group_name)
                .ok_or_else(|| internal("AssertionError: no group"))?;
            group.last_id = new_last;
            group.entries_read = entries_read;
        }
        "destroy" => {
            if group_exists {
                if let Some(mut group) = stream.groups.shift_remove(group_name) {
                    m.hist
                        .close_group(call, db, key, &mut group, "group_destroyed")?;
                }
                m.waits.signal(db, key);
            }
        }
        "createconsumer" => {
            let group = stream
                .groups
                .get_mut(group_name)
                .ok_or_else(|| internal("AssertionError: no group"))?;
            let name = arg(argv, 4)?;
            if !group.consumers.contains_key(name) {
                group
                    .consumers
                    .insert(name.to_string(), Consumer::new(name, now));
            }
        }
        _ => {
            // delconsumer
            let group = stream
                .groups
                .get_mut(group_name)
                .ok_or_else(|| internal("AssertionError: no group"))?;
            let mut g = m.hist.open(call, key, group);
            if let Some(consumer) = g.consumers.shift_remove(arg(argv, 4)?) {
                for entry_id in consumer.pel.iter().copied() {
                    let mut nack = g
                        .pel
                        .remove(&entry_id)
                        .ok_or_else(|| internal("KeyError: a consumer's entry is not pending"))?;
                    g.log
                        .left(entry_id, "consumer_deleted", "consumer_deleted", &mut nack);
                }
            }
        }
    }
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
///
/// Sets the stream's last generated ID (not below its last entry), and
/// optionally `entries_added` (not below the length) and
/// `max_deleted_entry_id` (not above the new last ID). A missing key is an
/// error. 7.2+ also refuses a last ID below the current max deleted ID.
pub fn xsetid(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let new_last = strict_id(arg(argv, 2)?)?;
    let mut entries_added: i64 = -1;
    let mut max_deleted = ZERO_ID;
    let mut i = 3;
    while i < argv.len() {
        let moreargs = argv.len() - 1 - i;
        let low = lower(&argv[i]);
        if low == "entriesadded" && moreargs > 0 {
            entries_added = ll(arg(argv, i + 1)?)?;
            if entries_added < 0 {
                return Err(Fail::Command("out_of_range"));
            }
            i += 2;
        } else if low == "maxdeletedid" && moreargs > 0 {
            max_deleted = strict_id(arg(argv, i + 1)?)?;
            if new_last < max_deleted {
                return Err(Fail::Command("id_too_small"));
            }
            i += 2;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    let checks_max_deleted = m.profile.xsetid_checks_max_deleted;
    let Some(stream) = m.lookup_stream(call.db, arg(argv, 1)?)? else {
        return Err(Fail::Command("no_such_key"));
    };
    if checks_max_deleted && new_last < stream.max_deleted_entry_id {
        return Err(Fail::Command("id_too_small"));
    }
    if let Some(last) = stream.entries.last() {
        if new_last < *last {
            return Err(Fail::Command("id_too_small"));
        }
        if entries_added != -1 && stream.length() as i128 > i128::from(entries_added) {
            return Err(Fail::Command("out_of_range"));
        }
    }
    stream.last_id = new_last;
    if entries_added != -1 {
        stream.entries_added = entries_added;
    }
    if max_deleted != ZERO_ID {
        stream.max_deleted_entry_id = max_deleted;
    }
    Ok(())
}
