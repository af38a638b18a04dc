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
//!   nobody can read any more (see [`unread_results`]): those a killed
//!   farm left (its change passed, then died; or it landed and was killed
//!   before it left the line) go with the next landing, not never. A
//!   change names its code in line before it pushes its results, so a ref
//!   in use is never taken for one left over; each goes by a
//!   compare-and-swap on the commit seen, so one pushed again meanwhile
//!   stays. Nothing can be lost by it: a results ref holds test results,
//!   no one's work, and one deleted in a race costs a suite run at most.

use crate::claims::git::REF as CLAIMS;
use crate::error::Error;
use crate::git::command::Pushed;
use crate::run::event::Event;
use crate::run::gate::{self, Passed, Verdict};
use crate::run::interrupt::{Halt, Heartbeat};
use crate::run::mates::Taken;
use crate::run::queue::{Entry, InLine, Queue, Record, View};
use crate::run::turn::Turn;
use crate::suite::report::Report;
use crate::suite::results::{Results, Store};

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

/// What lands with a change's push besides its own work (see
/// [`Rider::gather`]).
#[derive(Default)]
pub(super) struct Batch {
    /// When the change left its tests to those behind it: the task of the
    /// one whose tests covered its code.
    pub(super) tested_with: Option<String>,
    /// The changes behind, in line order.
    pub(super) with: Vec<Batched>,
}

/// A change behind landing with another's push (see [`Rider::gather`]).
pub(super) struct Batched {
    pub(super) task: String,
    pub(super) agent: String,
    /// Passing tests before it (on the change ahead's code) and with it;
    /// `None` when not known, or it left its tests to those behind it.
    pub(super) tests: Option<(usize, usize)>,
    /// Its results: the tests of the tree pushed when it is the last.
    pub(super) report: Option<Report>,
    /// When it left its tests to those behind it: the task of the change
    /// behind whose tests covered its code.
    pub(super) tested_with: Option<String>,
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

    /// One turn of a change that leaves its tests to the changes behind
    /// (see [`Rider::defers`]): said in line; first in line on the
    /// branch's commit, it lands with them once the last of them passed
    /// (see [`Rider::gather`]: `Some`); else it waits, or gives up waiting
    /// and tests alone.
    fn deferred_turn(
        &mut self,
        view: &View,
        tip: &str,
        beat: &mut Heartbeat<'_>,
    ) -> Result<Option<Ride>, Halt> {
        let Some(b) = &self.built else {
            return Ok(None);
        };
        let (first, at_tip, head) = (view.ahead.is_none(), b.on == tip, b.head.clone());
        let since = *self.deferred.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() > self.defer_patience() {
            // Nothing behind tested it in all that time (a change behind
            // stuck on something this one cannot see): it tests alone
            // rather than wait for ever.
            self.alone = true;
            self.say("the changes behind it have not tested it in time; testing alone");
            return Ok(None);
        }
        if !self.deferring {
            self.deferring = true;
            self.say(
                "built again without the change that left; tested with the change(s) behind it",
            );
            self.publish(Some(&head), false)?;
        }
        if first && at_tip && view.behind.iter().any(|c| c.record.green) {
            self.with = self.gather(&view.behind)?;
            if !self.with.is_empty() {
                self.entry.leave_on_publish(&self.with)?;
                return Ok(Some(Ride::Ready {
                    at: tip.to_owned(),
                    passed: None,
                }));
            }
            // Nothing that passed behind can land with it (its claim not
            // to be fenced now, its commits not put on top): it tests
            // alone, rather than wait.
            self.alone = true;
        }
        self.wait(beat)?;
        Ok(None)
    }

