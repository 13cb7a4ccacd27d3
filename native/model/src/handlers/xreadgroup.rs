//! XREADGROUP, and the readers it blocks: served after a later write to one of their
//! keys (`serve_ready`).

use std::collections::btree_map::Entry;

use crate::calls::{BlockedRead, Call, Profile};
use crate::fail::{internal, overflow, Fail};
use crate::ids::{incr_id, parse_ll, StreamId, MAX_ID, ZERO_ID};
use crate::lag::{count_read, StreamStats};
use crate::model::Model;
use crate::recorder::Recorder;
use crate::state::{Entries, Group, KeyRef, PendingEntry, Stream, Value};
use crate::units::LUA_CLIENT;

use super::{consumer_mut, group_of, ll, stream_in, strict_id, touch_consumer, vanished, Options};

/// 7.0 serves a blocked reader without COUNT this many entries
pub const BLOCKED_DEFAULT_COUNT: i64 = 1000;

/// What a read serves: the reading consumer, COUNT (0: all) and NOACK.
struct Read<'r> {
    consumer: &'r str,
    count: i64,
    noack: bool,
}

/// A stream split for a read of one of its groups: the counters the lag estimates read,
/// the entries and the group.
struct Target<'s> {
    stats: StreamStats,
    entries: &'s Entries,
    group: &'s mut Group,
}

impl<'s> Target<'s> {
    /// The group `name` of `stream` (None: no such group).
    fn of(stream: &'s mut Stream, name: &str) -> Option<Self> {
        let stats = StreamStats::of(stream);
        let (entries, group) = group_of(stream, name)?;
        Some(Target {
            stats,
            entries,
            group,
        })
    }
}

/// Deliver entries after the group's last_id (a `>` read).
fn serve_new(
    hist: &mut Recorder,
    profile: &Profile,
    call: &Call,
    key: &str,
    target: Target,
    read: &Read,
) -> Result<(), Fail> {
    let now = call.now;
    let Target {
        stats,
        entries,
        group,
    } = target;
    let consumer = read.consumer;
    let mut g = hist.open(call, key, group);
    let start = incr_id(*g.last_id).unwrap_or(ZERO_ID);
    let mut delivered: i64 = 0;
    let mut reader: Option<usize> = None;
    for &entry_id in entries.iter_from(start) {
        delivered += 1;
        if entry_id > *g.last_id {
            count_read(
                &stats,
                *g.last_id,
                g.entries_read,
                entry_id,
                profile.strict_lag,
            )?;
            *g.last_id = entry_id;
        }
        if !read.noack {
            let (change, previous, nack) = match g.pel.entry(entry_id) {
                Entry::Vacant(slot) => {
                    let nack = PendingEntry::new(Some(consumer.to_string()), now, 1);
                    ("delivered", None, slot.insert(nack))
                }
                Entry::Occupied(slot) => {
                    let nack = slot.into_mut();
                    let previous = nack.consumer.take();
                    if let Some(owner) = previous.as_ref().and_then(|p| g.consumers.get_mut(p)) {
                        owner.pel.remove(&entry_id);
                    }
                    nack.consumer = Some(consumer.to_string());
                    nack.delivery_time = now;
                    nack.delivery_count = 1;
                    ("reassigned", previous, nack)
                }
            };
            // the reader's place in the map, found once: the loop adds and removes no
            // consumer, so it stays where it is
            let at = match reader {
                Some(at) => at,
                None => {
                    let at = g
                        .consumers
                        .get_index_of(consumer)
                        .ok_or_else(|| internal("KeyError: the consumer vanished"))?;
                    reader = Some(at);
                    at
                }
            };
            let (_, reader_state) = g
                .consumers
                .get_index_mut(at)
                .ok_or_else(|| internal("KeyError: the consumer vanished"))?;
            reader_state.pel.insert(entry_id);
            if profile.active_time {
                reader_state.active_time = now;
            }
            g.log
                .delivered(entry_id, change, previous.as_deref(), consumer, nack);
        }
        if read.count != 0 && delivered == read.count {
            break;
        }
    }
    Ok(())
}

