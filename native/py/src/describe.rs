//! Messages as udf.py words them (`_describe_row`, Python's `repr` of strings).

use std::fmt::Write;

/// Python's `repr()` of a `str`.
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
            c if printable(c) => out.push(c),
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

/// Python's `str.isprintable` for one character, approximately: control, format,
/// separator (other than the space) and private-use characters are not.
fn printable(c: char) -> bool {
    let code = u32::from(c);
    !(c.is_control()
        || (0x80..=0xa0).contains(&code)
        || code == 0xad
        || (0x2000..=0x200f).contains(&code)
        || (0x2028..=0x202f).contains(&code)
        || (0x205f..=0x206f).contains(&code)
        || code == 0x3000
        || code == 0xfeff
        || (0xd800..=0xf8ff).contains(&code)
        || (0xfff9..=0xfffb).contains(&code)
        || code >= 0xf0000)
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