    /// Whether this change leaves its tests to the change just behind it:
    /// it was built again after the change it was built on left the line
    /// unlanded, and the one behind (which builds on it) is not red and
    /// does not wait for it (its work in conflict).
    ///
    /// Why: every change behind a red one was tested on top of it, and
    /// each must be tested again without it. One by one, that is a suite
    /// run a change behind (7–8 beyond the 12 landings in the `red`
    /// bench); as one batch — the last of them tests the code of all, and
    /// the first lands them all in one push (see [`Rider::gather`]) — it
    /// is one. So a red change costs two runs more than a green one: its
    /// own again (a flaky test evicts nobody) and the batch's. Red again,
    /// the batch is searched from its end: the change just ahead of the
    /// red one tests alone, and so on (a second red change in a batch
    /// costs a run for each change between them); each change's fate is
    /// its own verdict, judged on the code of those ahead of it.
    fn defers(&self, view: &View) -> bool {
        if self.built.is_none() || !self.reformed || self.suspect || self.alone {
            return false;
        }
        // (Built on this one's candidate, or on one before it, which it
        // builds on again once it sees this one.) On a hub of this
        // machine, one this farm can land with it (see `mates`).
        view.behind.first().is_some_and(|next| {
            let r = &next.record;
            !r.red
                && !r.blocked
                && r.landed.is_none()
                && (self.queue.elsewhere() || self.turn.run.mates.has(next.place))
        })
    }

    /// How long a deferred change waits for the changes behind to test its
    /// code before it tests alone: a few runs of the suite as this run saw
    /// it take, and a minute at least (a batch is built one change after
    /// another, each build on the one ahead, before its last tests).
    fn defer_patience(&self) -> std::time::Duration {
        let suite = self
            .turn
            .run
            .suite_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        std::time::Duration::from_millis(suite.saturating_mul(4))
            .max(std::time::Duration::from_secs(60))
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
            let verdict = gate::check(turn, &on)?;
            if !known && !matches!(verdict, Verdict::Pass(_)) {
                self.share_branch_results(&on)?;
            }
            Some(verdict)
        } else {
            let mut results = || self.results_of(&on, beat);
            gate::check_ahead(turn, &on, &mut results)?
        };
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

