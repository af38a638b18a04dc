//! What happened in a run, as one typed value: each kind of journal line is
//! a variant of [`Event`], with the fields that line has. The journal writes
//! it ([`Journal::record`](super::journal::Journal::record)), `farm status`
//! and `farm report` read it back ([`Entry`](super::journal::Entry)), and
//! where a run also tells a person, the line it says and its colour come
//! from the same value ([`Event::line`], [`Event::tone`]): what is recorded,
//! read and said cannot drift apart.
//!
//! The lines are those farm has always written, key for key: a journal of an
//! older farm reads as well as a new one. So every field may be missing on
//! reading (`#[serde(default)]`: older farms wrote fewer, and tests write
//! lines by hand), a field that was written as `null` still is (no
//! `skip_serializing_if`), and a kind this farm does not know reads as
//! [`Event::Unknown`] rather than not at all: every line still counts
//! towards its run's span.
//!
//! Text fields borrow from the journal's text when read (`Cow`): a
//! 10,000-session night is 30,000 lines, and an owned string for each of
//! their fields was a sixth of `farm status`'s time.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::output::Style;
use crate::suite::report::Counts;

/// One thing that happened, as its journal line says it (the line's
/// `event` is the variant's name in snake case). Each variant's fields are
/// its line's, under the same names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    /// A run began, with these agents; `cli` is the program of its agent
    /// CLI (`null` when the command has no file name).
    RunStart {
        #[serde(default)]
        agents: Vec<String>,
        #[serde(default, borrow)]
        cli: Option<Cow<'a, str>>,
        /// Each agent's role, for those that have one.
        #[serde(default)]
        roles: BTreeMap<String, String>,
        #[serde(default, borrow)]
        hub: Cow<'a, str>,
        /// The claim store's kind (`fs`, `git`).
        #[serde(default, borrow)]
        store: Cow<'a, str>,
        #[serde(default, borrow)]
        host: Cow<'a, str>,
    },
    /// A run ended: what its agents did, and what it cost where the CLI
    /// said (`null` where it did not).
    RunEnd {
        #[serde(default)]
        sessions: usize,
        #[serde(default)]
        done: usize,
        #[serde(default)]
        failed: usize,
        #[serde(default)]
        rescued: usize,
        #[serde(default)]
        cost_usd: Option<f64>,
        #[serde(default)]
        input_tokens: Option<u64>,
        #[serde(default)]
        output_tokens: Option<u64>,
    },
    /// An agent claimed `task` for its attempt `attempt`.
    Claim {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        attempt: u32,
        /// The agent's role, when it has one.
        #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
        role: Option<Cow<'a, str>>,
    },
    /// A session ended: its exit (`outcome`: "success", "timed out"…),
    /// what farm made of it (`class`: "success", "usage limit"…), how long
    /// it ran, its log, and what it cost where the CLI said.
    SessionEnd {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        attempt: u32,
        #[serde(default, borrow)]
        outcome: Cow<'a, str>,
        #[serde(default, borrow)]
        class: Cow<'a, str>,
        #[serde(default)]
        secs: f64,
        #[serde(default, borrow)]
        log: Cow<'a, str>,
        #[serde(default)]
        cost_usd: Option<f64>,
        #[serde(default)]
        input_tokens: Option<u64>,
        #[serde(default)]
        output_tokens: Option<u64>,
    },
    /// A merge session began on `conflicts` conflicted files.
    MergeStart {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        conflicts: usize,
    },
    /// A merge session ended: its exit, and what became of the merge
    /// (`result`: "resolved", "unresolved"…).
    MergeEnd {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        outcome: Cow<'a, str>,
        #[serde(default, borrow)]
        result: Cow<'a, str>,
        #[serde(default)]
        secs: f64,
        #[serde(default, borrow)]
        log: Cow<'a, str>,
        #[serde(default)]
        cost_usd: Option<f64>,
        #[serde(default)]
        input_tokens: Option<u64>,
        #[serde(default)]
        output_tokens: Option<u64>,
    },
    /// `task` was integrated into the branch.
    Done {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
    },
    /// A failed attempt noted on the board (`attempt`), or a task out of
    /// attempts retired without a session (`attempts`, "out of attempts");
    /// `gave_up` when the task went to `tasks/failed/`.
    Failed {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempts: Option<u32>,
        #[serde(default, borrow)]
        why: Cow<'a, str>,
        #[serde(default)]
        gave_up: bool,
    },
    /// Work kept on the hub's `branch`: of `task`, or (without one) what an
    /// earlier run left in a clone.
    Rescue {
        #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
        task: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        branch: Cow<'a, str>,
        #[serde(default, borrow)]
        why: Cow<'a, str>,
    },
    /// No rescue branch, `because` the work is on the branch already.
    RescueSkipped {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        why: Cow<'a, str>,
        #[serde(default, borrow)]
        because: Cow<'a, str>,
    },
    /// A session that did not start (no attempt counted).
    Unstarted {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        outcome: Cow<'a, str>,
    },
    /// `task` was settled elsewhere while its session worked on it: `file`
    /// is its file on the branch.
    Elsewhere {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        file: Cow<'a, str>,
    },
    /// Integrating `task` conflicted in `files`.
    Conflict {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        files: Vec<String>,
    },
    /// Another claimer won `task`.
    LostRace {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
    },
    /// A dead or stale claim on `task` (a claim file's name) was taken back.
    Reap {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        why: Cow<'a, str>,
    },
    /// The agent claims `task` no more.
    Skip {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        why: Cow<'a, str>,
    },
    /// The agent CLI hit a limit on `task`: every agent waits `until`.
    Limit {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        until: Cow<'a, str>,
        #[serde(default)]
        why: Limited,
    },
    /// The agent waits `until` before it claims again: the agent CLI hit a
    /// limit (`why`) in `by`'s session on `task` — another agent's, or its
    /// own (which also has its `limit` line). Each agent that waits says so,
    /// and says it again when the wait grows.
    Wait {
        #[serde(default, borrow)]
        until: Cow<'a, str>,
        #[serde(default)]
        why: Limited,
        #[serde(default, borrow)]
        by: Cow<'a, str>,
        #[serde(default, borrow)]
        task: Cow<'a, str>,
    },
    /// The circuit breaker tripped: the agent pauses `until`.
    Trip {
        #[serde(default, borrow)]
        until: Cow<'a, str>,
        #[serde(default, borrow)]
        why: Cow<'a, str>,
    },
    /// The standing task `task` of `role` was armed.
    Standing {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        role: Cow<'a, str>,
    },
    /// The cost budget is spent: no new claims.
    Budget {
        #[serde(default)]
        spent_usd: f64,
        #[serde(default)]
        max_usd: f64,
    },
    /// One of farm's git commands was killed; the agent's turns start again.
    GitKilled {
        #[serde(default, borrow)]
        error: Cow<'a, str>,
    },
    /// `tests` failed, then passed when run again.
    Flaky {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        tests: Vec<String>,
    },
    /// `task`'s change took a place in the merge queue, behind `ahead`
    /// others.
    Queued {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        ahead: usize,
    },
    /// `task`'s change left the merge queue after `secs` (landing, evicted,
    /// or cut short): built `builds` times, tested `tested` times in line.
    Unqueued {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        secs: f64,
        #[serde(default)]
        builds: u32,
        #[serde(default)]
        tested: u32,
    },
    /// `task`'s change landed from the merge queue with the passed changes
    /// just behind it, `with`, in one push (a line elsewhere).
    Batch {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default)]
        with: Vec<String>,
    },
    /// The test suite ran for `task` (`kind`: "gate", "rerun", "baseline"):
    /// its counts, or the error that kept it from a report.
    Tests {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        kind: Cow<'a, str>,
        #[serde(default)]
        secs: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counts: Option<Counts>,
        #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
        error: Option<Cow<'a, str>>,
    },
    /// The board steered by the branch's tests at `commit`: test tasks
    /// `added` and `closed`; `ran` when the suite ran for it.
    Steer {
        #[serde(default, borrow)]
        commit: Cow<'a, str>,
        #[serde(default)]
        counts: Counts,
        #[serde(default)]
        ran: bool,
        #[serde(default)]
        added: Vec<String>,
        #[serde(default)]
        closed: Vec<String>,
    },
    SteerError {
        #[serde(default, borrow)]
        error: Cow<'a, str>,
    },
    /// The schedules made these tasks.
    ScheduleFire {
        #[serde(default)]
        tasks: Vec<String>,
    },
    ScheduleError {
        #[serde(default, borrow)]
        error: Cow<'a, str>,
    },
    /// An occurrence skipped: the schedule's `pending` one is not settled.
    ScheduleSkip {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        pending: Cow<'a, str>,
    },
    /// The agent took message `id` (`farm say`), said by `by`: its next
    /// session's prompt holds it.
    Message {
        #[serde(default, borrow)]
        id: Cow<'a, str>,
        #[serde(default, borrow)]
        by: Cow<'a, str>,
    },
    /// `task`'s session asked `question` instead of guessing: the task
    /// waits on the board for `farm answer`, no attempt counted; the
    /// session's commits are on the hub's branch `work`, if it made any.
    Asked {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        question: Cow<'a, str>,
        #[serde(default, borrow)]
        work: Option<Cow<'a, str>>,
    },
    /// `task`'s session finished with a change that waits for review
    /// (`review = true`): it is on the hub's branch `change`, the task
    /// waits on the board for `farm approve` or `farm reject`.
    Review {
        #[serde(default, borrow)]
        task: Cow<'a, str>,
        #[serde(default, borrow)]
        change: Cow<'a, str>,
    },
    /// A line of a kind this farm does not write (a newer farm's).
    #[serde(other)]
    Unknown,
}

