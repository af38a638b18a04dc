//! An agent's private clone of the hub: made once under the state
//! directory, reset to the hub's branch before every session, and where the
//! agent's work is committed, rebased and pushed from. Opening it recovers
//! what a farm killed mid-work left there (see [`PrivateClone::recover`]):
//! stale git locks, a git operation half-done, the agent's own commits to
//! rescue — and a clone deleted or broken is set aside and made again.

use std::cell::Cell;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::board::{self, Task};
use crate::claims::host::Here;
use crate::claims::record::timestamp;
use crate::claims::{ClaimStore, Held, Published, StoreError};
use crate::error::Error;
use crate::git::command::{GitError, Pushed, Repo};
use crate::git::hub::Hub;
use crate::git::retry::patiently;
use crate::git::workdir::{GIT_ONLY, Workdir, git_true};
use crate::output::Out;
use crate::run::session;

/// How long a clone's lock is tried before it is judged held by another run.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Lock the clone at `dir` for agent `name`: one loop uses a clone.
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
    // A lock held a moment longer by a process that is exiting (a chaos
    // round saw the clone reopened after its git was SIGKILLed refused with
    // no holder left in /proc/locks a moment later): try again for a while
    // before calling it another run's.
    let tried = std::time::Instant::now();
    let mut result = file.try_lock();
    while matches!(result, Err(std::fs::TryLockError::WouldBlock))
        && tried.elapsed() < LOCK_PATIENCE
    {
        std::thread::sleep(Duration::from_millis(20));
        result = file.try_lock();
    }
    match result {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            // Who holds it, as the kernel says: another run (its pid), or
            // this very one — a clone not let go, which is farm's bug, said
            // as such (a chaos round once ended an agent's loop so).
            use std::os::unix::fs::MetadataExt;
            let holder = file.metadata().ok().and_then(|m| flock_holder(m.ino()));
            if holder == Some(std::process::id()) {
                return Err(Error::failure(format!(
                    "agent `{name}`: `{}` is still held by this farm run (pid {}): one of its clones was not let go",
                    path.display(),
                    std::process::id()
                )));
            }
            let by = holder.map_or(String::new(), |pid| format!(" (pid {pid})"));
            Err(Error::usage(format!(
                "agent `{name}` is already running in another farm run on this host{by}"
            ))
            .hint("give this run other agent names: farm run --name NAME"))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::failure(format!(
            "cannot lock `{}`: {e}",
            path.display()
        ))),
    }
}

