//! A three-way merge of trees that reads only what changed: where a subtree
//! is the same on two sides, the third side's id is taken without opening
//! it. Replaying an agent's commit onto the hub's branch
//! ([`Workdir::rebase`](crate::git::workdir::Workdir::rebase)) then costs
//! what the two sides changed, not the size of the repository.
//!
//! Why not git2's `cherrypick_commit`: libgit2 walks every entry of all three
//! trees and builds a full index of the result, and `write_tree_to` writes
//! it back. On a board of 5,000 task files that was half of farm's own CPU
//! time per task (perf, `cargo bench --bench scale`), and it grew with the
//! board. The merge here resolves only the trivial cases (one side changed
//! an entry, or both changed it alike), exactly as git does; anything else
//! (two sides changed one file differently, a file against a directory)
//! answers `None` and the caller asks libgit2 for a real merge.

use std::collections::BTreeMap;

use git2::{Oid, Repository, Tree};

use super::tree_diff::next_pair;
use super::tree_edit::{Entry, is_tree, key, write};

/// The tree of `base` → `theirs` applied on `ours`, when every path
/// resolves trivially; `None` when some path needs a content merge.
pub fn trivial_merge(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    ours: &Tree<'_>,
    theirs: &Tree<'_>,
) -> Result<Option<Oid>, git2::Error> {
    Ok(merge(repo, base, ours, theirs)?.map(|(id, _)| id))
}

