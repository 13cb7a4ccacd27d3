//! Python's `repr()` of a string, exactly: the saved model's messages (state errors)
//! quote keys as Python does, and the face's `row_digest` hashes `repr` of every event
//! when state is kept.
//!
//! A copy of Python's own because the digest is on the hot path (every argument of
//! every event, where a call into Python per event would cost what the native replay
//! saves). tests/native/test_state_native.py holds it equal: the digests of random odd
//! strings and of every code point, and a corrupt saved state failing alike.

use std::cmp::Ordering;
use std::fmt::Write;
use std::sync::OnceLock;

use crate::printable::UNPRINTABLE;

/// The running Python's unprintable ranges, where its Unicode database is not the one
/// `printable.rs` was generated from (`follow_python`).
static RUNNING: OnceLock<Vec<(u32, u32)>> = OnceLock::new();

/// Make `py_repr` follow a Python whose Unicode database differs from `printable.rs`'s:
/// `ranges` are the code points its `str.isprintable` refuses (sorted, inclusive). Only
/// the first call counts.
pub fn follow_python(ranges: Vec<(u32, u32)>) {
    let _ = RUNNING.set(ranges);
}

/// Whether Python's `str.isprintable` refuses `c` (`repr` escapes it).
pub fn unprintable(c: char) -> bool {
    let code = u32::from(c);
    let table = RUNNING.get().map_or(&UNPRINTABLE[..], |v| &v[..]);
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < code {
                Ordering::Less
            } else if lo > code {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })
        .is_ok()
}

/// Python's `repr()` of a `str`, exactly (the printable characters of the running
/// Python's Unicode database once `follow_python` ran, else `printable.rs`'s).
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !unprintable(c) => out.push(c),
            c => {
                let code = u32::from(c);
                let _ = if code <= 0xff {
                    write!(out, "\\x{code:02x}")
                } else if code <= 0xffff {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_as_python() {
        assert_eq!(py_repr("abc"), "'abc'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(py_repr("\u{1}\n\\é"), "'\\x01\\n\\\\é'");
        // unassigned, private use, a format character and a supplementary one, as
        // Python 3.11 prints them: repr('\u0378\ue000\u200b\U0001f600')
        assert_eq!(
            py_repr("\u{378}\u{e000}\u{200b}\u{1f600}"),
            "'\\u0378\\ue000\\u200b\u{1f600}'"
        );
    }
}