/// The pid that holds a `flock` on the file with inode `ino`, from
/// `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`).
fn flock_holder(ino: u64) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, dev_ino) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let inode: u64 = dev_ino.rsplit(':').next()?.parse().ok()?;
        (*kind == "FLOCK" && inode == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// Where in a clone the running session's process group is noted.
const SESSION_RECORD: &str = ".git/farm-session";

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
    /// What `.git/config` holds as farm keeps it (see [`own_config`]).
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
    name: String,
    out: Out,
    /// The rescue branches pushed when the clone was opened.
    rescued: Vec<String>,
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
        let say = |l: &str| out.note(&format!("{name}: {l}"));
        // Rules 1 and 2 of [`PrivateClone::recover`], before anything runs
        // git here (setting the clone's config takes `config.lock`).
        if session::kill_leftover(&dir.join(SESSION_RECORD), &dir) {
            say("killed what was left of a session an earlier farm was running here");
            std::thread::sleep(Duration::from_millis(100));
        }
        wait_for_git_left_in(&dir, &say);
        remove_stale_locks(&dir, &say);
        // A clone the agent deleted or broke is moved aside and made again;
        // its readable commits are rescued from there once the new clone
        // can push them (see [`PrivateClone::salvage`]).
        // (A clone's borrowed objects are pointed at first: a clone whose
        // pointer was lost is not broken.)
        if let Some(local) = &hub.local
            && dir.join(".git/objects").is_dir()
        {
            let _ = borrow_objects(&dir, &local.git_dir);
        }
        // The config first: git2 and git both read it, and what an agent
        // left there must neither redirect nor run anything from here on.
        if dir.join(".git/config").is_file() {
            own_config(&dir, hub, &SETTINGS)?;
        }
        let broken = match usable(&dir) {
            Ok(()) => None,
            Err(why) => Some(set_aside(&dir, &why, &say)?),
        };
        let repo = if dir.join(".git").is_dir() {
            Repo::of_agent(&dir)
        } else {
            std::fs::create_dir_all(dir.parent().unwrap_or(&dir))
                .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
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
            .map(|made| Repo::of_agent(made.dir()))
            .map_err(Error::from)?
        };
        if let Some(local) = &hub.local {
            borrow_objects(&dir, &local.git_dir)?;
        }
        own_config(&dir, hub, &SETTINGS)?;
        let mut work = Workdir::open(&dir).map_err(|e| {
            Error::failure(format!("cannot open the clone `{}`: {e}", dir.display()))
        })?;
        // farm's own commits need an identity even where none is configured
        // (asked of git itself: the user's files and environment count).
        // The same process tells what git2 cannot see: a setting that
        // leaves the clone to the git command, given in the environment
        // (GIT_CONFIG_COUNT, say) or a file git2 does not read.
        let known = repo.config_matching(
            r"^(user\.(name|email)|commit\.gpgsign|core\.(splitindex|sparsecheckout))$",
        )?;
        let git_only = |key: &str| known.iter().rfind(|(k, _)| k == key);
        if GIT_ONLY
            .iter()
            .any(|key| git_only(key).is_some_and(|(_, v)| git_true(v)))
        {
            work = None;
        }
        for (key, value) in [
            ("user.email", format!("{name}@farm.invalid")),
            ("user.name", format!("farm agent {name}")),
        ] {
            if !known.iter().any(|(k, _)| k == key) {
                repo.run(["config", key, &value])?;
            }
        }
        let config = std::fs::read(dir.join(".git/config")).map_err(|e| {
            Error::failure(format!(
                "cannot read `{}`: {e}",
                dir.join(".git/config").display()
            ))
        })?;
        let mut clone = PrivateClone {
            raw: repo,
            config,
            hub_url: hub.url.clone(),
            work,
            clean: Cell::new(false),
            behind: Cell::new(false),
            tracked: Cell::new(false),
            _lock: lock,
            name: name.to_owned(),
            out,
            rescued: Vec::new(),
        };
        clone.rescued = clone.recover(hub)?;
        if let Some(aside) = broken {
            let more = clone.salvage(hub, &aside)?;
            clone.rescued.extend(more);
        }
        Ok(clone)
    }

    /// The rescue branches pushed when this clone was opened: the work an
    /// earlier run left in it (see [`PrivateClone::recover`]).
    pub fn rescued(&self) -> &[String] {
        &self.rescued
    }

    /// Where the running session's process group is noted.
    pub fn session_record(&self) -> PathBuf {
        self.dir().join(SESSION_RECORD)
    }

    /// Make good what an earlier farm, killed, left in this clone, and
    /// rescue the agent's own commits that are on no hub ref — the next sync
    /// would otherwise reset them away. Returns the rescue branches pushed.
    ///
    /// The rules (DESIGN.md MUST 12), in order:
    ///
    /// 1. What is left of the session's process group is killed, and the git
    ///    processes an earlier farm left here (a `git push` that may still
    ///    land) are waited for: from then on nothing but this farm works
    ///    here (it holds the clone's flock).
    /// 2. So every git lock in the clone (`index.lock`, `HEAD.lock`,
    ///    `refs/**/*.lock`, `packed-refs.lock`, `config.lock`, …) is stale:
    ///    removed, and each named once.
    /// 3. A git operation left half-done — a rebase (`rebase-merge/`,
    ///    `rebase-apply/`), `am`, merge, cherry-pick or revert — is aborted,
    ///    which puts HEAD back at the tip it started from: the agent's own
    ///    commits as made (a rebase's `orig-head`), never its half-done
    ///    result. When git cannot abort it, its state is removed by hand,
    ///    HEAD put back on the rebased branch (else at `orig-head`), and the
    ///    files reset to HEAD. Unresolved conflicts are never committed.
    /// 4. Changes not committed are the agent's, and committed on top of
    ///    HEAD — unless farm had marked the files stale (see [`STALE_FILES`]:
    ///    an in-memory rebase or a sync was under way), which are then put
    ///    back at HEAD, or they hold conflict markers, which are left.
    /// 5. The agent's own commits are those of `origin/<branch>..HEAD` whose
    ///    patch is not on the branch already (`git cherry`). A clone with
    ///    none — one left behind the branch, say — needs no rescue;
    ///    otherwise HEAD goes to `farm/rescue/orphan/<agent>-<commit>`,
    ///    replayed onto the branch first when some of its commits landed
    ///    there by patch (as it is, if that conflicts).
    ///
    /// Before all this, `prepare` sets aside a clone that is not one (no
    /// `.git`, a HEAD that names no readable commit, not a directory) and
    /// makes it again; the branches readable in the copy set aside are
    /// rescued by the same rule 5 (see [`PrivateClone::salvage`]).
    fn recover(&self, hub: &Hub) -> Result<Vec<String>, Error> {
        // (Rules 1 and 2 were applied by `prepare` before it ran git here.)
        self.end_operations()?;
        if self.head().is_err() {
            return Ok(Vec::new()); // no commit yet: nothing to recover
        }
        if std::fs::metadata(self.dir().join(STALE_FILES)).is_ok_and(|m| m.len() > 0) {
            self.git(["reset", "--quiet", "--hard"])?;
            self.git(["clean", "-ffdxq"])?;
            self.files_current()?;
            self.out.debug(&format!(
                "{}: the files were left part way by a sync or a rebase; back at HEAD",
                self.name
            ));
        }
        self.commit_own_leftovers()?;
        self.fetch_if_moved(hub)?;
        let upstream = format!("origin/{}", hub.branch);
        if self.count_since(&upstream)? == 0 {
            return Ok(Vec::new());
        }
        // A push the earlier farm started may still be landing these very
        // commits: its processes outlive it and keep the hub's push lock
        // (see `Hub::push_lock`). Judged once it let go, they are on the
        // branch and need no rescue.
        let _settled = hub.push_lock()?;
        self.fetch_if_moved(hub)?;
        let Some(head) = self.own_tip(&upstream)? else {
            return Ok(Vec::new());
        };
        let branch = format!(
            "farm/rescue/orphan/{}-{}",
            self.name,
            &head[..12.min(head.len())]
        );
        self.push_ref(&head, &branch)?;
        self.say(&format!(
            "an earlier run left commits in this clone; they are on `{branch}`"
        ));
        Ok(vec![branch])
    }

    /// Remove the git locks a session left (see [`remove_stale_locks`]).
    fn remove_stale_locks(&self) {
        remove_stale_locks(self.dir(), &|l| self.say(l));
    }

    /// Abort every git operation left half-done in the clone (rule 3 of
    /// `recover`).
    fn end_operations(&self) -> Result<(), Error> {
        let git_dir = self.dir().join(".git");
        // An operation may have been started inside another (a merge in a
        // stopped rebase): each is ended in turn, a few at most.
        for _ in 0..4 {
            let Some(op) = Operation::found(&git_dir) else {
                break;
            };
            let aborted = self.repo()?.check([op.command(), "--abort"])?
                && Operation::found(&git_dir) != Some(op);
            if !aborted {
                self.clear_by_hand(op)?;
            }
            let head = self.head().unwrap_or_default();
            self.say(&format!(
                "an earlier run left `git {}` half-done here; aborted it, back to {}",
                op.command(),
                &head[..12.min(head.len())]
            ));
        }
        if Operation::found(&git_dir).is_some() || !self.repo()?.conflicted()?.is_empty() {
            // Still there (or conflicts with no operation, as a `stash pop`
            // leaves them): the files go back to HEAD, conflicts and all.
            self.clear_by_hand(Operation::Merge)?;
            self.say("unresolved conflicts were left here; the files are back at HEAD");
        }
        Ok(())
    }

    /// End operation `op` where `git <op> --abort` could not: HEAD back on
    /// the branch a rebase was rebasing (where it still is until the rebase
    /// ends; else at the rebase's `orig-head`), git's state for the
    /// operation removed, the index and the files reset to HEAD.
    fn clear_by_hand(&self, op: Operation) -> Result<(), Error> {
        let git_dir = self.dir().join(".git");
        if op == Operation::Rebase {
            for state in ["rebase-merge", "rebase-apply"] {
                let read = |f: &str| {
                    std::fs::read_to_string(git_dir.join(state).join(f))
                        .map(|t| t.trim().to_owned())
                        .unwrap_or_default()
                };
                let (head_name, orig_head) = (read("head-name"), read("orig-head"));
                if head_name.starts_with("refs/heads/")
                    && crate::git::command::read_ref(&git_dir, &head_name).is_some()
                {
                    self.git(["symbolic-ref", "HEAD", &head_name])?;
                    break;
                }
                if self.repo()?.rev(&orig_head)?.is_some() {
                    if head_name.starts_with("refs/heads/") {
                        self.git(["update-ref", &head_name, &orig_head])?;
                        self.git(["symbolic-ref", "HEAD", &head_name])?;
                    } else {
                        self.git(["update-ref", "--no-deref", "HEAD", &orig_head])?;
                    }
                    break;
                }
            }
        }
        for state in [
            "rebase-merge",
            "rebase-apply",
            "sequencer",
            "MERGE_HEAD",
            "MERGE_MSG",
            "MERGE_MODE",
            "MERGE_RR",
            "AUTO_MERGE",
            "CHERRY_PICK_HEAD",
            "REVERT_HEAD",
        ] {
            let path = git_dir.join(state);
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
        if self.head().is_ok() {
            self.git(["reset", "--quiet", "--hard"])?;
        }
        Ok(())
    }

    /// Commit what differs from HEAD when it is the agent's own (rule 4 of
    /// `recover`); whether a commit was made.
    fn commit_own_leftovers(&self) -> Result<bool, Error> {
        let changed = self.stage_all()?;
        if changed.is_empty() {
            return Ok(false);
        }
        if self.has_markers(&changed) {
            self.say(&format!(
                "changes left uncommitted here hold conflict markers ({}); not rescued",
                changed.join(", ")
            ));
            return Ok(false);
        }
        self.commit_all(&format!(
            "farm: work left in {}'s clone by an earlier run",
            self.name
        ))
    }

    /// HEAD, when it has commits that `upstream` lacks by ancestry and by
    /// patch (rule 5 of `recover`); when some of its commits are on
    /// `upstream` already, replayed onto it without them (in memory when it
    /// can be, as integration does), so that the rescue holds only the
    /// agent's own — or HEAD as it is, when that conflicts. `None`: nothing
    /// of the agent's.
    fn own_tip(&self, upstream: &str) -> Result<Option<String>, Error> {
        // Counted in-process first, for the usual answer: none.
        if self.count_since(upstream)? == 0 {
            return Ok(None);
        }
        let head = self.head()?;
        let cherry = self.git(["cherry", upstream, &head])?;
        let own = cherry.lines().filter(|l| l.starts_with('+')).count();
        let landed = cherry.lines().filter(|l| l.starts_with('-')).count();
        if own == 0 {
            return Ok(None);
        }
        if landed > 0 && self.rebase(upstream)? && self.count_since(upstream)? > 0 {
            return Ok(Some(self.head()?));
        }
        Ok(Some(head))
    }

    /// Whether `tip` has commits that `upstream` lacks, by ancestry and by
    /// patch (a commit rebased onto the branch is there already).
    pub fn has_own_commits(&self, upstream: &str, tip: &str) -> Result<bool, Error> {
        // farm's own progress commit is no work of the agent's: alone, it
        // needs no rescue.
        let cherry = self.git(["cherry", "-v", upstream, tip])?;
        Ok(cherry.lines().any(|l| {
            let mut words = l.splitn(3, ' ');
            let (sign, subject) = (words.next(), words.nth(1).unwrap_or(""));
            sign == Some("+") && !subject.starts_with(crate::run::progress::SUBJECT)
        }))
    }

    /// Rescue what commits can be read from `aside`, a broken clone set
    /// aside (see [`set_aside`]): its branches are fetched into this new
    /// clone, and each with commits the hub's branch lacks is pushed to a
    /// rescue branch. `aside` is removed once all went well, else kept.
    fn salvage(&self, hub: &Hub, aside: &Path) -> Result<Vec<String>, Error> {
        let old_git = aside.join(".git");
        let mut rescued = Vec::new();
        if !old_git.is_dir() {
            self.say(&format!(
                "no commit could be read from `{}`: it is left there",
                aside.display()
            ));
            return Ok(rescued);
        }
        // git reads no repository whose HEAD is garbage, though its refs and
        // objects may be fine: the copy set aside is ours to mend.
        let head = std::fs::read_to_string(old_git.join("HEAD")).unwrap_or_default();
        let head = head.trim();
        let valid = head.starts_with("ref: refs/")
            || (head.len() >= 40 && head.bytes().all(|b| b.is_ascii_hexdigit()));
        if !valid {
            let _ = std::fs::write(
                old_git.join("HEAD"),
                format!("ref: refs/heads/{WORK_BRANCH}\n"),
            );
        }
        const SALVAGED: &str = "refs/farm/salvaged/";
        let spec = format!("+refs/heads/*:{SALVAGED}*");
        let fetched = self.repo()?.run([
            OsStr::new("fetch"),
            OsStr::new("--quiet"),
            OsStr::new("--no-tags"),
            old_git.as_os_str(),
            OsStr::new(&spec),
        ]);
        if let Err(e) = fetched {
            self.say(&format!(
                "no commit could be read from `{}` ({}): it is left there",
                aside.display(),
                e.said
            ));
            return Ok(rescued);
        }
        self.fetch_if_moved(hub)?;
        let upstream = format!("origin/{}", hub.branch);
        let refs = self.git([
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            SALVAGED,
        ])?;
        for line in refs.lines() {
            let Some((sha, name)) = line.split_once(' ') else {
                continue;
            };
            if self.has_own_commits(&upstream, sha)? {
                let branch = format!(
                    "farm/rescue/orphan/{}-{}",
                    self.name,
                    &sha[..12.min(sha.len())]
                );
                self.push_ref(sha, &branch)?;
                self.say(&format!(
                    "the broken clone had commits of its own; they are on `{branch}`"
                ));
                rescued.push(branch);
            }
            self.git(["update-ref", "-d", name])?;
        }
        let _ = std::fs::remove_dir_all(aside);
        Ok(rescued)
    }

    fn say(&self, what: &str) {
        self.out.note(&format!("{}: {what}", self.name));
    }

    /// The clone's repository, its config first put back as farm keeps it
    /// (see [`own_config`]).
    fn repo(&self) -> Result<&Repo, Error> {
        self.own_config()?;
        Ok(&self.raw)
    }

    /// Put `.git/config` back as farm keeps it, if anything changed it
    /// since (see [`own_config`]); said when it did. Reading the file is
    /// all it costs when nothing did: it runs before each of farm's git
    /// commands here.
    fn own_config(&self) -> Result<(), Error> {
        self.restore_config().map_err(|e| {
            Error::failure(format!(
                "cannot put back the git config of the clone `{}`: {e}",
                self.dir().display()
            ))
            .hint("farm makes its clones itself: remove the clone and run again")
        })
    }

    fn restore_config(&self) -> std::io::Result<()> {
        let git_dir = self.dir().join(".git");
        if is_config(&git_dir, &self.config) && !git_dir.join("commondir").exists() {
            return Ok(());
        }
        write_config(self.dir(), &self.config)?;
        self.say(&format!(
            "the clone's git config was changed (by a session?); put back as farm keeps it, \
             with the hub `{}` its only remote",
            self.hub_url
        ));
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        self.raw.dir()
    }

    /// Do `step` in-process (git2): its answer, or `None` when the clone
    /// has no in-process repository or git2 failed — then the caller falls
    /// back to the `git` command, and at `-v` it is said which step did
    /// and git2's error (a fallback is slower, and would hide a git2 bug).
    fn in_process<T>(
        &self,
        step: &str,
        op: impl FnOnce(&Workdir) -> Result<T, git2::Error>,
    ) -> Option<T> {
        let work = self.work.as_ref()?;
        if let Err(e) = self.own_config() {
            self.out.debug(&format!("{}: {step}: {e}", self.name));
            return None;
        }
        match op(work) {
            Ok(t) => Some(t),
            Err(e) => {
                self.out.debug(&self.fallback_note(step, &e));
                None
            }
        }
    }

    /// The `-v` line for an in-process step that failed with `e`.
    fn fallback_note(&self, step: &str, e: &git2::Error) -> String {
        format!(
            "{}: {step} in-process failed ({}); falling back to the git command",
            self.name,
            e.message()
        )
    }

    fn git<const N: usize>(&self, args: [&str; N]) -> Result<String, Error> {
        self.healing(|| self.raw.run(args))
    }

    /// Run git in the clone; whether it succeeded (for commands whose
    /// failure is an answer), healed as [`PrivateClone::git`] is.
    fn check<const N: usize>(&self, args: [&str; N]) -> Result<bool, Error> {
        self.healing(|| self.raw.check(args))
    }

    /// Run `op`; if it failed on a git lock file left in this clone (a git
    /// process of farm's, or of the agent's, killed mid-way while farm went
    /// on) and no git process works here now, remove the stale locks, say
    /// so, and run it once more. This clone is this loop's alone (its
    /// flock), so a lock with no live git behind it is stale, as at
    /// recovery (found by the chaos suite: a run exited 1 on `index.lock`).
    /// A git killed by a signal (the OOM killer, a user) is run once more
    /// the same way: the commands run here read, or write what running
    /// them again writes again (found by the chaos suite: a run exited 1 on
    /// a killed `git commit`).
    fn healing<T>(&self, op: impl Fn() -> Result<T, GitError>) -> Result<T, Error> {
        self.own_config()?;
        match op() {
            Err(e) if e.signal.is_some() || e.said.contains(".lock': File exists") => {
                let alive = self
                    .dir()
                    .canonicalize()
                    .ok()
                    .and_then(|d| git_working_in(&d));
                if alive.is_some() {
                    return Err(e.into());
                }
                self.remove_stale_locks();
                op().map_err(Error::from)
            }
            other => other.map_err(Error::from),
        }
    }

    /// Talk to the hub, patiently: a hub that does not answer is tried
    /// again with backoff, a line said each time.
    fn net<T>(&self, what: &str, op: impl FnMut() -> Result<T, GitError>) -> Result<T, Error> {
        self.own_config()?;
        patiently(what, &|l: &str| self.say(l), op).map_err(Error::from)
    }

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
        // [`borrow_objects`]): fetching is then only setting the ref, and
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
        if !(self.clean.get() && !self.behind.get() && self.head()? == target) {
            self.reset_to(&target)?;
        }
        self.behind.set(false);
        match self.work.as_ref().map(Workdir::clean) {
            Some(Ok(())) => {}
            _ => drop(self.git(["clean", "-ffdxq"])?),
        }
        self.clean.set(true);
        self.tracked.set(true);
        self.files_current()?;
        Ok(target)
    }

    /// Mark the files as not the agent's work, until [`Self::files_current`]
    /// (see [`STALE_FILES`]).
    fn files_stale(&self) -> Result<(), Error> {
        let path = self.dir().join(STALE_FILES);
        std::fs::write(&path, "stale\n")
            .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", path.display())))
    }

    /// The files equal HEAD again (see [`STALE_FILES`]).
    fn files_current(&self) -> Result<(), Error> {
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
    }

    /// HEAD was pushed: unless an in-memory rebase left the work tree behind
    /// it, the next sync to that same commit needs no checkout.
    pub fn pushed(&self) {
        self.clean.set(!self.behind.get());
    }

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
    }

    /// The files HEAD changed since `commit`.
    pub fn changed_since(&self, commit: &str) -> Result<std::collections::BTreeSet<String>, Error> {
        let names = self.git(["diff", "--name-only", "--no-renames", commit, "HEAD"])?;
        Ok(names.lines().map(str::to_owned).collect())
    }

    /// The text of the top-level file `path` at HEAD (`None`: not there).
    pub fn file_at_head(&self, path: &str) -> Result<Option<String>, Error> {
        let read = || -> Result<Option<String>, git2::Error> {
            let repo = git2::Repository::open(self.dir())?;
            let tree = repo.head()?.peel_to_tree()?;
            let Some(entry) = tree.get_name(path) else {
                return Ok(None);
            };
            let blob = repo.find_blob(entry.id())?;
            Ok(Some(String::from_utf8_lossy(blob.content()).into_owned()))
        };
        read().map_err(|e| Error::failure(format!("cannot read `{path}` at HEAD: {e}")))
    }

    /// Commit `text` as the top-level file `path` on top of HEAD, without
    /// the work tree (it may be behind HEAD after an in-memory rebase, and
    /// is left so: marked stale, as such a rebase leaves it).
    pub fn commit_file(&self, path: &str, text: &str, message: &str) -> Result<(), Error> {
        self.files_stale()?;
        let write = || -> Result<(), git2::Error> {
            let repo = git2::Repository::open(self.dir())?;
            let head = repo.head()?.peel_to_commit()?;
            let blob = repo.blob(text.as_bytes())?;
            let mut tree = repo.treebuilder(Some(&head.tree()?))?;
            tree.insert(path, blob, 0o100_644)?;
            let tree = repo.find_tree(tree.write()?)?;
            let me = repo.signature()?;
            repo.commit(Some("HEAD"), &me, &me, message, &tree, &[&head])?;
            Ok(())
        };
        write().map_err(|e| Error::failure(format!("cannot commit `{path}`: {e}")))?;
        self.behind.set(true);
        self.clean.set(false);
        Ok(())
    }

    /// Move HEAD's branch back to `commit` (a commit of farm's own on top
    /// of it dropped), the files left as they are: stale.
    pub fn move_head(&self, commit: &str) -> Result<(), Error> {
        self.files_stale()?;
        self.git(["update-ref", "HEAD", commit])?;
        self.behind.set(true);
        self.clean.set(false);
        Ok(())
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

    /// Stage and commit everything; `false` when there was nothing.
    pub fn commit_all(&self, message: &str) -> Result<bool, Error> {
        let committed = match self.in_process("commit", |w| w.commit_all(message)) {
            Some(committed) => committed,
            None => self.healing(|| self.raw.commit_all(message))?,
        };
        // Everything was staged: the tracked files equal the index.
        self.tracked.set(true);
        Ok(committed)
    }

    /// Commit what a session left uncommitted (its git locks, stale now
    /// that its process group is gone, removed first: a session killed at
    /// its timeout while git held `index.lock` must not wedge the clone).
    pub fn commit_leftovers(&self, name: &str, id: &str) -> Result<bool, Error> {
        self.remove_stale_locks();
        self.commit_all(&format!("farm: work {name} left uncommitted on `{id}`"))
    }

    /// Rebase HEAD onto `upstream`: in memory when it can be, else with
    /// `git rebase` (aborted on conflict). False on conflict.
    pub fn rebase(&self, upstream: &str) -> Result<bool, Error> {
        let before = self.head()?;
        // HEAD may move without the files.
        self.files_stale()?;
        let in_memory = self.in_process("rebase", |w| w.rebase(upstream));
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
        if self.repo()?.check(["rebase", "--quiet", upstream])? {
            return Ok(true);
        }
        self.repo()?.check(["rebase", "--abort"])?;
        Ok(false)
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

    /// An agent must not change `current_tasks/`; if its commits did, put
    /// the directory back as it was (claims live in the hub, not here).
    pub fn undo_claim_tampering(&self, base: &str, name: &str) -> Result<(), Error> {
        let dir = crate::names::CLAIMS_DIR;
        let head = self.head()?;
        let same = match self.in_process("diff", |w| w.same_at(base, &head, dir)) {
            Some(same) => same,
            None => self
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
            .repo()?
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
    pub fn fresh_task(&self, hub: &Hub, id: &crate::names::TaskId) -> Result<Option<Task>, Error> {
        self.sync(hub)?;
        let Ok(text) = std::fs::read_to_string(self.dir().join(board::paths::pending(id))) else {
            return Ok(None);
        };
        let Ok(task) = board::parse(id.clone(), &text) else {
            return Ok(None);
        };
        let ready = task
            .after
            .iter()
            .all(|dep| self.dir().join(board::paths::done(dep)).is_file());
        Ok(ready.then_some(task))
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

    /// Push HEAD to the hub's `branch` through `store`, while `held` is
    /// still ours (see [`ClaimStore::publish`]); `hold` is kept open by
    /// the push's processes (the hub's push lock).
    pub fn publish(
        &self,
        store: &dyn ClaimStore,
        held: &Held,
        branch: &str,
        hold: &[BorrowedFd<'_>],
    ) -> Result<Published, StoreError> {
        let spec = [format!("HEAD:refs/heads/{branch}")];
        self.restore_config().map_err(|source| StoreError::Io {
            action: "put back the git config of",
            path: self.dir().to_owned(),
            source,
        })?;
        store.publish(held, &self.raw, &self.hub_url, &spec, hold)
    }

    /// Resolve a merge that stopped on task `id`'s own files alone: someone
    /// edited its pending file on the branch while the session moved it to
    /// done. Their text is kept, moved to done with the session's result,
    /// and the merge committed. False, nothing done, when any other file is
    /// in conflict or either side lacks its file.
    pub fn resolve_own_task(
        &self,
        id: &crate::names::TaskId,
        upstream: &str,
    ) -> Result<bool, Error> {
        let (pending, done) = (board::paths::pending(id), board::paths::done(id));
        let conflicts = self.conflicts()?;
        if conflicts.is_empty() || !conflicts.iter().all(|f| *f == pending || *f == done) {
            return Ok(false);
        }
        let (Some(theirs), Some(ours)) = (
            self.repo()?.file_at(upstream, &pending)?,
            self.repo()?.file_at("HEAD", &done)?,
        ) else {
            return Ok(false);
        };
        let Some(text) = board::edit::done_over(&theirs, &ours) else {
            return Ok(false);
        };
        std::fs::write(self.dir().join(&done), format!("{}\n", text.trim_end()))
            .map_err(io_error)?;
        let _ = std::fs::remove_file(self.dir().join(&pending));
        self.git(["add", "--all", "--", &pending, &done])?;
        if !self.conflicts()?.is_empty() {
            return Ok(false);
        }
        self.commit_merge()?;
        Ok(true)
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

    pub fn count_since(&self, upstream: &str) -> Result<usize, Error> {
        if let Some(n) = self.in_process("count", |w| w.count_since(upstream)) {
            return Ok(n);
        }
        Ok(self
            .git(["rev-list", "--count", &format!("{upstream}..HEAD")])?
            .parse()
            .unwrap_or(0))
    }

    /// Move `tasks/<id>.md` to `tasks/done/<id>.md` with a short result,
    /// after the session that did it (its stale git locks removed first, as
    /// for [`PrivateClone::commit_leftovers`]).
    pub fn mark_done(
        &self,
        task: &Task,
        name: &str,
        attempt: u32,
        log: &Path,
    ) -> Result<(), Error> {
        self.remove_stale_locks();
        let id = task.id.as_str();
        let result = format!(
            "Done by {name}@{} on attempt {attempt}, {}. Session log: {}",
            Here::current().host,
            timestamp(SystemTime::now()),
            log.display()
        );
        let task_files = board::edit::done(self.dir(), task, &result).map_err(io_error)?;
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
        if self.in_process("commit", |w| w.commit(&message)).is_some() {
            return Ok(());
        }
        self.git(["commit", "--quiet", "--no-verify", "-m", &message])?;
        Ok(())
    }

    /// Stage everything (`git add --all`); the paths that differ from HEAD.
    fn stage_all(&self) -> Result<Vec<String>, Error> {
        let paths = match self.in_process("staging", Workdir::stage_all) {
            Some(paths) => paths,
            None => {
                self.git(["add", "--all"])?;
                self.git(["diff", "--cached", "--name-only", "--no-renames", "HEAD"])?
                    .lines()
                    .map(str::to_owned)
                    .collect()
            }
        };
        self.tracked.set(true);
        Ok(paths)
    }

    pub fn has_markers(&self, files: &[String]) -> bool {
        files.iter().any(|f| {
            std::fs::read_to_string(self.dir().join(f)).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> "))
            })
        })
    }

    /// Push HEAD to the hub's `branch` plainly, under no claim (a board
    /// edit of the run's own: a standing task armed); whether the branch
    /// took it or had moved on.
    pub fn push_branch(&self, branch: &str) -> Result<Pushed, Error> {
        let spec = [format!("HEAD:refs/heads/{branch}")];
        self.net("pushing", || self.raw.push(&self.hub_url, &spec))
    }

    /// Push a commit to a new branch on the hub (a rescue branch).
    pub fn push_ref(&self, commit: &str, branch: &str) -> Result<(), Error> {
        let spec = [format!("{commit}:refs/heads/{branch}")];
        match self.net("pushing a rescue branch", || {
            self.raw.push(&self.hub_url, &spec)
        })? {
            Pushed::Ok => Ok(()),
            Pushed::Rejected(r) => {
                let why: Vec<String> = r.iter().map(|(to, why)| format!("{to}: {why}")).collect();
                Err(Error::failure(format!(
                    "the hub refused `{branch}`: {}",
                    why.join("; ")
                )))
            }
        }
    }
}

/// A git operation that can be left half-done in a clone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Rebase,
    Am,
    Merge,
    CherryPick,
    Revert,
}

impl Operation {
    /// The operation whose state git keeps in `git_dir`, if any.
    fn found(git_dir: &Path) -> Option<Operation> {
        let has = |f: &str| git_dir.join(f).exists();
        if has("rebase-merge") {
            Some(Operation::Rebase)
        } else if has("rebase-apply/applying") {
            Some(Operation::Am)
        } else if has("rebase-apply") {
            Some(Operation::Rebase)
        } else if has("MERGE_HEAD") {
            Some(Operation::Merge)
        } else if has("REVERT_HEAD") {
            Some(Operation::Revert)
        } else if has("CHERRY_PICK_HEAD") || has("sequencer") {
            Some(Operation::CherryPick)
        } else {
            None
        }
    }

    /// The git command that does it (and takes `--abort`).
    fn command(self) -> &'static str {
        match self {
            Operation::Rebase => "rebase",
            Operation::Am => "am",
            Operation::Merge => "merge",
            Operation::CherryPick => "cherry-pick",
            Operation::Revert => "revert",
        }
    }
}

/// The longest wait for git processes an earlier farm left in a clone.
const GIT_LEFT_SETTLES: Duration = Duration::from_secs(600);

/// Wait (up to [`GIT_LEFT_SETTLES`], saying so once) until no git process
/// works in the clone at `dir`: a killed farm's `git push` outlives it and
/// may still land, so until it is gone its locks are not stale, and the
/// commits it pushes are not to be rescued (the chaos suite saw an orphan
/// rescue of a tip that landed on main just after). Only git processes
/// count (a user's shell may sit in a clone); read from `/proc`, so on a
/// system without it there is nothing to wait for. (The hub's side of such
/// a push, a `receive-pack` on this machine whose pusher was killed too,
/// keeps the hub's push lock, which `recover` waits for.)
fn wait_for_git_left_in(dir: &Path, say: &dyn Fn(&str)) {
    let Ok(dir) = dir.canonicalize() else {
        return;
    };
    let start = std::time::Instant::now();
    let mut said = false;
    while let Some(pid) = git_working_in(&dir) {
        if start.elapsed() > GIT_LEFT_SETTLES {
            say(&format!(
                "git (process {pid}) still works in this clone after {}s; going on",
                GIT_LEFT_SETTLES.as_secs()
            ));
            return;
        }
        if !said {
            say(&format!(
                "waiting for git (process {pid}), left working in this clone by an earlier run"
            ));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A git process (other than this one) whose working directory is in `dir`.
fn git_working_in(dir: &Path) -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            let comm = comm.trim();
            if pid == me || !(comm == "git" || comm.starts_with("git-")) {
                return None;
            }
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            cwd.starts_with(dir).then_some(pid)
        })
}

/// Remove the git lock files in the clone at `dir`, each named through
/// `say`: stale once the clone's flock is ours and its session's group is
/// gone (see `PrivateClone::recover`), and each one left would fail every
/// later git command here.
fn remove_stale_locks(dir: &Path, say: &dyn Fn(&str)) {
    let git_dir = dir.join(".git");
    let mut locks = Vec::new();
    lock_files(&git_dir, false, &mut locks);
    lock_files(&git_dir.join("refs"), true, &mut locks);
    for lock in locks {
        match std::fs::remove_file(&lock) {
            Ok(()) => say(&format!(
                "removed `{}`, a stale git lock (no process works in this clone now)",
                lock.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => say(&format!(
                "cannot remove the stale git lock `{}`: {e}",
                lock.display()
            )),
        }
    }
}

/// Collect the `*.lock` files in `dir` (and below it when `deep`) into
/// `out`. Symlinks are not followed.
fn lock_files(dir: &Path, deep: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if deep {
                lock_files(&path, deep, out);
            }
        } else if path.extension().is_some_and(|e| e == "lock") {
            out.push(path);
        }
    }
}

/// The settings of a clone's `.git/config` kept from what is there when it
/// is opened: the repository's format (git cannot read it without them),
/// the file system's traits git probed when it cloned, and the commit
/// identity. None of them names a remote, a program, a hook, a filter, a
/// pager, an editor, another file to read or another work tree.
const KEPT: [&str; 8] = [
    "core.repositoryformatversion",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "extensions.objectformat",
    "user.name",
    "user.email",
];

/// Write the clone at `dir` a `.git/config` of farm's own: the [`KEPT`]
/// settings of the one there, the hub as its only remote (`origin`), and
/// `settings`; nothing else.
///
/// farm owns its clones' config because an agent works in the clone and
/// git obeys that file: `remote.origin.pushurl` or `url`, `url.*.insteadOf`
/// or `pushInsteadOf` sent the work and its rescue branches to the agent's
/// own repository (and farm said "integrated"); `core.hooksPath`,
/// `core.fsmonitor`, `core.sshCommand`, `core.gitProxy`, `credential.*`,
/// `filter.*`, `diff.external`, `core.pager`, `core.editor`,
/// `sequence.editor`, `gpg.program`, `merge.*.driver`, `remote.*.uploadpack`
/// and `receivepack`, `include.*` and `includeIf.*` (another file, or a
/// FIFO that hangs every git), `core.worktree` and `extensions.*` —
/// each runs a command, reads another file, or points git elsewhere, and
/// the list grows with git. So it is not a list of what to remove but of
/// what to keep. Read with `--no-includes`, from outside the clone: its
/// own git must not follow what it names. A `commondir` file (which would
/// make the clone read another repository's config) is removed.
fn own_config(dir: &Path, hub: &Hub, settings: &[(&str, &str)]) -> Result<(), Error> {
    let path = dir.join(".git/config");
    let listed = Repo::new(std::env::temp_dir()).run_input(
        [
            OsStr::new("config"),
            OsStr::new("--file"),
            path.as_os_str(),
            OsStr::new("--no-includes"),
            OsStr::new("--null"),
            OsStr::new("--list"),
        ],
        &[],
        b"",
    );
    // A config git cannot parse keeps nothing: a repository of the default
    // format then, which `usable` judges.
    let listed = listed.unwrap_or_default();
    let kept: Vec<(String, String)> = listed
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            let (key, value) = entry.split_once('\n').unwrap_or((&entry, ""));
            let key = key.to_ascii_lowercase();
            KEPT.iter()
                .find(|k| k.eq_ignore_ascii_case(&key))
                .map(|k| ((*k).to_owned(), value.to_owned()))
        })
        .collect();
    let text = config_text(&kept, &hub.url, &hub.branch, settings);
    write_config(dir, text.as_bytes()).map_err(|e| {
        Error::failure(format!("cannot write `{}`: {e}", path.display()))
            .hint("farm makes its clones itself: remove the clone and run again")
    })
}

