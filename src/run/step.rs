//! What one step of an agent's loop comes to ([`Step`]), and the decisions
//! the loop takes that need no process: when it ends ([`ending`]), what an
//! agent with nothing to claim does ([`idle_next`]), where it reads the
//! board ([`Source`]), and what to make of a task the board calls ready and
//! the clone does not ([`Unready`]). The loop itself is in
//! [`agent`](crate::run::agent).

use std::time::SystemTime;

use crate::names::TaskId;
use crate::run::state::Run;

/// What one step of an agent's loop did.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// The loop ends (why).
    End(Ending),
    /// Nothing to claim: it waited for the hub to change, or looked again.
    Idle,
    /// The breaker paused the loop; the board is read again.
    Paused,
    /// `farm pause` holds the agent: it claimed nothing (or gave back what
    /// it had just won), and waited for the hub to change.
    OnHold,
    /// Another agent claimed the task first.
    LostRace,
    /// The task was not ready on the branch after all: released.
    NotReady,
    /// The task was out of attempts before any session: to `tasks/failed/`.
    Retired,
    /// The role's standing task was armed.
    Armed,
    /// A session ran on the task.
    Ran,
    /// An approved change was landed (or failed to), without a session.
    Landed,
    /// A question a clone kept went on the board (see
    /// [`asking::recover`](crate::run::asking::recover)), without a session.
    Asked,
}

/// Why an agent's loop ends.
#[derive(Debug, PartialEq)]
pub(super) enum Ending {
    /// A stop was asked (`farm stop`, of the run or of this agent; Ctrl-C).
    Drained,
    /// `--max-sessions` sessions started.
    MaxSessions,
    /// Past `--until`.
    PastUntil,
    /// The cost budget is spent: what the sessions cost, and the budget.
    Budget { spent: f64, max: f64 },
    /// `--once`: one session ran.
    Once,
    /// The board is settled (and the run does not `--watch`).
    Settled,
    /// Only tasks this agent lost to others again and again are ready.
    LeftToOthers(TaskId),
}

/// What the loop's gauges read before a claim.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Gauges {
    pub(super) draining: bool,
    pub(super) sessions_left: bool,
    pub(super) past_until: bool,
    pub(super) over_budget: Option<(f64, f64)>,
}

impl Gauges {
    /// The gauges of the agent `name`'s loop.
    pub(super) fn read(run: &Run, name: &str) -> Gauges {
        Gauges {
            draining: run.draining(name),
            sessions_left: run.sessions_left(),
            past_until: run.config.until.is_some_and(|u| SystemTime::now() >= u),
            over_budget: run.over_budget(),
        }
    }
}

/// Whether the loop ends before its next claim, by its gauges.
pub(super) fn ending(g: &Gauges) -> Option<Ending> {
    if !g.sessions_left {
        Some(Ending::MaxSessions)
    } else if g.draining {
        Some(Ending::Drained)
    } else if g.past_until {
        Some(Ending::PastUntil)
    } else {
        g.over_budget
            .map(|(spent, max)| Ending::Budget { spent, max })
    }
}

/// What an agent with nothing to claim sees.
#[derive(Debug, Default)]
pub(super) struct IdleFacts {
    /// A ready task this agent leaves to the others (it lost it twice).
    pub(super) left_to_others: Option<TaskId>,
    /// Its role's standing task is wanted: the role has one, and the rest
    /// of the board has work (or the run watches for more).
    pub(super) standing_wanted: bool,
    /// Nothing is pending that could ever be claimed.
    pub(super) settled: bool,
    /// `--watch`: a settled board is waited on, not an end.
    pub(super) watch: bool,
    /// The board was read from the branch itself (the clone).
    pub(super) from_branch: bool,
    /// An integration of this agent's is going on beside the loop.
    pub(super) integrating: bool,
}

/// What an agent with nothing to claim does next.
#[derive(Debug, PartialEq)]
pub(super) enum IdleNext {
    /// End the loop: waiting for that task would be waiting for ever.
    LeaveToOthers(TaskId),
    /// Arm the role's standing task.
    ArmStanding,
    /// Read the board from the branch to confirm it is settled: ending is
    /// final, and a work tree may be in the middle of a push.
    Confirm,
    /// Wait for the integration beside the loop to end, then look again:
    /// ending is final, and its end may change the board (its publish cut
    /// half-way, its task ready again) — a board read meanwhile may even
    /// show the hub between two of its refs.
    Join,
    /// End the loop: the board is settled.
    End,
    /// Wait for the hub to change.
    Wait,
}

pub(super) fn idle_next(f: &IdleFacts) -> IdleNext {
    if let Some(id) = &f.left_to_others {
        IdleNext::LeaveToOthers(id.clone())
    } else if f.standing_wanted {
        IdleNext::ArmStanding
    } else if f.settled && !f.watch {
        if f.integrating {
            IdleNext::Join
        } else if f.from_branch {
            IdleNext::End
        } else {
            IdleNext::Confirm
        }
    } else {
        IdleNext::Wait
    }
}

/// Where the loop reads the board from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Source {
    /// The hub's work tree, when it has the branch checked out: the board
    /// as pushed, read with no git process at all (else the clone).
    HubWorkTree,
    /// The branch, through the clone: the hub's work tree said a task was
    /// ready that the branch does not have pending (an uncommitted draft,
    /// say), so the branch is read until it moves past `at`. Only a push can
    /// make the work tree and the branch agree again (claims coming and
    /// going do not).
    Branch { at: Option<String> },
}

