//! The user-facing error: what failed, a hint with the command to run, and
//! the exit code its kind maps to. Most failures leave through here; two exit
//! codes do not (yet): `farm claim` exits 3 with an `ExitCode` after saying
//! who holds the task, and `farm run` exits 130 after an interrupt.
//!
//! Exit codes (documented in the README):
//! 0 success · 1 failure · 2 bad usage or input · 3 held by someone else ·
//! 4 not claimed · 130 interrupted. `farm claim -- COMMAND` passes the
//! command's own status through instead.

use std::fmt;
use std::io;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Failure = 1,
    Usage = 2,
    Held = 3,
    NotClaimed = 4,
}

#[derive(Debug)]
pub struct Error {
    pub code: Code,
    pub message: String,
    pub hint: Option<String>,
    /// Writing output failed because the reader went away: exit quietly.
    pub broken_pipe: bool,
    /// One of farm's git commands was killed by a signal (the OOM killer, a
    /// user): an agent's loop reopens its clone, whose recovery makes good
    /// what the command left half-done, and goes on.
    pub git_killed: bool,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            hint: None,
            broken_pipe: false,
            git_killed: false,
        }
    }

    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(Code::Usage, message)
    }

    pub fn failure(message: impl Into<String>) -> Error {
        Error::new(Code::Failure, message)
    }

    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<io::Error> for Error {
    /// Only output errors reach here unconverted: a closed pipe is a quiet end.
    fn from(e: io::Error) -> Error {
        let mut err = Error::failure(format!("cannot write output: {e}"));
        err.broken_pipe = e.kind() == io::ErrorKind::BrokenPipe;
        err
    }
}
