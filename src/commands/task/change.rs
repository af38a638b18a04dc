//! `farm task edit` and `farm task note`: change what a person may change of
//! a waiting task, or leave it a note its next session reads — each one
//! commit on the hub's branch.

use std::time::SystemTime;

use super::{find, place_name, text_or_stdin};
use crate::board::edit::{self, Edit, Tx};
use crate::board::paths::Place;
use crate::board::{self, Task};
use crate::claims::Listed;
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::names::TaskId;

/// Change a waiting task: its title, description, priority, `after` or
/// max attempts. Refused while an agent holds it, unless --force.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task edit parse-if --priority 5
  farm task edit parse-if --after lexer parser
  farm task edit parse-if --no-after --max-attempts 5
  farm task edit parse-if -m - < parse-if.md     # a new description from a file

The notes of earlier attempts stay under the new description.")]
pub(super) struct EditArgs {
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    id: TaskId,

    /// The new title (one line).
    #[arg(long)]
    title: Option<String>,

    /// The new description (markdown; `-` reads it from stdin). The notes of
    /// earlier attempts are kept after it.
    #[arg(short, long, value_name = "TEXT")]
    message: Option<String>,

    /// The new priority (higher runs first).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,

    /// The tasks that must be done first, instead of those it has.
    #[arg(
        long,
        value_name = "ID",
        num_args = 1..,
        value_parser = TaskId::parse,
        add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids)
    )]
    after: Option<Vec<TaskId>>,

    /// Nothing needs to be done first any more.
    #[arg(long, conflicts_with = "after")]
    no_after: bool,

    /// Attempts before the task is given up (more than it has used).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: Option<u32>,

    /// Whether its change lands only once approved (`farm approve`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    review: Option<bool>,

    /// Edit it even while an agent holds it: the session running keeps the
    /// text it was given; the edit reaches the next one.
    #[arg(long)]
    force: bool,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// Leave a task (waiting or failed) a note: appended to its file, where
/// the next session reads it in its prompt.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task note parse-if -m \"The grammar is in docs/grammar.md; keep the AST types\"
  farm task note parse-if -m - < hints.md")]
pub(super) struct NoteArgs {
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    id: TaskId,

