//! XCLAIM, XAUTOCLAIM, XACK: who holds a pending entry, and when it leaves the PEL.

use crate::IndexMap;

use crate::calls::{Call, Profile};
use crate::fail::{internal, overflow, Fail};
use crate::ids::{incr_id, parse_ll, parse_strict_id, StreamId, MAX_ID, ZERO_ID};
use crate::model::Model;
use crate::recorder::{parts, GroupParts, Recorder};
use crate::state::{Consumer, Group, PendingEntry, Stream};

use super::{
    any_id, arg, consumer_mut, ll, lookup_stream_in, lower, stream_in, strict_id, touch_consumer,
};

/// XCLAIM/XAUTOCLAIM: the claiming consumer, touched once per command (when the profile
/// creates it eagerly, before the first entry; else at the first entry claimed).
fn claimer<'a>(
    touched: &mut Option<&'a str>,
    consumers: &mut IndexMap<String, Consumer>,
    name: &'a str,
    now: i64,
) -> &'a str {
    if touched.is_none() {
        touch_consumer(consumers, name, now);
        *touched = Some(name);
    }
    name
}

/// The group `argv[2]` of the stream `argv[1]` must exist (else NOGROUP).
fn lookup_group(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let key = arg(&call.argv, 1)?;
    let name = arg(&call.argv, 2)?;
    match m.lookup_stream(call.db, key)? {
        Some(stream) if stream.groups.contains_key(name) => Ok(()),
        _ => Err(Fail::Command("nogroup")),
    }
}

/// A claim found the entry gone from the stream: the PEL entry is removed.
fn drop_dangling(
    hist: &mut Recorder,
    call: &Call,
    key: &str,
    group: &mut Group,
    entry_id: StreamId,
) -> Result<(), Fail> {
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    let mut nack = pel
        .remove(&entry_id)
        .ok_or_else(|| internal("KeyError: not pending"))?;
    if let Some(owner) = nack.consumer.as_ref().and_then(|c| consumers.get_mut(c)) {
        owner.pel.remove(&entry_id);
    }
    let from = nack.consumer.clone();
    hist.record(
        call,
        call.db,
        key,
        &mut rec,
        entry_id,
        "dropped",
        from.as_deref(),
        None,
        &mut nack,
        Some("deleted"),
        false,
    )
}

