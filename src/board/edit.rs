//! Every edit of a task file, and the one way an edit reaches the hub.
//!
//! The edits are file edits on a checked-out work tree, nothing more: put a
//! task on the board ([`add`]), move it to `tasks/done/` with its result
//! ([`done`]), count a failed attempt with a note and move it to
//! `tasks/failed/` when its attempts are used up ([`record_attempt`]),
//! retire it without a session ([`retire`]), change what a person may
//! change of a waiting task ([`change`]), or leave it a note ([`note`]). [`transact`] is the shape every
//! edit of the hub's branch takes: check out the branch's tip, edit, commit,
//! push, and again from the tip when the push lost to another — up to a
//! bound. The commit and the push are the caller's ([`Branch`]): the loop
//! pushes under its claim, `farm task add` plainly; the board knows neither.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::paths::{self, Place};
use super::task::{Task, parse};
use crate::names::TaskId;

/// Why [`add`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    #[error("task `{id}` already exists ({})", place.what())]
    Exists { id: TaskId, place: Place },
    #[error("cannot write `{path}`: {source}")]
    Io { path: String, source: io::Error },
}

/// Put `task` on the board in `worktree` (`tasks/<id>.md`, as rendered),
/// unless a file of that id is there already: pending, done or failed.
pub fn add(worktree: &Path, task: &Task) -> Result<(), AddError> {
    if let Some(place) = paths::find(worktree, &task.id) {
        return Err(AddError::Exists {
            id: task.id.clone(),
            place,
        });
    }
    let path = paths::pending(&task.id);
    let io = |source| AddError::Io {
        path: path.clone(),
        source,
    };
    fs::create_dir_all(worktree.join(paths::TASKS)).map_err(io)?;
    fs::write(worktree.join(&path), task.render()).map_err(io)
}

/// Put every one of `tasks` on the board in `worktree`, or none: the first
/// id that has a file already (or comes twice in `tasks`) is the error, and
/// nothing is written before every id was checked.
pub fn add_all(worktree: &Path, tasks: &[Task]) -> Result<(), AddError> {
    for (i, task) in tasks.iter().enumerate() {
        let place = paths::find(worktree, &task.id).or_else(|| {
            tasks[..i]
                .iter()
                .any(|t| t.id == task.id)
                .then_some(Place::Pending)
        });
        if let Some(place) = place {
            return Err(AddError::Exists {
                id: task.id.clone(),
                place,
            });
        }
    }
    tasks.iter().try_for_each(|t| add(worktree, t))
}

/// Of `after`, the ids that have no file on the board in `worktree`.
pub fn missing<'a>(worktree: &Path, after: &'a [TaskId]) -> Vec<&'a TaskId> {
    after
        .iter()
        .filter(|d| paths::find(worktree, d).is_none())
        .collect()
}

/// Move `task` to `tasks/done/` with a `## Result` section saying `result`.
/// Its pending file is what moves (as the session left it); `task` rendered
/// when that is gone. The two paths it touched, relative to `worktree`.
pub fn done(worktree: &Path, task: &Task, result: &str) -> io::Result<[String; 2]> {
    let pending = paths::pending(&task.id);
    let done = paths::done(&task.id);
    let text = fs::read_to_string(worktree.join(&pending)).unwrap_or_else(|_| task.render());
    let text = format!("{}\n## Result\n\n{result}\n", ensure_newline(&text));
    fs::create_dir_all(worktree.join(paths::DONE))?;
    fs::write(worktree.join(&done), text)?;
    let _ = fs::remove_file(worktree.join(&pending));
    Ok([pending, done])
}

/// The done file of a task whose pending file someone edited on the branch
/// while its session ran: `edited` (their pending file) with the `## Result`
/// that `done` (the session's done file, made by [`done`]) carries. `None`
/// when `done` has no result section.
pub fn done_over(edited: &str, done: &str) -> Option<String> {
    const RESULT: &str = "\n## Result\n\n";
    let at = done.rfind(RESULT)?;
    Some(format!("{}{}", ensure_newline(edited), &done[at..]))
}

/// A pending task file as edited.
#[derive(Debug, PartialEq, Eq)]
pub struct Edited {
    /// The task after the edit.
    pub task: Task,
    /// It went to `tasks/failed/`: out of attempts.
    pub failed: bool,
}

