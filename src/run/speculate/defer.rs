//! Deferral: a change built again after the change it was built on left
//! the line unlanded leaves its tests to the changes behind it, which test
//! its code with theirs (see [`Rider::defers`]).

use super::{Ride, Rider};
use crate::run::interrupt::{Halt, Heartbeat};
use crate::run::queue::View;

impl<'a> Rider<'a> {
    /// One turn of a change that leaves its tests to the changes behind
    /// (see [`Rider::defers`]): said in line; first in line on the
    /// branch's commit, it lands with them once the last of them passed
    /// (see [`Rider::gather`]: `Some`); else it waits, or gives up waiting
    /// and tests alone.
    pub(super) fn deferred_turn(
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
        // (A candidate built while it deferred, said in line as one.)
        self.publish_built()?;
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
    pub(super) fn defers(&self, view: &View) -> bool {
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
}
