//! An agent's private clone of the hub: made once under the state
//! directory, reset to the hub's branch before every session, and where the
//! agent's work is committed, rebased and pushed from.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::board::{self, Task};
use crate::claim::timestamp;
use crate::error::Error;
use crate::git::{GitError, Pushed, Repo};
use crate::host::Here;
use crate::hub::Hub;
use crate::output::Out;
use crate::retry::patiently;
use crate::session;
use crate::workdir::Workdir;

fn lock_clone(dir: &Path, name: &str) -> Result<std::fs::File, Error> {
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", parent.display())))?;
    let mut lock_name = dir.file_name().unwrap_or_default().to_owned();
    lock_name.push(".lock");
    let path = parent.join(lock_name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::failure(format!("cannot open `{}`: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::usage(format!(
            "agent `{name}` is already running in another farm run on this host"
        ))
        .hint("give this run other agent names: farm run --name NAME")),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::failure(format!(
            "cannot lock `{}`: {e}",
            path.display()
        ))),
    }
}

/// The branch a clone works on, reset to the hub's before every session.
const WORK_BRANCH: &str = "farm-work";

/// An agent's private clone of the hub.
pub struct PrivateClone {
    pub repo: Repo,
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
    name: String,
    out: Out,
}

impl PrivateClone {
    /// The clone for agent `name` under `state`, made on first use; what an
    /// earlier run killed mid-session left in it is recovered first.
    pub fn prepare(
        state: &Path,
        hub: &Hub,
        name: &str,
        dir_name: &str,
        out: Out,
    ) -> Result<PrivateClone, Error> {
        let dir = state.join("clones").join(dir_name);
        // One loop per clone: two farm runs on this host with the same agent
        // names would otherwise reset each other's work away.
        let lock = lock_clone(&dir, name)?;
        // Background gc in a clone only competes with the agents for CPU.
        const SETTINGS: [(&str, &str); 2] = [("maintenance.auto", "false"), ("gc.auto", "0")];
        let repo = if dir.join(".git").is_dir() {
            Repo::new(&dir)
        } else {
            if dir.exists()
                && std::fs::read_dir(&dir)
                    .map(|mut d| d.next().is_some())
                    .unwrap_or(true)
            {
                return Err(Error::failure(format!(
                    "`{}` exists but is not a clone",
                    dir.display()
                ))
                .hint("move it away; farm makes its clones itself"));
            }
            std::fs::create_dir_all(dir.parent().unwrap_or(&dir))
                .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
            let say = |l: &str| out.note(&format!("{name}: {l}"));
            let settings = SETTINGS.map(|(k, v)| format!("{k}={v}"));
            let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
            // A hub on this machine is cloned `--shared`: its objects are
            // borrowed (see [`borrow_objects`]), not copied — copying them
            // while a push is being received failed on the push's
            // quarantine directory vanishing mid-copy.
            let shared = hub.local.is_some();
            patiently("cloning the hub", &say, || {
                let _ = std::fs::remove_dir_all(&dir);
                Repo::clone_from(&hub.url, &dir, &hub.branch, shared, &settings)
            })
            .map_err(Error::from)?
        };
        if let Some(local) = &hub.local {
            borrow_objects(&dir, &local.git_dir)?;
        }
        let work = Workdir::open(&dir).map_err(|e| {
            Error::failure(format!("cannot open the clone `{}`: {e}", dir.display()))
        })?;
        // The clone's own settings, each a git process only when it must
        // change (a run starts 2 clones per agent: this was 5 processes each).
        let settings = [("remote.origin.url", hub.url.as_str())]
            .into_iter()
            .chain(SETTINGS);
        for (key, value) in settings {
            let now = work.as_ref().and_then(|w| w.local_config(key));
            if now.as_deref() != Some(value) {
                repo.run(["config", key, value])?;
            }
        }
        // farm's own commits need an identity even where none is configured
        // (asked of git itself: the user's files and environment count).
        let known = repo.config_matching(r"^user\.(name|email)$")?;
        for (key, value) in [
            ("user.email", format!("{name}@farm.invalid")),
            ("user.name", format!("farm agent {name}")),
        ] {
            if !known.iter().any(|(k, _)| k == key) {
                repo.run(["config", key, &value])?;
            }
        }
        let clone = PrivateClone {
            repo,
            work,
            clean: Cell::new(false),
            behind: Cell::new(false),
            _lock: lock,
            name: name.to_owned(),
            out,
        };
        clone.recover(hub)?;
        Ok(clone)
    }

