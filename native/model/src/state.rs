//! The state Redis keeps per stream key, as plain structs.
//!
//! A stream holds its live entry IDs (values are irrelevant to consumer groups),
//! its counters, and its consumer groups. A group holds its last delivered ID, its
//! `entries_read` counter (-1 when Redis considers it invalid), the group PEL and
//! its consumers; each consumer indexes the same pending entries by owner.
//!
//! Beyond what Redis keeps, a group also keeps one `DeliveryRecord` per entry ID
//! it ever delivered: the history behind the `delivery_counts` table (a replayer
//! that spills closed records keeps only those of pending entries, see
//! `Replayer`); and each pending entry its open `PelVersion`: the current row of
//! `pel_history`. A group knows the `seq` of the command that created it: what
//! tells one incarnation of a group name from the next after a destroy or a delete.
//!
//! Python's object references become names: a pending entry names its consumer
//! (`PendingEntry::consumer`), looked up in `Group::consumers`; a consumer's PEL is
//! the set of IDs it holds, whose entries live in `Group::pel`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use indexmap::Equivalent;

use crate::IndexMap;

use crate::ids::{StreamId, ZERO_ID};

pub const INVALID_ENTRIES_READ: i64 = -1;

/// What a pending entry showed from one moment on: the open row of `pel_history`.
///
/// `consumer`, `delivery_time`, `delivery_count` and `entry_exists` are the entry's
/// PEL-visible fields; `from_seq`/`from_ms` the command that set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PelVersion {
    pub consumer: Option<String>,
    pub delivery_time: i64,
    pub delivery_count: i64,
    pub entry_exists: bool,
    pub from_seq: i64,
    pub from_ms: i64,
}

/// One entry of a group PEL: who holds it, since when, how often delivered.
///
/// `version` is the entry's current `pel_history` version (None when the replay does
/// not record history).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    pub consumer: Option<String>,
    pub delivery_time: i64,
    pub delivery_count: i64,
    pub version: Option<PelVersion>,
}

impl PendingEntry {
    pub fn new(consumer: Option<String>, delivery_time: i64, delivery_count: i64) -> Self {
        PendingEntry {
            consumer,
            delivery_time,
            delivery_count,
            version: None,
        }
    }
}

/// A consumer of a group, with its own view of the pending entries it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    pub name: String,
    pub seen_time: i64,
    pub active_time: i64,
    pub pel: BTreeSet<StreamId>,
}

impl Consumer {
    pub fn new(name: &str, now: i64) -> Self {
        Consumer {
            name: name.to_string(),
            seen_time: now,
            active_time: -1,
            pel: BTreeSet::new(),
        }
    }
}

/// The life of one entry ID in one group: the row of `delivery_counts`.
///
/// With spilling (see `Replayer`) it is one segment of that life: from a delivery
/// of the entry while it was not pending (or from the start of a run, for an entry
/// already pending: then without deliveries so far, `first`/`last_delivery_ms`
/// None) to the moment it left the PEL.
///
/// `changed_seq`/`changed_ms`: the seq and model time of the last command that
/// changed the row (a delivery or claim, its leaving the PEL, a `PELENGINE.LOAD`
/// creating it, a `RENAME` moving its group); None when nothing changed it in this
/// segment (an open record restarted between runs, untouched since).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRecord {
    pub delivery_count: i64,
    pub deliveries: i64,
    pub owners: BTreeSet<String>,
    pub first_delivery_ms: Option<i64>,
    pub last_delivery_ms: Option<i64>,
    pub status: String,
    pub closed_ms: Option<i64>,
    pub changed_seq: Option<i64>,
    pub changed_ms: Option<i64>,
}

impl DeliveryRecord {
    pub fn new(
        delivery_count: i64,
        deliveries: i64,
        owners: BTreeSet<String>,
        first_delivery_ms: Option<i64>,
        last_delivery_ms: Option<i64>,
    ) -> Self {
        DeliveryRecord {
            delivery_count,
            deliveries,
            owners,
            first_delivery_ms,
            last_delivery_ms,
            status: "pending".to_string(),
            closed_ms: None,
            changed_seq: None,
            changed_ms: None,
        }
    }

