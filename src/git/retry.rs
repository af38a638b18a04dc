//! Patience with a remote that does not answer: try again with capped
//! exponential backoff and jitter, saying so each time, for a bounded while.
//!
//! Only failures git reports as the network's or the server's
//! ([`GitError::transient`]) are retried; a rejected push or a missing
//! repository is an answer, returned at once. A push whose connection broke
//! may have landed: every caller pushes something whose landing it can
//! recognise on the next try (the same commits: `up to date`), so trying
//! again is safe.

use std::time::{Duration, Instant};

use crate::git::command::GitError;

/// How long a remote may stay unreachable before farm gives up on it.
pub const PATIENCE: Duration = Duration::from_secs(600);
const FIRST: Duration = Duration::from_millis(250);
const LONGEST: Duration = Duration::from_secs(20);

/// Run `op` until it succeeds, fails for good, or the remote has not
/// answered for [`PATIENCE`]. `say` gets one line per retry.
pub fn patiently<T>(
    what: &str,
    say: &dyn Fn(&str),
    op: impl FnMut() -> Result<T, GitError>,
) -> Result<T, GitError> {
    within(PATIENCE, what, say, op)
}

/// How long farm's first contact with a remote (is it there, which branch,
/// its settings) is tried again: long enough for a glitch — a daemon busy
/// with other farms' connections as they all start — short enough that a
/// wrong URL is said within seconds.
pub const FIRST_CONTACT: Duration = Duration::from_secs(3);

/// [`patiently`], for [`FIRST_CONTACT`] and silently.
pub fn briefly<T>(op: impl FnMut() -> Result<T, GitError>) -> Result<T, GitError> {
    within(FIRST_CONTACT, "", &|_| {}, op)
}

fn within<T>(
    patience: Duration,
    what: &str,
    say: &dyn Fn(&str),
    mut op: impl FnMut() -> Result<T, GitError>,
) -> Result<T, GitError> {
    let start = Instant::now();
    let mut delay = FIRST;
    let mut attempt = 1;
    loop {
        match op() {
            Err(e) if e.transient && start.elapsed() < patience => {
                let wait = jitter(delay);
                say(&format!(
                    "{what}: the hub did not answer ({}); trying again in {:.1}s (attempt {attempt})",
                    e.said,
                    wait.as_secs_f64()
                ));
                std::thread::sleep(wait);
                delay = (delay * 2).min(LONGEST);
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// `d` scaled by a random factor in [0.5, 1.5): agents that lost the remote
/// together must not all come back in the same instant.
pub fn jitter(d: Duration) -> Duration {
    let mut b = [0u8; 2];
    let r = getrandom::fill(&mut b).map_or(0.5, |()| f64::from(u16::from_le_bytes(b)) / 65536.0);
    d.mul_f64(0.5 + r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::path::PathBuf;

    fn failure(transient: bool) -> GitError {
        GitError {
            args: "fetch".into(),
            dir: PathBuf::from("/x"),
            said: "Connection refused".into(),
            transient,
            signal: None,
        }
    }

    #[test]
    fn transient_failures_are_retried_and_said() {
        let tries = Cell::new(0);
        let lines = std::cell::RefCell::new(Vec::new());
        let got = patiently("fetch", &|l| lines.borrow_mut().push(l.to_owned()), || {
            tries.set(tries.get() + 1);
            if tries.get() < 3 {
                Err(failure(true))
            } else {
                Ok(7)
            }
        });
        assert_eq!(got.unwrap(), 7);
        assert_eq!(tries.get(), 3);
        let lines = lines.into_inner();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains("attempt 2"), "{lines:?}");
    }

    #[test]
    fn a_first_contact_gives_up_within_seconds() {
        let tries = Cell::new(0);
        let got: Result<(), _> = briefly(|| {
            tries.set(tries.get() + 1);
            Err(failure(true))
        });
        assert!(got.is_err());
        // Tried again (from 0.25 s, doubling), and given up: not retried
        // for PATIENCE, which would be about 35 tries.
        assert!((2..=8).contains(&tries.get()), "{}", tries.get());
    }

    #[test]
    fn answers_are_not_retried() {
        let tries = Cell::new(0);
        let got: Result<(), _> = patiently("push", &|_| {}, || {
            tries.set(tries.get() + 1);
            Err(failure(false))
        });
        assert!(got.is_err());
        assert_eq!(tries.get(), 1);
    }

    #[test]
    fn jitter_stays_within_half_and_one_and_a_half() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(2));
            assert!(
                j >= Duration::from_secs(1) && j < Duration::from_secs(3),
                "{j:?}"
            );
        }
    }
}
