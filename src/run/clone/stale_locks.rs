//! Stale git lock files (`index.lock`, `HEAD.lock`, `refs/**/*.lock`, …):
//! the clone is this loop's alone (its flock), so a lock no live git
//! process holds was left by one killed mid-way, and would fail every later
//! git command here until removed.

use std::path::{Path, PathBuf};

use super::PrivateClone;

impl PrivateClone {
    /// Remove the git locks a session left (see [`remove_stale_locks`]).
    pub(super) fn remove_stale_locks(&self) {
        remove_stale_locks(self.dir(), &|l| self.say(l));
    }
}

/// Remove the git lock files in the clone at `dir`, each named through
/// `say`: stale once the clone's flock is ours and its session's group is
/// gone (see `PrivateClone::recover`), and each one left would fail every
/// later git command here.
pub(super) fn remove_stale_locks(dir: &Path, say: &dyn Fn(&str)) {
    let git_dir = dir.join(".git");
    let mut locks = Vec::new();
    lock_files(&git_dir, false, &mut locks);
    lock_files(&git_dir.join("refs"), true, &mut locks);
    for lock in locks {
        match std::fs::remove_file(&lock) {
            Ok(()) => say(&format!(
                "removed `{}`, a stale git lock (no process works in this clone now)",
                lock.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => say(&format!(
                "cannot remove the stale git lock `{}`: {e}",
                lock.display()
            )),
        }
    }
}

/// Collect the `*.lock` files in `dir` (and below it when `deep`) into
/// `out`. Symlinks are not followed.
fn lock_files(dir: &Path, deep: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if deep {
                lock_files(&path, deep, out);
            }
        } else if path.extension().is_some_and(|e| e == "lock") {
            out.push(path);
        }
    }
}
