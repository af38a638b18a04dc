//! Reading the board from a commit's tree instead of a work tree, at the
//! cost of what changed since the last read ([`Cache::read`]). The loop
//! reads the board every turn; [`load`](super::load()) stats and parses
//! every task file each time, so a task cost more the larger the board
//! (116 ms per task on 2,000 tasks against 30 on 50, measured before this
//! cache). Here an unchanged `tasks/` tree is not looked at again, and of a
//! changed one only blobs not seen before are parsed. The rules are
//! [`load`](super::load())'s: the same states, the same [`Invalid`] entries
//! and messages.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use git2::{ObjectType, Oid, Repository, Tree};

use super::Snapshot;
use super::load::{Board, Entry, Kind, assemble};
use super::task::{MAX_TASK_BYTES, Task, parse};
use crate::names::TaskId;

/// What the loop keeps between two reads of the board.
#[derive(Default)]
pub struct Cache {
    /// The `tasks/` tree last read (`None`: none there), and what it gave.
    last: Option<(Option<Oid>, Snapshot)>,
    /// A pending task file's blob, under its id → the parsed task or why
    /// it is invalid.
    parsed: HashMap<(Oid, TaskId), Result<Arc<Task>, String>>,
    /// How many blobs were parsed, and `tasks/` trees walked, for the tests.
    parses: usize,
    walks: usize,
}

impl Cache {
    /// The board at `rev` (a commit) in the repository at `repo`. Claims
    /// are left empty, as by [`load`](super::load()).
    pub fn read(&mut self, repo: &Path, rev: &str) -> Result<Snapshot, git2::Error> {
        // Objects are read as git itself reads them, without hashing each
        // one again to check its id: over 10,000 task files that check was
        // a twentieth of `farm tasks` (perf).
        git2::opts::strict_hash_verification(false);
        let repo = Repository::open(repo)?;
        let commit = repo.revparse_single(rev)?.peel_to_commit()?;
        let root = commit.tree()?;
        let tasks = root.get_name("tasks");
        let key = tasks.as_ref().map(|e| e.id());
        if let Some((last, snapshot)) = &self.last
            && *last == key
        {
            return Ok(snapshot.clone());
        }
        let mut board = Board::default();
        self.walks += 1;
        if let Some(e) = tasks {
            match e.kind() {
                Some(ObjectType::Tree) if e.filemode() == 0o040000 => {
                    let tree = repo.find_tree(e.id())?;
                    self.walk(&repo, &tree, &mut board)?;
                }
                _ if e.filemode() == 0o120000 => board.bad_dir("tasks", DIR_SYMLINK),
                _ => board.bad_dir("tasks", NOT_DIR),
            }
        }
        let snapshot = assemble(board);
        self.last = Some((key, snapshot.clone()));
        Ok(snapshot)
    }

    fn walk(
        &mut self,
        repo: &Repository,
        tasks: &Tree,
        board: &mut Board,
    ) -> Result<(), git2::Error> {
        for e in tasks.iter() {
            let Ok(name) = e.name() else {
                // A name that is not UTF-8: only `*.md` count, as in load.
                if e.name_bytes().ends_with(b".md") {
                    board.pending_invalid(
                        format!("tasks/{}", String::from_utf8_lossy(e.name_bytes())),
                        "the file name is not UTF-8".to_owned(),
                    );
                }
                continue;
            };
            if matches!(name, "done" | "failed") {
                let dir = format!("tasks/{name}");
                match (e.kind(), e.filemode()) {
                    (Some(ObjectType::Tree), 0o040000) => {
                        let sub = repo.find_tree(e.id())?;
                        for f in sub.iter() {
                            let Some(entry) = entry(&dir, f.name().ok(), f.name_bytes(), kind(&f))
                            else {
                                continue;
                            };
                            board.named(name, entry);
                        }
                    }
                    (_, 0o120000) => board.bad_dir(&dir, DIR_SYMLINK),
                    _ => board.bad_dir(&dir, NOT_DIR),
                }
                continue;
            }
            let Some(entry) = entry("tasks", Some(name), e.name_bytes(), kind(&e)) else {
                continue;
            };
            let parsed = match entry.check() {
                Err(error) => Err(error),
                Ok(id) => {
                    let key = (e.id(), id.clone());
                    if let Some(p) = self.parsed.get(&key) {
                        p.clone()
                    } else {
                        self.parses += 1;
                        let blob = repo.find_blob(e.id())?;
                        let p = parse_blob(id, blob.content()).map(Arc::new);
                        self.parsed.insert(key, p.clone());
                        p
                    }
                }
            };
            match parsed {
                Ok(task) => board.pending.push(task),
                Err(error) => board.pending_invalid(entry.name, error),
            }
        }
        Ok(())
    }
}

const DIR_SYMLINK: &str = "a symlink, which farm never follows; replace it with a directory";
const NOT_DIR: &str = "not a directory";

fn kind(e: &git2::TreeEntry) -> Kind {
    match (e.kind(), e.filemode()) {
        (_, 0o120000) => Kind::Symlink,
        (Some(ObjectType::Blob), _) => Kind::File,
        _ => Kind::Other,
    }
}

