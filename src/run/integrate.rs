//! Bringing a session's work onto the hub's branch: catch up (rebase, or
//! merge with a merge session), publish under the claim, and try again when
//! the branch moved.

use std::time::{Duration, Instant, SystemTime};

use crate::board::paths::Place;
use crate::claims::{Held, Published, StoreError};
use crate::error::Error;
use crate::output::Style;
use crate::run::clone::PrivateClone;
use crate::run::event::Event;
use crate::run::gate::{self, Passed, Verdict};
use crate::run::interrupt::{Halt, Heartbeat, Interrupt};
use crate::run::landing::{self, Refused};
use crate::run::progress;
use crate::run::prompt;
use crate::run::session::{self, Outcome};
use crate::run::speculate::{Batch, Batched, Ride, Rider};
use crate::run::state::Run;
use crate::run::turn::{Supervised, Turn, supervise};
use crate::run::usage;
use crate::suite::report::Report;

/// Fetch–integrate–push rounds before giving the work to a rescue branch.
/// A hub elsewhere gets more: it has no push lock to take turns at, so
/// agents take turns by backing off (see [`after_rejection`]).
pub(super) const PUSH_ROUNDS: usize = 20;
pub(super) const PUSH_ROUNDS_REMOTE: usize = 60;

pub(super) fn push_rounds(run: &Run) -> usize {
    if run.hub.local.is_some() {
        PUSH_ROUNDS
    } else {
        PUSH_ROUNDS_REMOTE
    }
}

/// After a push lost to another: wait a random while, longer each round, so
/// that agents pushing to a hub elsewhere (which has no push lock) spread
/// out instead of colliding again.
pub(super) fn after_rejection(run: &Run, round: usize) {
    if run.hub.local.is_none() {
        let wait = Duration::from_millis(50 << round.min(5));
        std::thread::sleep(crate::git::retry::jitter(wait));
    }
}

/// How integrating a session's work ended, when it was not cut short (see
/// [`Halt`]).
pub(super) enum Integrated {
    Pushed,
    Conflict(Vec<String>),
    /// The branch kept moving for [`push_rounds`] rounds.
    Busy,
    /// The test gate kept it off the branch (see [`gate`]).
    Gated(Verdict),
    /// The task is in `tasks/done/` (or `tasks/failed/`) on the branch
    /// already: settled by someone else while this work was done.
    Elsewhere(Place),
    /// The work changes what a session may not (see [`landing`]).
    Refused(Vec<Refused>),
}

/// Whose work is being brought onto the branch, and so what integrating
/// it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Work {
    /// A session's, its task moved to done: a conflict goes to a merge
    /// session, and a task settled elsewhere meanwhile is not landed again.
    Session,
    /// A rescue branch a person lands (`farm rescue apply --land`, see
    /// [`crate::run::land`]): a conflict ends it — no agent is asked to
    /// resolve what a person chose to land as it is — and the task counts
    /// as settled elsewhere only when this work moves it to done (`done`).
    Rescue { done: bool },
}

impl Work {
    fn merge_sessions(self) -> bool {
        self == Work::Session
    }

    fn moves_task(self) -> bool {
        matches!(self, Work::Session | Work::Rescue { done: true })
    }
}

