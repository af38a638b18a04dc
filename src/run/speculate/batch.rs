//! A batch: the changes behind that land with a change's push (see
//! [`Rider::gather`]) — taken up to the last that passed, each put on top
//! of the one ahead so that the tip pushed is the tree tested, and what
//! each of them passed with, for the progress document.

use super::Rider;
use crate::error::Error;
use crate::run::gate;
use crate::run::interrupt::Halt;
use crate::run::mates::Taken;
use crate::run::queue::InLine;
use crate::suite::report::Report;
use crate::suite::results::Results;

/// What lands with a change's push besides its own work (see
/// [`Rider::gather`]).
#[derive(Default)]
pub(in crate::run) struct Batch {
    /// When the change left its tests to those behind it: the task of the
    /// one whose tests covered its code.
    pub(in crate::run) tested_with: Option<String>,
    /// The changes behind, in line order.
    pub(in crate::run) with: Vec<Batched>,
}

/// A change behind landing with another's push (see [`Rider::gather`]).
pub(in crate::run) struct Batched {
    pub(in crate::run) task: String,
    pub(in crate::run) agent: String,
    /// Passing tests before it (on the change ahead's code) and with it;
    /// `None` when not known, or it left its tests to those behind it.
    pub(in crate::run) tests: Option<(usize, usize)>,
    /// Its results: the tests of the tree pushed when it is the last.
    pub(in crate::run) report: Option<Report>,
    /// When it left its tests to those behind it: the task of the change
    /// behind whose tests covered its code.
    pub(in crate::run) tested_with: Option<String>,
}

impl<'a> Rider<'a> {
    /// The changes just behind this one that land with it, in one push: in
    /// order (on a hub of this machine, only this farm's: see
    /// [`mates`](crate::run::mates)), each passed — or deferred to the changes
    /// behind it (see [`Rider::defers`]) — and built on the code of the
    /// one ahead of it, its claim held; each one's own commits (those
    /// since what it was built on) are put on top of the last, and it
    /// lands only if that gives the very code that passed — the tree
    /// pushed is a tree tested. HEAD ends on the work of the last that
    /// passed; the first that does not qualify ends the batch, and those
    /// deferred after the last that passed wait. Without it, each change
    /// behind waits for this one's push to show, builds on the branch
    /// again and pushes in turn: about a second a landing through a hub
    /// elsewhere, whatever the suite (the `daemon` bench's changes waited
    /// up to 3 s in line after passing). Nothing of fencing changes: the
    /// push is refused unless each one's claim is held on the claims tip
    /// it lands on (see [`Entry::leave_on_publish`](crate::run::queue::Entry::leave_on_publish)), and each one's farm,
    /// which finds its file saying it landed, releases its claim.
    pub(super) fn gather(&mut self, behind: &[InLine]) -> Result<Vec<(InLine, String)>, Halt> {
        self.settle(false);
        let Some(b) = &self.built else {
            return Ok(Vec::new());
        };
        // On a hub of this machine a change that passed pushes in its own
        // turn, a landing a change, each a push of a few milliseconds
        // under the push lock (and its line in the progress document with
        // its own counts): only a deferred change lands a batch there.
        if behind.is_empty() || !(self.queue.elsewhere() || self.deferring) {
            return Ok(Vec::new());
        }
        let (own, key) = (b.head.clone(), b.key.clone());
        let gathered = self.gather_on(&own, &key, behind);
        if gathered.is_err() {
            // HEAD never left on others' work: a rescue of this change's
            // takes HEAD.
            let _ = self.turn.clone.move_head(&own);
            self.settle(false);
        }
        gathered
    }

