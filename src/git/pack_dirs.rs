//! When a repository handle kept open must be opened again: libgit2 keeps
//! every pack it has read open and mapped for the handle's life, and finds
//! new ones as it needs them, but never lets go of one that was deleted.
//! farm's upkeep deletes packs all night (each roll-up replaces the packs
//! it read; see [`crate::git::maintain`]), in an agent's clone and in the
//! hub that the clone reads through its alternates; a handle opened for a
//! loop's life held ~1,000 of them after 5,000 tasks — file descriptors
//! past the usual limit of 1,024, disk space not given back, and the
//! supervisor's memory, and with it the cost of each of its forks (a fork
//! copies the page tables of all it maps), growing with every task.
//!
//! A pack directory's modification time moves whenever a pack is added to
//! it or deleted from it: a handle opened after those times were read holds
//! nothing deleted before them.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The pack directories of one repository — its own and those of its
/// alternates — with their modification times as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackDirs(Vec<(PathBuf, Option<SystemTime>)>);

/// How deep git follows alternates of alternates (its own limit).
const ALTERNATES_DEPTH: usize = 5;

impl PackDirs {
    /// The pack directories of the object directory `objects` and of its
    /// alternates, as they are now. Read them before the handle they are
    /// kept for reads any object (libgit2 opens packs as it needs them):
    /// a pack it opens later and that is deleted after is then a change.
    pub fn of(objects: &Path) -> PackDirs {
        let mut dirs = Vec::new();
        collect(objects, 0, &mut dirs);
        PackDirs(
            dirs.into_iter()
                .map(|d| {
                    let pack = d.join("pack");
                    let time = modified(&pack);
                    (pack, time)
                })
                .collect(),
        )
    }

    /// True when a pack was added to one of them or deleted from it since
    /// they were read (or one appeared, went or cannot be read now).
    pub fn changed(&self) -> bool {
        self.0.iter().any(|(dir, then)| modified(dir) != *then)
    }
}

fn modified(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// `objects` and, depth first, the object directories its
/// `info/alternates` names (a relative one is relative to `objects`).
fn collect(objects: &Path, depth: usize, dirs: &mut Vec<PathBuf>) {
    if dirs.iter().any(|d| d == objects) {
        return;
    }
    dirs.push(objects.to_path_buf());
    if depth >= ALTERNATES_DEPTH {
        return;
    }
    let Ok(text) = std::fs::read_to_string(objects.join("info/alternates")) else {
        return;
    };
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        collect(&objects.join(line), depth + 1, dirs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(objects: &Path, name: &str) -> PathBuf {
        let file = objects.join("pack").join(name);
        std::fs::write(&file, b"").unwrap();
        file
    }

    /// A directory's time moves in the file system's clock ticks: wait for
    /// the next one before changing it again.
    fn tick() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    #[test]
    fn a_pack_deleted_here_or_in_an_alternate_is_a_change_and_nothing_else_is() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path().join("hub/objects");
        let clone = tmp.path().join("clone/objects");
        for o in [&hub, &clone] {
            std::fs::create_dir_all(o.join("pack")).unwrap();
            std::fs::create_dir_all(o.join("info")).unwrap();
        }
        // Relative, as git allows: to the object directory.
        std::fs::write(
            clone.join("info/alternates"),
            "# borrowed\n../../hub/objects\n",
        )
        .unwrap();
        let in_hub = pack(&hub, "pack-1.pack");
        let in_clone = pack(&clone, "pack-2.pack");
        tick();

        let seen = PackDirs::of(&clone);
        assert_eq!(seen.0.len(), 2, "{seen:?}");
        assert!(!seen.changed());
        // Loose objects and other files of the object directory are not
        // packs.
        std::fs::create_dir_all(clone.join("ab")).unwrap();
        std::fs::write(clone.join("ab/cdef"), b"").unwrap();
        assert!(!seen.changed());

        std::fs::remove_file(&in_hub).unwrap();
        assert!(seen.changed(), "a pack deleted in the alternate");
        tick();
        let seen = PackDirs::of(&clone);
        std::fs::remove_file(&in_clone).unwrap();
        assert!(seen.changed(), "a pack deleted in the clone");
    }

    #[test]
    fn alternates_that_name_each_other_are_read_once() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        for o in [&a, &b] {
            std::fs::create_dir_all(o.join("info")).unwrap();
        }
        std::fs::write(a.join("info/alternates"), format!("{}\n", b.display())).unwrap();
        std::fs::write(b.join("info/alternates"), format!("{}\n", a.display())).unwrap();
        assert_eq!(PackDirs::of(&a).0.len(), 2);
    }
}