impl Source {
    /// The source once the branch is at `rev`: the work tree again when a
    /// push moved the branch.
    pub(super) fn at(self, rev: &Option<String>) -> Source {
        match self {
            Source::Branch { at } if at == *rev => Source::Branch { at },
            _ => Source::HubWorkTree,
        }
    }
}

/// The looks at one task that the board called ready and the clone, synced
/// to the same commit, did not: the board reads the commit's tree, the
/// clone its work tree, so no push explains it — the clone's files are not
/// what git says they are. The second look resets them; a third ends the
/// run.
#[derive(Default)]
pub(super) struct Unready {
    task: Option<TaskId>,
    at: String,
    looks: u32,
}

/// What to do about a task not ready in the clone (see [`Unready`]).
#[derive(Debug, PartialEq)]
pub(super) enum Look {
    /// Look again.
    Again,
    /// Reset the clone's work tree from git, and give the branch a moment.
    ResetFiles,
    /// End the run: the clone does not show what git says it holds.
    GiveUp,
}

impl Unready {
    /// Count a look at `task` with the clone at commit `at`.
    pub(super) fn look(&mut self, task: &TaskId, at: String) -> Look {
        if self.task.as_ref() != Some(task) || self.at != at {
            *self = Unready {
                task: Some(task.clone()),
                at,
                looks: 0,
            };
        }
        self.looks += 1;
        match self.looks {
            1 => Look::Again,
            2 => Look::ResetFiles,
            _ => Look::GiveUp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TaskId {
        s.parse().unwrap()
    }

    fn going() -> Gauges {
        Gauges {
            sessions_left: true,
            ..Gauges::default()
        }
    }

    #[test]
    fn a_loop_with_sessions_left_and_no_stop_goes_on() {
        assert_eq!(ending(&going()), None);
    }

    #[test]
    fn no_session_left_ends_before_a_stop_asked() {
        let g = Gauges {
            sessions_left: false,
            draining: true,
            past_until: true,
            ..going()
        };
        assert_eq!(ending(&g), Some(Ending::MaxSessions));
        let g = Gauges {
            draining: true,
            past_until: true,
            ..going()
        };
        assert_eq!(ending(&g), Some(Ending::Drained));
    }

    #[test]
    fn past_until_and_a_spent_budget_end_the_loop_in_that_order() {
        let g = Gauges {
            past_until: true,
            over_budget: Some((2.0, 1.0)),
            ..going()
        };
        assert_eq!(ending(&g), Some(Ending::PastUntil));
        let g = Gauges {
            over_budget: Some((2.0, 1.0)),
            ..going()
        };
        assert_eq!(
            ending(&g),
            Some(Ending::Budget {
                spent: 2.0,
                max: 1.0
            })
        );
    }

    #[test]
    fn a_task_left_to_others_ends_the_loop_before_anything_else() {
        let f = IdleFacts {
            left_to_others: Some(id("t1")),
            standing_wanted: true,
            settled: true,
            ..IdleFacts::default()
        };
        assert_eq!(idle_next(&f), IdleNext::LeaveToOthers(id("t1")));
    }

    #[test]
    fn a_wanted_standing_task_is_armed_before_a_settled_board_ends() {
        let f = IdleFacts {
            standing_wanted: true,
            settled: true,
            from_branch: true,
            ..IdleFacts::default()
        };
        assert_eq!(idle_next(&f), IdleNext::ArmStanding);
    }

    #[test]
    fn a_settled_board_ends_the_loop_only_once_read_from_the_branch() {
        let f = IdleFacts {
            settled: true,
            ..IdleFacts::default()
        };
        assert_eq!(idle_next(&f), IdleNext::Confirm);
        let f = IdleFacts {
            from_branch: true,
            ..f
        };
        assert_eq!(idle_next(&f), IdleNext::End);
    }

    #[test]
    fn a_settled_board_ends_the_loop_only_once_its_own_integration_ended() {
        let f = IdleFacts {
            settled: true,
            from_branch: true,
            integrating: true,
            ..IdleFacts::default()
        };
        assert_eq!(idle_next(&f), IdleNext::Join);
    }

    #[test]
    fn a_watching_run_or_an_unsettled_board_waits() {
        let f = IdleFacts {
            settled: true,
            watch: true,
            from_branch: true,
            ..IdleFacts::default()
        };
        assert_eq!(idle_next(&f), IdleNext::Wait);
        assert_eq!(idle_next(&IdleFacts::default()), IdleNext::Wait);
    }

    #[test]
    fn the_branch_is_read_until_it_moves() {
        let at = Some("a".to_owned());
        let branch = Source::Branch { at: at.clone() };
        assert_eq!(branch.clone().at(&at), branch);
        assert_eq!(branch.at(&Some("b".to_owned())), Source::HubWorkTree);
        assert_eq!(Source::HubWorkTree.at(&at), Source::HubWorkTree);
    }

    #[test]
    fn a_task_unready_at_one_commit_resets_the_files_then_gives_up() {
        let mut u = Unready::default();
        assert_eq!(u.look(&id("t1"), "c1".into()), Look::Again);
        assert_eq!(u.look(&id("t1"), "c1".into()), Look::ResetFiles);
        assert_eq!(u.look(&id("t1"), "c1".into()), Look::GiveUp);
        // Another commit, or another task, starts the count again.
        assert_eq!(u.look(&id("t1"), "c2".into()), Look::Again);
        assert_eq!(u.look(&id("t2"), "c2".into()), Look::Again);
        assert_eq!(u.look(&id("t2"), "c2".into()), Look::ResetFiles);
    }
}