    /// The changes just behind this one that land with it, in one push: in
    /// order (on a hub of this machine, only this farm's: see
    /// [`mates`](super::mates)), each passed — or deferred to the changes
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
    /// it lands on (see [`Entry::leave_on_publish`]), and each one's farm,
    /// which finds its file saying it landed, releases its claim.
    fn gather(&mut self, behind: &[InLine]) -> Result<Vec<(InLine, String)>, Halt> {
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
    /// [`mates`](super::mates)): `None` when it is not this farm's (or not
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
    fn settle(&mut self, landed: bool) {
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
    pub(super) fn landing_hold(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
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
    pub(super) fn landing(&self) -> Batch {
        if self.with.is_empty() {
            return Batch::default();
        }
        // Passing before the first: with this one's code, or — when it
        // left its tests to those behind — with the branch's.
        let lead = self
            .built
            .as_ref()
            .map(|b| if self.deferring { &b.on } else { &b.head })
            .and_then(|commit| self.results_at(commit));
        let mut before = lead.map(|r| r.passed().len());
        let with = self
            .with
            .iter()
            .enumerate()
            .map(|(i, (change, head))| {
                // A deferred change has no tests of its own: the first
                // behind it that passed tested its code with theirs.
                let green = change.record.green;
                let results = if green { self.results_at(head) } else { None };
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
    fn results_at(&self, commit: &str) -> Option<Results> {
        match gate::kept_results(self.turn, commit) {
            Ok(Some(results)) => Some(results),
            _ => self.shared_results(commit).ok().flatten(),
        }
    }

    /// The push did not land: HEAD back on this change's own candidate,
    /// which the next round catches up from (the changes behind are
    /// gathered again when it is ready).
    pub(super) fn unbatch(&mut self) -> Result<(), Halt> {
        self.settle(false);
        if std::mem::take(&mut self.with).is_empty() {
            return Ok(());
        }
        if let Some(b) = &self.built {
            self.turn.clone.move_head(&b.head)?;
        }
        Ok(())
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
        // branch itself next — no candidate to publish.
        if !(green && view.ahead.is_none()) {
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

    /// Give the changes behind the results this candidate (whose code is
    /// `key`) passed with, on a hub elsewhere: a farm there keeps its own
    /// state, and without them would run the suite on this candidate again.
    fn share_results(&mut self, key: &str) -> Result<(), Halt> {
        if !self.queue.elsewhere() {
            return Ok(());
        }
        let name = format!("{RESULTS}{key}");
        if self.entry.record.refs.contains(&name) {
            return Ok(());
        }
        // Best effort: without them, the changes behind test this one (and
        // a ref of that name is another change's of the same code: its
        // results stand for these). Said in the line with the verdict
        // (`publish`); its key was named with the candidate, before. A farm
        // killed in line leaves the ref (a commit of results, nothing of
        // anyone's work) until a landing finds nobody reads it.
        if self.push_results(key)? {
            self.entry.record.refs.push(name);
        }
        Ok(())
    }

    /// Push the results this farm keeps for code `key` to the hub under
    /// `refs/farm/results/<key>`: whether the hub took them (false too
    /// when none are kept).
    fn push_results(&self, key: &str) -> Result<bool, Halt> {
        let turn = self.turn;
        let Some(results) = Store::new(&turn.run.state).get(key) else {
            return Ok(false);
        };
        let json = serde_json::to_vec(&results)
            .map_err(|e| Error::failure(format!("cannot write test results: {e}")))?;
        let commit = turn.clone.results_commit(&json)?;
        let pushed = turn.clone.push_refs(&[format!("{commit}:{RESULTS}{key}")]);
        Ok(matches!(pushed, Ok(Pushed::Ok)))
    }

    /// In a line elsewhere, the branch's results (at `on`) this farm ran
    /// as a baseline for a change first in line that did not pass: the
    /// changes behind, built again without it — maybe on another machine —
    /// are judged against the branch, and read them rather than run the
    /// suite on the branch again (one run more in four of five rounds of
    /// a test with the red change and the batch on two machines). A
    /// change that passes needs not: its own results are the branch's
    /// once it landed. Not named in line: they are the branch's, and a
    /// landing's sweep deletes them once the branch moved on (see
    /// [`unread_results`]). Best effort.
    fn share_branch_results(&self, on: &str) -> Result<(), Halt> {
        if !self.queue.elsewhere() {
            return Ok(());
        }
        let key = gate::code_key(self.turn, on)?;
        self.push_results(&key)?;
        Ok(())
    }

    /// The results shared for the code of `on` (see
    /// [`Rider::share_results`]), kept here once read: those of the change
    /// ahead, in line or landed (it leaves them on the hub: the branch's
    /// results then), found by the code key. Before, they were found only
    /// while it was in line, and a change whose tests ended after the one
    /// ahead landed tested the branch itself (2 or 3 suite runs of 15 in
    /// the `daemon` bench).
    fn shared_results(&self, on: &str) -> Result<Option<Results>, Halt> {
        if !self.queue.elsewhere() {
            return Ok(None);
        }
        let turn = self.turn;
        let key = gate::code_key(turn, on)?;
        let Some(json) = turn.clone.fetch_results(&format!("{RESULTS}{key}"))? else {
            return Ok(None);
        };
        let Ok(results) = serde_json::from_slice::<Results>(&json) else {
            return Ok(None);
        };
        Store::new(&turn.run.state).put(&key, &results);
        Ok(Some(results))
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

    /// Once landed in a line elsewhere, delete in one push what nobody
    /// can read on the hub any more: this change's candidate refs
    /// (`own`), those of the places no longer in line (see
    /// [`sweep_candidates`]) and the results refs nobody reads (see
    /// [`unread_results`]) — one listing, one reading of the line, one of
    /// the branch. Best effort: what is left goes with a later landing. (It
    /// was seven round trips to the hub, ~0.35 s in the `daemon` bench, on
    /// the way from each landing to the agent's next claim and, after the
    /// last one, to the end of the run.)
    fn sweep(&self, own: &[String]) {
        let turn = self.turn;
        let clone = turn.clone;
        // Read in this order. A candidate ref listed is of a place in line
        // since before it was pushed: one the line read next has not is of
        // a change that left. A results ref listed was pushed by a change
        // that had named its code in line before; so that change is in the
        // line read next, or it left it before: landed (the branch, read
        // last, has its code, or moved on from it) or not (nobody builds on
        // its candidate).
        let Ok(out) = clone.hub_tips(&[format!("{CANDIDATES}*"), format!("{RESULTS}*")]) else {
            return;
        };
        let (candidates, results): (Vec<_>, Vec<_>) = refs_listed(&out)
            .map(|(name, oid)| (name.to_owned(), oid.to_owned()))
            .partition(|(name, _)| name.starts_with(CANDIDATES));
        if candidates.is_empty() && results.is_empty() {
            return;
        }
        let Ok(line) = self.queue.list() else { return };
        // Its own, also while its place is still in line (landed by the
        // change ahead, its file goes when it leaves).
        let (mine, listed): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|(name, _)| own.contains(name));
        let left: Vec<(String, String)> = left_line(&listed, &line).into_iter().cloned().collect();
        let mut unread = Vec::new();
        if !results.is_empty()
            && let Ok(tip) = clone.fetch_if_moved(&turn.run.hub)
            && let Ok(branch) = gate::code_key(turn, &tip)
        {
            unread = unread_results(&results, &line, &branch)
                .into_iter()
                .cloned()
                .collect();
        }
        let gone: Vec<(String, String)> = [&mine, &left, &unread]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        if gone.is_empty() {
            return;
        }
        // Each deleted only while it is the commit listed: one pushed again
        // meanwhile (a results ref, by a change of that code that named it
        // after the line was read) stays.
        let kept: Vec<String> = match clone.delete_refs_leased(&gone) {
            Ok(Pushed::Ok) => Vec::new(),
            Ok(Pushed::Rejected(why)) => why.into_iter().map(|(r, _)| r).collect(),
            Err(_) => return,
        };
        let deleted =
            |refs: &[(String, String)]| refs.iter().filter(|(r, _)| !kept.contains(r)).count();
        let left = deleted(&left);
        if left > 0 {
            self.say(&format!(
                "deleted {left} candidate ref(s) of changes no longer in line"
            ));
        }
        let unread = deleted(&unread);
        if unread > 0 {
            self.say(&format!(
                "deleted {unread} results ref(s) that nobody reads any more"
            ));
        }
    }

    /// Say what this change is now: its candidate (pushed to the hub for
    /// the changes behind it to build on), and whether it passed.
    fn publish(&mut self, head: Option<&str>, green: bool) -> Result<(), Halt> {
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

/// The refs a `git ls-remote` listed, as (name, commit).
fn refs_listed(out: &str) -> impl Iterator<Item = (&str, &str)> {
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(oid, name)| (name.trim(), oid.trim()))
}

/// A change's hub refs `old` as it publishes a new candidate whose code is
/// `key`: those it keeps (the results it shared for that code: a
/// candidate built again with the same code, the board or a progress
/// document moved under it, passed with them) and those that go.
fn refs_rebuilt(old: &[String], key: Option<&str>) -> (Vec<String>, Vec<String>) {
    let results = key.map(|k| format!("{RESULTS}{k}"));
    old.iter()
        .cloned()
        .partition(|r| results.as_ref() == Some(r))
}

/// Delete the candidate refs on the hub (`refs/farm/queue/<place>-…`) of
/// places no longer in the line elsewhere `queue`: a change's place is in
/// line from before its first candidate is pushed until it leaves, so one
/// listed whose place the line read after has not is of a change that left
/// — a farm killed after its landing, whose place went in the push that
/// landed it, or a change landed by the one ahead whose farm died before
/// it left. Each by a compare-and-swap on the commit listed; best effort
/// (a ref left is deleted by a later sweep). How many went.
pub(super) fn sweep_candidates(
    clone: &crate::run::clone::PrivateClone,
    queue: &Queue<'_>,
) -> usize {
    let Ok(out) = clone.hub_tips(&[format!("{CANDIDATES}*")]) else {
        return 0;
    };
    let listed: Vec<(String, String)> = refs_listed(&out)
        .map(|(name, oid)| (name.to_owned(), oid.to_owned()))
        .collect();
    if listed.is_empty() {
        return 0;
    }
    let Ok(line) = queue.live() else { return 0 };
    let stale: Vec<(String, String)> = left_line(&listed, &line).into_iter().cloned().collect();
    if stale.is_empty() {
        return 0;
    }
    match clone.delete_refs_leased(&stale) {
        Ok(Pushed::Ok) => stale.len(),
        Ok(Pushed::Rejected(why)) => stale.len().saturating_sub(why.len()),
        Err(_) => 0,
    }
}

/// [`sweep_candidates`] at the end of an agent's loop: a farm run again
/// after one was killed may land nothing more (the dead one's last push
/// landed its changes), and its dead predecessor's places and candidates
/// would wait for the next line. (On a hub of this machine a dead place
/// goes as soon as the line is read: it is read here, candidates or not.)
pub(super) fn sweep_left(
    run: &crate::run::state::Run,
    clone: &crate::run::clone::PrivateClone,
) -> usize {
    if run.config.gate.is_none() {
        return 0;
    }
    let queue = match (&run.hub.local, run.store.line()) {
        (Some(local), _) => Queue::local(&local.dir.join(crate::names::CLAIMS_DIR)),
        (None, Some(line)) => Queue::remote(line),
        (None, None) => return 0,
    };
    if !queue.elsewhere() {
        let _ = queue.live();
    }
    sweep_candidates(clone, &queue)
}

/// Where a change's candidates are pushed, by its place (see
/// [`queue`](super::queue)).
const CANDIDATES: &str = "refs/farm/queue/";

/// The candidate refs listed (name, commit) whose place is not in `line`.
fn left_line<'l>(listed: &'l [(String, String)], line: &[InLine]) -> Vec<&'l (String, String)> {
    let places: std::collections::BTreeSet<u64> = line.iter().map(|c| c.place).collect();
    listed
        .iter()
        .filter(|(name, _)| {
            name.strip_prefix(CANDIDATES)
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u64>().ok())
                .is_some_and(|place| !places.contains(&place))
        })
        .collect()
}

/// Of the results refs `listed` on a hub (name, commit), those nobody can
/// read any more, given the live changes in `line` read after they were
/// listed and the code key `branch` of the branch read after that: not the
/// branch's (a change built on it reads them), not one a change in line
/// names in its refs or by its code (it may push them still, or the
/// changes behind read them). A line that has a change of an older farm
/// (a candidate, and no key: it names its results only after it pushed
/// them) leaves them all for a later landing to judge.
fn unread_results<'l>(
    listed: &'l [(String, String)],
    line: &[InLine],
    branch: &str,
) -> Vec<&'l (String, String)> {
    if line
        .iter()
        .any(|c| c.record.candidate.is_some() && c.record.key.is_none())
    {
        return Vec::new();
    }
    let read: std::collections::BTreeSet<String> = line
        .iter()
        .flat_map(|c| {
            let named = c.record.refs.iter().filter(|r| r.starts_with(RESULTS));
            let key = c.record.key.iter().map(|k| format!("{RESULTS}{k}"));
            named.cloned().chain(key)
        })
        .chain([format!("{RESULTS}{branch}")])
        .collect();
    listed
        .iter()
        .filter(|(name, _)| name.starts_with(RESULTS) && !read.contains(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(place: u64, candidate: Option<&str>, key: Option<&str>, refs: &[&str]) -> InLine {
        InLine {
            place,
            record: Record {
                task: format!("t{place}"),
                candidate: candidate.map(str::to_owned),
                key: key.map(str::to_owned),
                refs: refs.iter().map(|r| (*r).to_owned()).collect(),
                ..Record::default()
            },
            text: Vec::new(),
        }
    }

    #[test]
    fn candidate_refs_of_places_no_longer_in_line_are_the_ones_left() {
        let listed: Vec<(String, String)> = [
            "refs/farm/queue/17-a-1",
            "refs/farm/queue/17-a-2",
            "refs/farm/queue/18-b-1",
            "refs/farm/queue/not-a-place",
        ]
        .iter()
        .map(|n| ((*n).to_owned(), "c".to_owned()))
        .collect();
        let line = [change(18, Some("x"), Some("k"), &[])];
        let left: Vec<&str> = left_line(&listed, &line)
            .into_iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(left, ["refs/farm/queue/17-a-1", "refs/farm/queue/17-a-2"]);
        assert!(left_line(&listed[2..3], &line).is_empty());
    }

    fn listed(keys: &[&str]) -> Vec<(String, String)> {
        keys.iter()
            .map(|k| (format!("{RESULTS}{k}"), format!("oid-{k}")))
            .collect()
    }

    fn unread(listed: &[(String, String)], line: &[InLine], branch: &str) -> Vec<String> {
        unread_results(listed, line, branch)
            .into_iter()
            .map(|(name, _)| name.trim_start_matches(RESULTS).to_owned())
            .collect()
    }

    /// Regression: a change built again with the same code (behind a
    /// change ahead moved by a progress document) deleted the results it
    /// had shared for that code with its old candidate, and did not share
    /// them again: the changes behind found none, and ran the suite on it
    /// again.
    #[test]
    fn a_candidate_built_again_with_the_same_code_keeps_its_results() {
        let old = ["refs/farm/queue/7-a-1".to_owned(), format!("{RESULTS}k1")];
        let (kept, gone) = refs_rebuilt(&old, Some("k1"));
        assert_eq!(kept, [format!("{RESULTS}k1")]);
        assert_eq!(gone, ["refs/farm/queue/7-a-1"]);
        // Other code: its results are not these.
        let (kept, gone) = refs_rebuilt(&old, Some("k2"));
        assert!(kept.is_empty());
        assert_eq!(gone, old);
        // No candidate (its work conflicts with the one ahead): all go.
        assert_eq!(refs_rebuilt(&old, None).1, old);
    }

    #[test]
    fn results_nobody_reads_go_and_those_in_use_stay() {
        let hub = listed(&["branch", "named", "keyed", "dead", "before"]);
        let line = [
            change(1, Some("c1"), Some("keyed"), &["refs/farm/queue/1-a-1"]),
            change(2, None, None, &[&format!("{RESULTS}named")]),
        ];
        assert_eq!(unread(&hub, &line, "branch"), ["dead", "before"]);
        // An empty line: only the branch's stay.
        assert_eq!(
            unread(&hub, &[], "branch"),
            ["named", "keyed", "dead", "before"]
        );
    }

    #[test]
    fn a_line_with_a_change_of_an_older_farm_keeps_them_all() {
        let hub = listed(&["branch", "dead"]);
        let older = [change(1, Some("c1"), None, &[])];
        assert!(unread(&hub, &older, "branch").is_empty());
        // One not built yet has pushed no results.
        let building = [change(1, None, None, &[])];
        assert_eq!(unread(&hub, &building, "branch"), ["dead"]);
    }
}
