//! A session that asks instead of guessing: it writes its question into
//! the file `FARM_ASK` names (in its clone's `.git`, which it may write,
//! and which no commit carries), and ends. Its task then waits on the
//! board (see [`crate::board::question`]) — no attempt counted, the claim
//! released — until `farm answer` makes it ready again.
//!
//! The session's commits go to a rescue branch on the hub, as a stopped
//! session's do, and the question's note names it: the answer may change
//! the approach, the branch moves on meanwhile, and the next session may
//! run on another machine, so the work is kept where every machine sees it
//! rather than carried in this clone. Before the next session of the task
//! farm fetches that branch into its clone (`origin/farm/rescue/…`), and
//! the prompt says where it is: the session merges, picks or drops it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::board::question::{self, MAX_TEXT};
use crate::claims::host::Here;
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::run::attempts::{Recorded, edit_task};
use crate::run::clone::PrivateClone;
use crate::run::event::Event;
use crate::run::turn::Turn;

/// The file a session of `clone` may write its question into.
pub fn ask_file(clone: &Path) -> PathBuf {
    clone.join(".git").join("farm").join("question.md")
}

/// Make way for a session's question: no earlier one left, the directory
/// there.
pub fn prepare(clone: &Path) -> Result<PathBuf, Error> {
    let file = ask_file(clone);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    }
    match std::fs::remove_file(&file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::failure(format!(
                "cannot remove `{}`: {e}",
                file.display()
            )));
        }
    }
    Ok(file)
}

/// The question the session in `clone` wrote, if any: its text, trimmed,
/// cut to [`MAX_TEXT`] bytes (on a character boundary). An empty file asks
/// nothing.
pub fn read(clone: &Path) -> Option<String> {
    let bytes = std::fs::read(ask_file(clone)).ok()?;
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

/// The question is on the board now: the file goes.
pub fn forget(clone: &Path) {
    let _ = std::fs::remove_file(ask_file(clone));
}

/// Put the question of `turn`'s session on the board (its work kept on
/// `work`, the rescue branch, if there was any): the task waits.
pub(super) fn record(
    turn: Turn<'_>,
    asked: &str,
    work: Option<&str>,
    log: &Path,
) -> Result<Recorded, Error> {
    let Turn {
        run, name, task, ..
    } = turn;
    let id = task.id.as_str();
    let now = crate::claims::message::to_millis(SystemTime::now());
    let mut details = Vec::new();
    if let Some(branch) = work {
        details.push(format!("work: branch `{branch}`"));
    }
    details.push(format!("log: {}", log.display()));
    details.push("no attempt counted".to_owned());
    let note = question::question_note(
        &format!("{name}@{}", Here::current().host),
        &timestamp(now),
        asked,
        &details,
    );
    let (recorded, _) = edit_task(
        turn,
        &|dir| {
            Ok(
                question::ask(dir, &task.id, now, &note)?.map(|t| crate::board::edit::Edited {
                    task: t,
                    failed: false,
                }),
            )
        },
        &|_| format!("farm: `{id}` asks a question"),
    )?;
    if recorded == Recorded::Pushed {
        forget(turn.clone.dir());
        run.tell(
            name,
            &Event::Asked {
                task: id.into(),
                question: asked.into(),
                work: work.map(Into::into),
            },
        );
    }
    Ok(recorded)
}

/// The prompt's paragraph on the work of the session that asked `task`'s
/// last question, fetched into `clone` as `origin/<branch>`; nothing when
/// the task has no answered question with work kept.
pub(super) fn earlier_work(clone: &PrivateClone, body: &str) -> String {
    let Some(branch) = question::last_work(body) else {
        return String::new();
    };
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
        let file = prepare(dir.path()).unwrap();
        assert_eq!(read(dir.path()), None);
        std::fs::write(&file, "  \n").unwrap();
        assert_eq!(read(dir.path()), None);
        std::fs::write(&file, "\nTabs or spaces?\n").unwrap();
        assert_eq!(read(dir.path()).as_deref(), Some("Tabs or spaces?"));
        std::fs::write(&file, "é".repeat(MAX_TEXT)).unwrap();
        assert_eq!(read(dir.path()).unwrap().len(), MAX_TEXT);
        prepare(dir.path()).unwrap();
        assert!(!file.exists());
    }
}
