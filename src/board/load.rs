//! Reading a checked-out board into a [`Snapshot`] ([`load`], the board's
//! only I/O): `tasks/*.md` are the pending tasks; `tasks/done/` and
//! `tasks/failed/` are read as names only (their content is not read). One
//! bad file does not stop the board: it is listed as [`Invalid`], and only
//! the tasks that depend on it are stuck.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::paths::{DONE, FAILED, TASKS};
use super::task::{MAX_TASK_BYTES, Task, parse};
use crate::names::TaskId;

/// A board file that is not a usable task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The path in the worktree: `tasks/x.md`, `tasks/done/x.md`,
    /// `tasks/failed/x.md`, or a directory (`tasks/done`) that is not one.
    pub name: String,
    /// Why, on one line.
    pub error: String,
}

/// The board as read from one checkout, plus who holds which claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `tasks/*.md` that parsed, sorted by id. Shared: the loop copies a
    /// snapshot at every step, and a copy of thousands of tasks, each a
    /// handful of strings, was a good part of a step's cost.
    pub pending: Vec<Arc<Task>>,
    pub done: BTreeSet<TaskId>,
    pub failed: BTreeSet<TaskId>,
    /// Sorted by name.
    pub invalid: Vec<Invalid>,
    /// Task → who holds its claim (`agent@host`), filled in by the caller.
    pub claimed: BTreeMap<TaskId, String>,
}

/// Read the board from a checked-out worktree. A missing directory is an
/// empty one; a bad file, or a `tasks` directory that is a symlink or not a
/// directory, is [`Invalid`] and the rest is read. Errors are I/O failures.
pub fn load(worktree: &Path) -> io::Result<Snapshot> {
    let mut b = Board::default();
    if !readable_dir(worktree, TASKS, &mut b.invalid)? {
        // `tasks/done` under a `tasks` symlink would be read through the link.
        return Ok(assemble(b));
    }
    for (e, path) in entries(worktree, TASKS)? {
        match read_task(&e, &path) {
            Ok(Some(task)) => b.pending.push(Arc::new(task)),
            Ok(None) => {}
            Err(error) => b.pending_invalid(e.name, error),
        }
    }
    for (dir, name) in [(DONE, "done"), (FAILED, "failed")] {
        if !readable_dir(worktree, dir, &mut b.invalid)? {
            continue;
        }
        for (e, _) in entries(worktree, dir)? {
            b.named(name, e);
        }
    }
    Ok(assemble(b))
}

/// A board's files as read, before one id is given one state: what
/// [`load`] and [`tree::Cache`](super::tree::Cache) both gather.
#[derive(Default)]
pub(super) struct Board {
    pub pending: Vec<Arc<Task>>,
    pub done: BTreeSet<TaskId>,
    pub failed: BTreeSet<TaskId>,
    pub invalid: Vec<Invalid>,
}

impl Board {
    pub fn pending_invalid(&mut self, name: String, error: String) {
        self.invalid.push(Invalid { name, error });
    }

    /// A board directory that is a symlink or not a directory.
    pub fn bad_dir(&mut self, dir: &str, error: &str) {
        self.invalid.push(Invalid {
            name: dir.to_owned(),
            error: error.to_owned(),
        });
    }

    /// An entry of `tasks/done/` (`dir` is `done`) or `tasks/failed/`:
    /// read as a name only.
    pub fn named(&mut self, dir: &str, e: Entry) {
        let set = if dir == "done" {
            &mut self.done
        } else {
            &mut self.failed
        };
        match e.check() {
            Ok(id) => {
                set.insert(id);
            }
            Err(error) => self.invalid.push(Invalid {
                name: e.name,
                error,
            }),
        }
    }
}

/// One id, one state: done beats failed beats pending. The losing copy is
/// reported so that someone removes it, rather than silently ignored.
pub(super) fn assemble(b: Board) -> Snapshot {
    let mut s = Snapshot {
        done: b.done,
        invalid: b.invalid,
        ..Snapshot::default()
    };
    let twice = |dir: &str| format!("also in {dir}/, which wins; remove this copy");
    let (dup, failed): (BTreeSet<_>, _) = b.failed.into_iter().partition(|id| s.done.contains(id));
    s.failed = failed;
    for id in dup {
        s.invalid.push(Invalid {
            name: super::paths::failed(&id),
            error: twice(DONE),
        });
    }
    for task in b.pending {
        let error = if s.done.contains(&task.id) {
            twice(DONE)
        } else if s.failed.contains(&task.id) {
            twice(FAILED)
        } else {
            s.pending.push(task);
            continue;
        };
        s.invalid.push(Invalid {
            name: super::paths::pending(&task.id),
            error,
        });
    }
    s.pending.sort_by(|a, b| a.id.cmp(&b.id));
    s.invalid.sort_by(|a, b| a.name.cmp(&b.name));
    s
}

