//! XADD, XTRIM, XDEL: the entries of a stream.

use crate::calls::Call;
use crate::fail::{overflow, Fail};
use crate::ids::{incr_id, parse_id, StreamId, MAX_ID, U64_MAX, ZERO_ID};
use crate::model::Model;
use crate::nodes::{append_entry, delete_entry, refresh_first_id};
use crate::trim::{trim, Strategy, TrimArgs};

use super::{arg, ll, lookup_stream_in, lower, stream_in, strict_id, strict_ids};

/// Options of XADD/XTRIM in server order; returns the ID position (XADD) and the options.
fn parse_add_or_trim(argv: &[String], xadd: bool) -> Result<(usize, TrimArgs), Fail> {
    let mut args = TrimArgs::default();
    let mut limit_given = false;
    let mut i = 2;
    let argc = argv.len();
    while i < argc {
        let moreargs = argc - 1 - i;
        let opt = arg(argv, i)?;
        let low = lower(opt);
        if xadd && opt == "*" {
            break;
        }
        if (low == "maxlen" || low == "minid") && moreargs > 0 {
            if args.strategy.is_some() {
                return Err(Fail::Command("syntax_error"));
            }
            args.approx = false;
            let nxt = arg(argv, i + 1)?;
            if moreargs >= 2 && nxt == "~" {
                args.approx = true;
                i += 1;
            } else if moreargs >= 2 && nxt == "=" {
                i += 1;
            }
            if low == "maxlen" {
                args.maxlen = ll(arg(argv, i + 1)?)?;
                if args.maxlen < 0 {
                    return Err(Fail::Command("out_of_range"));
                }
                args.strategy = Some(Strategy::MaxLen);
            } else {
                args.minid = strict_id(arg(argv, i + 1)?)?;
                args.strategy = Some(Strategy::MinId);
            }
            i += 2;
            continue;
        }
        if low == "limit" && moreargs > 0 {
            args.limit = ll(arg(argv, i + 1)?)?;
            if args.limit < 0 {
                return Err(Fail::Command("out_of_range"));
            }
            limit_given = true;
            i += 2;
            continue;
        }
        if xadd && low == "nomkstream" {
            args.no_mkstream = true;
            i += 1;
            continue;
        }
        if xadd {
            let (given, seq_given) = parse_id(opt, 0, true, true)?;
            args.given_id = given;
            args.seq_given = seq_given;
            args.id_given = true;
            break;
        }
        return Err(Fail::Command("syntax_error"));
    }
    if args.limit != 0 && args.strategy.is_none() {
        return Err(Fail::Command("syntax_error"));
    }
    if !xadd && args.strategy.is_none() {
        return Err(Fail::Command("syntax_error"));
    }
    if limit_given && !args.approx {
        return Err(Fail::Command("syntax_error"));
    }
    Ok((i, args))
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] <*|id|ms-*> field value ...
///
/// Appends an entry. `*` takes max(now, last_id.ms) with the next sequence;
/// `ms-*` picks the sequence; an explicit ID must exceed the stream's
/// last_id and may not be 0-0. Creates the key unless NOMKSTREAM. Counts
/// `entries_added`; records the first entry ID when the stream was empty.
/// Trimming then removes entries from the head; their PEL entries stay
/// dangling. Groups are untouched.
pub fn xadd(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let (idpos, args) = parse_add_or_trim(argv, true)?;
    let field_pos = idpos + 1;
    let nfields = argv.len() as i128 - field_pos as i128;
    if nfields < 2 || nfields % 2 == 1 {
        return Err(Fail::Command("wrong_arity"));
    }
    if args.id_given && args.seq_given && args.given_id == ZERO_ID {
        return Err(Fail::Command("id_zero"));
    }
    let key = arg(argv, 1)?;
    let (db, now) = (call.db, call.now);
    if m.lookup_stream(db, key)?.is_none() {
        if args.no_mkstream {
            return Ok(());
        }
        m.create_stream(db, key);
    }
    let (node_max_entries, node_max_bytes) = (m.node_max_entries, m.node_max_bytes);
    let stream = stream_in(m.keys, db, key)?;
    let last = stream.last_id;
    if last == MAX_ID {
        return Err(Fail::Command("stream_exhausted"));
    }
    let new_id = if args.id_given {
        if args.seq_given {
            args.given_id
        } else if last.ms == args.given_id.ms {
            if last.seq == U64_MAX {
                return Err(Fail::Command("id_too_small"));
            }
            StreamId::new(last.ms, last.seq + 1)
        } else {
            StreamId::new(args.given_id.ms, 0)
        }
    } else if i128::from(now) > i128::from(last.ms) {
        StreamId::new(now as u64, 0)
    } else {
        incr_id(last).unwrap_or(ZERO_ID)
    };
    if new_id <= last {
        return Err(Fail::Command("id_too_small"));
    }
    let entries_added = stream
        .entries_added
        .checked_add(1)
        .ok_or_else(|| overflow("entries_added"))?;
    let rest = argv.get(field_pos..).unwrap_or_default();
    let fields: Vec<&str> = rest.iter().step_by(2).map(String::as_str).collect();
    let values: Vec<&str> = rest.iter().skip(1).step_by(2).map(String::as_str).collect();
    append_entry(
        node_max_entries,
        node_max_bytes,
        stream,
        new_id,
        &fields,
        &values,
    )?;
    if !stream.groups.is_empty() {
        // an ID deleted while pending can come back (XSETID below it, then XADD)
        m.hist.entries_changed(call, key, stream, &[new_id]);
    }
    stream.last_id = new_id;
    stream.entries_added = entries_added;
    if stream.length() == 1 {
        stream.first_id = new_id;
    }
    call.result.set(Some(new_id));
    m.waits.signal(db, key);
    if args.strategy.is_some() {
        let stream = stream_in(m.keys, db, key)?;
        trim(&mut m.hist, node_max_entries, call, key, stream, &args)?;
    }
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT n]
///
/// Removes entries from the head of the stream. A missing key is not an
/// error. Trimming does not move `max_deleted_entry_id`; PEL entries of
/// trimmed IDs stay pending (dangling) until a claim or ack touches them.
pub fn xtrim(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let (_, args) = parse_add_or_trim(&call.argv, false)?;
    let key = arg(&call.argv, 1)?;
    let node_max_entries = m.node_max_entries;
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Ok(());
    };
    trim(&mut m.hist, node_max_entries, call, key, stream, &args)
}

/// XDEL key id [id ...]
///
/// Deletes entries by ID (all IDs are parsed first: one bad ID fails the whole
/// command). Raises `max_deleted_entry_id` to the largest deleted ID and
/// updates the recorded first entry. PEL entries of deleted IDs stay dangling.
pub fn xdel(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Ok(());
    };
    let ids = strict_ids(argv, 2)?;
    let mut deleted = 0;
    let mut first_entry = false;
    let mut removed: Vec<StreamId> = Vec::new();
    for entry_id in ids {
        if stream.entries.contains(&entry_id) {
            delete_entry(stream, entry_id)?;
            removed.push(entry_id);
            if entry_id == stream.first_id {
                first_entry = true;
            }
            if entry_id > stream.max_deleted_entry_id {
                stream.max_deleted_entry_id = entry_id;
            }
            deleted += 1;
        }
    }
    if deleted != 0 && (stream.length() == 0 || first_entry) {
        refresh_first_id(stream);
    }
    if !removed.is_empty() && !stream.groups.is_empty() {
        m.hist.entries_changed(call, key, stream, &removed);
    }
    Ok(())
}