/// Count attempt `attempt` of task `id` (its attempts become at least
/// `attempt`) and append `note` to its description; out of attempts, it
/// moves to `tasks/failed/`. `None`: no pending file that parses (moved by
/// hand, or edited into something invalid), nothing written.
pub fn record_attempt(
    worktree: &Path,
    id: &TaskId,
    attempt: u32,
    note: &str,
) -> io::Result<Option<Edited>> {
    edit_pending(worktree, id, |t| {
        t.attempts = t.attempts.max(attempt);
        // A failed attempt (a rejected or approved change that did not
        // land among them) ends any review: the next session starts over,
        // its change reviewed afresh.
        t.change = None;
        t.approved = None;
        append(t, note);
    })
}

/// Append the note `note(task)` to task `id`, out of attempts before any
/// session, and move it to `tasks/failed/` (unless its file, read again,
/// allows more attempts now). `None` as for [`record_attempt`].
pub fn retire(
    worktree: &Path,
    id: &TaskId,
    note: impl FnOnce(&Task) -> String,
) -> io::Result<Option<Edited>> {
    edit_pending(worktree, id, |t| {
        let note = note(t);
        append(t, &note);
    })
}

/// Put failed task `id` back on the board: `tasks/failed/<id>.md` moves to
/// `tasks/<id>.md` with its attempts reset and its notes kept, `note`
/// appended. `None`: no failed file that parses (nothing written).
pub fn retry(worktree: &Path, id: &TaskId, note: &str) -> io::Result<Option<Task>> {
    let failed = worktree.join(paths::failed(id));
    let Ok(text) = fs::read_to_string(&failed) else {
        return Ok(None);
    };
    let Ok(mut task) = parse(id.clone(), &text) else {
        return Ok(None);
    };
    task.attempts = 0;
    append(&mut task, note);
    fs::create_dir_all(worktree.join(paths::TASKS))?;
    fs::write(worktree.join(paths::pending(id)), task.render())?;
    fs::remove_file(&failed)?;
    Ok(Some(task))
}

/// Change pending task `id` with `change` (its title, description,
/// priority, `after`, max attempts: whatever a person may), and write it
/// back where it is. `None`: no pending file that parses (nothing
/// written). Unlike an attempt, a change never moves the task.
pub fn change(
    worktree: &Path,
    id: &TaskId,
    change: impl FnOnce(&mut Task),
) -> io::Result<Option<Task>> {
    let pending = worktree.join(paths::pending(id));
    let Ok(text) = fs::read_to_string(&pending) else {
        return Ok(None);
    };
    let Ok(mut task) = parse(id.clone(), &text) else {
        return Ok(None);
    };
    change(&mut task);
    fs::write(&pending, task.render())?;
    Ok(Some(task))
}

/// Append `note` to task `id`, pending or failed (where the next session,
/// or a person retrying it, reads it); where its file is. `None`: no such
/// file that parses, or the task is done (nothing written).
pub fn note(worktree: &Path, id: &TaskId, note: &str) -> io::Result<Option<Place>> {
    for place in [Place::Pending, Place::Failed] {
        let path = worktree.join(place.file(id));
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let Ok(mut task) = parse(id.clone(), &text) else {
            return Ok(None);
        };
        append(&mut task, note);
        fs::write(&path, task.render())?;
        return Ok(Some(place));
    }
    Ok(None)
}

/// Append `note` to task `id`'s description wherever it is on the board
/// (done too: a note on what became of it after); where, `None` when it is
/// nowhere or its file does not parse (nothing written).
pub fn note_anywhere(worktree: &Path, id: &TaskId, note: &str) -> io::Result<Option<Place>> {
    let Some(place) = paths::find(worktree, id) else {
        return Ok(None);
    };
    let path = worktree.join(place.file(id));
    let Ok(mut task) = parse(id.clone(), &fs::read_to_string(&path)?) else {
        return Ok(None);
    };
    append(&mut task, note);
    fs::write(&path, task.render())?;
    Ok(Some(place))
}

/// Remove task `id`'s file, wherever it is on the board; where it was
/// (`None`: nowhere, nothing removed).
pub fn remove(worktree: &Path, id: &TaskId) -> io::Result<Option<Place>> {
    let Some(place) = paths::find(worktree, id) else {
        return Ok(None);
    };
    fs::remove_file(worktree.join(place.file(id)))?;
    Ok(Some(place))
}

