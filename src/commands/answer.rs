//! `farm answer`: answer the question a task waits on, making it ready
//! again; the next session's prompt holds the question and the answer.

use std::io::Read;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::board::edit::{self, Edit, Tx};
use crate::board::paths::Place;
use crate::board::question::{self, MAX_TEXT, NotWaiting};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::names::TaskId;

/// Answer the question a session asked (through `FARM_ASK`) instead of
/// guessing: the answer is appended to the task's file on the hub's branch
/// under the question, and the task is ready again — the next session's
/// prompt holds the question, the answer, and where the asking session's
/// work is. `farm tasks` and `farm status` list the tasks that wait, with
/// their questions.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm answer parse-if 'yes, accept trailing commas'
  farm answer parse-if -F answer.md
  farm tasks                             tasks waiting show `waiting`")]
pub struct Args {
    /// The task that waits.
    #[arg(value_parser = TaskId::parse)]
    task: TaskId,

    /// The answer (`-`: read it from stdin).
    #[arg(value_name = "TEXT", required_unless_present = "file")]
    text: Option<String>,

    /// Read the answer from FILE (`-`: stdin).
    #[arg(short = 'F', long, value_name = "FILE", conflicts_with = "text")]
    file: Option<PathBuf>,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let text = read_text(args)?;
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let id = &args.task;
    let who = super::fleet::asker();
    let mut branch = HubBranch::new(&hub, format!("`{id}`"));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let note = question::answer_note(
            &who,
            &crate::claims::record::timestamp(SystemTime::now()),
            &text,
        );
        match question::answer(dir, id, &note).map_err(|e| Error::failure(e.to_string()))? {
            Ok(task) => Ok(Edit::Commit {
                message: format!("farm: answer `{id}`"),
                value: task,
            }),
            // Answered by an earlier `farm answer`, perhaps one killed
            // whose push landed all the same: said so, not "no question".
            Err(NotWaiting::NoQuestion) => Err(match pending_answer(dir, id) {
                Some(by) => Error::usage(format!(
                    "`{id}` was answered already (by {by}): it is ready again"
                ))
                .hint(format!("the question and its answer: farm task show {id}")),
                None => Error::usage(format!(
                    "`{id}` is not waiting for an answer: no question is open on it"
                ))
                .hint("farm tasks lists the tasks that wait (status `waiting`)"),
            }),
            Err(NotWaiting::NotPending) => Err(match board_place(dir, id) {
                Some(Place::Done) => {
                    Error::usage(format!("`{id}` is done, not waiting for an answer"))
                }
                Some(Place::Failed) => {
                    Error::usage(format!("`{id}` failed, not waiting for an answer"))
                        .hint(format!("put it back first: farm task retry {id}"))
                }
                Some(Place::Pending) => Error::failure(format!(
                    "{} is not a valid task: fix it by hand",
                    Place::Pending.file(id)
                )),
                None => Error::usage(format!("no task `{id}` on the board"))
                    .hint("list them: farm tasks"),
            }),
        }
    })?;
    match tx {
        Tx::Pushed(task) => {
            let asked = question::last_question(&task.body).unwrap_or_default();
            ctx.out.say(&format!(
                "answered `{id}` on `{}`: it is ready again; its next session's prompt holds \
                 the question and the answer",
                hub.branch
            ))?;
            ctx.out.note(&format!(
                "the question was: {}",
                asked.lines().next().unwrap_or_default()
            ));
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not answer `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

fn board_place(dir: &std::path::Path, id: &TaskId) -> Option<Place> {
    crate::board::paths::find(dir, id)
}

/// Who answered pending task `id`'s last question, and when, if it has
/// an answer.
fn pending_answer(dir: &std::path::Path, id: &TaskId) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(crate::board::paths::pending(id))).ok()?;
    let task = crate::board::task::parse(id.clone(), &text).ok()?;
    question::last_answer(&task.body)
}

/// The answer: the argument, `-F FILE`, or stdin; refused when empty, not
/// UTF-8, or over [`MAX_TEXT`], before the hub is touched.
fn read_text(args: &Args) -> Result<String, Error> {
    let from_stdin = || {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::failure(format!("cannot read the answer from stdin: {e}")))?;
        Ok::<_, Error>(bytes)
    };
    let bytes = match (&args.text, &args.file) {
        (Some(t), _) if t == "-" => from_stdin()?,
        (Some(t), _) => t.clone().into_bytes(),
        (None, Some(f)) if f.as_os_str() == "-" => from_stdin()?,
        (None, Some(f)) => std::fs::read(f).map_err(|e| {
            Error::usage(format!(
                "cannot read the answer from `{}`: {e}",
                f.display()
            ))
        })?,
        (None, None) => return Err(Error::usage("answer what? give TEXT, or -F FILE")),
    };
    if bytes.len() > MAX_TEXT {
        return Err(Error::usage(format!(
            "the answer is {} bytes; an answer is at most {MAX_TEXT} (16 KiB)",
            bytes.len()
        ))
        .hint("put the long text in a file of the repository and say where it is"));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| Error::usage("the answer is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(Error::usage("the answer is empty"));
    }
    Ok(text)
}
