//! A failed attempt noted on the board: the task file on the hub's branch
//! edited under the claim (fenced as the work is: a holder whose claim was
//! taken away leaves the file to its new holder), with a note the next
//! session reads; to `tasks/failed/` when its attempts are used up.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::board::edit::{Edit, Edited, Push, Tx};
use crate::board::{self, Task};
use crate::run::event::Event;

use crate::claims::Published;
use crate::claims::host::Here;
use crate::claims::record::{Nonce, timestamp};
use crate::error::Error;
use crate::run::clone::io_error;
use crate::run::integrate::{after_rejection, publish_branch, push_rounds};
use crate::run::turn::Turn;

/// What became of an edit of a task file on the hub's branch.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    Pushed,
    /// The file is not pending there any more (moved by hand, or edited
    /// into something invalid, which the board reports): nothing to edit.
    Gone,
    /// The claim was taken away: nothing published.
    Lost,
}

/// The hub's branch as the loop edits it: in the clone, at the branch's tip,
/// under the hub's push lock (if it has one) from the sync to the push, and
/// pushed under the claim — fencing, as for the work: a holder whose claim
/// was taken away leaves the task file to its new holder.
struct Fenced<'a> {
    turn: Turn<'a>,
}

impl board::edit::Branch for Fenced<'_> {
    type Error = Error;
    type Round = Option<std::fs::File>;

    fn checkout(&mut self, round: usize) -> Result<(PathBuf, Self::Round), Error> {
        let Turn { run, clone, .. } = self.turn;
        if round > 0 {
            after_rejection(run, round);
        }
        let lock = run.hub.push_lock(run.out)?;
        clone.sync(&run.hub)?;
        Ok((clone.dir().to_path_buf(), lock))
    }

    fn publish(&mut self, lock: Self::Round, message: &str) -> Result<Push, Error> {
        let Turn {
            run, clone, held, ..
        } = self.turn;
        clone.commit_all(message)?;
        Ok(match publish_branch(run, clone, held, lock.as_ref())? {
            Published::Pushed => Push::Pushed,
            Published::Lost(_) => Push::Lost,
            Published::Rejected(_) => Push::Rejected,
        })
    }
}

/// Edit task `id`'s pending file on the hub's branch under `held`: `edit`
/// edits the work tree (`None`: the file is not pending there any more) and
/// says the commit message; true when the task went to `tasks/failed/`.
fn edit_task(
    turn: Turn<'_>,
    edit: &dyn Fn(&Path) -> std::io::Result<Option<Edited>>,
    message: &dyn Fn(&Edited) -> String,
) -> Result<(Recorded, bool), Error> {
    let id = &turn.task.id;
    let tx = board::edit::transact(&mut Fenced { turn }, push_rounds(turn.run), |dir| {
        Ok(match edit(dir).map_err(io_error)? {
            None => Edit::Gone,
            Some(edited) => Edit::Commit {
                message: message(&edited),
                value: edited.failed,
            },
        })
    })?;
    match tx {
        Tx::Pushed(gave_up) => Ok((Recorded::Pushed, gave_up)),
        Tx::Lost(gave_up) => Ok((Recorded::Lost, gave_up)),
        Tx::Gone => Ok((Recorded::Gone, false)),
        Tx::Busy => Err(Error::failure(format!(
            "`{id}`: could not edit its task file; the hub is too busy"
        ))),
    }
}

