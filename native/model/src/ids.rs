//! Stream IDs and the number parsers Redis applies to command arguments.
//!
//! A stream ID is a pair of unsigned 64-bit integers `(ms, seq)` ordered as a
//! tuple. Parsing follows the server's rules exactly, including its quirks:
//! `-`/`+` as the extreme IDs where allowed, a missing sequence part, the
//! `ms-*` form for XADD, and the fallback to `strtoull` (which tolerates
//! leading blanks, a sign and leading zeros) when the strict integer parse fails.

use std::fmt;

pub const U64_MAX: u64 = u64::MAX;
pub const I64_MAX: i64 = i64::MAX;
pub const I64_MIN: i64 = i64::MIN;

/// A stream entry ID: milliseconds part and sequence part (ordered as `(ms, seq)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const fn new(ms: u64, seq: u64) -> Self {
        StreamId { ms, seq }
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

pub const ZERO_ID: StreamId = StreamId::new(0, 0);
pub const MAX_ID: StreamId = StreamId::new(U64_MAX, U64_MAX);

/// The C `isspace` set `strtoull` skips (Python's `_SPACES`).
const SPACES: &[char] = &[' ', '\t', '\n', '\x0b', '\x0c', '\r'];

/// An argument Redis would refuse; `kind` is the error kind counted in the run report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub kind: &'static str,
}

impl ParseError {
    pub const INVALID_ID: ParseError = ParseError { kind: "invalid_id" };
}

/// Redis' strict signed 64-bit parse (`string2ll`); None when it refuses the text.
///
/// At most 20 characters matching `-?[1-9][0-9]*|0` (ASCII digits), within i64.
pub fn parse_ll(text: &str) -> Option<i64> {
    if text.chars().count() > 20 {
        return None;
    }
    let bytes = text.as_bytes();
    let body = match bytes.first() {
        Some(b'-') => &bytes[1..],
        _ => bytes,
    };
    let well_formed = if body == b"0" {
        bytes.len() == 1 // "0" only, "-0" does not match
    } else {
        matches!(body.first(), Some(b'1'..=b'9')) && body.iter().all(u8::is_ascii_digit)
    };
    if !well_formed {
        return None;
    }
    // at most 20 ASCII characters: fits i128
    let value: i128 = text.parse().ok()?;
    i64::try_from(value).ok()
}

