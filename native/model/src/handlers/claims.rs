//! XCLAIM, XAUTOCLAIM, XACK: who holds a pending entry, and when it leaves the PEL.

use crate::IndexMap;

use crate::calls::{Call, Profile};
use crate::fail::{internal, overflow, Fail};
use crate::ids::{incr_id, parse_ll, parse_strict_id, StreamId, MAX_ID, ZERO_ID};
use crate::model::Model;
use crate::recorder::{GroupParts, Recorder};
use crate::state::{Consumer, Entries, Group, Keys, PendingEntry};

use super::{
    any_id, arg, consumer_mut, group_of, ll, lookup_stream_in, stream_in, strict_id, strict_ids,
    touch_consumer, vanished, Options,
};

/// The group `argv[2]` of the stream `argv[1]` must exist (else NOGROUP).
fn lookup_group(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let key = arg(&call.argv, 1)?;
    let name = arg(&call.argv, 2)?;
    match m.lookup_stream(call.db, key)? {
        Some(stream) if stream.groups.contains_key(name) => Ok(()),
        _ => Err(Fail::Command("nogroup")),
    }
}

/// The pending entry `entry_id` leaves the group's PEL and its holder's, with `status`
/// (`change` in `ownership_changes`); false when it was not pending.
fn release(g: &mut GroupParts, entry_id: StreamId, change: &str, status: &str) -> bool {
    let Some(mut nack) = g.pel.remove(&entry_id) else {
        return false;
    };
    if let Some(owner) = nack.consumer.as_ref().and_then(|c| g.consumers.get_mut(c)) {
        owner.pel.remove(&entry_id);
    }
    g.log.left(entry_id, change, status, &mut nack);
    true
}

/// A claim found the entry gone from the stream: the PEL entry is removed.
fn drop_dangling(g: &mut GroupParts, entry_id: StreamId) -> Result<(), Fail> {
    match release(g, entry_id, "dropped", "deleted") {
        true => Ok(()),
        false => Err(internal("KeyError: not pending")),
    }
}

/// What one XCLAIM/XAUTOCLAIM gives the entries it claims: the claiming consumer
/// (touched once per command: when the profile creates it eagerly, before the first
/// entry; else at the first entry claimed), the delivery time, RETRYCOUNT (-1: none)
/// and JUSTID.
struct Claimer<'c> {
    consumer: &'c str,
    touched: bool,
    profile: &'c Profile,
    delivery_time: i64,
    retrycount: i64,
    justid: bool,
}

impl<'c> Claimer<'c> {
    fn new(
        call: &'c Call,
        profile: &'c Profile,
        delivery_time: i64,
        retrycount: i64,
        justid: bool,
    ) -> Result<Self, Fail> {
        Ok(Claimer {
            consumer: arg(&call.argv, 3)?,
            touched: false,
            profile,
            delivery_time,
            retrycount,
            justid,
        })
    }

    fn touch(&mut self, consumers: &mut IndexMap<String, Consumer>, now: i64) {
        if !self.touched {
            touch_consumer(consumers, self.consumer, now);
            self.touched = true;
        }
    }

