//! `pelengine_native`: the Python face of the native replay core (`pelmodel`), the
//! native engine of pelengine. Its interface is the one the Python engine
//! (`pelengine.engine.python`) has too, so that the replay UDF only picks one:
//!
//! * `FamilyReplay`: the replay of one family (keeping state or not), `feed(batch)`
//!   and `finish()`, Arrow record batches in and out through the Arrow C data
//!   interface (no Python object per event or per output row);
//! * `Router`: the routing columns of event batches, `route(batch)`;
//! * `Replayer`: the model one event at a time, for tests (the Python `Replayer`'s face).
//!
//! Each takes the version profile pelengine resolved (`profile`: the face reads its
//! fields). Its errors are pelengine's: `SeqOrderError` and `ReplayRowError` of
//! `pelengine.engine.errors`, worded there from the data of the failure (`failure`),
//! and `StateError`/`StateVersionError` of `pelengine.model.persist`. Every entry point
//! turns a Rust panic into a Python exception (`RuntimeError`), and input of the wrong
//! type into `TypeError`/`ValueError` naming the column.

// Library code never panics on input (the lints of `[workspace.lints]` in ../Cargo.toml).

pub mod cols;
pub mod digest;
pub mod failure;
pub mod family;
pub mod history;
pub mod input;
pub mod profile;
pub mod route;
pub mod snapshot;
pub mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_pyarrow::{FromPyArrowUnchecked, PyArrowType, ToPyArrow};
use arrow_schema::Schema;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::cols::Cols;
use crate::failure::{errors_module, guarded, persist_module, Event, Failure, Fault};
use crate::family::{Family, FamilySpec, Output};
use crate::history::history_cols;
use crate::profile::profile_of;
use crate::snapshot::snapshot_cols;

/// The API this module speaks (`pelengine.engine.native.NATIVE_ABI`): 2 since
/// `FamilyReplay` keeps state (`keep_state`, `mark_seq`, `state_key`), 3 since `Router`,
/// 4 since the profile comes resolved and the errors are pelengine's.
const ABI: i64 = 4;

/// Python's `repr` of strings (row digests, the saved model's messages) as this Python
/// prints them: when
/// its Unicode database is not the one of `printable.rs`, its unprintable code points
/// are listed once (a fraction of a second) and followed.
fn follow_python_unicode(py: Python<'_>) -> PyResult<()> {
    static CHECKED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if CHECKED.get().is_some() {
        return Ok(());
    }
    let version: String = py
        .import("unicodedata")?
        .getattr("unidata_version")?
        .extract()?;
    if version != pelmodel::printable::UNICODE_VERSION {
        let code = cr"
ranges = []
for c in range(0x110000):
    if not chr(c).isprintable():
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
ranges = [tuple(r) for r in ranges]
";
        let globals = PyDict::new(py);
        py.run(code, Some(&globals), None)?;
        let ranges: Vec<(u32, u32)> = globals
            .get_item("ranges")?
            .ok_or_else(|| PyRuntimeError::new_err("no unprintable ranges"))?
            .extract()?;
        pelmodel::repr::follow_python(ranges);
    }
    let _ = CHECKED.set(());
    Ok(())
}

fn runtime(what: &str) -> impl FnOnce(String) -> PyErr + '_ {
    move |p| PyRuntimeError::new_err(format!("{what} panicked: {p}"))
}

/// `[(table, pyarrow.RecordBatch), ...]`.
fn output_list<'py>(py: Python<'py>, out: Output) -> PyResult<Bound<'py, PyList>> {
    let items = out
        .into_iter()
        .map(|(table, batch)| -> PyResult<Bound<'py, PyTuple>> {
            let batch = batch.to_pyarrow(py)?;
            PyTuple::new(py, [table.into_pyobject(py)?.into_any(), batch])
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// `{table: pyarrow.RecordBatch}` of these columns, typed as in `REPLAY_COLUMN_TYPES`.
fn batch_dict<'py>(
    py: Python<'py>,
    tables: impl IntoIterator<Item = (&'static str, Cols)>,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (table, cols) in tables {
        let batch: RecordBatch = cols.to_batch(table).map_err(PyRuntimeError::new_err)?;
        out.set_item(table, batch.to_pyarrow(py)?)?;
    }
    Ok(out)
}

