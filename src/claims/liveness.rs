//! Is a claim's holder alive? A pure judgement of one listed claim, a clock and
//! a process probe — no filesystem, so every rule is unit-tested.
//!
//! The rules (`docs/claims.md` says them for users):
//! - A claim made on this host by a holder process is **alive** iff that
//!   process still runs: same boot, same pid, same start time. Otherwise it is
//!   **dead**, at once — no age needed. A live local holder is never stale: its
//!   process is proof, whatever its heartbeat says.
//! - A claim from another host, or one made with no holder process, is judged by
//!   heartbeat age: **alive** until the age passes the threshold, then
//!   **stale**. A heartbeat in the future counts as age zero. When the store
//!   knows since when this host has seen the record unchanged (the git store,
//!   shared by hosts whose clocks may disagree), the age is the older of that
//!   span, on this host's own clock, and the record's heartbeat stamp less
//!   [`CLOCK_SKEW`]. So a holder whose clock runs behind is not reaped early
//!   while its skew stays under `CLOCK_SKEW` plus three quarters of the
//!   threshold (it heartbeats every quarter), and a dead claim whose stamp
//!   lies in the future is still taken one threshold after it was first seen.
//!   A record this host saw *appear* (it was not there at an earlier look)
//!   is judged by this host's clock alone: it is reaped a threshold after it
//!   appeared, whatever its stamp says — a holder whose clock is far behind
//!   would otherwise be reaped the moment it claims.
//! - A file that is not a valid record is **corrupt**; it is judged by its
//!   modification time like a claim with no holder.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::age::Age;
use crate::claims::host::Here;
use crate::claims::record::Claim;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Alive,
    Stale,
    Dead,
    Corrupt,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Alive => "alive",
            State::Stale => "stale",
            State::Dead => "dead",
            State::Corrupt => "corrupt",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How far another host's clock may run behind this one's before its
/// heartbeat stamps alone could make its claims look older than they are.
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// When this host first saw a record, on its own clock (stores shared by
/// hosts whose clocks may disagree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// First seen here.
    pub at: SystemTime,
    /// This host's look before `at`, at which the record was not there yet;
    /// `None` when it was there at this host's first look (it may be of any
    /// age).
    pub after: Option<SystemTime>,
}

/// How far a stamp may lie outside the span in which its record appeared
/// here before its host's clock is called off: a heartbeat is stamped,
/// then pushed (retried on a busy branch), then seen.
pub const CLOCK_OFF: Duration = Duration::from_secs(60);

/// How far the clock of `claim`'s host seems off this host's, in seconds
/// (ahead positive), when its heartbeat stamp lies more than [`CLOCK_OFF`]
/// outside the span in which this host saw the record appear; `None` when
/// it lies within, or the record was there at the first look.
pub fn clock_off(claim: &Claim, seen: &Sighting) -> Option<i64> {
    let after = seen.after?;
    let stamp = claim.heartbeat_at;
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    if let Ok(ahead) = stamp.duration_since(seen.at)
        && ahead > CLOCK_OFF
    {
        return Some(secs(ahead));
    }
    match after.duration_since(stamp) {
        Ok(behind) if behind > CLOCK_OFF => Some(-secs(behind)),
        _ => None,
    }
}

/// The outcome of judging one claim: its state, why, and whether a reaper with
/// this threshold may take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub state: State,
    pub reason: String,
    pub reapable: bool,
}

/// What a judgement needs besides the claim itself.
pub struct Judge<'a> {
    pub here: &'a Here,
    pub now: SystemTime,
    /// Heartbeat age past which a claim that cannot be checked by process is
    /// stale; `None` means age alone never makes a claim reapable.
    pub stale_after: Option<Duration>,
    /// The start time of a running process with this pid, if any.
    pub probe: &'a dyn Fn(u32) -> Option<u64>,
}

