//! The native engine's replay of one family of stream keys (`FamilyReplay`): Arrow
//! batches in, each output table's Arrow batches out. The Python engine's
//! (`pelengine.engine.python.family.FamilyReplay`) is the same loop over the Python
//! model, with the same interface; the replay UDF runs either.
//!
//! Why this loop is here twice: it is the hot path, once per event (reading the input
//! columns in place, applying the row, digesting it when state is kept); in Rust it
//! costs no Python object per event or per output row. The two are held equal by
//! tests/native (test_udf_equal, test_face, test_state_native).

use std::collections::{HashMap, HashSet};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use pelmodel::persist::{self, StateError};
use pelmodel::{command_name, Profile, Replayer, Unit};

use crate::cols::{Cols, Kind, Val, OUTPUT_BATCH_ROWS};
use crate::failure::{guarded, Event, Failure, Fault};
use crate::history::{history_back, history_cols};
use crate::input::{Bools, Ints, StrLists, Strs};
use crate::snapshot::snapshot_cols;
use crate::state::{row_digest, state_batch, SavedColumn, StateRow};

/// The tables a family replay emits, each needs its schema.
pub const OUTPUT_TABLES: [&str; 11] = [
    "ownership_changes",
    "pel_history",
    "delivery_segments",
    "group_incarnations",
    "outcome",
    "pel",
    "ownership",
    "delivery_counts",
    "groups",
    "streams",
    "stats",
];

/// the history tables whose rows carry `as_of_*` (the snapshot's have it already)
const WITH_AS_OF: [&str; 2] = ["ownership_changes", "pel_history"];

const OUTCOME_COLUMNS: &[(&str, Kind)] = &[
    ("seq", Kind::Int),
    ("stat_command", Kind::Str),
    ("stat_kind", Kind::Str),
    ("stat_error", Kind::Str),
    ("stat_count", Kind::Int),
];
const STAT_COLUMNS: &[(&str, Kind)] = &[
    ("stat_command", Kind::Str),
    ("stat_kind", Kind::Str),
    ("stat_error", Kind::Str),
    ("stat_count", Kind::Int),
];

/// The settings of one family's replay.
pub struct FamilySpec {
    pub profile: Profile,
    pub node_max_entries: i64,
    pub node_max_bytes: i64,
    pub as_of_ms: i64,
    pub as_of_seq: i64,
    /// how errors name the family
    pub family: String,
    /// the groups of a unit of a family split by group (None: not split)
    pub own_groups: Option<Vec<String>>,
    pub schemas: HashMap<String, SchemaRef>,
    /// keep state (an incremental run): count and digest every row, emit the model as a
    /// `state` row at the end
    pub keep_state: bool,
    /// `mark_n`/`mark_x` count the rows with `seq <= mark_seq`
    pub mark_seq: Option<i64>,
    /// the family's key (db, family) the `state` row names
    pub state_key: (Option<i64>, Option<String>),
}

/// The keep-state counts (`agg_n`/`agg_x`, `mark_n`/`mark_x`).
#[derive(Default)]
struct Kept {
    /// a saved model seeded the replay
    seeded: bool,
    agg_n: i64,
    agg_x: i64,
    mark_n: i64,
    mark_x: i64,
}