/// A `*.md` entry but `README.md`, as [`load`](super::load()) lists them.
fn entry(dir: &str, name: Option<&str>, bytes: &[u8], kind: Kind) -> Option<Entry> {
    if !bytes.ends_with(b".md") || bytes == b"README.md" {
        return None;
    }
    let id = match name {
        Some(n) => TaskId::parse(n.strip_suffix(".md").unwrap_or(n)).map_err(|e| e.to_string()),
        None => Err("the file name is not UTF-8".to_owned()),
    };
    Some(Entry {
        name: format!("{dir}/{}", String::from_utf8_lossy(bytes)),
        id,
        kind,
    })
}

fn parse_blob(id: TaskId, bytes: &[u8]) -> Result<Task, String> {
    if bytes.len() as u64 > MAX_TASK_BYTES {
        return Err(format!("larger than {} KiB", MAX_TASK_BYTES / 1024));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    parse(id, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A repository whose commits are made with the `git` command.
    struct Repo(tempfile::TempDir);

    impl Repo {
        fn new() -> Repo {
            let r = Repo(tempfile::tempdir().unwrap());
            r.git(&["init", "-q", "-b", "main"]);
            r
        }
        fn git(&self, args: &[&str]) -> String {
            let out = Command::new("git")
                .arg("-C")
                .arg(self.0.path())
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        }
        fn write(&self, rel: &str, text: &str) {
            let p = self.0.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        fn commit(&self) -> String {
            self.git(&["add", "-A"]);
            self.git(&["commit", "-q", "--allow-empty", "-m", "x"]);
            self.git(&["rev-parse", "HEAD"])
        }
        fn read(&self, cache: &mut Cache, rev: &str) -> Snapshot {
            cache.read(self.0.path(), rev).unwrap()
        }
    }

    fn titled(title: &str) -> String {
        format!("+++\ntitle = \"{title}\"\n+++\n")
    }

    fn titles(s: &Snapshot) -> Vec<(String, String)> {
        s.pending
            .iter()
            .map(|t| (t.id.as_str().to_owned(), t.title.clone()))
            .collect()
    }

    #[test]
    fn the_tree_reads_as_load_reads_the_work_tree() {
        let r = Repo::new();
        r.write("tasks/a.md", &titled("Do a"));
        r.write(
            "tasks/b.md",
            "+++\ntitle = \"b\"\nafter = [\"a\", \"d\"]\n+++\nBody\n",
        );
        r.write("tasks/README.md", "not a task");
        r.write("tasks/notes.txt", "ignored");
        r.write("tasks/bad.md", "+++\nafer = []\n+++\n");
        r.write("tasks/Bad Name.md", &titled("x"));
        r.write("tasks/twice.md", &titled("x"));
        r.write("tasks/huge.md", &"x".repeat(MAX_TASK_BYTES as usize + 1));
        std::fs::write(
            r.0.path().join("tasks/latin1.md"),
            b"+++\ntitle = \"\xe9\"\n+++\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("a.md", r.0.path().join("tasks/link.md")).unwrap();
        r.write("tasks/done/d.md", "");
        r.write("tasks/done/twice.md", "");
        r.write("tasks/failed/f.md", "");
        r.write("tasks/failed/-x.md", "");
        let rev = r.commit();
        let from_tree = r.read(&mut Cache::default(), &rev);
        let from_files = super::super::load(r.0.path()).unwrap();
        assert_eq!(from_tree, from_files);
        assert_eq!(from_tree.invalid.len(), 7, "{:#?}", from_tree.invalid);
    }

    #[test]
    fn an_unchanged_tree_is_not_read_again_and_a_changed_blob_is() {
        let r = Repo::new();
        r.write("tasks/a.md", &titled("one"));
        r.write("tasks/b.md", &titled("b"));
        let first = r.commit();
        let mut cache = Cache::default();
        r.read(&mut cache, &first);
        assert_eq!(cache.parses, 2);
        // A commit that does not touch tasks/: nothing parsed again.
        r.write("elsewhere.txt", "x");
        let second = r.commit();
        assert_eq!(titles(&r.read(&mut cache, &second))[0].1, "one");
        assert_eq!((cache.walks, cache.parses), (1, 2));
        // One task edited: that blob only is parsed, and read as it is now.
        r.write("tasks/a.md", &titled("two"));
        let third = r.commit();
        let s = r.read(&mut cache, &third);
        assert_eq!((cache.walks, cache.parses), (2, 3));
        assert_eq!(
            titles(&s),
            [
                ("a".to_owned(), "two".to_owned()),
                ("b".to_owned(), "b".to_owned())
            ]
        );
    }

    #[test]
    fn a_removed_task_disappears_and_a_task_moved_to_done_is_done() {
        let r = Repo::new();
        r.write("tasks/a.md", &titled("a"));
        r.write("tasks/b.md", &titled("b"));
        r.write("tasks/c.md", &titled("c"));
        let first = r.commit();
        let mut cache = Cache::default();
        assert_eq!(r.read(&mut cache, &first).pending.len(), 3);
        r.git(&["rm", "-q", "tasks/c.md"]);
        r.write("tasks/done/a.md", &titled("a"));
        r.git(&["rm", "-q", "tasks/a.md"]);
        let second = r.commit();
        let s = r.read(&mut cache, &second);
        assert_eq!(titles(&s), [("b".to_owned(), "b".to_owned())]);
        assert_eq!(s.done.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            crate::board::statuses(&s)
                .into_iter()
                .find(|(id, _)| id.as_str() == "a")
                .map(|(_, st)| st),
            Some(crate::board::Status::Done)
        );
    }
}