/// C `strtoull` on the whole string, as Redis uses it after `string2ll` fails.
fn strtoull(text: &str) -> Option<u64> {
    let rest = text.trim_start_matches(SPACES);
    let (negative, digits) = match rest.chars().next() {
        Some('-') => (true, &rest[1..]),
        Some('+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut value: u64 = 0;
    for b in digits.bytes() {
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Redis' `string2ull`: strict parse first, then `strtoull`'s tolerance.
pub fn parse_ull(text: &str) -> Option<u64> {
    if let Some(strict) = parse_ll(text) {
        return u64::try_from(strict).ok();
    }
    if text.is_empty() {
        return None;
    }
    strtoull(text)
}

/// Parse a stream ID argument.
///
/// Returns the ID and whether the sequence part was given (false only for the
/// `ms-*` form, accepted when `allow_seq_star`). `strict` refuses the bare `-`
/// and `+`. Fails with `ParseError { kind: "invalid_id" }`.
pub fn parse_id(
    text: &str,
    missing_seq: u64,
    strict: bool,
    allow_seq_star: bool,
) -> Result<(StreamId, bool), ParseError> {
    if text.chars().count() > 127 {
        return Err(ParseError::INVALID_ID);
    }
    if text == "-" {
        if strict {
            return Err(ParseError::INVALID_ID);
        }
        return Ok((ZERO_ID, true));
    }
    if text == "+" {
        if strict {
            return Err(ParseError::INVALID_ID);
        }
        return Ok((MAX_ID, true));
    }
    let (head, tail) = match text.split_once('-') {
        Some((head, tail)) => (head, Some(tail)),
        None => (text, None),
    };
    let ms = parse_ull(head).ok_or(ParseError::INVALID_ID)?;
    let Some(tail) = tail else {
        return Ok((StreamId::new(ms, missing_seq), true));
    };
    if allow_seq_star && tail == "*" {
        return Ok((StreamId::new(ms, 0), false));
    }
    let seq = parse_ull(tail).ok_or(ParseError::INVALID_ID)?;
    Ok((StreamId::new(ms, seq), true))
}

/// Parse an ID where `-` and `+` are not allowed (a missing sequence part: 0).
pub fn parse_strict_id(text: &str) -> Result<StreamId, ParseError> {
    parse_id(text, 0, true, false).map(|(id, _)| id)
}

/// The next ID, or None when `value` is the largest possible ID.
pub fn incr_id(value: StreamId) -> Option<StreamId> {
    if value.seq == U64_MAX {
        if value.ms == U64_MAX {
            return None;
        }
        return Some(StreamId::new(value.ms + 1, 0));
    }
    Some(StreamId::new(value.ms, value.seq + 1))
}

/// `"ms-seq"` as Redis prints it.
pub fn format_id(value: &StreamId) -> String {
    format!("{}-{}", value.ms, value.seq)
}

/// An unsigned 64-bit value as C's int64 would read it (two's complement).
pub fn to_signed(value: u64) -> i64 {
    value as i64
}

/// An ID part for a BIGINT column: None when it does not fit (ms or seq >= 2^63).
pub fn to_bigint(value: u64) -> Option<i64> {
    i64::try_from(value).ok()
}

/// An entry ID the three ways the tables carry it: "ms-seq" (`id`), and its parts
/// for BIGINT columns (`id_ms`, `id_seq`, see `to_bigint`).
pub fn id_parts(entry_id: &StreamId) -> (String, Option<i64>, Option<i64>) {
    (
        format_id(entry_id),
        to_bigint(entry_id.ms),
        to_bigint(entry_id.seq),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    #[test]
    fn strict_ll() {
        assert_eq!(parse_ll("0"), Some(0));
        assert_eq!(parse_ll("-0"), None);
        assert_eq!(parse_ll("007"), None);
        assert_eq!(parse_ll("+5"), None);
        assert_eq!(parse_ll(" 5"), None);
        assert_eq!(parse_ll("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_ll("9223372036854775808"), None);
        assert_eq!(parse_ll("١٢"), None);
        assert_eq!(parse_ll(""), None);
        assert_eq!(parse_ll("-"), None);
    }

    #[test]
    fn ull_falls_back_to_strtoull() {
        assert_eq!(parse_ull("-5"), None);
        assert_eq!(parse_ull("-0"), Some(0));
        assert_eq!(parse_ull(" \t+12"), Some(12));
        assert_eq!(parse_ull(" -1"), Some(u64::MAX));
        assert_eq!(parse_ull("0001"), Some(1));
        assert_eq!(parse_ull("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_ull("18446744073709551616"), None);
        assert_eq!(
            parse_ull("00000000000000000000000018446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(parse_ull("12 "), None);
        assert_eq!(parse_ull("+"), None);
        assert_eq!(parse_ull("\u{a0}1"), None);
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("-", 0, false, false), Ok((ZERO_ID, true)));
        assert_eq!(parse_id("+", 0, false, false), Ok((MAX_ID, true)));
        assert!(parse_strict_id("-").is_err());
        assert_eq!(parse_strict_id("5"), Ok(id(5, 0)));
        assert_eq!(parse_id("5", 7, false, false), Ok((id(5, 7), true)));
        assert_eq!(parse_strict_id("1-+5"), Ok(id(1, 5)));
        assert!(parse_strict_id("1--5").is_err());
        assert_eq!(parse_strict_id("1- -1"), Ok(id(1, u64::MAX)));
        assert_eq!(parse_id("3-*", 0, true, true), Ok((id(3, 0), false)));
        assert!(parse_strict_id("3-*").is_err());
        assert!(parse_strict_id("").is_err());
        assert!(parse_strict_id("-1").is_err());
        assert_eq!(parse_strict_id(" 12"), Ok(id(12, 0)));
        assert_eq!(
            parse_strict_id("18446744073709551615-18446744073709551615"),
            Ok(MAX_ID)
        );
        let long = format!("{}1", "0".repeat(127));
        assert!(parse_strict_id(&long).is_err());
        assert_eq!(parse_strict_id(&long[1..]), Ok(id(1, 0)));
    }

    #[test]
    fn helpers() {
        assert_eq!(incr_id(MAX_ID), None);
        assert_eq!(incr_id(id(1, u64::MAX)), Some(id(2, 0)));
        assert_eq!(format_id(&id(1, 2)), "1-2");
        assert_eq!(to_signed(u64::MAX), -1);
        assert_eq!(
            id_parts(&id(u64::MAX, 3)),
            ("18446744073709551615-3".to_string(), None, Some(3))
        );
        assert!(id(1, 5) < id(2, 0));
    }
}
