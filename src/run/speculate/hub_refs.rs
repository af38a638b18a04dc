//! The merge queue's refs on a hub elsewhere: a change's candidates
//! (`refs/farm/queue/<place>-…`) and the results it shared
//! (`refs/farm/results/<code key>`) — which a change keeps as it builds
//! again, and the sweep that deletes those nobody can read any more.

use super::{RESULTS, Rider};
use crate::git::command::Pushed;
use crate::run::gate;
use crate::run::queue::{InLine, Queue};

/// The refs a `git ls-remote` listed, as (name, commit).
pub(super) fn refs_listed(out: &str) -> impl Iterator<Item = (&str, &str)> {
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(oid, name)| (name.trim(), oid.trim()))
}

/// A change's hub refs `old` as it publishes a new candidate whose code is
/// `key`: those it keeps (the results it shared for that code: a
/// candidate built again with the same code, the board or a progress
/// document moved under it, passed with them) and those that go.
pub(super) fn refs_rebuilt(old: &[String], key: Option<&str>) -> (Vec<String>, Vec<String>) {
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
pub(in crate::run) fn sweep_left(
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
/// [`queue`](crate::run::queue)).
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

impl Rider<'_> {
    /// Once landed in a line elsewhere, delete in one push what nobody
    /// can read on the hub any more: this change's candidate refs
    /// (`own`), those of the places no longer in line (see
    /// [`sweep_candidates`]) and the results refs nobody reads (see
    /// [`unread_results`]) — one listing, one reading of the line, one of
    /// the branch. Best effort: what is left goes with a later landing. (It
    /// was seven round trips to the hub, ~0.35 s in the `daemon` bench, on
    /// the way from each landing to the agent's next claim and, after the
    /// last one, to the end of the run.)
    pub(super) fn sweep(&self, own: &[String]) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::queue::Record;

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
