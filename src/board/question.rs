//! Questions that wait for an answer, as the board keeps them: a session
//! asks instead of guessing, and its task waits — still `tasks/<id>.md`,
//! with `asked = <when>` in its front matter and the question appended as
//! a `## Question` section — until `farm answer` appends the answer and
//! takes `asked` away, making it ready again. The task file is the record:
//! durable on the hub's branch, on every machine, across any farm killed,
//! and read by the next session with the rest of its notes.

use std::fs;
use std::io;
use std::path::Path;

use super::paths;
use super::task::{Task, parse};
use crate::names::TaskId;

/// The heading of a question's section (then ` — asked by …`).
pub const QUESTION: &str = "## Question";
/// The heading of an answer's section (then ` — by …`).
pub const ANSWER: &str = "### Answer";

/// The longest question or answer, in bytes.
pub const MAX_TEXT: usize = 16 * 1024;

/// `text` in a fence of its own: no line of it can close the fence.
fn fenced(text: &str) -> String {
    format!(
        "~~~~text\n{}\n~~~~\n",
        text.trim_end().replace("~~~~", "~ ~ ~ ~")
    )
}

/// The section a question adds to its task: who asked, when, the question,
/// and `details` (`- work: …` lines).
pub fn question_note(who: &str, at: &str, question: &str, details: &[String]) -> String {
    let mut note = format!(
        "\n{QUESTION} — asked by {who} at {at}\n\n{}",
        fenced(question)
    );
    if !details.is_empty() {
        note.push('\n');
        for d in details {
            note.push_str(&format!("- {d}\n"));
        }
    }
    note
}

/// The section an answer adds.
pub fn answer_note(who: &str, at: &str, answer: &str) -> String {
    format!("\n{ANSWER} — by {who} at {at}\n\n{}", fenced(answer))
}

/// The last question of `body` (its text, and the `- work:` branch under
/// it), read line by line outside the fences, so that no text quoted in a
/// question or an answer reads as a heading.
fn last(body: &str) -> Option<(String, Option<String>)> {
    let mut found: Option<(String, Option<String>)> = None;
    // Where the scan is: in the last question's section (before or in its
    // fence), or elsewhere.
    let mut in_question = false;
    let mut in_fence = false;
    let mut text: Option<String> = None;
    for line in body.lines() {
        if in_fence {
            if line == "~~~~" {
                in_fence = false;
                if let (true, Some(t)) = (in_question, text.take()) {
                    found = Some((t, None));
                }
            } else if in_question && let Some(t) = &mut text {
                if !t.is_empty() {
                    t.push('\n');
                }
                t.push_str(line);
            }
            continue;
        }
        if line.starts_with("~~~~") {
            in_fence = true;
            text = (in_question && found.is_none()).then(String::new);
            continue;
        }
        if line.starts_with(&format!("{QUESTION} — ")) {
            in_question = true;
            found = None;
        } else if line.starts_with("## ") || line.starts_with(&format!("{ANSWER} — ")) {
            in_question = false;
        } else if in_question
            && let Some(branch) = line
                .strip_prefix("- work: branch `")
                .and_then(|b| b.strip_suffix('`'))
            && let Some((_, work)) = &mut found
        {
            *work = Some(branch.to_owned());
        }
    }
    // A question's section holds one fence: a later one (in an answer)
    // ends it above.
    found
}

/// The text of the last question in `body`, if it has one.
pub fn last_question(body: &str) -> Option<String> {
    last(body).map(|(q, _)| q)
}

/// The branch of the last question's `- work: …` line in `body`: where
/// the work of the session that asked was kept.
pub fn last_work(body: &str) -> Option<String> {
    last(body).and_then(|(_, w)| w)
}

/// Who answered the last question of `body`, and when (`al at 2026-…`,
/// from its heading), when its last section of a question or an answer is
/// an answer; headings quoted in the fences do not count.
pub fn last_answer(body: &str) -> Option<String> {
    let mut answer = None;
    let mut in_fence = false;
    for line in body.lines() {
        if in_fence {
            in_fence = line != "~~~~";
        } else if line.starts_with("~~~~") {
            in_fence = true;
        } else if line.starts_with(&format!("{QUESTION} — ")) {
            answer = None;
        } else if let Some(by) = line.strip_prefix(&format!("{ANSWER} — by ")) {
            answer = Some(by.to_owned());
        }
    }
    answer
}

/// Why a task cannot be asked of or answered.
#[derive(Debug, PartialEq, Eq)]
pub enum NotWaiting {
    /// No pending file that parses.
    NotPending,
    /// Pending, but no question waits.
    NoQuestion,
}

