//! Output rows column by column (`Cols`, the counterpart of Python's `calls.Columns`)
//! and their Arrow batches: in a schema the caller gives (`to_batches`, the Python
//! engine's `table_batches`), or in the types of `pelengine.schemas.REPLAY_COLUMN_TYPES`
//! (`to_batch`).
//!
//! Output building on the hot path (every history row of every event), so the native
//! engine builds its Arrow batches itself, from the model's packed columns, with no
//! Python object per row; test_udf_equal and test_face hold the batches of the two
//! engines equal, table by table.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::builder::{GenericListBuilder, GenericStringBuilder};
use arrow_array::{
    new_null_array, ArrayRef, BooleanArray, Int32Array, Int64Array, OffsetSizeTrait, RecordBatch,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use pelmodel::texts::Texts;

/// How many rows one output batch holds at most (the Python engine's
/// `OUTPUT_BATCH_ROWS`, `pelengine.engine.python.arrow`).
pub const OUTPUT_BATCH_ROWS: usize = 8192;

/// One column's values.
#[derive(Debug, Clone)]
pub enum Col {
    Int(Vec<Option<i64>>),
    /// integers without nulls (a model column handed over whole)
    I64(Vec<i64>),
    Str(Texts),
    Bool(Vec<Option<bool>>),
    /// booleans without nulls (a model column handed over whole)
    Flags(Vec<bool>),
    StrList(Vec<Option<Vec<String>>>),
}

/// The kind of a column (to start empty columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Str,
    Bool,
    StrList,
}

/// One value of a row (see `Cols::push`).
#[derive(Debug, Clone)]
pub enum Val {
    Int(Option<i64>),
    Str(Option<String>),
    Bool(Option<bool>),
    StrList(Option<Vec<String>>),
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::Int(Some(v))
    }
}
impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Self {
        Val::Int(v)
    }
}
impl From<usize> for Val {
    fn from(v: usize) -> Self {
        Val::Int(i64::try_from(v).ok())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::Str(Some(v))
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::Str(Some(v.to_owned()))
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        Val::Str(v)
    }
}
impl From<Option<&str>> for Val {
    fn from(v: Option<&str>) -> Self {
        Val::Str(v.map(str::to_owned))
    }
}
impl From<bool> for Val {
    fn from(v: bool) -> Self {
        Val::Bool(Some(v))
    }
}
impl From<Vec<String>> for Val {
    fn from(v: Vec<String>) -> Self {
        Val::StrList(Some(v))
    }
}

impl Col {
    pub fn empty(kind: Kind) -> Col {
        match kind {
            Kind::Int => Col::Int(Vec::new()),
            Kind::Str => Col::Str(Texts::new()),
            Kind::Bool => Col::Bool(Vec::new()),
            Kind::StrList => Col::StrList(Vec::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            Col::Int(v) => v.len(),
            Col::I64(v) => v.len(),
            Col::Str(v) => v.len(),
            Col::Bool(v) => v.len(),
            Col::Flags(v) => v.len(),
            Col::StrList(v) => v.len(),
        }
    }

    fn kind_name(&self) -> &'static str {
        match self {
            Col::Int(_) | Col::I64(_) => "integers",
            Col::Str(_) => "strings",
            Col::Bool(_) | Col::Flags(_) => "booleans",
            Col::StrList(_) => "lists of strings",
        }
    }

    /// Append one value; false when it is not of this column's kind (nothing appended).
    fn push(&mut self, value: Val) -> bool {
        match (self, value) {
            (Col::Int(c), Val::Int(v)) => c.push(v),
            (Col::Str(c), Val::Str(v)) => c.push_opt(v.as_deref()),
            (Col::Bool(c), Val::Bool(v)) => c.push(v),
            (Col::StrList(c), Val::StrList(v)) => c.push(v),
            _ => return false,
        }
        true
    }

    fn subset(&self, keep: &[usize]) -> Col {
        match self {
            Col::Int(v) => Col::Int(keep.iter().map(|&i| v[i]).collect()),
            Col::I64(v) => Col::I64(keep.iter().map(|&i| v[i]).collect()),
            Col::Str(v) => Col::Str(v.subset(keep)),
            Col::Bool(v) => Col::Bool(keep.iter().map(|&i| v[i]).collect()),
            Col::Flags(v) => Col::Flags(keep.iter().map(|&i| v[i]).collect()),
            Col::StrList(v) => Col::StrList(keep.iter().map(|&i| v[i].clone()).collect()),
        }
    }

