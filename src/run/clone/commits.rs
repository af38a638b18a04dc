//! Commits in the clone: the agent's work staged and committed (in-process
//! when it can be), what a session left uncommitted, and farm's own commit
//! of one file on top of HEAD without the work tree.

use super::PrivateClone;
use crate::error::Error;
use crate::git::workdir::Workdir;

impl PrivateClone {
    /// The text of the top-level file `path` at HEAD (`None`: not there).
    pub fn file_at_head(&self, path: &str) -> Result<Option<String>, Error> {
        let read = |repo: &git2::Repository| -> Result<Option<String>, git2::Error> {
            let tree = repo.head()?.peel_to_tree()?;
            let Some(entry) = tree.get_name(path) else {
                return Ok(None);
            };
            let blob = repo.find_blob(entry.id())?;
            Ok(Some(String::from_utf8_lossy(blob.content()).into_owned()))
        };
        self.reading(read)
            .map_err(|e| Error::failure(format!("cannot read `{path}` at HEAD: {e}")))
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

    /// Stage everything (`git add --all`); the paths that differ from HEAD.
    pub(super) fn stage_all(&self) -> Result<Vec<String>, Error> {
        let paths = match self.in_process("staging", Workdir::stage_all) {
            Some(paths) => paths,
            None => {
                self.git(["add", "--all"])?;
                // `-z`: each name as it is (unquoted), for the commit's
                // edit of HEAD's tree at these paths.
                self.git([
                    "diff",
                    "--cached",
                    "--name-only",
                    "--no-renames",
                    "-z",
                    "HEAD",
                ])?
                .split('\0')
                .filter(|p| !p.is_empty())
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
}