/// Edit task `id`'s pending file with `edit`; to `tasks/failed/` when its
/// attempts are used up after it.
pub(super) fn edit_pending(
    worktree: &Path,
    id: &TaskId,
    edit: impl FnOnce(&mut Task),
) -> io::Result<Option<Edited>> {
    let pending = worktree.join(paths::pending(id));
    let Ok(text) = fs::read_to_string(&pending) else {
        return Ok(None);
    };
    let Ok(mut task) = parse(id.clone(), &text) else {
        return Ok(None);
    };
    edit(&mut task);
    let failed = task.attempts >= task.max_attempts;
    if failed {
        fs::create_dir_all(worktree.join(paths::FAILED))?;
        fs::write(worktree.join(paths::failed(id)), task.render())?;
        fs::remove_file(&pending)?;
    } else {
        fs::write(&pending, task.render())?;
    }
    Ok(Some(Edited { task, failed }))
}

pub(super) fn append(task: &mut Task, note: &str) {
    task.body = format!("{}{note}", ensure_newline(&task.body));
}

fn ensure_newline(s: &str) -> String {
    if s.is_empty() || s.ends_with('\n') {
        s.to_owned()
    } else {
        format!("{s}\n")
    }
}

/// What became of a push of an edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    Pushed,
    /// The branch moved on: edit again from its new tip.
    Rejected,
    /// The right to push was taken away (the loop's claim): nothing published.
    Lost,
}

/// What an edit made of the work tree.
#[derive(Debug, PartialEq, Eq)]
pub enum Edit<T> {
    /// Commit it with `message`; `value` is what the caller wants back.
    Commit { message: String, value: T },
    /// The file to edit is not there any more: nothing to commit.
    Gone,
}

/// How a transaction ended (its errors aside).
#[derive(Debug, PartialEq, Eq)]
pub enum Tx<T> {
    /// The edit is on the branch.
    Pushed(T),
    /// Nothing to edit (see [`Edit::Gone`]).
    Gone,
    /// Committed but not published: the push was [`Push::Lost`].
    Lost(T),
    /// Every round's push was rejected: the branch kept moving.
    Busy,
}

/// The branch a transaction edits, and how its commits are pushed.
pub trait Branch {
    type Error;
    /// What a round keeps from its checkout to its push (a push lock, a
    /// scratch clone).
    type Round;
    /// A work tree at the branch's tip for round `round` (0 first; later
    /// rounds come after a rejected push).
    fn checkout(&mut self, round: usize) -> Result<(PathBuf, Self::Round), Self::Error>;
    /// Commit the work tree with `message` and push it.
    fn publish(&mut self, round: Self::Round, message: &str) -> Result<Push, Self::Error>;
}

/// Edit the tip of `branch` with `edit`, commit and push, for at most
/// `rounds` rounds: again from the new tip after a rejected push; stop at
/// the first error, an edit with nothing to edit, or a push that is lost.
pub fn transact<B: Branch, T>(
    branch: &mut B,
    rounds: usize,
    mut edit: impl FnMut(&Path) -> Result<Edit<T>, B::Error>,
) -> Result<Tx<T>, B::Error> {
    for round in 0..rounds {
        let (worktree, held) = branch.checkout(round)?;
        let (message, value) = match edit(&worktree)? {
            Edit::Gone => return Ok(Tx::Gone),
            Edit::Commit { message, value } => (message, value),
        };
        match branch.publish(held, &message)? {
            Push::Pushed => return Ok(Tx::Pushed(value)),
            Push::Lost => return Ok(Tx::Lost(value)),
            Push::Rejected => {}
        }
    }
    Ok(Tx::Busy)
}

#[cfg(test)]
mod tests {
    #[test]
    fn done_over_keeps_their_text_and_our_result() {
        let ours = "+++\ntitle = \"t\"\n+++\nold words\n\n## Result\n\nDone by a.\n";
        let theirs = "+++\ntitle = \"t\"\n+++\nnew words";
        assert_eq!(
            super::done_over(theirs, ours).as_deref(),
            Some("+++\ntitle = \"t\"\n+++\nnew words\n\n## Result\n\nDone by a.\n")
        );
        assert_eq!(super::done_over(theirs, "no result"), None);
    }

    use super::*;
    use crate::board::testing::{id, minimal};
    use std::collections::VecDeque;

    fn board() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn read(dir: &Path, rel: &str) -> Option<String> {
        fs::read_to_string(dir.join(rel)).ok()
    }