    /// Where the running session's process group is noted.
    pub fn session_record(&self) -> PathBuf {
        self.dir().join(".git/farm-session")
    }

    /// Make good what an earlier farm killed mid-session left in this clone:
    /// end its session's surviving processes, and push any commit it had not
    /// integrated to `farm/rescue/orphan/<agent>-<commit>` — the next sync
    /// would otherwise reset it away.
    fn recover(&self, hub: &Hub) -> Result<(), Error> {
        let name = &self.name;
        if session::kill_leftover(&self.session_record()) {
            self.say("killed what was left of a session an earlier farm was running here");
            std::thread::sleep(Duration::from_millis(100));
        }
        let git_dir = self.dir().join(".git");
        if git_dir.join("MERGE_HEAD").exists() {
            self.repo.check(["merge", "--abort"])?;
        }
        if git_dir.join("rebase-merge").exists() || git_dir.join("rebase-apply").exists() {
            self.repo.check(["rebase", "--abort"])?;
        }
        if self.head().is_err() {
            return Ok(()); // no commit yet: nothing to recover
        }
        self.commit_all(&format!(
            "farm: work left in {name}'s clone by an earlier run"
        ))?;
        self.fetch_if_moved(hub)?;
        let upstream = format!("origin/{}", hub.branch);
        if self.count_since(&upstream)? == 0 {
            return Ok(());
        }
        let head = self.head()?;
        let branch = format!("farm/rescue/orphan/{name}-{}", &head[..12.min(head.len())]);
        self.push_ref(&head, &branch)?;
        self.say(&format!(
            "an earlier run left commits in this clone; they are on `{branch}`"
        ));
        Ok(())
    }

    fn say(&self, what: &str) {
        self.out.note(&format!("{}: {what}", self.name));
    }

    pub fn dir(&self) -> &Path {
        self.repo.dir()
    }

    pub fn git<const N: usize>(&self, args: [&str; N]) -> Result<String, Error> {
        self.repo.run(args).map_err(Error::from)
    }

    /// Talk to the hub, patiently: a hub that does not answer is tried
    /// again with backoff, a line said each time.
    fn net<T>(&self, what: &str, op: impl FnMut() -> Result<T, GitError>) -> Result<T, Error> {
        patiently(what, &|l: &str| self.say(l), op).map_err(Error::from)
    }

    pub fn fetch(&self, branch: &str) -> Result<(), Error> {
        self.net("fetching", || {
            self.repo.run(["fetch", "--quiet", "origin", branch])
        })?;
        Ok(())
    }

    /// HEAD's commit, from the clone's files when it is on a branch.
    pub fn head(&self) -> Result<String, Error> {
        let git_dir = self.dir().join(".git");
        let head = std::fs::read_to_string(git_dir.join("HEAD")).unwrap_or_default();
        if let Some(sha) = head
            .trim()
            .strip_prefix("ref: ")
            .and_then(|r| crate::git::read_ref(&git_dir, r))
        {
            return Ok(sha);
        }
        self.git(["rev-parse", "HEAD"])
    }

