//! Rescue branches on the hub: work farm could not integrate, kept as
//! `farm/rescue/<task>/<nonce>` (one claim's work) or
//! `farm/rescue/orphan/<agent>-<commit>` (commits an earlier run left in a
//! clone) — their names, the record of one dropped
//! (`refs/farm/dropped/<the same rest>`), and a view of the hub to read them
//! in.
//!
//! Why a dropped one is recorded under a ref on the hub, not in a file of
//! the state dir: a ref keeps the commits from git's garbage collection
//! (nothing else would once the branch is gone), every machine reading the
//! hub sees it, and pushing a new ref is what a hub made by `farm init`
//! allows — deleting one it refuses.

use std::path::Path;

use crate::error::Error;
use crate::git::command::Repo;
use crate::git::hub::Hub;
use crate::git::scratch::ScratchRepo;

/// Where rescue branches are, under `refs/heads/`.
pub const PREFIX: &str = "farm/rescue/";

/// Where the record of a dropped rescue branch is: `refs/farm/dropped/`
/// and the branch's name after [`PREFIX`].
pub const DROPPED: &str = "refs/farm/dropped/";

/// Whose work a rescue branch holds, by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// One claim's work on a task.
    Task { task: String, nonce: String },
    /// What an earlier run left in agent `agent`'s clone, at `commit`.
    Orphan { agent: String, commit: String },
}

/// Whose work the branch `name` (`farm/rescue/…`, without `refs/heads/`)
/// holds; `None` for a name farm does not make.
pub fn owner(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix(PREFIX)?;
    let (first, second) = rest.split_once('/')?;
    if second.contains('/') || first.is_empty() || second.is_empty() {
        return None;
    }
    if first == "orphan"
        && let Some((agent, commit)) = second.rsplit_once('-')
        && !agent.is_empty()
        && commit.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Some(Owner::Orphan {
            agent: agent.to_owned(),
            commit: commit.to_owned(),
        });
    }
    Some(Owner::Task {
        task: first.to_owned(),
        nonce: second.to_owned(),
    })
}

/// How a task's note hands it a rescue branch to start from (`farm rescue
/// apply`): this, the branch, and a closing backtick.
pub const START_FROM: &str = "- start from branch `";

/// The line of a task's note that hands it rescue branch `branch`.
pub fn start_from_line(branch: &str) -> String {
    format!("{START_FROM}{branch}`")
}

/// The rescue branches the notes in task description `body` hand it, in
/// the order written.
pub fn chosen_in(body: &str) -> Vec<String> {
    let mut chosen: Vec<String> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix(START_FROM)
            && let Some((branch, _)) = rest.split_once('`')
            && owner(branch).is_some()
            && !chosen.iter().any(|c| c == branch)
        {
            chosen.push(branch.to_owned());
        }
    }
    chosen
}

/// The ref recording that branch `name` (`farm/rescue/…`) was dropped.
pub fn dropped_ref(name: &str) -> String {
    format!("{DROPPED}{}", name.strip_prefix(PREFIX).unwrap_or(name))
}

/// A ref as listed: its name (without `refs/heads/` for a branch), commit,
/// the commit's date (strict ISO 8601) and author.
#[derive(Debug, Clone)]
pub struct Listed {
    pub name: String,
    pub commit: String,
    pub date: String,
    pub author: String,
}

/// One commit of a rescue branch.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Commit {
    pub commit: String,
    pub subject: String,
    pub author: String,
    pub date: String,
}

/// The hub's rescue branches, its branch and the records of dropped ones,
/// where git can read them: the hub's own repository when it is on this
/// machine, else a scratch repository in the state dir fetched from it.
pub struct View {
    repo: Repo,
    _scratch: Option<ScratchRepo>,
    /// The hub's branch the work is measured against (`main`).
    pub branch: String,
}

fn failed(e: crate::git::command::GitError) -> Error {
    Error::failure(e.to_string()).caused_by(e)
}

impl View {
    pub fn open(hub: &Hub, state: &Path) -> Result<View, Error> {
        if let Some(local) = &hub.local {
            return Ok(View {
                repo: Repo::new(&local.dir),
                _scratch: None,
                branch: hub.branch.clone(),
            });
        }
        let scratch = ScratchRepo::new(state)?;
        let specs = [
            format!("refs/heads/{PREFIX}*:refs/heads/{PREFIX}*"),
            format!("refs/heads/{b}:refs/heads/{b}", b = hub.branch),
            format!("{DROPPED}*:{DROPPED}*"),
        ];
        let repo = scratch.repo();
        crate::git::retry::briefly(|| {
            let mut args = vec!["fetch", "--quiet", "--no-tags", hub.url.as_str()];
            args.extend(specs.iter().map(String::as_str));
            repo.run(args)
        })
        .map_err(|e| crate::git::hub::unreachable(&hub.url, e))?;
        Ok(View {
            repo,
            _scratch: Some(scratch),
            branch: hub.branch.clone(),
        })
    }

