//! One agent's loop, as a state machine: [`Agent`] holds the loop's state
//! and [`Agent::step`] takes one step and says what happened ([`Step`]);
//! when to stop and what to do with nothing to claim are pure functions of
//! what the loop sees ([`ending`], [`idle_next`]), unit-tested below.
//!
//! # Theory of operation
//!
//! Each agent has a name and two private clones under the state directory,
//! reused across sessions (see step 5). One step of its loop:
//!
//! 1. reap dead claims (and claims stale past `--stale-after`);
//! 2. read the board — from the hub's own work tree when it has the branch
//!    checked out (no git process), else from the clone reset to the branch
//!    ([`Source`]) — and pick the best ready, unclaimed task; claim it (with
//!    this process as holder). A lost race is not a wait: scan again at
//!    once. Nothing ready: wait for the hub to change, or end when the
//!    board is settled (confirmed on the branch itself). A `farm pause`
//!    that holds the agent is looked for before it claims and, on the hub
//!    itself, again once the claim is won (given back then), so that no
//!    session starts on a claim made after `farm pause` returned;
//! 3. reset the clone to the branch — every session starts clean — and read
//!    the task there: if it was finished meanwhile, or waits for a task not
//!    done on the branch yet, release and scan again;
//! 4. take the messages (`farm say`) that reach the agent ([`Inbox`]),
//!    render the prompt with them and run one fresh session in the clone,
//!    heartbeating the claim while it runs;
//! 5. integrate: commit what the agent left together with the move to
//!    `tasks/done/`, rebase onto the hub's branch (merge on conflict, with a
//!    merge session for the conflicted files), push under the hub's push
//!    lock — a rejected push means catch up and push again. Before each push
//!    the claim must still be ours. After a successful session this goes on
//!    beside the loop ([`Integration`]), in the clone the session used,
//!    while the loop takes the next task in the agent's other clone;
//! 6. on failure, the work goes to `farm/rescue/<task>/<nonce>` on the hub
//!    and the attempt is recorded in the task file (to `tasks/failed/` when
//!    attempts run out);
//! 7. release the claim.
//!
//! Nothing an agent committed is lost: it lands on the branch or on a rescue
//! branch, and no push is ever forced.
//!
//! Every path makes progress or counts: a session ends in work landed, an
//! attempt counted, a wait that lifts (a usage limit, the breaker, a hub
//! work tree with changes of its own), or the run stopped. What could
//! otherwise spin for ever:
//! - a claim gone with nobody holding the task after (removed — by the
//!   session itself, through `FARM_CLAIM`, as often as not) is a failed
//!   attempt, counted under the claim taken again
//!   ([`claim`](crate::run::turn::claim)); a claim taken over by another
//!   holder counts nothing, but the same agent losing one task that way
//!   twice leaves it to the others;
//! - a session that did not start counts nothing, and a second one in a
//!   row, on another task, stops the run as a setup error;
//! - a session that rewrote the history it started on is a failed attempt:
//!   its work is rescued, never rebased into the branch;
//! - a task already out of attempts goes to `tasks/failed/` unrun;
//! - a task the board calls ready and the clone, at the same commit, does
//!   not is looked at three times at most ([`Unready`]).

use std::collections::HashSet;
use std::path::PathBuf;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::SystemTime;

use crate::board::{self, Task};
use crate::output::Style;
use crate::run::event::Event;

use crate::claims::notice::Notice;
use crate::claims::{Held, Listed, StoreError};
use crate::error::Error;
use crate::git::killed::{LOOP_RESTARTS, killed};
use crate::names::TaskId;
use crate::run::asking;
use crate::run::attempts::retire;
use crate::run::clone::PrivateClone;
use crate::run::inbox::Inbox;
use crate::run::roles::Role;
use crate::run::settle::{End, release, work};
use crate::run::slot::{Clones, Slot};
use crate::run::standing;
use crate::run::state::{Run, Summary};
use crate::run::step::{
    Ending, Gauges, IdleFacts, IdleNext, Look, Source, Step, Unready, ending, idle_next,
};
use crate::run::tally::Tally;
use crate::run::turn::{Ran, Turn, claim, reap, session};

