//! The file a session writes its question into (`FARM_ASK`, in its
//! clone's `.git`, which it may write and no commit carries), read back by
//! farm once the session ended; and the prompt's word on the work the
//! asking session left. What a question does on the board is
//! [`asking`](super::asking)'s.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::board::question::{self, MAX_TEXT};
use crate::error::Error;
use crate::names::TaskId;
use crate::run::clone::PrivateClone;

/// Where the sessions of `clone` write their questions.
fn ask_dir(clone: &Path) -> PathBuf {
    clone.join(".git").join("farm").join("ask")
}

/// The file a session of `clone` on task `id` may write its question into:
/// named after the task, so that a question a killed farm left behind
/// still says whose it is.
pub fn ask_file(clone: &Path, id: &TaskId) -> PathBuf {
    ask_dir(clone).join(format!("{id}.md"))
}

/// Make way for a session's question on `id`: the directory there, no
/// earlier question on `id` left (the loop puts one on the board before it
/// runs a session of its task: [`leftovers`]). Other tasks' questions the
/// board could not take yet stay.
pub fn prepare(clone: &Path, id: &TaskId) -> Result<PathBuf, Error> {
    let dir = ask_dir(clone);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    forget(clone, id);
    Ok(ask_file(clone, id))
}

/// The questions a farm killed after its session asked, and before the
/// board had them, left in `clone`: (task, question).
pub fn leftovers(clone: &Path) -> Vec<(TaskId, String)> {
    let Ok(entries) = std::fs::read_dir(ask_dir(clone)) else {
        return Vec::new();
    };
    let mut out: Vec<(TaskId, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let id = TaskId::parse(name.to_str()?.strip_suffix(".md")?).ok()?;
            let question = read(clone, &id)?;
            Some((id, question))
        })
        .collect();
    out.sort();
    out
}

/// The clone among `clones` (a state dir's `clones/`, every agent's) that
/// keeps a question on `id` written before `before` (by an earlier run:
/// a farm killed after its session asked), if one does. The farm's other
/// agents must not work a task whose question waits there: started again,
/// another agent may reap the dead claim and claim the task before the
/// clone's own agent has put it on the board. (A question of this run is
/// its integration's to settle, and kept, its agent's.)
pub fn keeper(clones: &Path, id: &TaskId, before: SystemTime) -> Option<PathBuf> {
    let earlier = |dir: &Path| {
        std::fs::metadata(ask_file(dir, id))
            .and_then(|m| m.modified())
            .is_ok_and(|at| at < before)
    };
    std::fs::read_dir(clones)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|dir| earlier(dir) && read(dir, id).is_some())
        .min()
}

/// The question the session in `clone` on `id` wrote, if any: its text,
/// trimmed, cut to [`MAX_TEXT`] bytes (on a character boundary). An empty
/// file asks nothing.
pub fn read(clone: &Path, id: &TaskId) -> Option<String> {
    let bytes = std::fs::read(ask_file(clone, id)).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_owned())
}

/// The question is on the board now (or never will be): the file goes,
/// with the name of its work ([`keep_work`]).
pub fn forget(clone: &Path, id: &TaskId) {
    let _ = std::fs::remove_file(ask_file(clone, id));
    let _ = std::fs::remove_file(work_file(clone, id));
}

/// Where the name of the branch holding the work of the session that asked
/// on `id` is kept beside its question, while the board does not have it.
fn work_file(clone: &Path, id: &TaskId) -> PathBuf {
    ask_dir(clone).join(format!("{id}.work"))
}

/// Keep, beside the question on `id` the board could not take yet, the
/// branch its session's work went to, for the note that puts it there
/// later. Best effort: without it the note names no branch (the branch is
/// on the hub all the same: `farm rescue list`).
pub fn keep_work(clone: &Path, id: &TaskId, branch: &str) {
    let _ = std::fs::write(work_file(clone, id), branch);
}

/// The branch [`keep_work`] kept for the question on `id`.
pub fn kept_work(clone: &Path, id: &TaskId) -> Option<String> {
    let branch = std::fs::read_to_string(work_file(clone, id)).ok()?;
    Some(branch.trim().to_owned()).filter(|b| !b.is_empty())
}

/// The prompt's paragraph on the work of the session that asked `task`'s
/// last question, fetched into `clone` as `origin/<branch>`; nothing when
/// the task has no question with work kept, or when that branch is among
/// the earlier work the prompt offers already (`offered`: the task's own
/// rescue branches are; the branch a killed farm's clone rescued is not).
pub(super) fn earlier_work(clone: &PrivateClone, body: &str, offered: &[&str]) -> String {
    let Some(branch) = question::last_work(body) else {
        return String::new();
    };
    if offered.contains(&branch.as_str()) {
        return String::new();
    }
    match clone.fetch(&branch) {
        Ok(()) => format!(
            "\nThe session that asked the last question left its commits on \
             `origin/{branch}` in this repository (`git log -p origin/{branch}`): \
             merge or cherry-pick what still holds after the answer, or start afresh.\n"
        ),
        Err(_) => format!(
            "\nThe session that asked the last question left its commits on the \
             hub's branch `{branch}`; it could not be fetched here.\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_read_trimmed_and_an_empty_file_asks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let (a, b) = (TaskId::parse("a").unwrap(), TaskId::parse("b").unwrap());
        let file = prepare(dir.path(), &a).unwrap();
        keep_work(dir.path(), &a, "farm/rescue/a/1");
        assert_eq!(
            kept_work(dir.path(), &a).as_deref(),
            Some("farm/rescue/a/1")
        );
        assert_eq!(read(dir.path(), &a), None);
        std::fs::write(&file, "  \n").unwrap();
        assert_eq!(read(dir.path(), &a), None);
        assert_eq!(leftovers(dir.path()), []);
        std::fs::write(&file, "\nTabs or spaces?\n").unwrap();
        assert_eq!(read(dir.path(), &a).as_deref(), Some("Tabs or spaces?"));
        assert_eq!(
            leftovers(dir.path()),
            [(a.clone(), "Tabs or spaces?".to_owned())]
        );
        std::fs::write(&file, "é".repeat(MAX_TEXT)).unwrap();
        assert_eq!(read(dir.path(), &a).unwrap().len(), MAX_TEXT);
        let other = prepare(dir.path(), &b).unwrap();
        assert!(file.exists() && !other.exists(), "`a`'s question stays");
        forget(dir.path(), &a);
        assert!(!file.exists() && kept_work(dir.path(), &a).is_none());
    }
}
