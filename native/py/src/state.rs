//! Keeping state: a family's saved model read from the replay input's `state` column
//! (`pelengine.schemas.SAVED_STATE_TYPE`) and written as the `state` table's row
//! (`STATE_TYPE`), and `row_digest`, the order-free digest of every row a family
//! received (the Python engine's are in `pelengine.engine.python.state`).
//!
//! Copies kept for speed: the state codec reads a saved model from Arrow straight into
//! the Rust model (a hot family's model holds millions of pending entries; through
//! Python objects it would cost what the replay saves), and `row_digest` runs once per
//! event when state is kept, which is why it words Python's `repr` itself
//! (`pelmodel::repr`). tests/native/test_state_native.py holds both equal to Python's:
//! states saved by either engine resumed by the other, digests of random and odd rows,
//! of every code point, and a corrupt saved state failing alike.
//!
//! A state saved by either engine loads in the other: the Arrow data is the plain data
//! of `pelengine.model.persist` (`pelmodel::persist::StateData`), and a saved state
//! that is no model fails with Python's `StateError`/`StateVersionError` message.

use std::fmt::Write;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{
    new_null_array, Array, ArrayRef, ArrowPrimitiveType, BooleanArray, GenericListArray,
    Int32Array, Int64Array, LargeStringArray, OffsetSizeTrait, RecordBatch, StringArray,
    StringViewArray, StructArray,
};
use arrow_buffer::{ArrowNativeType, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, FieldRef, SchemaRef};
use blake2::digest::consts::U8;
use blake2::{Blake2b, Digest};
use pelmodel::persist::{
    self, check_version_datum, BlockedRow, CallRow, ClosedRecordRow, ConsumerRow, CountRow, Datum,
    GroupRow, KeyRow, ModelRow, NodeRow, PendingRow, ReadyRow, RecordRow, Row, StateData,
    StateError, StateSections, StreamRow, UnitRow, STATE_SCHEMA,
};
use pelmodel::replay::Replayer;

use pelmodel::repr::py_repr;

use crate::input::ColumnTypeError;
use crate::profile::resolve_saved;

// ---- row_digest ------------------------------------------------------------------------------

/// Python's `repr((seq, ts_ms, argv, db, client, bool(marker)))`: what the Python engine's
/// `row_digest` hashes.
pub fn row_text<S: AsRef<str>>(
    seq: i64,
    ts_ms: i64,
    argv: Option<&[S]>,
    db: Option<i64>,
    client: Option<&str>,
    marker: bool,
) -> String {
    let mut text = String::with_capacity(64);
    let _ = write!(text, "({seq}, {ts_ms}, ");
    match argv {
        None => text.push_str("None"),
        Some(argv) => {
            text.push('[');
            for (i, arg) in argv.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                text.push_str(&py_repr(arg.as_ref()));
            }
            text.push(']');
        }
    }
    match db {
        None => text.push_str(", None, "),
        Some(db) => {
            let _ = write!(text, ", {db}, ");
        }
    }
    match client {
        None => text.push_str("None"),
        Some(client) => text.push_str(&py_repr(client)),
    }
    text.push_str(if marker { ", True)" } else { ", False)" });
    text
}

/// The Python engine's `row_digest`: a stable 63-bit digest of one replayed row (BLAKE2b of 8
/// bytes of `row_text`, big-endian, shifted right by one), XOR-ed into `agg_x`.
pub fn row_digest<S: AsRef<str>>(
    seq: i64,
    ts_ms: i64,
    argv: Option<&[S]>,
    db: Option<i64>,
    client: Option<&str>,
    marker: bool,
) -> i64 {
    let text = row_text(seq, ts_ms, argv, db, client, marker);
    let digest: [u8; 8] = Blake2b::<U8>::digest(text.as_bytes()).into();
    // >> 1: 63 bits, never negative
    (u64::from_be_bytes(digest) >> 1) as i64
}

// ---- reading a saved state -------------------------------------------------------------------

fn invalid(what: impl std::fmt::Display) -> StateError {
    StateError::Invalid(format!("a malformed saved model: {what}"))
}

