//! What goes wrong in a replay or a router, as data (`Failure`), and the panic guard.
//!
//! The words are pelengine's: a failure about an event becomes the exception
//! `pelengine.engine.errors` makes of its data (the module that words them for both
//! engines), a saved model that is no model `pelengine.model.persist`'s `StateError`
//! with the model's message. Only what this face says about its own input (an Arrow
//! column of the wrong type, an output schema missing, a call after a failed one) and
//! a fault of the core itself are worded here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pelmodel::persist::StateError;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The event a failure happened at, as the input had it.
#[derive(Clone, Debug, Default)]
pub struct Event {
    pub seq: Option<i64>,
    pub ts_ms: Option<i64>,
    /// None: the event had no argv
    pub argv: Option<Vec<String>>,
    pub db: Option<i64>,
}

/// An event as the wording functions take it: (seq, ts_ms, argv, db).
type EventArgs = (Option<i64>, Option<i64>, Option<Vec<String>>, Option<i64>);

impl Event {
    fn into_args(self) -> EventArgs {
        (self.seq, self.ts_ms, self.argv, self.db)
    }
}

/// The model or the router failed on an event: the exception's class (`kind`:
/// "ModelError", or "panic" for a fault of the core) and its message.
#[derive(Debug)]
pub struct Fault {
    pub event: Box<Event>,
    pub kind: &'static str,
    pub detail: String,
}

impl Fault {
    /// As the wording functions take it: (event, kind, detail).
    fn into_args(self) -> (EventArgs, &'static str, String) {
        (self.event.into_args(), self.kind, self.detail)
    }
}

/// What went wrong, as the Python exception it becomes.
#[derive(Debug)]
pub enum Failure {
    /// `SeqOrderError`: `seq` came after `last`
    SeqOrder { family: String, seq: i64, last: i64 },
    /// `ReplayRowError`: the model failed on an event of the family
    Row { family: String, fault: Fault },
    /// `ReplayRowError`: the model failed ending the last execution unit
    AtEnd { family: String, detail: String },
    /// `ReplayRowError`: the state tables could not be rendered
    Snapshot { family: String, detail: String },
    /// `ValueError`: an event without its `seq` or `ts_ms`
    Without {
        family: String,
        column: &'static str,
        event: Box<Event>,
    },
    /// `ValueError`: an event whose argument `index` is null
    NullArgument {
        family: String,
        seq: Option<i64>,
        index: usize,
    },
    /// `ReplayRowError`: the router failed on an event
    Routing(Fault),
    /// `ReplayRowError`: the router got an event whose argument `index` is null
    RoutingNullArgument { event: Box<Event>, index: usize },
    /// `ReplayRowError`: the model applied one event at a time (`Replayer`) failed on one
    Model(Fault),
    /// `ReplayRowError` with the model's message alone
    Plain(String),
    /// `TypeError`: an input column of the wrong type
    Type(String),
    /// `ValueError`: input this replay cannot take
    Value(String),
    /// `RuntimeError`: a bug here, or a call after a failed one
    Runtime(String),
    /// `StateError`/`StateVersionError`: a saved model that does not load, or a model
    /// that cannot be saved
    State(StateError),
}

