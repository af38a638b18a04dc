//! `farm reject`: send back the change a task waits with (`review =
//! true`): a failed attempt with the reviewer's words, which the next
//! session's prompt holds with the branch the change is kept on.

use std::io::Read;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::board::edit::{self, Edit, Tx};
use crate::board::review::{self, MAX_TEXT};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::names::TaskId;

/// Reject the change a task with `review = true` waits with: an attempt is
/// counted (out of attempts, the task goes to `tasks/failed/`) with a note
/// holding WHY, and the task is ready again — its next session's prompt
/// holds the note and where the rejected change is (the hub's branch
/// `farm/review/TASK/NONCE`, fetched into its clone); its new change waits
/// for review in turn.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm reject parse-if -m 'no globals: pass the table in'
  farm reject parse-if -F review.md
  farm tasks                             changes waiting show `review`")]
pub struct Args {
    /// The task whose change waits for review.
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::review_ids))]
    task: TaskId,

    /// Why, for the next session (`-`: read it from stdin).
    #[arg(
        short = 'm',
        long = "message",
        value_name = "WHY",
        required_unless_present = "file"
    )]
    message: Option<String>,

    /// Read why from FILE (`-`: stdin).
    #[arg(short = 'F', long, value_name = "FILE", conflicts_with = "message")]
    file: Option<PathBuf>,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let why = read_text(args)?;
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let id = &args.task;
    let who = super::fleet::asker();
    let mut branch = HubBranch::new(&hub, format!("`{id}`"));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let at = crate::claims::record::timestamp(SystemTime::now());
        let note = |attempt: u32, change: &str| {
            format!(
                "\n## Attempt {attempt} — rejected in review by {who}\n\n- at: {at}\n\
                 {}{change}`\n\n~~~~text\n{}\n~~~~\n",
                crate::run::rejected::REVIEWED,
                why.trim_end().replace("~~~~", "~ ~ ~ ~")
            )
        };
        match review::reject(dir, id, note).map_err(|e| Error::failure(e.to_string()))? {
            Ok(edited) => Ok(Edit::Commit {
                message: if edited.failed {
                    format!(
                        "farm: reject `{id}`; it failed after {} attempts",
                        edited.task.attempts
                    )
                } else {
                    format!("farm: reject `{id}`")
                },
                value: edited,
            }),
            Err(e) => Err(super::approve::not_reviewing(dir, id, &e, "rejected")),
        }
    })?;
    match tx {
        Tx::Pushed(edited) => {
            let t = &edited.task;
            if edited.failed {
                ctx.out.say(&format!(
                    "rejected `{id}` on `{}`: that was attempt {} of {}; it went to tasks/failed/ \
                     (farm task retry {id} puts it back)",
                    hub.branch, t.attempts, t.max_attempts
                ))?;
            } else {
                ctx.out.say(&format!(
                    "rejected `{id}` on `{}` (attempt {} of {}): it is ready again; its next \
                     session's prompt holds why and where the rejected change is",
                    hub.branch, t.attempts, t.max_attempts
                ))?;
            }
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not reject `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

/// Why: `-m`, `-F FILE`, or stdin; refused when empty, not UTF-8, or over
/// [`MAX_TEXT`], before the hub is touched.
fn read_text(args: &Args) -> Result<String, Error> {
    let from_stdin = || {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::failure(format!("cannot read why from stdin: {e}")))?;
        Ok::<_, Error>(bytes)
    };
    let bytes = match (&args.message, &args.file) {
        (Some(t), _) if t == "-" => from_stdin()?,
        (Some(t), _) => t.clone().into_bytes(),
        (None, Some(f)) if f.as_os_str() == "-" => from_stdin()?,
        (None, Some(f)) => std::fs::read(f)
            .map_err(|e| Error::usage(format!("cannot read why from `{}`: {e}", f.display())))?,
        (None, None) => return Err(Error::usage("reject why? give -m WHY, or -F FILE")),
    };
    if bytes.len() > MAX_TEXT {
        return Err(Error::usage(format!(
            "the note is {} bytes; a note is at most {MAX_TEXT} (16 KiB)",
            bytes.len()
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| Error::usage("the note is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(
            Error::usage("the note is empty: say why, for the next session")
                .hint(format!("farm reject {} -m WHY", args.task)),
        );
    }
    Ok(text)
}
