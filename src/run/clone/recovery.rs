//! Recovery of a clone a killed farm left: a git operation half-done (a
//! rebase, `am`, merge, cherry-pick or revert) aborted, or cleared by hand
//! when git cannot; files a sync or a rebase left part way put back at
//! HEAD; what the agent left uncommitted committed; and its own commits
//! pushed to a rescue branch (see [`super::rescue`]).

use crate::error::Error;
use crate::git::hub::Hub;
use std::path::Path;

use super::{PrivateClone, STALE_FILES};

impl PrivateClone {
    /// Make good what an earlier farm, killed, left in this clone, and
    /// rescue the agent's own commits that are on no hub ref — the next sync
    /// would otherwise reset them away. Returns the rescue branches pushed.
    ///
    /// The rules, in order — so that none of the agent's work is lost, and
    /// nothing half-done is committed or pushed as if it were its work:
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
    pub(super) fn recover(&self, hub: &Hub) -> Result<Vec<String>, Error> {
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
        let _settled = hub.push_lock(self.out)?;
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

#[cfg(test)]
mod tests {
    use crate::run::clone::fixture::*;

    /// Regression: killed after an in-memory rebase, the index and the work
    /// tree still show the commit before; recovery must not commit that (it
    /// reverts what the branch gained) but rescue the rebased commit as it
    /// is.
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

    /// Regression (found by the chaos suite, seed 1796118514433852574, round
    /// 1): a farm killed while a sync rewrote the files — a file the branch
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
}