/// The values of `col` in `range` as plain data (null where `parent` is null: Arrow's
/// struct validity, which pyarrow's `flatten` applies to the fields).
fn datums(
    col: &ArrayRef,
    range: Range<usize>,
    parent: Option<&NullBuffer>,
) -> Result<Vec<Datum>, StateError> {
    fn ints<T: ArrowPrimitiveType>(
        col: &ArrayRef,
        range: Range<usize>,
        int: impl Fn(T::Native) -> Option<i64>,
    ) -> Result<Vec<Datum>, StateError> {
        let a = col.as_primitive::<T>();
        range
            .map(|i| {
                if a.is_null(i) {
                    return Ok(Datum::Null);
                }
                int(a.value(i))
                    .map(Datum::Int)
                    .ok_or_else(|| invalid("an unsigned value beyond a long"))
            })
            .collect()
    }
    fn lists<O: OffsetSizeTrait>(
        col: &ArrayRef,
        range: Range<usize>,
    ) -> Result<Vec<Datum>, StateError> {
        let a = col.as_list::<O>();
        let offsets = a.value_offsets();
        let (Some(first), Some(last)) = (offsets.get(range.start), offsets.get(range.end)) else {
            return Ok(Vec::new());
        };
        let base = first.as_usize();
        let mut values = datums(a.values(), base..last.as_usize(), None)?.into_iter();
        let mut out = Vec::with_capacity(range.len());
        for i in range {
            let n = (offsets[i + 1] - offsets[i]).as_usize();
            let items: Vec<Datum> = values.by_ref().take(n).collect();
            out.push(if a.is_null(i) {
                Datum::Null
            } else {
                Datum::List(items)
            });
        }
        Ok(out)
    }
    fn strs<'a>(
        range: Range<usize>,
        get: impl Fn(usize) -> Option<&'a str>,
    ) -> Result<Vec<Datum>, StateError> {
        Ok(range
            .map(|i| get(i).map_or(Datum::Null, |s| Datum::Str(s.to_owned())))
            .collect())
    }
    let mut out = match col.data_type() {
        DataType::Null => vec![Datum::Null; range.len()],
        DataType::Int64 => ints::<Int64Type>(col, range.clone(), Some)?,
        DataType::Int32 => ints::<Int32Type>(col, range.clone(), |v| Some(v.into()))?,
        DataType::Int16 => ints::<Int16Type>(col, range.clone(), |v| Some(v.into()))?,
        DataType::Int8 => ints::<Int8Type>(col, range.clone(), |v| Some(v.into()))?,
        DataType::UInt64 => ints::<UInt64Type>(col, range.clone(), |v| i64::try_from(v).ok())?,
        DataType::UInt32 => ints::<UInt32Type>(col, range.clone(), |v| Some(v.into()))?,
        DataType::UInt16 => ints::<UInt16Type>(col, range.clone(), |v| Some(v.into()))?,
        DataType::UInt8 => ints::<UInt8Type>(col, range.clone(), |v| Some(v.into()))?,
        DataType::Boolean => {
            let a = col.as_boolean();
            range
                .clone()
                .map(|i| {
                    if a.is_null(i) {
                        Datum::Null
                    } else {
                        Datum::Bool(a.value(i))
                    }
                })
                .collect()
        }
        DataType::Utf8 => {
            let a = col.as_string::<i32>();
            strs(range.clone(), |i| a.is_valid(i).then(|| a.value(i)))?
        }
        DataType::LargeUtf8 => {
            let a = col.as_string::<i64>();
            strs(range.clone(), |i| a.is_valid(i).then(|| a.value(i)))?
        }
        DataType::Utf8View => {
            let a = col.as_string_view();
            strs(range.clone(), |i| a.is_valid(i).then(|| a.value(i)))?
        }
        DataType::List(_) => lists::<i32>(col, range.clone())?,
        DataType::LargeList(_) => lists::<i64>(col, range.clone())?,
        other => {
            return Err(invalid(format!(
                "TypeError: a field of Arrow type {other} (no value of the state schema)"
            )))
        }
    };
    if let Some(parent) = parent {
        for (value, i) in out.iter_mut().zip(range) {
            if parent.is_null(i) {
                *value = Datum::Null;
            }
        }
    }
    Ok(out)
}

