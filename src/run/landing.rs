//! What a session's work may land on the hub's branch.
//!
//! Two rules, both judged on the trees themselves — the commit the work
//! would land on (`onto`, the branch as fetched) and the commit that would
//! land (HEAD) — so that they hold however the work got there: rebased,
//! merged, or resolved by a merge session.
//!
//! **Not twice.** A task done (or given up) on the branch since its session
//! started was settled by another holder — its claim forced away while its
//! push was in flight, say. Landing this work too would do the task twice
//! ([`settled_elsewhere`]).
//!
//! **Not the board, not farm's controls.** An agent works on its own task;
//! the rest of the board is other tasks' state, and `farm.toml`,
//! `templates/` and `schedules/` are what farm itself runs, outside any
//! sandbox. What the work changes relative to `onto` ([`refused`]) may add
//! new pending tasks, and may change its own task only as farm does: its
//! file moves to `tasks/done/` with its front matter as it was. Comparing
//! with `onto` rather than with the commit the session started from keeps
//! what others landed meanwhile out of the judgement (it is on both sides),
//! while a merge session that undid it is caught (it is then a change).

use std::path::Path;

use crate::board::paths::{self, Place};
use crate::board::{self, Task};
use crate::error::Error;
use crate::git::tree_diff;
use crate::names::TaskId;
use crate::run::clone::PrivateClone;

/// How a path differs between `onto` and the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Added,
    Deleted,
    /// Its content or its type changed.
    Modified,
}

/// One changed path, relative to the work tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Change {
    pub(super) path: String,
    pub(super) kind: Kind,
}

/// A path the work may not change, and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Refused {
    pub(super) path: String,
    pub(super) what: &'static str,
}

/// At most this many paths are named in a note; the first of them tell.
const NAMED: usize = 10;

/// The paths of `refused`, for a note: `` `a` (what), `b` (what) ``.
pub(super) fn describe(refused: &[Refused]) -> String {
    let mut out: Vec<String> = refused
        .iter()
        .take(NAMED)
        .map(|r| format!("`{}` ({})", r.path, r.what))
        .collect();
    if refused.len() > NAMED {
        out.push(format!("and {} more", refused.len() - NAMED));
    }
    out.join(", ")
}

/// Farm's own files on the branch: what it reads and runs. `current_tasks/`
/// is here for merge sessions; a session's changes to it are undone
/// before integration (see [`PrivateClone::undo_claim_tampering`]).
fn control(path: &str) -> Option<&'static str> {
    let under = |dir: &str| path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'));
    if path == crate::settings::FILE {
        Some("farm's settings")
    } else if under("templates") {
        Some("a template farm renders")
    } else if under(crate::schedule::file::DIR) {
        Some("a schedule farm fires")
    } else if under(crate::names::CLAIMS_DIR) {
        Some("the claims")
    } else {
        None
    }
}

/// A path under `tasks/` as the board reads it: a task file's place and
/// id, `Ok(None)` for a board's `README.md`, `Err(())` for anything else.
fn board_file(path: &str) -> Option<Result<Option<(Place, &str)>, ()>> {
    let rest = path.strip_prefix(paths::TASKS)?.strip_prefix('/')?;
    let (place, name) = match rest.split_once('/') {
        None => (Place::Pending, rest),
        Some(("done", name)) => (Place::Done, name),
        Some(("failed", name)) => (Place::Failed, name),
        Some(_) => return Some(Err(())),
    };
    Some(match name.strip_suffix(".md") {
        Some("README") => Ok(None),
        Some(id) if !id.contains('/') => Ok(Some((place, id))),
        _ => Err(()),
    })
}