    /// The command `seq` (at model time `now`) changed this row.
    pub fn changed(&mut self, seq: i64, now: i64) {
        self.changed_seq = Some(seq);
        self.changed_ms = Some(now);
    }
}

/// A consumer group: last delivered ID, read counter, PEL and consumers.
///
/// `moved_seq`/`moved_ms`: the seq and model time of the last `RENAME` that moved the
/// group's key (None if none did): with spilling, the records that already left the
/// model as segments changed their key then too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub last_id: StreamId,
    pub entries_read: i64,
    /// the seq of the XGROUP CREATE that made this group (its incarnation)
    pub created_seq: i64,
    pub pel: BTreeMap<StreamId, PendingEntry>,
    /// insertion-ordered, as Python's dict
    pub consumers: IndexMap<String, Consumer>,
    /// insertion-ordered, as Python's dict
    pub records: Records,
    /// the last RENAME that moved this group's key (its seq and model time)
    pub moved_seq: Option<i64>,
    pub moved_ms: Option<i64>,
}

impl Group {
    pub fn new(name: &str, last_id: StreamId, entries_read: i64, created_seq: i64) -> Self {
        Group {
            name: name.to_string(),
            last_id,
            entries_read,
            created_seq,
            pel: BTreeMap::new(),
            consumers: IndexMap::default(),
            records: Records::default(),
            moved_seq: None,
            moved_ms: None,
        }
    }
}

/// One internal node (listpack) of a stream: Redis trims `~` only whole nodes.
///
/// `total` counts live and deleted entries (with `nbytes`, the listpack's size, it
/// decides when the next entry opens a new node), `live` the entries still in the
/// stream, `last_id` the last entry appended to it (deleted or not), `fields` the
/// master entry's field names.
///
/// `runs`: empty while every entry appended to the node had a larger ID than the one
/// before it (listpack order is ID order); once one had a smaller ID (`XSETID` went
/// below a deleted entry), the (first, last) ID of each ascending run of appended
/// entries, deleted ones included, in listpack order. An exact `MINID` trim stops at
/// the first entry at or above the threshold in listpack order, deleted or not
/// (`trim::minid_cut`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub master_id: StreamId,
    pub total: i64,
    pub live: i64,
    pub last_id: StreamId,
    pub fields: Vec<String>,
    pub nbytes: i64,
    pub runs: Vec<(StreamId, StreamId)>,
}

impl Node {
    pub fn new(master_id: StreamId, fields: Vec<String>, nbytes: i64) -> Self {
        Node {
            master_id,
            total: 1,
            live: 1,
            last_id: master_id,
            fields,
            nbytes,
            runs: Vec::new(),
        }
    }

    /// `entry_id` was appended after `last_id`: the runs follow it.
    pub fn appended(&mut self, entry_id: StreamId) {
        if entry_id < self.last_id {
            if self.runs.is_empty() {
                self.runs.push((self.master_id, self.last_id));
            }
            self.runs.push((entry_id, entry_id));
        } else if let Some(run) = self.runs.last_mut() {
            run.1 = entry_id;
        }
        self.last_id = entry_id;
    }
}

/// The live entry IDs of a stream, in order: Python's `SortedList`.
///
/// A multiset, as the `SortedList` is: only `PELENGINE.LOAD` rows can put one ID in
/// twice (every server command adds IDs above all others), and then the model keeps
/// both, as the Python model does. The read API is that of a `BTreeSet`
/// (`first`, `last`, `contains`, `len`, `iter`), with duplicates repeated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entries {
    counts: BTreeMap<StreamId, usize>,
    len: usize,
}