/// The text of a clone's config as farm keeps it (see [`own_config`]).
fn config_text(
    kept: &[(String, String)],
    url: &str,
    branch: &str,
    settings: &[(&str, &str)],
) -> String {
    let last = |key: &str| {
        kept.iter()
            .rfind(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let boolean = |key: &str| last(key).filter(|v| matches!(*v, "true" | "false"));
    let format = last("extensions.objectformat").filter(|v| matches!(*v, "sha1" | "sha256"));
    let mut text = String::from("[core]\n");
    let version = if format.is_some() { "1" } else { "0" };
    text.push_str(&format!("\trepositoryformatversion = {version}\n"));
    text.push_str(&format!(
        "\tfilemode = {}\n",
        boolean("core.filemode").unwrap_or("true")
    ));
    text.push_str("\tbare = false\n\tlogallrefupdates = true\n");
    for key in ["symlinks", "ignorecase", "precomposeunicode"] {
        if let Some(v) = boolean(&format!("core.{key}")) {
            text.push_str(&format!("\t{key} = {v}\n"));
        }
    }
    if let Some(format) = format {
        text.push_str(&format!("[extensions]\n\tobjectformat = {format}\n"));
    }
    let user: Vec<(&str, &str)> = ["name", "email"]
        .into_iter()
        .filter_map(|k| Some((k, last(&format!("user.{k}"))?)))
        .collect();
    if !user.is_empty() {
        text.push_str("[user]\n");
        for (k, v) in user {
            text.push_str(&format!("\t{k} = {}\n", quoted(v)));
        }
    }
    text.push_str(&format!(
        "[remote \"origin\"]\n\turl = {}\n\tfetch = {}\n\ttagOpt = --no-tags\n",
        quoted(url),
        quoted(&format!(
            "+refs/heads/{branch}:refs/remotes/origin/{branch}"
        ))
    ));
    let mut section = "";
    for (key, value) in settings {
        let (sect, name) = key.split_once('.').unwrap_or((key, ""));
        if sect != section {
            text.push_str(&format!("[{sect}]\n"));
            section = sect;
        }
        text.push_str(&format!("\t{name} = {}\n", quoted(value)));
    }
    text
}

/// `value` as a git config value: quoted, with `"`, `\\` and control
/// characters escaped.
fn quoted(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether `git_dir/config` is a plain file holding `text`.
fn is_config(git_dir: &Path, text: &[u8]) -> bool {
    let path = git_dir.join("config");
    std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file())
        && std::fs::read(&path).is_ok_and(|now| now == text)
}

/// Replace the clone's `.git/config` with `text`, as git does: written to
/// `config.lock` (created exclusively) and renamed over it (a symlink
/// there is replaced, not followed). A `config.lock` with no git working
/// in the clone is stale (the clone is this loop's alone) and removed.
fn write_config(dir: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let git_dir = dir.join(".git");
    let lock = git_dir.join("config.lock");
    let _ = std::fs::remove_file(git_dir.join("commondir"));
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
    {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let alive = dir.canonicalize().ok().and_then(|d| git_working_in(&d));
            if let Some(pid) = alive {
                return Err(std::io::Error::other(format!(
                    "`{}` is held by git (pid {pid})",
                    lock.display()
                )));
            }
            std::fs::remove_file(&lock)?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)?
        }
        opened => opened?,
    };
    let written = file.write_all(text).and_then(|()| file.sync_data());
    drop(file);
    match written.and_then(|()| std::fs::rename(&lock, git_dir.join("config"))) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            Err(e)
        }
    }
}

