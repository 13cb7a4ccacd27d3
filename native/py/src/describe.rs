//! Messages as udf.py words them (`_describe_row`, Python's `repr` of strings).

pub use pelmodel::repr::{follow_python, py_repr};

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