    /// `origin/<branch>` as this clone last fetched it.
    fn origin(&self, branch: &str) -> Option<String> {
        crate::git::read_ref(
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
        // [`borrow_objects`]): fetching is then only setting the ref, and
        // a git process saved — two, with the hub's upload-pack.
        let remote_ref = format!("refs/remotes/origin/{branch}");
        if let (Some(sha), Some(work), Some(_)) = (&now, &self.work, &hub.local)
            && work.set_ref(&remote_ref, sha).is_ok()
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
        for state in ["rebase-merge", "rebase-apply"] {
            if self.dir().join(".git").join(state).exists() {
                self.repo
                    .check(["rebase", "--abort"])
                    .map_err(Error::from)?;
            }
        }
        // read-tree (below) leaves a merge's state alone, where checkout
        // dropped it: a merge left half-way (an error mid-integration) must
        // not make the next session's first commit a merge.
        if self.dir().join(".git/MERGE_HEAD").exists() {
            self.repo.check(["merge", "--abort"])?;
        }
        let target = self.fetch_if_moved(hub)?;
        if !(self.clean.get() && !self.behind.get() && self.head()? == target) {
            self.reset_to(&target)?;
        }
        self.behind.set(false);
        match self.work.as_ref().map(Workdir::clean) {
            Some(Ok(())) => {}
            _ => drop(self.git(["clean", "-ffdxq"])?),
        }
        self.clean.set(true);
        Ok(target)
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
    }

    /// HEAD was pushed: unless an in-memory rebase left the work tree behind
    /// it, the next sync to that same commit needs no checkout.
    pub fn pushed(&self) {
        self.clean.set(!self.behind.get());
    }

    /// Stage and commit everything; `false` when there was nothing.
    pub fn commit_all(&self, message: &str) -> Result<bool, Error> {
        if let Some(Ok(committed)) = self.work.as_ref().map(|w| w.commit_all(message)) {
            return Ok(committed);
        }
        Ok(self.repo.commit_all(message)?)
    }

    pub fn commit_leftovers(&self, name: &str, id: &str) -> Result<bool, Error> {
        self.commit_all(&format!("farm: work {name} left uncommitted on `{id}`"))
    }

    /// Rebase HEAD onto `upstream`: in memory when it can be, else with
    /// `git rebase` (aborted on conflict). False on conflict.
    pub fn rebase(&self, upstream: &str) -> Result<bool, Error> {
        let before = self.head()?;
        if let Some(Ok(Some(after))) = self.work.as_ref().map(|w| w.rebase(upstream)) {
            if after.to_string() != before {
                self.behind.set(true);
                self.clean.set(false);
            }
            return Ok(true);
        }
        self.catch_up_worktree()?;
        if self.repo.check(["rebase", "--quiet", upstream])? {
            return Ok(true);
        }
        self.repo.check(["rebase", "--abort"])?;
        Ok(false)
    }

    /// Bring the index and the work tree up to HEAD after an in-memory
    /// rebase, for the `git` commands that work in them.
    fn catch_up_worktree(&self) -> Result<(), Error> {
        if self.behind.get() {
            self.git(["reset", "--quiet", "--hard"])?;
            self.behind.set(false);
        }
        Ok(())
    }

    /// An agent must not change `current_tasks/`; if its commits did, put
    /// the directory back as it was (claims live in the hub, not here).
    pub fn undo_claim_tampering(&self, base: &str, name: &str) -> Result<(), Error> {
        let dir = crate::store::fs::DIR;
        let head = self.head()?;
        let same = match self.work.as_ref().map(|w| w.same_at(base, &head, dir)) {
            Some(Ok(same)) => same,
            _ => self
                .git(["diff", "--name-only", base, &head, "--", dir])?
                .is_empty(),
        };
        if same {
            return Ok(());
        }
        self.git([
            "rm",
            "-r",
            "--quiet",
            "--cached",
            "--ignore-unmatch",
            "--",
            dir,
        ])?;
        let _ = std::fs::remove_dir_all(self.dir().join(dir));
        if self
            .repo
            .check(["cat-file", "-e", &format!("{base}:{dir}")])
            .map_err(Error::from)?
        {
            self.git(["checkout", base, "--", dir])?;
        }
        self.commit_all(&format!("farm: undo {name}'s changes to {dir}/"))?;
        Ok(())
    }

    /// The task as it is on the hub's branch now, with the clone reset to
    /// it — a clean slate for the session; `None` when it is not ready
    /// there: no longer pending, or waiting for a task that is not done on
    /// the branch yet. (A hub's work tree shows a push before its branch
    /// does: receive-pack updates the files, then the ref.)
    pub fn fresh_task(&self, hub: &Hub, id: &crate::task::TaskId) -> Result<Option<Task>, Error> {
        self.sync(hub)?;
        let tasks = self.dir().join("tasks");
        let Ok(text) = std::fs::read_to_string(tasks.join(format!("{id}.md"))) else {
            return Ok(None);
        };
        let Ok(task) = board::parse(id.clone(), &text) else {
            return Ok(None);
        };
        let ready = task
            .after
            .iter()
            .all(|dep| tasks.join("done").join(format!("{dep}.md")).is_file());
        Ok(ready.then_some(task))
    }

    /// Merge `upstream` into HEAD; false when it stopped on conflicts.
    pub fn merge(&self, upstream: &str, branch: &str, id: &str) -> Result<bool, Error> {
        self.catch_up_worktree()?;
        let message = format!("farm: merge `{branch}` into the work on `{id}`");
        Ok(self
            .repo
            .check(["merge", "--quiet", "--no-edit", "-m", &message, upstream])?)
    }

    pub fn count_since(&self, upstream: &str) -> Result<usize, Error> {
        if let Some(Ok(n)) = self.work.as_ref().map(|w| w.count_since(upstream)) {
            return Ok(n);
        }
        Ok(self
            .git(["rev-list", "--count", &format!("{upstream}..HEAD")])?
            .parse()
            .unwrap_or(0))
    }

    /// Move `tasks/<id>.md` to `tasks/done/<id>.md` with a short result.
    pub fn mark_done(
        &self,
        task: &Task,
        name: &str,
        attempt: u32,
        log: &Path,
    ) -> Result<(), Error> {
        let id = task.id.as_str();
        let pending = self.dir().join("tasks").join(format!("{id}.md"));
        let text = std::fs::read_to_string(&pending).unwrap_or_else(|_| task.render());
        let result = format!(
            "{}\n## Result\n\nDone by {name}@{} on attempt {attempt}, {}. Session log: {}\n",
            ensure_newline(&text),
            Here::current().host,
            timestamp(SystemTime::now()),
            log.display()
        );
        let done = self.dir().join("tasks/done");
        std::fs::create_dir_all(&done).map_err(io_error)?;
        std::fs::write(done.join(format!("{id}.md")), result).map_err(io_error)?;
        let _ = std::fs::remove_file(&pending);
        let task_files = [format!("tasks/{id}.md"), format!("tasks/done/{id}.md")];
        let leftovers: Vec<String> = self
            .stage_all()?
            .into_iter()
            .filter(|f| !task_files.contains(f))
            .collect();
        let message = if leftovers.is_empty() {
            format!("farm: `{id}` done")
        } else {
            format!(
                "farm: `{id}` done, with the work {name} left uncommitted\n\n{}\n",
                leftovers.join("\n")
            )
        };
        if let Some(Ok(_)) = self.work.as_ref().map(|w| w.commit(&message)) {
            return Ok(());
        }
        self.git(["commit", "--quiet", "--no-verify", "-m", &message])?;
        Ok(())
    }

    /// Stage everything (`git add --all`); the paths that differ from HEAD.
    fn stage_all(&self) -> Result<Vec<String>, Error> {
        if let Some(Ok(paths)) = self.work.as_ref().map(Workdir::stage_all) {
            return Ok(paths);
        }
        self.git(["add", "--all"])?;
        Ok(self
            .git(["diff", "--cached", "--name-only", "--no-renames", "HEAD"])?
            .lines()
            .map(str::to_owned)
            .collect())
    }

    pub fn has_markers(&self, files: &[String]) -> bool {
        files.iter().any(|f| {
            std::fs::read_to_string(self.dir().join(f)).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> "))
            })
        })
    }

    /// Push a commit to a new branch on the hub (a rescue branch).
    pub fn push_ref(&self, commit: &str, branch: &str) -> Result<(), Error> {
        let spec = [format!("{commit}:refs/heads/{branch}")];
        match self.net("pushing a rescue branch", || {
            self.repo.push("origin", &spec)
        })? {
            Pushed::Ok => Ok(()),
            Pushed::Rejected(r) => {
                Err(Error::failure(format!("the hub refused `{branch}`: {r:?}")))
            }
        }
    }
}

