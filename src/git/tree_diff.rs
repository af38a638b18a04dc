//! Where two trees differ, file by file: the two walked side by side in
//! git's order, a subtree entered only when its id differs.
//!
//! Why not git2's `diff_tree_to_tree`: libgit2's diff goes through its
//! iterators, which build each entry's full path and compare every entry of
//! a directory that differs at all. A task changes an entry or two of
//! `tasks/` and `tasks/done/`, 5,000 entries between them on a board of
//! 5,000 tasks, and each task diffs such trees twice (the landing's check of
//! what the work changes, the sync's checkout): that was a twentieth of
//! farm's own CPU a task (perf, `--call-graph dwarf`, 60 sessions). The
//! answer is the same as libgit2's with its default options (a test holds
//! it to that): no renames, and a file whose kind changed (a file, a link,
//! a submodule) is deleted and added.

use std::iter::Peekable;

use git2::{Repository, Tree, TreeEntry, TreeIter};

use super::tree_edit::{Entry, git_order, is_tree, key};

/// A file that differs: its path (`/` between names) and its entry on
/// each side (none where it is not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub old: Option<Entry>,
    pub new: Option<Entry>,
}

/// The files where `from` and `to` differ, in git's order.
pub fn changes(
    repo: &Repository,
    from: &Tree<'_>,
    to: &Tree<'_>,
) -> Result<Vec<Change>, git2::Error> {
    let mut out = Vec::new();
    walk(repo, &mut Vec::new(), Some(from), Some(to), &mut out)?;
    Ok(out)
}

fn walk(
    repo: &Repository,
    prefix: &mut Vec<u8>,
    from: Option<&Tree<'_>>,
    to: Option<&Tree<'_>>,
    out: &mut Vec<Change>,
) -> Result<(), git2::Error> {
    if let (Some(a), Some(b)) = (from, to)
        && a.id() == b.id()
    {
        return Ok(());
    }
    let mut a = from.map(|t| t.iter().peekable());
    let mut b = to.map(|t| t.iter().peekable());
    loop {
        let (x, y) = next_pair(&mut a, &mut b);
        let (x, y) = match (x, y) {
            (None, None) => return Ok(()),
            (Some(x), Some(y)) if key(&x) == key(&y) => continue,
            pair => pair,
        };
        let len = prefix.len();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(
            x.as_ref()
                .or(y.as_ref())
                .map_or(&[][..], |e| e.name_bytes()),
        );
        let (old, new) = (x.as_ref().map(key), y.as_ref().map(key));
        if old.is_some_and(is_tree) || new.is_some_and(is_tree) {
            // Entries of one order are of one kind: both trees, or one alone.
            let sub = |e: Option<Entry>| e.map(|e| repo.find_tree(e.0)).transpose();
            let (old, new) = (sub(old)?, sub(new)?);
            walk(repo, prefix, old.as_ref(), new.as_ref(), out)?;
        } else if let (Some(o), Some(n)) = (old, new)
            && kind(o) != kind(n)
        {
            for (old, new) in [(Some(o), None), (None, Some(n))] {
                out.push(Change {
                    path: prefix.clone(),
                    old,
                    new,
                });
            }
        } else {
            out.push(Change {
                path: prefix.clone(),
                old,
                new,
            });
        }
        prefix.truncate(len);
    }
}

/// The next entry of each side, or of the one whose entry comes first in
/// git's order.
pub(super) fn next_pair<'t>(
    a: &mut Option<Peekable<TreeIter<'t>>>,
    b: &mut Option<Peekable<TreeIter<'t>>>,
) -> (Option<TreeEntry<'t>>, Option<TreeEntry<'t>>) {
    let x = a.as_mut().and_then(Peekable::peek);
    let y = b.as_mut().and_then(Peekable::peek);
    let order = match (x, y) {
        (None, None) => return (None, None),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => git_order(x.name_bytes(), key(x), y.name_bytes(), key(y)),
    };
    let take = |side: &mut Option<Peekable<TreeIter<'t>>>| side.as_mut().and_then(Iterator::next);
    match order {
        std::cmp::Ordering::Less => (take(a), None),
        std::cmp::Ordering::Greater => (None, take(b)),
        std::cmp::Ordering::Equal => (take(a), take(b)),
    }
}

/// A file, a link or a submodule (a blob's two modes are one kind).
fn kind(e: Entry) -> i32 {
    e.1 & 0o170000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testing::{entry, valid};
    use git2::Index;

    fn tree<'r>(repo: &'r Repository, files: &[(&str, String, u32)]) -> Tree<'r> {
        let mut index = Index::new().unwrap();
        for (path, text, mode) in files {
            index.add(&entry(repo, path, text, *mode)).unwrap();
        }
        repo.find_tree(index.write_tree_to(repo).unwrap()).unwrap()
    }

    /// libgit2's answer, as changes: its deltas in its order.
    fn libgit2(repo: &Repository, from: &Tree<'_>, to: &Tree<'_>) -> Vec<Change> {
        let diff = repo.diff_tree_to_tree(Some(from), Some(to), None).unwrap();
        let side =
            |f: git2::DiffFile<'_>| (!f.id().is_zero()).then(|| (f.id(), i32::from(f.mode())));
        diff.deltas()
            .map(|d| Change {
                path: d
                    .new_file()
                    .path()
                    .or(d.old_file().path())
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .as_bytes()
                    .to_vec(),
                old: side(d.old_file()),
                new: side(d.new_file()),
            })
            .collect()
    }

    /// Random pairs of trees over names that sort differently in git's
    /// order than by their bytes, with executable files, links and files
    /// that become directories: the changes are libgit2's, in its order.
    #[test]
    fn the_changes_are_libgit2_s() {
        // Seeded: the same cases on every run.
        let rng = crate::git::testing::Rng::new(0x9e37_79b9_7f4a_7c15_u64);
        let next = |n: u64| rng.below(n);
        let paths = crate::git::testing::PATHS;
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        let (mut cases, mut kinds) = (0, 0);
        for _ in 0..400 {
            let pick = || -> Vec<(&str, String, u32)> {
                paths
                    .iter()
                    .filter(|_| next(2) == 0)
                    .map(|p| {
                        let mode = [0o100644, 0o100644, 0o100755, 0o120000][next(4) as usize];
                        (*p, format!("{}", next(2)), mode)
                    })
                    .collect()
            };
            let (before, after) = (pick(), pick());
            let names = |v: &[(&str, String, u32)]| -> bool {
                valid(&v.iter().map(|f| f.0).collect::<Vec<_>>())
            };
            if !names(&before) || !names(&after) {
                continue;
            }
            let (from, to) = (tree(&repo, &before), tree(&repo, &after));
            let ours = changes(&repo, &from, &to).unwrap();
            assert_eq!(ours, libgit2(&repo, &from, &to), "{before:?} -> {after:?}");
            cases += 1;
            kinds += usize::from(
                ours.windows(2)
                    .any(|w| w[0].path == w[1].path && w[0].new.is_none() && w[1].old.is_none()),
            );
        }
        assert!(
            cases > 100 && kinds > 5,
            "{cases} cases, {kinds} with a kind changed"
        );
    }
}
