//! The user-facing error: what failed, hints with the command to run, the
//! cause it came from, and the exit code its kind maps to. Every exit but
//! success leaves through here: `farm` commands return `Result<(), Error>`
//! and `main.rs` alone prints an error and turns its kind into the exit code.
//! An error whose story was already told (a `farm run` that was interrupted,
//! a `farm claim` of several tasks that lost some and said which, the status
//! of the command `farm claim -- COMMAND` ran) carries no message and prints
//! nothing; a closed output pipe is a quiet end with status 0.
//!
//! Exit codes (documented in docs/commands.md, "Exit codes"):
//! 0 success · 1 failure · 2 bad usage or input · 3 held by someone else ·
//! 4 not claimed · 5 a run's board settled with failed, stuck or invalid
//! tasks · 6 a run ended with work left (drained, `--until`,
//! `--max-sessions`, `--once`) · 130 interrupted. `farm claim -- COMMAND` passes the
//! command's own status through instead ([`Code::Status`]).

use std::fmt;
use std::io;

/// The kind of a failure: what the exit code says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Failure,
    Usage,
    Held,
    NotClaimed,
    /// `farm run` ended on a settled board with tasks failed, stuck or
    /// invalid (each named in its summary).
    Unfinished,
    /// `farm run` ended with work left on the board: drained (`farm stop`,
    /// a first signal) or stopped by `--until`, `--max-sessions`, `--once`.
    Drained,
    /// The run was stopped by a signal (Ctrl-C, `farm stop --now`).
    Interrupted,
    /// The status of the command `farm claim -- COMMAND` ran (or 126/127
    /// when it could not be started), passed through.
    Status(u8),
    /// Writing output failed because its reader went away (`farm locks |
    /// head`): a quiet end, status 0.
    BrokenPipe,
}

impl Code {
    /// The process exit code of this kind.
    pub fn exit_code(self) -> u8 {
        match self {
            Code::Failure => 1,
            Code::Usage => 2,
            Code::Held => 3,
            Code::NotClaimed => 4,
            Code::Unfinished => 5,
            Code::Drained => 6,
            Code::Interrupted => 130,
            Code::Status(status) => status,
            Code::BrokenPipe => 0,
        }
    }
}

/// A cause kept under an error (`std::error::Error::source`).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug)]
pub struct Error {
    pub code: Code,
    /// What failed; empty when it was already said (nothing is printed).
    pub message: String,
    /// What to do about it, in order, each printed on its own `hint:` line.
    pub hints: Vec<String>,
    /// The error this one came from, if any: shown at `-v` as "caused by".
    pub cause: Option<Cause>,
    /// More errors that ended the same command (one per agent loop of a
    /// `farm run -j N`), printed after this one.
    pub also: Vec<Error>,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            hints: Vec::new(),
            cause: None,
            also: Vec::new(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(Code::Usage, message)
    }

    pub fn failure(message: impl Into<String>) -> Error {
        Error::new(Code::Failure, message)
    }

    /// An exit of this kind whose story was already told: prints nothing.
    pub fn said(code: Code) -> Error {
        Error::new(code, "")
    }

    /// Add a hint after those already given.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Error {
        self.hints.push(hint.into());
        self
    }

    /// Keep the error this one came from.
    #[must_use]
    pub fn caused_by(mut self, cause: impl Into<Cause>) -> Error {
        self.cause = Some(cause.into());
        self
    }

    /// The hints on one line, for reports that have one column for them.
    pub fn hints_line(&self) -> String {
        self.hints.join("; ")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

impl From<io::Error> for Error {
    /// Only output errors reach here unconverted: a closed pipe is a quiet end.
    fn from(e: io::Error) -> Error {
        let code = match e.kind() {
            io::ErrorKind::BrokenPipe => Code::BrokenPipe,
            _ => Code::Failure,
        };
        Error::new(code, format!("cannot write output: {e}")).caused_by(e)
    }
}

/// A TOML error in `text` on one line, with the line it is on: a wrong type
/// names no key, the line does (`invalid type: string "2", expected u32
/// (line 3: `jobs = "2"`)`).
pub fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    let line = e.span().and_then(|span| {
        let n = text.get(..span.start)?.matches('\n').count();
        Some(format!(
            " (line {}: `{}`)",
            n + 1,
            text.lines().nth(n)?.trim()
        ))
    });
    format!("{msg}{}", line.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn each_kind_maps_to_its_exit_code() {
        let codes = [
            (Code::Failure, 1),
            (Code::Usage, 2),
            (Code::Held, 3),
            (Code::NotClaimed, 4),
            (Code::Unfinished, 5),
            (Code::Drained, 6),
            (Code::Interrupted, 130),
            (Code::Status(0), 0),
            (Code::Status(127), 127),
            (Code::Status(255), 255),
        ];
        for (code, exit) in codes {
            assert_eq!(code.exit_code(), exit, "{code:?}");
            assert_eq!(Error::said(code).code.exit_code(), exit, "{code:?}");
        }
        assert_eq!(Error::usage("x").code, Code::Usage);
        assert_eq!(Error::failure("x").code, Code::Failure);
    }

    #[test]
    fn hints_accumulate_in_order() {
        let e = Error::failure("cannot push").hint("first").hint("second");
        assert_eq!(e.hints, ["first", "second"]);
        assert_eq!(e.hints_line(), "first; second");
        assert!(Error::failure("x").hints.is_empty());
    }

    #[test]
    fn the_source_chain_is_kept() {
        let inner = io::Error::new(io::ErrorKind::PermissionDenied, "no entry");
        let middle = Error::failure("cannot open `x`").caused_by(inner);
        let outer = Error::failure("cannot claim `t`").caused_by(middle);
        assert_eq!(outer.to_string(), "cannot claim `t`");
        let mut chain = Vec::new();
        let mut cause = outer.source();
        while let Some(c) = cause {
            chain.push(c.to_string());
            cause = c.source();
        }
        assert_eq!(chain, ["cannot open `x`", "no entry"]);

        let pipe: Error = io::Error::from(io::ErrorKind::BrokenPipe).into();
        assert_eq!(pipe.code, Code::BrokenPipe);
        assert_eq!(pipe.code.exit_code(), 0);
        assert_eq!(
            pipe.source().unwrap().to_string(),
            io::Error::from(io::ErrorKind::BrokenPipe).to_string()
        );
    }
}
