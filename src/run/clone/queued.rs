//! What the merge queue moves through a hub elsewhere for a clone: the
//! candidate of a change ahead in line (pushed by another farm, fetched by
//! its ref), and the test results a candidate passed with — a file in a
//! commit of its own, so that the changes behind judge their tests against
//! them instead of running the suite again on a machine that never had
//! them. (A hub of this machine needs neither: a clone reads its objects
//! where they are, and its farms share a state directory.)

use super::PrivateClone;
use crate::error::Error;

/// The file that holds a candidate's results in its results commit.
const RESULTS_FILE: &str = "results.json";

impl PrivateClone {
    /// Make sure `commit`, the candidate the hub keeps under `refname`, is
    /// in this clone: fetched when it is not. False when the hub no longer
    /// has it (its change left the line).
    pub fn fetch_candidate(&self, refname: &str, commit: &str) -> Result<bool, Error> {
        let here = |c: &str| {
            self.raw
                .check(["cat-file", "-e", &format!("{c}^{{commit}}")])
                .unwrap_or(false)
        };
        if here(commit) {
            return Ok(true);
        }
        let fetched = self.net("fetching a change ahead in the merge queue", || {
            self.raw
                .check(["fetch", "--quiet", "--no-tags", &self.hub_url, refname])
        })?;
        Ok(fetched && here(commit))
    }

    /// The hub's refs that `pattern` (a glob) names.
    pub fn hub_refs(&self, pattern: &str) -> Result<Vec<String>, Error> {
        let out = self.net("listing the merge queue's refs", || {
            self.raw
                .run(["ls-remote", "--refs", &self.hub_url, pattern])
        })?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(str::to_owned)
            .collect())
    }

    /// What the hub's `refs` point at now, as `git ls-remote` prints it:
    /// one process, and no objects fetched.
    pub fn hub_tips(&self, refs: &[String]) -> Result<String, Error> {
        let mut args = vec!["ls-remote".to_owned(), self.hub_url.clone()];
        args.extend(refs.iter().cloned());
        self.net("looking at the hub", || self.raw.run(&args))
    }

    /// A commit (of no parent, in no branch) holding `results`, for the
    /// hub to keep beside a candidate.
    pub fn results_commit(&self, results: &[u8]) -> Result<String, Error> {
        let trimmed = |out: Vec<u8>| String::from_utf8_lossy(&out).trim().to_owned();
        let blob = trimmed(
            self.raw
                .run_input(["hash-object", "-w", "--stdin"], &[], results)?,
        );
        let listing = format!("100644 blob {blob}\t{RESULTS_FILE}\0");
        let tree = trimmed(
            self.raw
                .run_input(["mktree", "-z"], &[], listing.as_bytes())?,
        );
        let env = [
            ("GIT_AUTHOR_NAME", "farm"),
            ("GIT_AUTHOR_EMAIL", "farm@localhost"),
            ("GIT_COMMITTER_NAME", "farm"),
            ("GIT_COMMITTER_EMAIL", "farm@localhost"),
        ];
        Ok(trimmed(self.raw.run_input(
            [
                "commit-tree",
                &tree,
                "-m",
                "farm: test results of a merge queue candidate",
            ],
            &env,
            b"",
        )?))
    }

    /// The results the hub keeps under `refname` (see
    /// [`PrivateClone::results_commit`]), fetched; `None` when it has none.
    pub fn fetch_results(&self, refname: &str) -> Result<Option<Vec<u8>>, Error> {
        let fetched = self.net("fetching the test results of a change ahead", || {
            self.raw
                .check(["fetch", "--quiet", "--no-tags", &self.hub_url, refname])
        })?;
        if !fetched {
            return Ok(None);
        }
        Ok(self
            .raw
            .run(["cat-file", "blob", &format!("FETCH_HEAD:{RESULTS_FILE}")])
            .ok()
            .map(String::into_bytes))
    }
}
