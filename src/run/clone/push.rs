//! Pushes to the hub: the agent's work published under its claim, a board
//! edit of the run's own pushed plainly, and a rescue branch.

use std::os::fd::BorrowedFd;

use super::PrivateClone;
use crate::claims::{ClaimStore, Held, Published, StoreError};
use crate::error::Error;
use crate::git::command::Pushed;

impl PrivateClone {
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

    /// Push HEAD to the hub's `branch` plainly, under no claim (a board
    /// edit of the run's own: a standing task armed); whether the branch
    /// took it or had moved on. `hold` is kept open by the push's
    /// processes (the hub's push lock), as in [`PrivateClone::publish`].
    pub fn push_branch(&self, branch: &str, hold: &[BorrowedFd<'_>]) -> Result<Pushed, Error> {
        let spec = [format!("HEAD:refs/heads/{branch}")];
        self.net("pushing", || {
            self.raw
                .push_refs_holding(&self.hub_url, &spec, false, hold)
                .map(|updates| Pushed::from_updates(&updates))
        })
    }

    /// Push `specs` to the hub plainly (the merge queue's candidate refs:
    /// `<commit>:<ref>` to create one, `:<ref>` to delete one); whether the
    /// hub took them all.
    pub fn push_refs(&self, specs: &[String]) -> Result<Pushed, Error> {
        self.net("pushing the queue's refs", || {
            self.raw.push(&self.hub_url, specs)
        })
    }

    /// Delete refs on the hub, each only while it is the commit given (a
    /// lease): one pushed again meanwhile stays, one already gone is no
    /// error.
    pub fn delete_refs_leased(&self, refs: &[(String, String)]) -> Result<Pushed, Error> {
        // `git push` takes its options among the refspecs.
        let specs: Vec<String> = refs
            .iter()
            .map(|(name, oid)| format!("--force-with-lease={name}:{oid}"))
            .chain(refs.iter().map(|(name, _)| format!(":{name}")))
            .collect();
        self.push_refs(&specs)
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