/// Which of `changes` the work on task `own` may not make. `on_branch(id)`:
/// whether `onto` has a file of task `id` anywhere on its board;
/// `own_kept()`: whether the work's `tasks/done/<own>.md` has the front
/// matter its pending file had.
///
/// What a session may do to its own task: farm moves the file to
/// `tasks/done/` itself, and the session may edit its description (the
/// body), which lands with the work under farm's `## Result` — a note on
/// what was done or left, for whoever reads the done task; nothing
/// schedules by it. The front matter it may not change: it is the task's
/// state, which farm keeps (`attempts`) and the board schedules by
/// (`after`, `priority`, `labels`, `timeout`); a done task's `after` still
/// counts in the board's check for cycles. Nor may it put its own task in
/// `tasks/failed/`, which only farm does, by counting attempts.
pub(super) fn judge(
    changes: &[Change],
    own: &TaskId,
    on_branch: impl Fn(&str) -> bool,
    own_kept: impl Fn() -> bool,
) -> Vec<Refused> {
    let mut refused = Vec::new();
    for change in changes {
        let what = match board_file(&change.path) {
            None => control(&change.path),
            Some(Err(())) => Some("not a task file of the board"),
            Some(Ok(None)) => None,
            Some(Ok(Some((place, id)))) if id == own.as_str() => match (place, change.kind) {
                (Place::Pending, Kind::Deleted) => None,
                (Place::Done, Kind::Added) if own_kept() => None,
                (Place::Done, Kind::Added) => Some("its own task's front matter"),
                _ => Some("its own task's state"),
            },
            Some(Ok(Some((place, id)))) => {
                let new = place == Place::Pending
                    && change.kind == Kind::Added
                    && TaskId::parse(id).is_ok()
                    && !on_branch(id);
                (!new).then_some(if place == Place::Pending {
                    "another task"
                } else {
                    "another task's state"
                })
            }
        };
        if let Some(what) = what {
            refused.push(Refused {
                path: change.path.clone(),
                what,
            });
        }
    }
    refused
}

/// What the work at `head` on task `own` changes relative to `onto` that
/// it may not (see [`judge`]); `base` is the commit its session started
/// from, whose pending file also counts as the front matter as it was.
pub(super) fn refused(
    clone: &PrivateClone,
    base: &str,
    onto: &str,
    head: &str,
    own: &TaskId,
) -> Result<Vec<Refused>, Error> {
    let read = |repo: &git2::Repository| -> Result<Vec<Refused>, git2::Error> {
        let tree = |rev: &str| repo.find_commit(git2::Oid::from_str(rev)?)?.tree();
        let (from, to) = (tree(onto)?, tree(head)?);
        let mut changes = Vec::new();
        for change in tree_diff::changes(repo, &from, &to)? {
            let kind = match (change.old, change.new) {
                (None, _) => Kind::Added,
                (_, None) => Kind::Deleted,
                _ => Kind::Modified,
            };
            if let Ok(path) = String::from_utf8(change.path) {
                changes.push(Change { path, kind });
            }
        }
        let base = tree(base)?;
        let on_branch = |id: &str| Place::ALL.iter().any(|p| has(&from, &p.file(id)));
        let front = |tree: &git2::Tree<'_>, path: &str| -> Option<Task> {
            let blob = tree.get_path(Path::new(path)).ok()?.to_object(repo).ok()?;
            let text = std::str::from_utf8(blob.as_blob()?.content()).ok()?;
            let mut task = board::parse(own.clone(), text).ok()?;
            task.body.clear();
            Some(task)
        };
        let own_kept = || {
            front(&to, &paths::done(own)).is_some_and(|done| {
                [&from, &base]
                    .iter()
                    .any(|t| front(t, &paths::pending(own)).as_ref() == Some(&done))
            })
        };
        Ok(judge(&changes, own, on_branch, own_kept))
    };
    clone
        .reading(read)
        .map_err(|e| Error::failure(format!("cannot read what the work on `{own}` changes: {e}")))
}

/// Where task `id` went on the branch at `onto` since `base`, when it is
/// done or failed there and was not at `base`: settled by someone else.
pub(super) fn settled_elsewhere(
    clone: &PrivateClone,
    base: &str,
    onto: &str,
    id: &TaskId,
) -> Result<Option<Place>, Error> {
    let read = |repo: &git2::Repository| -> Result<Option<Place>, git2::Error> {
        let tree = |rev: &str| repo.find_commit(git2::Oid::from_str(rev)?)?.tree();
        let (before, now) = (tree(base)?, tree(onto)?);
        Ok(elsewhere(
            |p| has(&before, &p.file(id)),
            |p| has(&now, &p.file(id)),
        ))
    };
    clone
        .reading(read)
        .map_err(|e| Error::failure(format!("cannot read the board at `{onto}`: {e}")))
}

/// Whether task `id` is done on the branch at `commit`.
pub(super) fn done_at(clone: &PrivateClone, commit: &str, id: &TaskId) -> Result<bool, Error> {
    clone
        .reading(|repo| {
            let tree = repo.find_commit(git2::Oid::from_str(commit)?)?.tree()?;
            Ok(has(&tree, &Place::Done.file(id)))
        })
        .map_err(|e| Error::failure(format!("cannot read the board at `{commit}`: {e}")))
}

/// The place a task has `now` (done, failed) that it had not `before`.
pub(super) fn elsewhere(
    before: impl Fn(Place) -> bool,
    now: impl Fn(Place) -> bool,
) -> Option<Place> {
    [Place::Done, Place::Failed]
        .into_iter()
        .find(|&p| now(p) && !before(p))
}

