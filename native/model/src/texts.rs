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
    /// every row's bytes, one after the other (a null row has none): UTF-8, as only
    /// `&str`s and IDs are appended
    bytes: Vec<u8>,
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
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(rows),
            valid: None,
        }
    }

    /// No rows, the room kept.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.valid = None;
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
        self.bytes.extend_from_slice(value.as_bytes());
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
        // written left to right into a buffer of fixed size, appended whole (a copy of a
        // known size, no call) and cut back to the text's length
        let mut text = [0u8; 48];
        let ms = write_decimal(&mut text, 0, id.ms);
        text[ms] = b'-';
        let len = write_decimal(&mut text, ms + 1, id.seq);
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&text);
        self.bytes.truncate(at + len);
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
        std::str::from_utf8(self.bytes.get(start..end)?).ok()
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
        self.bytes.extend_from_slice(&other.bytes);
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
    pub fn parts(&self) -> (&[u8], &[usize], Option<&[bool]>) {
        (&self.bytes, &self.ends, self.valid.as_deref())
    }

    /// The packed parts: the bytes, where each row ends, and the validity flags (None:
    /// no row is null).
    pub fn into_parts(self) -> (Vec<u8>, Vec<usize>, Option<Vec<bool>>) {
        (self.bytes, self.ends, self.valid)
    }

    /// The rows as owned strings (for tests and small tables).
    pub fn to_vec(&self) -> Vec<Option<String>> {
        self.iter().map(|s| s.map(str::to_owned)).collect()
    }
}

/// Two decimal digits per value below 100.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// How many decimal digits `value` has.
fn decimal_len(value: u64) -> usize {
    let mut len = 1;
    let mut rest = value;
    while rest >= 10 {
        rest /= 10;
        len += 1;
    }
    len
}

/// `value` in decimal (as `{}` prints it, without the formatting machinery), written into
/// `out` from `at` (20 bytes hold any u64); where its digits end.
fn write_decimal(out: &mut [u8], at: usize, mut value: u64) -> usize {
    let end = at + decimal_len(value);
    let mut pos = end;
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        pos -= 2;
        out[pos..pos + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        pos -= 2;
        out[pos..pos + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        pos -= 1;
        out[pos] = b'0' + value as u8;
    }
    end
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
        for v in [0, 9, 10, 99, 100, 101, 1_700_000_000_123, u64::MAX] {
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
