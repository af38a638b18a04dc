//! How farm runs git in the clone: in-process (git2) when it can, else the
//! `git` command; the config put back as farm keeps it first; a command
//! that failed on a stale git lock, or was killed, healed and run once
//! more; and the hub, talked to patiently.

use super::PrivateClone;
use super::git_procs::git_working_in;
use crate::error::Error;
use crate::git::command::GitError;
use crate::git::retry::patiently;
use crate::git::workdir::Workdir;

impl PrivateClone {
    /// Do `step` in-process (git2): its answer, or `None` when the clone
    /// has no in-process repository or git2 failed — then the caller falls
    /// back to the `git` command, and at `-v` it is said which step did
    /// and git2's error (a fallback is slower, and would hide a git2 bug).
    pub(super) fn in_process<T>(
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

    /// Read from the clone's repository with `read`: through the open one
    /// where the clone has it, whose cache keeps the board's large trees
    /// parsed from one read to the next; else one opened for it.
    pub fn reading<T>(
        &self,
        read: impl FnOnce(&git2::Repository) -> Result<T, git2::Error>,
    ) -> Result<T, git2::Error> {
        match &self.work {
            Some(work) => read(work.repo()),
            None => read(&git2::Repository::open(self.dir())?),
        }
    }

    /// Let go of the packs farm's upkeep deleted since the in-process
    /// repository was opened, here or in a hub on this machine (see
    /// [`Workdir::let_go_of_deleted_packs`]): after each integration, once
    /// the upkeeps it started may have deleted some.
    pub fn let_go_of_deleted_packs(&mut self) {
        if let Some(work) = &mut self.work
            && let Err(e) = work.let_go_of_deleted_packs()
        {
            self.out
                .debug(&self.fallback_note("opening the repository again", &e));
        }
    }

    /// The `-v` line for an in-process step that failed with `e`.
    pub(super) fn fallback_note(&self, step: &str, e: &git2::Error) -> String {
        format!(
            "{}: {step} in-process failed ({}); falling back to the git command",
            self.name,
            e.message()
        )
    }

    /// Run git in the clone; what it printed. Healed of a stale lock or a
    /// kill, see [`PrivateClone::healing`].
    pub(super) fn git<const N: usize>(&self, args: [&str; N]) -> Result<String, Error> {
        self.healing(|| self.raw.run(args))
    }

    /// Run git in the clone; whether it succeeded (for commands whose
    /// failure is an answer), healed as [`PrivateClone::git`] is.
    pub(super) fn check<const N: usize>(&self, args: [&str; N]) -> Result<bool, Error> {
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
    pub(super) fn healing<T>(&self, op: impl Fn() -> Result<T, GitError>) -> Result<T, Error> {
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
                let mut again = Err(e);
                for _ in 0..crate::git::killed::HEALED_AGAIN {
                    again = op();
                    if !matches!(&again, Err(e) if e.signal.is_some()) {
                        break;
                    }
                }
                again.map_err(Error::from)
            }
            other => other.map_err(Error::from),
        }
    }

    /// Talk to the hub, patiently: a hub that does not answer is tried
    /// again with backoff, a line said each time.
    pub(super) fn net<T>(
        &self,
        what: &str,
        op: impl FnMut() -> Result<T, GitError>,
    ) -> Result<T, Error> {
        self.own_config()?;
        patiently(what, &|l: &str| self.say(l), op).map_err(Error::from)
    }
}

#[cfg(test)]
mod tests {
    use crate::run::clone::fixture::*;

    /// A git2 step that fails is answered by the git command (`None` here)
    /// and said at -v, naming the step and the error: a silent fallback is
    /// slower, and would hide a git2 bug.
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

    /// Regression (found by the chaos suite): a git process killed mid-run
    /// left `index.lock` in the clone, and farm's next git command there
    /// failed the run. With no git working in the clone, the lock is stale:
    /// removed, and the command run again.
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
}