fn has(tree: &git2::Tree<'_>, path: &str) -> bool {
    tree.get_path(Path::new(path)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TaskId {
        TaskId::parse(s).unwrap()
    }

    fn changes(list: &[(&str, Kind)]) -> Vec<Change> {
        list.iter()
            .map(|(path, kind)| Change {
                path: (*path).to_owned(),
                kind: *kind,
            })
            .collect()
    }

    fn refused_paths(list: &[(&str, Kind)], own_kept: bool) -> Vec<String> {
        judge(&changes(list), &id("h1"), |t| t != "new", || own_kept)
            .into_iter()
            .map(|r| r.path)
            .collect()
    }

    #[test]
    fn farms_own_move_of_the_task_to_done_and_new_tasks_pass() {
        let ok = [
            ("tasks/h1.md", Kind::Deleted),
            ("tasks/done/h1.md", Kind::Added),
            ("tasks/new.md", Kind::Added),
            ("tasks/README.md", Kind::Modified),
            ("src/lib.rs", Kind::Modified),
            ("templates.txt", Kind::Added),
        ];
        assert!(refused_paths(&ok, true).is_empty());
    }

    #[test]
    fn another_tasks_file_in_any_place_is_refused() {
        use Kind::*;
        let list = [
            ("tasks/h2.md", Deleted),
            ("tasks/done/h2.md", Added),
            ("tasks/h3.md", Modified),
            ("tasks/failed/h4.md", Deleted),
            // New, but put straight into done or failed: never run.
            ("tasks/done/new.md", Added),
            ("tasks/failed/new.md", Added),
            // Not new: the branch has it (done, say).
            ("tasks/h5.md", Added),
            ("tasks/sub/x.md", Added),
            ("tasks/done", Added),
        ];
        assert_eq!(
            refused_paths(&list, true),
            list.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn its_own_front_matter_and_failed_file_are_refused() {
        assert_eq!(
            refused_paths(&[("tasks/done/h1.md", Kind::Added)], false),
            ["tasks/done/h1.md"]
        );
        assert_eq!(
            refused_paths(
                &[
                    ("tasks/h1.md", Kind::Modified),
                    ("tasks/failed/h1.md", Kind::Added),
                    ("tasks/done/h1.md", Kind::Deleted),
                ],
                true
            ),
            ["tasks/h1.md", "tasks/failed/h1.md", "tasks/done/h1.md"]
        );
    }

    #[test]
    fn farms_control_files_are_refused() {
        let list = [
            ("farm.toml", Kind::Modified),
            ("templates/prompt.md", Kind::Modified),
            ("schedules/nightly.toml", Kind::Added),
            ("current_tasks/h2.txt", Kind::Deleted),
        ];
        let refused = judge(&changes(&list), &id("h1"), |_| true, || true);
        assert_eq!(
            describe(&refused),
            "`farm.toml` (farm's settings), `templates/prompt.md` (a template farm renders), \
             `schedules/nightly.toml` (a schedule farm fires), `current_tasks/h2.txt` (the claims)"
        );
    }

    #[test]
    fn a_long_list_names_the_first_paths() {
        let list: Vec<_> = (0..13)
            .map(|n| (format!("tasks/t{n:02}.md"), Kind::Deleted))
            .collect();
        let list: Vec<_> = list.iter().map(|(p, k)| (p.as_str(), *k)).collect();
        let refused = judge(&changes(&list), &id("h1"), |_| true, || true);
        let said = describe(&refused);
        assert!(
            said.starts_with("`tasks/t00.md` (another task), "),
            "{said}"
        );
        assert!(
            said.ends_with("`tasks/t09.md` (another task), and 3 more"),
            "{said}"
        );
    }

    /// The check that keeps a task from landing twice: done (or failed) on
    /// the branch now and not when the session started.
    #[test]
    fn a_task_done_on_the_branch_since_the_start_is_settled_elsewhere() {
        let at = |places: &'static [Place]| move |p: Place| places.contains(&p);
        assert_eq!(elsewhere(at(&[]), at(&[Place::Done])), Some(Place::Done));
        assert_eq!(
            elsewhere(at(&[Place::Pending]), at(&[Place::Failed])),
            Some(Place::Failed)
        );
        assert_eq!(
            elsewhere(at(&[Place::Pending]), at(&[Place::Pending])),
            None
        );
        assert_eq!(elsewhere(at(&[Place::Done]), at(&[Place::Done])), None);
    }
}
