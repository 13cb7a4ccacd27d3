//! The native engine's router (`Router`; the Python engine's is
//! `pelengine.engine.python.router.Router`): each event batch with the columns the
//! replay is grouped and fanned out by, computed in Rust from the Arrow batch in place.
//! Here as well as in Python because it runs once per event of the log, every event,
//! before any replay (tests/native/test_router_equal.py holds the two equal).
//!
//! Added columns, in this order: `command` (the upper-cased name), `scope`,
//! `families` (the families of the keys it touches, first seen first), `pre_kind` /
//! `pre_error` (for a row that reaches no stream's replay, the outcome a model that
//! saw only such rows gives it: one model per router, as in Python), `group` and
//! `group_only` (`routing::command_group`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use pelmodel::routing::{command_group, touched_keys, SCOPE_KEYS};
use pelmodel::{command_name, Profile, Replayer, Unit};

use crate::failure::{guarded, Event, Failure, Fault};
use crate::input::{Ints, StrLists};

/// One partition's router: the family of each linked key, and the model of the rows
/// that reach no stream.
pub struct Route {
    family_of: HashMap<(i64, String), String>,
    blank: Replayer,
    argv: Vec<String>,
}

impl Route {
    pub fn new(profile: Profile, family_of: HashMap<(i64, String), String>) -> Route {
        Route {
            family_of,
            blank: Replayer::new(profile, false, 100, 4096, false),
            argv: Vec::new(),
        }
    }

    /// `batch` with the routing columns appended.
    pub fn route(&mut self, batch: &RecordBatch) -> Result<RecordBatch, Failure> {
        let type_error = |e: crate::input::ColumnTypeError| Failure::Type(e.0);
        let n = batch.num_rows();
        let dbs = Ints::read(batch, "db").map_err(type_error)?;
        let argvs = StrLists::read(batch, "argv").map_err(type_error)?;
        let seqs = Ints::read(batch, "seq").map_err(type_error)?;
        let times = Ints::read(batch, "ts_ms").map_err(type_error)?;
        let mut commands = StringBuilder::with_capacity(n, n * 8);
        let mut scopes = StringBuilder::with_capacity(n, n * 4);
        let mut families = ListBuilder::new(StringBuilder::new());
        let mut kinds = StringBuilder::new();
        let mut errors = StringBuilder::new();
        let mut groups = StringBuilder::new();
        let mut group_only = BooleanBuilder::with_capacity(n);
        let mut argv = std::mem::take(&mut self.argv);
        let result = (|| {
            for i in 0..n {
                let db = dbs.get(i);
                let event = |argv: &[String]| {
                    Box::new(Event {
                        seq: seqs.get(i),
                        ts_ms: times.get(i),
                        argv: Some(argv.to_vec()),
                        db,
                    })
                };
                let fail = |kind: &'static str, detail: String, argv: &[String]| {
                    Failure::Routing(Fault {
                        event: event(argv),
                        kind,
                        detail,
                    })
                };
                argvs
                    .fill_owned(i, &mut argv)
                    .map_err(|index| Failure::RoutingNullArgument {
                        event: event(&argv),
                        index,
                    })?;
                let (scope, keys) = touched_keys(&argv);
                scopes.append_value(scope);
                commands.append_value(command_name(&argv));
                let mut seen: Vec<&str> = Vec::with_capacity(keys.len());
                for key in keys {
                    let family = db
                        .and_then(|db| self.family_of.get(&(db, key.to_owned())))
                        .map_or(key, String::as_str);
                    if !seen.contains(&family) {
                        seen.push(family);
                    }
                }
                for family in &seen {
                    families.values().append_value(family);
                }
                families.append(true);
                let (group, only) = command_group(&argv);
                groups.append_option(group);
                group_only.append_value(only);
                if scope == SCOPE_KEYS {
                    kinds.append_null();
                    errors.append_null();
                } else {
                    let blank = &mut self.blank;
                    let outcome = guarded(|| blank.apply(0, 0, &argv, db, None, Unit::Follow))
                        .map_err(|p| fail("panic", p, &argv))?
                        .map_err(|e| fail("ModelError", e, &argv))?;
                    kinds.append_value(outcome.kind);
                    errors.append_option(outcome.error.as_deref());
                }
            }
            Ok(())
        })();
        self.argv = argv;
        result?;
        let added: [(&str, ArrayRef, DataType); 7] = [
            ("command", Arc::new(commands.finish()), DataType::Utf8),
            ("scope", Arc::new(scopes.finish()), DataType::Utf8),
            (
                "families",
                Arc::new(families.finish()),
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            ),
            ("pre_kind", Arc::new(kinds.finish()), DataType::Utf8),
            ("pre_error", Arc::new(errors.finish()), DataType::Utf8),
            ("group", Arc::new(groups.finish()), DataType::Utf8),
            (
                "group_only",
                Arc::new(group_only.finish()),
                DataType::Boolean,
            ),
        ];
        let mut fields: Vec<Arc<Field>> = batch.schema().fields().iter().cloned().collect();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for (name, array, dtype) in added {
            fields.push(Arc::new(Field::new(name, dtype, true)));
            columns.push(array);
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| Failure::Runtime(format!("routed batch: {e}")))
    }
}
