//! `Texts`: a column of optional strings packed end to end, as Arrow lays out a
//! string array (one buffer of bytes, one offset per row, a validity flag per row).
//!
//! The history sinks append several strings per output row (key, group, ID, command,
//! change, consumers): a `Vec<String>` per column would allocate each of them, and
//! the Arrow face would copy them all once more. Here a row appends its bytes to one
//! growing buffer, and the face hands that buffer to Arrow as it is.

use crate::ids::StreamId;

/// Optional strings, packed (see the module docs). Equal when the rows are equal.
#[derive(Clone, Debug, Default)]
pub struct Texts {
    /// every row's bytes, one after the other (a null row has none)
    bytes: String,
    /// `ends[i]`: where row `i`'s bytes end in `bytes` (it starts where `i - 1` ends)
    ends: Vec<usize>,
    /// `Some` once a null was appended: `valid[i]` is false for a null row
    valid: Option<Vec<bool>>,
}

impl Texts {
    pub fn new() -> Texts {
        Texts::default()
    }

    /// Room for `rows` rows of `bytes` bytes in all.
    pub fn with_capacity(rows: usize, bytes: usize) -> Texts {
        Texts {
            bytes: String::with_capacity(bytes),
            ends: Vec::with_capacity(rows),
            valid: None,
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// How many bytes the rows hold.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    fn end_row(&mut self, valid: bool) {
        self.ends.push(self.bytes.len());
        match (&mut self.valid, valid) {
            (Some(flags), _) => flags.push(valid),
            (None, true) => {}
            (None, false) => {
                let mut flags = vec![true; self.ends.len()];
                if let Some(last) = flags.last_mut() {
                    *last = false;
                }
                self.valid = Some(flags);
            }
        }
    }

    /// Append one row.
    pub fn push(&mut self, value: &str) {
        self.bytes.push_str(value);
        self.end_row(true);
    }

    /// Append one row that may be null.
    pub fn push_opt(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.push(value),
            None => self.end_row(false),
        }
    }

    /// Append an entry ID as Redis prints it, `"ms-seq"` (`ids::format_id`).
    pub fn push_id(&mut self, id: &StreamId) {
        push_decimal(&mut self.bytes, id.ms);
        self.bytes.push('-');
        push_decimal(&mut self.bytes, id.seq);
        self.end_row(true);
    }

    /// Row `i` (None: null, or no such row).
    pub fn get(&self, i: usize) -> Option<&str> {
        if !self.is_valid(i) {
            return None;
        }
        let end = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => *self.ends.get(before)?,
            None => 0,
        };
        self.bytes.get(start..end)
    }

    /// Whether row `i` is there and not null.
    pub fn is_valid(&self, i: usize) -> bool {
        i < self.len()
            && self
                .valid
                .as_ref()
                .is_none_or(|v| v.get(i).copied().unwrap_or(false))
    }

    /// The rows in order.
    pub fn iter(&self) -> impl Iterator<Item = Option<&str>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Append every row of `other`.
    pub fn extend(&mut self, other: Texts) {
        let base = self.bytes.len();
        let had = self.len();
        self.bytes.push_str(&other.bytes);
        self.ends.extend(other.ends.iter().map(|e| e + base));
        match (&mut self.valid, other.valid) {
            (None, None) => {}
            (Some(flags), None) => flags.resize(self.ends.len(), true),
            (Some(flags), Some(theirs)) => flags.extend(theirs),
            (None, Some(theirs)) => {
                let mut flags = vec![true; had];
                flags.extend(theirs);
                self.valid = Some(flags);
            }
        }
    }

    /// The rows at `keep` (in that order).
    pub fn subset(&self, keep: &[usize]) -> Texts {
        let mut out = Texts::with_capacity(keep.len(), 0);
        for &i in keep {
            out.push_opt(self.get(i));
        }
        out
    }

    /// The packed parts, borrowed: the bytes, where each row ends, and the validity
    /// flags (None: no row is null).
    pub fn parts(&self) -> (&str, &[usize], Option<&[bool]>) {
        (&self.bytes, &self.ends, self.valid.as_deref())
    }

    /// The packed parts: the bytes, where each row ends, and the validity flags (None:
    /// no row is null).
    pub fn into_parts(self) -> (String, Vec<usize>, Option<Vec<bool>>) {
        (self.bytes, self.ends, self.valid)
    }

    /// The rows as owned strings (for tests and small tables).
    pub fn to_vec(&self) -> Vec<Option<String>> {
        self.iter().map(|s| s.map(str::to_owned)).collect()
    }
}

/// `value` in decimal (as `{}` prints it, without the formatting machinery).
fn push_decimal(out: &mut String, mut value: u64) {
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    // ASCII digits: always UTF-8
    if let Ok(text) = std::str::from_utf8(&digits[at..]) {
        out.push_str(text);
    }
}

impl PartialEq for Texts {
    fn eq(&self, other: &Texts) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Texts {}

impl<S: AsRef<str>> FromIterator<Option<S>> for Texts {
    fn from_iter<I: IntoIterator<Item = Option<S>>>(iter: I) -> Texts {
        let mut out = Texts::new();
        for s in iter {
            out.push_opt(s.as_ref().map(AsRef::as_ref));
        }
        out
    }
}

/// Rows that are all present, compared with plain strings (`texts == ["a", "b"]`).
impl<const N: usize> PartialEq<[&str; N]> for Texts {
    fn eq(&self, other: &[&str; N]) -> bool {
        self.len() == N && self.iter().zip(other).all(|(a, b)| a == Some(*b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_nulls_and_ids() {
        let mut t = Texts::new();
        t.push("a");
        t.push("");
        t.push_opt(None);
        t.push_id(&StreamId::new(u64::MAX, 7));
        for v in [0, 9, 10, 1_700_000_000_123, u64::MAX] {
            let mut u = Texts::new();
            u.push_id(&StreamId::new(v, v / 3));
            assert_eq!(u.get(0), Some(format!("{v}-{}", v / 3).as_str()));
        }
        t.push("é");
        assert_eq!(t.len(), 5);
        assert_eq!(
            t.to_vec(),
            [
                Some("a".to_owned()),
                Some(String::new()),
                None,
                Some("18446744073709551615-7".to_owned()),
                Some("é".to_owned())
            ]
        );
        assert!(!t.is_valid(2) && t.is_valid(1) && !t.is_valid(9));
        assert_eq!(t.get(9), None);
        let mut u: Texts = [Some("x"), None].into_iter().collect();
        u.extend(t.clone());
        assert_eq!(u.len(), 7);
        assert_eq!(u.get(1), None);
        assert_eq!(u.get(4), None);
        assert_eq!(u.get(6), Some("é"));
        let mut v = Texts::new();
        v.push("p");
        v.extend(t.clone());
        assert_eq!(v.get(3), None);
        assert_eq!(v.get(0), Some("p"));
        assert_eq!(
            t.subset(&[4, 2, 0]).to_vec(),
            [Some("é".into()), None, Some("a".into())]
        );
        let mut w = Texts::new();
        w.push("a");
        w.push("b");
        assert_eq!(w, ["a", "b"]);
        assert_ne!(w, ["a"]);
    }
}