/// Whether `dir` holds a clone farm can work in (or nothing at all); why
/// not, when it does not: a directory that is not a repository, a `.git`
/// git cannot open, a HEAD that names no readable commit. (Opened by git2
/// at `dir` itself: a broken `.git` must not make git look further up,
/// where a hub's own repository may be.)
fn usable(dir: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err("it is not a directory".to_owned());
    }
    let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
    if empty {
        return Ok(());
    }
    if !std::fs::symlink_metadata(dir.join(".git")).is_ok_and(|m| m.is_dir()) {
        return Err("it is not a clone: no `.git` directory".to_owned());
    }
    let repo =
        git2::Repository::open(dir).map_err(|e| format!("git cannot open it: {}", e.message()))?;
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|e| format!("its HEAD names no commit: {}", e.message()))?;
    commit
        .tree()
        .map_err(|e| format!("its HEAD's files cannot be read: {}", e.message()))?;
    // The index is a cache of HEAD and the files: one git cannot read is
    // made again from them (what differs from HEAD is then still seen).
    if repo.index().is_err() {
        let _ = std::fs::remove_file(dir.join(".git/index"));
    }
    Ok(())
}

/// Move a broken clone at `dir` aside, next to it, for its commits to be
/// salvaged from there; where it went.
fn set_aside(dir: &Path, why: &str, say: &dyn Fn(&str)) -> Result<PathBuf, Error> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(format!(".broken-{stamp}"));
    let aside = dir.with_file_name(name);
    std::fs::rename(dir, &aside).map_err(|e| {
        Error::failure(format!(
            "cannot move the broken clone `{}` aside: {e}",
            dir.display()
        ))
        .hint("move it away; farm makes its clones itself")
    })?;
    say(&format!(
        "`{}` was no usable clone ({why}); moved it to `{}` and cloning again",
        dir.display(),
        aside.display()
    ));
    Ok(aside)
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
    use crate::git::hub::HubSpec;
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

    /// Regression (issue 10, found by the chaos suite): a git process
    /// killed mid-run left `index.lock` in the clone, and farm's next git
    /// command there failed the run. With no git working in the clone, the
    /// lock is stale: removed, and the command run again.
    /// Issue 11, item 2: a git2 step that fails is answered by the git
    /// command (`None` here) and said at -v, naming the step and the error.
    #[test]
    fn a_failed_in_process_step_falls_back_and_names_the_step_and_the_error() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, _, clone) = hub_and_clone(tmp.path());
        assert_eq!(clone.in_process("count", |_| Ok(3)), Some(3));
        let failed: Option<()> =
            clone.in_process("staging", |_| Err(git2::Error::from_str("bad index")));
        assert_eq!(failed, None);
        assert_eq!(
            clone.fallback_note("staging", &git2::Error::from_str("bad index")),
            "a: staging in-process failed (bad index); falling back to the git command"
        );
    }

    #[test]
    fn a_stale_index_lock_left_mid_run_is_removed_and_the_command_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let (_hub_git, _hub, clone) = hub_and_clone(tmp.path());
        let d = clone.dir().to_path_buf();
        write(&d, "new.txt", "new\n");
        std::fs::write(d.join(".git/index.lock"), "").unwrap();
        clone.git(["add", "--all"]).unwrap();
        assert!(!d.join(".git/index.lock").exists());
        assert_eq!(
            clone.git(["diff", "--cached", "--name-only"]).unwrap(),
            "new.txt"
        );
    }

    /// A clone's lock held by this very process is named as such (a clone
    /// not let go: farm's bug), not as "another farm run".
    #[test]
    fn a_clone_lock_held_by_this_process_is_said_so() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("clones/a");
        let held = lock_clone(&dir, "a").unwrap();
        let e = lock_clone(&dir, "a").unwrap_err();
        assert!(
            e.message.contains("is still held by this farm run")
                && e.message.contains("one of its clones was not let go"),
            "{e}"
        );
        drop(held);
        assert!(lock_clone(&dir, "a").is_ok());
    }

    /// The progress document is committed on top of HEAD without the work
    /// tree, comes off again, and alone is nothing to rescue; the sync after
    /// it leaves exactly the branch.
    #[test]
    fn a_progress_commit_is_farms_own_and_no_work_to_rescue() {
        let tmp = tempfile::tempdir().unwrap();
        let (_hub_git, hub, clone) = hub_and_clone(tmp.path());
        let upstream = "origin/main";
        let base = clone.head().unwrap();
        let subject = format!("{}`t` by a", crate::run::progress::SUBJECT);
        clone
            .commit_file("PROGRESS.md", "# Progress\n", &subject)
            .unwrap();
        assert_eq!(
            clone.file_at_head("PROGRESS.md").unwrap().as_deref(),
            Some("# Progress\n")
        );
        assert!(
            !clone.dir().join("PROGRESS.md").exists(),
            "the work tree is left alone"
        );
        assert!(!clone.has_own_commits(upstream, "HEAD").unwrap());
        // With work under it, there is work to rescue.
        clone.move_head(&base).unwrap();
        assert_eq!(clone.head().unwrap(), base);
        write(clone.dir(), "c.txt", "c\n");
        clone.commit_all("work").unwrap();
        clone
            .commit_file("PROGRESS.md", "# Progress\n", &subject)
            .unwrap();
        assert!(clone.has_own_commits(upstream, "HEAD").unwrap());
        clone.sync(&hub).unwrap();
        assert!(!clone.dir().join("c.txt").exists());
        assert_eq!(clone.head().unwrap(), base);
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

    /// The hub's `farm/rescue/*` branches: `(name, commit)`.
    fn rescues(hub_git: &Repo) -> Vec<(String, String)> {
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
    fn reopen(tmp: &Path, hub: &Hub, clone: PrivateClone) -> PrivateClone {
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

    /// Regression (issue 10, item 9): killed after an in-memory rebase, the
    /// index and the work tree still show the commit before; recovery must
    /// not commit that (it reverts what the branch gained) but rescue the
    /// rebased commit as it is.
    #[test]
    fn recovery_after_an_in_memory_rebase_rescues_the_commit_not_a_revert() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub_git, hub, clone) = hub_and_clone(tmp.path());
        let (h, d) = (hub_git.dir().to_path_buf(), clone.dir().to_path_buf());
        write(&d, "mine.txt", "mine\n");
        assert!(clone.commit_all("mine").unwrap());
        write(&h, "c.txt", "c\n");
        hub_git.commit_all("theirs: c").unwrap();
        clone.fetch_if_moved(&hub).unwrap();
        assert!(clone.rebase("origin/main").unwrap());
        assert!(clone.behind.get() && !d.join("c.txt").exists());
        let rebased = clone.head().unwrap();

        let clone = reopen(tmp.path(), &hub, clone);
        let rescued = rescues(&hub_git);
        assert_eq!(rescued.len(), 1, "{rescued:?}");
        assert_eq!(rescued[0].1, rebased, "the rebased commit itself");
        assert_eq!(clone.rescued().len(), 1);
        assert_eq!(
            hub_git.run(["show", &format!("{rebased}:c.txt")]).unwrap(),
            "c"
        );

        // Pushed as it is, the next start finds nothing of the agent's.
        hub_git
            .run(["merge", "--quiet", "--ff-only", &rebased])
            .unwrap();
        hub_git
            .run([
                "branch",
                "-D",
                "--quiet",
                rescued[0].0.trim_start_matches("refs/heads/"),
            ])
            .unwrap();
        let clone = reopen(tmp.path(), &hub, clone);
        assert_eq!(rescues(&hub_git), [], "nothing more to rescue");
        assert!(clone.rescued().is_empty());
    }

    /// Regression (issue 10, chaos seed 1796118514433852574, round 1): a
    /// farm killed while a sync rewrote the files — a file the branch
    /// changed removed and not yet written again — left them neither at the
    /// commit before nor at the branch. The next farm committed them (a
    /// commit that undid the branch's last task) and pushed it as a rescue.
    #[test]
    fn recovery_of_a_sync_killed_mid_checkout_rescues_nothing() {
        for point in ["checkout: a file removed", "sync: the ref moved"] {
            let tmp = tempfile::tempdir().unwrap();
            let (hub_git, hub, clone) = hub_and_clone(tmp.path());
            let (h, d) = (hub_git.dir().to_path_buf(), clone.dir().to_path_buf());
            write(&h, "a.txt", "one\ntwo\nTHREE\n");
            std::fs::remove_file(h.join("b.txt")).unwrap();
            write(&h, "c.txt", "c\n");
            hub_git.commit_all("theirs").unwrap();
            crate::git::workdir::stop::at(point);
            let killed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| clone.sync(&hub)));
            assert!(killed.is_err(), "{point}: the sync was stopped");

            let clone = reopen(tmp.path(), &hub, clone);
            assert_eq!(rescues(&hub_git), [], "{point}: nothing of the agent's");
            assert!(clone.rescued().is_empty(), "{point}");
            assert_eq!(
                clone.git(["status", "--porcelain"]).unwrap(),
                "",
                "{point}: the files are back at HEAD"
            );
            clone.sync(&hub).unwrap();
            assert_eq!(
                std::fs::read_to_string(d.join("a.txt")).unwrap(),
                "one\ntwo\nTHREE\n",
                "{point}"
            );
            assert!(
                !d.join("b.txt").exists() && d.join("c.txt").exists(),
                "{point}"
            );
        }
    }

    /// What an agent left uncommitted is still its own after farm moved the
    /// clone's HEAD in earlier turns: committed and rescued.
    #[test]
    fn recovery_rescues_uncommitted_work_of_the_agents() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub_git, hub, clone) = hub_and_clone(tmp.path());
        let (h, d) = (hub_git.dir().to_path_buf(), clone.dir().to_path_buf());
        write(&h, "c.txt", "c\n");
        hub_git.commit_all("theirs: c").unwrap();
        clone.sync(&hub).unwrap();
        write(&d, "a.txt", "one\ntwo\nmine\n");
        let clone = reopen(tmp.path(), &hub, clone);
        let rescued = rescues(&hub_git);
        assert_eq!(rescued.len(), 1, "{rescued:?}");
        let tip = &rescued[0].1;
        assert_eq!(
            hub_git.run(["show", &format!("{tip}:a.txt")]).unwrap(),
            "one\ntwo\nmine"
        );
        assert_eq!(hub_git.run(["show", &format!("{tip}:c.txt")]).unwrap(), "c");
        assert_eq!(
            clone.rescued(),
            [rescued[0].0.trim_start_matches("refs/heads/")]
        );
    }

    /// Regression (issue 10, item 9): a rescue holds only commits the
    /// branch lacks — one whose patch landed meanwhile is left out.
    #[test]
    fn recovery_rescues_only_commits_the_branch_lacks() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub_git, hub, clone) = hub_and_clone(tmp.path());
        let (h, d) = (hub_git.dir().to_path_buf(), clone.dir().to_path_buf());
        write(&d, "x.txt", "x\n");
        assert!(clone.commit_all("landed elsewhere").unwrap());
        write(&d, "y.txt", "y\n");
        assert!(clone.commit_all("mine alone").unwrap());
        write(&h, "x.txt", "x\n");
        hub_git.commit_all("the same patch, on main").unwrap();
        let _clone = reopen(tmp.path(), &hub, clone);
        let rescued = rescues(&hub_git);
        assert_eq!(rescued.len(), 1, "{rescued:?}");
        let range = format!("main..{}", rescued[0].1);
        assert_eq!(
            hub_git.run(["log", "--format=%s", &range]).unwrap(),
            "mine alone"
        );
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