    #[test]
    fn retry_puts_a_failed_task_back_with_its_notes_and_remove_takes_one_away() {
        let b = board();
        let mut t = minimal("a");
        t.attempts = 3;
        t.max_attempts = 3;
        t.body = "Do it.\n\n## Attempt 3 — failed\n".into();
        write(b.path(), "tasks/failed/a.md", &t.render());
        let back = retry(b.path(), &id("a"), "\n## Retried\n")
            .unwrap()
            .unwrap();
        assert_eq!(back.attempts, 0);
        let text = read(b.path(), "tasks/a.md").unwrap();
        assert!(
            text.contains("## Attempt 3 — failed\n\n## Retried\n"),
            "{text}"
        );
        assert_eq!(read(b.path(), "tasks/failed/a.md"), None);
        // Only a failed task is retried.
        assert_eq!(retry(b.path(), &id("a"), "x").unwrap(), None);
        assert_eq!(remove(b.path(), &id("a")).unwrap(), Some(Place::Pending));
        assert_eq!(read(b.path(), "tasks/a.md"), None);
        assert_eq!(remove(b.path(), &id("a")).unwrap(), None);
        write(b.path(), "tasks/done/d.md", "x");
        assert_eq!(remove(b.path(), &id("d")).unwrap(), Some(Place::Done));
    }

    #[test]
    fn add_all_writes_every_task_or_none() {
        let b = board();
        add_all(b.path(), &[minimal("a"), minimal("b")]).unwrap();
        assert!(read(b.path(), "tasks/a.md").is_some() && read(b.path(), "tasks/b.md").is_some());
        // One taken (or twice in the list): nothing of the others is written.
        let err = add_all(b.path(), &[minimal("c"), minimal("b")]).unwrap_err();
        assert!(
            matches!(err, AddError::Exists { ref id, .. } if id.as_str() == "b"),
            "{err}"
        );
        assert_eq!(read(b.path(), "tasks/c.md"), None);
        let err = add_all(b.path(), &[minimal("d"), minimal("d")]).unwrap_err();
        assert!(
            matches!(err, AddError::Exists { ref id, .. } if id.as_str() == "d"),
            "{err}"
        );
        assert_eq!(read(b.path(), "tasks/d.md"), None);
    }

    #[test]
    fn change_rewrites_a_pending_task_in_place_and_note_appends() {
        let b = board();
        let mut t = minimal("a");
        t.attempts = 2;
        write(b.path(), "tasks/a.md", &t.render());
        let changed = change(b.path(), &id("a"), |t| {
            t.title = "New".into();
            t.max_attempts = 2;
        })
        .unwrap()
        .unwrap();
        // Out of attempts by the change, but not moved: the loop retires it.
        assert_eq!((changed.title.as_str(), changed.attempts), ("New", 2));
        assert!(
            read(b.path(), "tasks/a.md")
                .unwrap()
                .contains("title = \"New\"")
        );
        assert_eq!(change(b.path(), &id("x"), |_| ()).unwrap(), None);
        assert_eq!(
            note(b.path(), &id("a"), "\n## Note\n").unwrap(),
            Some(Place::Pending)
        );
        assert!(
            read(b.path(), "tasks/a.md")
                .unwrap()
                .ends_with("\n## Note\n")
        );
        write(b.path(), "tasks/failed/f.md", &minimal("f").render());
        assert_eq!(
            note(b.path(), &id("f"), "n\n").unwrap(),
            Some(Place::Failed)
        );
        write(b.path(), "tasks/done/d.md", &minimal("d").render());
        assert_eq!(note(b.path(), &id("d"), "n\n").unwrap(), None);
        assert_eq!(
            read(b.path(), "tasks/done/d.md").unwrap(),
            minimal("d").render()
        );
    }

    #[test]
    fn add_writes_the_pending_file() {
        let b = board();
        add(b.path(), &minimal("a")).unwrap();
        assert_eq!(read(b.path(), "tasks/a.md").unwrap(), minimal("a").render());
    }

    #[test]
    fn add_refuses_an_id_that_exists_pending_done_or_failed() {
        for (rel, place) in [
            ("tasks/a.md", Place::Pending),
            ("tasks/done/a.md", Place::Done),
            ("tasks/failed/a.md", Place::Failed),
        ] {
            let b = board();
            write(b.path(), rel, "old");
            let err = add(b.path(), &minimal("a")).unwrap_err();
            assert!(
                matches!(err, AddError::Exists { place: p, .. } if p == place),
                "{rel}: {err}"
            );
            // Nothing written over, nothing added beside it.
            assert_eq!(read(b.path(), rel).as_deref(), Some("old"));
            if place != Place::Pending {
                assert_eq!(read(b.path(), "tasks/a.md"), None);
            }
        }
    }