    /// [`Rider::gather`] on top of `own`, this change's candidate, whose
    /// code is `key`.
    fn gather_on(
        &mut self,
        own: &str,
        key: &str,
        behind: &[InLine],
    ) -> Result<Vec<(InLine, String)>, Halt> {
        let turn = self.turn;
        let clone = turn.clone;
        let mut with = Vec::new();
        let mut head = own.to_owned();
        let mut key = key.to_owned();
        // How many of `with` land: up to the last that passed.
        let mut tested = 0;
        for change in behind {
            // On a hub of this machine, one of this farm's whose claim is
            // fenced for the push, or the batch ends.
            let held = if self.queue.elsewhere() {
                None
            } else {
                match self.fence(change)? {
                    Some(held) => Some(held),
                    None => break,
                }
            };
            // A change behind that cannot be put on top (its candidate
            // gone from the hub, its commits not replayed cleanly) ends
            // the batch; it lands in its own turn.
            let replayed = self.replay(change, &head, &key);
            if !matches!(replayed, Ok(Some(_)))
                && let Some((taken, _)) = &held
            {
                turn.run.mates.settle(taken.place, None);
            }
            (head, key) = match replayed {
                Ok(Some(replayed)) => replayed,
                Ok(None) | Err(Halt::Failed(_)) => break,
                Err(cut) => return Err(cut),
            };
            self.holds.extend(held);
            with.push((change.clone(), head.clone()));
            if change.record.green {
                tested = with.len();
            }
        }
        // Up to the last that passed: those after it, not tested alone
        // (see `defers`), wait for a change behind them to pass.
        for (change, _) in with.drain(tested..) {
            if let Some(i) = self.holds.iter().position(|(t, _)| t.place == change.place) {
                let (taken, _) = self.holds.remove(i);
                turn.run.mates.settle(taken.place, None);
            }
        }
        let head = with.last().map_or(own, |(_, head)| head.as_str());
        if clone.head()? != head {
            clone.move_head(head)?;
        }
        if !with.is_empty() {
            let tasks: Vec<&str> = with.iter().map(|(c, _)| c.record.task.as_str()).collect();
            self.say(&format!(
                "landing with the {} passed change(s) behind it: {}",
                with.len(),
                tasks.join(" ")
            ));
        }
        Ok(with)
    }

    /// On a hub of this machine, `change` taken from its loop for this
    /// push, with its claim's locked file and its push fence (see
    /// [`mates`](crate::run::mates)): `None` when it is not this farm's (or not
    /// that task's any more), or its claim cannot be fenced now.
    fn fence(&self, change: &InLine) -> Result<Option<(Taken, std::fs::File)>, Halt> {
        let run = self.turn.run;
        let Some(taken) = run.mates.take(change.place) else {
            return Ok(None);
        };
        let fence = if taken.task.as_str() == change.record.task {
            run.store.fence_for(&taken.task, &taken.claim)
        } else {
            Ok(None)
        };
        match fence {
            Ok(Some(fence)) => Ok(Some((taken, fence))),
            other => {
                run.mates.settle(taken.place, None);
                other.map_err(Error::from)?;
                Ok(None)
            }
        }
    }

    /// Let go of the changes taken for a push (see [`Rider::fence`]):
    /// `landed` as the commits gathered for them, or not.
    pub(super) fn settle(&mut self, landed: bool) {
        let mates = &self.turn.run.mates;
        for (taken, _) in std::mem::take(&mut self.holds) {
            let commit = landed
                .then(|| self.with.iter().find(|(c, _)| c.place == taken.place))
                .flatten()
                .map(|(_, commit)| commit.clone());
            mates.settle(taken.place, commit);
        }
    }

    /// What the push that lands the changes gathered must keep open (see
    /// [`Rider::fence`]).
    pub(in crate::run) fn landing_hold(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.holds
            .iter()
            .flat_map(|(taken, fence)| [taken.claim.as_fd(), fence.as_fd()])
            .collect()
    }