/// [`trivial_merge`], and whether the tree it made is empty.
fn merge(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    ours: &Tree<'_>,
    theirs: &Tree<'_>,
) -> Result<Option<(Oid, bool)>, git2::Error> {
    let base_id = base.map(Tree::id);
    if ours.id() == theirs.id() || base_id == Some(theirs.id()) {
        return Ok(Some((ours.id(), ours.is_empty())));
    }
    if base_id == Some(ours.id()) {
        return Ok(Some((theirs.id(), theirs.is_empty())));
    }
    // What `theirs` changed since `base`, applied to `ours`: the names
    // `theirs` did not touch are copied from `ours` as they are.
    let mut edits: BTreeMap<Vec<u8>, Option<Entry>> = BTreeMap::new();
    for name in changed(base, theirs) {
        let entry = |t: Option<&Tree<'_>>| t.and_then(|t| t.get_name_bytes(&name).map(|e| key(&e)));
        let (b, o, t) = (entry(base), entry(Some(ours)), entry(Some(theirs)));
        let merged = if o == t {
            continue;
        } else if b == o {
            t
        } else if let (Some(o), Some(t)) = (o, t)
            && is_tree(o)
            && is_tree(t)
            && b.is_none_or(is_tree)
        {
            let sub = |e: Entry| repo.find_tree(e.0);
            let base_sub = b.map(sub).transpose()?;
            match merge(repo, base_sub.as_ref(), &sub(o)?, &sub(t)?)? {
                // git keeps no empty directory: a subtree merged to
                // nothing is left out.
                Some((_, true)) => None,
                Some((id, false)) => Some((id, o.1)),
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        edits.insert(name, merged);
    }
    write(repo, Some(ours), &edits).map(Some)
}

/// The names whose entry differs between `base` (absent: an empty tree)
/// and `theirs`: the two walked side by side, in git's order, no object
/// read. (A name that is a file on one side and a directory on the other
/// sits at two places in that order, and comes twice.)
fn changed(base: Option<&Tree<'_>>, theirs: &Tree<'_>) -> Vec<Vec<u8>> {
    let mut b = base.map(|t| t.iter().peekable());
    let mut t = Some(theirs.iter().peekable());
    let mut out = Vec::new();
    loop {
        match next_pair(&mut b, &mut t) {
            (None, None) => return out,
            (Some(x), Some(y)) if key(&x) == key(&y) => {}
            (Some(e), _) | (None, Some(e)) => out.push(e.name_bytes().to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A tree made of `files` (path → content; `None` leaves it out).
    fn tree(repo: &Repository, files: &BTreeMap<&str, &str>) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, text) in files {
            let mode = if path.ends_with(".sh") {
                0o100755
            } else {
                0o100644
            };
            index
                .add(&crate::git::testing::entry(repo, path, text, mode))
                .unwrap();
        }
        index.write_tree_to(repo).unwrap()
    }

    /// What libgit2's full merge makes of the same three trees, when it
    /// merges them cleanly.
    fn libgit2_merge(repo: &Repository, b: Oid, o: Oid, t: Oid) -> Option<Oid> {
        let [b, o, t] = [b, o, t].map(|id| repo.find_tree(id).unwrap());
        let mut index = repo.merge_trees(&b, &o, &t, None).unwrap();
        (!index.has_conflicts()).then(|| index.write_tree_to(repo).unwrap())
    }

    fn files<'a>(pairs: &[(&'a str, &'a str)]) -> BTreeMap<&'a str, &'a str> {
        pairs.iter().copied().collect()
    }

    /// Three trees, merged both ways; returns the trivial merge's answer
    /// after checking it against libgit2's.
    fn merge(
        base: &[(&str, &str)],
        ours: &[(&str, &str)],
        theirs: &[(&str, &str)],
    ) -> Option<BTreeMap<String, String>> {
        let tmp = tempfile::tempdir().unwrap();
        merge_in(
            &Repository::init_bare(tmp.path()).unwrap(),
            base,
            ours,
            theirs,
        )
    }

    fn merge_in(
        repo: &Repository,
        base: &[(&str, &str)],
        ours: &[(&str, &str)],
        theirs: &[(&str, &str)],
    ) -> Option<BTreeMap<String, String>> {
        let [b, o, t] = [base, ours, theirs].map(|f| tree(repo, &files(f)));
        let [bt, ot, tt] = [b, o, t].map(|id| repo.find_tree(id).unwrap());
        let ours_first = trivial_merge(repo, Some(&bt), &ot, &tt).unwrap();
        let reference = libgit2_merge(repo, b, o, t);
        if let Some(id) = ours_first {
            assert_eq!(Some(id), reference, "libgit2 merges these otherwise");
        }
        ours_first.map(|id| {
            let mut out = BTreeMap::new();
            repo.find_tree(id)
                .unwrap()
                .walk(git2::TreeWalkMode::PreOrder, |dir, e| {
                    if let Ok(blob) = e.to_object(repo).and_then(|o| o.peel_to_blob()) {
                        let text = String::from_utf8_lossy(blob.content()).into_owned();
                        out.insert(format!("{dir}{}", e.name().unwrap()), text);
                    }
                    git2::TreeWalkResult::Ok
                })
                .unwrap();
            out
        })
    }

    fn owned(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn changes_to_different_files_are_both_kept() {
        let base = [("tasks/a.md", "a"), ("tasks/b.md", "b"), ("src/x", "x")];
        let ours = [
            ("tasks/done/a.md", "a done"),
            ("tasks/b.md", "b"),
            ("src/x", "x"),
        ];
        let theirs = [
            ("tasks/a.md", "a"),
            ("tasks/b.md", "b"),
            ("src/x", "x2"),
            ("new", "n"),
        ];
        assert_eq!(
            merge(&base, &ours, &theirs),
            Some(owned(&[
                ("new", "n"),
                ("src/x", "x2"),
                ("tasks/b.md", "b"),
                ("tasks/done/a.md", "a done")
            ]))
        );
    }

    #[test]
    fn a_file_both_sides_changed_differently_needs_a_real_merge() {
        let base = [("f", "1\n2\n3\n")];
        assert_eq!(
            merge(&base, &[("f", "0\n2\n3\n")], &[("f", "1\n2\n4\n")]),
            None
        );
        // Deleted on one side, changed on the other: a conflict for git too.
        assert_eq!(merge(&base, &[], &[("f", "1\n2\n4\n")]), None);
    }

    #[test]
    fn the_same_change_on_both_sides_is_taken_once() {
        let base = [("f", "1"), ("g", "g")];
        let both = [("f", "2"), ("g", "g")];
        assert_eq!(merge(&base, &both, &both), Some(owned(&both)));
    }

    #[test]
    fn a_directory_emptied_by_the_merge_is_left_out() {
        let base = [("d/a", "a"), ("d/b", "b"), ("top", "t")];
        let ours = [("d/b", "b"), ("top", "t")];
        let theirs = [("d/a", "a"), ("top", "t")];
        assert_eq!(merge(&base, &ours, &theirs), Some(owned(&[("top", "t")])));
    }

    #[test]
    fn a_new_directory_on_both_sides_is_merged_inside() {
        let base = [("top", "t")];
        let ours = [("top", "t"), ("d/a", "a")];
        let theirs = [("top", "t"), ("d/b", "b")];
        assert_eq!(
            merge(&base, &ours, &theirs),
            Some(owned(&[("d/a", "a"), ("d/b", "b"), ("top", "t")]))
        );
    }

    #[test]
    fn a_file_against_a_directory_needs_a_real_merge() {
        let base = [("top", "t")];
        assert_eq!(
            merge(
                &base,
                &[("top", "t"), ("x", "file")],
                &[("top", "t"), ("x/y", "y")]
            ),
            None
        );
    }

    #[test]
    fn a_mode_change_is_a_change() {
        // Only the mode differs between `run` and `run.sh`-like modes: one
        // side made the file executable, the other did not touch it.
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        let blob = repo.blob(b"#!/bin/sh\n").unwrap();
        let make = |mode: i32| {
            let mut b = repo.treebuilder(None).unwrap();
            b.insert("run", blob, mode).unwrap();
            b.write().unwrap()
        };
        let (plain, exec) = (make(0o100644), make(0o100755));
        let [p, e] = [plain, exec].map(|id| repo.find_tree(id).unwrap());
        assert_eq!(trivial_merge(&repo, Some(&p), &p, &e).unwrap(), Some(exec));
        assert_eq!(trivial_merge(&repo, Some(&p), &e, &p).unwrap(), Some(exec));
        assert_eq!(libgit2_merge(&repo, plain, plain, exec), Some(exec));
    }

    #[test]
    fn random_changes_merge_as_libgit2_merges_them() {
        // Seeded: the same cases on every run.
        let rng = crate::git::testing::Rng::new(0x9e37_79b9_7f4a_7c15_u64);
        let next = |n: u64| rng.below(n);
        // Names around `d/` where git's order of a tree's entries (a
        // directory's name as if it ended in `/`) is not the bytes' order.
        let paths = [
            "a",
            "b",
            "d/a",
            "d/b",
            "d/e/f",
            "d.txt",
            "d-x/y",
            "d0",
            "tasks/t1.md",
            "tasks/done/t0.md",
            "x/y",
        ];
        let texts = ["1", "2", "3"];
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        let mut trivial = 0;
        for _ in 0..300 {
            let base: Vec<(&str, &str)> = paths
                .iter()
                .filter(|_| next(3) > 0)
                .map(|p| (*p, texts[next(3) as usize]))
                .collect();
            let side = || -> Vec<(&str, &str)> {
                base.iter()
                    .filter(|_| next(6) > 0)
                    .map(|(p, t)| {
                        (
                            *p,
                            if next(4) == 0 {
                                texts[next(3) as usize]
                            } else {
                                *t
                            },
                        )
                    })
                    .chain(paths.iter().filter(|_| next(8) == 0).map(|p| (*p, "new")))
                    .collect::<BTreeMap<_, _>>()
                    .into_iter()
                    .collect()
            };
            let (ours, theirs) = (side(), side());
            // `merge` asserts that whatever it resolves, libgit2 resolves the same.
            trivial += usize::from(merge_in(&repo, &base, &ours, &theirs).is_some());
        }
        assert!(
            trivial > 50,
            "only {trivial} of 300 cases were trivial: the test tests little"
        );
    }
}
