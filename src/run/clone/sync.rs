//! Syncing the clone with the hub: fetching its branch (only setting the
//! ref when the hub is on this machine), and resetting the clone to it
//! before every session — by what changed between the two trees when that
//! is known, and with the files marked stale meanwhile (see
//! [`STALE_FILES`]), so that a farm killed mid-checkout does not take the
//! mix left for the agent's work.

use super::{PrivateClone, STALE_FILES, WORK_BRANCH};
use crate::error::Error;
use crate::git::hub::Hub;
use crate::git::workdir::Workdir;

impl PrivateClone {
    /// Fetch the hub's `branch` into `origin/<branch>`, from the hub's URL.
    /// (Forced, as the refspec `git clone` writes is: the remote-tracking
    /// ref follows the hub, wherever it went.)
    pub fn fetch(&self, branch: &str) -> Result<(), Error> {
        let spec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
        self.net("fetching", || {
            self.raw
                .run(["fetch", "--quiet", "--no-tags", &self.hub_url, &spec])
        })?;
        Ok(())
    }

    /// `origin/<branch>` as this clone last fetched it.
    fn origin(&self, branch: &str) -> Option<String> {
        crate::git::command::read_ref(
            &self.dir().join(".git"),
            &format!("refs/remotes/origin/{branch}"),
        )
    }

    /// Fetch the hub's branch unless `origin/<branch>` is already its commit
    /// (a local hub's refs are read directly: most fetches are skipped, and
    /// the others need no git process).
    /// Returns the commit `origin/<branch>` now names.
    pub fn fetch_if_moved(&self, hub: &Hub) -> Result<String, Error> {
        let branch = &hub.branch;
        let now = hub.branch_rev();
        if let Some(sha) = &now
            && self.origin(branch).as_ref() == Some(sha)
        {
            return Ok(sha.clone());
        }
        // The clone reads a local hub's objects where they are (see
        // `borrow_objects` in open.rs): fetching is then only setting the ref, and
        // a git process saved — two, with the hub's upload-pack.
        let remote_ref = format!("refs/remotes/origin/{branch}");
        if let (Some(sha), Some(_)) = (&now, &hub.local)
            && self
                .in_process("setting `origin/` to the hub's branch", |w| {
                    w.set_ref(&remote_ref, sha)
                })
                .is_some()
        {
            return Ok(sha.clone());
        }
        self.fetch(branch)?;
        match self.origin(branch) {
            Some(sha) => Ok(sha),
            None => self.git(["rev-parse", &format!("origin/{branch}")]),
        }
    }

    /// Reset to the hub's branch: a clean slate for every session.
    /// Returns the commit it reset to.
    pub fn sync(&self, hub: &Hub) -> Result<String, Error> {
        // Read before farm's own commands below, which clear it.
        let swept = self.swept.get();
        self.files_stale()?;
        for state in ["rebase-merge", "rebase-apply"] {
            if self.dir().join(".git").join(state).exists() {
                self.repo()?
                    .check(["rebase", "--abort"])
                    .map_err(Error::from)?;
            }
        }
        // read-tree (below) leaves a merge's state alone, where checkout
        // dropped it: a merge left half-way (an error mid-integration) must
        // not make the next session's first commit a merge.
        if self.dir().join(".git/MERGE_HEAD").exists() {
            self.repo()?.check(["merge", "--abort"])?;
        }
        let target = self.fetch_if_moved(hub)?;
        let still = self.clean.get() && !self.behind.get() && self.head()? == target;
        if !still {
            self.reset_to(&target)?;
        }
        self.behind.set(false);
        if !(still && swept) {
            match self.work.as_ref().map(Workdir::clean) {
                Some(Ok(())) => {}
                _ => drop(self.git(["clean", "-ffdxq"])?),
            }
        }
        self.clean.set(true);
        self.tracked.set(true);
        self.swept.set(true);
        self.files_current()?;
        Ok(target)
    }

    /// Reset to the tip of the hub's branch `rescue` (a rescue branch, which
    /// a landing by hand starts from), fetched into `origin/<rescue>`; the
    /// commit where it left the hub's branch (their merge base), the commit
    /// its work started from.
    pub fn start_from(&self, hub: &Hub, rescue: &str) -> Result<String, Error> {
        let upstream = self.sync(hub)?;
        self.fetch(rescue)?;
        let tip = self.git(["rev-parse", &format!("refs/remotes/origin/{rescue}")])?;
        let base = self.git(["merge-base", &tip, &upstream]).map_err(|e| {
            Error::failure(format!(
                "`{rescue}` shares no history with `{}`: {e}",
                hub.branch
            ))
        })?;
        self.files_stale()?;
        self.reset_to(&tip)?;
        self.behind.set(false);
        self.clean.set(true);
        self.tracked.set(true);
        self.files_current()?;
        Ok(base)
    }

    /// Mark the files as not the agent's work, until [`Self::files_current`]
    /// (see [`STALE_FILES`]).
    pub(super) fn files_stale(&self) -> Result<(), Error> {
        let path = self.dir().join(STALE_FILES);
        std::fs::write(&path, "stale\n")
            .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", path.display())))
    }

