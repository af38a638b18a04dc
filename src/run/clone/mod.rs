//! An agent's private clone of the hub: made once under the state
//! directory, reset to the hub's branch before every session, and where the
//! agent's work is committed, rebased and pushed from.
//!
//! # Theory of operation
//!
//! One loop owns one clone: [`PrivateClone::prepare`] takes the clone's
//! flock ([`lock`]) and holds it for the loop's life, so whatever git left
//! here with no live process behind it is stale. Opening ([`open`]) first
//! makes good what a farm killed mid-work left: the session's process group
//! is killed, git processes still working here are waited for
//! ([`git_procs`]), stale git lock files removed ([`stale_locks`]), the git
//! config put back as farm keeps it ([`config`]), and a clone deleted or
//! broken set aside and made again. Then [`recovery`] aborts a git operation
//! left half-done, commits what the agent left uncommitted, and [`rescue`]
//! pushes the agent's own commits that no hub ref has to a rescue branch —
//! the next sync would otherwise reset them away.
//!
//! Every git command farm runs here goes through [`commands`]: in-process
//! (git2) when it can, else the `git` command, the config put back first
//! (an agent works here, and git obeys that file), and healed once of a
//! stale lock or a kill. A session's turn then goes: [`sync`] resets the
//! clone to the hub's branch (a clean slate), the agent works, [`commits`]
//! and [`board`] record its work and the task's move to done, [`catch_up`]
//! rebases or merges onto the hub's branch, [`gate`] lends the files to the
//! test gate, and [`push`] publishes HEAD to the hub.
//!
//! Three flags on [`PrivateClone`] (`clean`, `behind`, `tracked`) say what
//! is known of the files against HEAD and the index, so that a sync or a
//! test run skips the work it need not do; [`STALE_FILES`] is their
//! on-disk counterpart, which outlives a killed farm.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::git::command::Repo;
use crate::git::workdir::Workdir;
use crate::output::Out;

mod board;
mod catch_up;
mod commands;
mod commits;
mod config;
mod earlier;
mod gate;
mod git_procs;
mod lock;
mod open;
mod push;
mod queued;
mod recovery;
mod rescue;
mod stale_locks;
mod sync;

pub(crate) use board::io_error;
pub use earlier::Earlier;

/// Where the running session of the clone in `dir` has its process group
/// noted: beside the clone, not in it, where a session could rewrite it to
/// aim the next farm's clean-up at another process group.
fn session_record_of(dir: &Path) -> PathBuf {
    let mut path = dir.as_os_str().to_owned();
    path.push(".session");
    PathBuf::from(path)
}

/// Not empty while a clone's files are not the agent's work: HEAD moved
/// without them (an in-memory rebase), or they are being put back at a
/// commit (a sync). Written before, emptied once the files equal HEAD
/// (emptied, not removed: no inode freed per sync, see workdir.rs). A farm
/// killed in between leaves it written, and the next one puts the files
/// back at HEAD instead of taking them for work to rescue: a checkout cut
/// short leaves each file at the commit before, at the new one, or removed —
/// a file the branch changed is removed, then written again — and committed,
/// that mix undoes what the branch gained.
const STALE_FILES: &str = ".git/farm-stale-files";

/// The branch a clone works on, reset to the hub's before every session.
const WORK_BRANCH: &str = "farm-work";

/// An agent's private clone of the hub.
pub struct PrivateClone {
    /// The clone's repository; farm's git commands reach it through
    /// [`PrivateClone::repo`], which first puts its config back.
    raw: Repo,
    /// What `.git/config` holds as farm keeps it (see [`config::own_config`]).
    config: Vec<u8>,
    /// The hub, as farm was given it: pushed to and fetched from by URL,
    /// whatever the clone's config says.
    hub_url: String,
    /// Held for the loop's life: this clone is this loop's alone.
    _lock: std::fs::File,
    /// The same repository in-process, for what needs no hub (`None`: the
    /// clone's commits go through the `git` command, see workdir.rs).
    work: Option<Workdir>,
    /// True when the index and the tracked files are known to equal HEAD: a
    /// sync to that commit may skip the checkout (it still cleans, for what
    /// git does not track).
    clean: Cell<bool>,
    /// True when HEAD was moved by an in-memory rebase: the index and the
    /// work tree still show the commit before it.
    behind: Cell<bool>,
    /// True when the tracked files are known to equal the index (after a
    /// sync, or after staging everything; not once a session ran): a sync
    /// may then move them by what changed between the two trees alone.
    tracked: Cell<bool>,
    /// True when the last sync swept the work tree of what git does not
    /// track and nothing ran there since — no session, no tests, no git
    /// command of farm's (each passes [`PrivateClone::own_config`] first): a
    /// sync that moves nothing may then skip the sweep. A loop's step
    /// syncs twice (to read the board, then to start the session on the
    /// task it claimed meanwhile), and a sweep reads every directory of the
    /// work tree.
    swept: Cell<bool>,
    name: String,
    out: Out,
    /// The rescue branches pushed when the clone was opened.
    rescued: Vec<String>,
}

impl PrivateClone {
    /// The rescue branches pushed when this clone was opened: the work an
    /// earlier run left in it (see [`PrivateClone::recover`]).
    pub fn rescued(&self) -> &[String] {
        &self.rescued
    }