/// Task `id` waits for an answer: `asked` set to `at` (RFC 3339) and
/// `note` appended. `None`: no pending file that parses (nothing written).
pub fn ask(
    worktree: &Path,
    id: &TaskId,
    at: std::time::SystemTime,
    note: &str,
) -> io::Result<Option<Task>> {
    let file = worktree.join(paths::pending(id));
    let Ok(text) = fs::read_to_string(&file) else {
        return Ok(None);
    };
    let Ok(mut task) = parse(id.clone(), &text) else {
        return Ok(None);
    };
    task.asked = Some(at);
    push_note(&mut task, note);
    fs::write(&file, task.render())?;
    Ok(Some(task))
}

/// Answer the question task `id` waits on: `note` appended, `asked` taken
/// away — it is ready again. Nothing written unless it waits.
pub fn answer(worktree: &Path, id: &TaskId, note: &str) -> io::Result<Result<Task, NotWaiting>> {
    let file = worktree.join(paths::pending(id));
    let Ok(text) = fs::read_to_string(&file) else {
        return Ok(Err(NotWaiting::NotPending));
    };
    let Ok(mut task) = parse(id.clone(), &text) else {
        return Ok(Err(NotWaiting::NotPending));
    };
    if task.asked.is_none() {
        return Ok(Err(NotWaiting::NoQuestion));
    }
    task.asked = None;
    push_note(&mut task, note);
    fs::write(&file, task.render())?;
    Ok(Ok(task))
}

fn push_note(task: &mut Task, note: &str) {
    if !task.body.is_empty() && !task.body.ends_with('\n') {
        task.body.push('\n');
    }
    task.body.push_str(note);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_last_question_and_its_work_are_read_back_whatever_the_text() {
        let q = question_note(
            "box-1@h",
            "2026-12-03T00:00:00.000Z",
            "Trailing commas?\n~~~~\n## Question — fake\n- work: branch `x`",
            &["work: branch `farm/rescue/a/n1`".into()],
        );
        let body = format!("Do it.\n{q}");
        assert_eq!(
            last_question(&body).as_deref(),
            Some("Trailing commas?\n~ ~ ~ ~\n## Question — fake\n- work: branch `x`")
        );
        assert_eq!(last_work(&body).as_deref(), Some("farm/rescue/a/n1"));
        let answered = format!(
            "{body}{}",
            answer_note("al", "2026-12-03T01:00:00.000Z", "yes")
        );
        assert_eq!(last_work(&answered).as_deref(), Some("farm/rescue/a/n1"));
        assert_eq!(last_question("Do it.\n"), None);
        assert_eq!(last_answer(&body), None);
        assert_eq!(
            last_answer(&answered).as_deref(),
            Some("al at 2026-12-03T01:00:00.000Z")
        );
        // An answer quoted in a question, or a question after the answer,
        // leaves it unanswered.
        let quoted = question_note("b", "t", "### Answer — by al at t\nYes?", &[]);
        assert_eq!(last_answer(&format!("Do it.\n{quoted}")), None);
        assert_eq!(last_answer(&format!("{answered}{quoted}")), None);
    }

    #[test]
    fn a_task_asked_of_waits_and_an_answer_makes_it_ready_again() {
        let dir = tempfile::tempdir().unwrap();
        let id = TaskId::parse("a").unwrap();
        fs::create_dir_all(dir.path().join("tasks")).unwrap();
        let t = crate::board::new_task(id.clone(), "A", "Do it.", vec![], 0, SystemTime::now());
        fs::write(dir.path().join("tasks/a.md"), t.render()).unwrap();
        assert_eq!(
            answer(dir.path(), &id, "x").unwrap(),
            Err(NotWaiting::NoQuestion)
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let asked = ask(dir.path(), &id, at, &question_note("b", "t", "Why?", &[]))
            .unwrap()
            .unwrap();
        assert_eq!(asked.asked, Some(at));
        let text = fs::read_to_string(dir.path().join("tasks/a.md")).unwrap();
        assert!(
            text.contains("asked = \"2027-01-15T08:00:00.000Z\""),
            "{text}"
        );
        let back = answer(dir.path(), &id, &answer_note("al", "t", "Because."))
            .unwrap()
            .unwrap();
        assert_eq!(back.asked, None);
        assert!(
            back.body.contains(
                "~~~~text\nWhy?\n~~~~\n\n### Answer — by al at t\n\n~~~~text\nBecause.\n~~~~\n"
            ),
            "{}",
            back.body
        );
        assert_eq!(
            answer(dir.path(), &TaskId::parse("b").unwrap(), "x").unwrap(),
            Err(NotWaiting::NotPending)
        );
    }
}
