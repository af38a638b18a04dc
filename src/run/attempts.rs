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
        let hold: Vec<_> = lock
            .as_ref()
            .map(std::os::fd::AsFd::as_fd)
            .into_iter()
            .collect();
        Ok(match publish_branch(run, clone, held, &hold)? {
            Published::Pushed => Push::Pushed,
            Published::Lost(_) => Push::Lost,
            Published::Rejected(_) => Push::Rejected,
        })
    }
}

/// Edit task `id`'s pending file on the hub's branch under `held`: `edit`
/// edits the work tree (`None`: the file is not pending there any more) and
/// says the commit message; true when the task went to `tasks/failed/`.
pub(super) fn edit_task(
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

/// What a session's log said last, shortened, for attempt notes: its last
/// non-empty line as `farm logs --pretty` renders it — for a CLI that
/// writes JSON lines, what the agent said (a message of several lines
/// whole, on one), not the raw line.
pub fn last_line(log: &Path) -> Option<String> {
    let text = crate::run::session::agent_output(&std::fs::read_to_string(log).ok()?);
    let pretty = crate::run::transcript::pretty(&text);
    let lines: Vec<&str> = pretty.lines().filter(|l| !l.trim().is_empty()).collect();
    // A said message's later lines are indented under its first (a few
    // of them: an indented tail of plain text, a stack say, is its last
    // line alone).
    let last = lines.len().checked_sub(1)?;
    let first = lines
        .iter()
        .rposition(|l| !l.starts_with(char::is_whitespace))
        .filter(|first| last - first < 5)
        .unwrap_or(last);
    let said: Vec<&str> = lines[first..].iter().map(|l| l.trim()).collect();
    let cut: String = said.join(" ").chars().take(200).collect();
    Some(format!("`{}`", cut.replace('`', "'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: with a CLI that writes JSON lines (Claude's
    /// `stream-json`), a failed attempt's note quoted the raw `result`
    /// line cut at 200 characters, mid-object. It quotes what the agent
    /// said last, as `farm logs --pretty` shows it.
    #[test]
    fn the_last_output_of_a_json_log_is_what_the_agent_said() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("t.log");
        std::fs::write(
            &log,
            "[farm] session: task t1\n\
             {\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"Looking.\"}]}}\n\
             {\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":3,\"duration_ms\":4200,\"total_cost_usd\":0.125,\"usage\":{\"input_tokens\":1200,\"output_tokens\":340,\"cache_read_input_tokens\":100000},\"result\":\"I could not make the tests pass:\\n`parse_if` still panics.\"}\n\
             [farm] ended: failed with exit code 1 after 4.3s\n",
        )
        .unwrap();
        assert_eq!(
            last_line(&log).as_deref(),
            Some("`agent: I could not make the tests pass: 'parse_if' still panics.`")
        );
        // Plain text is its last line, as it was.
        std::fs::write(&log, "one\ntwo\n\n").unwrap();
        assert_eq!(last_line(&log).as_deref(), Some("`two`"));
    }
}