/// What a board entry is, as far as the board cares.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Symlink,
    Other,
}

/// One `*.md` entry of a board directory, before its content is read.
pub(super) struct Entry {
    /// Path in the worktree, for messages and [`Invalid::name`].
    pub name: String,
    pub id: Result<TaskId, String>,
    pub kind: Kind,
}

impl Entry {
    /// The task id, if the entry is a regular file with a valid name.
    pub fn check(&self) -> Result<TaskId, String> {
        let id = self.id.clone()?;
        match self.kind {
            Kind::File => Ok(id),
            Kind::Symlink => {
                Err("a symlink, which farm never follows; replace it with a regular file".into())
            }
            Kind::Other => Err("not a regular file".into()),
        }
    }
}

/// Whether `worktree/dir` is a directory to read. A missing one is not; nor
/// is a symlink or a non-directory, which is also reported as invalid.
fn readable_dir(worktree: &Path, dir: &str, invalid: &mut Vec<Invalid>) -> io::Result<bool> {
    let path = worktree.join(dir);
    let error = match fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => return Ok(true),
        Ok(m) if m.file_type().is_symlink() => {
            "a symlink, which farm never follows; replace it with a directory"
        }
        Ok(_) => "not a directory",
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error("read", &path, e)),
    };
    invalid.push(Invalid {
        name: dir.to_owned(),
        error: error.to_owned(),
    });
    Ok(false)
}

/// The `*.md` entries of the directory `worktree/dir` but `README.md`, sorted by name.
fn entries(worktree: &Path, dir: &str) -> io::Result<Vec<(Entry, PathBuf)>> {
    let path = worktree.join(dir);
    let mut out = Vec::new();
    for entry in fs::read_dir(&path).map_err(|e| io_error("read", &path, e))? {
        let entry = entry.map_err(|e| io_error("read", &path, e))?;
        let file_name = entry.file_name();
        let as_path = Path::new(&file_name);
        if as_path.extension().is_none_or(|x| x != "md") || file_name == "README.md" {
            continue;
        }
        // Does not follow a symlink: it reports the link itself.
        let file_type = entry
            .file_type()
            .map_err(|e| io_error("read", &entry.path(), e))?;
        let id = match file_name.to_str() {
            Some(n) => TaskId::parse(n.strip_suffix(".md").unwrap_or(n)).map_err(|e| e.to_string()),
            None => Err("the file name is not UTF-8".to_owned()),
        };
        let kind = if file_type.is_symlink() {
            Kind::Symlink
        } else if file_type.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        let e = Entry {
            name: format!("{dir}/{}", file_name.to_string_lossy()),
            id,
            kind,
        };
        out.push((e, entry.path()));
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

/// Read and parse a pending task file. `Ok(None)`: it vanished since it was
/// listed. `Err` is why the file is invalid, an unreadable one included: one
/// file farm cannot read must not hide the rest of the board.
fn read_task(e: &Entry, path: &Path) -> Result<Option<Task>, String> {
    let id = e.check()?;
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        // Replaced by a symlink since it was listed.
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Err(
                "a symlink, which farm never follows; replace it with a regular file".into(),
            );
        }
        Err(err) => return Err(format!("cannot be read: {err}")),
    };
    let bytes = read_capped(&mut file).map_err(|err| format!("cannot be read: {err}"))?;
    if bytes.len() as u64 > MAX_TASK_BYTES {
        return Err(format!("larger than {} KiB", MAX_TASK_BYTES / 1024));
    }
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    parse(id, &text).map(Some)
}

