//! Rescue branches: the agent's own commits — those the hub's branch lacks
//! by ancestry and by patch, farm's progress commit aside — pushed to
//! `farm/rescue/orphan/<agent>-<commit>` before a sync would reset them
//! away; from the clone itself at recovery, or salvaged from a broken clone
//! set aside.

use std::ffi::OsStr;
use std::path::Path;

use super::{PrivateClone, WORK_BRANCH};
use crate::error::Error;
use crate::git::hub::Hub;

impl PrivateClone {
    /// HEAD, when it has commits that `upstream` lacks by ancestry and by
    /// patch (rule 5 of `recover`); when some of its commits are on
    /// `upstream` already, replayed onto it without them (in memory when it
    /// can be, as integration does), so that the rescue holds only the
    /// agent's own — or HEAD as it is, when that conflicts. `None`: nothing
    /// of the agent's.
    pub(super) fn own_tip(&self, upstream: &str) -> Result<Option<String>, Error> {
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
    /// aside (see [`super::open`]): its branches are fetched into this new
    /// clone, and each with commits the hub's branch lacks is pushed to a
    /// rescue branch. `aside` is removed once all went well, else kept.
    pub(super) fn salvage(&self, hub: &Hub, aside: &Path) -> Result<Vec<String>, Error> {
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
}

#[cfg(test)]
mod tests {
    use crate::run::clone::fixture::*;

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

    /// Regression: a rescue holds only commits the branch lacks — one whose
    /// patch landed meanwhile is left out.
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
}
