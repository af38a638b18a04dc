//! One agent's loop: the protocol of the design notes, read top to bottom.
//!
//! # Theory of operation
//!
//! Each agent has a name and two private clones under the state directory,
//! reused across sessions (see step 5). One turn of its loop:
//!
//! 1. reap dead claims (and claims stale past `--stale-after`);
//! 2. read the board — from the hub's own work tree when it has the branch
//!    checked out (no git process), else from the clone reset to the branch
//!    — and pick the best ready, unclaimed task; claim it (fs store, with this
//!    process as holder). A lost race is not a wait: scan again at once.
//!    Nothing ready: wait for the hub to change, or end when the board is
//!    settled (confirmed on the branch itself);
//! 3. reset the clone to the branch — every session starts clean — and read
//!    the task there: if it was finished meanwhile, or waits for a task not
//!    done on the branch yet, release and scan again;
//! 4. render the prompt and run one fresh session in the clone, heartbeating
//!    the claim while it runs;
//! 5. integrate: commit what the agent left together with the move to
//!    `tasks/done/`, rebase onto the hub's branch (merge on conflict, with a
//!    merge session for the conflicted files), push under the hub's push
//!    lock — a rejected push means catch up and push again. Before each push
//!    the claim must still be ours. After a successful session this goes on
//!    beside the loop, in the clone the session used, while the loop takes
//!    the next task in the agent's other clone (see [`turns`]);
//! 6. on failure, the work goes to `farm/rescue/<task>/<nonce>` on the hub
//!    and the attempt is recorded in the task file (to `tasks/failed/` when
//!    attempts run out);
//! 7. release the claim.
//!
//! Nothing an agent committed is lost: it lands on the branch or on a rescue
//! branch, and no push is ever forced.
//!
//! Every path makes progress or counts (MUST 13): a session ends in work
//! landed, an attempt counted, a wait that lifts (a usage limit, the
//! breaker, a hub work tree with changes of its own), or the run stopped.
//! What could otherwise spin for ever:
//! - a claim gone with nobody holding the task after (removed — by the
//!   session itself, through `FARM_CLAIM`, as often as not) is a failed
//!   attempt, counted under the claim taken again ([`retake`](crate::run::turn::retake)); a claim
//!   taken over by another holder counts nothing, but the same agent losing
//!   one task that way twice leaves it to the others;
//! - a session that did not start counts nothing, and a second one in a
//!   row, on another task, stops the run as a setup error;
//! - a session that rewrote the history it started on is a failed attempt:
//!   its work is rescued, never rebased into the branch;
//! - a task already out of attempts goes to `tasks/failed/` unrun.

use std::collections::HashSet;
use std::time::SystemTime;

use crate::board::{self};
use serde_json::json;

use crate::claims::host::{self};
use crate::claims::record::{Claim, Holder};
use crate::claims::{Attempt, StoreError};
use crate::error::Error;
use crate::run::attempts::retire;
use crate::run::clone::PrivateClone;
use crate::run::settle::{End, release, work};
use crate::run::slot::{Clones, Slot};
use crate::run::standing;
use crate::run::state::{Run, Summary};
use crate::run::tally::Tally;
use crate::run::turn::{Ran, Turn, reap, session};

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
            Err(e) if e.git_killed && restarts < GIT_KILLED_RESTARTS && !run.stop.draining() => {
                restarts += 1;
                run.say(name, &format!("{e}; reopening its clone and going on"));
                run.journal
                    .log(name, "git_killed", json!({"error": e.message}));
            }
            other => return other,
        }
    }
}

/// How often one agent's loop starts again after a git of farm's was killed.
const GIT_KILLED_RESTARTS: u32 = 3;

/// The turns, and the integration left beside them when they ended.
fn turns_settled(run: &Run, name: &str, summary: &mut Summary) -> Result<(), Error> {
    let slot = Slot::default();
    std::thread::scope(|scope| {
        let mut beside = None;
        let result = turns(run, name, summary, &slot, scope, &mut beside);
        // Whatever ended the loop, the integration beside it is finished
        // and counted (it released its claim itself).
        let rest = match beside {
            // Counted by a tally of its own: the loop has ended, so nothing
            // is picked, and no breaker pause is waited out.
            Some(b) => join(b)
                .and_then(|(_, id, end)| Tally::default().count(run, name, &id, end, summary)),
            None => Ok(()),
        };
        result.and(rest)
    })
}

