//! What a work tree changed since its index was written, told the way git
//! tells it: by each tracked file's stat data and each directory's names,
//! reading no file. [`Workdir::stage_all`](super::workdir::Workdir::stage_all)
//! then stages just those paths.
//!
//! Why: libgit2's `add_all` walks the work tree through its diff iterators
//! (a sorted listing and an `lstat` of every file, and a comparison with the
//! index) and stages what differs. After each session on a board of 5,000
//! task files that walk was the largest single cost of marking a task done
//! (perf, `cargo bench --bench scale -- disk`); here the same answer costs a
//! `readdir` of each tracked directory and an `lstat` of each tracked file.
//!
//! Whatever this cannot tell for sure answers `None`, and the caller stages
//! with `add_all` as before: a conflict, an entry git flags (intent to add,
//! skip-worktree), a submodule, an untracked directory, a tracked directory
//! that became something else, or more changes than a session's leftovers
//! usually are.
//!
//! The walk over the names the index does not track ([`Tracked::untracked`])
//! is [`Workdir::clean`](super::workdir::Workdir::clean)'s too.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{DirEntry, FileType, Metadata};
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::{Index, IndexEntry, Repository};

/// More changed paths than this and `add_all` stages them: it reads each
/// one once as well, and a work tree changed that much is not the case
/// this is for (nor is an index whose stat data git2 wrote coarser).
const MOST: usize = 64;

/// The index entry flags of a stage other than 0 (a conflict).
const STAGE_MASK: u16 = 0x3000;

/// The gitlink mode: a submodule's commit.
const GITLINK: u32 = 0o160000;

/// The paths (relative, as the index names them) whose work-tree state may
/// differ from `index`: tracked files changed, gone or racily clean, and
/// untracked files not ignored. `None` when the answer is not sure.
pub fn changed_paths(
    repo: &Repository,
    dir: &Path,
    index: &Index,
) -> Result<Option<Vec<PathBuf>>, git2::Error> {
    let Ok(written) = std::fs::metadata(repo.path().join("index")) else {
        return Ok(None);
    };
    let entries: Vec<IndexEntry> = index.iter().collect();
    let flagged =
        |e: &IndexEntry| e.flags & STAGE_MASK != 0 || e.flags_extended != 0 || e.mode == GITLINK;
    if entries.iter().any(flagged) {
        return Ok(None);
    }
    let tracked = Tracked::of(&entries);
    let mut changed = Vec::new();
    // Directories first: an entry's `lstat` below must not go through a
    // symlink that took the place of a tracked directory.
    let walk = tracked.untracked(dir, |rel, _, kind| {
        // A tracked directory that became something else (a link).
        if tracked.dirs.contains(rel) {
            return Ok(ControlFlow::Break(()));
        }
        let rel = PathBuf::from(OsStr::from_bytes(rel));
        if repo.is_path_ignored(&rel)? {
            return Ok(ControlFlow::Continue(()));
        }
        if kind.is_dir() {
            return Ok(ControlFlow::Break(()));
        }
        changed.push(rel);
        Ok(ControlFlow::Continue(()))
    })?;
    if walk.is_break() {
        return Ok(None);
    }
    if changed.len() > MOST {
        return Ok(None);
    }
    for entry in &entries {
        let rel = Path::new(OsStr::from_bytes(&entry.path));
        let same = match std::fs::symlink_metadata(dir.join(rel)) {
            // A file that became a directory: `add_all` sorts that out.
            Ok(m) if m.is_dir() => return Ok(None),
            Ok(m) => unchanged(entry, &m, &written),
            Err(e) if gone(&e) => false,
            // Not a deletion to stage (a directory made unreadable, say).
            Err(_) => return Ok(None),
        };
        if !same {
            changed.push(rel.to_path_buf());
        }
        if changed.len() > MOST {
            return Ok(None);
        }
    }
    Ok(Some(changed))
}

/// The paths an index tracks and the directories that hold them, borrowed
/// from its entries (on a board of thousands, an allocation apiece was
/// most of a walk's cost).
pub struct Tracked<'a> {
    pub files: HashSet<&'a [u8]>,
    pub dirs: HashSet<&'a [u8]>,
}