/// Run one agent's loop until the board is settled, a stop is asked, or
/// `--once`/`--max-sessions` says so, counting what it did in `summary`.
pub fn run_loop(run: &Run, name: &str, summary: &mut Summary) -> Result<(), Error> {
    // One of farm's git commands killed by a signal (the OOM killer, a
    // user) ends the turns, every claim released and the work rescued, but
    // not the run: the turns start again, reopening the clones, whose
    // recovery makes good what the command left. A few times at most: a git
    // that is killed again and again is for the user to see.
    let mut restarts = 0;
    loop {
        match turns_settled(run, name, summary) {
            Err(e) if killed(&e) && restarts < LOOP_RESTARTS && !run.draining(name) => {
                restarts += 1;
                run.tell(
                    name,
                    &Event::GitKilled {
                        error: e.message.as_str().into(),
                    },
                );
            }
            other => return other,
        }
    }
}

/// The turns, and the integration left beside them when they ended.
fn turns_settled(run: &Run, name: &str, summary: &mut Summary) -> Result<(), Error> {
    let slot = Slot::default();
    std::thread::scope(|scope| {
        let mut agent = Agent::open(run, name, &slot, scope)?;
        let result = agent.turns();
        // Whatever ended the loop, the integration beside it is finished
        // and counted (it released its claim itself) — by a tally of its
        // own: the loop has ended, so nothing is picked, and no breaker
        // pause is waited out.
        let rest = match agent.beside.take() {
            Some(beside) => beside.join().and_then(|(_, id, end)| {
                Tally::default().count(run, name, &id, end, &mut agent.summary)
            }),
            None => Ok(()),
        };
        summary.add(&agent.summary);
        result.and(rest)
    })
}

/// An integration going on beside the loop, in the clone its session used:
/// its task, and the thread that ends with the clone, the task and its end.
struct Integration<'scope> {
    task: TaskId,
    handle: ScopedJoinHandle<'scope, (PrivateClone, TaskId, Result<End, Error>)>,
}

impl Integration<'_> {
    fn join(self) -> Result<(PrivateClone, TaskId, End), Error> {
        let (clone, id, end) = self
            .handle
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        end.map(|end| (clone, id, end))
    }
}

/// One agent's loop: its clones, the integration beside it, where it reads
/// the board, and what it counted.
struct Agent<'scope, 'env: 'scope> {
    run: &'env Run,
    name: &'env str,
    slot: &'env Slot,
    scope: &'scope Scope<'scope, 'env>,
    role: Option<&'env Role>,
    clones: Clones,
    beside: Option<Integration<'scope>>,
    source: Source,
    board: board::Cache,
    unready: Unready,
    tally: Tally,
    summary: Summary,
    /// The `farm pause` holding this agent when it last looked, if one did.
    held_by: Option<Notice>,
    /// The messages (`farm say`) it took for its next session.
    inbox: Inbox,
    /// The hub's tips (a hub elsewhere) the last idle wait saw, when the
    /// step before this one was that wait: seen before this step read the
    /// board (see [`Run::wait_for_change`]).
    idle_tips: Option<String>,
}