/// The replay of one family of stream keys (the native engine's; the Python engine's
/// is `pelengine.engine.python.FamilyReplay`, with the same interface).
///
/// `FamilyReplay(profile, node_max_entries, node_max_bytes, as_of_ms, as_of_seq, family,
/// own_groups, schemas, *, keep_state=False, mark_seq=None, state_key=None)`: `profile`
/// the resolved `Profile` (or a name pelengine resolves); `family` names the family in
/// error messages; `own_groups` the groups of a unit of a family
/// split by group (None: not split); `schemas` the Arrow schema of every output table.
///
/// A row whose `state` column (`SAVED_STATE_TYPE`) is set carries a saved model: the
/// first one seeds the replay, later ones are merged in (`StateError`,
/// `StateVersionError`: one that does not load, with Python's message). `keep_state`:
/// every other row is counted and digested (`agg_n`/`agg_x`, `mark_n`/`mark_x` for
/// `seq <= mark_seq`) and `finish` ends with the model as one `state` row (its `schemas`
/// entry needed), naming `state_key` = (db, family). `feed(batch)` applies a batch of the family's events
/// (in `seq` order) and returns the history it made, `finish()` the rest; both as a list
/// of `(table, pyarrow.RecordBatch)`, at most 8192 rows per batch.
#[pyclass(module = "pelengine_native")]
pub struct FamilyReplay {
    /// a Mutex only to make the class `Sync` (the model is `Send`, not `Sync`): `&mut
    /// self` reaches it with `get_mut`, never locking
    inner: Mutex<Family>,
}

#[pymethods]
impl FamilyReplay {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (profile, node_max_entries, node_max_bytes, as_of_ms, as_of_seq, family, own_groups, schemas, *, keep_state=false, mark_seq=None, state_key=None))]
    fn new(
        py: Python<'_>,
        profile: &Bound<'_, PyAny>,
        node_max_entries: i64,
        node_max_bytes: i64,
        as_of_ms: i64,
        as_of_seq: i64,
        family: String,
        own_groups: Option<Vec<String>>,
        schemas: HashMap<String, PyArrowType<Schema>>,
        keep_state: bool,
        mark_seq: Option<i64>,
        state_key: Option<(Option<i64>, Option<String>)>,
    ) -> PyResult<FamilyReplay> {
        if keep_state {
            follow_python_unicode(py)?;
        }
        let schemas = schemas
            .into_iter()
            .map(|(table, schema)| (table, Arc::new(schema.0)))
            .collect();
        let inner = Family::new(FamilySpec {
            profile: profile_of(profile)?,
            node_max_entries,
            node_max_bytes,
            as_of_ms,
            as_of_seq,
            family,
            own_groups,
            schemas,
            keep_state,
            mark_seq,
            state_key: state_key.unwrap_or((None, None)),
        })
        .map_err(|f| f.into_pyerr(py))?;
        Ok(FamilyReplay {
            inner: Mutex::new(inner),
        })
    }

    /// Apply the rows of `batch` (a `pyarrow.RecordBatch` of `REPLAY_INPUT_SCHEMA`
    /// columns); the history tables drained and the fan-out outcomes.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let batch = unchecked_batch(batch)?;
        let inner = exclusive(&mut self.inner);
        let out = py
            .detach(|| {
                guarded(|| {
                    crate::input::check_batch(&batch).map_err(Failure::Value)?;
                    inner.feed(&batch)
                })
            })
            .map_err(runtime("FamilyReplay.feed"))?
            .map_err(|f| f.into_pyerr(py))?;
        output_list(py, out)
    }

    /// End the replay: the last history, the state tables and the `stats` rows.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let inner = exclusive(&mut self.inner);
        let out = py
            .detach(|| guarded(|| inner.finish()))
            .map_err(runtime("FamilyReplay.finish"))?
            .map_err(|f| f.into_pyerr(py))?;
        output_list(py, out)
    }
}

