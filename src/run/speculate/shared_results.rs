//! Test results shared through a hub elsewhere, under
//! `refs/farm/results/<code key>`: a farm on another machine keeps its
//! own state, and reads there what a candidate ahead passed with rather
//! than run the suite on it again.

use super::{RESULTS, Rider};
use crate::error::Error;
use crate::git::command::Pushed;
use crate::run::gate;
use crate::run::interrupt::Halt;
use crate::suite::results::{Results, Store};

impl<'a> Rider<'a> {
    /// Give the changes behind the results this candidate (whose code is
    /// `key`) passed with, on a hub elsewhere: a farm there keeps its own
    /// state, and without them would run the suite on this candidate again.
    pub(super) fn share_results(&mut self, key: &str) -> Result<(), Halt> {
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
    /// [`hub_refs`](super::hub_refs)). Best effort.
    pub(super) fn share_branch_results(&self, on: &str) -> Result<(), Halt> {
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
    pub(super) fn shared_results(&self, on: &str) -> Result<Option<Results>, Halt> {
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
}
