//! The history recorder: what a command's changes of pending entries leave in the
//! history tables (`ownership_changes`, `pel_history`), in the groups' delivery
//! records and, spilling, in the closed delivery segments and group incarnations (the
//! recording half of Python's `Replayer`).
//!
//! A handler changes a group and records it in one scope: `parts` splits a group into
//! disjoint borrows, its PEL and consumers beside `GroupRec`, what the recorder needs.

use std::collections::BTreeMap;

use crate::IndexMap;

use crate::calls::Call;
use crate::fail::{internal, Fail};
use crate::history::{push_incarnation, push_segment, HistoryTables};
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

/// A group's identity and records, borrowed apart from its PEL and consumers.
pub(crate) struct GroupRec<'g> {
    pub name: &'g str,
    pub created_seq: i64,
    pub records: &'g mut Records,
}

/// A group split into disjoint borrows.
pub(crate) struct GroupParts<'g> {
    pub last_id: &'g mut StreamId,
    pub entries_read: &'g mut i64,
    pub pel: &'g mut BTreeMap<StreamId, PendingEntry>,
    pub consumers: &'g mut IndexMap<String, Consumer>,
    pub rec: GroupRec<'g>,
}

pub(crate) fn parts(group: &mut Group) -> GroupParts<'_> {
    let Group {
        name,
        last_id,
        entries_read,
        created_seq,
        pel,
        consumers,
        records,
    } = group;
    GroupParts {
        last_id,
        entries_read,
        pel,
        consumers,
        rec: GroupRec {
            name: name.as_str(),
            created_seq: *created_seq,
            records,
        },
    }
}

impl Recorder<'_> {
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
        let mut rec = GroupRec {
            name: &group.name,
            created_seq: group.created_seq,
            records: &mut group.records,
        };
        for (entry_id, mut nack) in pel {
            let from = nack.consumer.clone();
            self.record(
                call,
                db,
                key,
                &mut rec,
                entry_id,
                status,
                from.as_deref(),
                None,
                &mut nack,
                Some(status),
                false,
            )?;
        }
        let records = std::mem::take(&mut group.records);
        if self.spill {
            // every record was open (spilled as it closed just now)
            push_incarnation(
                &mut self.tables.group_incarnations,
                db,
                key,
                &group.name,
                group.created_seq,
            );
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

    /// Note one change of a pending entry in the history tables (`status`: it left
    /// the PEL with that status). `exists`: whether the entry is in the stream (the
    /// version's `entry_exists` when it stays pending).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &mut GroupRec,
        entry_id: StreamId,
        change: &str,
        from_consumer: Option<&str>,
        to_consumer: Option<&str>,
        nack: &mut PendingEntry,
        status: Option<&str>,
        exists: bool,
    ) -> Result<(), Fail> {
        match status {
            None => {
                let to = to_consumer.ok_or_else(|| internal("AssertionError: no consumer"))?;
                let rec = group.records.entry(entry_id).or_insert_with(|| {
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
            }
            Some(status) => {
                if let Some(rec) = group.records.get_mut(&entry_id) {
                    rec.status = status.to_string();
                    rec.closed_ms = Some(call.now);
                    rec.delivery_count = nack.delivery_count;
                    if self.spill {
                        if let Some(rec) = group.records.shift_remove(&entry_id) {
                            bump(self.segment_n);
                            push_segment(
                                &mut self.tables.delivery_segments,
                                db,
                                key,
                                group.name,
                                group.created_seq,
                                &entry_id,
                                &rec,
                                *self.segment_n,
                            );
                        }
                    }
                }
            }
        }
        if self.record_changes {
            if status.is_none() {
                self.track_version(call, db, key, group.name, &entry_id, nack, exists);
            } else {
                self.end_version(call, db, key, group.name, &entry_id, nack);
            }
            self.tables.ownership_changes.push(
                db,
                key,
                group.name,
                &entry_id,
                call.seq,
                call.request_seq.unwrap_or(call.seq),
                call.now,
                &call.command,
                change,
                from_consumer,
                to_consumer,
                nack.delivery_count,
                nack.delivery_time,
            );
        }
        Ok(())
    }

    /// A pending entry a snapshot holds (`PELENGINE.LOAD PENDING`): its history
    /// starts here, with the counter the snapshot has and no delivery seen.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn loaded(
        &mut self,
        call: &Call,
        key: &str,
        group: &mut GroupRec,
        entry_id: StreamId,
        nack: &mut PendingEntry,
        exists: bool,
    ) -> Result<(), Fail> {
        let consumer = nack
            .consumer
            .clone()
            .ok_or_else(|| internal("AssertionError: no consumer"))?;
        let owners = std::iter::once(consumer.clone()).collect();
        group.records.insert(
            entry_id,
            DeliveryRecord::new(nack.delivery_count, 0, owners, None, None),
        );
        if !self.record_changes {
            return Ok(());
        }
        self.track_version(call, call.db, key, group.name, &entry_id, nack, exists);
        self.tables.ownership_changes.push(
            call.db,
            key,
            group.name,
            &entry_id,
            call.seq,
            call.seq,
            call.now,
            &call.command,
            "loaded",
            None,
            Some(&consumer),
            nack.delivery_count,
            nack.delivery_time,
        );
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
                    self.track_version(call, call.db, key, &group.name, entry_id, nack, exists);
                }
            }
        }
    }

    /// After `call` left the pending entry as it is now: a new version when what the
    /// PEL shows differs from the open version (which then ends).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn track_version(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
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
            self.close_version(call, db, key, group, entry_id, old);
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

    /// The pending entry leaves the PEL (or its key) with `call`.
    pub(crate) fn end_version(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        nack: &mut PendingEntry,
    ) {
        if let Some(old) = nack.version.take() {
            self.close_version(call, db, key, group, entry_id, &old);
        }
    }

    fn close_version(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        version: &PelVersion,
    ) {
        if version.from_seq == call.seq {
            return; // started and ended within one command: never visible
        }
        self.tables.pel_history.push(
            db,
            key,
            group,
            entry_id,
            version,
            Some((call.seq, call.now)),
        );
    }
}