/// Bring the work (already committed; for a session, its task moved to
/// done) onto the hub's branch and push it. `base` is the commit the work
/// started from.
pub(super) fn integrate(turn: Turn<'_>, base: &str, work: Work) -> Result<Integrated, Halt> {
    let Turn {
        run,
        clone,
        task,
        held,
        ..
    } = turn;
    let branch = &run.hub.branch;
    let mut onto = Onto {
        turn,
        upstream: format!("origin/{branch}"),
        at: base.to_owned(),
        merged: false,
    };
    // Refused before any rebase or merge session is spent on it.
    let refused = landing::refused(clone, base, base, &clone.head()?, &task.id)?;
    if !refused.is_empty() {
        return Ok(Integrated::Refused(refused));
    }
    // Rounds of rejected pushes can outlast the heartbeat interval on a
    // busy hub (a claim went stale after 30 rounds in 2 minutes under load
    // and was taken over): beat between rounds, as the session did.
    let mut beat = Heartbeat::new(run, held);
    // With a gate, the work takes a place in the merge queue (see
    // `speculate`) and keeps it until it lands or fails.
    let mut rider: Option<Rider<'_>> = None;
    for round in 0..push_rounds(run) {
        beat.due()?;
        // (Asked each round: on a hub elsewhere the queue applies once the
        // suite was seen to take long enough, maybe by a round of this.)
        let queued = Rider::applies(turn);
        if !queued {
            rider = None;
        }
        // Catch up without the lock first, then take the hub's push lock and
        // catch up again only if the branch moved meanwhile: the agents of
        // this host take turns at the push (an agent whose work conflicted
        // once lost 20 rounds running) while holding the lock for little
        // more than the push itself. (A hub elsewhere has no lock, and no
        // branch to read without a fetch: its push just gets rejected.)
        let mut conflict = onto.catch_up()?;
        let mut lock = None;
        if conflict.is_none() && !queued {
            lock = run.hub.push_lock(run.out)?;
            if lock.is_some() && run.hub.branch_rev().as_deref() != Some(onto.at.as_str()) {
                conflict = onto.catch_up()?;
            }
        }
        // What lands is the work on top of `onto`: a task done there already
        // was done by someone else (its claim forced away while its push was
        // in flight, say). A conflict on its done file is that too: no merge
        // session can make landing it again right.
        if work.moves_task()
            && let Some(place) = landing::settled_elsewhere(clone, base, &onto.at, &task.id)?
        {
            return Ok(Integrated::Elsewhere(place));
        }
        if let Some(files) = conflict {
            // A merge session takes minutes: let the others push meanwhile
            // (and the queue go on without this work until it is merged).
            drop(lock);
            rider = None;
            // A rescue a person lands goes on no further (see `Work`).
            if !work.merge_sessions() {
                clone.abort_merge()?;
                return Ok(Integrated::Conflict(files));
            }
            // An approved change lands as it was reviewed: a merge
            // session's resolution would land unreviewed. A failed
            // attempt instead, whose new session's change is reviewed.
            if task.approved.is_some() {
                return Ok(Integrated::Conflict(files));
            }
            match resolve(turn, &files)? {
                Merge::Resolved => continue, // catch up with what moved meanwhile, then push
                Merge::Unresolved => return Ok(Integrated::Conflict(files)),
            }
        }
        // Judged again on what lands: a merge session is held to the rule
        // the session was.
        let refused = landing::refused(clone, base, &onto.at, &clone.head()?, &task.id)?;
        if !refused.is_empty() {
            return Ok(Integrated::Refused(refused));
        }
        let passed = if queued {
            match ride(turn, &mut rider, &mut onto, &mut beat)? {
                InLine::Push(passed, held_lock) => {
                    lock = held_lock;
                    passed
                }
                InLine::Again => continue,
                InLine::Gated(verdict) => return Ok(Integrated::Gated(verdict)),
                InLine::Landed => {
                    if let Some(rider) = rider.as_mut() {
                        rider.landed();
                    }
                    return Ok(Integrated::Pushed);
                }
            }
        } else {
            // The tree pushed is the tree tested (under the push lock when the
            // hub has one; else a push rejected brings a new tree, tested again).
            match gate::check(turn, &onto.at, &mut || Ok(()))? {
                Verdict::Pass(passed) => passed,
                verdict => return Ok(Integrated::Gated(verdict)),
            }
        };
        let batch = rider.as_ref().map(Rider::landing).unwrap_or_default();
        let hold = rider.as_ref().map(Rider::landing_hold).unwrap_or_default();
        let landed = land(turn, passed.as_ref(), &batch, &hold, lock, round);
        drop(hold);
        // Not landed: HEAD back on this change's own work, never left on
        // the changes behind (a rescue takes HEAD).
        if !matches!(landed, Ok(true))
            && let Some(rider) = rider.as_mut()
        {
            rider.unbatch()?;
        }
        if landed? {
            if let Some(rider) = rider.as_mut() {
                rider.landed();
            }
            say_batch(turn, batch.with);
            return Ok(Integrated::Pushed);
        }
    }
    Ok(Integrated::Busy)
}

