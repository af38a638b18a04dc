//! A git of farm's killed by a signal (the OOM killer, a user): its answer
//! was lost, not refused, so it is run again — but not for ever, for a git
//! killed again and again is for the user to see. This is the one place
//! that says how often, at each level:
//!
//! - a git that only reads is run again at once, in place
//!   ([`READ_AGAIN`] times; `git::command`, `git::scratch`);
//! - a git that writes in an agent's clone is run again once the clone is
//!   healed, its stale locks removed ([`HEALED_AGAIN`] times;
//!   `run::clone`): what it writes, running it again writes again;
//! - an agent's loop whose git was killed all the same starts its turns
//!   again, every claim settled, reopening its clones, whose recovery makes
//!   good what the git left half-done ([`LOOP_RESTARTS`] times;
//!   `run::agent`).

use crate::error::Error;
use crate::git::command::GitError;

/// How often a reading git killed by a signal is run again in place.
pub const READ_AGAIN: usize = 2;

/// How often a git killed in an agent's clone is run again once the clone
/// is healed.
pub const HEALED_AGAIN: usize = 1;

/// How often an agent's loop starts its turns again after a git of farm's
/// was killed.
pub const LOOP_RESTARTS: u32 = 3;

/// Whether `e`, or an error it came from, is a git killed by a signal.
pub fn killed(e: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<GitError>()
            .is_some_and(|g| g.signal.is_some())
        {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(signal: Option<i32>) -> GitError {
        GitError {
            args: "commit".into(),
            dir: "/x".into(),
            said: String::new(),
            transient: false,
            signal,
        }
    }

    #[test]
    fn a_git_killed_is_found_however_deep_its_error_was_wrapped() {
        assert!(killed(&Error::from(git(Some(9)))));
        let wrapped = Error::failure("cannot sync").caused_by(Error::from(git(Some(9))));
        assert!(killed(&wrapped));
        assert!(!killed(&Error::from(git(None))));
        assert!(!killed(&Error::failure("no git here")));
    }
}
