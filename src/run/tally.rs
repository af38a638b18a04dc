//! What one agent's loop keeps of the tasks it settled: its circuit
//! breaker, the tasks it lost its claim on, and which to leave alone.
//!
//! Counting ([`Tally::tally`]) is pure: it says what the loop must do about
//! an end (wait out a limit, stop the run...); [`Tally::count`] does it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use crate::board::{self, Task};
use crate::run::event::{Event, Limited};

use crate::claims::record::timestamp;
use crate::error::Error;
use crate::names::TaskId;
use crate::run::breaker::Breaker;
use crate::run::settle::End;
use crate::run::state::{Run, Summary};

/// What the loop keeps of the tasks it settled: the circuit breaker; the
/// tasks it lost its claim on, and which to leave alone.
#[derive(Default)]
pub(super) struct Tally {
    breaker: Breaker,
    /// Claims on a task taken over by another holder while this agent
    /// worked on it, per task.
    lost: HashMap<TaskId, u32>,
    /// Tasks this agent claims no more in this run: taken over again and
    /// again, it would otherwise run sessions on them that count nothing.
    skip: HashSet<TaskId>,
    /// A task whose session did not start: the next pick tries another one
    /// first, so that an agent that cannot start shows on two tasks.
    skip_once: Option<TaskId>,
    /// Where among the best ready tasks this agent reaches first on the
    /// git store (see [`board::next_spread`]); `None`: the best.
    spread: Option<usize>,
    /// It has lost a race for a claim: it spreads from then on. Until
    /// then it takes the best, as an agent alone always does.
    raced: bool,
}

/// The offset an agent named `name` spreads its picks by (see
/// [`board::next_spread`]): its farm's agents `NAME-1` … `NAME-N` take
/// offsets one after another, from a place that `NAME` (a host's name by
/// default) sets, so the agents of one farm never reach for the same task
/// and those of two farms seldom do.
pub(super) fn spread_offset(name: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let (base, n) = name
        .rsplit_once('-')
        .and_then(|(base, n)| Some((base, n.parse::<usize>().ok()?)))
        .unwrap_or((name, 0));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    base.hash(&mut hasher);
    (hasher.finish() as usize).wrapping_add(n)
}

/// What the loop must do about how a task ended, once it is counted.
#[derive(Debug, PartialEq)]
pub(super) enum Counted {
    /// Nothing more.
    Nothing,
    /// The task's claim was taken over this many times: this agent claims
    /// it no more (said once).
    Skipped(u32),
    /// A usage limit or an API error: every loop waits (until `reset`, when
    /// known); the session was no attempt, but one of `--max-sessions`.
    Limited {
        reset: Option<SystemTime>,
        transient: bool,
    },
    /// The agent CLI cannot work (why): the run stops.
    Fatal(String),
}

impl Tally {
    /// A tally whose picks spread by `spread` once a race is lost (see
    /// [`board::next_spread`]).
    pub(super) fn spreading(spread: Option<usize>) -> Tally {
        Tally {
            spread,
            ..Tally::default()
        }
    }

    /// Another agent claimed the task picked first: pick spread from now.
    pub(super) fn lost_race(&mut self) {
        self.raced = true;
    }

    /// The next task for this agent, if any: not one it leaves alone, nor
    /// the one that just did not start while another is ready.
    /// (Nor `in_flight`, the task of the integration beside the loop.)
    pub(super) fn pick(
        &mut self,
        snapshot: &board::Snapshot,
        in_flight: Option<&TaskId>,
        not_mine: &HashSet<TaskId>,
    ) -> Option<Task> {
        let mut skip = self.skip.clone();
        skip.extend(in_flight.cloned());
        skip.extend(not_mine.iter().cloned());
        let mut first = skip.clone();
        first.extend(self.skip_once.iter().cloned());
        let next = |skip: &HashSet<TaskId>| match self.spread.filter(|_| self.raced) {
            Some(offset) => board::next_spread(snapshot, skip, offset),
            None => board::next(snapshot, skip),
        };
        let task = next(&first).or_else(|| next(&skip)).cloned();
        if task.is_some() {
            self.skip_once = None;
        }
        task
    }