#[allow(clippy::too_many_arguments)]
fn claim(
    hist: &mut Recorder,
    profile: &Profile,
    call: &Call,
    key: &str,
    group: &mut Group,
    entry_id: StreamId,
    consumer: &str,
    delivery_time: i64,
    retrycount: i64,
    justid: bool,
    exists: bool,
) -> Result<(), Fail> {
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    let nack = pel
        .get_mut(&entry_id)
        .ok_or_else(|| internal("KeyError: not pending"))?;
    let previous = nack.consumer.clone();
    let moved = previous.as_deref() != Some(consumer);
    let delivery_count = if retrycount >= 0 {
        retrycount
    } else if !justid {
        nack.delivery_count
            .checked_add(1)
            .ok_or_else(|| overflow("delivery_count"))?
    } else {
        nack.delivery_count
    };
    if moved {
        if let Some(owner) = previous.as_ref().and_then(|p| consumers.get_mut(p)) {
            owner.pel.remove(&entry_id);
        }
    }
    nack.delivery_time = delivery_time;
    nack.delivery_count = delivery_count;
    if moved {
        consumer_mut(consumers, consumer)?.pel.insert(entry_id);
        nack.consumer = Some(consumer.to_string());
    }
    if profile.active_time {
        consumer_mut(consumers, consumer)?.active_time = call.now;
    }
    hist.record(
        call,
        call.db,
        key,
        &mut rec,
        entry_id,
        "claimed",
        previous.as_deref(),
        Some(consumer),
        nack,
        None,
        exists,
    )
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]
///
/// Gives pending entries to `consumer` when idle >= min-idle-time (0 or
/// negative: always). IDs are parsed until the first non-ID, the rest are
/// options; any bad option fails the whole command. An ID whose entry is gone
/// from the stream is removed from the PEL instead of claimed. FORCE creates a
/// PEL entry for an existing stream entry nobody holds. IDLE/TIME set the
/// delivery time (future or negative values become now); RETRYCOUNT sets the
/// counter, otherwise it is incremented unless JUSTID. LASTID moves the
/// group's last_id forward only.
///
/// Side effects: 7.0 creates the consumer / refreshes its seen time at the
/// first successful claim only; 7.2+ on every call, and sets its active time
/// on each successful claim.
pub fn xclaim(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    lookup_group(m, call)?;
    let minidle = i128::from(ll(arg(argv, 4)?)?.max(0));
    let mut ids: Vec<StreamId> = Vec::new();
    let mut j = 5;
    while j < argv.len() {
        match parse_strict_id(&argv[j]) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = call.now;
    let (mut force, mut justid) = (false, false);
    let mut retrycount: i64 = -1;
    let mut delivery_time: i128 = -1;
    let mut last_id = ZERO_ID;
    while j < argv.len() {
        let moreargs = argv.len() - 1 - j;
        let low = lower(&argv[j]);
        if low == "force" {
            force = true;
        } else if low == "justid" {
            justid = true;
        } else if low == "idle" && moreargs > 0 {
            j += 1;
            delivery_time = i128::from(now) - i128::from(ll(arg(argv, j)?)?);
        } else if low == "time" && moreargs > 0 {
            j += 1;
            delivery_time = i128::from(ll(arg(argv, j)?)?);
        } else if low == "retrycount" && moreargs > 0 {
            j += 1;
            retrycount = ll(arg(argv, j)?)?;
        } else if low == "lastid" && moreargs > 0 {
            j += 1;
            last_id = strict_id(arg(argv, j)?)?;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
        j += 1;
    }
    let profile = m.profile;
    let stream = stream_in(m.keys, call.db, key)?;
    let Stream {
        entries, groups, ..
    } = stream;
    let group = groups
        .get_mut(arg(argv, 2)?)
        .ok_or_else(|| internal("KeyError: the group vanished"))?;
    if last_id > group.last_id {
        group.last_id = last_id;
    }
    let delivery_time: i64 =
        if delivery_time == -1 || delivery_time < 0 || delivery_time > i128::from(now) {
            now
        } else {
            delivery_time as i64 // within 0..=now
        };
    let consumer_name = arg(argv, 3)?;
    let mut consumer: Option<&str> = None;
    if profile.eager_consumers {
        claimer(&mut consumer, &mut group.consumers, consumer_name, now);
    }
    for entry_id in ids {
        let pending = group.pel.contains_key(&entry_id);
        if !entries.contains(&entry_id) {
            if pending {
                drop_dangling(&mut m.hist, call, key, group, entry_id)?;
            }
            continue;
        }
        if force && !pending {
            group.pel.insert(entry_id, PendingEntry::new(None, now, 1));
        }
        let Some(nack) = group.pel.get(&entry_id) else {
            continue;
        };
        if nack.consumer.is_some()
            && minidle != 0
            && i128::from(now) - i128::from(nack.delivery_time) < minidle
        {
            continue;
        }
        let claimer = claimer(&mut consumer, &mut group.consumers, consumer_name, now);
        claim(
            &mut m.hist,
            profile,
            call,
            key,
            group,
            entry_id,
            claimer,
            delivery_time,
            retrycount,
            justid,
            true,
        )?;
    }
    Ok(())
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]
///
/// Scans the group PEL in ID order from `start` (`(id` excludes it),
/// examining at most COUNT*10 entries (COUNT defaults to 100) and claiming up
/// to COUNT of those idle >= min-idle-time: delivery time becomes now and the
/// counter is incremented unless JUSTID. Entries gone from the stream are
/// removed from the PEL and count against COUNT. The reply's cursor is the
/// next PEL ID after the scan, 0-0 at the end.
///
/// Side effects: as XCLAIM (7.0: consumer at the first claim; 7.2+: always).
pub fn xautoclaim(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    let minidle = i128::from(ll(arg(argv, 4)?)?.max(0));
    let start_text = arg(argv, 5)?;
    let start = match start_text.strip_prefix('(') {
        Some(rest) if !rest.is_empty() => {
            incr_id(strict_id(rest)?).ok_or(Fail::Command("invalid_id"))?
        }
        _ => any_id(start_text)?,
    };
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    let max_count = i64::MAX / 16;
    while j < argv.len() {
        let moreargs = argv.len() - 1 - j;
        let low = lower(&argv[j]);
        if low == "count" && moreargs > 0 {
            match parse_ll(arg(argv, j + 1)?) {
                Some(value) if (1..=max_count).contains(&value) => count = value,
                _ => return Err(Fail::Command("out_of_range")),
            }
            j += 1;
        } else if low == "justid" {
            justid = true;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
        j += 1;
    }
    lookup_group(m, call)?;
    let profile = m.profile;
    let now = call.now;
    let stream = stream_in(m.keys, call.db, key)?;
    let Stream {
        entries, groups, ..
    } = stream;
    let group = groups
        .get_mut(arg(argv, 2)?)
        .ok_or_else(|| internal("KeyError: the group vanished"))?;
    let consumer_name = arg(argv, 3)?;
    let mut consumer: Option<&str> = None;
    if profile.eager_consumers {
        claimer(&mut consumer, &mut group.consumers, consumer_name, now);
    }
    let mut attempts = count * 10;
    let mut position = start;
    let mut last_examined: Option<StreamId> = None;
    while attempts != 0 && count != 0 {
        attempts -= 1;
        let Some((&entry_id, nack)) = group.pel.range(position..).next() else {
            break;
        };
        let delivery_time = nack.delivery_time;
        last_examined = Some(entry_id);
        position = incr_id(entry_id).unwrap_or(MAX_ID);
        if !entries.contains(&entry_id) {
            drop_dangling(&mut m.hist, call, key, group, entry_id)?;
            count -= 1;
            continue;
        }
        if minidle != 0 && i128::from(now) - i128::from(delivery_time) < minidle {
            continue;
        }
        let claimer = claimer(&mut consumer, &mut group.consumers, consumer_name, now);
        claim(
            &mut m.hist,
            profile,
            call,
            key,
            group,
            entry_id,
            claimer,
            now,
            -1,
            justid,
            true,
        )?;
        count -= 1;
    }
    let mut cursor = ZERO_ID;
    if matches!(last_examined, Some(id) if id != MAX_ID) {
        cursor = group
            .pel
            .range(position..)
            .next()
            .map(|(id, _)| *id)
            .unwrap_or(ZERO_ID);
    }
    call.result.set(Some(cursor));
    Ok(())
}

/// XACK key group id [id ...]
///
/// Removes the given IDs from the group PEL (and their owners' PELs); unknown
/// IDs are ignored. A missing key or group acknowledges nothing without error;
/// otherwise one malformed ID fails the whole command.
pub fn xack(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    let name = arg(argv, 2)?;
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Ok(());
    };
    let Some(group) = stream.groups.get_mut(name) else {
        return Ok(());
    };
    let ids = argv
        .get(3..)
        .unwrap_or_default()
        .iter()
        .map(|a| strict_id(a))
        .collect::<Result<Vec<_>, _>>()?;
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    for entry_id in ids {
        let Some(mut nack) = pel.remove(&entry_id) else {
            continue;
        };
        if let Some(owner) = nack.consumer.as_ref().and_then(|c| consumers.get_mut(c)) {
            owner.pel.remove(&entry_id);
        }
        let from = nack.consumer.clone();
        m.hist.record(
            call,
            call.db,
            key,
            &mut rec,
            entry_id,
            "acked",
            from.as_deref(),
            None,
            &mut nack,
            Some("acked"),
            false,
        )?;
    }
    Ok(())
}