/// One family's replay in progress.
pub struct Family {
    replayer: Replayer,
    family: String,
    own: Option<HashSet<String>>,
    schemas: HashMap<String, SchemaRef>,
    as_of_ms: i64,
    as_of_seq: i64,
    lead: bool,
    last_seq: Option<i64>,
    /// outcomes of fan-out events: rows drained per batch, counts kept for the stats
    fanout_outcomes: Cols,
    fanout_counts: Vec<((&'static str, Option<String>), i64)>,
    /// set once a call failed or `finish` ran: the replay cannot go on
    over: Option<String>,
    /// batches drained while a big input batch was applied (see `apply_batch`)
    early: Output,
    keep_state: bool,
    mark_seq: Option<i64>,
    state_key: (Option<i64>, Option<String>),
    kept: Kept,
}

pub type Output = Vec<(&'static str, RecordBatch)>;

impl Family {
    pub fn new(spec: FamilySpec) -> Result<Family, Failure> {
        let missing: Vec<&str> = OUTPUT_TABLES
            .iter()
            .copied()
            .filter(|t| !spec.schemas.contains_key(*t))
            .collect();
        if !missing.is_empty() {
            return Err(Failure::Value(format!(
                "FamilyReplay needs the schema of every output table: {missing:?} missing"
            )));
        }
        if spec.keep_state && !spec.schemas.contains_key("state") {
            return Err(Failure::Value(
                "FamilyReplay(keep_state=True) needs the schema of the state table".to_owned(),
            ));
        }
        let replayer = Replayer::new(
            spec.profile,
            true,
            spec.node_max_entries,
            spec.node_max_bytes,
            true,
        );
        Ok(Family {
            replayer,
            family: spec.family,
            own: spec.own_groups.map(|g| g.into_iter().collect()),
            schemas: spec.schemas,
            as_of_ms: spec.as_of_ms,
            as_of_seq: spec.as_of_seq,
            lead: true,
            last_seq: None,
            fanout_outcomes: Cols::new(OUTCOME_COLUMNS),
            fanout_counts: Vec::new(),
            over: None,
            early: Vec::new(),
            keep_state: spec.keep_state,
            mark_seq: spec.mark_seq,
            state_key: spec.state_key,
            kept: Kept::default(),
        })
    }

    fn check_open(&self) -> Result<(), Failure> {
        match &self.over {
            Some(why) => Err(Failure::Runtime(format!(
                "the replay of {} cannot go on: {why}",
                self.family
            ))),
            None => Ok(()),
        }
    }

    /// Apply the rows of `batch`; the history they made (and the fan-out outcomes).
    pub fn feed(&mut self, batch: &RecordBatch) -> Result<Output, Failure> {
        self.check_open()?;
        let result = self.apply_batch(batch).and_then(|()| self.drained());
        let result = result.map(|rest| {
            let mut out = std::mem::take(&mut self.early);
            out.extend(rest);
            out
        });
        if let Err(e) = &result {
            self.over = Some(format!("an earlier batch failed ({})", e.class_name()));
        }
        result
    }

    /// End the replay: the history the last unit made, the state tables and the stats.
    pub fn finish(&mut self) -> Result<Output, Failure> {
        self.check_open()?;
        self.over = Some("finish() ran".to_owned());
        let family = self.family.clone();
        // the family's last execution unit ends with its rows: readers it unblocked
        guarded(|| self.replayer.settle())
            .map_err(|p| Failure::Runtime(format!("replay of {family} panicked: {p}")))?
            .map_err(|detail| Failure::AtEnd {
                family: family.clone(),
                detail,
            })?;
        let mut out = self.drained()?;
        let (ms, seq) = (self.as_of_ms, self.as_of_seq);
        let tables = guarded(|| snapshot_cols(&mut self.replayer, ms, seq))
            .map_err(|p| Failure::Runtime(format!("snapshot of {family} panicked: {p}")))?
            .map_err(|detail| Failure::Snapshot {
                family: family.clone(),
                detail,
            })?;
        for (table, cols) in tables {
            let cols = cols.owned(self.own.as_ref(), self.lead);
            self.emit(&mut out, table, &cols, false)?;
        }
        let stats = stat_cols(&self.replayer, &self.fanout_counts);
        self.emit(&mut out, "stats", &stats, false)?;
        if self.keep_state {
            out.push(("state", self.state_row()?));
        }
        Ok(out)
    }

    /// The model as the `state` table's row (the open records were emitted as
    /// segments, the saved model counts anew).
    fn state_row(&mut self) -> Result<RecordBatch, Failure> {
        let family = &self.family;
        let replayer = &mut self.replayer;
        let data = guarded(|| {
            replayer.restart_open_records();
            persist::dump(replayer)
        })
        .map_err(|p| Failure::Runtime(format!("saving the model of {family} panicked: {p}")))?
        .map_err(|e| Failure::State(StateError::Invalid(e)))?;
        let schema = self
            .schemas
            .get("state")
            .ok_or_else(|| Failure::Runtime("no schema for the table state".to_owned()))?;
        let row = StateRow {
            db: self.state_key.0,
            family: self.state_key.1.as_deref(),
            applied_seq: self.last_seq,
            data: &data,
            agg_n: self.kept.agg_n,
            agg_x: self.kept.agg_x,
            mark_n: self.kept.mark_n,
            mark_x: self.kept.mark_x,
        };
        state_batch(schema, &row)
            .map_err(|e| Failure::Value(format!("replay of {family}: the state row: {e}")))
    }

    /// A row carrying a saved model (saved models sort first, at their last
    /// applied seq; several of them: families that new commands tie together, merged).
    fn seed(&mut self, saved: &SavedColumn<'_>, i: usize, seq: Option<i64>) -> Result<(), Failure> {
        let family = &self.family;
        let (loaded, n, x) = guarded(|| saved.load(i))
            .map_err(|p| Failure::Runtime(format!("loading the model of {family} panicked: {p}")))?
            .map_err(Failure::State)?;
        let kept = &mut self.kept;
        if kept.seeded {
            self.replayer.absorb(loaded);
            kept.agg_n = kept.agg_n.wrapping_add(n);
            kept.agg_x ^= x;
        } else {
            self.replayer = loaded;
            kept.agg_n = n;
            kept.agg_x = x;
        }
        kept.seeded = true;
        self.last_seq = match (seq, self.last_seq) {
            (Some(seq), Some(last)) => Some(seq.max(last)),
            (seq, last) => seq.or(last),
        };
        Ok(())
    }

    fn apply_batch(&mut self, batch: &RecordBatch) -> Result<(), Failure> {
        let n = batch.num_rows();
        let type_error = |e: crate::input::ColumnTypeError| Failure::Type(e.0);
        let seqs = Ints::read(batch, "seq").map_err(type_error)?;
        let times = Ints::read(batch, "ts_ms").map_err(type_error)?;
        let argvs = StrLists::read(batch, "argv").map_err(type_error)?;
        let dbs = Ints::read(batch, "db").map_err(type_error)?;
        let clients = Strs::read(batch, "client").map_err(type_error)?;
        let fanouts = Bools::read(batch, "fanout").map_err(type_error)?;
        let markers = Bools::read(batch, "marker").map_err(type_error)?;
        let units = Ints::read(batch, "exec_unit").map_err(type_error)?;
        let leads = Bools::read(batch, "lead").map_err(type_error)?;
        let silents = Bools::read(batch, "silent").map_err(type_error)?;
        let saved = SavedColumn::read(batch).map_err(type_error)?;
        if batch.column_by_name("lead").is_some() && n > 0 {
            self.lead = leads.get(0).unwrap_or(false);
        }
        // each row's arguments borrowed from the batch (the model copies what it keeps)
        let mut argv: Vec<&str> = Vec::new();
        (|| {
            for i in 0..n {
                let seq = seqs.get(i);
                if saved.is_set(i) {
                    self.seed(&saved, i, seq)?;
                    continue;
                }
                let ts_ms = times.get(i);
                let db = dbs.get(i);
                let has_argv = argvs
                    .fill(i, &mut argv)
                    .map_err(|index| Failure::NullArgument {
                        family: self.family.clone(),
                        seq,
                        index,
                    })?;
                let (Some(seq), Some(ts_ms)) = (seq, ts_ms) else {
                    return Err(Failure::Without {
                        family: self.family.clone(),
                        column: if seq.is_none() { "seq" } else { "ts_ms" },
                        event: Box::new(Event {
                            seq,
                            ts_ms,
                            argv: has_argv.then(|| owned_argv(&argv)),
                            db,
                        }),
                    });
                };
                self.row(
                    seq,
                    ts_ms,
                    &argv,
                    has_argv,
                    db,
                    clients.get(i),
                    fanouts.get(i).unwrap_or(false),
                    markers.get(i).unwrap_or(false),
                    units.get(i),
                    silents.get(i).unwrap_or(false),
                )?;
                // hand the rows on in output-batch-sized pieces: the column buffers stay
                // small and are reused, instead of growing through fresh pages
                if self.replayer.undrained_rows() >= OUTPUT_BATCH_ROWS {
                    let part = self.drained()?;
                    self.early.extend(part);
                }
            }
            Ok(())
        })()
    }

    /// One input row.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        seq: i64,
        ts_ms: i64,
        argv: &[&str],
        has_argv: bool,
        db: Option<i64>,
        client: Option<&str>,
        fanout: bool,
        marker: bool,
        exec_unit: Option<i64>,
        silent: bool,
    ) -> Result<(), Failure> {
        if let Some(last) = self.last_seq {
            if seq <= last {
                return Err(Failure::SeqOrder {
                    family: self.family.clone(),
                    seq,
                    last,
                });
            }
        }
        self.last_seq = Some(seq);
        if self.keep_state {
            let digest = row_digest(seq, ts_ms, has_argv.then_some(argv), db, client, marker);
            let kept = &mut self.kept;
            kept.agg_n = kept.agg_n.wrapping_add(1);
            kept.agg_x ^= digest;
            if self.mark_seq.is_some_and(|mark| seq <= mark) {
                kept.mark_n = kept.mark_n.wrapping_add(1);
                kept.mark_x ^= digest;
            }
        }
        let unit = Unit::Known(exec_unit);
        let replayer = &mut self.replayer;
        let family = &self.family;
        let failed = |kind: &'static str, detail: String| Failure::Row {
            family: family.clone(),
            fault: Fault {
                event: Box::new(Event {
                    seq: Some(seq),
                    ts_ms: Some(ts_ms),
                    argv: has_argv.then(|| owned_argv(argv)),
                    db,
                }),
                kind,
                detail,
            },
        };
        if marker {
            return guarded(|| replayer.try_client_activity(ts_ms, client, unit))
                .map_err(|p| failed("panic", p))?
                .map_err(|e| failed("ModelError", e));
        }
        // a stream-level command in a group's unit: the lead unit counts it
        let counted = silent.then(|| {
            (
                std::mem::take(&mut replayer.counters),
                std::mem::take(&mut replayer.notes),
            )
        });
        let outcome = guarded(|| replayer.apply(seq, ts_ms, argv, db, client, unit));
        if let Some((counters, notes)) = counted {
            replayer.counters = counters;
            replayer.notes = notes;
        }
        let outcome = outcome
            .map_err(|p| failed("panic", p))?
            .map_err(|e| failed("ModelError", e))?;
        if silent || !fanout {
            return Ok(());
        }
        let name = command_name(argv);
        if let Some(count) = replayer.counters.commands.get_mut(&name) {
            *count -= 1;
        }
        let key = (outcome.kind, outcome.error.clone());
        match self.fanout_counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => self.fanout_counts.push((key, 1)),
        }
        self.fanout_outcomes.push([
            seq.into(),
            name.into(),
            outcome.kind.into(),
            outcome.error.into(),
            1_i64.into(),
        ]);
        Ok(())
    }