/// The router of one partition (the native engine's; the Python engine's is
/// `pelengine.engine.python.Router`): `route(batch)` returns the batch with `command`, `scope`, `families`, `pre_kind`, `pre_error`, `group` and
/// `group_only` appended. `family_of`: `{(db, key): family}` of the keys that commands
/// tie together (a key not in it is its own family).
#[pyclass(module = "pelengine_native")]
pub struct Router {
    inner: Mutex<route::Route>,
}

#[pymethods]
impl Router {
    #[new]
    fn new(
        profile: &Bound<'_, PyAny>,
        family_of: HashMap<(i64, String), String>,
    ) -> PyResult<Router> {
        let inner = route::Route::new(profile_of(profile)?, family_of);
        Ok(Router {
            inner: Mutex::new(inner),
        })
    }

    fn route(
        &mut self,
        py: Python<'_>,
        batch: &Bound<'_, PyAny>,
    ) -> PyResult<PyArrowType<RecordBatch>> {
        let batch = unchecked_batch(batch)?;
        let inner = exclusive(&mut self.inner);
        let out = py
            .detach(|| {
                guarded(|| {
                    crate::input::check_batch(&batch).map_err(Failure::Value)?;
                    inner.route(&batch)
                })
            })
            .map_err(runtime("Router.route"))?
            .map_err(|f| f.into_pyerr(py))?;
        Ok(PyArrowType(out))
    }
}

/// `batch` (a `pyarrow.RecordBatch`) imported without copying and without Arrow's check;
/// every caller runs `input::check_batch` on it before anything reads it (Arrow's
/// `validate_full` checks, over the rows the batch has). The checked import
/// (`PyArrowType`) validates a list column's whole child array, which a batch sliced from
/// a larger table shares: each of a table's batches then cost the whole table, and a
/// 3M-event local run routed each 65k-row batch in 0.12 s instead of 0.02 s.
fn unchecked_batch(batch: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    // SAFETY: nothing reads the batch before `check_batch` has found every column valid
    // (see above and input.rs); an invalid one is an error.
    unsafe { RecordBatch::from_pyarrow_bound_unchecked(batch) }
}

/// `i64::MAX + n` computed inside the guard every entry point uses: for the test that a
/// fault in the core reaches Python as an exception and the interpreter goes on (release
/// builds unwind and check overflows, native/Cargo.toml). `n > 0` overflows: a panic,
/// raised as `RuntimeError`; a build that wrapped instead would return a negative.
#[pyfunction]
fn _overflow_for_test(n: i64) -> PyResult<i64> {
    let base = std::hint::black_box(i64::MAX);
    guarded(|| base + std::hint::black_box(n)).map_err(runtime("_overflow_for_test"))
}

/// Spark's `xxhash64("seq", "ts_ms", "argv", "db", "client", "source")` over the rows of
/// an events batch with the contract's types (`digest`), summed as the state's run row
/// keeps it: `(rows with a seq, XOR of their hashes, rows without one, largest seq)`.
#[pyfunction]
fn spark_digest(
    py: Python<'_>,
    batch: &Bound<'_, PyAny>,
) -> PyResult<(i64, i64, i64, Option<i64>)> {
    use crate::digest::{spark_hash, Value};
    use crate::input::{Ints, StrLists, Strs};
    let batch = unchecked_batch(batch)?;
    py.detach(|| {
        crate::input::check_batch(&batch).map_err(pyo3::exceptions::PyValueError::new_err)?;
        let type_error =
            |e: crate::input::ColumnTypeError| pyo3::exceptions::PyTypeError::new_err(e.0);
        let seq = Ints::read(&batch, "seq").map_err(type_error)?;
        let ts = Ints::read(&batch, "ts_ms").map_err(type_error)?;
        let argv = StrLists::read(&batch, "argv").map_err(type_error)?;
        let db = Ints::read(&batch, "db").map_err(type_error)?;
        let client = Strs::read(&batch, "client").map_err(type_error)?;
        let source = Strs::read(&batch, "source").map_err(type_error)?;
        let (mut n, mut x, mut null) = (0i64, 0i64, 0i64);
        let mut top: Option<i64> = None;
        let mut items: Vec<Option<&str>> = Vec::new();
        for i in 0..batch.num_rows() {
            let Some(s) = seq.get(i) else {
                null += 1;
                continue;
            };
            let has_argv = argv.fill_nullable(i, &mut items);
            let db_value = db.get(i).map(|v| i32::try_from(v).unwrap_or_default());
            x ^= spark_hash(&[
                Value::Long(Some(s)),
                Value::Long(ts.get(i)),
                Value::Strs(has_argv.then_some(items.as_slice())),
                Value::Int(db_value),
                Value::Str(client.get(i)),
                Value::Str(source.get(i)),
            ]);
            n += 1;
            top = Some(top.map_or(s, |t| t.max(s)));
        }
        Ok((n, x, null, top))
    })
}

