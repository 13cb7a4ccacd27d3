//! Messages as udf.py words them (`_describe_row`, Python's `repr` of strings).

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

fn py_opt(v: Option<i64>) -> String {
    v.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

/// udf.py's `_describe_row`: `seq 5 (ts_ms 1000, db 0, argv ['XADD', 's', '*'])`.
pub fn describe_row(
    seq: Option<i64>,
    ts_ms: Option<i64>,
    argv: Option<&[String]>,
    db: Option<i64>,
) -> String {
    let argv = argv.unwrap_or(&[]);
    let shown: Vec<String> = argv
        .iter()
        .take(8)
        .map(|a| {
            if a.chars().count() <= 40 {
                py_repr(a)
            } else {
                let cut: String = a.chars().take(37).collect();
                py_repr(&(cut + "..."))
            }
        })
        .collect();
    let more = if argv.len() > 8 {
        format!(" ... ({} args)", argv.len())
    } else {
        String::new()
    };
    format!(
        "seq {} (ts_ms {}, db {}, argv [{}]{more})",
        py_opt(seq),
        py_opt(ts_ms),
        py_opt(db),
        shown.join(", ")
    )
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
    }

    #[test]
    fn rows_as_udf() {
        let argv: Vec<String> = ["XADD", "s", "*"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            describe_row(Some(5), Some(1000), Some(&argv), Some(0)),
            "seq 5 (ts_ms 1000, db 0, argv ['XADD', 's', '*'])"
        );
        let long: Vec<String> = (0..10).map(|i| format!("{i}").repeat(41)).collect();
        let text = describe_row(Some(1), None, Some(&long), None);
        assert!(text.ends_with("...'] ... (10 args))"), "{text}");
        assert!(text.starts_with("seq 1 (ts_ms None, db None, argv ['0000"));
    }
}