impl Entries {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, id: &StreamId) -> bool {
        self.counts.contains_key(id)
    }

    pub fn first(&self) -> Option<&StreamId> {
        self.counts.keys().next()
    }

    pub fn last(&self) -> Option<&StreamId> {
        self.counts.keys().next_back()
    }

    /// Every ID in order (an ID held twice comes twice).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &StreamId> + '_ {
        self.counts
            .iter()
            .flat_map(|(id, n)| std::iter::repeat_n(id, *n))
    }

    /// The IDs at or after `start`, in order (`irange(minimum=start)`).
    pub fn iter_from(&self, start: StreamId) -> impl Iterator<Item = &StreamId> + '_ {
        self.counts
            .range(start..)
            .flat_map(|(id, n)| std::iter::repeat_n(id, *n))
    }

    /// `SortedList.add`.
    pub fn insert(&mut self, id: StreamId) {
        *self.counts.entry(id).or_insert(0) += 1;
        self.len += 1;
    }

    /// `SortedList.remove` of one occurrence (false when absent).
    pub fn remove_one(&mut self, id: &StreamId) -> bool {
        match self.counts.get_mut(id) {
            None => false,
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(id);
                }
                self.len -= 1;
                true
            }
        }
    }

    /// `del entries[:n]`: the first `n` IDs (fewer when shorter), removed and returned.
    pub fn pop_front(&mut self, n: usize) -> Vec<StreamId> {
        let mut out = Vec::with_capacity(n.min(self.len));
        while out.len() < n {
            let Some(mut first) = self.counts.first_entry() else {
                break;
            };
            let id = *first.key();
            let take = (*first.get()).min(n - out.len());
            out.extend(std::iter::repeat_n(id, take));
            *first.get_mut() -= take;
            if *first.get() == 0 {
                first.remove();
            }
            self.len -= take;
        }
        out
    }

    /// `min(bisect_left(id), cap)`: how many IDs lie below `id`, counting up to `cap`.
    pub fn count_below(&self, id: &StreamId, cap: usize) -> usize {
        let mut below = 0usize;
        for (_, n) in self.counts.range(..*id) {
            below += n;
            if below >= cap {
                return cap;
            }
        }
        below
    }
}

/// A stream key: live entry IDs, generation counters, internal nodes and groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    pub entries: Entries,
    pub last_id: StreamId,
    pub entries_added: i64,
    pub max_deleted_entry_id: StreamId,
    /// Redis' "recorded first entry id": updated on add/trim/XDEL, 0-0 when empty.
    pub first_id: StreamId,
    /// insertion-ordered, as Python's dict
    pub groups: IndexMap<String, Group>,
    pub nodes: VecDeque<Node>,
}

impl Stream {
    pub fn new() -> Self {
        Stream {
            first_id: ZERO_ID,
            ..Default::default()
        }
    }

    pub fn length(&self) -> usize {
        self.entries.len()
    }
}

/// What a key holds: a stream, or another data type (tracked only to answer
/// WRONGTYPE and overwrites; Python's `OtherValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Stream(Stream),
    Other(String),
}

/// The keyspace: (db, key) -> value, in insertion order (Python's dict).
pub type Keys = IndexMap<(i64, String), Value>;
/// A delivery record of a group that ended: (db, key, group, created_seq, id, record).
pub type ClosedRecord = (i64, String, String, i64, StreamId, DeliveryRecord);
/// A group's delivery records, in insertion order (Python's dict, which the Python model
/// keeps them in).
///
/// A record leaves in O(1): its slot becomes a hole, and the holes are closed up once they
/// outnumber the records (amortized O(1) per removal). `IndexMap::shift_remove`, which
/// keeps the order too, moves every later record instead: a PEL of N entries
/// acknowledged oldest first cost O(N²) (100,000 pending entries: 23 s of replay).
/// Equality is a map's, as `IndexMap`'s: the same records, whatever their order.
#[derive(Clone, Debug, Default)]
pub struct Records {
    slots: Vec<Option<(StreamId, DeliveryRecord)>>,
    index: rustc_hash::FxHashMap<StreamId, usize>,
}