    /// What the replay recorded since the last call (and the fan-out outcomes), as output
    /// batches.
    fn drained(&mut self) -> Result<Output, Failure> {
        let family = &self.family;
        let tables = guarded(|| self.replayer.drain_tables())
            .map_err(|p| Failure::Runtime(format!("replay of {family} panicked: {p}")))?;
        let mut out = Vec::new();
        let read = history_cols(tables).map(|(table, cols)| {
            let cols = cols.owned(self.own.as_ref(), self.lead);
            (table, cols)
        });
        for (table, cols) in &read {
            self.emit(&mut out, table, cols, WITH_AS_OF.contains(table))?;
        }
        // the columns' buffers go back to the model for the next rows
        let read = read.map(|(_, cols)| cols);
        self.replayer.recycle_tables(history_back(read));
        let outcomes = std::mem::replace(&mut self.fanout_outcomes, Cols::new(OUTCOME_COLUMNS));
        self.emit(&mut out, "outcome", &outcomes, false)?;
        Ok(out)
    }

    fn emit(
        &self,
        out: &mut Output,
        table: &'static str,
        cols: &Cols,
        as_of: bool,
    ) -> Result<(), Failure> {
        if cols.is_empty() {
            return Ok(());
        }
        let schema = self
            .schemas
            .get(table)
            .ok_or_else(|| Failure::Runtime(format!("no schema for the table {table}")))?;
        let constants: &[(&str, i64)] = if as_of {
            &[("as_of_ms", self.as_of_ms), ("as_of_seq", self.as_of_seq)]
        } else {
            &[]
        };
        let batches = cols
            .to_batches(table, schema, constants)
            .map_err(|e| Failure::Value(format!("replay of {}: {e}", self.family)))?;
        out.extend(batches.into_iter().map(|b| (table, b)));
        Ok(())
    }
}