/// The Python engine's `row_digest` (`pelengine.engine.python.state`): the 63-bit digest
/// of one replayed row XOR-ed into `agg_x` (for the test that holds the two equal).
#[pyfunction]
#[pyo3(signature = (seq, ts_ms, argv, db, client, marker))]
fn row_digest(
    py: Python<'_>,
    seq: i64,
    ts_ms: i64,
    argv: Option<Vec<String>>,
    db: Option<i64>,
    client: Option<&str>,
    marker: Option<bool>,
) -> PyResult<i64> {
    follow_python_unicode(py)?;
    Ok(state::row_digest(
        seq,
        ts_ms,
        argv.as_deref(),
        db,
        client,
        marker.unwrap_or(false),
    ))
}

/// The model one event at a time (the Python `pelengine.model.replay.Replayer`'s face).
#[pyclass(module = "pelengine_native", name = "Replayer")]
pub struct PyReplayer {
    /// as `FamilyReplay::inner`
    inner: Mutex<pelmodel::replay::Replayer>,
}

/// The value behind a `Mutex` reached through `&mut` (poisoned only by a panic while
/// locked, which `get_mut` never is).
fn exclusive<T>(m: &mut Mutex<T>) -> &mut T {
    match m.get_mut() {
        Ok(inner) => inner,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn unit_of(unit: Option<i64>, unit_known: bool) -> pelmodel::replay::Unit {
    if unit_known {
        pelmodel::replay::Unit::Known(unit)
    } else {
        pelmodel::replay::Unit::Follow
    }
}

#[pymethods]
impl PyReplayer {
    #[new]
    #[pyo3(signature = (profile, *, record_changes=true, node_max_entries=100, node_max_bytes=4096, spill_closed_records=false))]
    fn new(
        profile: &Bound<'_, PyAny>,
        record_changes: bool,
        node_max_entries: i64,
        node_max_bytes: i64,
        spill_closed_records: bool,
    ) -> PyResult<PyReplayer> {
        let inner = pelmodel::replay::Replayer::new(
            profile_of(profile)?,
            record_changes,
            node_max_entries,
            node_max_bytes,
            spill_closed_records,
        );
        Ok(PyReplayer {
            inner: Mutex::new(inner),
        })
    }

    /// Apply one logged command: `(kind, error)`, kind "applied", "ignored" or "error".
    /// `unit_known`: `unit` is the execution unit the caller knows (None: none); else the
    /// replayer follows the units itself.
    #[pyo3(signature = (seq, ts_ms, argv, db=Some(0), client=None, unit=None, unit_known=false))]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        py: Python<'_>,
        seq: i64,
        ts_ms: i64,
        argv: Vec<String>,
        db: Option<i64>,
        client: Option<&str>,
        unit: Option<i64>,
        unit_known: bool,
    ) -> PyResult<(&'static str, Option<String>)> {
        let unit = unit_of(unit, unit_known);
        let inner = exclusive(&mut self.inner);
        let outcome = guarded(|| inner.apply(seq, ts_ms, &argv, db, client, unit))
            .map_err(runtime("Replayer.apply"))?
            .map_err(|detail| {
                Failure::Model(Fault {
                    event: Box::new(Event {
                        seq: Some(seq),
                        ts_ms: Some(ts_ms),
                        argv: Some(argv.clone()),
                        db,
                    }),
                    kind: "ModelError",
                    detail,
                })
                .into_pyerr(py)
            })?;
        Ok((outcome.kind, outcome.error))
    }

    /// `client` sent a command this replay does not otherwise see.
    #[pyo3(signature = (ts_ms, client, unit=None, unit_known=false))]
    fn client_activity(
        &mut self,
        py: Python<'_>,
        ts_ms: i64,
        client: Option<&str>,
        unit: Option<i64>,
        unit_known: bool,
    ) -> PyResult<()> {
        let unit = unit_of(unit, unit_known);
        let inner = exclusive(&mut self.inner);
        guarded(|| inner.try_client_activity(ts_ms, client, unit))
            .map_err(runtime("Replayer.client_activity"))?
            .map_err(|e| Failure::Plain(e).into_pyerr(py))
    }

    /// End the current execution unit.
    fn settle(&mut self, py: Python<'_>) -> PyResult<()> {
        let inner = exclusive(&mut self.inner);
        guarded(|| inner.settle())
            .map_err(runtime("Replayer.settle"))?
            .map_err(|e| Failure::Plain(e).into_pyerr(py))
    }

    /// The history rows recorded since the last call: `{table: pyarrow.RecordBatch}` for
    /// ownership_changes, pel_history, delivery_segments and group_incarnations.
    fn drain_tables<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = exclusive(&mut self.inner);
        let tables = guarded(|| inner.drain_tables()).map_err(runtime("Replayer.drain_tables"))?;
        batch_dict(py, history_cols(tables))
    }

    /// The state tables (snapshot.py's `snapshot_columns`): `{table: pyarrow.RecordBatch}`.
    fn snapshot<'py>(
        &mut self,
        py: Python<'py>,
        as_of_ms: i64,
        as_of_seq: i64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inner = exclusive(&mut self.inner);
        let tables = guarded(|| snapshot_cols(inner, as_of_ms, as_of_seq))
            .map_err(runtime("Replayer.snapshot"))?
            .map_err(|e| Failure::Plain(e).into_pyerr(py))?;
        batch_dict(py, tables)
    }

    /// `{"applied", "ignored", "failed", "errors": {kind: n}, "commands": {name: n}}`.
    fn counters<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &exclusive(&mut self.inner).counters;
        let out = PyDict::new(py);
        out.set_item("applied", c.applied)?;
        out.set_item("ignored", c.ignored)?;
        out.set_item("failed", c.failed)?;
        let errors = PyDict::new(py);
        for (k, v) in c.errors.iter() {
            errors.set_item(k, v)?;
        }
        out.set_item("errors", errors)?;
        let commands = PyDict::new(py);
        for (k, v) in c.commands.iter() {
            commands.set_item(k, v)?;
        }
        out.set_item("commands", commands)?;
        Ok(out)
    }

    /// What the run report should mention: `{note: n}`.
    fn notes<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (k, v) in exclusive(&mut self.inner).notes.iter() {
            out.set_item(k, v)?;
        }
        Ok(out)
    }

    /// Spilling: each open record starts a new, empty segment.
    fn restart_open_records(&mut self) -> PyResult<()> {
        let inner = exclusive(&mut self.inner);
        guarded(|| inner.restart_open_records()).map_err(runtime("Replayer.restart_open_records"))
    }
}

#[pymodule]
fn pelengine_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ENGINE", "native")?;
    m.add("ABI", ABI)?;
    // pelengine's own exception classes: what this module raises
    let errors = errors_module(py)?;
    m.add("SeqOrderError", errors.getattr("SeqOrderError")?)?;
    m.add("ReplayRowError", errors.getattr("ReplayRowError")?)?;
    let persist = persist_module(py)?;
    m.add("StateError", persist.getattr("StateError")?)?;
    m.add("StateVersionError", persist.getattr("StateVersionError")?)?;
    m.add_function(wrap_pyfunction!(row_digest, m)?)?;
    m.add_function(wrap_pyfunction!(spark_digest, m)?)?;
    m.add_function(wrap_pyfunction!(_overflow_for_test, m)?)?;
    m.add_class::<FamilyReplay>()?;
    m.add_class::<Router>()?;
    m.add_class::<PyReplayer>()?;
    Ok(())
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