/// Push the tested work (`passed`, with its progress document) as one
/// commit: true once it is on the branch, false when the push was rejected
/// (the branch moved: integrate again). `batch`: the changes behind in
/// the merge queue that land with it (see `speculate`), and
/// `hold` what fences their claims on a hub of this machine (see `mates`).
/// `lock` is the hub's push lock, if held; it is let go before a rejected
/// round goes on.
fn land(
    turn: Turn<'_>,
    passed: Option<&Passed>,
    batch: &Batch,
    hold: &[std::os::fd::BorrowedFd<'_>],
    lock: Option<std::fs::File>,
    round: usize,
) -> Result<bool, Halt> {
    let Turn {
        run,
        clone,
        name,
        task,
        held,
        ..
    } = turn;
    let (id, branch) = (task.id.as_str(), &run.hub.branch);
    // The progress document goes in the same push, written over the
    // branch's own (it comes off again if the push is rejected).
    let before_progress = match &run.config.progress {
        Some(path) => Some(progress_commit(turn, path, passed, batch)?),
        None => None,
    };
    // Fencing: the store publishes only while the claim is still ours.
    let pushing = Instant::now();
    let published = {
        let mut hold = hold.to_vec();
        hold.extend(lock.as_ref().map(std::os::fd::AsFd::as_fd));
        publish_branch(run, clone, held, &hold)?
    };
    match published {
        Published::Pushed => {
            let also: String = batch
                .with
                .iter()
                .map(|b| format!(", `{}`", b.task))
                .collect();
            run.detail(
                name,
                &format!(
                    "`{id}`{also}: pushed to `{branch}` in {} ms (round {})",
                    pushing.elapsed().as_millis(),
                    round + 1
                ),
            );
            clone.pushed();
            Ok(true)
        }
        Published::Lost(why) => {
            run.say(name, &format!("`{id}`: not published: {why}"));
            Err(Interrupt::Lost(why).into())
        }
        Published::Rejected(moved) => {
            drop(lock);
            if let Some(work) = &before_progress {
                clone.move_head(work)?;
            }
            // (Nothing named: a change to land with it moved in line.)
            let why = if moved.is_empty() {
                "a change landing with it moved in line".to_owned()
            } else {
                format!("{branch} moved")
            };
            run.say(
                name,
                &format!("`{id}`: push rejected ({why}); integrating again"),
            );
            after_rejection(run, round);
            Ok(false)
        }
    }
}

/// Say, and record in the journal, that the changes behind (`with`)
/// landed in this change's push (see `speculate`), if any did.
fn say_batch(turn: Turn<'_>, with: Vec<Batched>) {
    if with.is_empty() {
        return;
    }
    let batch = Event::Batch {
        task: turn.task.id.as_str().into(),
        with: with.into_iter().map(|b| b.task).collect(),
    };
    if let Some(line) = batch.line() {
        turn.run.say(turn.name, &line);
    }
    turn.run.journal.record(turn.name, &batch);
}

/// What the merge queue came to for the work, in one round.
enum InLine {
    /// Tested, first in line, on the branch's commit: push (under the push
    /// lock, when the hub has one).
    Push(Option<Passed>, Option<std::fs::File>),
    /// Catch up with the branch and queue again (the work conflicts with
    /// it), or ride on (it moved at the last moment).
    Again,
    Gated(Verdict),
    /// Landed by the change ahead with its own: release the claim.
    Landed,
}

/// Take the work's place in line (once: `rider` keeps it between rounds)
/// and ride it until the work may be pushed.
fn ride<'a>(
    turn: Turn<'a>,
    rider: &mut Option<Rider<'a>>,
    onto: &mut Onto<'_>,
    beat: &mut Heartbeat<'_>,
) -> Result<InLine, Halt> {
    let run = turn.run;
    let line = match rider {
        Some(line) => line,
        None => rider.insert(Rider::join(turn)?),
    };
    Ok(match line.ride(&onto.at, onto.merged, beat)? {
        // The push lock only keeps out what does not queue (a farm without
        // a gate, a board edit); if that moved the branch, ride on.
        Ride::Ready { at, passed } => {
            onto.at = at;
            let lock = run.hub.push_lock(run.out)?;
            if lock.is_some() && run.hub.branch_rev().as_deref() != Some(onto.at.as_str()) {
                // HEAD back on this change's own work: it rides on alone.
                line.unbatch()?;
                InLine::Again
            } else {
                InLine::Push(passed, lock)
            }
        }
        Ride::Gated(verdict) => InLine::Gated(verdict),
        Ride::Conflict => {
            *rider = None;
            InLine::Again
        }
        Ride::Landed => InLine::Landed,
    })
}

