//! A private clone's own git work, done in-process with git2: stage and
//! commit what an agent left, replay its commits onto the hub's branch,
//! clean the work tree, move its refs to the hub's branch. Talking to the
//! hub stays with the `git` command (command.rs, design note 7).
//!
//! Why not the `git` command here too: each one is a process, 2–3 ms apiece
//! on a small VM, several per task. And `git rebase` checks the branch out
//! and replays onto it, rewriting in the work tree every file the branch
//! changed meanwhile — with 8 agents, a hundred files deleted and made again
//! per task. On ext4 without a journal that churn is what costs most: the
//! allocator skips inodes freed in the last 30 seconds, one lookup each, so
//! every new file got slower as the run went on (perf: a third of all CPU
//! time of an 8-agent run in `recently_deleted`). The rebase here writes only
//! the new commits and trees, and leaves the work tree as it was; the caller
//! knows the work tree then lags HEAD.
//!
//! Whatever is unusual is left to the `git` command: [`Workdir::rebase`]
//! answers `None` for a conflict, a merge commit to replay or a message that
//! is not UTF-8, and the caller runs `git rebase`; a clone whose config asks
//! for signed commits is not opened here at all.

use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::git::changes::{Tracked, changed_paths, fail, gone};
use crate::git::pack_dirs::PackDirs;
use crate::git::tree_merge::trivial_merge;
use crate::git::{tree_diff, tree_edit};

use git2::{Commit, Index, IndexAddOption, Oid, Repository, Sort, message_prettify};

/// The reflog message of [`Workdir::set_ref`]: the ref moved, the files not
/// (yet).
const SYNC_LOG: &str = "farm: to the hub's branch";
/// How the reflog message of an in-memory [`Workdir::rebase`] starts: the
/// branch moved, the index and the files not.
const REBASE_LOG: &str = "farm: rebase onto";

/// The settings under which a clone is left to the `git` command (their
/// keys as `git config` prints them): signed commits, which git2 does not
/// make, and git's split index, which libgit2 cannot read — its index seen
/// as empty, [`Workdir::clean`] removed every tracked file — and a sparse
/// checkout, which libgit2 does not implement (an in-process sync wrote the
/// files it keeps out). (Index version 4, the untracked cache,
/// `feature.manyFiles` and `core.fsmonitor` were tried and are read right:
/// see the tests.)
pub const GIT_ONLY: [&str; 3] = ["commit.gpgsign", "core.splitindex", "core.sparsecheckout"];

/// Whether a config value, as `git config --get-regexp` prints it, is true
/// (a key with no value at all is, as git reads it).
pub fn git_true(value: &str) -> bool {
    let value = value.trim().to_ascii_lowercase();
    match value.as_str() {
        "" | "true" | "yes" | "on" => true,
        other => other.parse::<i64>().is_ok_and(|n| n != 0),
    }
}

/// Where a test stops farm part way through a step, as a SIGKILL would:
/// `stop::at(point)` arms `point` for the calling thread, and the step
/// panics there once. Nothing outside tests.
#[cfg(test)]
pub(crate) mod stop {
    use std::cell::Cell;

    thread_local! {
        static AT: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    pub(crate) fn at(point: &'static str) {
        AT.set(Some(point));
    }

    pub(crate) fn here(point: &str) {
        if AT.get() == Some(point) {
            AT.set(None);
            panic!("stopped at `{point}`, as a SIGKILL would stop it");
        }
    }
}

#[cfg(not(test))]
pub(crate) mod stop {
    #[inline(always)]
    pub(crate) fn here(_: &str) {}
}

/// The clone's repository, opened once for its loop's life.
pub struct Workdir {
    repo: Repository,
    dir: PathBuf,
    /// An index read failed once: see [`Workdir::index`].
    unreadable: std::cell::Cell<bool>,
    /// The pack directories `repo` reads, as they were when it was opened
    /// (see [`Workdir::let_go_of_deleted_packs`]).
    packs: PackDirs,
}

impl Workdir {
    /// `None` when the clone's git work must go through the `git` command:
    /// a setting of [`GIT_ONLY`] is on, or the index is one libgit2 cannot
    /// read (a split index made by `git update-index --split-index`).
    ///
    /// git2 sees only the config files it knows: a caller that can ask git
    /// itself (`GIT_CONFIG_COUNT`, `-c`, `GIT_CONFIG_GLOBAL` count there)
    /// must check [`GIT_ONLY`] with git too, as `PrivateClone::prepare` does.
    pub fn open(dir: &Path) -> Result<Option<Workdir>, git2::Error> {
        // Every tree and commit written here is made of objects read from
        // this repository, so libgit2's check that each one exists (an
        // object lookup per entry: for a `tasks/` of 5,000 files, most of
        // a commit's cost) proves nothing a push to the hub would not.
        git2::opts::strict_object_creation(false);
        let repo = Repository::open(dir)?;
        // Read before any object is: libgit2 opens packs as it needs them.
        let packs = PackDirs::of(&repo.path().join("objects"));
        let config = repo.config()?;
        if GIT_ONLY
            .iter()
            .any(|key| config.get_bool(key).unwrap_or(false))
        {
            return Ok(None);
        }
        // An index libgit2 fails to read once is taken for empty from then
        // on: everything tracked would look untracked to `clean`.
        if repo.index().is_err() {
            return Ok(None);
        }
        Ok(Some(Workdir {
            repo,
            dir: dir.to_path_buf(),
            unreadable: std::cell::Cell::new(false),
            packs,
        }))
    }