    /// The object stores this clone borrows (git's alternates: the hub's,
    /// for a hub on this machine), which a sandboxed session must read.
    pub fn borrowed_objects(&self) -> Vec<PathBuf> {
        let file = self.dir().join(".git/objects/info/alternates");
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .collect()
    }

    /// Where the running session's process group is noted.
    pub fn session_record(&self) -> PathBuf {
        session_record_of(self.dir())
    }

    /// Say `what` as a line of this agent's.
    fn say(&self, what: &str) {
        self.out.note(&format!("{}: {what}", self.name));
    }

    /// The clone's work tree.
    pub fn dir(&self) -> &Path {
        self.raw.dir()
    }

    /// HEAD's commit, from the clone's files when it is on a branch.
    pub fn head(&self) -> Result<String, Error> {
        let git_dir = self.dir().join(".git");
        let head = std::fs::read_to_string(git_dir.join("HEAD")).unwrap_or_default();
        if let Some(sha) = head
            .trim()
            .strip_prefix("ref: ")
            .and_then(|r| crate::git::command::read_ref(&git_dir, r))
        {
            return Ok(sha);
        }
        self.git(["rev-parse", "HEAD"])
    }

    /// How many commits HEAD has that `upstream` lacks (by ancestry).
    pub fn count_since(&self, upstream: &str) -> Result<usize, Error> {
        if let Some(n) = self.in_process("count", |w| w.count_since(upstream)) {
            return Ok(n);
        }
        Ok(self
            .git(["rev-list", "--count", &format!("{upstream}..HEAD")])?
            .parse()
            .unwrap_or(0))
    }

    /// Whether HEAD is `commit` or descends from it.
    pub fn descends_from(&self, commit: &str) -> Result<bool, Error> {
        if let Some(descends) = self.in_process("ancestry", |w| w.descends_from(commit)) {
            return Ok(descends);
        }
        Ok(
            commit == self.head()?
                || self.check(["merge-base", "--is-ancestor", commit, "HEAD"])?,
        )
    }

    /// Whether commit `ancestor` is `rev` or one of its ancestors.
    pub fn is_ancestor(&self, ancestor: &str, rev: &str) -> Result<bool, Error> {
        if let Some(is) = self.in_process("ancestry", |w| w.is_ancestor(ancestor, rev)) {
            return Ok(is);
        }
        Ok(ancestor == rev || self.check(["merge-base", "--is-ancestor", ancestor, rev])?)
    }

    /// The files HEAD changed since `commit`.
    pub fn changed_since(&self, commit: &str) -> Result<std::collections::BTreeSet<String>, Error> {
        let names = self.git(["diff", "--name-only", "--no-renames", commit, "HEAD"])?;
        Ok(names.lines().map(str::to_owned).collect())
    }
}

/// What the tests of every part of the clone start from.
#[cfg(test)]
mod fixture {
    use std::path::Path;
    use std::time::Duration;

    use super::PrivateClone;
    use crate::git::command::Repo;
    use crate::git::hub::{Hub, HubSpec};
    use crate::output::{ColorWhen, Out};

    pub(super) fn write(dir: &Path, rel: &str, text: &str) {
        std::fs::write(dir.join(rel), text).unwrap();
    }

    /// A hub with `a.txt` and `b.txt` on `main`, and a clone of it.
    pub(super) fn hub_and_clone(tmp: &Path) -> (Repo, Hub, PrivateClone) {
        let hub_dir = tmp.join("hub");
        std::fs::create_dir(&hub_dir).unwrap();
        let hub_git = Repo::new(&hub_dir);
        hub_git.run(["init", "--quiet", "-b", "main"]).unwrap();
        for (k, v) in [
            ("user.email", "hub@example.com"),
            ("user.name", "hub"),
            ("receive.denyCurrentBranch", "updateInstead"),
        ] {
            hub_git.run(["config", k, v]).unwrap();
        }
        write(&hub_dir, "a.txt", "one\ntwo\nthree\n");
        write(&hub_dir, "b.txt", "b\n");
        hub_git.commit_all("start").unwrap();
        let hub = Hub::open(&HubSpec::Local(hub_dir), None).unwrap();
        let out = Out::new(ColorWhen::Never, true, 0);
        let clone = PrivateClone::prepare(&tmp.join("state"), &hub, "a", "a", out).unwrap();
        assert!(clone.work.is_some(), "the in-process path is under test");
        clone.sync(&hub).unwrap();
        (hub_git, hub, clone)
    }

    /// The hub's `farm/rescue/*` branches: `(name, commit)`.
    pub(super) fn rescues(hub_git: &Repo) -> Vec<(String, String)> {
        let refs = hub_git
            .run([
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/heads/farm/rescue/",
            ])
            .unwrap();
        refs.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(r, c)| (r.to_owned(), c.to_owned()))
            .collect()
    }

    /// Open the clone again, as the next farm does (recovering it).
    pub(super) fn reopen(tmp: &Path, hub: &Hub, clone: PrivateClone) -> PrivateClone {
        drop(clone);
        let out = Out::new(ColorWhen::Never, true, 0);
        // A process forked meanwhile by another test's thread holds a copy
        // of the clone's flock until it execs: wait that out.
        let start = std::time::Instant::now();
        loop {
            match PrivateClone::prepare(&tmp.join("state"), hub, "a", "a", out) {
                Ok(clone) => return clone,
                Err(e)
                    if e.to_string().contains("already running")
                        && start.elapsed() < Duration::from_secs(30) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}
