//! The replay's input columns (`pelengine.schemas.REPLAY_INPUT_SCHEMA`), read in place
//! from an Arrow batch: a missing column reads as its default (as the Python engine's `column`),
//! a column of another type is an error naming it.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{
    Array, ArrayRef, BooleanArray, GenericListArray, GenericStringArray, OffsetSizeTrait,
    PrimitiveArray, RecordBatch, StringViewArray,
};
use arrow_data::ArrayData;
use arrow_schema::DataType;
use std::ops::Range;

/// An input column of the wrong type (a `TypeError` in Python).
#[derive(Debug)]
pub struct ColumnTypeError(pub String);

fn wrong(name: &str, wanted: &str, found: &DataType) -> ColumnTypeError {
    ColumnTypeError(format!(
        "replay input column {name:?} must be {wanted}, not {found}"
    ))
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a ArrayRef> {
    batch.column_by_name(name)
}

/// An integer column (any Arrow integer type) as optional i64s.
pub enum Ints<'a> {
    Missing,
    I64(&'a PrimitiveArray<Int64Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I16(&'a PrimitiveArray<Int16Type>),
    I8(&'a PrimitiveArray<Int8Type>),
    U64(&'a PrimitiveArray<UInt64Type>),
    U32(&'a PrimitiveArray<UInt32Type>),
    U16(&'a PrimitiveArray<UInt16Type>),
    U8(&'a PrimitiveArray<UInt8Type>),
    Null,
}

impl<'a> Ints<'a> {
    pub fn read(batch: &'a RecordBatch, name: &str) -> Result<Ints<'a>, ColumnTypeError> {
        let Some(col) = column(batch, name) else {
            return Ok(Ints::Missing);
        };
        Ok(match col.data_type() {
            DataType::Int64 => Ints::I64(col.as_primitive()),
            DataType::Int32 => Ints::I32(col.as_primitive()),
            DataType::Int16 => Ints::I16(col.as_primitive()),
            DataType::Int8 => Ints::I8(col.as_primitive()),
            DataType::UInt64 => Ints::U64(col.as_primitive()),
            DataType::UInt32 => Ints::U32(col.as_primitive()),
            DataType::UInt16 => Ints::U16(col.as_primitive()),
            DataType::UInt8 => Ints::U8(col.as_primitive()),
            DataType::Null => Ints::Null,
            other => return Err(wrong(name, "an integer column", other)),
        })
    }

    /// Row `i` (None: null or no column). A u64 beyond i64 reads as null.
    pub fn get(&self, i: usize) -> Option<i64> {
        fn at<T: arrow_array::ArrowPrimitiveType>(
            a: &PrimitiveArray<T>,
            i: usize,
        ) -> Option<T::Native> {
            (i < a.len() && a.is_valid(i)).then(|| a.value(i))
        }
        match self {
            Ints::Missing | Ints::Null => None,
            Ints::I64(a) => at(a, i),
            Ints::I32(a) => at(a, i).map(i64::from),
            Ints::I16(a) => at(a, i).map(i64::from),
            Ints::I8(a) => at(a, i).map(i64::from),
            Ints::U64(a) => at(a, i).and_then(|v| i64::try_from(v).ok()),
            Ints::U32(a) => at(a, i).map(i64::from),
            Ints::U16(a) => at(a, i).map(i64::from),
            Ints::U8(a) => at(a, i).map(i64::from),
        }
    }
}

/// A boolean column.
pub struct Bools<'a>(Option<&'a BooleanArray>);

impl<'a> Bools<'a> {
    pub fn read(batch: &'a RecordBatch, name: &str) -> Result<Bools<'a>, ColumnTypeError> {
        match column(batch, name) {
            None => Ok(Bools(None)),
            Some(col) => match col.data_type() {
                DataType::Boolean => Ok(Bools(Some(col.as_boolean()))),
                DataType::Null => Ok(Bools(None)),
                other => Err(wrong(name, "a boolean column", other)),
            },
        }
    }

    /// Row `i` (None: null or no column).
    pub fn get(&self, i: usize) -> Option<bool> {
        self.0
            .filter(|a| i < a.len() && a.is_valid(i))
            .map(|a| a.value(i))
    }
}

/// A string column (utf8, large_utf8 or utf8_view).
pub enum Strs<'a> {
    Missing,
    Small(&'a GenericStringArray<i32>),
    Large(&'a GenericStringArray<i64>),
    View(&'a StringViewArray),
}

impl<'a> Strs<'a> {
    pub fn read(batch: &'a RecordBatch, name: &str) -> Result<Strs<'a>, ColumnTypeError> {
        match column(batch, name) {
            None => Ok(Strs::Missing),
            Some(col) => Strs::of(col, name),
        }
    }

    fn of(col: &'a ArrayRef, name: &str) -> Result<Strs<'a>, ColumnTypeError> {
        Ok(match col.data_type() {
            DataType::Utf8 => Strs::Small(col.as_string()),
            DataType::LargeUtf8 => Strs::Large(col.as_string()),
            DataType::Utf8View => Strs::View(col.as_string_view()),
            DataType::Null => Strs::Missing,
            other => return Err(wrong(name, "a string column", other)),
        })
    }

    /// Row `i` (None: null or no column).
    pub fn get(&self, i: usize) -> Option<&'a str> {
        match self {
            Strs::Missing => None,
            Strs::Small(a) => (i < a.len() && a.is_valid(i)).then(|| a.value(i)),
            Strs::Large(a) => (i < a.len() && a.is_valid(i)).then(|| a.value(i)),
            Strs::View(a) => (i < a.len() && a.is_valid(i)).then(|| a.value(i)),
        }
    }
}

/// A list-of-strings column (`argv`): list or large_list of utf8/large_utf8/utf8_view.
pub enum StrLists<'a> {
    Missing,
    Small(&'a GenericListArray<i32>, Strs<'a>),
    Large(&'a GenericListArray<i64>, Strs<'a>),
}

/// One row of a list-of-strings column; `None` elements are nulls.
pub type StrList<'a> = Option<Vec<Option<&'a str>>>;

impl<'a> StrLists<'a> {
    pub fn read(batch: &'a RecordBatch, name: &str) -> Result<StrLists<'a>, ColumnTypeError> {
        let Some(col) = column(batch, name) else {
            return Ok(StrLists::Missing);
        };
        let wanted = "a list<string> column";
        Ok(match col.data_type() {
            DataType::List(_) => {
                let list = col.as_list::<i32>();
                let values = Strs::of(list.values(), name)
                    .map_err(|_| wrong(name, wanted, col.data_type()))?;
                StrLists::Small(list, values)
            }
            DataType::LargeList(_) => {
                let list = col.as_list::<i64>();
                let values = Strs::of(list.values(), name)
                    .map_err(|_| wrong(name, wanted, col.data_type()))?;
                StrLists::Large(list, values)
            }
            DataType::Null => StrLists::Missing,
            other => return Err(wrong(name, wanted, other)),
        })
    }

    /// Where row `i`'s strings are: the column's values and the row's span of them.
    /// None when the row is null, past the end, or there is no column.
    fn span(&self, i: usize) -> Option<(&Strs<'a>, Range<usize>)> {
        fn range_of<O: OffsetSizeTrait>(
            list: &GenericListArray<O>,
            i: usize,
        ) -> Option<Range<usize>> {
            if i >= list.len() || list.is_null(i) {
                return None;
            }
            let offsets = list.value_offsets();
            Some(offsets[i].as_usize()..offsets[i + 1].as_usize())
        }
        match self {
            StrLists::Missing => None,
            StrLists::Small(list, values) => range_of(list, i).map(|r| (values, r)),
            StrLists::Large(list, values) => range_of(list, i).map(|r| (values, r)),
        }
    }

    /// Row `i`'s strings into `out` (cleared first), borrowed from the batch: no copy of
    /// any argument. False when the row is null (or there is no column); `Err(j)` when
    /// its element `j` is null.
    pub fn fill(&self, i: usize, out: &mut Vec<&'a str>) -> Result<bool, usize> {
        out.clear();
        let Some((values, range)) = self.span(i) else {
            return Ok(false);
        };
        for (j, at) in range.enumerate() {
            out.push(values.get(at).ok_or(j)?);
        }
        Ok(true)
    }

    /// Row `i`'s strings into `out` (cleared first), null elements as `None`. False when
    /// the row is null (or there is no column).
    pub fn fill_nullable(&self, i: usize, out: &mut Vec<Option<&'a str>>) -> bool {
        out.clear();
        let Some((values, range)) = self.span(i) else {
            return false;
        };
        out.extend(range.map(|at| values.get(at)));
        true
    }

    /// Row `i`'s strings into `out` (cleared first; its strings are reused). False when
    /// the row is null (or there is no column); `Err(j)` when its element `j` is null
    /// (`out` then holds the row's strings before it, over the last row's).
    pub fn fill_owned(&self, i: usize, out: &mut Vec<String>) -> Result<bool, usize> {
        let Some((values, range)) = self.span(i) else {
            out.clear();
            return Ok(false);
        };
        let n = range.len();
        for (j, at) in range.enumerate() {
            let value = values.get(at).ok_or(j)?;
            if let Some(slot) = out.get_mut(j) {
                slot.clear();
                slot.push_str(value);
            } else {
                out.push(value.to_owned());
            }
        }
        out.truncate(n);
        Ok(true)
    }
}

/// The checks of `ArrayData::validate_full` on every column of an imported batch, with
/// a tight path for the strings that are most of its bytes (`argv`, `client`): one UTF-8
/// pass over the span the offsets cover and a char-boundary test per offset, instead of
/// the per-value iterator chain, which was an eighth of a replay's time. A column the
/// tight path does not accept (another type, or an invalid one) gets Arrow's own full
/// check, whose verdict stands and whose error names what is wrong.
pub fn check_batch(batch: &RecordBatch) -> Result<(), String> {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let data = column.to_data();
        if !tight_check(&data) {
            data.validate_full()
                .map_err(|e| format!("replay input column {:?}: {e}", field.name()))?;
        }
    }
    Ok(())
}

/// True when `data` (utf8, large_utf8, or a list/large_list of them) is valid; false
/// when it is not or is of another type (then Arrow's full check decides).
fn tight_check(data: &ArrayData) -> bool {
    if !structure_ok(data) {
        return false;
    }
    match data.data_type() {
        DataType::Utf8 => utf8_check::<i32>(data, 0, data.len()),
        DataType::LargeUtf8 => utf8_check::<i64>(data, 0, data.len()),
        DataType::List(_) => list_check::<i32>(data),
        DataType::LargeList(_) => list_check::<i64>(data),
        _ => false,
    }
}

/// Arrow's checks of buffer sizes and null counts (not of the values).
fn structure_ok(data: &ArrayData) -> bool {
    data.validate().is_ok() && data.validate_nulls().is_ok()
}

/// Offsets `from..=to` of `data` (from its offset), when they start at or above zero,
/// never decrease and end within `limit`: (first, last, those offsets).
fn offsets_within<O: OffsetSizeTrait>(
    data: &ArrayData,
    from: usize,
    to: usize,
    limit: usize,
) -> Option<(usize, usize, &[O])> {
    let all = data.buffers().first()?.typed_data::<O>();
    let at = data.offset().checked_add(from)?;
    let offsets = all.get(at..=data.offset().checked_add(to)?)?;
    let first = offsets.first()?.to_usize()?;
    let mut last = first;
    for o in offsets {
        let o = o.to_usize()?;
        if o < last {
            return None;
        }
        last = o;
    }
    (last <= limit).then_some((first, last, offsets))
}

/// Strings `from..to` of `data` are valid: offsets in order and within the values,
/// and the bytes they span UTF-8 cut only at character boundaries.
fn utf8_check<O: OffsetSizeTrait>(data: &ArrayData, from: usize, to: usize) -> bool {
    let Some(values) = data.buffers().get(1).map(|b| b.as_slice()) else {
        return false;
    };
    let Some((first, last, offsets)) = offsets_within::<O>(data, from, to, values.len()) else {
        return false;
    };
    let Ok(text) = std::str::from_utf8(&values[first..last]) else {
        return false;
    };
    offsets
        .iter()
        .all(|o| text.is_char_boundary(o.as_usize() - first))
}

/// A list of strings: its offsets, and the strings they reach (only those: a batch
/// sliced from a larger one shares the whole child array).
fn list_check<O: OffsetSizeTrait>(data: &ArrayData) -> bool {
    let Some(child) = data.child_data().first() else {
        return false;
    };
    let Some((first, last, _)) = offsets_within::<O>(data, 0, data.len(), child.len()) else {
        return false;
    };
    structure_ok(child)
        && match child.data_type() {
            DataType::Utf8 => utf8_check::<i32>(child, first, last),
            DataType::LargeUtf8 => utf8_check::<i64>(child, first, last),
            _ => false,
        }
}
