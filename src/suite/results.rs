//! What a tree's tests gave, kept in the state directory so that a tree is
//! tested once: the gate's baseline for the branch is the result it kept
//! when it pushed that branch's commit, not a second run.
//!
//! Results are keyed by the tree of the project's code ([`code_key`]): the
//! commit's root tree without the board (`tasks/`, `current_tasks/`) and
//! the progress document, which farm itself commits between two gated
//! pushes (an attempt's note, say) and which no test reads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::suite::report::{Outcome, Report};

/// Top-level entries that are farm's, not the project's code.
const NOT_CODE: [&str; 3] = ["tasks", "current_tasks", "PROGRESS.md"];

/// The key of `commit`'s code in the repository at `repo`: a hash of its
/// root tree's entries but [`NOT_CODE`] and `progress` (the progress
/// document's name, when it is not the default).
pub fn code_key(repo: &Path, commit: &str, progress: Option<&str>) -> Result<String, git2::Error> {
    let repo = Repository::open(repo)?;
    let tree = repo.revparse_single(commit)?.peel_to_tree()?;
    let mut listing = Vec::new();
    for entry in tree.iter() {
        if NOT_CODE
            .iter()
            .chain(&progress)
            .any(|n| n.as_bytes() == entry.name_bytes())
        {
            continue;
        }
        listing.extend(format!("{:o} ", entry.filemode()).bytes());
        listing.extend(entry.name_bytes());
        listing.extend(format!(" {}\n", entry.id()).bytes());
    }
    Ok(Oid::hash_object(ObjectType::Blob, &listing)?.to_string())
}

/// One tree's results: its report, and the commit it was taken at (one of
/// those with this code).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Results {
    pub commit: String,
    pub report: Report,
}

impl Results {
    pub fn of(commit: &str, report: &Report) -> Results {
        Results {
            commit: commit.to_owned(),
            report: report.clone(),
        }
    }

    /// The full names ([`Case::id`](crate::suite::report::Case::id)) of
    /// the tests that passed.
    pub fn passed(&self) -> BTreeSet<String> {
        self.report
            .cases
            .iter()
            .filter(|c| c.outcome == Outcome::Passed)
            .map(|c| c.id())
            .collect()
    }
}

/// At most this many results are kept (the newest): a night of pushes
/// would otherwise leave one file each.
const KEEP: usize = 64;

/// Results kept under `<state>/tests/`, one JSON file per code key.
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(state: &Path) -> Store {
        Store {
            dir: state.join("tests"),
        }
    }

    /// The results kept for `key`; `None` when there are none, or what is
    /// there cannot be read (a file cut short is as good as none).
    pub fn get(&self, key: &str) -> Option<Results> {
        let text = std::fs::read(self.dir.join(format!("{key}.json"))).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Keep `results` for `key`: written whole or not at all (a temp file
    /// renamed into place). Best effort: what is not kept is tested again.
    pub fn put(&self, key: &str, results: &Results) {
        let Ok(text) = serde_json::to_vec(results) else {
            return;
        };
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let Ok(mut tmp) = tempfile::NamedTempFile::new_in(&self.dir) else {
            return;
        };
        use std::io::Write;
        if tmp.write_all(&text).is_ok() {
            let _ = tmp.persist(self.dir.join(format!("{key}.json")));
        }
        self.prune();
    }

    /// Remove all but the [`KEEP`] newest results.
    fn prune(&self) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut kept: Vec<(std::time::SystemTime, PathBuf)> = dir
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if kept.len() <= KEEP {
            return;
        }
        kept.sort();
        for (_, path) in &kept[..kept.len() - KEEP] {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::command::Repo;

    fn commit(dir: &Path, files: &[(&str, &str)], message: &str) -> String {
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let repo = Repo::new(dir);
        repo.run(["add", "-A"]).unwrap();
        repo.run(["commit", "-qm", message]).unwrap();
        repo.run(["rev-parse", "HEAD"]).unwrap()
    }

    #[test]
    fn the_board_and_the_progress_document_are_not_code() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        Repo::new(dir).run(["init", "-q"]).unwrap();
        Repo::new(dir).run(["config", "user.email", "t@t"]).unwrap();
        Repo::new(dir).run(["config", "user.name", "t"]).unwrap();
        let a = commit(dir, &[("src/a.py", "1"), ("tasks/t.md", "x")], "a");
        let b = commit(dir, &[("tasks/done/t.md", "y"), ("PROGRESS.md", "p")], "b");
        let c = commit(dir, &[("src/a.py", "2")], "c");
        let d = commit(dir, &[("farm.toml", "[tests]")], "d");
        let key = |c: &str| code_key(dir, c, None).unwrap();
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&b), key(&c));
        assert_ne!(key(&c), key(&d));
        assert!(code_key(dir, "no-such-commit", None).is_err());
        // A progress document of another name is not code either.
        let e = commit(dir, &[("NOTES.md", "n")], "e");
        assert_ne!(key(&d), key(&e));
        assert_eq!(
            code_key(dir, &d, Some("NOTES.md")).unwrap(),
            code_key(dir, &e, Some("NOTES.md")).unwrap()
        );
    }

    #[test]
    fn results_are_kept_whole_and_a_torn_file_is_none() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path());
        let report = crate::suite::tap::parse("1..2\nok 1 - a\nnot ok 2 - b\n").unwrap();
        let results = Results::of("abc", &report);
        assert_eq!(results.passed().iter().collect::<Vec<_>>(), ["a"]);
        assert_eq!(store.get("k"), None);
        store.put("k", &results);
        assert_eq!(store.get("k"), Some(results.clone()));
        std::fs::write(tmp.path().join("tests/k.json"), "{\"commit\":").unwrap();
        assert_eq!(store.get("k"), None);
        // The newest are kept.
        for i in 0..KEEP + 3 {
            store.put(&format!("n{i:03}"), &results);
        }
        let left = std::fs::read_dir(tmp.path().join("tests")).unwrap().count();
        assert_eq!(left, KEEP);
        assert_eq!(store.get(&format!("n{:03}", KEEP + 2)), Some(results));
    }
}
