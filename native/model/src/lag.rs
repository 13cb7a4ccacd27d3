//! The counters Redis derives for a group's `entries_read` and lag.
//!
//! `entries_read` and `lag` are estimates, and their rules changed after Redis 7.4.1.
//! `strict` selects the rules of Valkey 8.1.1+ (its fix of XINFO GROUPS lag; Redis 8.0
//! has most of them too), measured live against Valkey 8.1.8 and 9.1.2:
//!   * a tombstone before the first entry still counts as one that may lie ahead
//!     (`range_has_tombstones`);
//!   * an ID below the largest deleted ID has no estimate (`estimate_entries_read`);
//!   * a `>` delivery counts one more read only while the group is not behind the first
//!     entry and no tombstone lies after the group's previous last ID (`count_read`,
//!     from the XREADGROUP handler's `serve_new`).
//!
//! Without `strict`: Redis 7.0 up to 7.4.1 (and Valkey 8.0).

use crate::fail::Fail;
use crate::ids::{StreamId, ZERO_ID};
use crate::state::{Group, Stream, INVALID_ENTRIES_READ};

/// The stream counters the estimates read (unchanged while a read serves a group).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamStats {
    length: usize,
    entries_added: i64,
    last_id: StreamId,
    max_deleted: StreamId,
    first_id: StreamId,
}

impl StreamStats {
    pub(crate) fn of(stream: &Stream) -> Self {
        StreamStats {
            length: stream.length(),
            entries_added: stream.entries_added,
            last_id: stream.last_id,
            max_deleted: stream.max_deleted_entry_id,
            first_id: stream.first_id,
        }
    }

    /// `entries_added - length + extra` in the server's 64-bit arithmetic (it wraps).
    fn added_minus_length(&self, extra: i64) -> Result<i64, Fail> {
        let value = i128::from(self.entries_added) - self.length as i128 + i128::from(extra);
        Ok(value as i64) // truncation is the server's wrap: the low 64 bits
    }
}

fn tombstones(s: &StreamStats, start: Option<StreamId>, strict: bool) -> bool {
    let mdel = s.max_deleted;
    if s.length == 0 || mdel == ZERO_ID {
        return false;
    }
    if !strict && s.first_id > mdel {
        return false;
    }
    start.unwrap_or(ZERO_ID) <= mdel
}

fn estimate(s: &StreamStats, entry_id: StreamId, strict: bool) -> Result<i64, Fail> {
    if s.entries_added == 0 {
        return Ok(0);
    }
    if s.length == 0 && entry_id <= s.last_id {
        return Ok(s.entries_added);
    }
    if strict && entry_id != ZERO_ID && entry_id < s.max_deleted {
        return Ok(INVALID_ENTRIES_READ);
    }
    if entry_id == s.last_id {
        return Ok(s.entries_added);
    }
    if entry_id > s.last_id {
        return Ok(INVALID_ENTRIES_READ);
    }
    let mdel = s.max_deleted;
    if mdel == ZERO_ID || mdel < s.first_id {
        if entry_id < s.first_id {
            return s.added_minus_length(0);
        }
        if entry_id == s.first_id {
            return s.added_minus_length(1);
        }
    }
    Ok(INVALID_ENTRIES_READ)
}

/// True when an XDEL tombstone may lie at or after `start` (the server's estimate:
/// anything at or before the largest deleted ID). Before the strict rules, a largest
/// deleted ID before the first entry meant none could.
pub fn range_has_tombstones(stream: &Stream, start: Option<StreamId>, strict: bool) -> bool {
    tombstones(&StreamStats::of(stream), start, strict)
}

/// The logical read counter of `entry_id`, or -1 when it cannot be known. The strict
/// rules know nothing of an ID (other than 0-0) below the largest deleted ID.
/// Counters loaded or set to extremes wrap as the server's arithmetic does.
pub fn estimate_entries_read(
    stream: &Stream,
    entry_id: StreamId,
    strict: bool,
) -> Result<i64, String> {
    estimate(&StreamStats::of(stream), entry_id, strict).map_err(Fail::into_text)
}

/// The lag XINFO GROUPS reports, or None where the server replies nil; counters loaded
/// or set to extremes wrap as the server's 64-bit subtraction does.
pub fn try_group_lag(stream: &Stream, group: &Group, strict: bool) -> Result<Option<i64>, String> {
    let s = StreamStats::of(stream);
    if s.entries_added == 0 {
        return Ok(Some(0));
    }
    // the server's subtraction wraps where counters were set to extremes
    let lag = |read: i64| Ok(Some(s.entries_added.wrapping_sub(read)));
    if group.entries_read != INVALID_ENTRIES_READ && !tombstones(&s, Some(group.last_id), strict) {
        return lag(group.entries_read);
    }
    let read = estimate(&s, group.last_id, strict).map_err(Fail::into_text)?;
    if read == INVALID_ENTRIES_READ {
        return Ok(None);
    }
    lag(read)
}

/// The lag XINFO GROUPS reports, or None where the server replies nil, as the Python
/// model's `group_lag`.
pub fn group_lag(stream: &Stream, group: &Group, strict: bool) -> Option<i64> {
    try_group_lag(stream, group, strict).unwrap_or(None)
}

/// A `>` delivery of `entry_id` moves the group's read counter: one more when the
/// counter can be trusted, else the estimate of `entry_id`. The strict rules trust
/// it only while the group is not behind the first entry, and look for tombstones
/// after the group's previous last ID (not after the delivered one).
pub(crate) fn count_read(
    s: &StreamStats,
    last_id: StreamId,
    entries_read: &mut i64,
    entry_id: StreamId,
    strict: bool,
) -> Result<(), Fail> {
    let mut trusted = *entries_read != INVALID_ENTRIES_READ;
    if strict {
        trusted = trusted && last_id >= s.first_id && !tombstones(s, Some(last_id), strict);
    } else {
        trusted = trusted && !tombstones(s, Some(entry_id), false);
    }
    if trusted {
        *entries_read = entries_read.wrapping_add(1); // the server's ++ wraps
    } else if s.entries_added != 0 {
        *entries_read = estimate(s, entry_id, strict)?;
    }
    Ok(())
}