impl<'scope, 'env: 'scope> Agent<'scope, 'env> {
    /// The agent's clones: the one in use, and the other — made when first
    /// needed, then busy with an integration, or free. One that exists is
    /// opened now: an earlier farm killed mid-integration left its work
    /// there, and opening a clone rescues that.
    fn open(
        run: &'env Run,
        name: &'env str,
        slot: &'env Slot,
        scope: &'scope Scope<'scope, 'env>,
    ) -> Result<Self, Error> {
        let second = run.state.join("clones").join(second_clone(name));
        let clones = Clones::new(
            open_clone(run, name, name)?,
            match second.is_dir() {
                true => Some(open_clone(run, name, &second_clone(name))?),
                false => None,
            },
        );
        let mut summary = Summary::default();
        // A question a killed farm left names the work opening rescued.
        clones.all().for_each(asking::keep_rescued);
        // What an earlier run left in them and opening them rescued counts.
        for branch in clones.all().flat_map(PrivateClone::rescued) {
            summary.rescued += 1;
            let why = "an earlier run left commits in this clone";
            run.journal.record(
                name,
                &Event::Rescue {
                    task: None,
                    branch: branch.as_str().into(),
                    why: why.into(),
                },
            );
        }
        Ok(Agent {
            run,
            name,
            slot,
            scope,
            role: run.config.roles.get(name),
            clones,
            beside: None,
            source: Source::HubWorkTree,
            board: board::Cache::default(),
            unready: Unready::default(),
            // On the git store a claim is a push: agents that race spread
            // their picks rather than race again (board::next_spread).
            tally: Tally::spreading(
                (run.store.kind() == "git").then(|| crate::run::tally::spread_offset(name)),
            ),
            summary,
            held_by: None,
            inbox: Inbox::open(&run.state, name),
            idle_tips: None,
        })
    }

    /// Step until the loop ends.
    fn turns(&mut self) -> Result<(), Error> {
        loop {
            if let Step::End(why) = self.step()? {
                self.say_end(&why);
                break;
            }
        }
        let run = self.run;
        let gone = crate::run::speculate::sweep_left(run, self.clones.in_use());
        if gone > 0 {
            run.detail(
                self.name,
                &format!("deleted {gone} candidate ref(s) of changes no longer in line"),
            );
        }
        if !self.inbox.is_empty() {
            run.say(
                self.name,
                &format!(
                    "holds {} message(s) taken while idle and read by no session yet; \
                     its next run in this state dir puts them in its first prompt",
                    self.inbox.len()
                ),
            );
        }
        let kept: Vec<String> = (self.clones.all())
            .flat_map(|c| crate::run::question_file::leftovers(c.dir()))
            .map(|(id, _)| format!("`{id}`"))
            .collect();
        if !kept.is_empty() {
            run.say_tone(
                self.name,
                Style::Warn,
                &format!(
                    "keeps the question(s) on {} its clone holds and the board does not have \
                     yet; its next run in this state dir puts them there",
                    kept.join(", ")
                ),
            );
        }
        if let Some(max) = run.config.max_sessions.filter(|_| !run.sessions_left()) {
            run.say(
                self.name,
                &format!("--max-sessions {max} reached: no new claims"),
            );
        }
        Ok(())
    }

    /// One step: end, or wait out a limit, count an integration that ended,
    /// read the board, and claim and run the best task on it.
    fn step(&mut self) -> Result<Step, Error> {
        let (run, name) = (self.run, self.name);
        // Kept only from one idle wait to the next.
        let idle_tips = self.idle_tips.take();
        // A stop asked, or no session left: at once, before any wait.
        if let Some(why @ (Ending::Drained | Ending::MaxSessions)) =
            ending(&Gauges::read(run, name))
        {
            return Ok(Step::End(why));
        }
        // The agent CLI hit its limit: nobody claims until it lifts.
        run.limits.wait(
            &|l| run.say_tone(name, Style::Warn, l),
            &|wait| run.journal.record(name, wait),
            &|| !run.draining(name) && run.sessions_left(),
        );
        if let Some(why) = ending(&Gauges::read(run, name)) {
            return Ok(Step::End(why));
        }
        // An integration beside that has ended is counted now: until then
        // its task is not picked again (its claim may be gone while the
        // integration goes on — removed by its session, say).
        if self.beside.as_ref().is_some_and(|b| b.handle.is_finished()) {
            self.join_beside()?;
        }
        self.put_kept_questions()?;
        let claims = reap(run, name)?;
        let seen = run.hub.fingerprint();
        self.source =
            std::mem::replace(&mut self.source, Source::HubWorkTree).at(&run.hub.branch_rev());
        let (board_dir, snapshot) = self.read_board(&claims)?;
        let not_mine = self.not_mine(&snapshot);
        let in_flight = self.beside.as_ref().map(|b| b.task.clone());
        let Some(task) = self.tally.pick(&snapshot, in_flight.as_ref(), &not_mine) else {
            let mut not_in_flight: HashSet<_> = in_flight.into_iter().collect();
            not_in_flight.extend(not_mine);
            self.idle_tips = idle_tips;
            return self.idle(snapshot, board_dir, &not_in_flight, &seen);
        };
        // The breaker pauses before the next claim, not after the failure
        // that tripped it: a run whose last task just failed ends at once.
        if self.tally.pause_if_due(run, name) {
            return Ok(Step::Paused); // the board moved on meanwhile
        }
        // `farm pause`: no claim while it holds. The store read the hub
        // for the reaping above, so what it knows of the notices is fresh.
        if self.on_hold(false)? {
            run.wait_for_change(&seen, &mut None);
            return Ok(Step::OnHold);
        }
        if !run.reserve_session() {
            return Ok(Step::End(Ending::MaxSessions));
        }
        let Some(held) = self.claim(&task)? else {
            self.tally.lost_race();
            return Ok(Step::LostRace);
        };
        let Some((task, held)) = self.fresh(task, held, &seen)? else {
            return Ok(Step::NotReady);
        };
        // A question on it waits in a clone (another agent held the task
        // when the step began; or a killed farm left it in a clone of
        // another agent, which has not had its first step yet): it goes
        // on the board, no session runs.
        if let Some(keeper) = asking::kept_in(run, self.clones.all(), &task.id) {
            run.unreserve_session();
            let put = asking::put(self.turn(&task, &held), &keeper);
            asking::release(run, held, put)?;
            return Ok(Step::Asked);
        }
        // Out of attempts already (its front matter edited by hand, say):
        // no session is an "attempt 6 of 3"; the task goes to tasks/failed/.
        if task.attempts >= task.max_attempts {
            run.unreserve_session();
            self.retire(&task, held)?;
            return Ok(Step::Retired);
        }
        // Approved after review: the change lands, no session runs.
        if task.change.is_some() && task.approved.is_some() {
            run.unreserve_session();
            self.land(&task, held)?;
            return Ok(Step::Landed);
        }
        if !self.run_session(task, held)? {
            return Ok(Step::OnHold);
        }
        Ok(match run.config.once {
            true => Step::End(Ending::Once),
            false => Step::Ran,
        })
    }

    /// Put on the board the questions the clones keep, the board not
    /// having them yet (see [`asking::recover`]): a killed farm's, or one
    /// whose claim was gone before the board had it. Before anything is
    /// claimed; a look at an empty directory when there are none.
    fn put_kept_questions(&self) -> Result<(), Error> {
        for clone in self.clones.all() {
            asking::recover(self.run, self.name, clone, self.slot)?;
        }
        Ok(())
    }

    /// Is the agent held by a `farm pause` (as the hub has it now, when
    /// `fresh`)? Said when it is first held, and when it is let go.
    fn on_hold(&mut self, fresh: bool) -> Result<bool, Error> {
        let (run, name) = (self.run, self.name);
        let pause = run.pause_of(name, fresh)?;
        match (&pause, &self.held_by) {
            (Some(p), before) if before.as_ref().is_none_or(|b| b.nonce != p.nonce) => run
                .say_tone(
                    name,
                    Style::Warn,
                    &format!(
                        "paused by farm pause for {} ({}, at {}): no new claims until farm resume",
                        p.target,
                        p.by,
                        crate::claims::record::timestamp(p.at)
                    ),
                ),
            (None, Some(_)) => run.say(name, "resumed: claiming again"),
            _ => {}
        }
        self.held_by = pause;
        Ok(self.held_by.is_some())
    }

    /// Say why the loop ended, where a person needs to know.
    fn say_end(&self, why: &Ending) {
        let (run, name) = (self.run, self.name);
        match why {
            Ending::PastUntil => run.say(name, "past --until: no new claims"),
            Ending::Budget { spent, max } => {
                run.tell(
                    name,
                    &Event::Budget {
                        spent_usd: *spent,
                        max_usd: *max,
                    },
                );
            }
            Ending::LeftToOthers(id) => run.say(
                name,
                &format!("`{id}`: its claim was taken over twice; leaving it to the others"),
            ),
            Ending::Drained | Ending::MaxSessions | Ending::Once | Ending::Settled => {}
        }
    }

    /// The turn of `task` under `held`, in the clone in use.
    fn turn<'t>(&'t self, task: &'t Task, held: &'t Held) -> Turn<'t> {
        Turn {
            run: self.run,
            clone: self.clones.in_use(),
            name: self.name,
            task,
            held,
            slot: self.slot,
        }
    }

    /// Count the integration beside the loop, ended or not; its clone is
    /// free again.
    fn join_beside(&mut self) -> Result<(), Error> {
        let Some(beside) = self.beside.take() else {
            return Ok(());
        };
        let (free, id, end) = beside.join()?;
        self.clones.give_back(free);
        self.tally
            .count(self.run, self.name, &id, end, &mut self.summary)
    }

    /// Read the board, from where [`Source`] says, with `claims` as its
    /// claimed tasks; the directory it was read in. Choosing needs only a
    /// recent board: the choice is checked against the branch itself after
    /// claiming. It is read from the commit's tree, through the cache: a
    /// step costs what changed on the board, not its size.
    fn read_board(&mut self, claims: &[Listed]) -> Result<(PathBuf, board::Snapshot), Error> {
        let run = self.run;
        let clone = self.clones.in_use();
        let work_tree = match self.source {
            Source::HubWorkTree => run.hub.checked_out(),
            Source::Branch { .. } => None,
        };
        let (board_dir, rev) = match work_tree {
            Some(dir) => (dir.to_path_buf(), run.hub.branch_rev()),
            None => {
                let rev = clone.sync(&run.hub)?;
                (clone.dir().to_path_buf(), Some(rev))
            }
        };
        let cannot = |e: &dyn std::fmt::Display| {
            Error::failure(format!(
                "cannot read the board in `{}`: {e}",
                board_dir.display()
            ))
        };
        let mut snapshot = match &rev {
            Some(rev) => self.board.read(&board_dir, rev).map_err(|e| cannot(&e))?,
            None => board::load(&board_dir).map_err(|e| cannot(&e))?,
        };
        snapshot.claimed = crate::claims::holders(claims);
        Ok((board_dir, snapshot))
    }

    /// The pending tasks this agent's role does not allow it to claim.
    fn not_mine(&self, snapshot: &board::Snapshot) -> HashSet<TaskId> {
        match self.role {
            Some(role) => snapshot
                .pending
                .iter()
                .filter(|t| !role.allows(t))
                .map(|t| t.id.clone())
                .collect(),
            None => HashSet::new(),
        }
    }

    /// Nothing to claim on `snapshot` (read in `board_dir`; `not_in_flight`
    /// are the tasks this agent may not take): end, arm the role's standing
    /// task, or wait for the hub to change from `seen`.
    fn idle(
        &mut self,
        snapshot: board::Snapshot,
        board_dir: PathBuf,
        not_in_flight: &HashSet<TaskId>,
        seen: &[Option<SystemTime>],
    ) -> Result<Step, Error> {
        let (run, name) = (self.run, self.name);
        let clone = self.clones.in_use();
        let mut facts = IdleFacts {
            left_to_others: board::next(&snapshot, not_in_flight).map(|t| t.id.clone()),
            standing_wanted: self.role.is_some_and(|r| r.standing.is_some())
                && (run.config.watch || !board::settled(&without_standing(&snapshot)))
                && !run.draining(name),
            settled: board::settled(&snapshot),
            watch: run.config.watch,
            from_branch: board_dir == clone.dir(),
            integrating: self.beside.is_some(),
        };
        loop {
            match idle_next(&facts) {
                IdleNext::LeaveToOthers(id) => return Ok(Step::End(Ending::LeftToOthers(id))),
                IdleNext::ArmStanding => {
                    let role = self.role.expect("a standing task is wanted of a role");
                    let Some(id) = standing::arm(run, clone, role)? else {
                        facts.standing_wanted = false;
                        continue;
                    };
                    run.tell(
                        name,
                        &Event::Standing {
                            task: id.as_str().into(),
                            role: role.name.as_str().into(),
                        },
                    );
                    return Ok(Step::Armed);
                }
                IdleNext::Join => {
                    self.join_beside()?;
                    return Ok(Step::Idle);
                }
                IdleNext::End => return Ok(Step::End(Ending::Settled)),
                IdleNext::Confirm => {
                    clone.sync(&run.hub)?;
                    let mut confirmed =
                        board::load(clone.dir()).map_err(|e| Error::failure(e.to_string()))?;
                    confirmed.claimed = snapshot.claimed;
                    return Ok(match board::settled(&confirmed) {
                        true => Step::End(Ending::Settled),
                        false => Step::Idle,
                    });
                }
                IdleNext::Wait => {
                    if run.out.verbose() {
                        let c = board::counts(&snapshot);
                        run.detail(
                            name,
                            &format!(
                                "nothing to claim ({} ready, {} claimed, {} blocked); waiting for the hub to change",
                                c.ready, c.claimed, c.blocked
                            ),
                        );
                    }
                    // An idle agent reads its inbox before it waits: a
                    // message said now wakes it (the hub changed), and the
                    // look after that takes it, held for its next session.
                    // One it cannot take now (the hub did not answer) stays
                    // unread on the hub for a later look: no reason to end.
                    if let Err(e) = self.inbox.take(run, name) {
                        run.say(
                            name,
                            &format!(
                                "cannot take messages now ({}); looking again later",
                                e.message
                            ),
                        );
                    }
                    let mut tips = self.idle_tips.take();
                    run.wait_for_change(seen, &mut tips);
                    self.idle_tips = tips;
                    return Ok(Step::Idle);
                }
            }
        }
    }

    /// Claim `task`; `None` when another agent claimed it first (said and
    /// journaled), its session given back.
    fn claim(&self, task: &Task) -> Result<Option<Held>, Error> {
        let (run, name) = (self.run, self.name);
        let held = claim(run, name, &task.id, task.attempts + 1);
        if !matches!(held, Ok(Some(_))) {
            run.unreserve_session();
        }
        if let Ok(None) = held {
            run.tell(
                name,
                &Event::LostRace {
                    task: task.id.as_str().into(),
                },
            );
        }
        held
    }

    /// `task` as the branch has it now, with its claim; `None` (the claim
    /// released) when it is not ready there. The board was read before the
    /// claim was won, and the task may have been finished in between
    /// (pushed to done, then released): holders push before they release,
    /// so a fetch now shows it.
    fn fresh(
        &mut self,
        task: Task,
        held: Held,
        seen: &[Option<SystemTime>],
    ) -> Result<Option<(Task, Held)>, Error> {
        let (run, name) = (self.run, self.name);
        let clone = self.clones.in_use();
        let fresh = match clone.fresh_task(&run.hub, &task.id) {
            Ok(fresh) => fresh,
            Err(e) => {
                // Never leave a claim behind on the way out: this process
                // lives on (other loops), so the claim would read as alive.
                let _ = run.store.release_held(held);
                return Err(e);
            }
        };
        if let Some(fresh) = fresh {
            self.unready = Unready::default();
            return Ok(Some((fresh, held)));
        }
        run.store.release_held(held)?;
        run.unreserve_session();
        run.say(
            name,
            &format!("`{}` is not ready on the branch; looking again", task.id),
        );
        self.source = Source::Branch {
            at: run.hub.branch_rev(),
        };
        match self.unready.look(&task.id, clone.head()?) {
            Look::Again => {}
            Look::ResetFiles => {
                // The files may be what is wrong (an index git2 read as
                // empty made `clean` delete them): reset them from git, and
                // give the branch a moment to move.
                run.out.debug(&format!(
                    "{name}: `{}` not ready again at the same commit; resetting the clone's work tree",
                    task.id
                ));
                clone.dirty();
                run.wait_for_change(seen, &mut None);
            }
            Look::GiveUp => return Err(unready_error(clone, &task)),
        }
        Ok(None)
    }

    /// Move `task`, out of attempts, to `tasks/failed/` unrun; release it.
    fn retire(&self, task: &Task, held: Held) -> Result<(), Error> {
        let run = self.run;
        let retired = retire(self.turn(task, &held));
        match run.store.release_held(held) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) => {
                retired?;
                return Err(e.into());
            }
        }
        retired?;
        run.wake_all();
        Ok(())
    }

    /// Land the approved change of `task` under `held`, here, without a
    /// session (see [`crate::run::review`]); release the claim and count
    /// how it ended.
    fn land(&mut self, task: &Task, held: Held) -> Result<(), Error> {
        let (run, name) = (self.run, self.name);
        let turn = self.turn(task, &held);
        let worked = match crate::run::review::prepare(turn) {
            Ok(crate::run::review::Prepared::Ran(ran)) => work(turn, Ok(ran)),
            Ok(crate::run::review::Prepared::Failed { why, log }) => {
                crate::run::review::failed(turn, &why, &log).map(|recorded| match recorded {
                    crate::run::attempts::Recorded::Lost => End::Lost { rescued: false },
                    _ => End::Failed { rescued: false },
                })
            }
            Err(e) => Err(e),
        };
        let end = release(run, held, worked);
        run.wake_all();
        self.tally
            .count(run, name, &task.id, end?, &mut self.summary)
    }

    /// Run one session on `task` under `held`. A session that did its task
    /// leaves its integration (rebase, push, release — merge sessions too,
    /// taking turns with the loop's sessions for the agent's [`Slot`]) to a
    /// thread beside the loop, in the clone the session used, while the
    /// loop claims the next task and runs it in the other clone: the agent
    /// waits for no push. At most one integration goes on beside the loop;
    /// it is joined before the next. Any other end is settled here.
    /// `false`: no session, a `farm pause` holds the agent (the claim given
    /// back).
    fn run_session(&mut self, task: Task, held: Held) -> Result<bool, Error> {
        let (run, name, slot) = (self.run, self.name, self.slot);
        let ran = {
            let _turn = slot.take();
            // Looked at again once the claim is won, on the hub itself,
            // and once the slot is this session's (a merge session may
            // have had it a while): a pause that `farm pause` returned
            // from before then is seen here (on the git store, the claim
            // and the pause are commits of one branch), so none of this
            // agent's sessions starts after it.
            let on_hold = self.on_hold(true);
            if !matches!(on_hold, Ok(false)) {
                // Never leave a claim behind on the way out, as in `fresh`.
                run.unreserve_session();
                let released = run.store.release_held(held);
                on_hold?;
                released?;
                return Ok(false);
            }
            // Words from a person, taken now: the look at the hub just
            // made for a pause is fresh, so a message said before this
            // agent scanned the board (or since) is in this prompt, and an
            // agent that starts no more sessions takes none.
            if let Err(e) = self.inbox.take(run, name) {
                let _ = run.store.release_held(held);
                run.unreserve_session();
                return Err(e);
            }
            self.summary.sessions += 1;
            let messages = self.inbox.section();
            let ran = session(self.turn(&task, &held), &messages);
            // Its prompt was written before the session could fail.
            if ran.is_ok() {
                self.inbox.delivered();
            }
            ran
        };
        if !ran.as_ref().is_ok_and(Ran::succeeded) {
            let worked = work(self.turn(&task, &held), ran);
            let end = release(run, held, worked);
            run.wake_all();
            // Other loops' upkeeps delete the hub's packs meanwhile.
            self.clones.in_use_mut().let_go_of_deleted_packs();
            let end = end?;
            if !matches!(end, End::Limited { .. }) {
                run.limits.ok();
            }
            self.tally
                .count(run, name, &task.id, end, &mut self.summary)?;
            return Ok(true);
        }
        run.limits.ok();
        // This integration starts before the one beside is joined: an error
        // there must not leave this claim unsettled.
        let before = self.beside.take();
        let mut mine = self.clones.hand_over();
        let id = task.id.clone();
        let scope = self.scope;
        let handle = self.scope.spawn(move || {
            let turn = Turn {
                run,
                clone: &mine,
                name,
                task: &task,
                held: &held,
                slot,
            };
            let worked = work(turn, ran);
            let end = release(run, held, worked);
            run.wake_all();
            // The push lock is let go and this clone is free: a moment
            // to keep the repositories packed (see run/upkeep.rs) — the
            // shared ones on a thread of their own, which the loop never
            // waits for, this clone here, before the loop takes it back.
            scope.spawn(move || crate::run::upkeep::shared(run, name));
            crate::run::upkeep::clone(run, name, &mine);
            mine.let_go_of_deleted_packs();
            (mine, task.id, end)
        });
        self.beside = Some(Integration { task: id, handle });
        if let Some(before) = before {
            let (free, id, end) = before.join()?;
            self.clones.give_back(free);
            self.tally.count(run, name, &id, end, &mut self.summary)?;
        }
        self.clones
            .make_ready(|| open_clone(run, name, &second_clone(name)))?;
        Ok(true)
    }
}