    /// The commit of `change`'s own commits put on top of `head`, whose
    /// code is `key`, and the code it passed with, if it qualifies (see
    /// [`Rider::gather`]): passed or deferred, its claim named, built on that code,
    /// and giving that code. HEAD moves.
    fn replay(
        &self,
        change: &InLine,
        head: &str,
        key: &str,
    ) -> Result<Option<(String, String)>, Halt> {
        let r = &change.record;
        let (Some(candidate), Some(on), Some(code)) = (&r.candidate, &r.on, &r.key) else {
            return Ok(None);
        };
        if !(r.green || r.defer) || r.claim.is_none() || r.landed.is_some() || !self.have(change)? {
            return Ok(None);
        }
        let turn = self.turn;
        let clone = turn.clone;
        if gate::code_key(turn, on)? != key {
            return Ok(None);
        }
        clone.move_head(candidate)?;
        if !clone.rebase_onto(head, on)? {
            return Ok(None);
        }
        let replayed = clone.head()?;
        Ok((gate::code_key(turn, &replayed)? == *code).then(|| (replayed, code.clone())))
    }

    /// What lands with this one's next push (see [`Rider::gather`]): the
    /// changes behind, each with the tests it passed with, as its line
    /// in the progress document shows them. (Without them, a batch's lines
    /// carried no counts and the document's tests were the first change's,
    /// not those of the tree pushed: "38 passed, 2 failed" on a branch
    /// that passed all 40, in one of four runs of a test with two
    /// machines.)
    pub(in crate::run) fn landing(&self) -> Batch {
        if self.with.is_empty() {
            return Batch::default();
        }
        // Only the progress document shows them: with none kept, none
        // are read (a fetch each from a hub elsewhere).
        let shown = self.turn.run.config.progress.is_some();
        let shown_results = |commit: &str| shown.then(|| self.results_at(commit)).flatten();
        // Passing before the first: with this one's code, or — when it
        // left its tests to those behind — with the branch's.
        let lead = self
            .built
            .as_ref()
            .map(|b| if self.deferring { &b.on } else { &b.head })
            .and_then(|commit| shown_results(commit));
        let mut before = lead.map(|r| r.passed().len());
        let with = self
            .with
            .iter()
            .enumerate()
            .map(|(i, (change, head))| {
                // A deferred change has no tests of its own: the first
                // behind it that passed tested its code with theirs.
                let green = change.record.green;
                let results = if green { shown_results(head) } else { None };
                let after = results.as_ref().map(|r| r.passed().len());
                let tests = before.zip(after);
                before = after.or(before);
                Batched {
                    task: change.record.task.clone(),
                    agent: change.record.agent.clone(),
                    tests,
                    report: results.map(|r| r.report),
                    tested_with: (!green).then(|| self.tested_after(i)).flatten(),
                }
            })
            .collect();
        Batch {
            tested_with: self.deferring.then(|| self.tested_after(0)).flatten(),
            with,
        }
    }

    /// The task of the first change gathered from `from` on that passed.
    fn tested_after(&self, from: usize) -> Option<String> {
        self.with[from..]
            .iter()
            .find(|(c, _)| c.record.green)
            .map(|(c, _)| c.record.task.clone())
    }

    /// The results kept for the code of `commit`, or shared for it on the
    /// hub: best effort (`None` when neither has them).
    pub(super) fn results_at(&self, commit: &str) -> Option<Results> {
        match gate::kept_results(self.turn, commit) {
            Ok(Some(results)) => Some(results),
            _ => self.shared_results(commit).ok().flatten(),
        }
    }

    /// The push did not land: HEAD back on this change's own candidate,
    /// which the next round catches up from (the changes behind are
    /// gathered again when it is ready).
    pub(in crate::run) fn unbatch(&mut self) -> Result<(), Halt> {
        self.settle(false);
        if std::mem::take(&mut self.with).is_empty() {
            return Ok(());
        }
        if let Some(b) = &self.built {
            self.turn.clone.move_head(&b.head)?;
        }
        Ok(())
    }
}