/// One section of a saved state: its rows (a struct array) and where they are.
struct Section<'a> {
    rows: &'a StructArray,
    range: Range<usize>,
}

fn section_rows<R: Row>(sections: &[(String, Option<Section<'_>>)]) -> Result<Vec<R>, StateError> {
    let Some((_, Some(section))) = sections.iter().find(|(name, _)| name == R::SECTION) else {
        return Ok(Vec::new());
    };
    let n = section.range.len();
    let mut columns = Vec::with_capacity(R::FIELDS.len());
    for (name, _) in R::FIELDS {
        match section.rows.column_by_name(name) {
            Some(col) => {
                columns.push(datums(col, section.range.clone(), section.rows.nulls())?.into_iter())
            }
            None if n > 0 => return Err(invalid(format!("KeyError: {}", py_repr(name)))),
            None => columns.push(Vec::new().into_iter()),
        }
    }
    (0..n)
        .map(|_| {
            let values = columns
                .iter_mut()
                .map(|c| c.next().unwrap_or(Datum::Null))
                .collect();
            R::from_data(values).map_err(invalid)
        })
        .collect()
}

/// The `state` column of the replay's input (`SAVED_STATE_TYPE`; absent or all null: no
/// saved model).
pub struct SavedColumn<'a>(Option<&'a StructArray>);

impl<'a> SavedColumn<'a> {
    pub fn read(batch: &'a RecordBatch) -> Result<SavedColumn<'a>, ColumnTypeError> {
        match batch.column_by_name("state") {
            None => Ok(SavedColumn(None)),
            Some(col) => match col.data_type() {
                DataType::Null => Ok(SavedColumn(None)),
                DataType::Struct(_) => Ok(SavedColumn(
                    (col.null_count() < col.len()).then(|| col.as_struct()),
                )),
                other => Err(ColumnTypeError(format!(
                    "replay input column \"state\" must be a struct column (a saved model), \
                     not {other}"
                ))),
            },
        }
    }

    /// Whether row `i` carries a saved model.
    pub fn is_set(&self, i: usize) -> bool {
        self.0.is_some_and(|c| i < c.len() && c.is_valid(i))
    }

    fn field(&self, name: &str) -> Option<&'a ArrayRef> {
        self.0.and_then(|c| c.column_by_name(name))
    }

    fn int(&self, name: &str, i: usize) -> Result<Datum, StateError> {
        match self.field(name) {
            None => Ok(Datum::Null),
            Some(col) => Ok(datums(col, i..i + 1, None)?.pop().unwrap_or(Datum::Null)),
        }
    }

    /// Row `i`'s saved model as plain data, checked as Python's `persist.load` checks it
    /// (in its order, with its messages), and its `agg_n`/`agg_x` (0 where null).
    pub fn data(&self, i: usize) -> Result<(StateData, i64, i64), StateError> {
        let version = self.int("state_version", i)?;
        check_version_datum(&version)?;
        let state = match self.field("state") {
            Some(col) if col.is_valid(i) => match col.data_type() {
                DataType::Struct(_) => col.as_struct(),
                other => {
                    return Err(StateError::Invalid(format!(
                        "the saved model's state is no struct but an Arrow {other}"
                    )))
                }
            },
            _ => {
                return Err(StateError::Invalid(
                    "the saved model has no state".to_owned(),
                ))
            }
        };
        let mut sections: Vec<(String, Option<Section<'_>>)> = Vec::new();
        for (field, col) in state.fields().iter().zip(state.columns()) {
            let section = if col.is_null(i) {
                None
            } else {
                let (rows, range) = match col.data_type() {
                    DataType::List(_) => {
                        let list = col.as_list::<i32>();
                        let o = list.value_offsets();
                        (list.values(), o[i].as_usize()..o[i + 1].as_usize())
                    }
                    DataType::LargeList(_) => {
                        let list = col.as_list::<i64>();
                        let o = list.value_offsets();
                        (list.values(), o[i].as_usize()..o[i + 1].as_usize())
                    }
                    other => {
                        return Err(invalid(format!(
                            "TypeError: the section {} is no list but an Arrow {other}",
                            field.name()
                        )))
                    }
                };
                match rows.data_type() {
                    DataType::Struct(_) => Some(Section {
                        rows: rows.as_struct(),
                        range,
                    }),
                    other => {
                        return Err(invalid(format!(
                            "TypeError: the rows of the section {} are no structs but Arrow \
                             {other}",
                            field.name()
                        )))
                    }
                }
            };
            sections.push((field.name().clone(), section));
        }
        let missing: Vec<Datum> = STATE_SCHEMA
            .iter()
            .filter(|(name, _)| {
                !sections
                    .iter()
                    .any(|(n, section)| n == name && section.is_some())
            })
            .map(|(name, _)| Datum::Str((*name).to_owned()))
            .collect();
        let mut unknown: Vec<&str> = sections
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| !STATE_SCHEMA.iter().any(|(name, _)| name == n))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if !missing.is_empty() || !unknown.is_empty() {
            let unknown = unknown
                .iter()
                .map(|n| Datum::Str((*n).to_owned()))
                .collect();
            return Err(StateError::Invalid(format!(
                "the saved model's sections: missing {}, unknown {}",
                Datum::List(missing).py_repr(),
                Datum::List(unknown).py_repr()
            )));
        }
        let models = sections
            .iter()
            .find(|(n, _)| n == ModelRow::SECTION)
            .and_then(|(_, s)| s.as_ref())
            .map_or(0, |s| s.range.len());
        if models != 1 {
            return Err(StateError::Invalid(format!(
                "the model section has {models} rows, not one"
            )));
        }
        let state = StateSections {
            model: section_rows::<ModelRow>(&sections)?,
            counts: section_rows::<CountRow>(&sections)?,
            keys: section_rows::<KeyRow>(&sections)?,
            streams: section_rows::<StreamRow>(&sections)?,
            nodes: section_rows::<NodeRow>(&sections)?,
            groups: section_rows::<GroupRow>(&sections)?,
            consumers: section_rows::<ConsumerRow>(&sections)?,
            pending: section_rows::<PendingRow>(&sections)?,
            records: section_rows::<RecordRow>(&sections)?,
            closed_records: section_rows::<ClosedRecordRow>(&sections)?,
            units: section_rows::<UnitRow>(&sections)?,
            blocked: section_rows::<BlockedRow>(&sections)?,
            calls: section_rows::<CallRow>(&sections)?,
            ready: section_rows::<ReadyRow>(&sections)?,
        };
        let agg = |name: &str| -> Result<i64, StateError> {
            match self.int(name, i)? {
                Datum::Int(v) => Ok(v),
                _ => Ok(0),
            }
        };
        let data = StateData {
            state_version: persist::STATE_SCHEMA_VERSION,
            state,
        };
        Ok((data, agg("agg_n")?, agg("agg_x")?))
    }

    /// The Python engine's `load_state`: row `i`'s model (its counters zeroed) and its
    /// `agg_n`/`agg_x`; the profile it names resolved by pelengine's resolver.
    pub fn load(&self, i: usize) -> Result<(Replayer, i64, i64), StateError> {
        let (data, agg_n, agg_x) = self.data(i)?;
        let mut replayer = persist::load(&data, &resolve_saved)?;
        replayer.reset_counters();
        Ok((replayer, agg_n, agg_x))
    }
}

// ---- writing the state row -------------------------------------------------------------------

const NULL: Datum = Datum::Null;

/// `values` as an array of one primitive type: `pick` reads a value of that type (None:
/// a value of another type, refused with `wrong`); nulls stay null.
fn primitive<A, T>(
    values: &[&Datum],
    wrong: &dyn Fn(&Datum) -> String,
    pick: impl Fn(&Datum) -> Option<Result<T, String>>,
) -> Result<A, String>
where
    A: FromIterator<Option<T>>,
{
    values
        .iter()
        .map(|v| match v {
            Datum::Null => Ok(None),
            other => pick(other).unwrap_or_else(|| Err(wrong(other))).map(Some),
        })
        .collect()
}

/// An Arrow array of `dtype` holding `values` (ints, bools, strings, lists of those).
fn build(dtype: &DataType, values: &[&Datum]) -> Result<ArrayRef, String> {
    let wrong = |v: &Datum| format!("{} cannot be an Arrow {dtype}", v.py_repr());
    fn list<O: OffsetSizeTrait>(
        field: &FieldRef,
        values: &[&Datum],
        wrong: &dyn Fn(&Datum) -> String,
    ) -> Result<ArrayRef, String> {
        let mut offsets: Vec<O> = Vec::with_capacity(values.len() + 1);
        offsets.push(O::usize_as(0));
        let mut items: Vec<&Datum> = Vec::new();
        let mut valid = Vec::with_capacity(values.len());
        for v in values {
            match v {
                Datum::List(xs) => {
                    items.extend(xs.iter());
                    valid.push(true);
                }
                Datum::Null => valid.push(false),
                other => return Err(wrong(other)),
            }
            offsets.push(O::from_usize(items.len()).ok_or("a list too long for its offsets")?);
        }
        let child = build(field.data_type(), &items)?;
        let nulls = valid.contains(&false).then(|| NullBuffer::from(valid));
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        GenericListArray::<O>::try_new(field.clone(), offsets, child, nulls)
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| e.to_string())
    }
    Ok(match dtype {
        DataType::Int64 => Arc::new(primitive::<Int64Array, _>(values, &wrong, |v| match v {
            Datum::Int(x) => Some(Ok(*x)),
            _ => None,
        })?),
        DataType::Int32 => Arc::new(primitive::<Int32Array, _>(values, &wrong, |v| match v {
            Datum::Int(x) => Some(i32::try_from(*x).map_err(|_| wrong(v))),
            _ => None,
        })?),
        DataType::Boolean => Arc::new(primitive::<BooleanArray, _>(values, &wrong, |v| match v {
            Datum::Bool(x) => Some(Ok(*x)),
            _ => None,
        })?),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let strs = values
                .iter()
                .map(|v| match v {
                    Datum::Str(s) => Ok(Some(s.as_str())),
                    Datum::Null => Ok(None),
                    other => Err(wrong(other)),
                })
                .collect::<Result<Vec<Option<&str>>, String>>()?;
            match dtype {
                DataType::Utf8 => Arc::new(StringArray::from(strs)),
                DataType::LargeUtf8 => Arc::new(LargeStringArray::from(strs)),
                _ => Arc::new(StringViewArray::from(strs)),
            }
        }
        DataType::List(field) => list::<i32>(field, values, &wrong)?,
        DataType::LargeList(field) => list::<i64>(field, values, &wrong)?,
        DataType::Null if values.iter().all(|v| **v == Datum::Null) => {
            new_null_array(dtype, values.len())
        }
        other => return Err(format!("no state value is an Arrow {other}")),
    })
}