    /// Open the repository again if a pack it may hold was deleted since it
    /// was opened — here or in the hub it borrows objects from — so that
    /// libgit2 lets go of it (see [`crate::git::pack_dirs`]). Returns true
    /// when it did; on an error the handle is kept as it was (it still
    /// reads every object).
    pub fn let_go_of_deleted_packs(&mut self) -> Result<bool, git2::Error> {
        if !self.packs.changed() {
            return Ok(false);
        }
        let repo = Repository::open(&self.dir)?;
        self.packs = PackDirs::of(&repo.path().join("objects"));
        self.repo = repo;
        Ok(true)
    }

    /// The repository, to read objects from: its cache of trees outlives
    /// one read (see [`crate::git::cache_trees`]).
    pub fn repo(&self) -> &Repository {
        &self.repo
    }

    /// Stage everything, as `git add --all`: new files (not ignored ones),
    /// changes and deletions. Returns the paths that now differ from HEAD.
    pub fn stage_all(&self) -> Result<Vec<String>, git2::Error> {
        let mut index = self.index()?;
        match changed_paths(&self.repo, &self.dir, &index)? {
            Some(paths) => {
                for rel in paths {
                    match self.dir.join(&rel).symlink_metadata() {
                        Ok(_) => index.add_path(&rel)?,
                        Err(e) if gone(&e) => index.remove_path(&rel)?,
                        Err(e) => return Err(fail(&self.dir.join(&rel), e)),
                    }
                }
            }
            // Deletions too: add_all stages what the work tree lost (the
            // test below holds it to that), so no update_all walk is needed.
            None => index.add_all(["*"], IndexAddOption::DEFAULT, None)?,
        }
        index.write()?;
        let head = self.repo.head()?.peel_to_tree()?;
        let diff = self
            .repo
            .diff_tree_to_index(Some(&head), Some(&index), None)?;
        Ok(diff
            .deltas()
            .filter_map(|d| d.new_file().path().or(d.old_file().path()))
            .map(|p| p.to_string_lossy().into_owned())
            .collect())
    }

    /// Commit the index onto HEAD, advancing its branch; the message is
    /// cleaned up as `git commit -m` does. `staged` are the paths where the
    /// index differs from HEAD, as [`Workdir::stage_all`] said: the tree
    /// committed is HEAD's with those paths edited (tree_edit.rs), not one
    /// built again from every entry of the index. A path neither in the
    /// index nor in HEAD (a name the list got wrong) makes it build the
    /// index's tree all the same: nothing staged is left out.
    pub fn commit(&self, message: &str, staged: &[String]) -> Result<Oid, git2::Error> {
        let mut index = self.index()?;
        let parent = self.repo.head()?.peel_to_commit()?;
        let head = parent.tree()?;
        let mut known = true;
        let edits: Vec<tree_edit::Edit<'_>> = staged
            .iter()
            .map(|p| {
                let entry = index.get_path(Path::new(p), 0);
                known &= entry.is_some() || head.get_path(Path::new(p)).is_ok();
                (p.as_bytes(), entry.map(|e| (e.id, e.mode as i32)))
            })
            .collect();
        let tree = if known {
            tree_edit::edit(&self.repo, &head, &edits)?
        } else {
            index.write_tree()?
        };
        let tree = self.repo.find_tree(tree)?;
        self.repo.commit(
            Some("HEAD"),
            &self.repo.author_from_env()?,
            &self.repo.committer_from_env()?,
            &message_prettify(message, None)?,
            &tree,
            &[&parent],
        )
    }

    /// Stage everything and commit it; `false` when there was nothing.
    pub fn commit_all(&self, message: &str) -> Result<bool, git2::Error> {
        let staged = self.stage_all()?;
        if staged.is_empty() {
            return Ok(false);
        }
        self.commit(message, &staged)?;
        Ok(true)
    }