    /// The stream's entries and the group `argv[2]` (`lookup_group` found them), the
    /// consumer touched first when the profile creates consumers eagerly.
    fn group_in<'k>(
        &mut self,
        keys: &'k mut Keys,
        call: &Call,
    ) -> Result<(&'k Entries, &'k mut Group), Fail> {
        let stream = stream_in(keys, call.db, arg(&call.argv, 1)?)?;
        let (entries, group) = group_of(stream, arg(&call.argv, 2)?).ok_or_else(vanished)?;
        if self.profile.eager_consumers {
            self.touch(&mut group.consumers, call.now);
        }
        Ok((entries, group))
    }

    /// Claim the pending entry `entry_id` (in the stream).
    fn claim(
        &mut self,
        hist: &mut Recorder,
        call: &Call,
        key: &str,
        group: &mut Group,
        entry_id: StreamId,
    ) -> Result<(), Fail> {
        self.touch(&mut group.consumers, call.now);
        let consumer = self.consumer;
        let mut g = hist.open(call, key, group);
        let nack = g
            .pel
            .get_mut(&entry_id)
            .ok_or_else(|| internal("KeyError: not pending"))?;
        let previous = nack.consumer.clone();
        let moved = previous.as_deref() != Some(consumer);
        let delivery_count = if self.retrycount >= 0 {
            self.retrycount
        } else if !self.justid {
            nack.delivery_count
                .checked_add(1)
                .ok_or_else(|| overflow("delivery_count"))?
        } else {
            nack.delivery_count
        };
        if moved {
            if let Some(owner) = previous.as_ref().and_then(|p| g.consumers.get_mut(p)) {
                owner.pel.remove(&entry_id);
            }
        }
        nack.delivery_time = self.delivery_time;
        nack.delivery_count = delivery_count;
        if moved {
            consumer_mut(g.consumers, consumer)?.pel.insert(entry_id);
            nack.consumer = Some(consumer.to_string());
        }
        if self.profile.active_time {
            consumer_mut(g.consumers, consumer)?.active_time = call.now;
        }
        g.log
            .delivered(entry_id, "claimed", previous.as_deref(), consumer, nack);
        Ok(())
    }
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
    let mut options = Options::new(argv, j);
    while let Some((low, moreargs)) = options.next_option() {
        if low == "force" {
            force = true;
        } else if low == "justid" {
            justid = true;
        } else if low == "idle" && moreargs > 0 {
            delivery_time = i128::from(now) - i128::from(ll(options.value()?)?);
        } else if low == "time" && moreargs > 0 {
            delivery_time = i128::from(ll(options.value()?)?);
        } else if low == "retrycount" && moreargs > 0 {
            retrycount = ll(options.value()?)?;
        } else if low == "lastid" && moreargs > 0 {
            last_id = strict_id(options.value()?)?;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    let delivery_time: i64 =
        if delivery_time == -1 || delivery_time < 0 || delivery_time > i128::from(now) {
            now
        } else {
            delivery_time as i64 // within 0..=now
        };
    let mut claimer = Claimer::new(call, m.profile, delivery_time, retrycount, justid)?;
    let (entries, group) = claimer.group_in(m.keys, call)?;
    if last_id > group.last_id {
        group.last_id = last_id;
    }
    for entry_id in ids {
        let pending = group.pel.contains_key(&entry_id);
        if !entries.contains(&entry_id) {
            if pending {
                drop_dangling(&mut m.hist.open(call, key, group), entry_id)?;
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
        claimer.claim(&mut m.hist, call, key, group, entry_id)?;
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
    let max_count = i64::MAX / 16;
    let mut options = Options::new(argv, 6);
    while let Some((low, moreargs)) = options.next_option() {
        if low == "count" && moreargs > 0 {
            match parse_ll(options.value()?) {
                Some(value) if (1..=max_count).contains(&value) => count = value,
                _ => return Err(Fail::Command("out_of_range")),
            }
        } else if low == "justid" {
            justid = true;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    lookup_group(m, call)?;
    let now = call.now;
    let mut claimer = Claimer::new(call, m.profile, now, -1, justid)?;
    let (entries, group) = claimer.group_in(m.keys, call)?;
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
            drop_dangling(&mut m.hist.open(call, key, group), entry_id)?;
            count -= 1;
            continue;
        }
        if minidle != 0 && i128::from(now) - i128::from(delivery_time) < minidle {
            continue;
        }
        claimer.claim(&mut m.hist, call, key, group, entry_id)?;
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
    let ids = strict_ids(argv, 3)?;
    let mut g = m.hist.open(call, key, group);
    for entry_id in ids {
        release(&mut g, entry_id, "acked", "acked");
    }
    Ok(())
}