/// `data`'s sections as one value of `dtype` (`pelengine.schemas.STATE_TYPE`: a struct
/// of one list of row structs per section; a section or field the type does not name
/// is left out, one the data does not have is null).
pub fn state_array(data: &StateData, dtype: &DataType) -> Result<ArrayRef, String> {
    let DataType::Struct(section_fields) = dtype else {
        return Err(format!(
            "the state column is an Arrow {dtype}, not a struct"
        ));
    };
    let plain = data.to_plain();
    let mut lists = Vec::with_capacity(section_fields.len());
    for field in section_fields {
        let rows = plain
            .iter()
            .find(|(name, _)| name == field.name())
            .map(|(_, rows)| rows);
        let (row_type, large) = match field.data_type() {
            DataType::List(f) => (f, false),
            DataType::LargeList(f) => (f, true),
            other => {
                return Err(format!(
                    "the state section {} is an Arrow {other}",
                    field.name()
                ))
            }
        };
        let DataType::Struct(row_fields) = row_type.data_type() else {
            return Err(format!(
                "the rows of the state section {} are no structs",
                field.name()
            ));
        };
        let Some(rows) = rows else {
            lists.push(new_null_array(field.data_type(), 1));
            continue;
        };
        let mut children = Vec::with_capacity(row_fields.len());
        for row_field in row_fields {
            let at = rows
                .first()
                .and_then(|row| row.iter().position(|(n, _)| n == row_field.name()));
            let values: Vec<&Datum> = rows
                .iter()
                .map(|row| at.and_then(|j| row.get(j)).map_or(&NULL, |(_, v)| v))
                .collect();
            children.push(
                build(row_field.data_type(), &values)
                    .map_err(|e| format!("state {}.{}: {e}", field.name(), row_field.name()))?,
            );
        }
        let structs: ArrayRef = if row_fields.is_empty() {
            Arc::new(StructArray::new_empty_fields(rows.len(), None))
        } else {
            Arc::new(
                StructArray::try_new(row_fields.clone(), children, None)
                    .map_err(|e| e.to_string())?,
            )
        };
        let n = rows.len();
        let list: ArrayRef = if large {
            let offsets = OffsetBuffer::new(ScalarBuffer::from(vec![0_i64, n as i64]));
            Arc::new(
                GenericListArray::<i64>::try_new(row_type.clone(), offsets, structs, None)
                    .map_err(|e| e.to_string())?,
            )
        } else {
            let end = i32::try_from(n).map_err(|_| "a state section too long for a list")?;
            let offsets = OffsetBuffer::new(ScalarBuffer::from(vec![0_i32, end]));
            Arc::new(
                GenericListArray::<i32>::try_new(row_type.clone(), offsets, structs, None)
                    .map_err(|e| e.to_string())?,
            )
        };
        lists.push(list);
    }
    if section_fields.is_empty() {
        return Ok(Arc::new(StructArray::new_empty_fields(1, None)));
    }
    StructArray::try_new(section_fields.clone(), lists, None)
        .map(|a| Arc::new(a) as ArrayRef)
        .map_err(|e| e.to_string())
}

