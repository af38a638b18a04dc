//! The hub's branch as commands edit it (`farm task add`, `farm schedule`,
//! `farm fire`): a shallow scratch clone of its tip each round, committed
//! and pushed (under the hub's push lock, if it has one, which the push's
//! processes keep) to the branch.

use std::os::fd::AsFd;
use std::path::PathBuf;

use crate::board::edit::{self, Push};
use crate::error::Error;
use crate::git::command::{GitError, Pushed, Repo};
use crate::git::hub::Hub;

/// Rounds of an edit before it gives up on a branch that keeps moving.
pub const ROUNDS: usize = 10;

pub struct HubBranch<'a> {
    hub: &'a Hub,
    /// Where a push lock given up on is said: stderr, uncoloured (these
    /// edits run from commands and from the run alike).
    out: crate::output::Out,
    /// What is being pushed, for messages (`task `a``).
    what: String,
}

impl<'a> HubBranch<'a> {
    pub fn new(hub: &'a Hub, what: String) -> HubBranch<'a> {
        let out = crate::output::Out::new(crate::output::ColorWhen::Never, false, 0);
        HubBranch { hub, out, what }
    }
}

fn git_failed(e: GitError) -> Error {
    Error::failure(e.to_string()).caused_by(e)
}

impl edit::Branch for HubBranch<'_> {
    type Error = Error;
    /// The scratch clone, removed when the round ends.
    type Round = tempfile::TempDir;

    fn checkout(&mut self, _round: usize) -> Result<(PathBuf, Self::Round), Error> {
        let hub = self.hub;
        let tmp = tempfile::tempdir()
            .map_err(|e| Error::failure(format!("cannot make a temp dir: {e}")).caused_by(e))?;
        let dir = tmp.path().join("board");
        // A local hub through file:// so that `--depth` is honoured.
        let url = match &hub.local {
            Some(local) => format!(
                "file://{}",
                local
                    .dir
                    .canonicalize()
                    .unwrap_or(local.dir.clone())
                    .display()
            ),
            None => hub.url.clone(),
        };
        Repo::new(tmp.path())
            .clone_tip(&url, &hub.branch, &dir)
            .map_err(git_failed)?;
        Ok((dir, tmp))
    }

    fn publish(&mut self, tmp: Self::Round, message: &str) -> Result<Push, Error> {
        let hub = self.hub;
        let repo = Repo::new(tmp.path().join("board"));
        if repo.config_get("user.email").map_err(git_failed)?.is_none() {
            repo.run(["config", "user.email", "farm@farm.invalid"])
                .map_err(git_failed)?;
            repo.run(["config", "user.name", "farm"])
                .map_err(git_failed)?;
        }
        repo.commit_all(message).map_err(git_failed)?;
        let pushed = {
            let lock = hub.push_lock(self.out)?;
            // Kept by the push's processes too (see `Hub::push_lock`): a
            // command killed mid-push leaves its receive-pack running, and
            // no other push may go through the hub's work tree until it ends.
            let hold: Vec<_> = lock.as_ref().map(AsFd::as_fd).into_iter().collect();
            // To the hub's URL, not the remote's name: a network push is
            // then watched for silence (see `git::watchdog`).
            let spec = [format!("HEAD:refs/heads/{}", hub.branch)];
            Pushed::from_updates(
                &repo
                    .push_refs_holding(&hub.url, &spec, false, &hold)
                    .map_err(git_failed)?,
            )
        };
        if pushed == Pushed::Ok {
            Ok(Push::Pushed)
        } else if pushed.only_moved() {
            Ok(Push::Rejected)
        } else {
            Err(Error::failure(format!(
                "the hub refused {}: {pushed:?}",
                self.what
            )))
        }
    }
}