    /// Whether `path` (a file or a directory, `/`-separated) is the same in
    /// commits `a` and `b`, absent from both counting as the same.
    pub fn same_at(&self, a: &str, b: &str, path: &str) -> Result<bool, git2::Error> {
        let id = |rev: &str| -> Result<Option<Oid>, git2::Error> {
            let tree = self.repo.find_commit(Oid::from_str(rev)?)?.tree()?;
            match tree.get_path(Path::new(path)) {
                Ok(entry) => Ok(Some(entry.id())),
                Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        };
        Ok(id(a)? == id(b)?)
    }

    /// Remove every file git does not track, ignored ones and nested
    /// repositories too, as `git clean -ffdx`.
    ///
    /// By the index and the directories alone: an entry the index names is
    /// kept without a look at it, a directory holding tracked files is
    /// entered, anything else goes. libgit2's status (what this was)
    /// compared every tracked file with the work tree first, a cost that
    /// grew with the board (perf, `cargo bench --bench scale`).
    pub fn clean(&self) -> Result<(), git2::Error> {
        let entries: Vec<git2::IndexEntry> = self.index()?.iter().collect();
        Tracked::of(&entries)
            .untracked(&self.dir, |_, entry, kind| {
                // Never follows a symlink: a link to a directory is not a
                // directory here, and goes as the link it is.
                let gone = if kind.is_dir() {
                    std::fs::remove_dir_all(entry.path())
                } else {
                    std::fs::remove_file(entry.path())
                };
                match gone {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(fail(&entry.path(), e))
                    }
                    _ => Ok(ControlFlow::Continue(())),
                }
            })
            .map(drop)
    }

    /// Whether HEAD is commit `rev` or descends from it.
    pub fn descends_from(&self, rev: &str) -> Result<bool, git2::Error> {
        let commit = self.repo.revparse_single(rev)?.peel_to_commit()?.id();
        let head = self.repo.head()?.peel_to_commit()?.id();
        Ok(head == commit || self.repo.graph_descendant_of(head, commit)?)
    }

    /// Whether commit `ancestor` is `rev` or one of its ancestors.
    pub fn is_ancestor(&self, ancestor: &str, rev: &str) -> Result<bool, git2::Error> {
        let ancestor = self.repo.revparse_single(ancestor)?.peel_to_commit()?.id();
        let rev = self.repo.revparse_single(rev)?.peel_to_commit()?.id();
        Ok(rev == ancestor || self.repo.graph_descendant_of(rev, ancestor)?)
    }

    /// The tree the index holds (from its tree cache when that is whole);
    /// an error while it has conflicts.
    pub fn index_tree(&self) -> Result<Oid, git2::Error> {
        self.index()?.write_tree()
    }