    /// The type a column of this kind has in `REPLAY_COLUMN_TYPES` (`db` is an int).
    fn default_type(&self, name: &str) -> DataType {
        match self {
            Col::Int(_) | Col::I64(_) if name == "db" => DataType::Int32,
            Col::Int(_) | Col::I64(_) => DataType::Int64,
            Col::Str(_) => DataType::Utf8,
            Col::Bool(_) | Col::Flags(_) => DataType::Boolean,
            Col::StrList(_) => {
                DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)))
            }
        }
    }

    /// The values in `range` as an Arrow array of type `dtype`.
    fn array(&self, range: Range<usize>, dtype: &DataType) -> Result<ArrayRef, String> {
        let mismatch = || format!("{} cannot be written as {dtype}", self.kind_name());
        Ok(match (self, dtype) {
            (Col::Int(v), DataType::Int64) => {
                let v = &v[range];
                let values: Vec<i64> = v.iter().map(|x| x.unwrap_or_default()).collect();
                Arc::new(Int64Array::new(ScalarBuffer::from(values), nulls_of(v)))
            }
            (Col::I64(v), DataType::Int64) => {
                Arc::new(Int64Array::new(ScalarBuffer::from(v[range].to_vec()), None))
            }
            (Col::I64(v), DataType::Int32) => {
                let mut out = Vec::with_capacity(range.len());
                for x in &v[range] {
                    out.push(i32::try_from(*x).map_err(|_| format!("{x} does not fit an int32"))?);
                }
                Arc::new(Int32Array::new(ScalarBuffer::from(out), None))
            }
            (Col::Flags(v), DataType::Boolean) => Arc::new(BooleanArray::new(
                BooleanBuffer::from_iter(v[range].iter().copied()),
                None,
            )),
            (Col::Int(v), DataType::Int32) => {
                let mut out = Vec::with_capacity(range.len());
                for x in &v[range] {
                    out.push(match x {
                        Some(x) => Some(
                            i32::try_from(*x).map_err(|_| format!("{x} does not fit an int32"))?,
                        ),
                        None => None,
                    });
                }
                Arc::new(Int32Array::from(out))
            }
            (Col::Str(v), DataType::Utf8) => texts_array::<i32>(v, range)?,
            (Col::Str(v), DataType::LargeUtf8) => texts_array::<i64>(v, range)?,
            (Col::Bool(v), DataType::Boolean) => {
                Arc::new(BooleanArray::from_iter(v[range].iter().copied()))
            }
            (Col::StrList(v), DataType::List(child) | DataType::LargeList(child)) => {
                let lists = &v[range];
                let large = matches!(dtype, DataType::LargeList(_));
                match (large, child.data_type()) {
                    (false, DataType::Utf8) => string_lists::<i32, i32>(lists, child),
                    (false, DataType::LargeUtf8) => string_lists::<i32, i64>(lists, child),
                    (true, DataType::Utf8) => string_lists::<i64, i32>(lists, child),
                    (true, DataType::LargeUtf8) => string_lists::<i64, i64>(lists, child),
                    _ => return Err(mismatch()),
                }
            }
            _ => return Err(mismatch()),
        })
    }
}

/// The validity of optional values (None when every one is there).
fn nulls_of<T>(values: &[Option<T>]) -> Option<NullBuffer> {
    values
        .iter()
        .any(Option::is_none)
        .then(|| NullBuffer::from_iter(values.iter().map(Option::is_some)))
}

/// Rows `range` of packed strings as a (large) string array: their bytes copied at
/// once, offsets counted from the first row's start.
fn texts_array<O: OffsetSizeTrait>(texts: &Texts, range: Range<usize>) -> Result<ArrayRef, String> {
    let (bytes, ends, valid) = texts.parts();
    let too_big = || "strings too long for the offsets of this type".to_owned();
    let start = match range.start.checked_sub(1) {
        Some(before) => ends.get(before).copied().ok_or_else(too_big)?,
        None => 0,
    };
    let rows = ends
        .get(range.clone())
        .ok_or_else(|| "rows out of range".to_owned())?;
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(O::usize_as(0));
    for end in rows {
        offsets.push(O::from_usize(end - start).ok_or_else(too_big)?);
    }
    let stop = rows.last().copied().unwrap_or(start);
    let values = Buffer::from(bytes.get(start..stop).ok_or_else(too_big)?);
    let nulls = valid
        .and_then(|v| v.get(range))
        .map(|v| NullBuffer::from(v.to_vec()));
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    Ok(Arc::new(
        arrow_array::GenericStringArray::<O>::try_new(offsets, values, nulls)
            .map_err(|e| e.to_string())?,
    ))
}