    /// The files equal HEAD again (see [`STALE_FILES`]).
    pub(super) fn files_current(&self) -> Result<(), Error> {
        let path = self.dir().join(STALE_FILES);
        let emptied = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path);
        match emptied {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::failure(format!(
                "cannot empty `{}`: {e}",
                path.display()
            ))),
            _ => Ok(()),
        }
    }

    /// Put branch `farm-work` at commit `target` and check it out, index and
    /// work tree, as `git checkout --force -B` does. Once on that branch,
    /// the ref is moved in-process and `git read-tree` does the files: the
    /// checkout also rewrote the config and made and removed lock files,
    /// each an inode freed (see workdir.rs on why that costs here). (git2's
    /// own `reset --hard` instead measured no faster, and read-tree is git's
    /// own semantics.)
    fn reset_to(&self, target: &str) -> Result<(), Error> {
        let git_dir = self.dir().join(".git");
        let on_branch = std::fs::read_to_string(git_dir.join("HEAD"))
            .is_ok_and(|h| h.trim() == format!("ref: refs/heads/{WORK_BRANCH}"));
        if on_branch
            && let Some(work) = &self.work
            && work
                .set_ref(&format!("refs/heads/{WORK_BRANCH}"), target)
                .is_ok()
        {
            crate::git::workdir::stop::here("sync: the ref moved");
            let from = self
                .tracked
                .get()
                .then(|| self.in_process("reading the index's tree", Workdir::index_tree))
                .flatten();
            if let Some(from) = from
                && self
                    .in_process("checkout by what changed", |w| {
                        w.checkout_from(from, target)
                    })
                    .is_some()
            {
                return Ok(());
            }
            self.git(["read-tree", "--reset", "-u", target])?;
            return Ok(());
        }
        self.git([
            "checkout",
            "--quiet",
            "--force",
            "--no-track",
            "-B",
            WORK_BRANCH,
            target,
        ])?;
        Ok(())
    }

    /// A session is about to change the work tree.
    pub fn dirty(&self) {
        self.clean.set(false);
        self.tracked.set(false);
        self.swept.set(false);
    }

    /// HEAD was pushed: unless an in-memory rebase left the work tree behind
    /// it, the next sync to that same commit needs no checkout.
    pub fn pushed(&self) {
        self.clean.set(!self.behind.get());
    }
}

#[cfg(test)]
mod tests {
    use crate::run::clone::fixture::*;

    /// A sync after an in-memory rebase (index and work tree behind HEAD)
    /// leaves exactly the branch's files: none of the older commit's.
    #[test]
    fn a_sync_from_behind_leaves_exactly_the_branch() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub_git, hub, clone) = hub_and_clone(tmp.path());
        let (h, d) = (hub_git.dir().to_path_buf(), clone.dir().to_path_buf());
        write(&d, "a.txt", "ONE\ntwo\nthree\n");
        write(&d, "mine.txt", "mine\n");
        assert!(clone.commit_all("mine").unwrap());
        std::fs::remove_file(h.join("b.txt")).unwrap();
        write(&h, "c.txt", "c\n");
        hub_git.commit_all("theirs: b goes, c comes").unwrap();
        clone.fetch_if_moved(&hub).unwrap();
        assert!(clone.rebase("origin/main").unwrap());
        assert!(clone.behind.get() && d.join("b.txt").exists() && !d.join("c.txt").exists());
        write(&h, "d.txt", "d\n");
        hub_git.commit_all("theirs: d").unwrap();

        // A merge left half-way does not outlive the sync either.
        std::fs::write(
            d.join(".git/MERGE_HEAD"),
            format!("{}\n", clone.head().unwrap()),
        )
        .unwrap();
        let target = clone.sync(&hub).unwrap();
        assert!(
            !d.join(".git/MERGE_HEAD").exists(),
            "the merge state is gone"
        );
        assert_eq!(target, hub_git.run(["rev-parse", "main"]).unwrap());
        assert_eq!(clone.head().unwrap(), target);
        let mut files: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f != ".git")
            .collect();
        files.sort();
        assert_eq!(files, ["a.txt", "c.txt", "d.txt"]);
        assert_eq!(
            std::fs::read_to_string(d.join("a.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );
        assert_eq!(clone.git(["status", "--porcelain"]).unwrap(), "");
    }

    /// A sync sweeps away what git does not track whenever anything may
    /// have run in the work tree since the last sweep — a session, the
    /// tests, a git command of farm's — and only then.
    #[test]
    fn a_sync_sweeps_again_only_once_something_ran_in_the_work_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let (_hub_git, hub, clone) = hub_and_clone(tmp.path());
        let d = clone.dir().to_path_buf();
        let stray = d.join("stray.txt");
        clone.sync(&hub).unwrap();
        let ran: [(&str, &dyn Fn()); 3] = [
            ("a session", &|| clone.dirty()),
            ("the tests", &|| clone.after_tests()),
            ("a git command", &|| drop(clone.git(["status"]).unwrap())),
        ];
        for (what, run) in ran {
            write(&d, "stray.txt", "left\n");
            run();
            clone.sync(&hub).unwrap();
            assert!(!stray.exists(), "after {what}, the sync sweeps");
        }
        // Nothing ran between two syncs: the second reads no directory
        // (seen here by what it leaves, which nothing could have made).
        write(&d, "stray.txt", "left\n");
        clone.sync(&hub).unwrap();
        assert!(stray.exists(), "a sync after a sync does not sweep again");
    }
}
