//! Arming a role's standing task (see [`roles`](super::roles)): when an
//! agent of the role finds nothing it may claim, it puts the role's
//! standing task on the board — `standing-<role>-<n>`, the next number —
//! unless one is pending already; then claims it as any other.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::board::edit::{self, Edit, Push, Tx};
use crate::board::{self, paths};
use crate::error::Error;
use crate::git::command::Pushed;
use crate::names::TaskId;
use crate::run::clone::PrivateClone;
use crate::run::integrate::{after_rejection, push_rounds};
use crate::run::roles::{Role, STANDING};
use crate::run::state::Run;

/// The hub's branch as the arming edits it: the clone, synced under the
/// hub's push lock, pushed plainly (no claim: the task is new).
struct Plain<'a> {
    run: &'a Run,
    clone: &'a PrivateClone,
}

impl edit::Branch for Plain<'_> {
    type Error = Error;
    type Round = Option<std::fs::File>;

    fn checkout(&mut self, round: usize) -> Result<(PathBuf, Self::Round), Error> {
        if round > 0 {
            after_rejection(self.run, round);
        }
        let lock = self.run.hub.push_lock(self.run.out)?;
        self.clone.sync(&self.run.hub)?;
        Ok((self.clone.dir().to_path_buf(), lock))
    }

    fn publish(&mut self, lock: Self::Round, message: &str) -> Result<Push, Error> {
        self.clone.commit_all(message)?;
        let hold: Vec<_> = lock.as_ref().map(AsFd::as_fd).into_iter().collect();
        let pushed = self.clone.push_branch(&self.run.hub.branch, &hold)?;
        drop(lock);
        if pushed == Pushed::Ok {
            Ok(Push::Pushed)
        } else if pushed.only_moved() {
            Ok(Push::Rejected)
        } else {
            Err(Error::failure(format!(
                "the hub refused a standing task: {pushed:?}"
            )))
        }
    }
}

/// Put `role`'s standing task on the board unless one of its is pending;
/// the id added (`None`: one was there).
pub(super) fn arm(run: &Run, clone: &PrivateClone, role: &Role) -> Result<Option<TaskId>, Error> {
    let Some(text) = &role.standing else {
        return Ok(None);
    };
    let prefix = role.standing_prefix();
    let tx = edit::transact(&mut Plain { run, clone }, push_rounds(run), |dir| {
        let snapshot = board::load(dir).map_err(|e| Error::failure(e.to_string()))?;
        if snapshot
            .pending
            .iter()
            .any(|t| t.id.as_str().starts_with(&prefix))
        {
            return Ok(Edit::Gone);
        }
        // The next number: past every standing task of the role, wherever.
        let number = |id: &TaskId| id.as_str().strip_prefix(&prefix)?.parse::<u64>().ok();
        let last = snapshot
            .done
            .iter()
            .chain(&snapshot.failed)
            .filter_map(number)
            .max()
            .unwrap_or(0);
        let id = TaskId::parse(&format!("{prefix}{}", last + 1))
            .map_err(|e| Error::failure(e.to_string()))?;
        let title = text.lines().find(|l| !l.trim().is_empty()).unwrap_or(text);
        let mut task = board::new_task(
            id.clone(),
            title.trim(),
            text,
            Vec::new(),
            0,
            SystemTime::now(),
        );
        task.labels = vec![STANDING.to_owned(), role.name.clone()];
        if paths::find(dir, &id).is_some() {
            return Ok(Edit::Gone);
        }
        edit::add(dir, &task).map_err(|e| Error::failure(e.to_string()))?;
        Ok(Edit::Commit {
            message: format!("farm: standing task `{id}` of role `{}`", role.name),
            value: id,
        })
    })?;
    Ok(match tx {
        Tx::Pushed(id) => Some(id),
        Tx::Gone | Tx::Busy | Tx::Lost(_) => None,
    })
}