/// A task out of attempts before any session (`attempts >= max_attempts`
/// in its front matter): to `tasks/failed/` with a note, no attempt added.
pub(super) fn retire(turn: Turn<'_>) -> Result<Recorded, Error> {
    let Turn {
        run, name, task, ..
    } = turn;
    let id = task.id.as_str();
    let note = |t: &Task| {
        format!(
            "\n## Out of attempts\n\n- {} of {} attempts used before it was claimed: \
             moved to tasks/failed/ without a session\n- agent: {name}@{}\n- at: {}\n",
            t.attempts,
            t.max_attempts,
            Here::current().host,
            timestamp(SystemTime::now()),
        )
    };
    let (recorded, _) = edit_task(
        turn,
        &|dir| board::edit::retire(dir, &task.id, note),
        &|Edited { task: t, .. }| {
            format!(
                "farm: `{id}` is out of attempts ({} of {})",
                t.attempts, t.max_attempts
            )
        },
    )?;
    if recorded == Recorded::Pushed {
        let failed = Event::Failed {
            task: id.into(),
            attempt: None,
            attempts: Some(task.attempts),
            why: "out of attempts".into(),
            gave_up: true,
        };
        run.journal.record(name, &failed);
        run.say_tone(
            name,
            failed.tone(),
            &format!(
                "`{id}`: out of attempts ({} of {}); moved to tasks/failed/ without a session",
                task.attempts, task.max_attempts
            ),
        );
    }
    Ok(recorded)
}

/// A failed attempt, as its note on the board tells it.
pub(super) struct Attempted<'a> {
    pub(super) attempt: u32,
    pub(super) why: &'a str,
    /// Lines quoted under the note (`ERROR:` lines of the tests).
    pub(super) detail: &'a [String],
    pub(super) log: &'a Path,
    /// The claim whose rescue branch holds the work, if any.
    pub(super) rescue: Option<&'a Nonce>,
}

/// At most this many detail lines in a note: the first of them tell.
const DETAIL_LINES: usize = 20;

/// Count a failed attempt in the task file on the hub's branch, with a note;
/// move it to `tasks/failed/` when its attempts are used up.
pub(super) fn record_attempt(turn: Turn<'_>, attempted: Attempted<'_>) -> Result<Recorded, Error> {
    let Turn {
        run, name, task, ..
    } = turn;
    let Attempted {
        attempt,
        why,
        detail,
        log,
        rescue,
    } = attempted;
    let id = task.id.as_str();
    let note = || {
        let mut note = format!(
            "\n## Attempt {attempt} — {why}\n\n- agent: {name}@{}\n- at: {}\n- log: {}\n",
            Here::current().host,
            timestamp(SystemTime::now()),
            log.display()
        );
        if let Some(nonce) = rescue {
            note.push_str(&format!("- work: branch `farm/rescue/{id}/{nonce}`\n"));
        }
        if let Some(tail) = last_line(log) {
            note.push_str(&format!("- last output: {tail}\n"));
        }
        if !detail.is_empty() {
            // A fence of its own: no quoted line can close it.
            note.push_str("\n~~~~text\n");
            for line in detail.iter().take(DETAIL_LINES) {
                note.push_str(&line.replace("~~~~", "~ ~ ~ ~"));
                note.push('\n');
            }
            if detail.len() > DETAIL_LINES {
                note.push_str(&format!("… and {} more\n", detail.len() - DETAIL_LINES));
            }
            note.push_str("~~~~\n");
        }
        note
    };
    let (recorded, gave_up) = edit_task(
        turn,
        &|dir| board::edit::record_attempt(dir, &task.id, attempt, &note()),
        &|Edited { task: t, failed }| {
            if *failed {
                format!("farm: `{id}` failed after {} attempts", t.attempts)
            } else {
                format!("farm: attempt {attempt} of `{id}` failed")
            }
        },
    )?;
    if recorded == Recorded::Pushed {
        run.tell(
            name,
            &Event::Failed {
                task: id.into(),
                attempt: Some(attempt),
                attempts: None,
                why: why.into(),
                gave_up,
            },
        );
    }
    Ok(recorded)
}

/// The last non-empty line of a session log, shortened, for attempt notes.
pub(super) fn last_line(log: &Path) -> Option<String> {
    let text = crate::run::session::agent_output(&std::fs::read_to_string(log).ok()?);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let cut: String = line.chars().take(200).collect();
    Some(format!("`{}`", cut.replace('`', "'")))
}
