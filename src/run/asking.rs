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
use crate::names::TaskId;
use crate::run::attempts::{Recorded, edit_task};
use crate::run::clone::PrivateClone;
use crate::run::event::Event;
use crate::run::slot::Slot;
use crate::run::state::Run;
use crate::run::turn::{Turn, claim, reap};

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

/// Make way for a session's question on `id`: no earlier one left (those a
/// killed farm left were put on the board when the agent began:
/// [`leftovers`]), the directory there.
pub fn prepare(clone: &Path, id: &TaskId) -> Result<PathBuf, Error> {
    let dir = ask_dir(clone);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
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

/// The question is on the board now (or never will be): the file goes.
pub fn forget(clone: &Path, id: &TaskId) {
    let _ = std::fs::remove_file(ask_file(clone, id));
}

/// Put the question of `turn`'s session on the board (its work kept on
/// `work`, the rescue branch, if there was any): the task waits.
pub(super) fn record(
    turn: Turn<'_>,
    asked: &str,
    work: Option<&str>,
    log: Option<&Path>,
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
    if let Some(log) = log {
        details.push(format!("log: {}", log.display()));
    }
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
        forget(turn.clone.dir(), &task.id);
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

/// Put on the board the questions a farm killed between its session's
/// question and the board's edit left in `clone` ([`leftovers`]): the task
/// is claimed again (the dead farm's claim reaped first) and waits, as if
/// that farm had lived; its work is the branch the clone's recovery
/// rescued, if any. A task settled or claimed by another meanwhile keeps
/// its course: the question is dropped, said.
pub(super) fn recover(
    run: &Run,
    name: &str,
    clone: &PrivateClone,
    slot: &Slot,
) -> Result<(), Error> {
    for (id, question) in leftovers(clone.dir()) {
        reap(run, name)?;
        let Some(task) = clone.fresh_task(&run.hub, &id)? else {
            forget(clone.dir(), &id);
            continue;
        };
        let Some(held) = claim(run, name, &id, task.attempts + 1)? else {
            run.say(
                name,
                &format!(
                    "`{id}`: a killed farm left a question its board never got, but another \
                     agent holds the task now: the question is dropped"
                ),
            );
            forget(clone.dir(), &id);
            continue;
        };
        let work = clone.rescued().first().cloned();
        let turn = Turn {
            run,
            clone,
            name,
            task: &task,
            held: &held,
            slot,
        };
        let recorded = record(turn, &question, work.as_deref(), None);
        let released = run.store.release_held(held);
        recorded?;
        match released {
            Ok(()) | Err(crate::claims::StoreError::Lost { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        run.wake_all();
    }
    Ok(())
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
        assert!(!file.exists() && !other.exists());
    }
}
