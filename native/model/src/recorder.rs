//! The history recorder: what a command's changes of pending entries leave in the
//! history tables (`ownership_changes`, `pel_history`), in the groups' delivery
//! records and, spilling, in the closed delivery segments and group incarnations (the
//! recording half of Python's `Replayer`).
//!
//! A handler changes a group and records it in one scope: `Recorder::open` splits a
//! group into disjoint borrows, its PEL and consumers beside `GroupLog`, what records
//! their changes.

use std::collections::BTreeMap;

use crate::IndexMap;

use crate::calls::Call;
use crate::fail::{internal, Fail};
use crate::history::{append_incarnation, push_segment, HistoryTables};
use crate::ids::StreamId;
use crate::state::{
    bump, ClosedRecord, Consumer, DeliveryRecord, Group, PelVersion, PendingEntry, Records, Stream,
};

/// The history recorder: `ownership_changes`, `pel_history`, delivery records and
/// segments (the recording half of Python's `Replayer`).
pub struct Recorder<'a> {
    pub(crate) record_changes: bool,
    pub(crate) spill: bool,
    pub(crate) tables: &'a mut HistoryTables,
    pub(crate) segment_n: &'a mut i64,
    pub(crate) closed: &'a mut Vec<ClosedRecord>,
}

/// A pending entry as the history tables name it: db, key, group, ID.
#[derive(Clone, Copy)]
pub(crate) struct EntryAt<'a> {
    pub db: i64,
    pub key: &'a str,
    pub group: &'a str,
    pub id: &'a StreamId,
}

/// What records a command's changes of one group's pending entries: the recorder, the
/// call, where the group is, its identity and its delivery records.
pub(crate) struct GroupLog<'g, 'a> {
    hist: &'g mut Recorder<'a>,
    call: &'g Call,
    db: i64,
    key: &'g str,
    name: &'g str,
    created_seq: i64,
    records: &'g mut Records,
}

/// A group split into disjoint borrows: what a handler changes, beside its `GroupLog`.
pub(crate) struct GroupParts<'g, 'a> {
    pub last_id: &'g mut StreamId,
    pub entries_read: &'g mut i64,
    pub pel: &'g mut BTreeMap<StreamId, PendingEntry>,
    pub consumers: &'g mut IndexMap<String, Consumer>,
    pub log: GroupLog<'g, 'a>,
}