impl Failure {
    /// The class of the exception this becomes (for "an earlier batch failed (...)").
    pub fn class_name(&self) -> &'static str {
        match self {
            Failure::SeqOrder { .. } => "SeqOrderError",
            Failure::Row { .. }
            | Failure::AtEnd { .. }
            | Failure::Snapshot { .. }
            | Failure::Routing(_)
            | Failure::RoutingNullArgument { .. }
            | Failure::Model(_)
            | Failure::Plain(_) => "ReplayRowError",
            Failure::Type(_) => "TypeError",
            Failure::Without { .. } | Failure::NullArgument { .. } | Failure::Value(_) => {
                "ValueError"
            }
            Failure::Runtime(_) => "RuntimeError",
            Failure::State(e) => e.class_name(),
        }
    }

    /// The Python exception.
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        self.raised(py).unwrap_or_else(|e| e)
    }

    fn raised(self, py: Python<'_>) -> PyResult<PyErr> {
        // the wording function of `pelengine.engine.errors`, and its arguments
        let (function, args) = match self {
            Failure::SeqOrder { family, seq, last } => {
                ("seq_order_error", (family, seq, last).into_pyobject(py)?)
            }
            Failure::Row { family, fault } => {
                let (event, kind, detail) = fault.into_args();
                (
                    "replay_row_error",
                    (family, event, kind, detail).into_pyobject(py)?,
                )
            }
            Failure::AtEnd { family, detail } => {
                ("replay_end_error", (family, detail).into_pyobject(py)?)
            }
            Failure::Snapshot { family, detail } => {
                ("snapshot_error", (family, detail).into_pyobject(py)?)
            }
            Failure::Without {
                family,
                column,
                event,
            } => (
                "event_without",
                (family, column, event.into_args()).into_pyobject(py)?,
            ),
            Failure::NullArgument { family, seq, index } => {
                ("replay_null_argv", (family, seq, index).into_pyobject(py)?)
            }
            Failure::Routing(fault) => ("routing_row_error", fault.into_args().into_pyobject(py)?),
            Failure::RoutingNullArgument { event, index } => (
                "routing_null_argv",
                (event.into_args(), index).into_pyobject(py)?,
            ),
            Failure::Model(fault) => ("model_row_error", fault.into_args().into_pyobject(py)?),
            Failure::Plain(message) => ("ReplayRowError", (message,).into_pyobject(py)?),
            Failure::Type(m) => return Ok(PyTypeError::new_err(m)),
            Failure::Value(m) => return Ok(PyValueError::new_err(m)),
            Failure::Runtime(m) => return Ok(PyRuntimeError::new_err(m)),
            Failure::State(e) => return Ok(state_error(py, e)),
        };
        let exception = errors_module(py)?.getattr(function)?.call1(args)?;
        Ok(PyErr::from_value(exception))
    }
}

/// The module that words the errors about events (`pelengine.engine.errors`).
pub fn errors_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("pelengine.engine.errors")
}

/// The module of the saved model's errors (`pelengine.model.persist`).
pub fn persist_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("pelengine.model.persist")
}

/// `StateError`/`StateVersionError` of `pelengine.model.persist`, with the model's message.
pub fn state_error(py: Python<'_>, e: StateError) -> PyErr {
    let (class, message) = match e {
        StateError::Version(m) => ("StateVersionError", m),
        StateError::Invalid(m) => ("StateError", m),
    };
    match persist_module(py).and_then(|m| m.getattr(class)?.call1((message,))) {
        Ok(exception) => PyErr::from_value(exception),
        Err(e) => e,
    }
}

/// The text of a panic's payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_owned()
    }
}

/// `f()`, a panic in it an `Err` with its text.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_text(p.as_ref()))
}

#[cfg(test)]
mod guard_tests {
    use super::guarded;

    #[test]
    fn a_panic_becomes_an_error_with_its_text() {
        // what a port bug on odd input would do: index past the end of a row's arguments
        let argv: Vec<i64> = std::hint::black_box(Vec::new());
        let at = std::hint::black_box(7);
        let caught = guarded(|| argv[at]);
        assert_eq!(
            caught,
            Err("index out of bounds: the len is 0 but the index is 7".to_owned())
        );
    }

    #[test]
    fn an_overflow_is_caught_too() {
        // overflow-checks are on in every profile this workspace builds with
        let big = std::hint::black_box(i64::MAX);
        let caught = guarded(|| big + 1);
        assert!(caught.is_err(), "{caught:?}");
    }

    #[test]
    fn a_value_passes_through() {
        assert_eq!(guarded(|| 41 + 1), Ok(42));
    }
}
