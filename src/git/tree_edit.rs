//! A tree with a few entries changed, written without a tree builder: the
//! entries it keeps are serialized in the order they already have, the
//! changed ones spliced in.
//!
//! Why: libgit2's tree builder takes every entry of the tree it starts from
//! into a map, checks each, and sorts them all again to write. A task's
//! commits change an entry or two of `tasks/` and `tasks/done/`, which on a
//! board of 5,000 tasks hold 5,000 entries between them: the builder, in
//! the replay's merge (tree_merge.rs) and in the index's `write_tree` of
//! the done commit, was a sixth of farm's own CPU a task (perf, 200
//! sessions, `-j 2`). Writing the object is what is left: its hash, and
//! its bytes stored as they are (see loose.rs).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io::Write;

use git2::{FileMode, ObjectType, Oid, Repository, Tree, TreeEntry};

/// An entry: its object and its mode.
pub type Entry = (Oid, i32);

/// A path (relative, `/` between names) and its new entry, none to leave
/// it out.
pub type Edit<'a> = (&'a [u8], Option<Entry>);

/// `tree` (none: an empty one) with `edits` made — a name of it to its new
/// entry, or to none to leave it out — written; its id, and whether it is
/// empty.
pub fn write(
    repo: &Repository,
    tree: Option<&Tree<'_>>,
    edits: &BTreeMap<Vec<u8>, Option<Entry>>,
) -> Result<(Oid, bool), git2::Error> {
    let kept: Vec<TreeEntry<'_>> = tree
        .into_iter()
        .flat_map(Tree::iter)
        .filter(|e| !edits.contains_key(e.name_bytes()))
        .collect();
    let mut entries: Vec<(&[u8], Entry)> = kept
        .iter()
        .map(|e| (e.name_bytes(), (e.id(), e.filemode_raw())))
        .collect();
    // In git's order already: each edit goes in at its place.
    for (name, e) in edits {
        if let Some(e) = *e {
            let at = entries.partition_point(|x| git_order(x.0, x.1, name, e).is_lt());
            entries.insert(at, (name, e));
        }
    }
    let mut raw = Vec::with_capacity(entries.len() * 48);
    for (name, (id, mode)) in &entries {
        match mode_text(*mode) {
            Some(text) => raw.extend_from_slice(text),
            // Writing to a Vec cannot fail.
            None => drop(write!(raw, "{mode:o}")),
        }
        raw.push(b' ');
        raw.extend_from_slice(name);
        raw.push(0);
        raw.extend_from_slice(id.as_bytes());
    }
    let id = super::loose::write_stored(repo, ObjectType::Tree, &raw)?;
    Ok((id, entries.is_empty()))
}

/// `tree` with each path of `edits` (relative, `/` between names) set to
/// its entry, or left out when none; directories made or left out as the
/// paths need (git keeps no empty one). Its id.
pub fn edit(repo: &Repository, tree: &Tree<'_>, edits: &[Edit<'_>]) -> Result<Oid, git2::Error> {
    edit_in(repo, Some(tree), edits).map(|(id, _)| id)
}

fn edit_in(
    repo: &Repository,
    tree: Option<&Tree<'_>>,
    edits: &[Edit<'_>],
) -> Result<(Oid, bool), git2::Error> {
    let mut here: BTreeMap<Vec<u8>, Option<Entry>> = BTreeMap::new();
    let mut below: BTreeMap<&[u8], Vec<Edit<'_>>> = BTreeMap::new();
    for &(path, entry) in edits {
        match path.iter().position(|b| *b == b'/') {
            None => drop(here.insert(path.to_vec(), entry)),
            Some(i) => below
                .entry(&path[..i])
                .or_default()
                .push((&path[i + 1..], entry)),
        }
    }
    for (name, edits) in below {
        // A directory of that name to edit; a file there gives way to it.
        let sub = match tree.and_then(|t| t.get_name_bytes(name)) {
            Some(e) if e.filemode() == i32::from(FileMode::Tree) => Some(repo.find_tree(e.id())?),
            _ => None,
        };
        let (id, empty) = edit_in(repo, sub.as_ref(), &edits)?;
        if !empty {
            here.insert(name.to_vec(), Some((id, i32::from(FileMode::Tree))));
        } else {
            // Emptied: gone, unless a file of its name took its place.
            here.entry(name.to_vec()).or_insert(None);
        }
    }
    write(repo, tree, &here)
}

/// The modes git writes, as it writes them (a tree's without a leading
/// zero); formatting each of 5,000 entries was a tenth of a write.
fn mode_text(mode: i32) -> Option<&'static [u8]> {
    match mode {
        0o100644 => Some(b"100644"),
        0o100755 => Some(b"100755"),
        0o40000 => Some(b"40000"),
        0o120000 => Some(b"120000"),
        0o160000 => Some(b"160000"),
        _ => None,
    }
}

