//! Trimming (XADD's and XTRIM's MAXLEN/MINID): which entries leave the stream's head.

use crate::calls::Call;
use crate::fail::{overflow, Fail};
use crate::ids::{StreamId, ZERO_ID};
use crate::nodes::{mark_deleted, prefix_len, refresh_first_id};
use crate::recorder::Recorder;
use crate::state::{Entries, Node, Stream};

/// What decides how far the head goes: a length to keep, or the lowest ID to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    MaxLen,
    MinId,
}

/// The options of XADD and XTRIM as the handlers parse them
/// (`handlers::entries::parse_add_or_trim`): the trim's, then XADD's own.
#[derive(Clone, Debug)]
pub(crate) struct TrimArgs {
    pub(crate) strategy: Option<Strategy>,
    pub(crate) approx: bool,
    pub(crate) maxlen: i64,
    pub(crate) minid: StreamId,
    pub(crate) limit: i64,
    pub(crate) no_mkstream: bool,
    pub(crate) id_given: bool,
    pub(crate) seq_given: bool,
    pub(crate) given_id: StreamId,
}

impl Default for TrimArgs {
    fn default() -> Self {
        TrimArgs {
            strategy: None,
            approx: false,
            maxlen: 0,
            minid: ZERO_ID,
            limit: 0,
            no_mkstream: false,
            id_given: false,
            seq_given: true,
            given_id: ZERO_ID,
        }
    }
}

/// How many entries an approximate trim may remove (0: no limit).
fn approx_limit(args: &TrimArgs, node_max_entries: i64) -> i64 {
    if !args.approx {
        return 0;
    }
    if args.limit != 0 {
        return args.limit;
    }
    let limit = 100 * i128::from(node_max_entries);
    if limit <= 0 {
        return 10000;
    }
    limit.min(1_000_000) as i64
}

/// How many live entries of the head `node` (the first `node.live` of `entries`) an
/// exact `MINID` trim removes: Redis walks the listpack in order and stops at the
/// first entry at or above `minid`, deleted or not. Where listpack order is ID order
/// that is every live entry below `minid`; across the node's `runs`, the live entries
/// of each run lie below the next run's first ID, and the walk stops in the first run
/// whose last ID reaches `minid` (Python's `commands._minid_cut`).
fn minid_cut(entries: &Entries, node: &Node, minid: &StreamId) -> usize {
    let live = usize::try_from(node.live).unwrap_or(0);
    let below = entries.count_below(minid, live);
    if node.runs.is_empty() {
        return below;
    }
    let mut cut = 0usize;
    for (i, (_first, last)) in node.runs.iter().enumerate() {
        let upper = match node.runs.get(i + 1) {
            Some((next, _)) => entries.count_below(next, live),
            None => live,
        };
        if last < minid {
            cut = upper;
            continue;
        }
        return below.max(cut).min(upper);
    }
    cut
}

/// Remove entries from the head as MAXLEN/MINID asks.
///
/// Walks the internal nodes from the head: a node is dropped whole when the
/// threshold allows; approximate trimming (`~`) stops at the first node it
/// cannot drop whole (or when LIMIT entries would be exceeded), exact trimming
/// goes on inside that node. Node sizes follow `stream-node-max-entries`
/// and `stream-node-max-bytes` (see `listpack`). Pending entries of the
/// removed IDs now dangle (`Recorder::entries_changed`).
pub(crate) fn trim(
    hist: &mut Recorder,
    node_max_entries: i64,
    call: &Call,
    key: &str,
    stream: &mut Stream,
    args: &TrimArgs,
) -> Result<(), Fail> {
    let limit = i128::from(approx_limit(args, node_max_entries));
    let maxlen = i128::from(args.maxlen);
    let by_maxlen = args.strategy == Some(Strategy::MaxLen);
    let mut deleted: i128 = 0;
    // the removed IDs, when a pending entry's history may need them
    let mut removed: Option<Vec<StreamId>> =
        if hist.record_changes && stream.groups.values().any(|g| !g.pel.is_empty()) {
            Some(Vec::new())
        } else {
            None
        };
    while let Some(node) = stream.nodes.front_mut() {
        let len = stream.entries.len();
        if by_maxlen && len as i128 <= maxlen {
            break;
        }
        let live = i128::from(node.live);
        if limit != 0 && deleted + live > limit {
            break;
        }
        let remove_node = if by_maxlen {
            len as i128 - live >= maxlen
        } else {
            node.last_id < args.minid
        };
        if remove_node {
            let gone = stream.entries.pop_front(prefix_len(live, len));
            if let Some(removed) = removed.as_mut() {
                removed.extend(gone);
            }
            deleted += live;
            stream.nodes.pop_front();
            continue;
        }
        if args.approx {
            break;
        }
        let cut: i128 = if by_maxlen {
            len as i128 - maxlen
        } else if live <= 0 {
            live
        } else {
            minid_cut(&stream.entries, node, &args.minid) as i128
        };
        if cut > 0 {
            let gone = stream.entries.pop_front(prefix_len(cut, len));
            if let Some(removed) = removed.as_mut() {
                removed.extend(gone);
            }
            let count = i64::try_from(cut).map_err(|_| overflow("trim"))?;
            mark_deleted(node, count)?;
            deleted += cut;
        }
        break;
    }
    if deleted != 0 {
        refresh_first_id(stream);
        if let Some(removed) = removed.filter(|r| !r.is_empty()) {
            hist.entries_changed(call, key, stream, &removed);
        }
    }
    Ok(())
}