    /// The note (markdown; `-` reads it from stdin).
    #[arg(short, long, value_name = "TEXT", required = true)]
    message: String,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// The claim on `id`, if someone holds it.
fn claimed(ctx: &Ctx, id: &TaskId) -> Result<Option<Listed>, Error> {
    Ok(ctx
        .store()?
        .list()?
        .into_iter()
        .find(|l| l.name == id.as_str()))
}

/// A task that cannot be edited where it is (`Some`), as the error to say.
fn not_waiting(id: &TaskId, place: Option<Place>, what: &str) -> Error {
    match place {
        Some(Place::Done) => {
            Error::usage(format!("`{id}` is done: there is nothing left to {what}"))
                .hint("add a new task for more work: farm task add ID -m TEXT")
        }
        Some(Place::Failed) => Error::usage(format!("`{id}` has failed: {what} a waiting task"))
            .hint(format!(
                "put it back on the board first: farm task retry {id}"
            )),
        Some(Place::Pending) => Error::failure(format!(
            "{} is not a valid task: fix it by hand",
            Place::Pending.file(id)
        )),
        None => Error::usage(format!("no task `{id}` on the board")).hint("list them: farm tasks"),
    }
}

pub(super) fn run_edit(ctx: &Ctx, args: &EditArgs) -> Result<(), Error> {
    let id = &args.id;
    let nothing = args.title.is_none()
        && args.message.is_none()
        && args.priority.is_none()
        && args.after.is_none()
        && !args.no_after
        && args.max_attempts.is_none()
        && args.review.is_none();
    if nothing {
        return Err(Error::usage(format!("nothing to change of `{id}`")).hint(format!(
            "say what: farm task edit {id} --title TEXT | -m TEXT | --priority N | --after ID... | --no-after | --max-attempts N | --review BOOL"
        )));
    }
    if let Some(title) = &args.title {
        board::check_title(title).map_err(|e| {
            Error::usage(format!("invalid --title for `{id}`: {e}"))
                .hint("give one line of text: --title \"Parse if/else\"")
        })?;
    }
    let description = match &args.message {
        Some(m) => Some(text_or_stdin(m, "the description")?),
        None => None,
    };
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    if let Some(held) = claimed(ctx, id)? {
        if !args.force {
            return Err(Error::new(
                Code::Held,
                format!(
                    "`{id}` is claimed by {}: its session works from the text it was given and would not see the edit",
                    held.who()
                ),
            )
            .hint(format!(
                "edit it once it is released (farm locks shows it), or now for the sessions after this one: farm task edit {id} ... --force"
            )));
        }
        ctx.out.note(&format!(
            "`{id}` is claimed by {}: the session running keeps the old text; the next one gets the edit",
            held.who()
        ));
    }
    let change = |t: &mut Task| {
        if let Some(title) = &args.title {
            t.title.clone_from(title);
        }
        if let Some(text) = &description {
            let (_, notes) = crate::run::prompt::split_notes(&t.body);
            let mut body = text.trim_end().to_owned();
            body.push('\n');
            if !notes.is_empty() {
                body.push('\n');
                body.push_str(notes);
            }
            t.body = body;
        }
        if let Some(p) = args.priority {
            t.priority = p;
        }
        if let Some(after) = &args.after {
            t.after.clone_from(after);
        }
        if args.no_after {
            t.after.clear();
        }
        if let Some(n) = args.max_attempts {
            t.max_attempts = n;
        }
        if let Some(review) = args.review {
            t.review = review;
        }
    };
    let mut branch = HubBranch::new(&hub, format!("`{id}`"));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let (place, before) = match find(dir, id) {
            Ok(found) => found,
            Err(e) if e.code == Code::Usage => return Err(e),
            Err(_) => return Err(not_waiting(id, Some(Place::Pending), "edit")),
        };
        if place != Place::Pending {
            return Err(not_waiting(id, Some(place), "edit"));
        }
        // Checked on a copy first: a bad edit writes nothing.
        let mut after = before.clone();
        change(&mut after);
        board::parse(id.clone(), &after.render()).map_err(|e| {
            Error::usage(format!("invalid edit of `{id}`: {e}")).hint(format!(
                "change the flags and run it again (farm task show {id} shows the task as it is)"
            ))
        })?;
        if after.max_attempts <= before.attempts && args.max_attempts.is_some() {
            return Err(Error::usage(format!(
                "`{id}` has used {} attempt(s): --max-attempts {} would leave it none",
                before.attempts, after.max_attempts
            ))
            .hint(format!(
                "give it more than {}: farm task edit {id} --max-attempts {}",
                before.attempts,
                before.attempts + 1
            )));
        }
        edit::change(dir, id, change).map_err(|e| Error::failure(e.to_string()))?;
        super::warn_missing(ctx, dir, std::slice::from_ref(&after));
        Ok(Edit::Commit {
            message: format!("farm: edit `{id}`"),
            value: after,
        })
    })?;
    match tx {
        Tx::Pushed(task) => {
            ctx.out.say(&format!("edited `{id}`: {}", task.title))?;
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not edit `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

pub(super) fn run_note(ctx: &Ctx, args: &NoteArgs) -> Result<(), Error> {
    let id = &args.id;
    let text = text_or_stdin(&args.message, "the note")?;
    if text.trim().is_empty() {
        return Err(
            Error::usage(format!("the note for `{id}` is empty")).hint(format!(
                "say something: farm task note {id} -m \"Look at src/lex.c first\""
            )),
        );
    }
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let note = format!(
        "\n## Note from {} ({})\n\n{}\n",
        crate::commands::default_agent(),
        crate::claims::record::timestamp(SystemTime::now()),
        text.trim_end()
    );
    let mut branch = HubBranch::new(&hub, format!("a note on `{id}`"));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        match edit::note(dir, id, &note).map_err(|e| Error::failure(e.to_string()))? {
            Some(place) => Ok(Edit::Commit {
                message: format!("farm: a note on `{id}`"),
                value: place,
            }),
            None => Err(not_waiting(
                id,
                board::paths::find(dir, id),
                "leave a note on",
            )),
        }
    })?;
    match tx {
        Tx::Pushed(place) => {
            ctx.out.say(&format!(
                "noted on `{id}` ({}): its next session reads it",
                place_name(place)
            ))?;
            if let Some(held) = claimed(ctx, id)? {
                ctx.out.note(&format!(
                    "`{id}` is claimed by {}: the session running now does not see the note",
                    held.who()
                ));
            }
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not note on `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}