type RecordSlot = Option<(StreamId, DeliveryRecord)>;

fn slot_ref(slot: &RecordSlot) -> Option<(&StreamId, &DeliveryRecord)> {
    slot.as_ref().map(|(id, rec)| (id, rec))
}

impl Records {
    /// How many records there are.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn get(&self, id: &StreamId) -> Option<&DeliveryRecord> {
        let &at = self.index.get(id)?;
        self.slots.get(at)?.as_ref().map(|(_, rec)| rec)
    }

    pub fn get_mut(&mut self, id: &StreamId) -> Option<&mut DeliveryRecord> {
        let &at = self.index.get(id)?;
        self.slots.get_mut(at)?.as_mut().map(|(_, rec)| rec)
    }

    fn slot_of(&mut self, id: StreamId) -> usize {
        match self.index.get(&id) {
            Some(&at) if at < self.slots.len() => at,
            _ => {
                let at = self.slots.len();
                self.slots.push(None);
                self.index.insert(id, at);
                at
            }
        }
    }

    /// The record of `id`, made by `make` (and placed last) if there is none.
    pub fn get_or_insert_with(
        &mut self,
        id: StreamId,
        make: impl FnOnce() -> DeliveryRecord,
    ) -> &mut DeliveryRecord {
        let at = self.slot_of(id);
        &mut self.slots[at].get_or_insert_with(|| (id, make())).1
    }

    /// Sets the record of `id`: in its place if it has one (returning the one it had),
    /// else last.
    pub fn insert(&mut self, id: StreamId, rec: DeliveryRecord) -> Option<DeliveryRecord> {
        let at = self.slot_of(id);
        self.slots[at].replace((id, rec)).map(|(_, old)| old)
    }

    /// Takes the record of `id` out; the others keep their order.
    pub fn remove(&mut self, id: &StreamId) -> Option<DeliveryRecord> {
        let at = self.index.remove(id)?;
        let taken = self.slots.get_mut(at)?.take().map(|(_, rec)| rec);
        if at + 1 == self.slots.len() {
            self.slots.pop();
        } else if self.slots.len() > 64 && self.index.len() * 2 < self.slots.len() {
            self.slots.retain(Option::is_some);
            for (at, slot) in self.slots.iter().enumerate() {
                if let Some((id, _)) = slot {
                    self.index.insert(*id, at);
                }
            }
        }
        taken
    }

    /// The records in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&StreamId, &DeliveryRecord)> {
        self.slots.iter().filter_map(slot_ref)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut DeliveryRecord> {
        self.slots
            .iter_mut()
            .filter_map(|slot| slot.as_mut().map(|(_, rec)| rec))
    }
}

impl<'a> IntoIterator for &'a Records {
    type Item = (&'a StreamId, &'a DeliveryRecord);
    type IntoIter = std::iter::FilterMap<
        std::slice::Iter<'a, RecordSlot>,
        fn(&'a RecordSlot) -> Option<(&'a StreamId, &'a DeliveryRecord)>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.slots.iter().filter_map(slot_ref)
    }
}

impl IntoIterator for Records {
    type Item = (StreamId, DeliveryRecord);
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<RecordSlot>>;

    fn into_iter(self) -> Self::IntoIter {
        self.slots.into_iter().flatten()
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(id, rec)| other.get(id) == Some(rec))
    }
}

impl Eq for Records {}

/// A borrowed keyspace key: looks up `(i64, String)` keys without allocating.
#[derive(Hash)]
pub(crate) struct KeyRef<'a>(pub i64, pub &'a str);

impl Equivalent<(i64, String)> for KeyRef<'_> {
    fn equivalent(&self, key: &(i64, String)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

/// What the replay did, per outcome and per Redis error kind (maps in insertion order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub applied: i64,
    pub ignored: i64,
    pub failed: i64,
    pub errors: IndexMap<String, i64>,
    pub commands: IndexMap<String, i64>,
}