/// The values of the `state` table's row (`STATE_ROW_COLUMNS`).
pub struct StateRow<'a> {
    pub db: Option<i64>,
    pub family: Option<&'a str>,
    pub applied_seq: Option<i64>,
    pub data: &'a StateData,
    pub agg_n: i64,
    pub agg_x: i64,
    pub mark_n: i64,
    pub mark_x: i64,
}

/// The `state` table's row in `schema` (columns it does not know are null).
pub fn state_batch(schema: &SchemaRef, row: &StateRow<'_>) -> Result<RecordBatch, String> {
    let int = |v: Option<i64>| v.map_or(Datum::Null, Datum::Int);
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let dtype = field.data_type();
        let value = match field.name().as_str() {
            "state" => {
                columns.push(state_array(row.data, dtype)?);
                continue;
            }
            "db" => int(row.db),
            "family" => row.family.map_or(Datum::Null, |f| Datum::Str(f.to_owned())),
            "applied_seq" => int(row.applied_seq),
            "state_version" => Datum::Int(row.data.state_version),
            "agg_n" => Datum::Int(row.agg_n),
            "agg_x" => Datum::Int(row.agg_x),
            "mark_n" => Datum::Int(row.mark_n),
            "mark_x" => Datum::Int(row.mark_x),
            _ => Datum::Null,
        };
        let array = if value == Datum::Null {
            new_null_array(dtype, 1)
        } else {
            build(dtype, &[&value]).map_err(|e| format!("state.{}: {e}", field.name()))?
        };
        columns.push(array);
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_as_python_repr() {
        let argv: Vec<String> = ["XADD", "it's", "a\"b'c", "\\\n\u{7f}é\u{200b}"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            row_text(5, -1, Some(&argv), None, Some("c:1"), true),
            "(5, -1, ['XADD', \"it's\", 'a\"b\\'c', '\\\\\\n\\x7fé\\u200b'], None, 'c:1', True)"
        );
        assert_eq!(
            row_text::<String>(1, 2, None, Some(3), None, false),
            "(1, 2, None, 3, None, False)"
        );
        assert_eq!(
            row_text::<String>(1, 2, Some(&[]), Some(0), None, false),
            "(1, 2, [], 0, None, False)"
        );
    }

    #[test]
    fn digest_as_python() {
        // python: pelengine.engine.python.state.row_digest(1, 2, ["XADD", "s", "*"], 0, "c", False)
        let argv: Vec<String> = ["XADD", "s", "*"].iter().map(|s| s.to_string()).collect();
        let d = row_digest(1, 2, Some(&argv), Some(0), Some("c"), false);
        assert_eq!(d, 3064059252167670510);
    }
}
