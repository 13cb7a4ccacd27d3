//! A stream's internal nodes (listpacks): which node an entry goes to, what deleting
//! an entry leaves, the head entry after entries go.
//!
//! Approximate trimming (`~`) drops whole nodes only, so the model keeps each node's
//! counters and exact listpack size as Redis does: a new node opens when the tail holds
//! `stream-node-max-entries` entries or would pass `stream-node-max-bytes` bytes
//! (`listpack` has the sizes).

use std::collections::VecDeque;

use crate::fail::{internal, overflow, Fail};
use crate::ids::{to_signed, StreamId, ZERO_ID};
use crate::listpack as lp;
use crate::state::{Node, Stream};

/// The largest listpack Redis builds: `stream-node-max-bytes` 0 or beyond means this.
pub const LISTPACK_MAX_SIZE: i64 = 1 << 30;

/// The stream's first entry ID after entries left its head.
pub(crate) fn refresh_first_id(stream: &mut Stream) {
    stream.first_id = stream.entries.first().copied().unwrap_or(ZERO_ID);
}

/// Add an entry at the tail, opening a new node when the tail node is full
/// (`stream-node-max-entries` entries, or `stream-node-max-bytes` bytes).
pub(crate) fn append_entry(
    node_max_entries: i64,
    node_max_bytes: i64,
    stream: &mut Stream,
    entry_id: StreamId,
    fields: &[&str],
    values: &[&str],
) -> Result<(), Fail> {
    let open_tail = match stream.nodes.back() {
        None => false,
        Some(tail) => {
            let mut max_bytes = node_max_bytes;
            if max_bytes <= 0 || max_bytes > LISTPACK_MAX_SIZE {
                max_bytes = LISTPACK_MAX_SIZE;
            }
            let incoming: i128 = fields
                .iter()
                .chain(values.iter())
                .map(|x| i128::from(lp::byte_length(x)))
                .sum();
            !(i128::from(tail.nbytes) + incoming >= i128::from(max_bytes)
                || (node_max_entries != 0 && tail.total >= node_max_entries))
        }
    };
    let tail = match stream.nodes.back_mut() {
        Some(tail) if open_tail => tail,
        _ => {
            stream.entries.insert(entry_id);
            let names: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            let size = lp::new_node_bytes(fields) + lp::entry_bytes(0, 0, fields, values, true);
            stream.nodes.push_back(Node::new(entry_id, names, size));
            return Ok(());
        }
    };
    let master = tail.master_id;
    let live = tail
        .live
        .checked_add(1)
        .ok_or_else(|| overflow("node live"))?;
    let total = tail
        .total
        .checked_add(1)
        .ok_or_else(|| overflow("node total"))?;
    let same =
        tail.fields.len() == fields.len() && tail.fields.iter().zip(fields).all(|(a, b)| a == b);
    let grown = i128::from(lp::counter_delta(tail.live, live))
        + i128::from(lp::entry_bytes(
            to_signed(entry_id.ms.wrapping_sub(master.ms)),
            to_signed(entry_id.seq.wrapping_sub(master.seq)),
            fields,
            values,
            same,
        ));
    let nbytes =
        i64::try_from(i128::from(tail.nbytes) + grown).map_err(|_| overflow("node bytes"))?;
    stream.entries.insert(entry_id);
    tail.nbytes = nbytes;
    tail.total = total;
    tail.live = live;
    tail.appended(entry_id);
    Ok(())
}

/// `count` live entries of `node` become tombstones (its counters grow or shrink).
pub(crate) fn mark_deleted(node: &mut Node, count: i64) -> Result<(), Fail> {
    let deleted = node
        .total
        .checked_sub(node.live)
        .ok_or_else(|| overflow("node"))?;
    let live = node
        .live
        .checked_sub(count)
        .ok_or_else(|| overflow("node live"))?;
    let after = deleted.checked_add(count).ok_or_else(|| overflow("node"))?;
    let grown = i128::from(lp::counter_delta(node.live, live))
        + i128::from(lp::counter_delta(deleted, after));
    node.nbytes =
        i64::try_from(i128::from(node.nbytes) + grown).map_err(|_| overflow("node bytes"))?;
    node.live = live;
    Ok(())
}

/// Python's `bisect_right` (the same probes, even on a list out of order).
fn bisect_right_masters(nodes: &VecDeque<Node>, x: StreamId) -> usize {
    let (mut lo, mut hi) = (0usize, nodes.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if x < nodes[mid].master_id {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// XDEL of one live entry: a node whose last live entry goes is freed.
pub(crate) fn delete_entry(stream: &mut Stream, entry_id: StreamId) -> Result<(), Fail> {
    stream.entries.remove_one(&entry_id);
    let nodes = &mut stream.nodes;
    // bisect_right(...) - 1, where -1 is Python's last node
    let index = match bisect_right_masters(nodes, entry_id).checked_sub(1) {
        Some(index) => index,
        None => nodes
            .len()
            .checked_sub(1)
            .ok_or_else(|| internal("IndexError: list index out of range"))?,
    };
    let node = &mut nodes[index];
    if node.live == 1 {
        nodes.remove(index);
    } else {
        mark_deleted(node, 1)?;
    }
    Ok(())
}

/// How many items Python's `lst[:n]` holds, for a list of `len` items.
pub(crate) fn prefix_len(n: i128, len: usize) -> usize {
    let len_i = len as i128;
    let end = if n >= 0 {
        n.min(len_i)
    } else {
        (len_i + n).max(0)
    };
    end as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_slices_and_bisect() {
        assert_eq!(prefix_len(2, 5), 2);
        assert_eq!(prefix_len(9, 5), 5);
        assert_eq!(prefix_len(-1, 5), 4);
        assert_eq!(prefix_len(-9, 5), 0);
        let node = |ms| Node::new(StreamId::new(ms, 0), vec![], 0);
        let nodes = VecDeque::from([node(1), node(5), node(3)]);
        // Python's probes on a list out of order
        assert_eq!(bisect_right_masters(&nodes, StreamId::new(4, 0)), 1);
        assert_eq!(bisect_right_masters(&nodes, StreamId::new(0, 0)), 0);
    }
}