/// An event's arguments as the failure reports carry them.
fn owned_argv(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|a| (*a).to_owned()).collect()
}

/// Counters of the non-fan-out commands this replay applied, per command and outcome
/// (the Python engine's `stat_columns`): fan-out commands are counted once per event by
/// the pipeline, from `outcome` rows, so they are subtracted here. Built here as well
/// as in Python because `finish` hands every table on as Arrow, from the counters the
/// Rust model keeps; test_udf_equal and test_face hold the `stats` tables equal.
pub fn stat_cols(replayer: &Replayer, fanout: &[((&'static str, Option<String>), i64)]) -> Cols {
    let c = &replayer.counters;
    let mut rows = Cols::new(STAT_COLUMNS);
    let mut row = |cmd: &str, kind: &str, err: Option<&str>, n: i64| {
        rows.push([cmd.into(), kind.into(), err.into(), Val::from(n)]);
    };
    for (name, count) in c.commands.iter() {
        if *count != 0 {
            row(name, "seen", None, *count);
        }
    }
    let mut totals = [("applied", c.applied), ("ignored", c.ignored)];
    let mut errors: Vec<(String, i64)> = c.errors.iter().map(|(e, n)| (e.clone(), *n)).collect();
    for ((kind, error), n) in fanout {
        if let Some(total) = totals.iter_mut().find(|(k, _)| k == kind) {
            total.1 -= n;
        } else if *kind == "error" {
            if let Some(error) = error {
                match errors.iter_mut().find(|(e, _)| e == error) {
                    Some(count) => count.1 -= n,
                    None => errors.push((error.clone(), -n)),
                }
            }
        }
    }
    for (kind, count) in totals {
        if count != 0 {
            row("*", kind, None, count);
        }
    }
    for (error, count) in &errors {
        if *count != 0 {
            row("*", "error", Some(error), *count);
        }
    }
    for (note, count) in replayer.notes.iter() {
        row("*", "note", Some(note), *count);
    }
    rows
}