    /// Count how task `id` ended in `summary` and the breaker (which
    /// `trip_after` failures in a row trip); what the loop must do now.
    pub(super) fn tally(
        &mut self,
        id: &TaskId,
        end: End,
        trip_after: u32,
        summary: &mut Summary,
    ) -> Counted {
        match end {
            End::Done => {
                summary.done += 1;
                self.breaker.done();
                Counted::Nothing
            }
            End::Failed { rescued } => {
                summary.failed += 1;
                summary.rescued += usize::from(rescued);
                self.breaker.failed(trip_after);
                Counted::Nothing
            }
            End::Rescued { rescued } => {
                summary.rescued += usize::from(rescued);
                Counted::Nothing
            }
            End::Review => {
                self.breaker.done();
                Counted::Nothing
            }
            End::Lost { rescued } => {
                summary.rescued += usize::from(rescued);
                // Taken over once is the protocol at work (a reaper judged
                // this agent dead); twice by the same agent is a loop that
                // would spin without counting anything.
                let times = self.lost.entry(id.clone()).or_default();
                *times += 1;
                if *times >= 2 && self.skip.insert(id.clone()) {
                    Counted::Skipped(*times)
                } else {
                    Counted::Nothing
                }
            }
            End::Unstarted { rescued } => {
                summary.rescued += usize::from(rescued);
                self.skip_once = Some(id.clone());
                Counted::Nothing
            }
            End::Limited {
                reset,
                transient,
                rescued,
            } => {
                summary.rescued += usize::from(rescued);
                Counted::Limited { reset, transient }
            }
            End::Fatal { why, rescued } => {
                summary.rescued += usize::from(rescued);
                Counted::Fatal(why)
            }
        }
    }

    /// Count how task `id` ended in `summary`, and do what that asks of the
    /// run: say a task is left alone, wait out a usage limit, or stop.
    pub(super) fn count(
        &mut self,
        run: &Run,
        name: &str,
        id: &TaskId,
        end: End,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        match self.tally(id, end, run.config.trip_after, summary) {
            Counted::Nothing => {}
            Counted::Skipped(times) => {
                run.say(
                    name,
                    &format!(
                        "`{id}`: its claim was taken over {times} times; this agent claims it no more"
                    ),
                );
                run.journal.record(
                    name,
                    &Event::Skip {
                        task: id.as_str().into(),
                        why: "claim taken over again".into(),
                    },
                );
            }
            Counted::Limited { reset, transient } => {
                // Not an attempt, but one of --max-sessions: a CLI limited
                // on every try would otherwise keep a bounded run going for
                // ever, each wait longer than the last.
                let now = SystemTime::now();
                let until = run.limits.hit((name, id.as_str()), reset, transient, now);
                let what = if transient {
                    "the agent CLI's API failed"
                } else {
                    "the agent CLI hit its usage limit"
                };
                let when = if reset.is_some() {
                    "as it said"
                } else {
                    "backing off"
                };
                let limit = Event::Limit {
                    task: id.as_str().into(),
                    until: timestamp(until).into(),
                    why: if transient {
                        Limited::ApiError
                    } else {
                        Limited::UsageLimit
                    },
                };
                run.journal.record(name, &limit);
                run.say_tone(
                    name,
                    limit.tone(),
                    &format!(
                        "`{}`: {what}; no attempt counted; all agents wait {} ({when})",
                        id,
                        crate::age::Age(until.duration_since(now).unwrap_or_default())
                    ),
                );
            }
            Counted::Fatal(why) => {
                run.stop.drain();
                run.wake_all();
                return Err(
                    Error::usage(format!("`{}` cannot work: {why}", run.config.argv[0])).hint(
                        format!(
                            "run it by hand once to fix its setup (`{}`), then farm run again",
                            run.config.argv.join(" ")
                        ),
                    ),
                );
            }
        }
        Ok(())
    }

    /// Pause if the breaker tripped; whether it paused.
    pub(super) fn pause_if_due(&mut self, run: &Run, name: &str) -> bool {
        let Some(trip) = self
            .breaker
            .trip(run.config.trip_after, run.config.trip_pause)
        else {
            return false;
        };
        let pause = spread(trip.pause);
        let paused = Event::Trip {
            until: timestamp(SystemTime::now() + pause).into(),
            why: format!("{} failed sessions in a row", trip.fails).into(),
        };
        run.say_tone(
            name,
            paused.tone(),
            &format!(
                "{} failed sessions in a row and nothing done; pausing {} (circuit breaker)",
                trip.fails,
                crate::age::Age(pause)
            ),
        );
        run.journal.record(name, &paused);
        if run.tripped.fetch_add(1, Ordering::SeqCst) + 1 == run.config.names.len() {
            let who = match run.config.names.len() {
                1 => "its agent".to_owned(),
                n => format!("all {n} agents"),
            };
            run.out.note(&format!(
                "farm run: {who} tripped the circuit breaker: the run pauses"
            ));
        }
        run.pause(pause);
        run.tripped.fetch_sub(1, Ordering::SeqCst);
        true
    }
}