/// The looks at one task that the board called ready and the clone, synced
/// to the same commit, did not: the board reads the commit's tree, the
/// clone its work tree, so no push explains it — the clone's files are not
/// what git says they are. The second look resets them; a third ends the
/// run (issue 10, item 4: a loop that spun on this ~2,100 times in 4 s).
#[derive(Default)]
struct Unready {
    task: Option<crate::names::TaskId>,
    at: String,
    looks: u32,
}

impl Unready {
    /// Count a look at `task` with the clone at commit `at`; how many in a
    /// row were at that task and commit.
    fn look(&mut self, task: &crate::names::TaskId, at: String) -> u32 {
        if self.task.as_ref() != Some(task) || self.at != at {
            *self = Unready {
                task: Some(task.clone()),
                at,
                looks: 0,
            };
        }
        self.looks += 1;
        self.looks
    }
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

/// An integration going on beside the loop: its clone, task and end.
type Beside<'scope> =
    std::thread::ScopedJoinHandle<'scope, (PrivateClone, crate::names::TaskId, Result<End, Error>)>;

fn join(b: Beside<'_>) -> Result<(PrivateClone, crate::names::TaskId, End), Error> {
    let (clone, id, end) = b.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
    end.map(|end| (clone, id, end))
}

/// The turns of one agent's loop. A session that did its task leaves its
/// integration (rebase, push, release — merge sessions too, taking turns
/// with the loop's sessions for the agent's [`Slot`]) to a thread beside the
/// loop, in the clone the session used, while the loop claims the next
/// task and runs it in a second clone: the agent waits for no push. At most
/// one integration goes on beside the loop; it is joined before the next.
fn turns<'scope, 'env: 'scope>(
    run: &'env Run,
    name: &'env str,
    summary: &mut Summary,
    slot: &'env Slot,
    scope: &'scope std::thread::Scope<'scope, 'env>,
    beside: &mut Option<Beside<'scope>>,
) -> Result<(), Error> {
    // The agent's clones: the one in use, and the other — made when first
    // needed, then busy with an integration, or free. One that exists is
    // opened now: an earlier farm killed mid-integration left its work
    // there, and opening a clone rescues that.
    let second = format!("{name}@2");
    let open = |dir: &str| PrivateClone::prepare(&run.state, &run.hub, name, dir, run.out);
    let mut clones = Clones::new(
        open(name)?,
        match run.state.join("clones").join(&second).is_dir() {
            true => Some(open(&second)?),
            false => None,
        },
    );
    // What an earlier run left in them and opening them rescued counts.
    for branch in clones.all().flat_map(PrivateClone::rescued) {
        summary.rescued += 1;
        let why = "an earlier run left commits in this clone";
        run.journal
            .log(name, "rescue", json!({"branch": branch, "why": why}));
    }
    let mut tally = Tally::default();
    let role = run.config.roles.get(name);
    // The task of the integration beside the loop, while there is one.
    let mut beside_task: Option<crate::names::TaskId> = None;
    // The hub's work tree said a task was ready that the branch does not
    // have pending (an uncommitted draft, say): read the board from the
    // branch until the hub changes, instead of claiming it again and again.
    // Keyed by the branch's commit: only a push can make the work tree and
    // the branch agree again (claims coming and going do not).
    let mut distrust_worktree: Option<Option<String>> = None;
    let mut board_cache = board::Cache::default();
    let mut unready = Unready::default();
    while !run.stop.draining() && run.sessions_left() {
        // The agent CLI hit its limit: nobody claims until it lifts.
        run.limits.wait(&|l| run.say(name, l), &|| {
            !run.stop.draining() && run.sessions_left()
        });
        if !run.sessions_left() {
            break;
        }
        if run.stop.draining() {
            break;
        }
        if run.config.until.is_some_and(|u| SystemTime::now() >= u) {
            run.say(name, "past --until: no new claims");
            break;
        }
        if let Some((spent, max)) = run.over_budget() {
            run.say(
                name,
                &format!("the cost budget is spent (${spent:.2} of ${max:.2}): no new claims"),
            );
            run.journal
                .log(name, "budget", json!({"spent_usd": spent, "max_usd": max}));
            break;
        }
        // An integration beside that has ended is counted now: until then
        // its task is not picked again (its claim may be gone while the
        // integration goes on — removed by its session, say).
        if beside.as_ref().is_some_and(|b| b.is_finished()) {
            let (free, id, end) = join(beside.take().expect("it is there"))?;
            clones.give_back(free);
            tally.count(run, name, &id, end, summary)?;
        }
        let in_flight = beside.as_ref().and(beside_task.as_ref());
        let clone = clones.in_use();
        let claims = reap(run, name)?;
        let seen = run.hub.fingerprint();
        if distrust_worktree
            .as_ref()
            .is_some_and(|at| *at != run.hub.branch_rev())
        {
            distrust_worktree = None;
        }
        // Choosing needs only a recent board. A hub whose work tree has the
        // branch checked out holds it as pushed, readable with no git
        // process at all; otherwise the clone is reset to the branch. The
        // choice is checked against the branch itself after claiming.
        // Read from the commit's tree, through the cache: a turn costs what
        // changed on the board, not its size (issue 11).
        let (board_dir, rev) = if let Some(dir) = run
            .hub
            .checked_out()
            .filter(|_| distrust_worktree.is_none())
        {
            (dir.to_path_buf(), run.hub.branch_rev())
        } else {
            let rev = clone.sync(&run.hub)?;
            (clone.dir().to_path_buf(), Some(rev))
        };
        let cannot = |e: &dyn std::fmt::Display| {
            Error::failure(format!(
                "cannot read the board in `{}`: {e}",
                board_dir.display()
            ))
        };
        let mut snapshot = match &rev {
            Some(rev) => board_cache.read(&board_dir, rev).map_err(|e| cannot(&e))?,
            None => board::load(&board_dir).map_err(|e| cannot(&e))?,
        };
        snapshot.claimed = crate::claims::holders(&claims);
        // An agent with a role claims only what the role allows.
        let not_mine: HashSet<crate::names::TaskId> = match role {
            Some(role) => snapshot
                .pending
                .iter()
                .filter(|t| !role.allows(t))
                .map(|t| t.id.clone())
                .collect(),
            None => HashSet::new(),
        };
        let Some(task) = tally.pick(&snapshot, in_flight, &not_mine) else {
            let mut not_in_flight: HashSet<_> = in_flight.into_iter().cloned().collect();
            not_in_flight.extend(not_mine.iter().cloned());
            if let Some(left) = board::next(&snapshot, &not_in_flight) {
                // Only tasks this agent lost to others again and again are
                // ready: waiting for them would be waiting for ever.
                run.say(
                    name,
                    &format!(
                        "`{}`: its claim was taken over twice; leaving it to the others",
                        left.id
                    ),
                );
                break;
            }
            // Nothing else for the role: its standing task, while the rest
            // of the board has work (or the run watches for more).
            if let Some(role) = role.filter(|r| r.standing.is_some())
                && (run.config.watch || !board::settled(&without_standing(&snapshot)))
                && !run.stop.draining()
                && let Some(id) = standing::arm(run, clone, role)?
            {
                run.say(
                    name,
                    &format!("armed the standing task `{id}` of role `{}`", role.name),
                );
                run.journal.log(
                    name,
                    "standing",
                    json!({"task": id.as_str(), "role": role.name}),
                );
                continue;
            }
            if board::settled(&snapshot) && !run.config.watch {
                // Ending is final: confirm on the branch itself, not on a
                // work tree that a push may be rewriting this very moment.
                if board_dir == clone.dir() {
                    break;
                }
                clone.sync(&run.hub)?;
                let mut confirmed =
                    board::load(clone.dir()).map_err(|e| Error::failure(e.to_string()))?;
                confirmed.claimed = std::mem::take(&mut snapshot.claimed);
                if board::settled(&confirmed) {
                    break;
                }
                continue;
            }
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
            run.wait_for_change(&seen);
            continue;
        };
        // The breaker pauses before the next claim, not after the failure
        // that tripped it: a run whose last task just failed ends at once.
        if tally.pause_if_due(run, name) {
            continue; // the board moved on meanwhile
        }
        if !run.reserve_session() {
            break;
        }
        let holder = host::own_start().map(|start| Holder {
            pid: std::process::id(),
            start,
        });
        let claim = Claim::new(
            task.id.clone(),
            name,
            holder,
            task.attempts + 1,
            SystemTime::now(),
        );
        let held = match run.store.try_claim(claim, true) {
            Ok(Attempt::Won(held)) => held,
            // A task whose claim kept changing under us (other agents
            // claiming around it) is a lost race too.
            Ok(Attempt::Lost(_)) | Err(StoreError::Busy { .. }) => {
                run.unreserve_session();
                run.journal
                    .log(name, "lost_race", json!({"task": task.id.as_str()}));
                run.say(
                    name,
                    &format!("lost the race for `{}`; looking again", task.id),
                );
                continue;
            }
            Err(e) => {
                run.unreserve_session();
                return Err(e.into());
            }
        };
        // The board was read before the claim was won, and the task may have
        // been finished in between (pushed to done, then released). Holders
        // push before they release, so a fetch now shows it: look again.
        let fresh = match clone.fresh_task(&run.hub, &task.id) {
            Ok(fresh) => fresh,
            Err(e) => {
                // Never leave a claim behind on the way out: this process
                // lives on (other loops), so the claim would read as alive.
                let _ = run.store.release_held(held);
                return Err(e);
            }
        };
        let Some(task) = fresh else {
            run.store.release_held(held)?;
            run.unreserve_session();
            run.say(
                name,
                &format!("`{}` is not ready on the branch; looking again", task.id),
            );
            distrust_worktree = Some(run.hub.branch_rev());
            match unready.look(&task.id, clone.head()?) {
                1 => {}
                2 => {
                    // The files may be what is wrong (an index git2 read
                    // as empty made `clean` delete them): reset them from
                    // git, and give the branch a moment to move.
                    run.out.debug(&format!(
                        "{name}: `{}` not ready again at the same commit; resetting the clone's work tree",
                        task.id
                    ));
                    clone.dirty();
                    run.wait_for_change(&seen);
                }
                _ => return Err(unready_error(clone, &task)),
            }
            continue;
        };
        unready = Unready::default();
        // Out of attempts already (its front matter edited by hand, say):
        // no session is an "attempt 6 of 3"; the task goes to tasks/failed/.
        if task.attempts >= task.max_attempts {
            run.unreserve_session();
            let retired = retire(Turn {
                run,
                clone,
                name,
                task: &task,
                held: &held,
                slot,
            });
            match run.store.release_held(held) {
                Ok(()) | Err(StoreError::Lost { .. }) => {}
                Err(e) => {
                    retired?;
                    return Err(e.into());
                }
            }
            retired?;
            run.wake_all();
            continue;
        }
        summary.sessions += 1;
        let ran = {
            let _turn = slot.take();
            session(Turn {
                run,
                clone,
                name,
                task: &task,
                held: &held,
                slot,
            })
        };
        if ran.as_ref().is_ok_and(Ran::succeeded) {
            run.limits.ok();
            // This integration starts before the one beside is joined: an
            // error there must not leave this claim unsettled.
            let before = beside.take();
            let mine = clones.hand_over();
            beside_task = Some(task.id.clone());
            *beside = Some(scope.spawn(move || {
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
                (mine, task.id, end)
            }));
            if let Some(before) = before {
                let (free, id, end) = join(before)?;
                clones.give_back(free);
                tally.count(run, name, &id, end, summary)?;
            }
            clones.make_ready(|| open(&second))?;
        } else {
            let turn = Turn {
                run,
                clone,
                name,
                task: &task,
                held: &held,
                slot,
            };
            let worked = work(turn, ran);
            let end = release(run, held, worked);
            run.wake_all();
            let end = end?;
            if !matches!(end, End::Limited { .. }) {
                run.limits.ok();
            }
            tally.count(run, name, &task.id, end, summary)?;
        }
        if run.config.once {
            break;
        }
    }
    if let Some(max) = run.config.max_sessions.filter(|_| !run.sessions_left()) {
        run.say(
            name,
            &format!("--max-sessions {max} reached: no new claims"),
        );
    }
    Ok(())
}