/// Where the work sits on the branch while it is brought onto it: the
/// upstream commit it last sat on (`at`; when the branch has not moved past
/// it there is nothing to rebase or merge), and whether it was merged —
/// once merged, it stays merged: rebasing again would replay the conflict.
struct Onto<'a> {
    turn: Turn<'a>,
    upstream: String,
    at: String,
    merged: bool,
}

impl Onto<'_> {
    /// Bring the work onto the branch as it is now: fetch (when it moved),
    /// rebase, or merge once rebasing conflicted. `Some(files)` on conflict.
    fn catch_up(&mut self) -> Result<Option<Vec<String>>, Error> {
        let Turn {
            run,
            clone,
            name,
            task,
            ..
        } = self.turn;
        let (id, branch, upstream) = (task.id.as_str(), &run.hub.branch, &self.upstream);
        let now = clone.fetch_if_moved(&run.hub)?;
        if now == self.at {
            return Ok(None);
        }
        let clean = if self.merged {
            clone.merge(upstream, branch, id)?
        } else if clone.rebase(upstream)? {
            true
        } else {
            self.merged = true;
            run.detail(
                name,
                &format!("`{id}`: the rebase onto {upstream} conflicted; merging"),
            );
            clone.merge(upstream, branch, id)?
        };
        // Its own task file edited on the branch meanwhile (by a person):
        // farm's own part of the work, resolved by farm.
        let clean = clean
            || {
                let resolved = clone.resolve_own_task(&task.id, upstream)?;
                if resolved {
                    run.say(
                    name,
                    &format!(
                        "`{id}`: its task file was edited on `{branch}` meanwhile; that edit is kept, moved to done"
                    ),
                );
                }
                resolved
            };
        run.detail(
            name,
            &format!(
                "`{id}`: {} onto {upstream} at {}",
                if self.merged { "merged" } else { "rebased" },
                &now[..now.len().min(10)]
            ),
        );
        self.at = now;
        Ok(if clean {
            None
        } else {
            Some(clone.conflicts()?)
        })
    }
}

/// A conflict with the branch in `files`: said, journaled, and given to a
/// merge session; a merge left unresolved is aborted.
fn resolve(turn: Turn<'_>, files: &[String]) -> Result<Merge, Halt> {
    let Turn {
        run, clone, name, ..
    } = turn;
    let id = turn.task.id.as_str();
    run.say(
        name,
        &format!(
            "`{id}`: conflict with `{}` in {}; merge session",
            run.hub.branch,
            files.join(", ")
        ),
    );
    run.journal.record(
        name,
        &Event::Conflict {
            task: id.into(),
            files: files.to_vec(),
        },
    );
    let merge = merge_session(turn, files)?;
    if let Merge::Unresolved = merge {
        clone.abort_merge()?;
    }
    Ok(merge)
}