impl<'a> Recorder<'a> {
    /// `call` changes `group` of the stream at `key`: the group split apart, with what
    /// records the changes.
    pub(crate) fn open<'g>(
        &'g mut self,
        call: &'g Call,
        key: &'g str,
        group: &'g mut Group,
    ) -> GroupParts<'g, 'a> {
        let Group {
            name,
            last_id,
            entries_read,
            created_seq,
            pel,
            consumers,
            records,
            ..
        } = group;
        GroupParts {
            last_id,
            entries_read,
            pel,
            consumers,
            log: GroupLog {
                hist: self,
                call,
                db: call.db,
                key,
                name: name.as_str(),
                created_seq: *created_seq,
                records,
            },
        }
    }

    /// Close every pending entry of a group that is going away, keep its history.
    pub(crate) fn close_group(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &mut Group,
        status: &'static str,
    ) -> Result<(), Fail> {
        let pel = std::mem::take(&mut group.pel);
        let mut log = GroupLog {
            hist: self,
            call,
            db,
            key,
            name: &group.name,
            created_seq: group.created_seq,
            records: &mut group.records,
        };
        for (entry_id, mut nack) in pel {
            log.left(entry_id, status, status, &mut nack);
        }
        let records = std::mem::take(&mut group.records);
        if self.spill {
            // every record was open (spilled as it closed just now)
            append_incarnation(&mut self.tables.group_incarnations, db, key, group);
        } else {
            for (entry_id, rec) in records {
                self.closed.push((
                    db,
                    key.to_string(),
                    group.name.clone(),
                    group.created_seq,
                    entry_id,
                    rec,
                ));
            }
        }
        Ok(())
    }

    // -- pel_history -------------------------------------------------------
    //
    // A version of a pending entry (db, key, group, id) starts when the entry
    // enters the PEL or one of the fields the PEL shows changes (consumer,
    // delivery time, delivery count, entry_exists), and ends when the next one
    // starts or the entry leaves the PEL. The open version is kept on the
    // PendingEntry (`version`); closed ones wait in the `pel_history` sink until
    // drained. A version that starts and ends within one command (same seq) was
    // never visible between commands and is dropped.

    /// Entries `ids` left the stream (XDEL, trimming) or came back (XADD): the
    /// pending entries of those IDs change `entry_exists`.
    pub(crate) fn entries_changed(
        &mut self,
        call: &Call,
        key: &str,
        stream: &mut Stream,
        ids: &[StreamId],
    ) {
        if !self.record_changes {
            return;
        }
        let Stream {
            entries, groups, ..
        } = stream;
        for group in groups.values_mut() {
            if group.pel.is_empty() {
                continue;
            }
            for entry_id in ids {
                if let Some(nack) = group.pel.get_mut(entry_id) {
                    let exists = entries.contains(entry_id);
                    let at = EntryAt {
                        db: call.db,
                        key,
                        group: &group.name,
                        id: entry_id,
                    };
                    self.track_version(call, at, nack, exists);
                }
            }
        }
    }

    /// After `call` left the pending entry `at` as it is now: a new version when what the
    /// PEL shows differs from the open version (which then ends).
    pub(crate) fn track_version(
        &mut self,
        call: &Call,
        at: EntryAt,
        nack: &mut PendingEntry,
        exists: bool,
    ) {
        if let Some(old) = &nack.version {
            if old.consumer == nack.consumer
                && old.delivery_time == nack.delivery_time
                && old.delivery_count == nack.delivery_count
                && old.entry_exists == exists
            {
                return;
            }
            self.close_version(call, at, old);
        }
        nack.version = Some(PelVersion {
            consumer: nack.consumer.clone(),
            delivery_time: nack.delivery_time,
            delivery_count: nack.delivery_count,
            entry_exists: exists,
            from_seq: call.seq,
            from_ms: call.now,
        });
    }

    /// The pending entry `at` leaves the PEL (or its key) with `call`.
    pub(crate) fn end_version(&mut self, call: &Call, at: EntryAt, nack: &mut PendingEntry) {
        if let Some(old) = nack.version.take() {
            self.close_version(call, at, &old);
        }
    }

    fn close_version(&mut self, call: &Call, at: EntryAt, version: &PelVersion) {
        if version.from_seq == call.seq {
            return; // started and ended within one command: never visible
        }
        let EntryAt { db, key, group, id } = at;
        let valid_to = Some((call.seq, call.now));
        self.tables
            .pel_history
            .push(db, key, group, id, version, valid_to);
    }
}