/// Read at most one byte past the size limit, so an oversized file is
/// recognised without reading it whole; and only from a regular file, which a
/// FIFO swapped in after listing is not.
fn read_capped(file: &mut File) -> io::Result<Vec<u8>> {
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TASK_BYTES + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn io_error(action: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("cannot {action} `{}`: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Status;
    use crate::board::testing::{blocked, ids, minimal, status_of, stuck};

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn load_reads_the_whole_board() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "tasks/a.md", "+++\ntitle = \"Do a\"\n+++\n");
        write(
            root,
            "tasks/b.md",
            "+++\ntitle = \"Do b\"\nafter = [\"a\", \"d\"]\n+++\nBody\n",
        );
        write(root, "tasks/README.md", "not a task");
        write(root, "tasks/notes.txt", "ignored");
        write(root, "tasks/bad.md", "+++\nafer = []\n+++\n");
        write(root, "tasks/Bad Name.md", "+++\ntitle = \"x\"\n+++\n");
        write(root, "tasks/twice.md", "+++\ntitle = \"x\"\n+++\n");
        write(
            root,
            "tasks/huge.md",
            &"x".repeat(MAX_TASK_BYTES as usize + 1),
        );
        fs::write(
            root.join("tasks/latin1.md"),
            b"+++\ntitle = \"\xe9\"\n+++\n",
        )
        .unwrap();
        fs::create_dir(root.join("tasks/dir.md")).unwrap();
        std::os::unix::fs::symlink(root.join("tasks/a.md"), root.join("tasks/link.md")).unwrap();
        write(root, "tasks/done/d.md", "content is not read");
        write(root, "tasks/done/twice.md", "");
        write(root, "tasks/done/README.md", "");
        write(root, "tasks/failed/f.md", "");
        write(root, "tasks/failed/-x.md", "");
        std::os::unix::fs::symlink("/etc/passwd", root.join("tasks/failed/g.md")).unwrap();

        let s = load(root).unwrap();
        let names: Vec<&str> = s.pending.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(s.pending[1].after, ids(&["a", "d"]));
        assert_eq!(s.done, ids(&["d", "twice"]).into_iter().collect());
        assert_eq!(s.failed, ids(&["f"]).into_iter().collect());
        let invalid: Vec<(&str, &str)> = s
            .invalid
            .iter()
            .map(|i| (i.name.as_str(), i.error.as_str()))
            .collect();
        let want = [
            ("tasks/Bad Name.md", "invalid task id `Bad Name`"),
            ("tasks/bad.md", "unknown key `afer`"),
            ("tasks/dir.md", "not a regular file"),
            ("tasks/failed/-x.md", "invalid task id `-x`"),
            ("tasks/failed/g.md", "a symlink, which farm never follows"),
            ("tasks/huge.md", "larger than 1024 KiB"),
            ("tasks/latin1.md", "not UTF-8 text"),
            ("tasks/link.md", "a symlink, which farm never follows"),
            ("tasks/twice.md", "also in tasks/done/"),
        ];
        assert_eq!(invalid.len(), want.len(), "{invalid:#?}");
        for ((name, error), (want_name, want_error)) in invalid.iter().zip(want) {
            assert_eq!(*name, want_name);
            assert!(error.contains(want_error), "{name}: {error}");
            assert!(!error.contains('\n'), "{name}: {error}");
        }
        assert_eq!(status_of(&s, "b"), blocked(&["a"]));
        assert_eq!(status_of(&s, "twice"), Status::Done);
    }

    #[test]
    fn load_without_a_board_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), Snapshot::default());
        write(dir.path(), "tasks/a.md", "+++\ntitle = \"Do a\"\n+++\n");
        let s = load(dir.path()).unwrap();
        assert_eq!(s.pending, vec![Arc::new(minimal_titled("a", "Do a"))]);
    }

    fn minimal_titled(name: &str, title: &str) -> Task {
        Task {
            title: title.into(),
            ..minimal(name)
        }
    }

    #[test]
    fn load_pending_and_failed_copies() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "tasks/x.md", "+++\ntitle = \"x\"\n+++\n");
        write(root, "tasks/failed/x.md", "");
        write(root, "tasks/done/y.md", "");
        write(root, "tasks/failed/y.md", "");
        let s = load(root).unwrap();
        assert!(s.pending.is_empty());
        assert_eq!(s.failed, ids(&["x"]).into_iter().collect());
        assert_eq!(s.done, ids(&["y"]).into_iter().collect());
        let names: Vec<(&str, &str)> = s
            .invalid
            .iter()
            .map(|i| (i.name.as_str(), i.error.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "tasks/failed/y.md",
                    "also in tasks/done/, which wins; remove this copy"
                ),
                (
                    "tasks/x.md",
                    "also in tasks/failed/, which wins; remove this copy"
                ),
            ]
        );
    }

    #[test]
    fn load_reports_a_board_directory_that_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "elsewhere/done/x.md", "");
        write(
            root,
            "tasks/a.md",
            "+++\ntitle = \"Do a\"\nafter = [\"x\"]\n+++\n",
        );
        std::os::unix::fs::symlink(root.join("elsewhere/done"), root.join("tasks/done")).unwrap();
        write(root, "tasks/failed", "a file");
        let s = load(root).unwrap();
        assert_eq!(
            s.invalid,
            [
                Invalid {
                    name: "tasks/done".into(),
                    error: "a symlink, which farm never follows; replace it with a directory"
                        .into(),
                },
                Invalid {
                    name: "tasks/failed".into(),
                    error: "not a directory".into(),
                },
            ]
        );
        assert!(s.done.is_empty());
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `x`, which does not exist")
        );

        // A symlinked `tasks` is not read, nor anything under it.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(root.join("tasks"), other.path().join("tasks")).unwrap();
        let s = load(other.path()).unwrap();
        assert_eq!(s.pending, []);
        assert_eq!(s.invalid.len(), 1);
        assert_eq!(s.invalid[0].name, "tasks");
    }
}