/// Commit the progress document at `path` on top of the clone's HEAD, with
/// this task's line (and the tests, when the gate knows them), and a line
/// for each change landing with it (`batch`, its tests too); the commit
/// HEAD was before.
fn progress_commit(
    turn: Turn<'_>,
    path: &str,
    passed: Option<&Passed>,
    batch: &Batch,
) -> Result<String, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        ..
    } = turn;
    let errors = passed.map(|p| p.report.error_lines()).unwrap_or_default();
    let tests = passed.map(|p| progress::Tests {
        counts: p.report.counts(),
        errors: &errors,
    });
    let entry = progress::Entry {
        at: SystemTime::now(),
        task: task.id.as_str(),
        agent: name,
        tests: passed.map(|p| (p.before, p.after)),
        tested_with: batch.tested_with.as_deref(),
    };
    let old = clone.file_at_head(path)?.unwrap_or_default();
    let mut text = progress::update(&old, &run.hub.branch, &entry, tests.as_ref());
    // The tests of the tree pushed: the last change's with results.
    for batched in &batch.with {
        let entry = progress::Entry {
            at: entry.at,
            task: &batched.task,
            agent: &batched.agent,
            tests: batched.tests,
            tested_with: batched.tested_with.as_deref(),
        };
        let errors = batched.report.as_ref().map(Report::error_lines);
        let tests = batched.report.as_ref().map(|report| progress::Tests {
            counts: report.counts(),
            errors: errors.as_deref().unwrap_or_default(),
        });
        text = progress::update(&text, &run.hub.branch, &entry, tests.as_ref());
    }
    let work = clone.head()?;
    clone.commit_file(
        path,
        &text,
        &format!("{}`{}` by {name}", progress::SUBJECT, task.id),
    )?;
    Ok(work)
}

/// One fresh session with the merge prompt in the conflicted clone:
/// resolved when it left no conflict behind (the merge is then committed).
pub(super) fn merge_session(turn: Turn<'_>, files: &[String]) -> Result<Merge, Halt> {
    let Turn {
        run,
        clone,
        name,
        task,
        held,
        slot,
    } = turn;
    let list: String = files.iter().map(|f| format!("- `{f}`\n")).collect();
    let text = prompt::render(
        &prompt::template(clone.dir(), "merge.md", prompt::MERGE),
        &[
            ("task", task.id.as_str()),
            ("title", &task.title),
            ("branch", &run.hub.branch),
            ("conflicts", &list),
        ],
    );
    let (log, prompt_file) = run.session_files(name, &format!("{}-merge", task.id));
    let _turn = slot.wait(&mut Heartbeat::new(run, held))?;
    // Journaled as a session of its own, with what became of the merge (its
    // exit alone said "success" for a merge it left unresolved).
    run.journal.record(
        name,
        &Event::MergeStart {
            task: task.id.as_str().into(),
            conflicts: files.len(),
        },
    );
    let Supervised {
        outcome, lost, ran, ..
    } = supervise(turn, &text, &log, &prompt_file, run.config.timeout)?;
    let merge = judge_merge(turn, files, &outcome, lost);
    let result = match &merge {
        Ok(merge) => merge.label(),
        Err(Halt::Interrupted(Interrupt::Stopped)) => "interrupted",
        Err(Halt::Interrupted(Interrupt::Lost(_))) => "claim lost",
        Err(Halt::Failed(_)) => return merge,
    };
    let spent = usage::read(&session::agent_output(
        &std::fs::read_to_string(&log).unwrap_or_default(),
    ));
    run.spend(&spent);
    run.journal.record(
        name,
        &Event::MergeEnd {
            task: task.id.as_str().into(),
            outcome: outcome.to_string().into(),
            result: result.into(),
            secs: ran.as_secs_f64(),
            log: log.display().to_string().into(),
            cost_usd: spent.cost_usd,
            input_tokens: spent.input_tokens,
            output_tokens: spent.output_tokens,
        },
    );
    merge
}

