//! Changes that wait for a person's review, as the board keeps them: a task
//! with `review = true` whose session finished does not land; its change is
//! pushed to a branch `farm/review/<id>/<nonce>` on the hub, and the task
//! stays `tasks/<id>.md` with `change = "<that branch>"` in its front
//! matter and a `## Review` note — waiting ([`crate::board::Status::Review`])
//! until `farm approve` sets `approved` (ready again: the next turn of a
//! running farm lands the change without a session) or `farm reject`
//! counts a failed attempt with the reviewer's words and clears `change`
//! (ready again: a new session, its prompt naming the branch reviewed).
//! The task file is the record and the branch the change: both on the hub,
//! seen from every machine, across any farm killed.

use std::fs;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use super::edit::{Edited, append, edit_pending};
use super::paths;
use super::task::{Task, parse};
use crate::names::TaskId;

/// The heading of the note a change waiting for review adds.
pub const REVIEW: &str = "## Review";

/// The longest note `farm reject -m` takes, in bytes.
pub const MAX_TEXT: usize = super::question::MAX_TEXT;

/// Why a task cannot be approved or rejected.
#[derive(Debug, PartialEq, Eq)]
pub enum NotReviewing {
    /// No pending file that parses.
    NotPending,
    /// Pending, but no change waits for review.
    NoChange,
    /// Approved already: landing is under way or next.
    Approved,
}

/// The note a change waiting for review adds: who, when, and `details`.
pub fn waiting_note(who: &str, at: &str, change: &str, details: &[String]) -> String {
    let mut note =
        format!("\n{REVIEW} — waiting since {at}\n\n- change: branch `{change}`, by {who}\n");
    for d in details {
        note.push_str(&format!("- {d}\n"));
    }
    note
}

/// Task `id`'s change waits for review on branch `change`: `change` set,
/// any approval dropped, `note` appended. `None`: no pending file that
/// parses (nothing written).
pub fn wait(worktree: &Path, id: &TaskId, change: &str, note: &str) -> io::Result<Option<Task>> {
    let file = worktree.join(paths::pending(id));
    let Ok(text) = fs::read_to_string(&file) else {
        return Ok(None);
    };
    let Ok(mut task) = parse(id.clone(), &text) else {
        return Ok(None);
    };
    task.change = Some(change.to_owned());
    task.approved = None;
    append(&mut task, note);
    fs::write(&file, task.render())?;
    Ok(Some(task))
}

/// Approve the change task `id` waits with: `approved` set to `at`, `note`
/// appended. Nothing written unless a change waits unapproved.
pub fn approve(
    worktree: &Path,
    id: &TaskId,
    at: SystemTime,
    note: &str,
) -> io::Result<Result<Task, NotReviewing>> {
    let file = worktree.join(paths::pending(id));
    let mut task = match reviewing(worktree, id) {
        Ok(task) => task,
        Err(e) => return Ok(Err(e)),
    };
    task.approved = Some(at);
    append(&mut task, note);
    fs::write(&file, task.render())?;
    Ok(Ok(task))
}

/// Reject the change task `id` waits with: a failed attempt (to
/// `tasks/failed/` when the attempts are used up), `change` cleared,
/// `note` (`note(attempt, change)`) appended. Nothing written unless a
/// change waits unapproved.
pub fn reject(
    worktree: &Path,
    id: &TaskId,
    note: impl FnOnce(u32, &str) -> String,
) -> io::Result<Result<Edited, NotReviewing>> {
    let task = match reviewing(worktree, id) {
        Ok(task) => task,
        Err(e) => return Ok(Err(e)),
    };
    let change = task.change.clone().unwrap_or_default();
    let attempt = task.attempts + 1;
    let edited = edit_pending(worktree, id, |t| {
        t.attempts = attempt;
        t.change = None;
        t.approved = None;
        append(t, &note(attempt, &change));
    })?;
    Ok(edited.ok_or(NotReviewing::NotPending))
}

/// Task `id`, pending with a change that waits unapproved.
fn reviewing(worktree: &Path, id: &TaskId) -> Result<Task, NotReviewing> {
    let text = fs::read_to_string(worktree.join(paths::pending(id)))
        .map_err(|_| NotReviewing::NotPending)?;
    let task = parse(id.clone(), &text).map_err(|_| NotReviewing::NotPending)?;
    match (&task.change, task.approved) {
        (None, _) => Err(NotReviewing::NoChange),
        (Some(_), Some(_)) => Err(NotReviewing::Approved),
        (Some(_), None) => Ok(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_waits_is_approved_once_or_rejected_with_an_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let id = TaskId::parse("a").unwrap();
        fs::create_dir_all(dir.path().join("tasks")).unwrap();
        let mut t = crate::board::new_task(id.clone(), "A", "Do it.", vec![], 0, SystemTime::now());
        t.review = true;
        fs::write(dir.path().join("tasks/a.md"), t.render()).unwrap();
        let at = SystemTime::UNIX_EPOCH;
        assert_eq!(
            approve(dir.path(), &id, at, "x").unwrap(),
            Err(NotReviewing::NoChange)
        );
        let change = "farm/review/a/0123456789abcdef0123456789abcdef";
        let waiting = wait(
            dir.path(),
            &id,
            change,
            &waiting_note("b", "t", change, &[]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(waiting.change.as_deref(), Some(change));
        let text = fs::read_to_string(dir.path().join("tasks/a.md")).unwrap();
        assert!(text.contains(&format!("change = \"{change}\"")), "{text}");
        assert!(text.contains("review = true"), "{text}");
        let approved = approve(dir.path(), &id, at, "\nok\n").unwrap().unwrap();
        assert_eq!(approved.approved, Some(at));
        assert_eq!(
            approve(dir.path(), &id, at, "x").unwrap(),
            Err(NotReviewing::Approved)
        );
        assert!(matches!(
            reject(dir.path(), &id, |_, _| String::new()).unwrap(),
            Err(NotReviewing::Approved)
        ));
        // Waiting again (a new session's change): rejected, an attempt.
        wait(dir.path(), &id, change, "").unwrap().unwrap();
        let rejected = reject(dir.path(), &id, |n, c| {
            format!("\n## Attempt {n} — rejected: {c}\n")
        })
        .unwrap()
        .unwrap();
        assert_eq!(rejected.task.attempts, 1);
        assert_eq!(rejected.task.change, None);
        assert!(!rejected.failed);
        assert!(
            rejected
                .task
                .body
                .ends_with(&format!("## Attempt 1 — rejected: {change}\n"))
        );
        assert!(matches!(
            reject(
                dir.path(),
                &TaskId::parse("b").unwrap(),
                |_, _| String::new()
            )
            .unwrap(),
            Err(NotReviewing::NotPending)
        ));
    }
}
