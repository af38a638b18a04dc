//! Catching up with the hub's branch: HEAD rebased onto it (in memory when
//! it can be, the files then left behind HEAD), or the branch merged in;
//! a merge that stops on conflicts is left for a merge session, one that
//! stops on anything else is an error.

use super::PrivateClone;
use crate::error::Error;

impl PrivateClone {
    /// Rebase HEAD onto `upstream`: in memory when it can be, else with
    /// `git rebase` (aborted on conflict). False on conflict.
    pub fn rebase(&self, upstream: &str) -> Result<bool, Error> {
        self.rebase_onto(upstream, upstream)
    }

    /// Rebase onto `onto` only the commits of HEAD that `upstream` lacks
    /// (the work on top of the branch's commit it was brought onto, put on
    /// top of another commit), as [`Self::rebase`] does.
    pub fn rebase_onto(&self, onto: &str, upstream: &str) -> Result<bool, Error> {
        let before = self.head()?;
        // HEAD may move without the files.
        self.files_stale()?;
        let in_memory = self.in_process("rebase", |w| w.rebase_onto(onto, upstream));
        if in_memory
            .flatten()
            .is_some_and(|after| after.to_string() != before)
        {
            self.behind.set(true);
            self.clean.set(false);
        }
        if !self.behind.get() {
            self.files_current()?;
        }
        if in_memory.flatten().is_some() {
            return Ok(true);
        }
        self.catch_up_worktree()?;
        if self
            .repo()?
            .check(["rebase", "--quiet", "--onto", onto, upstream])?
        {
            return Ok(true);
        }
        self.repo()?.check(["rebase", "--abort"])?;
        Ok(false)
    }

    /// Bring the work tree up to HEAD, which a rebase in memory left it
    /// behind: for work that commits what the files hold (a task moved to
    /// done on top of a change brought onto the branch).
    pub fn files_to_head(&self) -> Result<(), Error> {
        self.catch_up_worktree()
    }

    /// Bring the index and the work tree up to HEAD after an in-memory
    /// rebase or a test run, for the `git` commands that work in them.
    fn catch_up_worktree(&self) -> Result<(), Error> {
        if self.behind.get() {
            self.git(["reset", "--quiet", "--hard"])?;
            // Nothing untracked is the agent's here (its work is committed
            // before integration): what a test run left goes.
            self.git(["clean", "-ffdq"])?;
            self.behind.set(false);
            self.files_current()?;
        }
        Ok(())
    }

    /// Whether a merge is in progress (stopped on conflicts, or resolved
    /// but not committed).
    fn merging(&self) -> bool {
        self.dir().join(".git/MERGE_HEAD").exists()
    }

    /// Abort the merge in progress, if any: back to the commit before it.
    pub fn abort_merge(&self) -> Result<(), Error> {
        if self.merging() {
            self.check(["merge", "--abort"])?;
        }
        Ok(())
    }

    /// The files left conflicted (unmerged in the index).
    pub fn conflicts(&self) -> Result<Vec<String>, Error> {
        Ok(self.repo()?.conflicted()?)
    }

    /// Stage everything and commit the merge in progress, if any, with
    /// git's own message (what a merge session resolved).
    pub fn commit_merge(&self) -> Result<(), Error> {
        self.git(["add", "--all"])?;
        if self.merging() {
            self.git(["commit", "--quiet", "--no-verify", "--no-edit"])?;
        }
        Ok(())
    }

    /// Merge `upstream` into HEAD; false when it stopped on conflicts. One
    /// that stopped with no file in conflict (changes or untracked files in
    /// its way, a hook) is an error, in git's words: not a conflict to hand
    /// a merge session and count an attempt for.
    pub fn merge(&self, upstream: &str, branch: &str, id: &str) -> Result<bool, Error> {
        self.catch_up_worktree()?;
        let message = format!("farm: merge `{branch}` into the work on `{id}`");
        match self.repo()?.run(["merge", "--quiet", "--no-edit", "-m", &message, upstream]) {
            Ok(_) => Ok(true),
            Err(_) if !self.conflicts()?.is_empty() => Ok(false),
            // (Killed: the loop reopens the clone, whose recovery undoes it.)
            Err(e) if e.signal.is_some() => Err(e.into()),
            Err(e) => Err(Error::failure(format!(
                "cannot merge `{branch}` into the work on `{id}`: git stopped with no file in conflict: {}",
                e.said
            ))
            .hint(format!("git -C '{}' status", self.dir().display()))
            .caused_by(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::run::clone::fixture::*;

    /// After an in-memory rebase the work tree lags HEAD; when the next
    /// catch-up conflicts, `git rebase` and `git merge` must still start
    /// from HEAD itself, not from the files of the commit before.
    #[test]
    fn a_conflict_after_an_in_memory_rebase_merges_from_head() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub_git, hub, clone) = hub_and_clone(tmp.path());
        let hub_dir = hub_git.dir().to_path_buf();
        let d = clone.dir().to_path_buf();

        write(&d, "a.txt", "ONE\ntwo\nthree\n");
        assert!(clone.commit_all("mine").unwrap());
        write(&hub_dir, "a.txt", "one\ntwo\nTHREE\n");
        hub_git.commit_all("theirs, elsewhere").unwrap();
        clone.fetch_if_moved(&hub).unwrap();
        assert!(clone.rebase("origin/main").unwrap());
        assert!(clone.behind.get(), "rebased in memory");
        assert_eq!(
            clone.git(["show", "HEAD:a.txt"]).unwrap(),
            "ONE\ntwo\nTHREE"
        );

        write(&hub_dir, "a.txt", "uno\ntwo\nTHREE\n");
        hub_git.commit_all("theirs, the same line").unwrap();
        clone.fetch_if_moved(&hub).unwrap();
        assert!(!clone.rebase("origin/main").unwrap(), "a conflict");
        assert!(
            !clone.merge("origin/main", "main", "t").unwrap(),
            "a conflict"
        );
        assert_eq!(clone.raw.conflicted().unwrap(), ["a.txt"]);
        let text = std::fs::read_to_string(d.join("a.txt")).unwrap();
        assert!(
            text.contains("<<<<<<<") && text.contains("ONE") && text.contains("uno"),
            "{text}"
        );
        assert!(
            text.contains("THREE"),
            "merged from HEAD, not the older files: {text}"
        );
    }

    /// A merge that stops with no file in conflict — local changes in its
    /// way, here — is an error saying what git said: it was taken for a
    /// conflict in no file ("conflict with `main` in ;") and cost an attempt.
    #[test]
    fn a_merge_stopped_with_nothing_in_conflict_is_an_error_with_gits_words() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub_git, hub, clone) = hub_and_clone(tmp.path());
        let hub_dir = hub_git.dir().to_path_buf();
        let d = clone.dir().to_path_buf();
        write(&d, "b.txt", "mine\n");
        assert!(clone.commit_all("mine").unwrap());
        write(&hub_dir, "a.txt", "theirs\n");
        hub_git.commit_all("theirs").unwrap();
        clone.fetch_if_moved(&hub).unwrap();
        write(&d, "a.txt", "written after the commit\n");
        let e = clone
            .merge("origin/main", "main", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot merge `main` into the work on `t`"),
            "{e}"
        );
        assert!(e.contains("would be overwritten by merge"), "{e}");
    }
}
