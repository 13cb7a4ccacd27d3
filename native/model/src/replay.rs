//! The replayer: applies logged commands in order and reports the resulting state.
//!
//! `Replayer::apply` takes one command as the server executed it (its `seq`,
//! its time, argv, db and client) and changes the model exactly as Redis would,
//! or leaves it untouched when Redis would have replied with an error. It keeps
//! what Redis does not: every change of a pending entry (`ownership_changes`),
//! the life of each delivered entry (`delivery_counts`) and every version of
//! each pending entry (`pel_history`: what the PEL showed, from when to when).
//! It appends those history rows column by column (`history`), and hands
//! them on when drained.
//!
//! The state tables at a moment (pel, ownership, groups, streams, delivery rows) are
//! rendered from the replayer by the snapshot (not part of this crate).

use crate::IndexMap;

use crate::calls::{fill_command_name, BlockedRead, Call, Profile, Trigger};
use crate::fail::Fail;
use crate::handlers::{
    other_writer, serve_ready, stream_command, KEYSPACE_COMMANDS, NEWER_STREAM_COMMANDS,
};
use crate::history::HistoryTables;
use crate::model::Model;
use crate::recorder::Recorder;
use crate::state::{bump, ClosedRecord, Counters, Keys, Stream, Value};
use crate::units::{LUA_CLIENT, SCRIPT_CALLS};
use crate::waits::Waits;

/// What became of one command: `applied`, `ignored` or `error` (with its kind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub kind: &'static str,
    pub error: Option<String>,
}

impl Outcome {
    fn applied() -> Self {
        Outcome {
            kind: "applied",
            error: None,
        }
    }

    fn ignored() -> Self {
        Outcome {
            kind: "ignored",
            error: None,
        }
    }
}

/// The execution unit a command ran in: `Follow` lets the replayer follow the units
/// itself (Python's `unit=...`); `Known(u)` is the unit the caller knows (None: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Follow,
    Known(Option<i64>),
}

/// How many forgotten calls a replayer keeps for their buffers.
const SPARE_CALLS: usize = 8;

/// Replays stream commands against an exact model of Redis' stream state.
///
/// Spilling (`spill_closed_records`, see Python's `pelengine.model.delivery`): a
/// record leaves the model as a segment row when its entry leaves the PEL, a group
/// that ends leaves an incarnation row; both wait in the history sinks until
/// drained. Memory then follows the PEL, not the history.
#[derive(Clone, Debug)]
pub struct Replayer {
    pub profile: Profile,
    /// Redis' stream-node-max-entries: how many entries one internal node holds
    /// (decides what approximate trimming can drop).
    pub node_max_entries: i64,
    /// Redis' stream-node-max-bytes: the size limit of one node's listpack.
    pub node_max_bytes: i64,
    pub keys: Keys,
    pub counters: Counters,
    pub notes: IndexMap<String, i64>,
    pub record_changes: bool,
    pub last_seq: Option<i64>,
    pub last_ts_ms: Option<i64>,
    /// history rows not drained yet
    pub(crate) tables: HistoryTables,
    /// open MULTI blocks per client -> (the MULTI's seq, the unit's "now": None until
    /// its first command, and on 7.0 always); in insertion order, as Python's dict
    pub(crate) units: IndexMap<Option<String>, (i64, Option<i64>)>,
    /// blocked readers in the order they blocked
    pub(crate) blocked: Vec<BlockedRead>,
    /// keys signalled since the last serve, each with the last write that signalled it
    pub(crate) ready: IndexMap<(i64, String), Option<Trigger>>,
    /// records of groups that ended (db, key, group, created_seq, id, record)
    pub closed: Vec<ClosedRecord>,
    pub spill_closed_records: bool,
    pub segment_n: i64,
    /// the script whose `lua` rows follow: its clock and its unit
    pub(crate) script_now: Option<i64>,
    pub(crate) script_unit: Option<i64>,
    /// the unit the last command ran in
    pub(crate) unit: Option<i64>,
    /// the last applied command (its seq and now)
    pub(crate) call: Option<Trigger>,
    /// the whole call (as the command left it) of every trigger `call` and `ready`
    /// refer to, by `Trigger::id`: what `persist` saves of them (Python keeps the
    /// `Call` objects themselves)
    pub(crate) call_log: Vec<(u64, Call)>,
    /// an internal error of `client_activity` (which returns nothing), reported by the
    /// next `apply` or `settle`
    pub(crate) deferred_error: Option<String>,
    /// calls the log forgot, kept for their buffers: the next commands' `Call`s refill
    /// them instead of allocating every argument afresh (no state: never saved)
    spare_calls: Vec<Call>,
    /// the buffer `apply` upper-cases command names into
    name_buf: String,
}

