//! The merge queue: a gated change does not take
//! a turn at the push lock to be tested alone. It takes a place in line
//! ([`queue`](super::queue)) and is tested at once, on top of the change
//! just ahead of it — which is tested on top of the one ahead of it, and so
//! on down to the branch. The tests of the whole line run side by side, and each change
//! pushes its own tested commit when the one ahead of it has landed: with
//! J agents and a suite of S seconds, J changes land per S, not one.
//!
//! Why speculation rather than batches (test K changes at once, bisect when
//! red): each change is still pushed by the farm that holds its claim,
//! through the claim store, so fencing is what it was — a change whose
//! claim was reaped never lands, whoever is in line with it; and every tip
//! of the branch farm pushes is a tree that was tested, not only a batch's
//! last. The price would be a red change costing a new run for each change
//! behind it (they were tested on top of it): so those, built again
//! without it, are tested as one batch — the last of them tests the code
//! of all, and the first lands them all in one push (see
//! [`Rider::defers`]). A red change costs two runs more than a green one:
//! its own again (a flaky test evicts no one) and the batch's.
//!
//! - A change builds its candidate on the candidate of the change just
//!   ahead (or on the branch when it is first), from its own work on the
//!   branch: only its own commits are replayed.
//! - It judges its tests against the results of what it was built on, once
//!   the change ahead passed (a red or dead change ahead: built again).
//! - It is ready to push when it passed (or a change behind it that
//!   covers its code did, see [`Rider::gather`]), nothing is ahead of it,
//!   and it sits on the branch's commit — the change ahead landed. A progress
//!   document that landed with it changes no code: the work is put on top
//!   again and its tests stand. One that passes first in line lands at
//!   once, its verdict unsaid in line (no change behind can use it
//!   sooner) and its results shared once it landed.
//! - FIFO: a change builds on every one ahead of it and pushes only when
//!   none is left; a newer one can never pass it. One whose work conflicts
//!   with the change ahead waits for it to land, then merges as any change
//!   that conflicts with the branch does.
//! - A farm killed anywhere in line leaves a place nobody holds: the next
//!   reader removes it (see [`queue`](super::queue) for when it knows) and
//!   the changes behind it build again; its work is in its clone, rescued
//!   as any killed farm's is. A change that finds its place taken away
//!   (its claim taken for gone) is a claim lost when it is; one whose
//!   claim is still held takes the last place again: no farm ends for it.
//!   At most [`REJOINS`] times: taken away once more, the queue fails it
//!   as it fails a change it cannot test (its work to a rescue branch, the
//!   attempt counted), rather than ride on for ever.
//! - Across machines (a hub that is only a URL) the line is kept beside the
//!   claims, and what a farm elsewhere cannot read where it is travels
//!   through the hub: the candidate ahead is fetched by its ref, and the
//!   results it passed with are pushed under `refs/farm/results/<code key>`,
//!   so that the change behind judges its own tests against them rather
//!   than run the suite on that candidate again — nor on the branch, once
//!   that change landed: its results stay there (the branch's), until the
//!   next landing replaces them. No machine tests again because another landed first:
//!   the change first in line is the only one that pushes to the branch.
//! - Each landing in a line elsewhere then deletes the results refs that
//!   nobody can read any more (see [`hub_refs`]): those a killed
//!   farm left (its change passed, then died; or it landed and was killed
//!   before it left the line) go with the next landing, not never. A
//!   change names its code in line before it pushes its results, so a ref
//!   in use is never taken for one left over; each goes by a
//!   compare-and-swap on the commit seen, so one pushed again meanwhile
//!   stays. Nothing can be lost by it: a results ref holds test results,
//!   no one's work, and one deleted in a race costs a suite run at most.

mod batch;
mod defer;
mod hub_refs;
mod shared_results;

pub(super) use batch::{Batch, Batched};
pub(super) use hub_refs::sweep_left;
use hub_refs::{refs_listed, refs_rebuilt};

use crate::claims::git::REF as CLAIMS;
use crate::error::Error;
use crate::git::command::Pushed;
use crate::run::event::Event;
use crate::run::gate::{self, Passed, Verdict};
use crate::run::interrupt::{Halt, Heartbeat};
use crate::run::mates::Taken;
use crate::run::queue::{Entry, InLine, Queue, Record, View};
use crate::run::turn::Turn;
use crate::suite::results::Results;

/// How long the suite must take for a line elsewhere to pay (see
/// [`Rider::applies`]).
const QUEUE_PAYS: std::time::Duration = std::time::Duration::from_secs(1);

/// How often a change in a line elsewhere takes back dead claims.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How many times a change whose place in line was taken away while its
/// claim was held takes the last place again; taken away once more, the
/// queue fails it (see [`Rider::update`]). A place is taken away by a
/// reader that read the claim as gone (a heartbeat late on a loaded
/// machine, a claims branch read mid-change): once is bad luck, and so may
/// a second or third time be. More is a reader that will keep doing it
/// (a farm elsewhere that cannot read this claim), and riding on would
/// loop for ever, each time a build and maybe a suite run, with nothing
/// said; failed, the work is kept on its rescue branch and the task tried
/// again as after any failed attempt.
const REJOINS: u32 = 3;

/// How long a change in a line elsewhere waits on tips that do not move
/// before it reads the line again all the same.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a change whose file says the change ahead landed it waits for
/// the branch to show that commit (see [`Rider::landed_by_another`]).
const LANDED_SHOWS: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the test results a candidate passed with are shared, by the code
/// key they are of (`<RESULTS><key>`): a farm that has none kept for a code
/// finds them there, the change that passed with them in line or landed.
const RESULTS: &str = "refs/farm/results/";

