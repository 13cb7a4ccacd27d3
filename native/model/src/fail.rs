//! Why a command did not apply (`Fail`), and how that reads as a message.
//!
//! A handler that finds an argument Redis would refuse returns `Fail::Command` (the
//! error reply's kind) before changing anything. `Fail::Internal` is what raises
//! another exception in the Python model (an `IndexError`, a `KeyError`, an `assert`),
//! or a value Python's unbounded integers would hold that does not fit the i64 columns.

use crate::ids::ParseError;

/// Why a command did not apply: a Redis error reply (`Command`, its kind), or what
/// raises another exception in the Python model (`Internal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fail {
    Command(&'static str),
    Internal(String),
}

impl From<ParseError> for Fail {
    fn from(err: ParseError) -> Self {
        Fail::Command(err.kind)
    }
}

pub(crate) fn internal(what: &str) -> Fail {
    Fail::Internal(what.to_string())
}

pub(crate) fn overflow(what: &str) -> Fail {
    Fail::Internal(format!("{what}: the value does not fit a 64-bit integer"))
}

impl Fail {
    /// The error kind of a command error, the message of an internal one (what the
    /// lag estimates report).
    pub(crate) fn into_text(self) -> String {
        match self {
            Fail::Command(kind) => kind.to_string(),
            Fail::Internal(message) => message,
        }
    }

    /// As the Python model would raise it: a command error that escapes a handler is a
    /// `CommandError` there.
    pub(crate) fn into_raised(self) -> String {
        match self {
            Fail::Command(kind) => format!("CommandError: {kind}"),
            Fail::Internal(message) => message,
        }
    }
}