/// A counter's `+= 1` (Python's ints do not overflow; a saved model may hold any
/// count: it stops at i64::MAX).
pub(crate) fn bump(value: &mut i64) {
    *value = value.saturating_add(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64) -> StreamId {
        StreamId::new(ms, 0)
    }

    #[test]
    fn entries_multiset() {
        let mut e = Entries::new();
        for ms in [3, 1, 2, 2] {
            e.insert(id(ms));
        }
        assert_eq!(e.len(), 4);
        assert_eq!(e.first(), Some(&id(1)));
        assert_eq!(e.last(), Some(&id(3)));
        assert_eq!(
            e.iter().copied().collect::<Vec<_>>(),
            [id(1), id(2), id(2), id(3)]
        );
        assert_eq!(e.iter_from(id(2)).count(), 3);
        assert_eq!(e.count_below(&id(3), 10), 3);
        assert_eq!(e.count_below(&id(3), 2), 2);
        assert_eq!(e.pop_front(2), [id(1), id(2)]);
        assert!(e.contains(&id(2)));
        assert!(e.remove_one(&id(2)));
        assert!(!e.contains(&id(2)));
        assert!(!e.remove_one(&id(2)));
        assert_eq!(e.pop_front(5), [id(3)]);
        assert!(e.is_empty());
    }
}

#[cfg(test)]
mod tests_records {
    use super::*;

    fn rec(count: i64) -> DeliveryRecord {
        DeliveryRecord::new(count, 0, BTreeSet::new(), None, None)
    }

    fn id(ms: u64) -> StreamId {
        StreamId { ms, seq: 0 }
    }

    fn order(records: &Records) -> Vec<(u64, i64)> {
        records
            .iter()
            .map(|(id, r)| (id.ms, r.delivery_count))
            .collect()
    }

    #[test]
    fn records_keep_insertion_order_through_removals_and_compaction() {
        let mut records = Records::default();
        for n in 0..200 {
            records.get_or_insert_with(id(n), || rec(n as i64));
        }
        // oldest first, past the point where holes outnumber records (a compaction)
        for n in 0..150 {
            assert_eq!(
                records.remove(&id(n)).map(|r| r.delivery_count),
                Some(n as i64)
            );
        }
        assert_eq!(records.remove(&id(3)), None);
        assert_eq!(records.len(), 50);
        // a re-inserted id goes last (Python's dict); insert over a kept one stays in place
        records.insert(id(7), rec(-7));
        assert_eq!(
            records.insert(id(160), rec(-160)).map(|r| r.delivery_count),
            Some(160)
        );
        records
            .get_or_insert_with(id(170), || rec(0))
            .delivery_count = -170;
        let expected: Vec<(u64, i64)> = (150..200)
            .map(|n| match n {
                160 => (n, -160),
                170 => (n, -170),
                _ => (n, n as i64),
            })
            .chain(std::iter::once((7, -7)))
            .collect();
        assert_eq!(order(&records), expected);
        assert_eq!(records.get(&id(7)).map(|r| r.delivery_count), Some(-7));
        // the last one removed, then every one: nothing left, nothing found
        assert!(records.remove(&id(7)).is_some());
        for n in 150..200 {
            assert!(records.remove(&id(n)).is_some());
        }
        assert!(records.is_empty() && records.iter().next().is_none());
    }

    #[test]
    fn records_compare_as_maps() {
        let mut a = Records::default();
        let mut b = Records::default();
        for n in [1, 2, 3] {
            a.insert(id(n), rec(n as i64));
        }
        for n in [3, 1, 2] {
            b.insert(id(n), rec(n as i64));
        }
        assert_eq!(a, b);
        b.insert(id(2), rec(9));
        assert_ne!(a, b);
        b.remove(&id(2));
        assert_ne!(a, b);
        let owned: Vec<u64> = a.into_iter().map(|(id, _)| id.ms).collect();
        assert_eq!(owned, vec![1, 2, 3]);
    }
}