/// How riding the queue ended (when it was not cut short).
pub(super) enum Ride {
    /// HEAD is the work on top of `at`, the branch's commit now; nothing is
    /// ahead in line and the gate passed it: push.
    Ready { at: String, passed: Option<Passed> },
    /// The gate kept it off the branch.
    Gated(Verdict),
    /// The work conflicts with the branch as it is now (moved by a change
    /// that landed, or by hand): HEAD is the work as it was; catch up.
    Conflict,
    /// The change ahead landed this one's work with its own (see
    /// [`Rider::gather`]): nothing to push; release the claim.
    Landed,
}

/// A change in line, and what it was built on and tested as.
pub(super) struct Rider<'a> {
    turn: Turn<'a>,
    queue: Queue<'a>,
    entry: Entry<'a>,
    /// Candidate refs pushed so far (one per build), and runs of the gate.
    builds: u32,
    tested: u32,
    joined: std::time::Instant,
    /// When this change last took back dead claims (a line elsewhere).
    reaped: std::cell::Cell<std::time::Instant>,
    /// The hub's claims and branch tips as last looked at (a line
    /// elsewhere): while they stand, nothing in line or on the branch moved.
    seen: std::cell::RefCell<String>,
    /// The claims tip the look that ended the last wait found, for the
    /// next reading of the line (see [`Rider::view`]).
    looked: std::cell::Cell<Option<String>>,
    /// The candidate now.
    built: Option<Built>,
    /// The candidate built, not yet said in line: it is while its suite
    /// runs (see [`Rider::publish_built`]).
    unpublished: Option<String>,
    /// The code that passed the gate, and its tests: a candidate built
    /// again with the same code (only the board or the progress document
    /// moved under it) is not tested again.
    passed: Option<(String, Option<Passed>)>,
    /// Landed (see [`Rider::landed`]): the results refs nobody reads any
    /// more are deleted when it leaves.
    landed: bool,
    /// Passed first in line, and not said so in line yet (see
    /// [`Rider::ride`]).
    unsaid: bool,
    /// Times it took the last place again (see [`REJOINS`]).
    rejoins: u32,
    /// The changes behind that land with this one's next push, each with
    /// the commit its work lands as (see [`Rider::gather`]).
    with: Vec<(InLine, String)>,
    /// On a hub of this machine, what fences the claims of those changes
    /// for that push (see [`mates`](super::mates)): each one taken from its
    /// loop, its claim's locked file and its push fence.
    holds: Vec<(Taken, std::fs::File)>,
    /// Since when its file has said it landed (written by the change
    /// ahead) while the branch did not show it yet.
    marked: Option<std::time::Instant>,
    /// Why the queue gave it up, once it did (see [`Rider::update`]).
    given_up: Option<String>,
    /// Built again because the change it was built on left the line
    /// unlanded (red, or its farm gone): it leaves its tests to the change
    /// behind it, if one builds on it (see [`Rider::defers`]).
    reformed: bool,
    /// Not testing alone now: the change behind tests its code.
    deferring: bool,
    /// Tests alone all the same: the changes behind that passed could not
    /// be landed with it, or did not test it in time.
    alone: bool,
    /// Since when it has left its tests to the changes behind.
    deferred: Option<std::time::Instant>,
    /// Red on top of changes ahead not tested alone (see
    /// [`Rider::results_of`]): its verdict waits for the one just ahead's.
    suspect: bool,
    /// Its work conflicts with the candidate ahead: said in line, so that
    /// the change ahead does not wait for it to test.
    blocked_now: bool,
    /// The results the last test was judged against were those of what a
    /// change ahead that did not test alone was built on.
    over_deferred: std::cell::Cell<bool>,
    /// What such a change was built on could not be found, in line or on
    /// the branch, though the change just ahead is still the one built on.
    lost_under: std::cell::Cell<bool>,
}

/// A change's test in line, as the gate asks it of the queue (see
/// [`gate::Queued`]).
struct Judging<'r, 'a, 'b> {
    rider: &'r mut Rider<'a>,
    /// The candidate of the change ahead, which it was built on.
    on: &'r str,
    beat: &'r mut Heartbeat<'b>,
}

impl gate::Queued for Judging<'_, '_, '_> {
    fn meanwhile(&mut self) -> Result<(), Halt> {
        self.rider.publish_built()
    }

    fn base(&mut self) -> Result<Option<Result<Results, Verdict>>, Halt> {
        self.rider.results_of(self.on, self.beat)
    }
}

/// What building a candidate came to.
enum Build {
    Built,
    /// The work conflicts with the branch: catch up.
    Conflict,
    /// The work conflicts with the change ahead: wait for it to land.
    Blocked,
}

/// Where the change ahead that a candidate was built on is.
enum Ahead {
    /// In line, its tests not yet passed.
    Testing,
    /// Passed, in line or landed: its results are known.
    Passed,
    /// In line, not tested alone: the changes behind it test its code with
    /// theirs, judged against the results of what it was built on (this
    /// commit).
    Covered(String),
    /// Left the line without landing.
    Gone,
}

/// A candidate: the work `from` put on top of `on` (the candidate of the
/// change at place `ahead` in line, or the branch), as commit `head` whose
/// code is `key`.
struct Built {
    from: String,
    on: String,
    ahead: Option<u64>,
    head: String,
    key: String,
}