/// The breaker's pause spread a little, so that agents tripped together
/// do not all come back in one instant — longer, never shorter, than asked
/// (`--trip-pause 2s` once printed "pausing 1s"): up to a quarter more.
fn spread(pause: Duration) -> Duration {
    pause + crate::git::retry::jitter(pause / 6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(s: &str) -> TaskId {
        TaskId::parse(s).unwrap()
    }

    /// The agents of one farm spread their picks over as many tasks as
    /// there are agents (up to the spread's width), whatever their name.
    #[test]
    fn one_farms_agents_reach_for_different_tasks() {
        for base in ["vm", "build-box", "a-7"] {
            let offsets: HashSet<usize> = (1..=4)
                .map(|i| spread_offset(&format!("{base}-{i}")) % board::graph::SPREAD)
                .collect();
            assert_eq!(offsets.len(), 4, "{base}");
        }
        assert_eq!(spread_offset("vm"), spread_offset("vm"));
    }

    /// An agent takes the best task until it loses a race for one; then,
    /// on the git store, it spreads; on the other, never.
    #[test]
    fn picks_spread_only_after_a_lost_race_and_only_where_told() {
        let task = |n: &str| board::parse(id(n), &format!("+++\ntitle = \"{n}\"\n+++\n")).unwrap();
        let snapshot = board::Snapshot {
            pending: (1..=8).map(|i| task(&format!("t{i}")).into()).collect(),
            ..board::Snapshot::default()
        };
        let none = HashSet::new();
        // Any offset but a multiple of the spread's width (which reaches
        // for the best task, as an agent that never raced does).
        let offset = 1;
        let mut git = Tally::spreading(Some(offset));
        let mut fs = Tally::spreading(None);
        for t in [&mut git, &mut fs] {
            assert_eq!(t.pick(&snapshot, None, &none).unwrap().id.as_str(), "t1");
            t.lost_race();
        }
        assert_ne!(git.pick(&snapshot, None, &none).unwrap().id.as_str(), "t1");
        assert_eq!(fs.pick(&snapshot, None, &none).unwrap().id.as_str(), "t1");
    }

    #[test]
    fn a_pause_is_never_shorter_than_asked() {
        let asked = Duration::from_secs(2);
        for _ in 0..200 {
            let p = spread(asked);
            assert!(p >= asked && p <= asked + asked / 4, "{p:?}");
        }
    }

    #[test]
    fn ends_are_counted_in_the_summary() {
        let (mut t, mut s) = (Tally::default(), Summary::default());
        t.tally(&id("a"), End::Done, 0, &mut s);
        t.tally(&id("b"), End::Failed { rescued: true }, 0, &mut s);
        t.tally(&id("c"), End::Rescued { rescued: true }, 0, &mut s);
        t.tally(&id("d"), End::Lost { rescued: false }, 0, &mut s);
        assert_eq!((s.done, s.failed, s.rescued), (1, 1, 2));
    }

    #[test]
    fn failures_in_a_row_trip_the_breaker_and_work_done_closes_it() {
        let (mut t, mut s) = (Tally::default(), Summary::default());
        for _ in 0..2 {
            t.tally(&id("a"), End::Failed { rescued: false }, 2, &mut s);
        }
        assert!(t.breaker.trip(2, Duration::from_secs(1)).is_some());
        t.tally(&id("a"), End::Failed { rescued: false }, 2, &mut s);
        t.tally(&id("b"), End::Done, 2, &mut s);
        assert!(t.breaker.trip(2, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn a_task_taken_over_twice_is_skipped_once_said() {
        let (mut t, mut s) = (Tally::default(), Summary::default());
        let lost = || End::Lost { rescued: false };
        assert_eq!(t.tally(&id("a"), lost(), 0, &mut s), Counted::Nothing);
        assert_eq!(t.tally(&id("b"), lost(), 0, &mut s), Counted::Nothing);
        assert_eq!(t.tally(&id("a"), lost(), 0, &mut s), Counted::Skipped(2));
        assert_eq!(t.tally(&id("a"), lost(), 0, &mut s), Counted::Nothing);
        assert!(t.skip.contains(&id("a")) && !t.skip.contains(&id("b")));
    }

    #[test]
    fn limits_and_fatal_ends_ask_the_loop_to_act_and_trip_nothing() {
        let (mut t, mut s) = (Tally::default(), Summary::default());
        let limited = End::Limited {
            reset: None,
            transient: true,
            rescued: true,
        };
        assert_eq!(
            t.tally(&id("a"), limited, 1, &mut s),
            Counted::Limited {
                reset: None,
                transient: true
            }
        );
        let fatal = End::Fatal {
            why: "no login".into(),
            rescued: false,
        };
        assert_eq!(
            t.tally(&id("a"), fatal, 1, &mut s),
            Counted::Fatal("no login".into())
        );
        assert_eq!((s.failed, s.rescued), (0, 1));
        assert!(t.breaker.trip(1, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn an_unstarted_task_is_picked_last_once() {
        let (mut t, mut s) = (Tally::default(), Summary::default());
        t.tally(&id("a"), End::Unstarted { rescued: false }, 0, &mut s);
        assert_eq!(t.skip_once, Some(id("a")));
        assert_eq!(s.failed, 0);
    }
}