impl Judge<'_> {
    /// Judge a valid claim whose last heartbeat (as the store sees it) was
    /// at `heartbeat`, seen unchanged by this host since `seen` if known.
    pub fn claim(&self, claim: &Claim, heartbeat: SystemTime, seen: Option<Sighting>) -> Verdict {
        if let Some(holder) = claim.holder.filter(|_| claim.host == self.here.host) {
            let dead = |reason: String| Verdict {
                state: State::Dead,
                reason,
                reapable: true,
            };
            if claim.boot_id != self.here.boot_id {
                return dead("this host rebooted since the claim was made".into());
            }
            return match (self.probe)(holder.pid) {
                None => dead(format!("process {} is gone", holder.pid)),
                Some(start) if start != holder.start => {
                    dead(format!("pid {} now belongs to another process", holder.pid))
                }
                Some(_) => Verdict {
                    state: State::Alive,
                    reason: format!("process {} is running", holder.pid),
                    reapable: false,
                },
            };
        }
        match seen {
            None => self.by_age(heartbeat, State::Alive, "heartbeat"),
            Some(Sighting { at, after: Some(_) }) => {
                self.by_age(at, State::Alive, "unchanged since it appeared here")
            }
            Some(Sighting { at: seen, .. }) => {
                let stamped = heartbeat + CLOCK_SKEW;
                let (at, what) = if stamped < seen {
                    (stamped, "heartbeat (less the clock skew allowance)")
                } else {
                    (seen, "unchanged since first seen here")
                };
                self.by_age(at, State::Alive, what)
            }
        }
    }

    /// Judge a file that is not a valid record, by its modification time.
    pub fn corrupt(&self, why: &str, modified: SystemTime) -> Verdict {
        let mut v = self.by_age(modified, State::Corrupt, "modified");
        v.state = State::Corrupt;
        v.reason = format!("corrupt ({why}), {}", v.reason);
        v
    }

    fn by_age(&self, at: SystemTime, fresh: State, what: &str) -> Verdict {
        let age = self.now.duration_since(at).unwrap_or_default();
        match self.stale_after {
            Some(limit) if age > limit => Verdict {
                state: State::Stale,
                reason: format!("{what} {} ago, older than {}", Age(age), Age(limit)),
                reapable: true,
            },
            _ => Verdict {
                state: fresh,
                reason: format!("{what} {} ago", Age(age)),
                reapable: false,
            },
        }
    }
}

