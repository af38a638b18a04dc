//! Usage limits burn nothing: when the agent CLI says it hit its limit (or
//! its API failed), no attempt is counted and every loop of the run waits —
//! until the reset the CLI stated, plus a little jitter so that the agents
//! do not all start in the same second, or, when it stated none, with capped
//! exponential backoff. A session that ends for any other reason resets the
//! backoff.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::age::Age;
use crate::claims::record::timestamp;
use crate::git::retry::jitter;
use crate::run::event::{Event, Limited};

/// Backoff after a limit with no stated reset: doubling from the first, up
/// to the longest.
const LIMIT_FIRST: Duration = Duration::from_secs(60);
const LIMIT_LONGEST: Duration = Duration::from_secs(30 * 60);
/// The same after a transient API error.
const API_FIRST: Duration = Duration::from_secs(15);
const API_LONGEST: Duration = Duration::from_secs(5 * 60);
/// How late past a stated reset an agent may start, at most.
const RESET_SPREAD: Duration = Duration::from_secs(30);

/// The run's shared waiting state.
#[derive(Debug, Default)]
pub struct Limits(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    until: Option<SystemTime>,
    /// Limits and errors in a row with no other session between.
    strikes: u32,
    /// Sessions whose CLI is retrying a limit or an overload right now
    /// (`watch.rs`): no new session starts meanwhile.
    retrying: usize,
    /// The last limit hit: what it was, whose session, on which task.
    hit: Option<Hit>,
}

/// A limit the agent CLI hit, as the loops that wait for it say.
#[derive(Debug, Clone)]
struct Hit {
    why: Limited,
    by: String,
    task: String,
}

impl Limits {
    /// `by`'s session on `task` hit a limit (`transient`: an API error) at
    /// `now`, lifting at `reset` if the CLI said. Every loop waits until
    /// the returned time.
    pub fn hit(
        &self,
        (by, task): (&str, &str),
        reset: Option<SystemTime>,
        transient: bool,
        now: SystemTime,
    ) -> SystemTime {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.strikes += 1;
        s.hit = Some(Hit {
            why: if transient {
                Limited::ApiError
            } else {
                Limited::UsageLimit
            },
            by: by.to_owned(),
            task: task.to_owned(),
        });
        let until = match reset {
            Some(at) if at > now => {
                let spread = (at.duration_since(now).unwrap_or_default() / 10).min(RESET_SPREAD);
                at + jitter(spread) / 2
            }
            _ => {
                let (first, longest) = if transient {
                    (API_FIRST, API_LONGEST)
                } else {
                    (LIMIT_FIRST, LIMIT_LONGEST)
                };
                let doubled = first.saturating_mul(1 << (s.strikes - 1).min(10));
                now + jitter(doubled.min(longest))
            }
        };
        let until = s.until.map_or(until, |u| u.max(until));
        s.until = Some(until);
        until
    }

    /// A session ended otherwise: the CLI works again.
    pub fn ok(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).strikes = 0;
    }

    /// A session's CLI began (`true`) or stopped (`false`) retrying.
    pub fn retrying(&self, on: bool) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if on {
            s.retrying += 1;
        } else {
            s.retrying = s.retrying.saturating_sub(1);
        }
    }

    /// Whether some session's CLI is retrying its API now.
    pub fn any_retrying(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).retrying > 0
    }

    /// Until when loops must wait, if they must.
    pub fn until(&self, now: SystemTime) -> Option<SystemTime> {
        let s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.until.filter(|u| *u > now)
    }

    /// The wait the loops are in, if they are: as the journal says it.
    fn waiting(&self, now: SystemTime) -> Option<(SystemTime, Event<'static>)> {
        let s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let until = s.until.filter(|u| *u > now)?;
        let hit = s.hit.clone().unwrap_or(Hit {
            why: Limited::UsageLimit,
            by: String::new(),
            task: String::new(),
        });
        Some((
            until,
            Event::Wait {
                until: timestamp(until).into(),
                why: hit.why,
                by: hit.by.into(),
                task: hit.task.into(),
            },
        ))
    }

    /// Wait while the limit holds, in steps of at most a second, as long as
    /// `go_on` says. `say` gets one line when the wait begins; `waits` gets
    /// the wait to journal then, and again whenever it grows (another
    /// session hit the limit meanwhile): each loop that waits is seen
    /// waiting, not only the one whose session hit the limit.
    pub fn wait(&self, say: &dyn Fn(&str), waits: &dyn Fn(&Event<'_>), go_on: &dyn Fn() -> bool) {
        // Another session's CLI retrying its API: the same account, the
        // same limit; wait for it to get through or give up.
        if self.any_retrying() {
            say("waiting: the agent CLI is retrying its API in another session");
            while go_on() && self.any_retrying() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let Some((mut said, wait)) = self.waiting(SystemTime::now()) else {
            return;
        };
        say(&format!(
            "waiting for the agent CLI's limit to lift (for {})",
            Age(said.duration_since(SystemTime::now()).unwrap_or_default())
        ));
        waits(&wait);
        while go_on() {
            let Some((until, wait)) = self.waiting(SystemTime::now()) else {
                return;
            };
            if until > said {
                waits(&wait);
                said = until;
            }
            let left = until.duration_since(SystemTime::now()).unwrap_or_default();
            std::thread::sleep(left.min(Duration::from_secs(1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stated_reset_is_waited_for_with_a_little_spread() {
        let limits = Limits::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let reset = now + Duration::from_secs(600);
        let until = limits.hit(("a-1", "t1"), Some(reset), false, now);
        assert!(until >= reset && until <= reset + RESET_SPREAD, "{until:?}");
        assert_eq!(limits.until(now), Some(until));
        assert_eq!(limits.until(until), None, "lifted at the time");
    }

    #[test]
    fn no_stated_reset_backs_off_doubling_to_a_cap_and_resets_on_success() {
        let limits = Limits::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let waits: Vec<Duration> = (0..12)
            .map(|_| {
                let w = limits
                    .hit(("a-1", "t1"), None, false, now)
                    .duration_since(now)
                    .unwrap();
                limits.0.lock().unwrap().until = None;
                w
            })
            .collect();
        assert!(waits[0] >= LIMIT_FIRST / 2 && waits[0] < LIMIT_FIRST * 3 / 2);
        assert!(waits[3] >= LIMIT_FIRST * 4, "{waits:?}");
        assert!(
            waits.iter().all(|w| *w < LIMIT_LONGEST * 3 / 2),
            "{waits:?}"
        );
        limits.ok();
        let w = limits
            .hit(("a-1", "t1"), None, true, now)
            .duration_since(now)
            .unwrap();
        assert!(
            w < API_FIRST * 3 / 2,
            "after a success the backoff starts over: {w:?}"
        );
    }
}