impl Replayer {
    /// A replayer for `profile` (resolved by the caller: see `Profile`).
    pub fn new(
        profile: Profile,
        record_changes: bool,
        node_max_entries: i64,
        node_max_bytes: i64,
        spill_closed_records: bool,
    ) -> Self {
        Replayer {
            profile,
            node_max_entries,
            node_max_bytes,
            keys: Keys::default(),
            counters: Counters::default(),
            notes: IndexMap::default(),
            record_changes,
            last_seq: None,
            last_ts_ms: None,
            tables: HistoryTables::default(),
            units: IndexMap::default(),
            blocked: Vec::new(),
            ready: IndexMap::default(),
            closed: Vec::new(),
            spill_closed_records,
            segment_n: 0,
            script_now: None,
            script_unit: None,
            unit: None,
            call: None,
            call_log: Vec::new(),
            deferred_error: None,
            spare_calls: Vec::new(),
            name_buf: String::new(),
        }
    }

    /// Python's defaults: recording changes, nodes of 100 entries and 4096 bytes, no
    /// spilling.
    pub fn with_defaults(profile: Profile) -> Self {
        Self::new(profile, true, 100, 4096, false)
    }

    fn model(&mut self) -> Model<'_> {
        Model {
            profile: &self.profile,
            node_max_entries: self.node_max_entries,
            node_max_bytes: self.node_max_bytes,
            keys: &mut self.keys,
            hist: Recorder {
                record_changes: self.record_changes,
                spill: self.spill_closed_records,
                tables: &mut self.tables,
                segment_n: &mut self.segment_n,
                closed: &mut self.closed,
            },
            waits: Waits {
                blocked: &mut self.blocked,
                ready: &mut self.ready,
                current: self.call,
                unit: self.unit,
                units: &self.units,
            },
        }
    }

    // -- applying commands -------------------------------------------------

    /// Apply one logged command; return whether it was applied, ignored or failed.
    ///
    /// `unit`: the execution unit the command ran in (see `place`), when the caller
    /// knows it: a replay that sees only some of the log's rows (one family) cannot
    /// tell it from them. `Unit::Follow`: the replayer follows the units itself.
    /// `db` None: 0. Err: what raises another exception than a command error in the
    /// Python model (the model is then as that exception left it).
    pub fn apply<S: AsRef<str>>(
        &mut self,
        seq: i64,
        ts_ms: i64,
        argv: &[S],
        db: Option<i64>,
        client: Option<&str>,
        unit: Unit,
    ) -> Result<Outcome, String> {
        if let Some(error) = self.deferred_error.take() {
            return Err(error);
        }
        let mut name = std::mem::take(&mut self.name_buf);
        fill_command_name(argv, &mut name);
        // the body returns through this closure, so that the name's buffer always goes back
        let outcome = (|| -> Result<Outcome, String> {
            let name = name.as_str();
            match self.counters.commands.get_mut(name) {
                Some(count) => bump(count),
                None => {
                    self.counters.commands.insert(name.to_owned(), 1);
                }
            }
            self.last_seq = Some(seq);
            self.last_ts_ms = Some(ts_ms);
            let (now, placed) = self.place(seq, name, ts_ms, client);
            self.enter(match unit {
                Unit::Follow => placed,
                Unit::Known(unit) => unit,
            })
            .map_err(Fail::into_raised)?;
            if !self.blocked.is_empty() {
                self.end_waits(ts_ms, client);
            }
            let mut entry = stream_command(name);
            let is_stream = entry.is_some();
            if entry.is_none() {
                entry = other_writer(name);
            }
            let Some((handler, arity)) = entry else {
                if NEWER_STREAM_COMMANDS.contains(&name) {
                    return Ok(self.fail("unknown_command"));
                }
                bump(&mut self.counters.ignored);
                return Ok(Outcome::ignored());
            };
            let argc = argv.len() as i64;
            if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
                if !is_stream {
                    bump(&mut self.counters.ignored);
                    return Ok(Outcome::ignored());
                }
                return Ok(self.fail("wrong_arity"));
            }
            let mut call = self.spare_calls.pop().unwrap_or_default();
            call.refill(seq, now, db.unwrap_or(0), client, argv, name);
            let trigger = Trigger::fresh(seq, now);
            self.call = Some(trigger);
            // inside a unit, keys signalled by its earlier commands stay signalled
            let before = if self.unit.is_some() && !self.ready.is_empty() {
                self.ready.clone()
            } else {
                IndexMap::default()
            };
            let result = {
                let mut m = self.model();
                let done = handler.run(&mut m, &call);
                done.and_then(|()| {
                    if !m.waits.ready.is_empty() && m.waits.unit.is_none() {
                        serve_ready(&mut m)
                    } else {
                        Ok(())
                    }
                })
            };
            let keyspace = KEYSPACE_COMMANDS.contains(&name);
            let touched = call.touched_stream.get();
            self.remember(trigger.id, call);
            match result {
                Err(Fail::Internal(message)) => Err(message),
                Err(Fail::Command(kind)) => {
                    self.ready = before;
                    if !is_stream || (keyspace && kind == "no_such_key") {
                        bump(&mut self.counters.ignored);
                        return Ok(Outcome::ignored());
                    }
                    Ok(self.fail(kind))
                }
                Ok(()) => {
                    if is_stream && (!keyspace || touched) {
                        bump(&mut self.counters.applied);
                        return Ok(Outcome::applied());
                    }
                    bump(&mut self.counters.ignored);
                    Ok(Outcome::ignored())
                }
            }
        })();
        self.name_buf = name;
        outcome
    }

    /// Keep the call a trigger names (as the command left it), and only the calls
    /// `call` and `ready` still refer to.
    fn remember(&mut self, id: u64, call: Call) {
        self.call_log.push((id, call));
        self.forget_calls();
    }

    pub(crate) fn forget_calls(&mut self) {
        if self.call_log.len() <= 1 && self.ready.is_empty() {
            return;
        }
        let current = self.call.map(|t| t.id);
        if self.ready.is_empty() {
            // the common case: only the current call is referred to
            let forgotten = self.call_log.extract_if(.., |(id, _)| Some(*id) != current);
            Self::keep_spares(&mut self.spare_calls, forgotten);
            return;
        }
        let mut kept: std::collections::HashSet<u64> =
            self.ready.values().flatten().map(|t| t.id).collect();
        kept.extend(current);
        let forgotten = self.call_log.extract_if(.., |(id, _)| !kept.contains(id));
        Self::keep_spares(&mut self.spare_calls, forgotten);
    }

    /// Keep a few forgotten calls for their buffers.
    fn keep_spares(spares: &mut Vec<Call>, forgotten: impl Iterator<Item = (u64, Call)>) {
        for (_, call) in forgotten {
            if spares.len() < SPARE_CALLS {
                spares.push(call);
            }
        }
    }

    /// The "now" of a command and the execution unit it belongs to (None: none).
    ///
    /// Units: what one client sends between `MULTI` and `EXEC`/`DISCARD` (named
    /// by the `MULTI`'s seq); and a script: its `EVAL`/`EVALSHA`/`FCALL` row
    /// followed by the rows of the commands it ran, client `lua`, as MONITOR shows
    /// them (named by the call row's seq, or by the transaction's when it ran inside
    /// one). A server runs a unit without running anything else, and serves blocked
    /// readers only once it ended; a read inside a unit never blocks.
    ///
    /// A 7.2+ server reads its clock once per unit, before the unit's first command:
    /// every command of the unit sees that one time (a transaction's first command's
    /// time; a script's call row's time). 7.0 reads the live clock on every call.
    fn place(
        &mut self,
        seq: i64,
        name: &str,
        ts_ms: i64,
        client: Option<&str>,
    ) -> (i64, Option<i64>) {
        let snapshot = self.profile.unit_time_snapshot;
        let mut ts_ms = ts_ms;
        if client == Some(LUA_CLIENT) {
            if snapshot {
                if let Some(script_now) = self.script_now {
                    ts_ms = script_now;
                }
            }
            return (ts_ms, self.script_unit);
        }
        let owner = client.map(str::to_string);
        let mut unit = None;
        if name == "MULTI" {
            self.units.insert(owner, (seq, None));
        } else if name == "EXEC" || name == "DISCARD" {
            self.units.shift_remove(&owner);
        } else if let Some((multi, unit_now)) = self.units.get_mut(&owner) {
            unit = Some(*multi);
            if snapshot {
                match unit_now {
                    None => *unit_now = Some(ts_ms),
                    Some(at) => ts_ms = *at,
                }
            }
        }
        // a script's rows follow its call row; any other client's row ends them
        if SCRIPT_CALLS.contains(&name) {
            self.script_now = Some(ts_ms);
            self.script_unit = Some(unit.unwrap_or(seq));
            unit = self.script_unit;
        } else {
            self.script_now = None;
            self.script_unit = None;
        }
        (ts_ms, unit)
    }

    /// The next command runs in `unit`: when the unit of the last one ended, the
    /// readers its writes unblocked are served first.
    fn enter(&mut self, unit: Option<i64>) -> Result<(), Fail> {
        if self.unit.is_some() && unit != self.unit {
            self.end_unit()?;
        }
        self.unit = unit;
        Ok(())
    }

    fn end_unit(&mut self) -> Result<(), Fail> {
        self.unit = None;
        if !self.ready.is_empty() {
            serve_ready(&mut self.model())?;
        }
        Ok(())
    }

    /// End the current execution unit: serve the readers its writes unblocked (the
    /// end of a log, or of the rows a caller has, ends a unit too).
    pub fn settle(&mut self) -> Result<(), String> {
        if let Some(error) = self.deferred_error.take() {
            return Err(error);
        }
        self.end_unit().map_err(Fail::into_raised)
    }

    /// Take over `other`'s keys, closed delivery records (or segments) and waiting
    /// clients.
    ///
    /// Used when new commands tie two families together (a RENAME or a multi-stream
    /// XREADGROUP across keys replayed apart until then): their keys are disjoint, so
    /// the union is the state one replay of both would have; waiting clients keep the
    /// order in which they blocked.
    pub fn absorb(&mut self, other: Replayer) {
        self.keys.extend(other.keys);
        self.closed.extend(other.closed);
        self.segment_n = self.segment_n.max(other.segment_n);
        self.tables.extend(other.tables);
        for (client, unit) in other.units {
            self.units.entry(client).or_insert(unit);
        }
        self.blocked.extend(other.blocked);
        self.blocked.sort_by_key(|b| b.seq);
        self.ready.extend(other.ready);
        self.call_log.extend(other.call_log);
        self.forget_calls();
        if let Some(other_seq) = other.last_seq {
            if self.last_seq.is_none_or(|seq| other_seq > seq) {
                self.last_seq = other.last_seq;
                self.last_ts_ms = other.last_ts_ms;
            }
        }
    }

    /// Start counting outcomes afresh (a saved model continuing in a new run).
    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
        self.notes = IndexMap::default();
    }

    fn fail(&mut self, kind: &str) -> Outcome {
        bump(&mut self.counters.failed);
        bump(self.counters.errors.entry(kind.to_string()).or_insert(0));
        Outcome {
            kind: "error",
            error: Some(kind.to_string()),
        }
    }

    /// Count something the run report should mention (not an error).
    pub fn note(&mut self, what: &str) {
        bump(self.notes.entry(what.to_string()).or_insert(0));
    }

    // -- blocked readers -------------------------------------------------------

    /// `client` sent a command this replay does not otherwise see (it touches other
    /// keys): a blocked connection sends nothing, so its wait here is over. `unit`:
    /// the execution unit of that command, as for `apply`.
    ///
    /// An internal error (see `apply`) while the unit it ends is settled is reported
    /// by the next `apply` or `settle`; `try_client_activity` reports it at once.
    pub fn client_activity(&mut self, ts_ms: i64, client: Option<&str>, unit: Unit) {
        if let Err(error) = self.try_client_activity(ts_ms, client, unit) {
            self.deferred_error.get_or_insert(error);
        }
    }

    /// `client_activity`, with its internal error.
    pub fn try_client_activity(
        &mut self,
        ts_ms: i64,
        client: Option<&str>,
        unit: Unit,
    ) -> Result<(), String> {
        if let Unit::Known(unit) = unit {
            self.enter(unit).map_err(Fail::into_raised)?;
        }
        if !self.blocked.is_empty() {
            self.end_waits(ts_ms, client);
        }
        Ok(())
    }

    /// The readers still waiting, in the order they blocked.
    pub fn blocked_clients(&self) -> &[BlockedRead] {
        &self.blocked
    }

    /// Before a command: waits past their timeout end, and so does the wait of the
    /// command's own client (a blocked connection sends nothing).
    fn end_waits(&mut self, now: i64, client: Option<&str>) {
        self.blocked.retain(|b| {
            b.deadline
                .is_none_or(|deadline| deadline >= i128::from(now))
                && (client.is_none() || b.client.as_deref() != client)
        });
    }

    // -- history -------------------------------------------------------------

    /// The history rows recorded since the last call, per output table
    /// (`history::HISTORY_TABLES`), column by column: `ownership_changes`, the closed
    /// `pel_history` versions (without `as_of_*`) and, spilling, the closed delivery
    /// segments and the group incarnations that ended. The open versions, segments
    /// and live incarnations are part of the snapshot.
    pub fn drain_tables(&mut self) -> HistoryTables {
        self.tables.take()
    }

    /// Give back the sinks `drain_tables` handed on, once their rows are read: the next
    /// rows fill their buffers instead of growing new ones from nothing (emptied first;
    /// ignored when rows were recorded since).
    pub fn recycle_tables(&mut self, mut room: HistoryTables) {
        if self.tables.is_empty() {
            room.clear();
            self.tables = room;
        }
    }

    /// How many history rows wait to be drained (every table).
    pub fn undrained_rows(&self) -> usize {
        self.tables.len()
    }

    /// Spilling, once the snapshot gave the open records as segments and the model is
    /// saved to continue later: each open record starts a new, empty segment, so that
    /// the next run's segments hold only what happens after this point (an untouched
    /// record's next segment carries no change: `changed_*` None).
    pub fn restart_open_records(&mut self) {
        bump(&mut self.segment_n);
        for value in self.keys.values_mut() {
            if let Value::Stream(stream) = value {
                for group in stream.groups.values_mut() {
                    for rec in group.records.values_mut() {
                        rec.deliveries = 0;
                        rec.owners.clear();
                        rec.first_delivery_ms = None;
                        rec.last_delivery_ms = None;
                        rec.changed_seq = None;
                        rec.changed_ms = None;
                    }
                }
            }
        }
    }

    /// How many delivery records the model holds (closed ones kept included).
    pub fn record_count(&self) -> usize {
        let mut held = self.closed.len();
        for value in self.keys.values() {
            if let Value::Stream(stream) = value {
                held += stream
                    .groups
                    .values()
                    .map(|g| g.records.len())
                    .sum::<usize>();
            }
        }
        held
    }

    // -- state -----------------------------------------------------------------

    /// Every live stream as (db, key, stream), ordered by db and key.
    pub fn streams(&self) -> Vec<(i64, &str, &Stream)> {
        let mut out: Vec<(i64, &str, &Stream)> = self
            .keys
            .iter()
            .filter_map(|((db, key), value)| match value {
                Value::Stream(stream) => Some((*db, key.as_str(), stream)),
                Value::Other(_) => None,
            })
            .collect();
        out.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        out
    }
}
