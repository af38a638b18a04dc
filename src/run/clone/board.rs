//! The board as the clone sees it: a task read fresh from the hub's branch,
//! moved to done with its result, its own files' conflict resolved, and the
//! claims directory put back when an agent's commits changed it.

use std::path::Path;
use std::time::SystemTime;

use super::PrivateClone;
use crate::board::{self, Task};
use crate::claims::host::Here;
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::git::hub::Hub;

impl PrivateClone {
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

    /// Put task `id`'s board files (pending, done, failed) back as they are
    /// at `base`, in a commit of farm's own, where HEAD's commits changed
    /// them: work landed by hand leaves its task where the branch has it.
    /// Whether there was anything to put back.
    pub fn keep_task_as_at(&self, base: &str, id: &crate::names::TaskId) -> Result<bool, Error> {
        let files = board::paths::Place::ALL.map(|p| p.file(id));
        let head = self.head()?;
        let mut args = vec!["diff", "--name-only", "--no-renames", base, &head, "--"];
        args.extend(files.iter().map(String::as_str));
        let changed = self.repo()?.run(args).map_err(Error::from)?;
        let changed: Vec<&str> = changed.lines().filter(|l| !l.is_empty()).collect();
        if changed.is_empty() {
            return Ok(false);
        }
        for file in &changed {
            self.git(["rm", "--quiet", "--cached", "--ignore-unmatch", "--", file])?;
            let _ = std::fs::remove_file(self.dir().join(file));
            if self.check(["cat-file", "-e", &format!("{base}:{file}")])? {
                self.git(["checkout", base, "--", file])?;
            }
        }
        self.commit_all(&format!("farm: `{id}` left where the branch has it"))?;
        Ok(true)
    }

    /// Task `id` as the hub's branch has it pending now, ready or not,
    /// with the clone reset to the branch; `None` when it is not pending
    /// there (done, failed, gone, or its file does not parse).
    pub fn pending_task(
        &self,
        hub: &Hub,
        id: &crate::names::TaskId,
    ) -> Result<Option<Task>, Error> {
        self.sync(hub)?;
        let Ok(text) = std::fs::read_to_string(self.dir().join(board::paths::pending(id))) else {
            return Ok(None);
        };
        Ok(board::parse(id.clone(), &text).ok())
    }

    /// The task as it is on the hub's branch now, with the clone reset to
    /// it — a clean slate for the session; `None` when it is not ready
    /// there: no longer pending, waiting for a task that is not done on the
    /// branch yet, or for the answer to a question. (A hub's work tree shows a push before its branch
    /// does: receive-pack updates the files, then the ref.)
    pub fn fresh_task(&self, hub: &Hub, id: &crate::names::TaskId) -> Result<Option<Task>, Error> {
        let Some(task) = self.pending_task(hub, id)? else {
            return Ok(None);
        };
        // A question asked meanwhile (`farm answer` not given yet) holds it.
        // So does a change waiting for review (`farm approve` not given yet).
        let ready = task.asked.is_none()
            && (task.change.is_none() || task.approved.is_some())
            && task
                .after
                .iter()
                .all(|dep| self.dir().join(board::paths::done(dep)).is_file());
        Ok(ready.then_some(task))
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
        let result = format!(
            "Done by {name}@{} on attempt {attempt}, {}. Session log: {}",
            Here::current().host,
            timestamp(SystemTime::now()),
            log.display()
        );
        self.mark_done_saying(task, name, &result)
    }

    /// Move `tasks/<id>.md` to `tasks/done/<id>.md` with `result` under
    /// `## Result`, as [`Self::mark_done`] does after a session; with what
    /// is left uncommitted (by `name`) in the same commit.
    pub fn mark_done_saying(&self, task: &Task, name: &str, result: &str) -> Result<(), Error> {
        self.remove_stale_locks();
        let id = task.id.as_str();
        let task_files = board::edit::done(self.dir(), task, result).map_err(io_error)?;
        let staged = self.stage_all()?;
        let leftovers: Vec<&str> = staged
            .iter()
            .map(String::as_str)
            .filter(|f| !task_files.iter().any(|t| t == f))
            .collect();
        let message = if leftovers.is_empty() {
            format!("farm: `{id}` done")
        } else {
            format!(
                "farm: `{id}` done, with the work {name} left uncommitted\n\n{}\n",
                leftovers.join("\n")
            )
        };
        if self
            .in_process("commit", |w| w.commit(&message, &staged))
            .is_some()
        {
            return Ok(());
        }
        self.git(["commit", "--quiet", "--no-verify", "-m", &message])?;
        Ok(())
    }
}

/// An I/O error reading or writing a task file, in farm's words, with
/// the error it came from kept (shown at `-v`).
pub(crate) fn io_error(e: std::io::Error) -> Error {
    Error::failure(format!("cannot edit a task file: {e}")).caused_by(e)
}