    #[test]
    fn missing_names_the_dependencies_with_no_file() {
        let b = board();
        write(b.path(), "tasks/p.md", "");
        write(b.path(), "tasks/done/d.md", "");
        write(b.path(), "tasks/failed/f.md", "");
        let after = [id("p"), id("d"), id("f"), id("x")];
        assert_eq!(missing(b.path(), &after), vec![&id("x")]);
    }

    #[test]
    fn done_moves_the_file_and_appends_the_result() {
        let b = board();
        write(
            b.path(),
            "tasks/a.md",
            "+++\ntitle = \"Do a\"\n+++\nas the session left it",
        );
        let touched = done(b.path(), &minimal("a"), "Done by x.").unwrap();
        assert_eq!(
            touched,
            ["tasks/a.md".to_owned(), "tasks/done/a.md".to_owned()]
        );
        assert_eq!(read(b.path(), "tasks/a.md"), None);
        assert_eq!(
            read(b.path(), "tasks/done/a.md").unwrap(),
            "+++\ntitle = \"Do a\"\n+++\nas the session left it\n\n## Result\n\nDone by x.\n"
        );
    }

    #[test]
    fn done_renders_the_task_when_its_file_is_gone() {
        let b = board();
        done(b.path(), &minimal("a"), "r").unwrap();
        let text = read(b.path(), "tasks/done/a.md").unwrap();
        assert!(text.starts_with(&minimal("a").render()), "{text}");
    }

    #[test]
    fn an_attempt_is_counted_and_its_note_appended() {
        let b = board();
        write(b.path(), "tasks/a.md", &minimal("a").render());
        let edited = record_attempt(b.path(), &id("a"), 1, "\n## Attempt 1\n")
            .unwrap()
            .unwrap();
        assert!(!edited.failed);
        assert_eq!(edited.task.attempts, 1);
        let back = parse(id("a"), &read(b.path(), "tasks/a.md").unwrap()).unwrap();
        assert_eq!(back.attempts, 1);
        assert_eq!(back.body, "\n## Attempt 1\n");
        // Never counted down: a later attempt number wins, an earlier one does not.
        let edited = record_attempt(b.path(), &id("a"), 1, "\n## Again\n")
            .unwrap()
            .unwrap();
        assert_eq!(edited.task.attempts, 1);
        assert!(edited.task.body.ends_with("## Attempt 1\n\n## Again\n"));
    }

    #[test]
    fn the_last_attempt_moves_the_task_to_failed() {
        let b = board();
        let mut t = minimal("a");
        t.max_attempts = 2;
        t.attempts = 1;
        write(b.path(), "tasks/a.md", &t.render());
        let edited = record_attempt(b.path(), &id("a"), 2, "\n## Attempt 2\n")
            .unwrap()
            .unwrap();
        assert!(edited.failed);
        assert_eq!(read(b.path(), "tasks/a.md"), None);
        let back = parse(id("a"), &read(b.path(), "tasks/failed/a.md").unwrap()).unwrap();
        assert_eq!((back.attempts, back.body.as_str()), (2, "\n## Attempt 2\n"));
    }

    #[test]
    fn an_attempt_on_a_task_no_longer_pending_edits_nothing() {
        let b = board();
        write(b.path(), "tasks/done/a.md", "done");
        write(b.path(), "tasks/bad.md", "+++\nafer = []\n+++\n");
        assert_eq!(record_attempt(b.path(), &id("a"), 1, "n").unwrap(), None);
        assert_eq!(record_attempt(b.path(), &id("bad"), 1, "n").unwrap(), None);
        assert_eq!(read(b.path(), "tasks/failed/a.md"), None);
        assert_eq!(
            read(b.path(), "tasks/bad.md").unwrap(),
            "+++\nafer = []\n+++\n"
        );
    }

    #[test]
    fn retire_moves_a_task_out_of_attempts_with_its_note() {
        let b = board();
        let mut t = minimal("a");
        t.max_attempts = 2;
        t.attempts = 2;
        write(b.path(), "tasks/a.md", &t.render());
        let edited = retire(b.path(), &id("a"), |t| {
            format!("\n{} of {}\n", t.attempts, t.max_attempts)
        })
        .unwrap()
        .unwrap();
        assert!(edited.failed);
        assert_eq!(read(b.path(), "tasks/a.md"), None);
        assert!(
            read(b.path(), "tasks/failed/a.md")
                .unwrap()
                .ends_with("\n2 of 2\n")
        );
    }