    /// The repository the view reads (and pushes from).
    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    fn refs(&self, under: &str, strip: &str) -> Result<Vec<Listed>, Error> {
        let out = self
            .repo
            .run([
                "for-each-ref",
                "--sort=committerdate",
                "--format=%(refname)%09%(objectname)%09%(committerdate:iso-strict)%09%(authorname)",
                under,
            ])
            .map_err(failed)?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let name = f.next()?.strip_prefix(strip)?.to_owned();
                Some(Listed {
                    name,
                    commit: f.next()?.to_owned(),
                    date: f.next()?.to_owned(),
                    author: f.next().unwrap_or_default().to_owned(),
                })
            })
            .collect())
    }

    /// The rescue branches (`farm/rescue/…`), oldest commit first.
    pub fn rescues(&self) -> Result<Vec<Listed>, Error> {
        self.refs(&format!("refs/heads/{PREFIX}"), "refs/heads/")
    }

    /// The records of dropped rescue branches, named as the branches were
    /// (`farm/rescue/…`).
    pub fn dropped(&self) -> Result<Vec<Listed>, Error> {
        Ok(self
            .refs(DROPPED, DROPPED)?
            .into_iter()
            .map(|l| Listed {
                name: format!("{PREFIX}{}", l.name),
                ..l
            })
            .collect())
    }

    /// The commits of `commit` that the branch lacks, newest first.
    pub fn log(&self, commit: &str) -> Result<Vec<Commit>, Error> {
        let out = self
            .repo
            .run([
                "log",
                "--format=%H%x09%aI%x09%an%x09%s",
                &format!("refs/heads/{}..{commit}", self.branch),
            ])
            .map_err(failed)?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(4, '\t');
                Some(Commit {
                    commit: f.next()?.to_owned(),
                    date: f.next()?.to_owned(),
                    author: f.next()?.to_owned(),
                    subject: f.next().unwrap_or_default().to_owned(),
                })
            })
            .collect())
    }

    /// How many commits `commit` has that the branch lacks.
    pub fn ahead(&self, commit: &str) -> Result<usize, Error> {
        let out = self
            .repo
            .run([
                "rev-list",
                "--count",
                &format!("refs/heads/{}..{commit}", self.branch),
            ])
            .map_err(failed)?;
        Ok(out.trim().parse().unwrap_or(0))
    }

    /// Whether `commit` has work the branch lacks: a commit that is on it
    /// neither by ancestry nor by patch (`git cherry`: a commit rebased
    /// onto the branch is there already).
    pub fn has_work(&self, commit: &str) -> Result<bool, Error> {
        let out = self
            .repo
            .run(["cherry", &format!("refs/heads/{}", self.branch), commit])
            .map_err(failed)?;
        Ok(out.lines().any(|l| l.starts_with('+')))
    }

    /// The branch's commit, as the view read it.
    pub fn tip(&self) -> Result<String, Error> {
        self.repo
            .run(["rev-parse", &format!("refs/heads/{}", self.branch)])
            .map(|s| s.trim().to_owned())
            .map_err(failed)
    }

    /// What `commit` changed since it left the branch (`git diff --stat`
    /// from their merge base).
    pub fn diffstat(&self, commit: &str) -> Result<String, Error> {
        self.repo
            .run([
                "diff",
                "--stat",
                &format!("refs/heads/{}...{commit}", self.branch),
            ])
            .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_name_says_whose_work_it_holds() {
        assert_eq!(
            owner("farm/rescue/parse-if/0123abcd"),
            Some(Owner::Task {
                task: "parse-if".into(),
                nonce: "0123abcd".into()
            })
        );
        assert_eq!(
            owner("farm/rescue/orphan/box-2-0123456789ab"),
            Some(Owner::Orphan {
                agent: "box-2".into(),
                commit: "0123456789ab".into()
            })
        );
        for name in [
            "farm/rescue/x",
            "farm/rescue/x/y/z",
            "main",
            "farm/rescue//n",
        ] {
            assert_eq!(owner(name), None, "{name}");
        }
        assert_eq!(dropped_ref("farm/rescue/t/n"), "refs/farm/dropped/t/n");
        let body = format!(
            "Do it.\n\n## Start from earlier work\n\n{}: 2 commits\n{}\n- start from branch `main`\n",
            start_from_line("farm/rescue/t/n"),
            start_from_line("farm/rescue/t/n"),
        );
        assert_eq!(chosen_in(&body), ["farm/rescue/t/n"]);
    }
}