/// What a run says, once, when a claim it cannot take yet is corrupt: the
/// task would otherwise wait on it without a word. `None` for any other
/// verdict. The run itself takes such a claim once it is older than its
/// `stale_after`, as `farm reap --older-than` does.
pub fn waiting_on(name: &str, verdict: &Verdict, stale_after: Duration) -> Option<String> {
    if verdict.state != State::Corrupt || verdict.reapable {
        return None;
    }
    let stale = Age(stale_after);
    let now = match crate::names::TaskId::parse(name) {
        Ok(_) => format!(", or free it now: farm release {name} --force"),
        Err(_) => String::new(),
    };
    Some(format!(
        "waiting on `{name}`: its claim file is {}; this run takes it once it is older \
         than {stale} (as farm reap --older-than {stale} does){now}",
        verdict.reason
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::record::{Holder, Nonce};
    use crate::names::TaskId;
    use std::time::UNIX_EPOCH;

    const T0: u64 = 1_796_000_000;

    fn here() -> Here {
        Here {
            host: "box1".into(),
            boot_id: "boot-a".into(),
        }
    }

    fn claim(host: &str, holder: Option<Holder>) -> Claim {
        let at = UNIX_EPOCH + Duration::from_secs(T0);
        Claim {
            task: TaskId::parse("t").unwrap(),
            agent: "a".into(),
            host: host.into(),
            boot_id: "boot-a".into(),
            holder,
            nonce: Nonce::random(),
            claimed_at: at,
            heartbeat_at: at,
            attempt: 1,
        }
    }

    fn judge_at<'a>(
        here: &'a Here,
        secs_later: u64,
        stale_after: Option<u64>,
        probe: &'a dyn Fn(u32) -> Option<u64>,
    ) -> Judge<'a> {
        Judge {
            here,
            now: UNIX_EPOCH + Duration::from_secs(T0 + secs_later),
            stale_after: stale_after.map(Duration::from_secs),
            probe,
        }
    }

    const HOLDER: Option<Holder> = Some(Holder { pid: 42, start: 7 });
    fn running(pid: u32) -> Option<u64> {
        (pid == 42).then_some(7)
    }
    fn nothing_runs(_: u32) -> Option<u64> {
        None
    }
    fn reused(_: u32) -> Option<u64> {
        Some(8)
    }

    #[test]
    fn local_holder_alive_while_process_runs_whatever_the_age() {
        let h = here();
        let c = claim("box1", HOLDER);
        let v = judge_at(&h, 86_400, Some(60), &running).claim(&c, c.heartbeat_at, None);
        assert_eq!((v.state, v.reapable), (State::Alive, false));
    }

    #[test]
    fn local_holder_dead_at_once_when_gone_or_reused_or_rebooted() {
        let h = here();
        let c = claim("box1", HOLDER);
        let gone = judge_at(&h, 0, None, &nothing_runs).claim(&c, c.heartbeat_at, None);
        assert_eq!((gone.state, gone.reapable), (State::Dead, true));
        assert_eq!(gone.reason, "process 42 is gone");
        let re = judge_at(&h, 0, None, &reused).claim(&c, c.heartbeat_at, None);
        assert_eq!(re.state, State::Dead);
        assert!(re.reason.contains("another process"), "{}", re.reason);
        let rebooted = Here {
            boot_id: "boot-b".into(),
            ..here()
        };
        let rb = judge_at(&rebooted, 0, None, &running).claim(&c, c.heartbeat_at, None);
        assert_eq!(rb.state, State::Dead);
        assert!(rb.reason.contains("rebooted"), "{}", rb.reason);
    }

    #[test]
    fn other_host_judged_by_age_only() {
        let h = here();
        let c = claim("box2", HOLDER);
        // The probe would say "gone", but the pid belongs to another host's kernel.
        let fresh = judge_at(&h, 59, Some(60), &nothing_runs).claim(&c, c.heartbeat_at, None);
        assert_eq!((fresh.state, fresh.reapable), (State::Alive, false));
        let stale = judge_at(&h, 61, Some(60), &nothing_runs).claim(&c, c.heartbeat_at, None);
        assert_eq!((stale.state, stale.reapable), (State::Stale, true));
        assert_eq!(stale.reason, "heartbeat 1m01s ago, older than 1m");
        let no_threshold =
            judge_at(&h, 1_000_000, None, &nothing_runs).claim(&c, c.heartbeat_at, None);
        assert_eq!(
            (no_threshold.state, no_threshold.reapable),
            (State::Alive, false)
        );
    }

    #[test]
    fn claim_without_holder_is_judged_by_age() {
        let h = here();
        let c = claim("box1", None);
        let v = judge_at(&h, 7200, Some(3600), &running).claim(&c, c.heartbeat_at, None);
        assert_eq!(v.state, State::Stale);
        // A later heartbeat (the store's, e.g. the file's mtime) makes it fresh again.
        let beat = c.heartbeat_at + Duration::from_secs(7000);
        let v = judge_at(&h, 7200, Some(3600), &running).claim(&c, beat, None);
        assert_eq!(v.state, State::Alive);
    }

    #[test]
    fn future_heartbeat_counts_as_now() {
        let h = here();
        let c = claim("box2", None);
        let future = c.heartbeat_at + Duration::from_secs(3600);
        let v = judge_at(&h, 0, Some(1), &nothing_runs).claim(&c, future, None);
        assert_eq!(v.state, State::Alive);
        assert_eq!(v.reason, "heartbeat 0s ago");
    }

    fn first_look(at: SystemTime) -> Option<Sighting> {
        Some(Sighting { at, after: None })
    }

    /// A holder whose clock ran 7 minutes behind, against a 2-minute
    /// threshold: its claim, stamped "7 minutes ago" the moment it was made,
    /// was reaped at once ("heartbeat (less the clock skew allowance) 2m03s
    /// ago") by farms that had just seen it appear. Seen appear, a record is
    /// judged on this host's clock alone, and its host's clock is named.
    #[test]
    fn a_claim_seen_appear_is_judged_on_this_clock_alone() {
        let h = here();
        let mut c = claim("box2", HOLDER);
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(T0 + s);
        // Stamped 7 minutes before it appeared here (between looks at 1000 and 1001).
        c.heartbeat_at = at(1000) - Duration::from_secs(420);
        let seen = Sighting {
            at: at(1001),
            after: Some(at(1000)),
        };
        let v = judge_at(&h, 1010, Some(120), &nothing_runs).claim(&c, c.heartbeat_at, Some(seen));
        assert_eq!((v.state, v.reapable), (State::Alive, false), "{}", v.reason);
        assert_eq!(clock_off(&c, &seen), Some(-420));
        // Dead, it is taken a threshold after it appeared, on this clock.
        let v = judge_at(&h, 1122, Some(120), &nothing_runs).claim(&c, c.heartbeat_at, Some(seen));
        assert_eq!((v.state, v.reapable), (State::Stale, true), "{}", v.reason);
        assert!(v.reason.contains("appeared here"), "{}", v.reason);
        // A stamp ahead of the sighting names the clock too; one within the
        // span (or the slack) names nothing.
        c.heartbeat_at = at(1001) + Duration::from_secs(600);
        assert_eq!(clock_off(&c, &seen), Some(600));
        c.heartbeat_at = at(1000) - Duration::from_secs(30);
        assert_eq!(clock_off(&c, &seen), None);
        assert_eq!(clock_off(&c, &first_look(at(1001)).unwrap()), None);
    }

    #[test]
    fn skewed_clocks_neither_reap_live_claims_early_nor_keep_dead_ones() {
        let h = here();
        let c = claim("box2", HOLDER);
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(T0 + s);
        let skew = CLOCK_SKEW.as_secs();
        // The holder's clock runs 20 minutes behind: its fresh heartbeat is
        // stamped 20 minutes ago. Seen here 10 s ago, it is alive.
        let behind = at(1200) - Duration::from_secs(1200);
        let v =
            judge_at(&h, 1200, Some(1800), &nothing_runs).claim(&c, behind, first_look(at(1190)));
        assert_eq!((v.state, v.reapable), (State::Alive, false), "{}", v.reason);
        // The holder's clock runs a day ahead and it died: its stamp is in the
        // future, yet one threshold after first seen here, it is stale.
        let ahead = at(86_400);
        let v = judge_at(&h, 1801, Some(1800), &nothing_runs).claim(&c, ahead, first_look(at(0)));
        assert_eq!((v.state, v.reapable), (State::Stale, true), "{}", v.reason);
        assert!(v.reason.contains("first seen here"), "{}", v.reason);
        // A stamp far in the past (less the allowance) ages a claim this host
        // only just saw: a new judge need not wait a full threshold.
        let old = at(0);
        let now = 1800 + skew + 1;
        let v = judge_at(&h, now, Some(1800), &nothing_runs).claim(&c, old, first_look(at(now)));
        assert_eq!((v.state, v.reapable), (State::Stale, true), "{}", v.reason);
        assert!(v.reason.contains("skew"), "{}", v.reason);
    }

    #[test]
    fn a_corrupt_claim_not_yet_old_enough_says_what_waits() {
        let h = here();
        let m = UNIX_EPOCH + Duration::from_secs(T0);
        let young = judge_at(&h, 10, Some(60), &nothing_runs).corrupt("empty file", m);
        let note = waiting_on("t1", &young, Duration::from_secs(60)).unwrap();
        assert_eq!(
            note,
            "waiting on `t1`: its claim file is corrupt (empty file), modified 10s ago; \
             this run takes it once it is older than 1m (as farm reap --older-than 1m does), \
             or free it now: farm release t1 --force"
        );
        let old = judge_at(&h, 61, Some(60), &nothing_runs).corrupt("empty file", m);
        assert_eq!(waiting_on("t1", &old, Duration::from_secs(60)), None);
        let c = claim("box2", None);
        let alive = judge_at(&h, 0, Some(60), &nothing_runs).claim(&c, c.heartbeat_at, None);
        assert_eq!(waiting_on("t", &alive, Duration::from_secs(60)), None);
        let odd = waiting_on("a b", &young, Duration::from_secs(60)).unwrap();
        assert!(!odd.contains("release"), "{odd}");
    }

    #[test]
    fn corrupt_reapable_only_by_age() {
        let h = here();
        let m = UNIX_EPOCH + Duration::from_secs(T0);
        let young = judge_at(&h, 10, None, &nothing_runs).corrupt("empty file", m);
        assert_eq!((young.state, young.reapable), (State::Corrupt, false));
        let old = judge_at(&h, 10, Some(5), &nothing_runs).corrupt("empty file", m);
        assert_eq!((old.state, old.reapable), (State::Corrupt, true));
        assert!(
            old.reason
                .starts_with("corrupt (empty file), modified 10s ago"),
            "{}",
            old.reason
        );
    }
}
