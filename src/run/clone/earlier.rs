//! The work of earlier attempts at a task, for its next session: the hub's
//! rescue branches of the task (`farm/rescue/<task>/*`, the dropped ones
//! aside) and those a person handed it (`farm rescue apply`), fetched into
//! the clone as `origin/farm/rescue/…` — a session cannot reach the hub,
//! and a sandboxed one must not — so that its prompt can offer them.

use super::PrivateClone;
use crate::git::hub::Hub;
use crate::git::rescue::{DROPPED, PREFIX, dropped_ref};
use crate::names::TaskId;

/// A rescue branch offered to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Earlier {
    /// The hub's branch (`farm/rescue/<task>/<nonce>`); in the clone it is
    /// `origin/` and this.
    pub branch: String,
    /// How many commits it has that the session's start lacks.
    pub commits: usize,
    /// The subjects of the newest of them, newest first.
    pub subjects: Vec<String>,
    /// A person chose it for this task (`farm rescue apply`).
    pub chosen: bool,
}

/// At most this many branches are offered, and this many subjects each.
const OFFERED: usize = 5;

impl PrivateClone {
    /// The earlier work offered to task `id`'s session, `chosen` (the
    /// branches a person handed it) first, then the newest. Best effort: a
    /// hub that cannot be read now offers nothing, said at -v.
    pub fn earlier_work(&self, hub: &Hub, id: &TaskId, chosen: &[String]) -> Vec<Earlier> {
        match self.find_earlier(hub, id, chosen) {
            Ok(found) => found,
            Err(e) => {
                self.out.debug(&format!(
                    "{}: `{id}`: the work of earlier attempts could not be read: {e}",
                    self.name
                ));
                Vec::new()
            }
        }
    }

    fn find_earlier(
        &self,
        hub: &Hub,
        id: &TaskId,
        chosen: &[String],
    ) -> Result<Vec<Earlier>, crate::error::Error> {
        let glob = format!("refs/heads/{PREFIX}{id}/");
        // A hub on this machine is asked in-process whether there is any:
        // most tasks have none, and then no git process is started.
        let any = match hub.git_dir().map(git2::Repository::open_bare) {
            Some(Ok(repo)) => repo
                .references_glob(&format!("{glob}*"))
                .map(|mut refs| refs.next().is_some())
                .unwrap_or(true),
            _ => true,
        };
        if any {
            let specs = [
                format!("+{glob}*:refs/remotes/origin/{PREFIX}{id}/*"),
                format!("+{DROPPED}{id}/*:{DROPPED}{id}/*"),
            ];
            self.healing(|| {
                let mut args = vec!["fetch", "--quiet", "--no-tags", "--prune", &self.hub_url];
                args.extend(specs.iter().map(String::as_str));
                self.raw.run(args)
            })?;
        }
        let mut branches: Vec<String> = chosen.to_vec();
        for branch in chosen {
            // Another task's branch, or an orphan's: fetched on its own (a
            // branch since deleted is no error, only not offered).
            if !branch.starts_with(&format!("{PREFIX}{id}/")) {
                let spec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
                let dropped = dropped_ref(branch);
                let _ = self
                    .raw
                    .run(["fetch", "--quiet", "--no-tags", &self.hub_url, &spec]);
                let _ = self.raw.run([
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    &self.hub_url,
                    &format!("+{dropped}:{dropped}"),
                ]);
            }
        }
        if any {
            let listed = self.git([
                "for-each-ref",
                "--sort=-committerdate",
                "--format=%(refname)",
                &format!("refs/remotes/origin/{PREFIX}{id}/"),
            ])?;
            for name in listed.lines() {
                if let Some(branch) = name.strip_prefix("refs/remotes/origin/")
                    && !branches.iter().any(|b| b == branch)
                {
                    branches.push(branch.to_owned());
                }
            }
        }
        let mut offered = Vec::new();
        for branch in branches {
            if offered.len() == OFFERED {
                break;
            }
            let here = format!("refs/remotes/origin/{branch}");
            let Ok(tip) = self.git(["rev-parse", "--verify", "--quiet", &here]) else {
                continue;
            };
            let dropped = self.git(["rev-parse", "--verify", "--quiet", &dropped_ref(&branch)]);
            if dropped.is_ok_and(|d| d == tip) {
                continue;
            }
            let range = format!("HEAD..{here}");
            let commits: usize = self
                .git(["rev-list", "--count", &range])?
                .trim()
                .parse()
                .unwrap_or(0);
            if commits == 0 {
                continue;
            }
            let n = OFFERED.to_string();
            let subjects = self.git(["log", "--format=%s", "-n", &n, &range])?;
            offered.push(Earlier {
                chosen: chosen.contains(&branch),
                branch,
                commits,
                subjects: subjects.lines().map(str::to_owned).collect(),
            });
        }
        Ok(offered)
    }
}