/// Lists of strings as a (large) list array of (large) strings, its item field `child`.
fn string_lists<O: OffsetSizeTrait, S: OffsetSizeTrait>(
    lists: &[Option<Vec<String>>],
    child: &FieldRef,
) -> ArrayRef {
    let bytes = lists
        .iter()
        .map(|l| l.as_ref().map_or(0, |l| l.iter().map(String::len).sum()))
        .sum();
    let values = GenericStringBuilder::<S>::with_capacity(lists.len(), bytes);
    let mut builder = GenericListBuilder::<O, _>::new(values).with_field(child.clone());
    for list in lists {
        match list {
            Some(list) => {
                for s in list {
                    builder.values().append_value(s);
                }
                builder.append(true);
            }
            None => builder.append(false),
        }
    }
    Arc::new(builder.finish())
}

/// Rows of one output table, column by column (`names[i]` names `cols[i]`).
#[derive(Debug, Clone, Default)]
pub struct Cols {
    pub names: Vec<&'static str>,
    pub cols: Vec<Col>,
    /// a value pushed that did not fit its column (a bug here, reported by `check`)
    broken: Option<String>,
}

impl Cols {
    /// Empty columns of these names and kinds.
    pub fn new(spec: &[(&'static str, Kind)]) -> Cols {
        Cols {
            names: spec.iter().map(|(n, _)| *n).collect(),
            cols: spec.iter().map(|(_, k)| Col::empty(*k)).collect(),
            broken: None,
        }
    }

    /// Columns given whole (see `IntoCol`).
    pub fn from_cols(cols: Vec<(&'static str, Col)>) -> Cols {
        let (names, cols) = cols.into_iter().unzip();
        Cols {
            names,
            cols,
            broken: None,
        }
    }

    pub fn len(&self) -> usize {
        self.cols.first().map_or(0, Col::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One row: its values in the order of `names`.
    pub fn push<const N: usize>(&mut self, values: [Val; N]) {
        if N != self.cols.len() {
            self.broken
                .get_or_insert_with(|| format!("a row of {N} values for columns {:?}", self.names));
            return;
        }
        for (i, value) in values.into_iter().enumerate() {
            if !self.cols[i].push(value) {
                let name = self.names[i];
                self.broken
                    .get_or_insert_with(|| format!("a value of the wrong kind in column {name}"));
            }
        }
    }

    /// Whether every column has as many rows (and every value fitted its column).
    pub fn check(&self, table: &str) -> Result<(), String> {
        if let Some(why) = &self.broken {
            return Err(format!("{table} rows: {why}"));
        }
        let n = self.len();
        if let Some(i) = self.cols.iter().position(|c| c.len() != n) {
            return Err(format!(
                "{table} rows: column {} has {} values where {} has {n}",
                self.names[i],
                self.cols[i].len(),
                self.names[0]
            ));
        }
        Ok(())
    }

    pub fn column(&self, name: &str) -> Option<&Col> {
        self.names
            .iter()
            .position(|n| *n == name)
            .map(|i| &self.cols[i])
    }

    /// The rows at `keep` (in that order), as new columns.
    pub fn subset(&self, keep: &[usize]) -> Cols {
        Cols {
            names: self.names.clone(),
            cols: self.cols.iter().map(|c| c.subset(keep)).collect(),
            broken: self.broken.clone(),
        }
    }

    /// In a unit of a family split by group (`own`: its groups): the rows of its groups,
    /// and the rows of no group (tables without a `group` column) only in the lead unit
    /// (the Python engine's `FamilyReplay._owned`).
    pub fn owned(self, own: Option<&HashSet<String>>, lead: bool) -> Cols {
        let Some(own) = own else {
            return self;
        };
        match self.column("group") {
            Some(Col::Str(groups)) => {
                let keep: Vec<usize> = groups
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.is_some_and(|g| own.contains(g)))
                    .map(|(i, _)| i)
                    .collect();
                if keep.len() == groups.len() {
                    self
                } else {
                    self.subset(&keep)
                }
            }
            Some(_) => self,
            None if lead => self,
            None => self.subset(&[]),
        }
    }

    /// The rows as batches of `schema` (at most `OUTPUT_BATCH_ROWS` rows each): a field
    /// these columns give takes their values, a field `constants` names that value in
    /// every row, any other field is null (the Python engine's `table_batches`). Columns the schema
    /// lacks are left out. No batch when there are no rows.
    pub fn to_batches(
        &self,
        table: &str,
        schema: &SchemaRef,
        constants: &[(&str, i64)],
    ) -> Result<Vec<RecordBatch>, String> {
        self.check(table)?;
        let n = self.len();
        let mut out = Vec::with_capacity(n.div_ceil(OUTPUT_BATCH_ROWS));
        let mut start = 0;
        while start < n {
            let stop = (start + OUTPUT_BATCH_ROWS).min(n);
            let mut arrays: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
            for field in schema.fields() {
                let name = field.name().as_str();
                let dtype = field.data_type();
                let array = if let Some(col) = self.column(name) {
                    col.array(start..stop, dtype)
                        .map_err(|e| format!("{table} column {name}: {e}"))?
                } else if let Some((_, value)) = constants.iter().find(|(c, _)| *c == name) {
                    Col::I64(vec![*value; stop - start])
                        .array(0..stop - start, dtype)
                        .map_err(|e| format!("{table} column {name}: {e}"))?
                } else {
                    new_null_array(dtype, stop - start)
                };
                arrays.push(array);
            }
            let batch = RecordBatch::try_new(schema.clone(), arrays)
                .map_err(|e| format!("{table} rows do not fit its schema: {e}"))?;
            out.push(batch);
            start = stop;
        }
        Ok(out)
    }

    /// All rows as one batch of these columns, typed as in `REPLAY_COLUMN_TYPES`.
    pub fn to_batch(&self, table: &str) -> Result<RecordBatch, String> {
        self.check(table)?;
        let n = self.len();
        let mut fields = Vec::with_capacity(self.cols.len());
        let mut arrays = Vec::with_capacity(self.cols.len());
        for (name, col) in self.names.iter().zip(&self.cols) {
            let dtype = col.default_type(name);
            arrays.push(
                col.array(0..n, &dtype)
                    .map_err(|e| format!("{table} column {name}: {e}"))?,
            );
            fields.push(Field::new(*name, dtype, true));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .map_err(|e| format!("{table} rows: {e}"))
    }
}

/// A column the model hands over whole (a `Vec` of one of the value types it uses).
pub trait IntoCol {
    fn into_col(self) -> Col;
}

impl IntoCol for Vec<i64> {
    fn into_col(self) -> Col {
        Col::I64(self)
    }
}
impl IntoCol for Vec<Option<i64>> {
    fn into_col(self) -> Col {
        Col::Int(self)
    }
}
impl IntoCol for Vec<i32> {
    fn into_col(self) -> Col {
        Col::Int(self.into_iter().map(|v| Some(i64::from(v))).collect())
    }
}
impl IntoCol for Vec<Option<i32>> {
    fn into_col(self) -> Col {
        Col::Int(self.into_iter().map(|v| v.map(i64::from)).collect())
    }
}
impl IntoCol for Vec<u64> {
    fn into_col(self) -> Col {
        Col::Int(self.into_iter().map(|v| i64::try_from(v).ok()).collect())
    }
}
impl IntoCol for Vec<Option<u64>> {
    fn into_col(self) -> Col {
        Col::Int(
            self.into_iter()
                .map(|v| v.and_then(|v| i64::try_from(v).ok()))
                .collect(),
        )
    }
}
impl IntoCol for Texts {
    fn into_col(self) -> Col {
        Col::Str(self)
    }
}
impl IntoCol for Vec<String> {
    fn into_col(self) -> Col {
        Col::Str(self.into_iter().map(Some).collect())
    }
}
impl IntoCol for Vec<Option<String>> {
    fn into_col(self) -> Col {
        Col::Str(self.into_iter().collect())
    }
}
impl IntoCol for Vec<&'static str> {
    fn into_col(self) -> Col {
        Col::Str(self.into_iter().map(Some).collect())
    }
}
impl IntoCol for Vec<Option<&'static str>> {
    fn into_col(self) -> Col {
        Col::Str(self.into_iter().collect())
    }
}
impl IntoCol for Vec<bool> {
    fn into_col(self) -> Col {
        Col::Flags(self)
    }
}
impl IntoCol for Vec<Option<bool>> {
    fn into_col(self) -> Col {
        Col::Bool(self)
    }
}
impl IntoCol for Vec<Vec<String>> {
    fn into_col(self) -> Col {
        Col::StrList(self.into_iter().map(Some).collect())
    }
}
impl IntoCol for Vec<Option<Vec<String>>> {
    fn into_col(self) -> Col {
        Col::StrList(self)
    }
}

/// A column given back to the model's sink it came from (`IntoCol` the other way):
/// None when it is not of that sink's kind (a column made anew, e.g. by `owned`).
pub trait FromCol: Sized {
    fn from_col(col: Col) -> Option<Self>;
}

/// `FromCol` for sinks that are exactly one kind of `Col`: `from_col!(Vec<i64> => I64, ...)`.
macro_rules! from_col {
    ($($ty:ty => $kind:ident),* $(,)?) => {$(
        impl FromCol for $ty {
            fn from_col(col: Col) -> Option<Self> {
                match col {
                    Col::$kind(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}
from_col!(Vec<i64> => I64, Vec<Option<i64>> => Int, Vec<bool> => Flags, Texts => Str);
impl FromCol for Vec<Vec<String>> {
    fn from_col(_: Col) -> Option<Self> {
        None
    }
}

/// A column-wise sink back from the `Cols` `cols_of!` made of it (same fields, same
/// order), for its buffers: `sink_of!(cols; ChangeRows; db, key, ...)`. A column that
/// does not fit comes back empty.
#[macro_export]
macro_rules! sink_of {
    ($cols:expr; $ty:ident; $($field:ident),* $(,)?) => {{
        let mut cols = $cols.cols.into_iter();
        $ty {
            $($field: cols
                .next()
                .and_then($crate::cols::FromCol::from_col)
                .unwrap_or_default(),)*
        }
    }};
}

/// `Cols` of a column-wise sink whose fields are named like the output columns:
/// `cols_of!(rows; db, key, ...)`.
#[macro_export]
macro_rules! cols_of {
    ($rows:expr; $($field:ident),* $(,)?) => {{
        let rows = $rows;
        $crate::cols::Cols::from_cols(vec![
            $((stringify!($field), $crate::cols::IntoCol::into_col(rows.$field)),)*
        ])
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_follow_the_schema() -> Result<(), Box<dyn std::error::Error>> {
        let mut cols = Cols::new(&[("db", Kind::Int), ("key", Kind::Str), ("group", Kind::Str)]);
        for i in 0..10_000_i64 {
            cols.push([
                Val::from(i % 3),
                "k".into(),
                Some(format!("g{}", i % 2)).into(),
            ]);
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Utf8, true),
            Field::new("db", DataType::Int32, true),
            Field::new("as_of_ms", DataType::Int64, true),
            Field::new("lag", DataType::Int64, true),
        ]));
        let batches = cols.to_batches("t", &schema, &[("as_of_ms", 7)])?;
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].num_rows(), OUTPUT_BATCH_ROWS);
        assert_eq!(batches[1].num_rows(), 10_000 - OUTPUT_BATCH_ROWS);
        assert_eq!(
            batches[1].column(3).null_count(),
            10_000 - OUTPUT_BATCH_ROWS
        );
        let own: HashSet<String> = ["g1".to_owned()].into();
        assert_eq!(cols.clone().owned(Some(&own), false).len(), 5_000);
        assert_eq!(cols.owned(None, false).len(), 10_000);
        Ok(())
    }

    #[test]
    fn lists_of_every_width() -> Result<(), Box<dyn std::error::Error>> {
        let mut cols = Cols::new(&[("owner_names", Kind::StrList)]);
        cols.push([vec!["a".to_owned(), "b".to_owned()].into()]);
        cols.push([Val::StrList(None)]);
        for (list, item) in [
            (false, DataType::Utf8),
            (false, DataType::LargeUtf8),
            (true, DataType::Utf8),
            (true, DataType::LargeUtf8),
        ] {
            let child = Arc::new(Field::new("element", item, true));
            let dtype = if list {
                DataType::LargeList(child)
            } else {
                DataType::List(child)
            };
            let schema = Arc::new(Schema::new(vec![Field::new("owner_names", dtype, true)]));
            let batches = cols.to_batches("t", &schema, &[])?;
            assert_eq!(batches[0].column(0).null_count(), 1);
        }
        Ok(())
    }

    #[test]
    fn a_wrong_row_is_reported() {
        let mut cols = Cols::new(&[("db", Kind::Int)]);
        cols.push(["x".into()]);
        assert!(cols.check("t").is_err());
    }
}