    /// A branch whose pushes answer as scripted; it counts its rounds.
    struct Script {
        dir: tempfile::TempDir,
        answers: VecDeque<Result<Push, &'static str>>,
        checkouts: Vec<usize>,
        messages: Vec<String>,
    }

    impl Script {
        fn new(answers: impl IntoIterator<Item = Result<Push, &'static str>>) -> Script {
            Script {
                dir: board(),
                answers: answers.into_iter().collect(),
                checkouts: Vec::new(),
                messages: Vec::new(),
            }
        }
    }

    impl Branch for Script {
        type Error = &'static str;
        type Round = usize;
        fn checkout(&mut self, round: usize) -> Result<(PathBuf, usize), &'static str> {
            self.checkouts.push(round);
            Ok((self.dir.path().to_owned(), round))
        }
        fn publish(&mut self, round: usize, message: &str) -> Result<Push, &'static str> {
            assert_eq!(
                self.checkouts.last(),
                Some(&round),
                "published what it checked out"
            );
            self.messages.push(message.to_owned());
            self.answers.pop_front().expect("a push past the script")
        }
    }

    fn commit(round: &mut u32) -> impl FnMut(&Path) -> Result<Edit<u32>, &'static str> + '_ {
        move |_| {
            *round += 1;
            Ok(Edit::Commit {
                message: format!("edit {round}"),
                value: *round,
            })
        }
    }

    #[test]
    fn a_rejected_push_is_edited_again_from_the_new_tip() {
        let mut b = Script::new([Ok(Push::Rejected), Ok(Push::Rejected), Ok(Push::Pushed)]);
        let mut edits = 0;
        assert_eq!(transact(&mut b, 5, commit(&mut edits)), Ok(Tx::Pushed(3)));
        assert_eq!(b.checkouts, [0, 1, 2]);
        assert_eq!(b.messages, ["edit 1", "edit 2", "edit 3"]);
    }

    #[test]
    fn a_branch_that_keeps_moving_is_given_up_after_the_bound() {
        let mut b = Script::new([Ok(Push::Rejected); 4]);
        let mut edits = 0;
        assert_eq!(transact(&mut b, 3, commit(&mut edits)), Ok(Tx::Busy));
        assert_eq!(b.checkouts, [0, 1, 2]);
        assert_eq!(b.answers.len(), 1, "no push past the bound");
    }

    #[test]
    fn a_lost_push_stops_the_transaction() {
        let mut b = Script::new([Ok(Push::Rejected), Ok(Push::Lost), Ok(Push::Pushed)]);
        let mut edits = 0;
        assert_eq!(transact(&mut b, 5, commit(&mut edits)), Ok(Tx::Lost(2)));
        assert_eq!(b.checkouts, [0, 1]);
    }

    #[test]
    fn nothing_to_edit_stops_before_any_push() {
        let mut b = Script::new([Ok(Push::Pushed)]);
        let got = transact(&mut b, 5, |_| Ok::<Edit<()>, _>(Edit::Gone));
        assert_eq!(got, Ok(Tx::Gone));
        assert!(b.messages.is_empty());
    }

    #[test]
    fn an_error_gives_up_with_it() {
        let mut b = Script::new([Ok(Push::Rejected), Err("refused"), Ok(Push::Pushed)]);
        let mut edits = 0;
        assert_eq!(transact(&mut b, 5, commit(&mut edits)), Err("refused"));
        assert_eq!(b.checkouts, [0, 1]);
        let mut b = Script::new([Ok(Push::Pushed)]);
        let got = transact(&mut b, 5, |_| Err::<Edit<()>, _>("exists"));
        assert_eq!(got, Err("exists"));
        assert!(b.messages.is_empty());
    }

    #[test]
    fn the_edit_sees_the_checked_out_work_tree() {
        let mut b = Script::new([Ok(Push::Pushed)]);
        let want = b.dir.path().to_owned();
        let got = transact(&mut b, 1, |dir| {
            add(dir, &minimal("a")).map_err(|_| "io")?;
            Ok(Edit::Commit {
                message: "add".into(),
                value: dir == want,
            })
        });
        assert_eq!(got, Ok(Tx::Pushed(true)));
        assert!(want.join("tasks/a.md").exists());
    }
}