/// The name of an agent's second clone's directory.
fn second_clone(name: &str) -> String {
    format!("{name}@2")
}

/// Open (or make) the agent `name`'s clone in `clones/<dir>`, recovering
/// what a killed farm left there.
fn open_clone(run: &Run, name: &str, dir: &str) -> Result<PrivateClone, Error> {
    PrivateClone::prepare(&run.state, &run.hub, name, dir, run.out)
}

/// `snapshot` without the standing tasks: the board's real work.
fn without_standing(snapshot: &board::Snapshot) -> board::Snapshot {
    let mut rest = snapshot.clone();
    rest.pending
        .retain(|t| !t.labels.iter().any(|l| l == crate::run::roles::STANDING));
    rest
}

/// The error that ends a run whose clone never sees `task` ready, naming
/// what the clone's work tree lacks.
fn unready_error(clone: &PrivateClone, task: &board::Task) -> Error {
    let dir = clone.dir();
    let file = board::paths::pending(&task.id);
    let why = match std::fs::read_to_string(dir.join(&file)) {
        Err(_) => format!("its work tree has no `{file}`"),
        Ok(text) => match board::parse(task.id.clone(), &text) {
            Err(_) => format!("`{file}` there does not parse"),
            Ok(there) => match there
                .after
                .iter()
                .map(board::paths::done)
                .find(|done| !dir.join(done).is_file())
            {
                Some(done) => format!("its work tree has no `{done}`, which the task waits for"),
                None => "it changed while farm looked".to_owned(),
            },
        },
    };
    Error::failure(format!(
        "`{}` is ready on the branch but not in the clone `{}` at the same commit, \
         even with its work tree reset: {why}",
        task.id,
        dir.display()
    ))
    .hint(format!(
        "a setting of the clone's may keep files out of its work tree (a sparse \
         checkout?); remove `{}` and farm makes the clone again",
        dir.display()
    ))
}
