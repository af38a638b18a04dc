//! What the tests of the tree walks share: a seeded random source, index
//! entries made from text, and the rule that keeps a random set of paths
//! a valid index.

use std::cell::Cell;

use git2::{IndexEntry, IndexTime, Repository};

/// Paths for random trees: `d` a directory and a file in turn, and
/// `d.txt`, `d-x` and `d0`, which sort around it differently in git's
/// order (a directory's name as if it ended in `/`) than by their bytes.
pub const PATHS: [&str; 10] = [
    "a",
    "d",
    "d/a",
    "d/e/f",
    "d.txt",
    "d-x/y",
    "d0",
    "tasks/t1.md",
    "tasks/t2.md",
    "tasks/done/t0.md",
];

/// A small xorshift, seeded: the same cases on every run.
pub struct Rng(Cell<u64>);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(Cell::new(seed))
    }

    /// A number below `n`.
    pub fn below(&self, n: u64) -> u64 {
        let mut x = self.0.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.set(x);
        x % n
    }
}

/// An index entry for `path` holding `text` (written to `repo`), with
/// `mode`.
pub fn entry(repo: &Repository, path: &str, text: &str, mode: u32) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id: repo.blob(text.as_bytes()).unwrap(),
        flags: 0,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// Whether `paths` can be an index's: none of them a directory of another.
pub fn valid(paths: &[&str]) -> bool {
    !paths.iter().any(|p| {
        paths
            .iter()
            .any(|q| q.len() > p.len() && q.starts_with(p) && q.as_bytes()[p.len()] == b'/')
    })
}