impl<'a> Rider<'a> {
    /// Whether the queue applies: a gate, and a line to keep — a hub of
    /// this machine, or a claim store that keeps one beside the claims of a
    /// hub elsewhere, unless this run saw the suite take less than
    /// [`QUEUE_PAYS`]. Below that, testing side by side saves less than the
    /// line's round trips through the hub cost: a change is tested on the
    /// branch and pushed, and tested again if another landed first. (On the
    /// chaos suite's round on a git daemon hub, a 30 ms suite and a line
    /// took 157 s where testing in turn took 54.)
    pub(super) fn applies(turn: Turn<'_>) -> bool {
        let run = turn.run;
        let pays = || {
            let took = run.suite_ms.load(std::sync::atomic::Ordering::Relaxed);
            took == 0 || took >= QUEUE_PAYS.as_millis() as u64
        };
        run.config.gate.is_some()
            && (run.hub.local.is_some() || (run.store.line().is_some() && pays()))
    }

    /// Take the last place in line.
    pub(super) fn join(turn: Turn<'a>) -> Result<Rider<'a>, Halt> {
        let run = turn.run;
        let queue = match (&run.hub.local, run.store.line()) {
            (Some(local), _) => Queue::local(&local.dir.join(crate::names::CLAIMS_DIR)),
            (None, Some(line)) => Queue::remote(line),
            (None, None) => unreachable!("the queue applies only where a line is kept"),
        };
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (entry, dead) = queue.join(Record {
            task: turn.task.id.to_string(),
            agent: turn.name.to_owned(),
            since,
            claim: Some(turn.held.claim().nonce.to_string()),
            ..Record::default()
        })?;
        let rider = Rider {
            turn,
            queue,
            entry,
            builds: 0,
            tested: 0,
            joined: std::time::Instant::now(),
            reaped: std::cell::Cell::new(std::time::Instant::now()),
            seen: std::cell::RefCell::new(String::new()),
            looked: std::cell::Cell::new(None),
            built: None,
            unpublished: None,
            passed: None,
            landed: false,
            unsaid: false,
            rejoins: 0,
            with: Vec::new(),
            holds: Vec::new(),
            marked: None,
            given_up: None,
            reformed: false,
            deferring: false,
            alone: false,
            deferred: None,
            suspect: false,
            blocked_now: false,
            over_deferred: std::cell::Cell::new(false),
            lost_under: std::cell::Cell::new(false),
        };
        rider.drop_refs(&dead);
        if !rider.queue.elsewhere() {
            run.mates.enter(rider.entry.place, turn.held);
        }
        let ahead = rider.queue.view(&rider.entry)?.waiting_ahead;
        turn.run.journal.record(
            turn.name,
            &Event::Queued {
                task: turn.task.id.as_str().into(),
                ahead,
            },
        );
        rider.say(&format!("queued to land, {ahead} change(s) ahead"));
        Ok(rider)
    }

    /// Ride the line from HEAD, the work on top of `base` (the branch's
    /// commit it was last brought onto); `merged` when it was merged with
    /// the branch rather than rebased (it is then merged again, never
    /// rebased: that would replay the conflict).
    pub(super) fn ride(
        &mut self,
        base: &str,
        merged: bool,
        beat: &mut Heartbeat<'_>,
    ) -> Result<Ride, Halt> {
        let turn = self.turn;
        let clone = turn.clone;
        let own = clone.head()?;
        // The candidate ahead that the work conflicted with.
        let mut blocked: Option<String> = None;
        loop {
            if let Some(why) = self.given_up.take() {
                return Ok(Ride::Gated(Verdict::Unqueued(why)));
            }
            // (Said by the test that follows a build; by any other way on,
            // here.)
            self.publish_built()?;
            self.tend(beat)?;
            // On a hub of this machine, landed by the change ahead, or
            // being landed: its push has this change until it settles it.
            if !self.queue.elsewhere() {
                let mates = &turn.run.mates;
                if let Some(landed) = mates.landed(self.entry.place) {
                    self.say(&format!(
                        "landed by the change ahead with its own, as {}",
                        &landed[..landed.len().min(10)]
                    ));
                    return Ok(Ride::Landed);
                }
                if mates.taken(self.entry.place) {
                    self.wait(beat)?;
                    continue;
                }
            }
            let mut view = self.view()?;
            self.drop_refs(&view.dead_refs);
            let tip = clone.fetch_if_moved(&turn.run.hub)?;
            match self.landed_by_another(&view, &tip)? {
                Some(true) => return Ok(Ride::Landed),
                Some(false) => {
                    self.wait(beat)?;
                    continue;
                }
                None => {}
            }
            // Its task done on the branch, and not by a landing that says
            // so: settled by hand meanwhile. Never pushed again: catching
            // up says where it went.
            if view.ahead.is_none() && crate::run::landing::done_at(clone, &tip, &turn.task.id)? {
                return Ok(Ride::Conflict);
            }
            if self.ahead_landed(&view, &tip)? {
                view.ahead = None;
                view.waiting_ahead = 0;
            }
            let on = match &view.ahead {
                None => tip.clone(),
                Some(ahead) => match &ahead.record.candidate {
                    // Not one this work conflicts with. (Built on the
                    // branch as it was when that change was brought onto
                    // it, maybe: only this work's own commits are put on
                    // top, and the code tested is that of every change
                    // ahead with this one. Before it lands it is put on
                    // the branch itself, and tested again if that changed
                    // its code.)
                    Some(c) if blocked.as_ref() != Some(c) && self.have(ahead)? => c.clone(),
                    _ => {
                        self.say_passed()?;
                        self.wait(beat)?;
                        continue;
                    }
                },
            };
            if self.stale(&own, &on, view.ahead.is_some())? {
                match self.build(&own, base, merged, &on, &view)? {
                    Build::Built => {}
                    Build::Conflict => return Ok(Ride::Conflict),
                    Build::Blocked => {
                        blocked = Some(on);
                        continue;
                    }
                }
            }
            // (None: it lost its place in line on the way, and took the
            // last one again: built anew there.)
            let Some(b) = self.built.as_ref() else {
                continue;
            };
            if self.passed.as_ref().is_none_or(|(k, _)| *k != b.key) {
                if self.defers(&view) {
                    if let Some(ready) = self.deferred_turn(&view, &tip, beat)? {
                        return Ok(ready);
                    }
                    continue;
                }
                self.deferred = None;
                if std::mem::take(&mut self.deferring) {
                    self.say("tested alone after all: the change behind it went, or was red");
                    let head = b.head.clone();
                    self.publish(Some(&head), false)?;
                }
                if let Some(verdict) = self.test(&view, beat)? {
                    return Ok(Ride::Gated(verdict));
                }
                continue;
            }
            if view.ahead.is_none() && b.on == tip {
                self.with = self.gather(&view.behind)?;
                self.entry.leave_on_publish(&self.with)?;
                let passed = self.passed.as_ref().and_then(|(_, t)| t.clone());
                return Ok(Ride::Ready { at: tip, passed });
            }
            self.say_passed()?;
            self.wait(beat)?;
        }
    }

    /// Test the candidate (against the branch's results when it is first
    /// in line, else against those of the change ahead, once known) and
    /// act on the verdict: a red one the ride ends with (`Some`); a pass
    /// kept, and said in line unless it lands next with nobody behind it;
    /// built again when what it was built on went away.
    fn test(&mut self, view: &View, beat: &mut Heartbeat<'_>) -> Result<Option<Verdict>, Halt> {
        let turn = self.turn;
        let Some(b) = self.built.as_ref() else {
            return Ok(None);
        };
        let (on, key, head) = (b.on.clone(), b.key.clone(), b.head.clone());
        self.tested += 1;
        self.over_deferred.set(false);
        let verdict = if view.ahead.is_none() {
            // The branch's results, from the change that landed
            // it, when this farm has none: not tested again.
            let known =
                gate::kept_results(turn, &on)?.is_some() || self.shared_results(&on)?.is_some();
            let verdict = gate::check(turn, &on, &mut || self.publish_built())?;
            if !known && !matches!(verdict, Verdict::Pass(_)) {
                self.share_branch_results(&on)?;
            }
            Some(verdict)
        } else {
            let mut judging = Judging {
                rider: self,
                on: &on,
                beat,
            };
            gate::check_ahead(turn, &on, &mut judging)?
        };
        self.publish_built()?;
        // Its place in line was taken away as its candidate was said in
        // line, while the suite ran (see `update`): built again where it
        // is now, and tested there.
        if self.built.as_ref().is_none_or(|b| b.head != head) {
            return Ok(None);
        }
        // Red on top of a change that then left the line unlanded
        // (its farm killed, its claim lost): not this change's
        // doing alone; built again and tested on what is left.
        let moot = matches!(verdict, Some(Verdict::Red { .. }))
            && view.ahead.is_some()
            && matches!(
                self.ahead(&on, &gate::code_key(turn, &on)?, false)?,
                Ahead::Gone
            );
        // (The line read again: the view above was read before
        // the suite ran, maybe before the changes behind joined.)
        let alone = view.ahead.is_none()
            && matches!(verdict, Some(Verdict::Pass(_)))
            && self.queue.view(&self.entry)?.behind.is_empty();
        match verdict {
            // What a deferred change ahead was built on is not to be
            // found, though that change is still the one built on (built
            // again, it would be built the same, and lose it again): its
            // own verdict is asked for instead, as after a red batch.
            None if self.lost_under.get() && !self.ahead_moved(view)? => {
                self.suspect = true;
                self.say("cannot find what the changes ahead were built on; the change ahead tests alone first");
                self.publish(Some(&head), false)?;
            }
            // What it was built on went away: build again, with the
            // changes behind that were built on it (see `defers`).
            None => {
                self.built = None;
                self.reformed = true;
            }
            Some(_) if moot => {
                self.built = None;
                self.reformed = true;
            }
            // Red on top of changes not tested alone: which of them, or
            // this one, broke it is not known; the one just ahead tests
            // itself, and this one's verdict waits for it.
            Some(Verdict::Red { .. }) if self.over_deferred.get() => {
                self.suspect = true;
                self.say(
                    "red on top of changes not tested alone; the change ahead tests alone first",
                );
                self.publish(Some(&head), false)?;
            }
            // First in line with nobody behind: it lands next (put
            // on the branch first, if the change ahead landed with
            // a progress document). In a line elsewhere the verdict
            // said in line and the results pushed were two round
            // trips more between its suite and its landing: the
            // results are pushed once it landed (see `landed`), for
            // the branch. (Both said all the same if it must wait.)
            // With changes behind, both are said first: those
            // judge their tests against its results while it
            // lands, and pass in time to land together (see
            // `gather`) — unsaid, each waited for the landing
            // ahead before its verdict, and none ever had.
            Some(Verdict::Pass(tests)) if alone => {
                self.suspect = false;
                self.passed = Some((key, tests));
                self.unsaid = true;
            }
            Some(Verdict::Pass(tests)) => {
                self.suspect = false;
                self.share_results(&key)?;
                self.passed = Some((key, tests));
                self.publish(Some(&head), true)?;
            }
            Some(verdict) => return Ok(Some(verdict)),
        }
        Ok(None)
    }

    /// Whether the change just ahead is no longer the candidate this one
    /// was built on, read again now.
    fn ahead_moved(&self, view: &View) -> Result<bool, Halt> {
        let Some(b) = &self.built else {
            return Ok(true);
        };
        let now = self.queue.view(&self.entry)?;
        Ok(
            now.ahead.as_ref().map(|a| a.place) != view.ahead.as_ref().map(|a| a.place)
                || now.ahead.and_then(|a| a.record.candidate).as_deref() != Some(b.on.as_str()),
        )
    }

    /// Whether the change ahead landed this one's work with its own (see
    /// [`Rider::gather`]): its file says so, and the branch has the commit
    /// it names. `Some(false)` while the file says so and the branch does
    /// not show it yet (the hub commits an atomic push's refs one after
    /// another); after [`LANDED_SHOWS`] the file is taken for one that a
    /// push cut between its refs left, and the change rides on: its next
    /// write finds its place taken, as any place taken away.
    fn landed_by_another(&mut self, view: &View, tip: &str) -> Result<Option<bool>, Halt> {
        let Some(mine) = &view.mine else {
            return Ok(None);
        };
        let Some(landed) = &mine.record.landed else {
            return Ok(None);
        };
        if self.turn.clone.is_ancestor(landed, tip)? {
            // Its file goes when it leaves, as written there.
            self.entry.adopt(&mine.text);
            self.say(&format!(
                "landed by the change ahead with its own, as {}",
                &landed[..landed.len().min(10)]
            ));
            return Ok(Some(true));
        }
        let since = *self.marked.get_or_insert_with(std::time::Instant::now);
        Ok((since.elapsed() < LANDED_SHOWS).then_some(false))
    }

    /// Say in line that the candidate passed, and share its results, if
    /// that was put off for its landing (see [`Rider::ride`]) and it must
    /// wait after all: the changes behind go on with it.
    fn say_passed(&mut self) -> Result<(), Halt> {
        if !std::mem::take(&mut self.unsaid) {
            return Ok(());
        }
        let Some((key, _)) = &self.passed else {
            return Ok(());
        };
        let key = key.clone();
        self.share_results(&key)?;
        let head = self.built.as_ref().map(|b| b.head.clone());
        self.publish(head.as_deref(), true)
    }

    /// Whether the change just ahead in `view` landed already: the
    /// candidate this one was built on is on the branch (`tip`), or the
    /// branch has its code and its task done (it was put on the branch
    /// itself again, moved by the change ahead of it with its progress
    /// document: a commit that is not its candidate). It leaves the line a
    /// few round trips after its push (its refs deleted, its file taken
    /// out, each a push to a hub elsewhere); this one, first now (nothing
    /// is ahead of a change that pushed), need not wait for that.
    fn ahead_landed(&self, view: &View, tip: &str) -> Result<bool, Halt> {
        let (Some(ahead), Some(b)) = (&view.ahead, &self.built) else {
            return Ok(false);
        };
        if b.ahead != Some(ahead.place) || ahead.record.candidate.as_deref() != Some(&b.on) {
            return Ok(false);
        }
        let turn = self.turn;
        let clone = turn.clone;
        if clone.is_ancestor(&b.on, tip)? {
            return Ok(true);
        }
        let Ok(task) = crate::names::TaskId::parse(&ahead.record.task) else {
            return Ok(false);
        };
        Ok(gate::code_key(turn, tip)? == gate::code_key(turn, &b.on)?
            && crate::run::landing::done_at(clone, tip, &task)?)
    }

    /// Wait for the line or the branch to move. On a hub of this machine,
    /// a short sleep (reading the line is a file read). In a line
    /// elsewhere, one cheap look at the hub's tips (`git ls-remote`) each
    /// time, and the line read again only once they moved: a full look is
    /// two fetches, and every change in line of every farm looks.
    fn wait(&self, beat: &mut Heartbeat<'_>) -> Result<(), Halt> {
        let every = self.queue.look_every();
        if !self.queue.elsewhere() {
            std::thread::sleep(every);
            return Ok(());
        }
        let turn = self.turn;
        let tips = [
            CLAIMS.to_owned(),
            format!("refs/heads/{}", turn.run.hub.branch),
        ];
        // A full look now and then all the same (a claim gone stale moves
        // no tip).
        let until = std::time::Instant::now() + LOOK_AGAIN;
        loop {
            std::thread::sleep(every);
            self.tend(beat)?;
            let now = turn.clone.hub_tips(&tips).unwrap_or_default();
            let moved = now.is_empty() || *self.seen.borrow() != now;
            if moved || std::time::Instant::now() >= until {
                let claims = refs_listed(&now).find(|(r, _)| *r == CLAIMS);
                self.looked.set(claims.map(|(_, oid)| oid.to_owned()));
                *self.seen.borrow_mut() = now;
                return Ok(());
            }
        }
    }

    /// The line as this change sees it now, as of the claims tip the look
    /// that ended its last wait found (see [`Rider::wait`]), when there
    /// was one: each change in line of every farm looks again each time
    /// any claim or place moves, and a farm's changes read the same
    /// claims; a tip this farm has read already is not fetched again. (The
    /// branch is fetched after, never taken from that look: a look in the
    /// middle of a landing's push may list the claims it released and the
    /// branch from before it, and the change ahead would read as gone.)
    fn view(&self) -> Result<View, Halt> {
        let at = self.looked.take();
        Ok(self.queue.view_at(&self.entry, at.as_deref())?)
    }

    /// What a change does each time it looks at the line: beat its claim,
    /// and — in a line elsewhere, where a change is in line for as long as
    /// its claim is held — take back dead and stale claims now and then, as
    /// an idle agent does: when every agent of a farm waits in line behind
    /// a change whose farm died, no idle one is left to.
    fn tend(&self, beat: &mut Heartbeat<'_>) -> Result<(), Halt> {
        beat.check()?;
        if self.queue.elsewhere() && self.reaped.get().elapsed() >= REAP_EVERY {
            self.reaped.set(std::time::Instant::now());
            let _ = crate::run::turn::reap(self.turn.run, self.turn.name);
        }
        Ok(())
    }

    /// Whether the candidate must be built again on `on`: it is not the
    /// work `own` on top of `on`. But a change behind another keeps its
    /// build when the one ahead was built again with the same code (the
    /// board or a progress document moved under it): its code and its tests
    /// stand, and it is put on the branch itself once it is first — one
    /// build a landing, not one for every change in line.
    fn stale(&self, own: &str, on: &str, behind: bool) -> Result<bool, Halt> {
        let Some(b) = &self.built else {
            return Ok(true);
        };
        if b.from != own {
            return Ok(true);
        }
        if b.on == on {
            return Ok(false);
        }
        let turn = self.turn;
        Ok(!behind || gate::code_key(turn, &b.on)? != gate::code_key(turn, on)?)
    }

    /// Build the candidate: the work `own` (on top of `base`) put on top
    /// of `on`, and publish it.
    fn build(
        &mut self,
        own: &str,
        base: &str,
        merged: bool,
        on: &str,
        view: &View,
    ) -> Result<Build, Halt> {
        let turn = self.turn;
        let (run, clone) = (turn.run, turn.clone);
        clone.move_head(own)?;
        if view.ahead.is_none() && !clone.is_ancestor(base, on)? {
            // The branch is not where the work was brought onto (rewritten
            // by hand): catch up with it first.
            return Ok(Build::Conflict);
        }
        let clean = if merged {
            let clean = clone.merge(on, &run.hub.branch, turn.task.id.as_str())?;
            if !clean {
                clone.abort_merge()?;
            }
            clean
        } else {
            clone.rebase_onto(on, base)?
        };
        if !clean {
            clone.move_head(own)?;
            if view.ahead.is_none() {
                return Ok(Build::Conflict);
            }
            // Wait for the change ahead to land (or leave), then merge with
            // the branch as any conflict is.
            self.say("its work conflicts with the change ahead in line; waiting for it to land");
            self.built = None;
            self.blocked_now = true;
            self.publish(None, false)?;
            return Ok(Build::Blocked);
        }
        let head = clone.head()?;
        let key = gate::code_key(turn, &head)?;
        // A new candidate: judged anew, built on what it waited for.
        self.blocked_now = false;
        self.suspect = false;
        self.say(&format!(
            "built on {} ({} ahead in line)",
            &on[..on.len().min(10)],
            view.waiting_ahead
        ));
        let green = self.passed.as_ref().is_some_and(|(k, _)| *k == key);
        self.built = Some(Built {
            from: own.to_owned(),
            ahead: view.ahead.as_ref().map(|a| a.place),
            on: on.to_owned(),
            head: head.clone(),
            key,
        });
        // First in line and passed already (put on a branch that the board
        // or a progress document moved): the changes behind keep what they
        // were built on, of the same code, and this build is pushed to the
        // branch itself next — no candidate to publish. To be tested next:
        // said in line while its suite runs.
        if !green && !self.defers(view) {
            self.unpublished = Some(head);
        } else if !(green && view.ahead.is_none()) {
            self.publish(Some(&head), green)?;
        }
        Ok(Build::Built)
    }

    /// The results of `on`, the candidate of the change ahead, once known:
    /// `None` when it went away unlanded (red, or its farm gone). When the
    /// change ahead does not test alone (see [`Rider::defers`]), those of
    /// what it was built on, and so on down the line (said in
    /// `over_deferred`); a suspect change waits for its own verdict.
    fn results_of(
        &self,
        on: &str,
        beat: &mut Heartbeat<'_>,
    ) -> Result<Option<Result<Results, Verdict>>, Halt> {
        let turn = self.turn;
        let mut on = on.to_owned();
        let mut key = gate::code_key(turn, &on)?;
        let mut further = false;
        self.over_deferred.set(false);
        self.lost_under.set(false);
        loop {
            self.tend(beat)?;
            match self.ahead(&on, &key, further)? {
                Ahead::Testing => self.wait(beat)?,
                Ahead::Gone => {
                    self.lost_under.set(further);
                    return Ok(None);
                }
                Ahead::Covered(_) if self.suspect => self.wait(beat)?,
                Ahead::Covered(under) => {
                    self.over_deferred.set(true);
                    key = gate::code_key(turn, &under)?;
                    on = under;
                    further = true;
                }
                Ahead::Passed => {
                    let kept = match gate::kept_results(turn, &on)? {
                        Some(results) => Some(results),
                        None => self.shared_results(&on)?,
                    };
                    return Ok(Some(match kept {
                        Some(results) => Ok(results),
                        // Passed by a farm with other state, which shared
                        // no results: tested here.
                        None => gate::branch_results(turn, &on)?,
                    }));
                }
            }
        }
    }

    /// Where `on` (whose code is `key`), the candidate of the change ahead,
    /// is now. A change ahead built again with the same code (the board
    /// moved under it) is still the one built on. `further`: `on` is the
    /// candidate of a change further ahead, found by it.
    fn ahead(&self, on: &str, key: &str, further: bool) -> Result<Ahead, Halt> {
        let turn = self.turn;
        let same_code = |c: &str| c == on || gate::code_key(turn, c).is_ok_and(|k| k == key);
        let view = self.view()?;
        let place = self.built.as_ref().and_then(|b| b.ahead);
        let ahead = if further {
            let named = |a: &&InLine| a.record.candidate.as_deref() == Some(on);
            match view.before.iter().rev().find(named) {
                Some(a) => Some(a),
                // Or of its code: built again on a branch the board moved.
                // (Its new candidate read here: fetched from a hub
                // elsewhere, where the change behind it built on the old.)
                None => {
                    let mut coded = None;
                    for a in view.before.iter().rev() {
                        if let Some(c) = &a.record.candidate
                            && self.have(a)?
                            && same_code(c)
                        {
                            coded = Some(a);
                            break;
                        }
                    }
                    coded
                }
            }
        } else {
            view.ahead.as_ref().filter(|a| Some(a.place) == place)
        };
        // (Its candidate is read here: fetched from a hub elsewhere.)
        if let Some(a) = ahead
            && a.record.candidate.as_deref().is_some_and(|c| c != on)
            && !self.have(a)?
        {
            return Ok(Ahead::Testing);
        }
        Ok(match ahead.map(|a| &a.record) {
            // Being built again (its candidate is pushed before it is
            // named): wait for it.
            Some(Record {
                candidate: None, ..
            }) => Ahead::Testing,
            Some(r) if r.candidate.as_deref().is_some_and(same_code) => {
                match (r.green, r.defer, &r.on) {
                    (true, _, _) => Ahead::Passed,
                    (false, true, Some(under)) => Ahead::Covered(under.clone()),
                    _ => Ahead::Testing,
                }
            }
            Some(_) => Ahead::Gone,
            // It left the line: landed (as built, or built again on a
            // branch moved by the board or a progress document: the same
            // code), or not.
            None => {
                let tip = turn.clone.fetch_if_moved(&turn.run.hub)?;
                if turn.clone.is_ancestor(on, &tip)? || same_code(&tip) {
                    Ahead::Passed
                } else {
                    Ahead::Gone
                }
            }
        })
    }

    /// Whether the candidate of `ahead` is in the clone (fetched from a
    /// hub elsewhere when it is not: a local hub's objects are read where
    /// they are). False while the hub does not have it yet, or no longer.
    fn have(&self, ahead: &InLine) -> Result<bool, Halt> {
        let Some(commit) = &ahead.record.candidate else {
            return Ok(false);
        };
        if !self.queue.elsewhere() {
            return Ok(true);
        }
        let Some(refname) = ahead.record.refs.iter().find(|r| !r.starts_with(RESULTS)) else {
            return Ok(false);
        };
        Ok(self.turn.clone.fetch_candidate(refname, commit)?)
    }

    /// This change landed: its shared results stay on the hub, the
    /// branch's now (for a change built on it whose tests end after this
    /// one left the line), and when it leaves, those nobody reads any more
    /// go (see [`Rider::sweep`]): the code the branch had before,
    /// and any a killed farm left. A farm killed before leaves them to the
    /// next landing.
    pub(super) fn landed(&mut self) {
        self.landed = true;
        self.settle(true);
        // Passed first in line and landed at once: its results are shared
        // only now, the branch's (best effort: a change that finds none
        // tests the branch itself). Its code was named in line with its
        // candidate, and the branch has it: a sweep keeps them.
        if std::mem::take(&mut self.unsaid)
            && let Some((key, _)) = self.passed.clone()
        {
            let _ = self.share_results(&key);
        }
        self.entry.record.refs.retain(|r| !r.starts_with(RESULTS));
    }

    /// Say in line the candidate just built (see [`Rider::build`]), if
    /// it is not yet: done while its suite runs. Through a hub elsewhere
    /// that is a push of its candidate and a write of the line, a few
    /// round trips — ~0.4 s between a change's session and its suite in
    /// the `daemon` bench, each change of an agent in turn, when they
    /// were made before the suite started.
    pub(super) fn publish_built(&mut self) -> Result<(), Halt> {
        match self.unpublished.take() {
            // (Not one built over since, or given up.)
            Some(head) if self.built.as_ref().is_some_and(|b| b.head == head) => {
                self.publish(Some(&head), false)
            }
            _ => Ok(()),
        }
    }

    /// Say what this change is now: its candidate (pushed to the hub for
    /// the changes behind it to build on), and whether it passed.
    fn publish(&mut self, head: Option<&str>, green: bool) -> Result<(), Halt> {
        // (Any candidate said now is said instead of one built before.)
        self.unpublished = None;
        let record = self.entry.record.clone();
        // What it says of itself besides (see `defers`).
        let (defer, red) = (self.deferring && !green, self.suspect && !green);
        let blocked = head.is_none() && self.blocked_now;
        if head == record.candidate.as_deref() {
            return self.update(Record {
                green,
                defer: defer && head.is_some(),
                red: red && head.is_some(),
                blocked,
                ..record
            });
        }
        let old = record.refs.clone();
        let mut refs = old.clone();
        // Its code named with the candidate: its results, once pushed, are
        // known for in use (see `unread_results`).
        let key = head.and(self.built.as_ref()).map(|b| b.key.clone());
        let (kept, gone) = refs_rebuilt(&old, key.as_deref());
        let mut specs: Vec<String> = gone.iter().map(|r| format!(":{r}")).collect();
        let new = head.map(|head| {
            self.builds += 1;
            let name = format!(
                "refs/farm/queue/{}-{}-{}",
                self.entry.place, self.turn.name, self.builds
            );
            specs.push(format!("{head}:{name}"));
            refs.push(name.clone());
            name
        });
        // Named before it is pushed: a farm killed in between leaves a
        // ref the next reader of the line deletes. (A line elsewhere,
        // where each change of the line is a round trip, goes by the
        // place's prefix instead: see `queue::remote`.)
        if !self.queue.elsewhere() {
            self.update(Record {
                candidate: None,
                on: None,
                key: None,
                refs,
                green: false,
                defer: false,
                red: false,
                ..record.clone()
            })?;
        }
        if !specs.is_empty()
            && let Pushed::Rejected(why) = self.turn.clone.push_refs(&specs)?
        {
            // (A ref to delete that is gone already is no refusal.)
            let why: Vec<String> = why
                .iter()
                .filter(|(r, _)| new.as_ref() == Some(r))
                .map(|(r, w)| format!("{r}: {w}"))
                .collect();
            if !why.is_empty() {
                return Err(Halt::Failed(Error::failure(format!(
                    "the hub refused the merge queue's ref: {}",
                    why.join("; ")
                ))));
            }
        }
        let on = head.and(self.built.as_ref()).map(|b| b.on.clone());
        self.update(Record {
            candidate: head.map(str::to_owned),
            on,
            key,
            refs: kept.into_iter().chain(new).collect(),
            green,
            defer: defer && head.is_some(),
            red: red && head.is_some(),
            blocked,
            ..record
        })
    }

    /// Say in line what this change is now. A place taken away (in a line
    /// elsewhere, its file removed by a farm that took its claim for gone)
    /// ends nothing: a claim that is gone is said so, as anywhere else; a
    /// change whose claim is still held takes the last place again, and is
    /// built there anew. (A farm once ended with exit 1 here: a place
    /// named again, and removed under its newcomer by the farm that had
    /// held it.) [`REJOINS`] times at most: taken away once more, it is
    /// out of line for good, and the ride ends with the queue failing it
    /// (`given_up`, as a change it cannot test).
    fn update(&mut self, record: Record) -> Result<(), Halt> {
        if self.entry.update(record)? {
            return Ok(());
        }
        // Its file rewritten by the change ahead, which landed it (see
        // `landed_by_another`, which the ride reads next): not taken away.
        if self.queue.elsewhere() && self.marked.is_none_or(|t| t.elapsed() < LANDED_SHOWS) {
            let view = self.queue.view(&self.entry)?;
            if view.mine.is_some_and(|m| m.record.landed.is_some()) {
                self.marked.get_or_insert_with(std::time::Instant::now);
                return Ok(());
            }
        }
        let turn = self.turn;
        // A beat asks the hub. (One that cannot say leaves the change to
        // queue again: a claim gone is found at the next beat, and the
        // push is fenced all the same.)
        Heartbeat::new(turn.run, turn.held).now()?;
        // Its refs went with the place (deleted by its number's prefix,
        // or here).
        let refs = std::mem::take(&mut self.entry.record.refs);
        self.built = None;
        if self.rejoins >= REJOINS {
            self.drop_refs(&refs);
            let why = format!(
                "its place in line was taken away {} times while its claim was held (a change \
                 takes the last place again {REJOINS} times at most)",
                self.rejoins + 1
            );
            turn.run.say_tone(
                turn.name,
                crate::output::Style::Warn,
                &format!("`{}`: the merge queue gave it up: {why}", turn.task.id),
            );
            self.given_up = Some(why);
            return Ok(());
        }
        self.rejoins += 1;
        let record = Record {
            candidate: None,
            on: None,
            key: None,
            green: false,
            landed: None,
            defer: false,
            red: false,
            blocked: false,
            ..self.entry.record.clone()
        };
        let dead = self.queue.rejoin(&mut self.entry, record)?;
        self.drop_refs(&refs);
        self.drop_refs(&dead);
        turn.run.say(
            turn.name,
            &format!(
                "`{}`: its place in line was taken away; queued again at the end ({} of {REJOINS} times)",
                turn.task.id, self.rejoins
            ),
        );
        Ok(())
    }

    /// Delete hub refs of changes that left the line (best effort: one
    /// left behind holds only work that is in its owner's clone); false
    /// when the hub did not answer.
    fn drop_refs(&self, refs: &[String]) -> bool {
        if refs.is_empty() {
            return true;
        }
        // A pattern (a dead place's prefix, from a line elsewhere) names
        // the refs the hub has under it.
        let mut names = Vec::new();
        for r in refs {
            if r.ends_with('*') {
                names.extend(self.turn.clone.hub_refs(r).unwrap_or_default());
            } else {
                names.push(r.clone());
            }
        }
        let specs: Vec<String> = names.iter().map(|r| format!(":{r}")).collect();
        if specs.is_empty() {
            return true;
        }
        self.turn.clone.push_refs(&specs).is_ok()
    }

    fn say(&self, what: &str) {
        let turn = self.turn;
        turn.run
            .detail(turn.name, &format!("`{}`: {what}", turn.task.id));
    }
}

impl Drop for Rider<'_> {
    /// Leave the line: its candidate ref goes (the entry's file goes with
    /// the entry), and once it landed, the results nobody reads any more.
    fn drop(&mut self) {
        self.settle(false);
        if !self.queue.elsewhere() {
            self.turn.run.mates.leave(self.entry.place);
        }
        let refs = std::mem::take(&mut self.entry.record.refs);
        if self.landed && self.queue.elsewhere() {
            self.sweep(&refs);
        } else {
            self.drop_refs(&refs);
        }
        let turn = self.turn;
        turn.run.journal.record(
            turn.name,
            &Event::Unqueued {
                task: turn.task.id.as_str().into(),
                secs: self.joined.elapsed().as_secs_f64(),
                builds: self.builds,
                tested: self.tested,
            },
        );
    }
}