/// The order of entries in a git tree: by name, a directory's as if it
/// ended in `/`.
pub fn git_order(a: &[u8], a_entry: Entry, b: &[u8], b_entry: Entry) -> Ordering {
    let n = a.len().min(b.len());
    a[..n].cmp(&b[..n]).then_with(|| {
        let next = |name: &[u8], e: Entry| name.get(n).copied().or(is_tree(e).then_some(b'/'));
        next(a, a_entry).cmp(&next(b, b_entry))
    })
}

/// An entry as the walks compare it: its object and its mode as git
/// normalizes it.
pub fn key(e: &TreeEntry<'_>) -> Entry {
    (e.id(), e.filemode())
}

pub fn is_tree(e: Entry) -> bool {
    e.1 == i32::from(FileMode::Tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testing::{entry, valid};
    use git2::Index;

    /// An entry the edit does not touch keeps its bytes, an old mode git
    /// no longer writes (`100664`) too, as a tree builder kept it.
    #[test]
    fn entries_not_edited_are_written_as_they_were() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        let blob = repo.blob(b"x").unwrap();
        let mut raw = b"100664 old\0".to_vec();
        raw.extend_from_slice(blob.as_bytes());
        let odb = repo.odb().unwrap();
        let tree = repo
            .find_tree(odb.write(ObjectType::Tree, &raw).unwrap())
            .unwrap();
        let added: Vec<Edit<'_>> = vec![(b"new", Some((blob, 0o100644)))];
        let id = edit(&repo, &tree, &added).unwrap();
        let written = odb.read(id).unwrap();
        let mut expected = b"100644 new\0".to_vec();
        expected.extend_from_slice(blob.as_bytes());
        expected.extend_from_slice(&raw);
        assert_eq!(written.data(), &expected[..]);
        let mut builder = repo.treebuilder(Some(&tree)).unwrap();
        builder.insert("new", blob, 0o100644).unwrap();
        assert_eq!(
            builder.write().unwrap(),
            id,
            "a tree builder writes the same"
        );
    }

    /// Random indexes made from a tree by adds, changes, removals and
    /// files that take a directory's place (and the other way round):
    /// the tree edited at the paths where they differ is the tree the
    /// index writes.
    #[test]
    fn editing_the_paths_that_differ_gives_the_index_s_tree() {
        // Seeded: the same cases on every run.
        let rng = crate::git::testing::Rng::new(0x2545_f491_4f6c_dd1d_u64);
        let next = |n: u64| rng.below(n);
        let paths = crate::git::testing::PATHS;
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        let mut cases = 0;
        for round in 0..300 {
            let pick = || -> Vec<&str> { paths.iter().copied().filter(|_| next(2) == 0).collect() };
            let (before, after) = (pick(), pick());
            if !valid(&before) || !valid(&after) {
                continue;
            }
            let mut index = Index::new().unwrap();
            for p in &before {
                index
                    .add(&entry(&repo, p, &format!("{p} 1"), 0o100644))
                    .unwrap();
            }
            let base = repo.find_tree(index.write_tree_to(&repo).unwrap()).unwrap();
            let mut index = Index::new().unwrap();
            for p in &after {
                let text = if next(2) == 0 {
                    format!("{p} 1")
                } else {
                    format!("{p} {round}")
                };
                let mode = if next(5) == 0 { 0o100755 } else { 0o100644 };
                index.add(&entry(&repo, p, &text, mode)).unwrap();
            }
            let expected = index.write_tree_to(&repo).unwrap();
            let diff = repo
                .diff_tree_to_index(Some(&base), Some(&index), None)
                .unwrap();
            let staged: Vec<String> = diff
                .deltas()
                .filter_map(|d| d.new_file().path().or(d.old_file().path()))
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let edits: Vec<Edit<'_>> = staged
                .iter()
                .map(|p| {
                    let e = index.get_path(std::path::Path::new(p), 0);
                    (p.as_bytes(), e.map(|e| (e.id, e.mode as i32)))
                })
                .collect();
            assert_eq!(
                edit(&repo, &base, &edits).unwrap(),
                expected,
                "{before:?} -> {after:?}, staged {staged:?}"
            );
            cases += 1;
        }
        assert!(cases > 100, "only {cases} cases: the test tests little");
    }
}
