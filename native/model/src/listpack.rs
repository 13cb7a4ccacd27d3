//! Sizes of Redis' listpack encoding, so the model packs stream nodes as Redis does.
//!
//! A stream stores its entries in listpacks ("nodes") of at most
//! `stream-node-max-entries` entries and `stream-node-max-bytes` bytes, and
//! approximate trimming (`MAXLEN ~`/`MINID ~`) only drops whole nodes. Only the
//! byte *sizes* matter here: an element is its encoding (a small integer, or a
//! length-prefixed string) followed by a back-length of 1 to 5 bytes.
//!
//! Sizes are `i64` (Python ints): an argument is at most a few GB, so no size overflows.

use crate::ids::parse_ll;

/// total bytes (u32) + element count (u16), and the end marker
pub const HEADER_AND_END: i64 = 6 + 1;
pub const FLAG_SAMEFIELDS: i64 = 2;

fn backlen(size: i64) -> i64 {
    if size <= 127 {
        1
    } else if size < 16383 {
        2
    } else if size < 2097151 {
        3
    } else if size < 268435455 {
        4
    } else {
        5
    }
}

/// Bytes of an integer element, back-length included.
pub fn int_element(value: i64) -> i64 {
    let size = if (0..=127).contains(&value) {
        1
    } else if (-4096..=4095).contains(&value) {
        2
    } else if (-32768..=32767).contains(&value) {
        3
    } else if (-8388608..=8388607).contains(&value) {
        4
    } else if (-2147483648..=2147483647).contains(&value) {
        5
    } else {
        9
    };
    size + backlen(size)
}

/// Bytes of the argument `text` stands for: each `\\xhh` escape (two lower-case hex
/// digits) is one byte (the text form of `pelengine.model.text`).
pub fn byte_length(text: &str) -> i64 {
    let bytes = text.as_bytes();
    let mut n = bytes.len();
    let mut i = 0;
    while let Some(at) = bytes
        .get(i..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"\\x"))
    {
        let start = i + at;
        let hex =
            |b: Option<&u8>| b.is_some_and(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
        if hex(bytes.get(start + 2)) && hex(bytes.get(start + 3)) {
            n -= 3;
            i = start + 4;
        } else {
            i = start + 2;
        }
    }
    n as i64
}

/// Bytes of a string element: strings that read as integers are stored as integers.
pub fn str_element(text: &str) -> i64 {
    if let Some(as_int) = parse_ll(text) {
        return int_element(as_int);
    }
    let n = byte_length(text);
    let size = if n < 64 {
        1 + n
    } else if n < 4096 {
        2 + n
    } else {
        5 + n
    };
    size + backlen(size)
}

/// An empty node's listpack: header, master entry (count 0, deleted 0, fields, 0).
pub fn new_node_bytes<S: AsRef<str>>(fields: &[S]) -> i64 {
    HEADER_AND_END
        + int_element(0)
        + int_element(0)
        + int_element(fields.len() as i64)
        + fields.iter().map(|f| str_element(f.as_ref())).sum::<i64>()
        + int_element(0)
}

/// One entry: flags, ID deltas from the master ID, [field count, fields], values, count.
pub fn entry_bytes<S: AsRef<str>, T: AsRef<str>>(
    ms_delta: i64,
    seq_delta: i64,
    fields: &[S],
    values: &[T],
    same: bool,
) -> i64 {
    let n = values.len() as i64;
    let mut size = int_element(if same { FLAG_SAMEFIELDS } else { 0 });
    size += int_element(ms_delta) + int_element(seq_delta);
    let mut pieces = n + 3;
    if !same {
        size += int_element(n) + fields.iter().map(|f| str_element(f.as_ref())).sum::<i64>();
        pieces += n + 1;
    }
    size += values.iter().map(|v| str_element(v.as_ref())).sum::<i64>();
    size + int_element(pieces)
}

/// Bytes gained when a node's live or deleted counter changes from `old` to `new`.
pub fn counter_delta(old: i64, new: i64) -> i64 {
    int_element(new) - int_element(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(int_element(0), 2);
        assert_eq!(int_element(128), 3);
        assert_eq!(int_element(-1), 3);
        assert_eq!(int_element(i64::MIN), 10);
        assert_eq!(str_element("abc"), 5);
        assert_eq!(str_element("12"), 2);
        assert_eq!(str_element("012"), 5);
        assert_eq!(str_element("é"), 4);
        assert_eq!(str_element(&"x".repeat(64)), 66 + 1);
        assert_eq!(str_element(&"x".repeat(126)), 128 + 2);
        assert_eq!(new_node_bytes(&["f"]), 7 + 2 + 2 + 2 + 3 + 2);
        assert_eq!(entry_bytes(0, 0, &["f"], &["v"], true), 2 + 2 + 2 + 3 + 2);
        assert_eq!(counter_delta(127, 128), 1);
    }

    #[test]
    fn escaped_bytes_count_once() {
        assert_eq!(byte_length("k\\xfe"), 2);
        assert_eq!(byte_length("\\x5cx41"), 4);
        assert_eq!(byte_length("\\x\\x41"), 3);
        assert_eq!(byte_length("\\xZZ\\x"), 6);
        assert_eq!(byte_length("\\xF0"), 4);
        assert_eq!(byte_length("é"), 2);
        assert_eq!(str_element("\\xff\\xfe"), 4);
    }
}