/// Re-deliver the consumer's own pending entries from `start` (a history read).
fn serve_history(
    hist: &mut Recorder,
    call: &Call,
    key: &str,
    target: Target,
    read: &Read,
    start: StreamId,
) -> Result<(), Fail> {
    let consumer = read.consumer;
    let mut g = hist.open(call, key, target.group);
    let owned = &consumer_mut(g.consumers, consumer)?.pel;
    let limit = if read.count > 0 {
        read.count as usize
    } else {
        usize::MAX
    };
    let ids: Vec<StreamId> = owned.range(start..).take(limit).copied().collect();
    for entry_id in ids {
        if target.entries.contains(&entry_id) {
            let nack = g
                .pel
                .get_mut(&entry_id)
                .ok_or_else(|| internal("KeyError: a consumer's entry is not pending"))?;
            let delivery_count = nack
                .delivery_count
                .checked_add(1)
                .ok_or_else(|| overflow("delivery_count"))?;
            nack.delivery_time = call.now;
            nack.delivery_count = delivery_count;
            g.log
                .delivered(entry_id, "redelivered", Some(consumer), consumer, nack);
        }
    }
    Ok(())
}

/// XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key [key ...] id [id ...]
///
/// For each stream: with `>`, delivers entries after the group's last_id
/// (COUNT limits; 0 or negative means all), advancing last_id and
/// entries_read and creating PEL entries (count 1, time now) owned by the
/// reader; an ID already pending is reassigned to the reader with its count
/// reset to 1. NOACK delivers without PEL entries. With any other ID, re-reads
/// the reader's own pending entries after that ID: each one still in the
/// stream gets count+1 and time now; deleted ones stay pending untouched.
/// Every key must exist with the group, or the command fails as a whole.
///
/// Side effects: 7.0 creates the consumer and refreshes its seen time only on
/// a stream that is served (a history read, or a `>` read with entries after
/// last_id); 7.2+ does so on every call, and sets active time on `>`
/// deliveries that create PEL entries.
///
/// With BLOCK, a call that serves nothing blocks its client until a later write
/// to one of its keys serves it (see `Replayer` and `Waits::block`), its timeout
/// passes (`BLOCK 0`: never) or the client sends something else; inside an
/// execution unit (MULTI, a script) it never blocks. A script may not name BLOCK at
/// all on 7.0 and 7.2 (an error); 7.4 and Valkey accept it.
pub fn xreadgroup(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let argc = argv.len();
    let mut group_name: Option<&str> = None;
    let mut consumer_name: &str = "";
    let mut count: i64 = 0;
    let mut noack = false;
    let mut block_ms: Option<i64> = None;
    let mut streams_arg = 0usize;
    let mut options = Options::new(argv, 1);
    while let Some((low, moreargs)) = options.next_option() {
        if low == "block" && moreargs > 0 {
            if call.client.as_deref() == Some(LUA_CLIENT) && !m.profile.script_block {
                return Err(Fail::Command("block_in_script"));
            }
            let timeout = parse_ll(options.value()?).ok_or(Fail::Command("not_an_integer"))?;
            if timeout < 0 {
                return Err(Fail::Command("out_of_range"));
            }
            block_ms = Some(timeout);
        } else if low == "count" && moreargs > 0 {
            count = ll(options.value()?)?.max(0);
        } else if low == "streams" && moreargs > 0 {
            streams_arg = options.at;
            if !(argc - streams_arg).is_multiple_of(2) {
                return Err(Fail::Command("syntax_error"));
            }
            break;
        } else if low == "group" && moreargs >= 2 {
            group_name = Some(options.value()?);
            consumer_name = options.value()?;
        } else if low == "noack" {
            noack = true;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    let Some(group_name) = group_name.filter(|_| streams_arg != 0) else {
        return Err(Fail::Command("syntax_error"));
    };
    let nstreams = (argc - streams_arg) / 2;
    let keys = &argv[streams_arg..streams_arg + nstreams];
    let ids = &argv[streams_arg + nstreams..];
    let mut targets: Vec<(&str, Option<StreamId>)> = Vec::with_capacity(nstreams);
    for (key, id_text) in keys.iter().zip(ids) {
        let found = match m.lookup_stream(call.db, key)? {
            Some(stream) => stream.groups.contains_key(group_name),
            None => false,
        };
        if !found {
            return Err(Fail::Command("nogroup"));
        }
        if id_text == "$" || (id_text == "+" && m.profile.name != "7.0") {
            return Err(Fail::Command("syntax_error"));
        }
        if id_text == ">" {
            targets.push((key, None));
        } else {
            let given = strict_id(id_text)?;
            targets.push((key, if given == MAX_ID { None } else { Some(given) }));
        }
    }
    let profile = m.profile;
    let now = call.now;
    let read = Read {
        consumer: consumer_name,
        count,
        noack,
    };
    let mut served = false;
    for (key, gt) in targets {
        let eager = profile.eager_consumers;
        let stream = stream_in(m.keys, call.db, key)?;
        let target = Target::of(stream, group_name).ok_or_else(vanished)?;
        if let Some(gt) = gt {
            touch_consumer(&mut target.group.consumers, consumer_name, now);
            let start = incr_id(gt).unwrap_or(ZERO_ID);
            serve_history(&mut m.hist, call, key, target, &read, start)?;
            served = true;
            continue;
        }
        let serve = matches!(target.entries.last(), Some(last) if *last > target.group.last_id);
        if eager || serve {
            touch_consumer(&mut target.group.consumers, consumer_name, now);
            if serve {
                serve_new(&mut m.hist, profile, call, key, target, &read)?;
                served = true;
            }
        }
    }
    if !served {
        if let Some(block_ms) = block_ms {
            if !m.waits.in_transaction(call.client.as_deref()) {
                m.waits.block(
                    call,
                    keys,
                    group_name,
                    consumer_name,
                    count,
                    noack,
                    block_ms,
                );
            }
        }
    }
    Ok(())
}

/// Redis 7.0 serving a reader blocked on `key` after the key was signalled.
///
/// Returns true when the reader is unblocked: served (entries after the group's
/// last_id; COUNT or 1000 of them; consumer created or its seen time refreshed
/// now), or ended because the key is gone, is no stream, or lost the group.
pub fn serve_blocked_7_0(
    m: &mut Model,
    call: &Call,
    key: &str,
    blocked: &BlockedRead,
) -> Result<bool, Fail> {
    let profile = m.profile;
    let Some(Value::Stream(stream)) = m.keys.get_mut(&KeyRef(call.db, key)) else {
        return Ok(true);
    };
    let last_id = stream.last_id;
    let Some(target) = Target::of(stream, &blocked.group) else {
        return Ok(true);
    };
    if last_id <= target.group.last_id {
        return Ok(false);
    }
    touch_consumer(&mut target.group.consumers, &blocked.consumer, call.now);
    let read = Read {
        consumer: &blocked.consumer,
        count: if blocked.count != 0 {
            blocked.count
        } else {
            BLOCKED_DEFAULT_COUNT
        },
        noack: blocked.noack,
    };
    serve_new(&mut m.hist, profile, call, key, target, &read)?;
    Ok(true)
}

/// After a command (or a unit): serve, in the order the keys were signalled and
/// then in blocking order, the readers of every signalled key.
pub fn serve_ready(m: &mut Model) -> Result<(), Fail> {
    while let Some(((db, key), signalled)) = m.waits.ready.shift_remove_index(0) {
        let trigger = signalled
            .or(m.waits.current)
            .ok_or_else(|| internal("AssertionError: no trigger"))?;
        let waiting: Vec<BlockedRead> = m
            .waits
            .blocked
            .iter()
            .filter(|b| b.db == db && b.keys.contains(&key))
            .cloned()
            .collect();
        for blocked in waiting {
            let Some(position) = m.waits.blocked.iter().position(|b| *b == blocked) else {
                continue;
            };
            let call = Call::new(
                trigger.seq,
                trigger.now,
                db,
                blocked.client.clone(),
                blocked.argv.clone(),
                "XREADGROUP",
                Some(blocked.seq),
            );
            if !m.profile.eager_consumers {
                if serve_blocked_7_0(m, &call, &key, &blocked)? {
                    if let Some(position) = m.waits.blocked.iter().position(|b| *b == blocked) {
                        m.waits.blocked.remove(position);
                    }
                }
                continue;
            }
            // 7.2+: the blocked command runs again; it blocks again (behind the
            // others) when it still finds nothing, keeping its deadline.
            m.waits.blocked.remove(position);
            let before = m.waits.blocked.len();
            match xreadgroup(m, &call) {
                Err(Fail::Command(_)) => continue,
                Err(fail) => return Err(fail),
                Ok(()) => {}
            }
            if m.waits.blocked.len() > before {
                if let Some(last) = m.waits.blocked.last_mut() {
                    last.deadline = blocked.deadline;
                }
            }
        }
    }
    Ok(())
}