/// What limited the agent CLI. Read as a usage limit unless the line says
/// "api error", as farm has always read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum Limited {
    #[default]
    #[serde(rename = "usage limit")]
    UsageLimit,
    #[serde(rename = "api error")]
    ApiError,
}

impl<'de> Deserialize<'de> for Limited {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Limited, D::Error> {
        struct Word;
        impl serde::de::Visitor<'_> for Word {
            type Value = Limited;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("what limited the agent CLI")
            }
            fn visit_str<E>(self, word: &str) -> Result<Limited, E> {
                Ok(match word {
                    "api error" => Limited::ApiError,
                    _ => Limited::UsageLimit,
                })
            }
        }
        d.deserialize_str(Word)
    }
}

impl Limited {
    /// The word the journal and `farm status` use.
    pub fn label(self) -> &'static str {
        match self {
            Limited::UsageLimit => "usage limit",
            Limited::ApiError => "api error",
        }
    }
}

impl Event<'_> {
    /// What an agent says of it, where the line is the event's alone (a line
    /// that needs more than the journal keeps, like the task's maximum
    /// attempts, is said by its caller).
    pub fn line(&self) -> Option<String> {
        Some(match self {
            Event::Reap { task, why } => format!("reaped `{task}`: {why}"),
            Event::LostRace { task } => format!("lost the race for `{task}`; looking again"),
            Event::Rescue {
                task: Some(task),
                branch,
                why,
            } => format!("`{task}`: {why}; its commits are on `{branch}`"),
            Event::Failed {
                task,
                attempt: Some(attempt),
                why,
                gave_up,
                ..
            } => {
                let what = if *gave_up {
                    "moved to tasks/failed/"
                } else {
                    "back on the board"
                };
                format!("`{task}`: attempt {attempt} failed ({why}); {what}")
            }
            Event::Flaky { task, tests } => {
                format!(
                    "`{task}`: flaky, passed when run again: {}",
                    tests.join(", ")
                )
            }
            Event::Standing { task, role } => {
                format!("armed the standing task `{task}` of role `{role}`")
            }
            Event::Budget { spent_usd, max_usd } => format!(
                "the cost budget is spent (${spent_usd:.2} of ${max_usd:.2}): no new claims"
            ),
            Event::Asked { task, question, .. } => {
                let first = question.lines().next().unwrap_or_default();
                format!(
                    "`{task}`: asked a question ({first}); it waits for farm answer {task} TEXT \
                     (no attempt counted)"
                )
            }
            Event::Message { id, by } => {
                format!("took message `{id}` from {by}: its next session's prompt holds it")
            }
            Event::Batch { task, with } => format!(
                "`{task}` landed with the change(s) behind it in line: {}",
                with.join(", ")
            ),
            Event::Review { task, change } => format!(
                "`{task}`: its change waits for review on `{change}` \
                 (farm approve {task}, or farm reject {task} -m WHY)"
            ),
            Event::GitKilled { error } => format!("{error}; reopening its clone and going on"),
            Event::ScheduleFire { tasks } => format!("schedules made {}", tasks.join(", ")),
            Event::ScheduleError { error } => {
                format!("warning: cannot fire the schedules: {error}")
            }
            Event::SteerError { error } => {
                format!("warning: cannot make tasks of the tests: {error}")
            }
            _ => return None,
        })
    }

    /// The colour of what is said of it: a task done, a failure, or
    /// something to keep an eye on (work kept aside, a wait, a lost race).
    pub fn tone(&self) -> Option<Style> {
        match self {
            Event::Done { .. } => Some(Style::Good),
            Event::Failed { .. }
            | Event::Unstarted { .. }
            | Event::Trip { .. }
            | Event::GitKilled { .. } => Some(Style::Bad),
            Event::Limit { why, .. } => match why {
                Limited::ApiError => Some(Style::Bad),
                Limited::UsageLimit => None,
            },
            Event::Rescue { .. }
            | Event::Asked { .. }
            | Event::Review { .. }
            | Event::LostRace { .. }
            | Event::Reap { .. }
            | Event::Flaky { .. } => Some(Style::Warn),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_said_line_and_its_tone_come_from_the_event() {
        let failed = Event::Failed {
            task: "t1".into(),
            attempt: Some(2),
            attempts: None,
            why: "failed with exit code 3".into(),
            gave_up: false,
        };
        assert_eq!(
            failed.line().as_deref(),
            Some("`t1`: attempt 2 failed (failed with exit code 3); back on the board")
        );
        assert_eq!(failed.tone(), Some(Style::Bad));
        let lost = Event::LostRace { task: "t2".into() };
        assert_eq!(
            lost.line().as_deref(),
            Some("lost the race for `t2`; looking again")
        );
        assert_eq!(lost.tone(), Some(Style::Warn));
        // The colour is the event's, whatever words its text holds.
        let rescue = Event::Rescue {
            task: Some("fix-failed-login".into()),
            branch: "farm/rescue/fix-failed-login/n1".into(),
            why: "the run was stopped".into(),
        };
        assert_eq!(
            rescue.line().as_deref(),
            Some(
                "`fix-failed-login`: the run was stopped; its commits are on \
                 `farm/rescue/fix-failed-login/n1`"
            )
        );
        assert_eq!(rescue.tone(), Some(Style::Warn));
        let budget = Event::Budget {
            spent_usd: 1.5,
            max_usd: 1.0,
        };
        assert_eq!(
            budget.line().as_deref(),
            Some("the cost budget is spent ($1.50 of $1.00): no new claims")
        );
        assert_eq!(budget.tone(), None);
        // A line that needs more than the journal keeps is the caller's.
        let claim = Event::Claim {
            task: "t1".into(),
            attempt: 1,
            role: None,
        };
        assert_eq!(claim.line(), None);
        assert_eq!(Event::Done { task: "t1".into() }.tone(), Some(Style::Good));
    }
}