impl<'g> GroupLog<'g, '_> {
    /// Where `entry_id` of this group is (borrowing what the log borrows, not the log).
    fn at<'e>(&self, entry_id: &'e StreamId) -> EntryAt<'e>
    where
        'g: 'e,
    {
        EntryAt {
            db: self.db,
            key: self.key,
            group: self.name,
            id: entry_id,
        }
    }

    /// `nack` stays pending, (re)delivered to `to` (`change`: delivered, reassigned,
    /// redelivered, claimed; `from`: who held it before). An entry delivered is one
    /// the stream holds (its version's `entry_exists`). Its delivery record is stamped
    /// with the call.
    pub(crate) fn delivered(
        &mut self,
        entry_id: StreamId,
        change: &str,
        from: Option<&str>,
        to: &str,
        nack: &mut PendingEntry,
    ) {
        let rec = self.records.get_or_insert_with(entry_id, || {
            DeliveryRecord::new(
                nack.delivery_count,
                0,
                Default::default(),
                Some(nack.delivery_time),
                Some(nack.delivery_time),
            )
        });
        if rec.status != "pending" {
            rec.status = "pending".to_string();
            rec.closed_ms = None;
        }
        if rec.first_delivery_ms.is_none() {
            // a segment restarted between runs
            rec.first_delivery_ms = Some(nack.delivery_time);
        }
        rec.deliveries += 1;
        if !rec.owners.contains(to) {
            rec.owners.insert(to.to_string());
        }
        rec.last_delivery_ms = Some(nack.delivery_time);
        rec.delivery_count = nack.delivery_count;
        rec.changed(self.call.seq, self.call.now);
        if self.hist.record_changes {
            self.hist
                .track_version(self.call, self.at(&entry_id), nack, true);
            let request_seq = self.call.request_seq.unwrap_or(self.call.seq);
            self.note_change(entry_id, request_seq, change, from, Some(to), nack);
        }
    }

    /// `nack` left the PEL with `status` (`change` in `ownership_changes`), from the
    /// consumer that held it; its delivery record is stamped with the call.
    pub(crate) fn left(
        &mut self,
        entry_id: StreamId,
        change: &str,
        status: &str,
        nack: &mut PendingEntry,
    ) {
        if let Some(rec) = self.records.get_mut(&entry_id) {
            rec.status = status.to_string();
            rec.closed_ms = Some(self.call.now);
            rec.delivery_count = nack.delivery_count;
            rec.changed(self.call.seq, self.call.now);
            if self.hist.spill {
                if let Some(mut rec) = self.records.remove(&entry_id) {
                    bump(self.hist.segment_n);
                    // the record leaves the model: its owners go with the row, uncopied
                    // (a BTreeSet iterates in code point order, as Python's sorted(set))
                    let owners = std::mem::take(&mut rec.owners).into_iter().collect();
                    push_segment(
                        &mut self.hist.tables.delivery_segments,
                        self.db,
                        self.key,
                        self.name,
                        self.created_seq,
                        &entry_id,
                        &rec,
                        owners,
                        *self.hist.segment_n,
                    );
                }
            }
        }
        if self.hist.record_changes {
            self.hist.end_version(self.call, self.at(&entry_id), nack);
            let request_seq = self.call.request_seq.unwrap_or(self.call.seq);
            let from = nack.consumer.clone();
            self.note_change(entry_id, request_seq, change, from.as_deref(), None, nack);
        }
    }

    /// A pending entry a snapshot holds (`PELENGINE.LOAD PENDING`): its history
    /// starts here, with the counter the snapshot has and no delivery seen (the record
    /// stamped with the call).
    pub(crate) fn loaded(
        &mut self,
        entry_id: StreamId,
        nack: &mut PendingEntry,
        exists: bool,
    ) -> Result<(), Fail> {
        let consumer = nack
            .consumer
            .clone()
            .ok_or_else(|| internal("AssertionError: no consumer"))?;
        let owners = std::iter::once(consumer.clone()).collect();
        let mut rec = DeliveryRecord::new(nack.delivery_count, 0, owners, None, None);
        rec.changed(self.call.seq, self.call.now);
        self.records.insert(entry_id, rec);
        if !self.hist.record_changes {
            return Ok(());
        }
        self.hist
            .track_version(self.call, self.at(&entry_id), nack, exists);
        let seq = self.call.seq;
        self.note_change(entry_id, seq, "loaded", None, Some(&consumer), nack);
        Ok(())
    }

    /// One row of `ownership_changes`: `call` changed the pending entry (`nack` as it
    /// is now).
    fn note_change(
        &mut self,
        entry_id: StreamId,
        request_seq: i64,
        change: &str,
        from: Option<&str>,
        to: Option<&str>,
        nack: &PendingEntry,
    ) {
        let call = self.call;
        self.hist.tables.ownership_changes.push(
            self.db,
            self.key,
            self.name,
            &entry_id,
            call.seq,
            request_seq,
            call.now,
            &call.command,
            change,
            from,
            to,
            nack.delivery_count,
            nack.delivery_time,
        );
    }
}