    /// Move the index and the tracked files from tree `from` to commit
    /// `to`'s tree, touching only the paths that differ — for a work tree
    /// whose tracked files are known to equal its index, which holds
    /// `from`. What `git read-tree --reset -u` does, without its look at
    /// every file (on a board of 5,000 tasks, most of a sync's cost). An
    /// error (a submodule, say) leaves it to `git read-tree`, which puts
    /// right whatever was half done.
    pub fn checkout_from(&self, from: Oid, to: &str) -> Result<(), git2::Error> {
        let from = self.repo.find_tree(from)?;
        let to = self.repo.find_commit(Oid::from_str(to)?)?.tree()?;
        let changes = tree_diff::changes(&self.repo, &from, &to)?;
        let mut index = self.index()?;
        // Removals first: a file may give way to a directory of its name.
        let mut writes = Vec::new();
        for change in &changes {
            let rel = Path::new(OsStr::from_bytes(&change.path));
            if change.old.is_some() {
                let path = self.dir.join(rel);
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
                    Ok(_) => std::fs::remove_file(&path),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(e),
                }
                .map_err(|e| fail(&path, e))?;
                // As git does: a directory left empty goes too (and may
                // give way to a file of its name).
                for dir in path.ancestors().skip(1).take_while(|a| *a != self.dir) {
                    if std::fs::remove_dir(dir).is_err() {
                        break;
                    }
                }
                index.remove_path(rel)?;
            }
            stop::here("checkout: a file removed");
            if let Some((id, mode)) = change.new {
                writes.push((rel, id, mode));
            }
        }
        for (rel, id, mode) in writes {
            let path = self.dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
            }
            let blob = self.repo.find_blob(id)?;
            let is = |m: git2::FileMode| mode == i32::from(m);
            match mode {
                _ if is(git2::FileMode::Link) => {
                    let target = OsStr::from_bytes(blob.content());
                    std::os::unix::fs::symlink(target, &path)
                }
                _ if is(git2::FileMode::Blob) || is(git2::FileMode::BlobExecutable) => {
                    use std::os::unix::fs::OpenOptionsExt;
                    let exec = is(git2::FileMode::BlobExecutable);
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(if exec { 0o777 } else { 0o666 })
                        .open(&path)
                        .and_then(|mut f| std::io::Write::write_all(&mut f, blob.content()))
                }
                _ => {
                    return Err(git2::Error::from_str(&format!(
                        "{}: a submodule",
                        rel.display()
                    )));
                }
            }
            .map_err(|e| fail(&path, e))?;
            index.add_path(rel)?;
        }
        index.write()
    }

    /// Replay the commits of HEAD's branch that `onto` (a revision, such as
    /// `origin/main`) lacks onto it, in
    /// memory, and point the branch at the result, as `git rebase onto`
    /// does: authors and messages kept, the committer now; a commit that
    /// becomes empty is dropped, one that was empty to begin with is kept.
    /// The index and the work tree are not touched. Returns the new tip, or
    /// `None` (nothing changed) when `git rebase` must do it: a conflict, a
    /// merge commit, a detached HEAD, a message that is not UTF-8.
    pub fn rebase(&self, onto: &str) -> Result<Option<Oid>, git2::Error> {
        self.rebase_onto(onto, onto)
    }

    /// [`Self::rebase`] of only the commits of HEAD's branch that
    /// `upstream` lacks (`git rebase --onto <onto> <upstream>`).
    pub fn rebase_onto(&self, onto: &str, upstream: &str) -> Result<Option<Oid>, git2::Error> {
        let head = self.repo.head()?;
        let Some(branch) = head.name().ok().filter(|_| head.is_branch()) else {
            return Ok(None);
        };
        let branch = branch.to_owned();
        let tip = head.peel_to_commit()?;
        let onto = self.repo.revparse_single(onto)?.peel_to_commit()?;
        if tip.id() == onto.id() || self.repo.graph_descendant_of(tip.id(), onto.id())? {
            return Ok(Some(tip.id()));
        }
        let mut walk = self.repo.revwalk()?;
        walk.push(tip.id())?;
        walk.hide(onto.id())?;
        walk.hide(self.repo.revparse_single(upstream)?.peel_to_commit()?.id())?;
        walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE)?;
        let commits: Vec<Commit<'_>> = walk
            .map(|id| self.repo.find_commit(id?))
            .collect::<Result<_, _>>()?;
        let committer = self.repo.committer_from_env()?;
        let mut new_tip = onto;
        for commit in &commits {
            let Some(message) = commit
                .message_raw()
                .ok()
                .filter(|_| commit.parent_count() == 1)
            else {
                return Ok(None);
            };
            let tree = match self.replay(commit, &new_tip)? {
                Some(id) => self.repo.find_tree(id)?,
                None => return Ok(None),
            };
            let was_empty = commit.tree_id() == commit.parent(0)?.tree_id();
            if tree.id() == new_tip.tree_id() && !was_empty {
                continue;
            }
            let id = self.repo.commit(
                None,
                &commit.author(),
                &committer,
                message,
                &tree,
                &[&new_tip],
            )?;
            new_tip = self.repo.find_commit(id)?;
        }
        let log = format!("{REBASE_LOG} {}", new_tip.id());
        self.repo
            .reference_matching(&branch, new_tip.id(), true, tip.id(), &log)?;
        Ok(Some(new_tip.id()))
    }

    /// The tree of `commit`'s change applied on `onto`: by a merge of the
    /// trees that reads only what changed (tree_merge.rs), else by
    /// libgit2's full merge; `None` on a conflict.
    fn replay(&self, commit: &Commit<'_>, onto: &Commit<'_>) -> Result<Option<Oid>, git2::Error> {
        let base = commit.parent(0)?.tree()?;
        let (ours, theirs) = (onto.tree()?, commit.tree()?);
        if let Some(id) = trivial_merge(&self.repo, Some(&base), &ours, &theirs)? {
            return Ok(Some(id));
        }
        let mut index = self.repo.cherrypick_commit(commit, onto, 0, None)?;
        if index.has_conflicts() {
            return Ok(None);
        }
        index.write_tree_to(&self.repo).map(Some)
    }

    /// Point ref `name` at commit `sha`, which must be readable here (from
    /// the clone's objects or those it borrows).
    pub fn set_ref(&self, name: &str, sha: &str) -> Result<(), git2::Error> {
        let commit = self.repo.find_commit(Oid::from_str(sha)?)?;
        self.repo.reference(name, commit.id(), true, SYNC_LOG)?;
        Ok(())
    }

    /// A setting in the clone's own config file (not the user's).
    pub fn local_config(&self, key: &str) -> Option<String> {
        let config = self.repo.config().ok()?;
        let local = config.open_level(git2::ConfigLevel::Local).ok()?;
        local.get_string(key).ok()
    }

    /// How many commits HEAD has that `upstream` (a revision) lacks.
    pub fn count_since(&self, upstream: &str) -> Result<usize, git2::Error> {
        let mut walk = self.repo.revwalk()?;
        walk.push_head()?;
        walk.hide(self.repo.revparse_single(upstream)?.peel_to_commit()?.id())?;
        Ok(walk.count())
    }

    /// The index as it is on disk now (read again only when its file
    /// changed). Once a read failed (an index split by an agent's git,
    /// which libgit2 cannot read), every later call fails too: libgit2
    /// keeps an empty index in memory then, and answers it while the file
    /// is unchanged — [`Workdir::clean`] would remove every tracked file.
    /// The caller falls back to the `git` command.
    fn index(&self) -> Result<Index, git2::Error> {
        if self.unreadable.get() {
            return Err(git2::Error::from_str("the index could not be read before"));
        }
        let mut index = self.repo.index()?;
        if let Err(e) = index.read(false) {
            self.unreadable.set(true);
            return Err(e);
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::command::Repo;

    /// A repository with one commit (`a.txt`, `.gitignore` ignoring
    /// `*.log`), on branch `main`, with an identity of its own.
    fn repo(dir: &Path) -> Repo {
        let r = Repo::new(dir);
        r.run(["init", "--quiet", "-b", "main"]).unwrap();
        r.run(["config", "user.email", "t@example.com"]).unwrap();
        r.run(["config", "user.name", "t"]).unwrap();
        write(dir, "a.txt", "one\ntwo\nthree\n");
        write(dir, ".gitignore", "*.log\n");
        assert!(r.commit_all("start").unwrap());
        r
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn open(dir: &Path) -> Workdir {
        Workdir::open(dir).unwrap().expect("no signing asked for")
    }

    fn files_at(r: &Repo, rev: &str) -> Vec<String> {
        let out = r.run(["ls-tree", "-r", "--name-only", rev]).unwrap();
        out.lines().map(str::to_owned).collect()
    }

    /// Every file of the work tree but `.git`, with its mode and content
    /// (a link's target).
    fn work_tree(d: &Path) -> Vec<(String, u32, String)> {
        use std::os::unix::fs::PermissionsExt;
        let mut out = Vec::new();
        let mut todo = vec![d.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                if path == d.join(".git") {
                    continue;
                }
                let m = std::fs::symlink_metadata(&path).unwrap();
                let rel = path.strip_prefix(d).unwrap().display().to_string();
                if m.is_dir() {
                    todo.push(path.clone());
                } else if m.file_type().is_symlink() {
                    let to = std::fs::read_link(&path).unwrap();
                    out.push((rel, 0o120000, to.display().to_string()));
                } else {
                    let text = std::fs::read_to_string(&path).unwrap();
                    out.push((rel, m.permissions().mode() & 0o111, text));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn checkout_from_leaves_what_read_tree_leaves() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("clone");
        std::fs::create_dir(&d).unwrap();
        let r = repo(&d);
        write(&d, "keep.txt", "same\n");
        write(&d, "edit.txt", "before\n");
        write(&d, "gone.txt", "soon gone\n");
        write(&d, "becomes-dir", "a file first\n");
        write(&d, "dir-goes/x.txt", "x\n");
        write(&d, "run.sh", "#!/bin/sh\n");
        write(&d, "tasks/t1.md", "t1\n");
        r.commit_all("from").unwrap();
        let from = r.run(["rev-parse", "HEAD"]).unwrap();
        write(&d, "edit.txt", "after\n");
        std::fs::remove_file(d.join("gone.txt")).unwrap();
        std::fs::remove_file(d.join("becomes-dir")).unwrap();
        write(&d, "becomes-dir/inside.txt", "now a directory\n");
        std::fs::remove_dir_all(d.join("dir-goes")).unwrap();
        write(&d, "dir-goes", "now a file\n");
        let exec = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(d.join("run.sh"), exec).unwrap();
        std::os::unix::fs::symlink("keep.txt", d.join("link")).unwrap();
        std::fs::rename(d.join("tasks/t1.md"), d.join("tasks/done.md")).unwrap();
        write(&d, "new/deep/file.txt", "new\n");
        r.commit_all("to").unwrap();
        let to = r.run(["rev-parse", "HEAD"]).unwrap();
        let expected = work_tree(&d);

        // Back at `from` by git's own hand, then forward in-process.
        r.run(["read-tree", "--reset", "-u", &from]).unwrap();
        assert_ne!(work_tree(&d), expected);
        let w = open(&d);
        let tree = w.index_tree().unwrap();
        assert_eq!(
            tree.to_string(),
            r.run(["rev-parse", &format!("{from}^{{tree}}")]).unwrap()
        );
        w.checkout_from(tree, &to).unwrap();
        assert_eq!(work_tree(&d), expected);
        // git agrees: the index is `to`'s tree, and no file differs from it.
        assert_eq!(r.run(["diff", "--cached", "--name-only", &to]).unwrap(), "");
        assert_eq!(r.run(["diff", "--name-only"]).unwrap(), "");
        assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "");
    }

    #[test]
    fn an_index_split_under_an_open_clone_is_never_cleaned_by_it() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let r = repo(d);
        let w = open(d);
        w.clean().unwrap();
        // An agent's git splits the index; libgit2 cannot read it.
        r.run(["update-index", "--split-index"]).unwrap();
        for _ in 0..2 {
            assert!(w.clean().is_err(), "an unreadable index must stop clean");
            assert!(d.join("a.txt").exists(), "clean removed a tracked file");
        }
        assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "");
    }

    #[test]
    fn descends_from_answers_as_merge_base_is_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let r = repo(d);
        let root = r.run(["rev-parse", "HEAD"]).unwrap();
        r.run(["branch", "side"]).unwrap();
        write(d, "b.txt", "b\n");
        r.commit_all("on main").unwrap();
        r.run(["checkout", "-q", "side"]).unwrap();
        write(d, "c.txt", "c\n");
        r.commit_all("on side").unwrap();
        let w = open(d);
        assert!(w.descends_from(&root).unwrap());
        assert!(w.descends_from("HEAD").unwrap());
        assert!(!w.descends_from("main").unwrap());
    }

    #[test]
    fn stage_all_commits_what_git_add_all_would() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let r = repo(d);
        write(d, "old.txt", "soon gone\n");
        write(d, "staged.txt", "staged by the agent\n");
        r.commit_all("old").unwrap();
        std::fs::remove_file(d.join("old.txt")).unwrap();
        write(d, "staged.txt", "staged again\n");
        r.run(["add", "staged.txt"]).unwrap();
        write(d, "a.txt", "changed\n");
        write(d, "new/b.txt", "b\n");
        write(d, "build.log", "ignored\n");
        let w = open(d);
        let mut staged = w.stage_all().unwrap();
        staged.sort();
        assert_eq!(staged, ["a.txt", "new/b.txt", "old.txt", "staged.txt"]);
        w.commit("farm: left over\n\n  with a body  \n\n", &staged)
            .unwrap();
        assert_eq!(
            files_at(&r, "HEAD"),
            [".gitignore", "a.txt", "new/b.txt", "staged.txt"]
        );
        assert_eq!(r.run(["show", "HEAD:a.txt"]).unwrap(), "changed");
        // The message is cleaned up as `git commit -m` does.
        assert_eq!(
            r.run(["log", "-1", "--format=%B"]).unwrap(),
            "farm: left over\n\n  with a body"
        );
        assert_eq!(
            r.run(["log", "-1", "--format=%an <%ae>"]).unwrap(),
            "t <t@example.com>"
        );
        // git sees a clean tree, and its own index agrees with the commit.
        assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "");
        assert!(!w.commit_all("nothing").unwrap(), "nothing left to commit");
        assert_eq!(r.run(["rev-list", "--count", "HEAD"]).unwrap(), "3");
    }

    /// A list of staged paths with a name wrong in it (as `git diff`
    /// quotes one it does not print plainly) does not leave the file out
    /// of the commit: its tree is the index's.
    #[test]
    fn a_staged_name_the_list_got_wrong_is_committed_all_the_same() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let r = repo(d);
        write(d, "caf\u{e9}.txt", "written\n");
        write(d, "b.txt", "b\n");
        let w = open(d);
        let mut staged = w.stage_all().unwrap();
        staged.sort();
        assert_eq!(staged, ["b.txt", "caf\u{e9}.txt"]);
        let quoted = vec!["b.txt".to_owned(), "\"caf\\303\\251.txt\"".to_owned()];
        w.commit("farm: left over", &quoted).unwrap();
        assert_eq!(r.run(["show", "HEAD:caf\u{e9}.txt"]).unwrap(), "written");
        assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "");
    }

    #[test]
    fn clean_removes_all_git_does_not_track_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("clone");
        std::fs::create_dir(&d).unwrap();
        let r = repo(&d);
        let outside = tmp.path().join("outside");
        write(&outside, "keep.txt", "precious\n");
        write(&d, "untracked.txt", "x");
        write(&d, "deep/dir/file.txt", "x");
        write(&d, "run.log", "ignored");
        write(&d, "target/debug/big.log", "ignored dir");
        std::fs::create_dir(d.join("nested")).unwrap();
        Repo::new(d.join("nested"))
            .run(["init", "--quiet"])
            .unwrap();
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
        write(&d, "a.txt", "modified, tracked: stays\n");
        write(&d, "sub/tracked.txt", "tracked\n");
        r.run(["add", "sub/tracked.txt"]).unwrap();
        write(&d, "sub/new.txt", "untracked, beside a tracked file");
        write(
            &d,
            "sub/deeper/new.txt",
            "untracked, below a tracked directory",
        );
        open(&d).clean().unwrap();
        for gone in [
            "untracked.txt",
            "deep",
            "run.log",
            "target",
            "nested",
            "link",
            "sub/new.txt",
            "sub/deeper",
        ] {
            assert!(
                std::fs::symlink_metadata(d.join(gone)).is_err(),
                "{gone} is still there"
            );
        }
        assert_eq!(
            std::fs::read_to_string(d.join("a.txt")).unwrap(),
            "modified, tracked: stays\n"
        );
        assert!(d.join(".gitignore").exists());
        assert!(d.join("sub/tracked.txt").exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "precious\n"
        );
        // What git itself would still clean: nothing.
        assert_eq!(r.run(["clean", "-ffdxn"]).unwrap(), "");
    }

    #[test]
    fn same_at_compares_one_path_of_two_commits() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let r = repo(d);
        let first = r.run(["rev-parse", "HEAD"]).unwrap();
        write(d, "other.txt", "x");
        r.commit_all("other").unwrap();
        let second = r.run(["rev-parse", "HEAD"]).unwrap();
        write(d, "current_tasks/x.txt", "claim");
        r.commit_all("claims touched").unwrap();
        let third = r.run(["rev-parse", "HEAD"]).unwrap();
        let w = open(d);
        assert!(
            w.same_at(&first, &second, "current_tasks").unwrap(),
            "absent in both"
        );
        assert!(!w.same_at(&second, &third, "current_tasks").unwrap());
        assert!(w.same_at(&first, &third, "a.txt").unwrap());
        assert!(!w.same_at(&first, &second, "other.txt").unwrap());
    }

    /// `main` moves on (a change at the end of a.txt, a new file) while
    /// branch `work` has two commits of its own and one that was empty.
    fn diverged(d: &Path) -> (Repo, String) {
        let r = repo(d);
        r.run(["checkout", "--quiet", "-b", "work"]).unwrap();
        write(d, "a.txt", "ONE\ntwo\nthree\n");
        r.commit_all("work: first line").unwrap();
        r.run([
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            "work: empty on purpose",
        ])
        .unwrap();
        write(d, "w.txt", "mine\n");
        r.run(["add", "w.txt"]).unwrap();
        r.run([
            "-c",
            "user.name=someone else",
            "commit",
            "--quiet",
            "-m",
            "work: a file",
        ])
        .unwrap();
        r.run(["checkout", "--quiet", "main"]).unwrap();
        write(d, "a.txt", "one\ntwo\nTHREE\n");
        write(d, "m.txt", "theirs\n");
        r.commit_all("main: last line").unwrap();
        let main = r.run(["rev-parse", "main"]).unwrap();
        r.run(["checkout", "--quiet", "work"]).unwrap();
        (r, main)
    }

    #[test]
    fn rebase_replays_the_branch_in_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let (r, main) = diverged(d);
        let before = r.run(["rev-parse", "HEAD"]).unwrap();
        let patches = |range: &str| r.run(["log", "--format=%s|%an", range]).unwrap();
        let old = patches("main..work");
        let tip = open(d).rebase("main").unwrap().expect("a clean rebase");
        assert_eq!(r.run(["rev-parse", "work"]).unwrap(), tip.to_string());
        assert_eq!(r.run(["merge-base", "work", "main"]).unwrap(), main);
        // Same commits, same authors (the empty one kept), in order.
        assert_eq!(patches("main..work"), old);
        assert_eq!(r.run(["rev-list", "--count", "main..work"]).unwrap(), "3");
        assert_eq!(r.run(["show", "work:a.txt"]).unwrap(), "ONE\ntwo\nTHREE");
        assert_eq!(r.run(["show", "work:m.txt"]).unwrap(), "theirs");
        // The work tree is untouched: it still shows the commit before.
        assert_eq!(
            std::fs::read_to_string(d.join("a.txt")).unwrap(),
            "ONE\ntwo\nthree\n"
        );
        assert!(!d.join("m.txt").exists());
        // Once on top of main, there is nothing to do.
        assert_eq!(open(d).rebase("main").unwrap(), Some(tip));
        assert_ne!(before, tip.to_string());
    }

    #[test]
    fn rebase_drops_a_commit_that_became_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let r = repo(d);
        r.run(["checkout", "--quiet", "-b", "work"]).unwrap();
        write(d, "same.txt", "both made this\n");
        r.commit_all("work: same").unwrap();
        r.run(["checkout", "--quiet", "main"]).unwrap();
        write(d, "same.txt", "both made this\n");
        r.commit_all("main: same").unwrap();
        r.run(["checkout", "--quiet", "work"]).unwrap();
        let tip = open(d).rebase("main").unwrap().expect("a clean rebase");
        assert_eq!(tip.to_string(), r.run(["rev-parse", "main"]).unwrap());
    }

    #[test]
    fn rebase_leaves_conflicts_and_merges_to_git() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let (r, _) = diverged(d);
        r.run(["checkout", "--quiet", "main"]).unwrap();
        write(d, "a.txt", "uno\ntwo\nthree\n");
        r.commit_all("main: the same line").unwrap();
        r.run(["checkout", "--quiet", "work"]).unwrap();
        let before = r.run(["rev-parse", "work"]).unwrap();
        assert_eq!(open(d).rebase("main").unwrap(), None);
        assert_eq!(r.run(["rev-parse", "work"]).unwrap(), before, "unchanged");

        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let (r, _) = diverged(d);
        r.run(["merge", "--quiet", "--no-edit", "main"]).unwrap();
        let before = r.run(["rev-parse", "work"]).unwrap();
        r.run(["checkout", "--quiet", "main"]).unwrap();
        write(d, "z.txt", "more\n");
        r.commit_all("main: more").unwrap();
        r.run(["checkout", "--quiet", "work"]).unwrap();
        assert_eq!(open(d).rebase("main").unwrap(), None, "a merge to replay");
        assert_eq!(r.run(["rev-parse", "work"]).unwrap(), before);
    }

    /// Regression: libgit2 cannot read git's split index; a clone's index
    /// read as empty made `clean` remove every tracked file. Split by its
    /// config, or by hand with no config at all (git then keeps it split),
    /// the clone is left to git.
    #[test]
    fn a_split_index_is_left_to_git() {
        let tmp = tempfile::tempdir().unwrap();
        let r = repo(tmp.path());
        r.run(["config", "core.splitIndex", "true"]).unwrap();
        assert!(Workdir::open(tmp.path()).unwrap().is_none(), "by config");

        let tmp = tempfile::tempdir().unwrap();
        let r = repo(tmp.path());
        r.run(["update-index", "--split-index"]).unwrap();
        assert!(Workdir::open(tmp.path()).unwrap().is_none(), "by hand");
    }

    /// The other index features git2 0.21 might misread: each is read
    /// right (`clean` keeps what is tracked, `stage_all` finds nothing to
    /// stage, git agrees), so the clone stays in-process. `core.fsmonitor`
    /// is a hook here (git's own daemon does not run on Linux) that says
    /// every file may have changed.
    #[test]
    fn other_index_features_are_read_right() {
        for (key, value) in [
            ("index.version", "4"),
            ("core.untrackedCache", "true"),
            ("feature.manyFiles", "true"),
            ("core.fsmonitor", ".git/fsmonitor.sh"),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let d = tmp.path();
            let r = repo(d);
            write(d, ".git/fsmonitor.sh", "#!/bin/sh\nprintf 'token\\0/\\0'\n");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                d.join(".git/fsmonitor.sh"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
            r.run(["config", key, value]).unwrap();
            write(d, "dir/b.txt", "b\n");
            write(d, "dir/c.txt", "c\n");
            r.commit_all("more").unwrap();
            // git writes the index anew with the feature on.
            r.run(["read-tree", "--reset", "-u", "HEAD"]).unwrap();
            r.run(["status", "--porcelain"]).unwrap();
            write(d, "untracked.txt", "x");
            let w = open(d);
            w.clean().unwrap();
            assert!(!d.join("untracked.txt").exists(), "{key}");
            assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "", "{key}");
            assert_eq!(w.stage_all().unwrap(), Vec::<String>::new(), "{key}");
            assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "", "{key}");
            // Again once git has rewritten the index under the open clone.
            r.run(["read-tree", "--reset", "-u", "HEAD"]).unwrap();
            w.clean().unwrap();
            assert!(d.join("dir/c.txt").exists(), "{key}");
            assert_eq!(r.run(["status", "--porcelain"]).unwrap(), "", "{key}");
        }
    }

    #[test]
    fn git_true_reads_a_value_as_git_does() {
        for yes in ["", "true", "Yes", "on", "1", "-2"] {
            assert!(git_true(yes), "{yes:?}");
        }
        for no in ["false", "no", "off", "0", "maybe"] {
            assert!(!git_true(no), "{no:?}");
        }
    }

    #[test]
    fn a_clone_that_signs_its_commits_is_left_to_git() {
        let tmp = tempfile::tempdir().unwrap();
        let r = repo(tmp.path());
        r.run(["config", "commit.gpgsign", "true"]).unwrap();
        assert!(Workdir::open(tmp.path()).unwrap().is_none());
    }
}