impl<'a> Tracked<'a> {
    pub fn of(entries: &'a [IndexEntry]) -> Tracked<'a> {
        let mut files = HashSet::with_capacity(entries.len());
        let mut dirs = HashSet::new();
        for entry in entries {
            let path = &entry.path[..];
            for (i, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
                dirs.insert(&path[..i]);
            }
            files.insert(path);
        }
        Tracked { files, dirs }
    }

    /// Call `each` with every name in the work tree at `root` that the
    /// index does not track (outside `.git`), as a path relative to `root`,
    /// with its entry and its kind (a link is not followed). The walk
    /// enters only the directories that hold tracked files, and stops when
    /// `each` breaks.
    pub fn untracked(
        &self,
        root: &Path,
        mut each: impl FnMut(&[u8], &DirEntry, FileType) -> Result<ControlFlow<()>, git2::Error>,
    ) -> Result<ControlFlow<()>, git2::Error> {
        let mut todo = vec![Vec::new()];
        // One buffer for every name of the walk: an allocation a name was
        // a good part of a walk over thousands.
        let mut path = Vec::new();
        while let Some(rel) = todo.pop() {
            let dir = root.join(OsStr::from_bytes(&rel));
            for entry in std::fs::read_dir(&dir).map_err(|e| fail(&dir, e))? {
                let entry = entry.map_err(|e| fail(&dir, e))?;
                let name = entry.file_name();
                if rel.is_empty() && name == ".git" {
                    continue;
                }
                path.clear();
                path.extend_from_slice(&rel);
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name.as_bytes());
                if self.files.contains(&path[..]) {
                    continue;
                }
                let kind = entry.file_type().map_err(|e| fail(&entry.path(), e))?;
                if kind.is_dir() && self.dirs.contains(&path[..]) {
                    todo.push(path.clone());
                    continue;
                }
                if each(&path, &entry, kind)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Whether the file's stat data is what the index recorded, as git's own
/// check compares it (times to the nanosecond, size, inode, owner, the
/// kind and the executable bit), and the file was not changed in the
/// moment the index was written (git's "racily clean" entries).
fn unchanged(entry: &IndexEntry, m: &Metadata, written: &Metadata) -> bool {
    let recorded_mode = |mode: u32| {
        if m.file_type().is_symlink() {
            mode == 0o120000
        } else {
            mode == if m.mode() & 0o100 != 0 {
                0o100755
            } else {
                0o100644
            }
        }
    };
    let racy = (m.mtime(), m.mtime_nsec()) >= (written.mtime(), written.mtime_nsec());
    !racy
        && recorded_mode(entry.mode)
        && i64::from(entry.mtime.seconds()) == m.mtime()
        && i64::from(entry.mtime.nanoseconds()) == m.mtime_nsec()
        && i64::from(entry.ctime.seconds()) == m.ctime()
        && i64::from(entry.ctime.nanoseconds()) == m.ctime_nsec()
        && u64::from(entry.file_size) == m.size() & 0xffff_ffff
        && u64::from(entry.ino) == m.ino() & 0xffff_ffff
        && entry.uid == m.uid()
        && entry.gid == m.gid()
}

/// Whether `lstat` failed because nothing is at the path any more.
pub fn gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// An I/O error at `path`, as git2's error type.
pub fn fail(path: &Path, e: std::io::Error) -> git2::Error {
    git2::Error::from_str(&format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::command::Repo;
    use crate::git::workdir::Workdir;

    /// What a case is called, and the change it makes to a board.
    type Case = (&'static str, fn(&Path));

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A board-like repository committed by git: `tasks/a.md`,
    /// `tasks/b.md`, `tasks/done/c.md`, `run.sh`, `.gitignore` (`*.log`).
    fn board(dir: &Path) -> Repo {
        std::fs::create_dir_all(dir).unwrap();
        let r = Repo::new(dir);
        r.run(["init", "--quiet", "-b", "main"]).unwrap();
        r.run(["config", "user.email", "t@example.com"]).unwrap();
        r.run(["config", "user.name", "t"]).unwrap();
        for (rel, text) in [
            ("tasks/a.md", "a\n"),
            ("tasks/b.md", "b\n"),
            ("tasks/done/c.md", "c\n"),
            ("run.sh", "echo\n"),
            (".gitignore", "*.log\n"),
        ] {
            write(dir, rel, text);
        }
        r.run(["add", "--all"]).unwrap();
        r.run(["commit", "--quiet", "-m", "board"]).unwrap();
        r
    }

    fn changed(dir: &Path) -> Option<Vec<String>> {
        let repo = Repository::open(dir).unwrap();
        let index = repo.index().unwrap();
        changed_paths(&repo, dir, &index).unwrap().map(|paths| {
            let mut paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            paths.sort();
            paths
        })
    }

    #[test]
    fn a_task_moved_to_done_is_two_paths_and_nothing_else_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        board(d);
        assert_eq!(changed(d), Some(vec![]));
        std::fs::remove_file(d.join("tasks/a.md")).unwrap();
        write(d, "tasks/done/a.md", "a\n\n## Result\n");
        write(d, "tasks/build.log", "ignored\n");
        assert_eq!(
            changed(d),
            Some(vec!["tasks/a.md".to_owned(), "tasks/done/a.md".to_owned()])
        );
    }

    #[test]
    fn what_it_cannot_tell_for_sure_is_left_to_add_all() {
        let cases: [Case; 3] = [
            ("an untracked directory", |d| write(d, "new/x.md", "x\n")),
            ("a tracked directory now a link", |d| {
                std::fs::rename(d.join("tasks"), d.join("elsewhere")).unwrap();
                std::os::unix::fs::symlink("elsewhere", d.join("tasks")).unwrap();
            }),
            ("a tracked file now a directory", |d| {
                std::fs::remove_file(d.join("run.sh")).unwrap();
                write(d, "run.sh/x", "x\n");
            }),
        ];
        for (what, change) in cases {
            let tmp = tempfile::tempdir().unwrap();
            board(tmp.path());
            change(tmp.path());
            assert_eq!(changed(tmp.path()), None, "{what}");
        }
    }

    /// A tracked file in a directory the user may list but not search is
    /// one whose state cannot be told: not one to stage as deleted. Root
    /// looks into every directory, so as root the test runs itself again
    /// as `nobody`.
    #[test]
    fn a_tracked_file_that_cannot_be_looked_at_is_not_taken_for_deleted() {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        const AGAIN: &str = "FARM_TEST_UNSEARCHABLE_BOARD";
        if let Ok(dir) = std::env::var(AGAIN) {
            // SAFETY: set before any repository is opened in this process.
            unsafe { git2::opts::set_verify_owner_validation(false).unwrap() };
            assert_eq!(changed(Path::new(&dir)), None);
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mode = |m| std::fs::Permissions::from_mode(m);
        std::fs::set_permissions(tmp.path(), mode(0o755)).unwrap();
        let d = &tmp.path().join("board");
        board(d);
        std::fs::set_permissions(d.join("tasks/done"), mode(0o444)).unwrap();
        if unsafe { libc::geteuid() } != 0 {
            assert_eq!(changed(d), None);
            return;
        }
        // A copy of this test binary where nobody may run it (the build's
        // own directory may be under root's home).
        let exe = tmp.path().join("test");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        let status = std::process::Command::new(&exe)
            .args(["--exact", "git::changes::tests::a_tracked_file_that_cannot_be_looked_at_is_not_taken_for_deleted"])
            .env(AGAIN, d)
            // Root's home is not nobody's to read.
            .env("HOME", d)
            .env_remove("XDG_CONFIG_HOME")
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        std::fs::set_permissions(d.join("tasks/done"), mode(0o755)).unwrap();
        assert!(status.success(), "as nobody: {status}");
    }

    /// Each change an agent may leave, staged by [`Workdir::stage_all`] and
    /// by `git add --all` in a copy: the same tree.
    #[test]
    fn stage_all_stages_what_git_add_all_stages() {
        let cases: [Case; 10] = [
            ("nothing", |_| {}),
            ("an edit", |d| write(d, "tasks/a.md", "edited\n")),
            ("an edit of the same size, its mtime put back", |d| {
                let path = d.join("tasks/b.md");
                let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
                std::fs::write(&path, "B\n").unwrap();
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(mtime)
                    .unwrap();
            }),
            ("made executable", |d| {
                use std::os::unix::fs::PermissionsExt;
                let perm = std::fs::Permissions::from_mode(0o755);
                std::fs::set_permissions(d.join("tasks/a.md"), perm).unwrap();
            }),
            ("a file now a link", |d| {
                std::fs::remove_file(d.join("run.sh")).unwrap();
                std::os::unix::fs::symlink("tasks/a.md", d.join("run.sh")).unwrap();
            }),
            ("a file deleted", |d| {
                std::fs::remove_file(d.join("tasks/done/c.md")).unwrap()
            }),
            ("a whole directory deleted", |d| {
                std::fs::remove_dir_all(d.join("tasks")).unwrap()
            }),
            ("a new file, and an ignored one", |d| {
                write(d, "tasks/new.md", "new\n");
                write(d, "tasks/done/x.log", "ignored\n");
            }),
            ("a task moved to done", |d| {
                std::fs::remove_file(d.join("tasks/a.md")).unwrap();
                write(d, "tasks/done/a.md", "a\n## Result\n");
            }),
            ("an untracked directory", |d| write(d, "new/x.md", "x\n")),
        ];
        for (what, change) in cases {
            let tmp = tempfile::tempdir().unwrap();
            let (ours, theirs) = (tmp.path().join("ours"), tmp.path().join("theirs"));
            board(&ours);
            change(&ours);
            let copy = std::process::Command::new("cp")
                .arg("-a")
                .arg(&ours)
                .arg(&theirs)
                .status()
                .unwrap();
            assert!(copy.success());
            let w = Workdir::open(&ours).unwrap().unwrap();
            w.stage_all().unwrap();
            let git = Repo::new(&theirs);
            git.run(["add", "--all"]).unwrap();
            assert_eq!(
                Repo::new(&ours).run(["write-tree"]).unwrap(),
                git.run(["write-tree"]).unwrap(),
                "{what}"
            );
            // Nothing left unstaged, nothing untracked but what is ignored.
            let ours = Repo::new(&ours);
            assert_eq!(ours.run(["diff", "--name-only"]).unwrap(), "", "{what}");
            let others = ["ls-files", "--others", "--exclude-standard"];
            assert_eq!(ours.run(others).unwrap(), "", "{what}");
        }
    }
}
