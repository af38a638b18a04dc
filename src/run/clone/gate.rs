//! What the test gate asks of the clone: its own files put at HEAD for the
//! tests (an in-memory rebase moved HEAD without them) and taken back as
//! stale after; or a work tree of another commit, apart from the clone's.

use std::path::Path;

use super::PrivateClone;
use crate::error::Error;
use crate::git::workdir::Workdir;

impl PrivateClone {
    /// Put the files at HEAD for the test gate, which runs on the very tree
    /// about to be pushed (an in-memory rebase moved HEAD without them): by
    /// what changed since the index's tree, in-process, when that is known.
    /// Until the next sync the files are not the agent's work: the tests
    /// write what they write, and a farm killed meanwhile puts them back at
    /// HEAD rather than take them for work to rescue (the commits are
    /// rescued as any unpushed commits are).
    pub fn files_for_tests(&self) -> Result<(), Error> {
        self.files_stale()?;
        if self.behind.get() || !self.tracked.get() {
            let head = self.head()?;
            let from = self
                .tracked
                .get()
                .then(|| self.in_process("reading the index's tree", Workdir::index_tree))
                .flatten();
            let moved = from.is_some_and(|from| {
                self.in_process("checkout by what changed", |w| w.checkout_from(from, &head))
                    .is_some()
            });
            if !moved {
                self.git(["read-tree", "--reset", "-u", "HEAD"])?;
            }
        }
        self.behind.set(false);
        Ok(())
    }

    /// The tests ran: whatever they wrote is put right lazily — the files
    /// count as behind HEAD (a git command that needs them resets them
    /// first; the next sync does in any case), the mark of stale files
    /// stays.
    pub fn after_tests(&self) {
        self.behind.set(true);
        self.clean.set(false);
        self.tracked.set(false);
        self.swept.set(false);
    }

    /// A work tree of `commit` at `dir`, apart from the clone's own (the
    /// gate tests the branch there when it has no result for it yet): made
    /// afresh each time, so that what a killed run left counts for nothing.
    pub fn tree_at(&self, dir: &Path, commit: &str) -> Result<(), Error> {
        self.drop_tree(dir);
        let path = dir.to_string_lossy();
        self.git([
            "worktree", "add", "--quiet", "--detach", "--force", &path, commit,
        ])?;
        Ok(())
    }

    /// Remove a work tree [`Self::tree_at`] made (best effort).
    pub fn drop_tree(&self, dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
        let _ = self.git(["worktree", "prune"]);
    }
}