pub(crate) fn ensure_newline(s: &str) -> String {
    if s.is_empty() || s.ends_with('\n') {
        s.to_owned()
    } else {
        format!("{s}\n")
    }
}

pub(crate) fn io_error(e: std::io::Error) -> Error {
    Error::failure(format!("cannot write a task file: {e}"))
}

/// Let the clone read the hub's objects where they are (git's alternates),
/// so fetching from a hub on this machine copies no object: with 8 agents
/// every task's objects were otherwise written once more into each clone.
/// Safe because the clone only ever fetches the hub's branch, which never
/// loses a commit (farm never forces a push). Written on every start, so a
/// hub that moved is followed.
fn borrow_objects(clone: &Path, hub_git_dir: &Path) -> Result<(), Error> {
    let info = clone.join(".git/objects/info");
    let objects = hub_git_dir.join("objects");
    std::fs::create_dir_all(&info)
        .and_then(|()| std::fs::write(info.join("alternates"), format!("{}\n", objects.display())))
        .map_err(|e| {
            Error::failure(format!(
                "cannot point `{}` at the hub's objects: {e}",
                clone.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HubSpec;
    use crate::output::ColorWhen;

    fn write(dir: &Path, rel: &str, text: &str) {
        std::fs::write(dir.join(rel), text).unwrap();
    }

    /// A hub with `a.txt` and `b.txt` on `main`, and a clone of it.
    fn hub_and_clone(tmp: &Path) -> (Repo, Hub, PrivateClone) {
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
        assert_eq!(clone.repo.conflicted().unwrap(), ["a.txt"]);
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
}