/// What a merge session that ended with `outcome` left: resolved only when
/// no conflict is left and HEAD contains the branch.
fn judge_merge(
    turn: Turn<'_>,
    files: &[String],
    outcome: &Outcome,
    lost: bool,
) -> Result<Merge, Halt> {
    let (run, clone) = (turn.run, turn.clone);
    if lost {
        let why = "the claim was taken away during the merge session";
        return Err(Interrupt::Lost(why.to_owned()).into());
    }
    match outcome {
        Outcome::Success => {}
        Outcome::Interrupted => return Err(Interrupt::Stopped.into()),
        _ => return Ok(Merge::Unresolved),
    }
    if !clone.conflicts()?.is_empty() || clone.has_markers(files) {
        return Ok(Merge::Unresolved);
    }
    clone.commit_merge()?;
    // An agent may also have aborted the merge and exited 0: only a HEAD
    // that now contains the branch counts as merged.
    let upstream = format!("origin/{}", run.hub.branch);
    if !clone.descends_from(&upstream)? {
        return Ok(Merge::Unresolved);
    }
    Ok(Merge::Resolved)
}

/// How a merge session ended, when it was not cut short.
pub(super) enum Merge {
    Resolved,
    Unresolved,
}

impl Merge {
    /// A word for the journal.
    fn label(&self) -> &'static str {
        match self {
            Merge::Resolved => "resolved",
            Merge::Unresolved => "unresolved",
        }
    }
}

/// Push the clone's HEAD to the hub's branch while `held` is still ours (the
/// git store releases it in the same push); the caller holds the hub's push
/// lock if it has one, and `hold` has it: the push's processes keep what
/// `hold` has open until they exit, so a push left by a killed farm still
/// excludes the others.
/// `Rejected` only when the branch moved on; any other
/// refusal is an error — but for a hub whose work tree has changes of its
/// own (a user editing a tracked file), which refuses every push until they
/// are gone: that is waited out, said once, heartbeating the claim.
pub(super) fn publish_branch(
    run: &Run,
    clone: &PrivateClone,
    held: &Held,
    hold: &[std::os::fd::BorrowedFd<'_>],
) -> Result<Published, Error> {
    let look = || match &run.hub.local {
        Some(local) => format!("git -C {} status", local.dir.display()),
        None => format!("git ls-remote {}", run.hub.url),
    };
    let mut said = false;
    let mut wait = Duration::from_millis(100);
    loop {
        let why = match clone.publish(&*run.store, held, &run.hub.branch, hold) {
            Err(StoreError::Refused(why)) => why,
            other => return other.map_err(Error::from),
        };
        if !work_tree_busy(&why) || run.stop.killing() {
            let look = if why.contains("No space left on device") {
                format!(
                    "free some disk space on the hub, then run again; look: {}",
                    look()
                )
            } else {
                format!("look at the hub: {}", look())
            };
            return Err(Error::failure(format!("the hub refused the push: {why}")).hint(look));
        }
        if !said {
            said = true;
            run.say_tone(
                &held.claim().agent,
                Style::Warn,
                &format!(
                    "`{}`: waiting for the hub's work tree to be clean to push ({why}; look: {})",
                    held.claim().task,
                    look()
                ),
            );
        }
        let until = Instant::now() + wait;
        while Instant::now() < until && !run.stop.killing() {
            std::thread::sleep(Duration::from_millis(50));
        }
        wait = (wait * 2).min(Duration::from_secs(2));
        if let Err(Interrupt::Lost(why)) = Heartbeat::new(run, held).now() {
            return Ok(Published::Lost(why));
        }
    }
}

/// Whether a refused push says the hub's work tree is not clean (git's
/// `receive.denyCurrentBranch=updateInstead`): a state a user makes and
/// undoes, not a refusal for good.
pub(super) fn work_tree_busy(why: &str) -> bool {
    let why = why.to_lowercase();
    [
        "working directory has",
        "unstaged changes",
        "staged changes",
    ]
    .iter()
    .any(|p| why.contains(p))
}
