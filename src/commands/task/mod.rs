//! `farm task add|show|edit|note|retry|rm`: put tasks on the board, look at
//! one, change one or leave it a note, put a failed one back, take one away
//! — each edit committed and pushed to the hub. Adding many from a file is
//! in `many.rs`, editing and notes in `change.rs`.

mod change;
mod many;

use std::time::{Duration, SystemTime};

use crate::age::parse_duration;
use crate::board::edit::{self, AddError, Edit, Tx};
use crate::board::paths::Place;
use crate::board::{self, Task};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::names::TaskId;

/// Manage tasks on the board.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task add lexer -m \"Write the lexer for the C subset in src/lex.c\"
  farm task add --from backlog.toml          many tasks in one commit
  farm task show lexer
  farm task edit lexer --priority 5 --after parser
  farm task note lexer -m \"The grammar is in docs/grammar.md\"
  farm task retry lexer                       put a failed task back
  farm task rm lexer")]
pub struct Args {
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TaskCommand {
    Add(AddArgs),
    Show(ShowArgs),
    Edit(change::EditArgs),
    Note(change::NoteArgs),
    Retry(OneArgs),
    Rm(RmArgs),
}

/// Show one task: its state, front matter, description and attempt notes.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task show parse-if
  farm task show parse-if --json | jq .attempts")]
struct ShowArgs {
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    id: TaskId,

    /// Print JSON: {id, place, status, detail, file, title, labels, priority, after, attempts, max_attempts, review, change, body}.
    #[arg(long)]
    json: bool,

    /// The branch whose board to read (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// Put a failed task back on the board: attempts reset, its notes kept.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task retry parse-if")]
struct OneArgs {
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    id: TaskId,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// Remove a task from the board (pending, done or failed).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task rm parse-if
  farm task rm lexer --force     # even though other tasks come after it")]
struct RmArgs {
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    id: TaskId,

    /// Remove it even though pending tasks come after it (they become stuck).
    #[arg(long)]
    force: bool,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// Add a task: writes tasks/ID.md on the hub's branch (one commit, pushed).
/// With --from, every task of a file, in one commit.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task add lexer -m \"Write the lexer for the C subset in src/lex.c\"
  farm task add parse-if --after lexer --priority 2 -m \"Parse if/else\"
  farm task add doc-cli --label docs -m \"Document every flag\"
  farm task add schema --review -m \"Migrate the schema\"   # lands after farm approve
  git log -1 --format=%B | farm task add follow-up -m -
  farm task add --from backlog.toml     # [[task]] tables: id, title, description, after, …

The --from file is TOML, one [[task]] table per task:
  [[task]]
  id = \"lexer\"
  description = \"Write the lexer for the C subset in src/lex.c\"
  [[task]]
  id = \"parse-if\"
  title = \"Parse if/else\"
  after = [\"lexer\"]
  priority = 2
Keys: id (required), title, description, after, labels, priority, max_attempts, timeout, review.
Every task is checked first: one bad task adds none.")]
struct AddArgs {
    /// The task id (a name: letters, digits, `.`, `_`, `-`).
    #[arg(value_parser = TaskId::parse, required_unless_present = "from")]
    id: Option<TaskId>,

    /// The description (markdown; `-` reads it from stdin); its first line
    /// is the default title.
    #[arg(short, long, value_name = "TEXT")]
    message: Option<String>,

    /// The title (default: the first line of the message, else the id).
    #[arg(long)]
    title: Option<String>,

    /// Tasks that must be done first.
    #[arg(
        long,
        value_name = "ID",
        num_args = 1..,
        value_parser = TaskId::parse,
        add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids)
    )]
    after: Vec<TaskId>,

    /// What kind of work it is (`test`, `docs`, …): roles pick tasks by label.
    #[arg(long = "label", value_name = "LABEL", value_parser = crate::names::parse_label)]
    labels: Vec<String>,

    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,

    /// Attempts before the task is given up (moved to tasks/failed/).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: u32,

    /// Session timeout for this task (overrides farm run --timeout).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,

    /// Its change lands only once a person approves it (`farm approve`):
    /// finished, it waits for review on a branch `farm/review/ID/NONCE`.
    #[arg(long)]
    review: bool,

    /// Add every task of this TOML file (`-`: stdin) in one commit; the
    /// format is below.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["id", "message", "title", "after", "labels", "timeout", "review"]
    )]
    from: Option<std::path::PathBuf>,

    /// The branch whose board to add to (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    match &args.command {
        TaskCommand::Add(add) => run_add(ctx, add),
        TaskCommand::Show(show) => run_show(ctx, show),
        TaskCommand::Edit(e) => change::run_edit(ctx, e),
        TaskCommand::Note(n) => change::run_note(ctx, n),
        TaskCommand::Retry(one) => run_retry(ctx, one),
        TaskCommand::Rm(rm) => run_rm(ctx, rm),
    }
}

/// `pending`, `done` or `failed`.
fn place_name(place: Place) -> &'static str {
    match place {
        Place::Pending => "pending",
        Place::Done => "done",
        Place::Failed => "failed",
    }
}

/// Task `id` on the board in `dir`: where its file is, and the task.
fn find(dir: &std::path::Path, id: &TaskId) -> Result<(Place, Task), Error> {
    let Some(place) = board::paths::find(dir, id) else {
        return Err(
            Error::usage(format!("no task `{id}` on the board")).hint("list them: farm tasks")
        );
    };
    let file = place.file(id);
    let text = std::fs::read_to_string(dir.join(&file))
        .map_err(|e| Error::failure(format!("cannot read {file}: {e}")))?;
    let task = board::parse(id.clone(), &text)
        .map_err(|e| Error::failure(format!("{file} is not a valid task: {e}")))?;
    Ok((place, task))
}

fn run_show(ctx: &Ctx, args: &ShowArgs) -> Result<(), Error> {
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::failure(format!("cannot make a temp dir: {e}")).caused_by(e))?;
    let dir = hub.extract_board(tmp.path())?;
    let (place, task) = find(&dir, &args.id)?;
    let mut snapshot = board::load(&dir)
        .map_err(|e| Error::failure(format!("cannot read the board: {e}")).caused_by(e))?;
    snapshot.claimed = crate::claims::holders(&ctx.store()?.list()?);
    let status = board::statuses(&snapshot)
        .into_iter()
        .find(|(id, _)| id == &args.id)
        .map(|(_, s)| s);
    let (state, detail) = match &status {
        Some(s) => crate::commands::tasks::describe(s),
        None => (place_name(place), String::new()),
    };
    let file = place.file(&args.id);
    if args.json {
        let doc = serde_json::json!({
            "id": task.id.as_str(),
            "place": place_name(place),
            "status": state,
            "detail": detail,
            "file": file,
            "title": task.title,
            "labels": task.labels,
            "priority": task.priority,
            "after": task.after.iter().map(TaskId::as_str).collect::<Vec<_>>(),
            "attempts": task.attempts,
            "max_attempts": task.max_attempts,
            "review": task.review,
            "change": task.change,
            "body": task.body,
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    let mut text = format!("`{}`: {}\n", task.id, task.title);
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    };
    text.push_str(&format!(
        "state:    {state}{detail}; {} of {} attempts used\n",
        task.attempts, task.max_attempts
    ));
    if !task.labels.is_empty() {
        text.push_str(&format!("labels:   {}\n", task.labels.join(", ")));
    }
    if !task.after.is_empty() {
        let after: Vec<&str> = task.after.iter().map(TaskId::as_str).collect();
        text.push_str(&format!("after:    {}\n", after.join(", ")));
    }
    if task.priority != 0 {
        text.push_str(&format!("priority: {}\n", task.priority));
    }
    match (&task.change, task.approved) {
        (Some(change), Some(_)) if place != Place::Pending => {
            text.push_str(&format!("review:   approved; landed from `{change}`\n"));
        }
        (Some(change), None) => text.push_str(&format!(
            "review:   its change waits on `{change}`: farm approve {id} / farm reject {id} -m WHY\n",
            id = task.id
        )),
        (Some(change), Some(_)) => text.push_str(&format!(
            "review:   approved; its change on `{change}` lands next\n"
        )),
        (None, _) if task.review => {
            text.push_str("review:   its change lands only once approved (farm approve)\n");
        }
        (None, _) => {}
    }
    text.push_str(&format!("file:     {file} on `{}`\n", hub.branch));
    if !task.body.trim().is_empty() {
        text.push('\n');
        text.push_str(task.body.trim_end());
        text.push('\n');
    }
    ctx.out.data(&text)?;
    Ok(())
}

fn run_retry(ctx: &Ctx, args: &OneArgs) -> Result<(), Error> {
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let id = &args.id;
    let mut branch = HubBranch::new(&hub, format!("`{id}`"));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let note = format!(
            "\n## Retried\n\n- put back on the board by `farm task retry`, attempts reset\n- at: {}\n",
            crate::claims::record::timestamp(SystemTime::now())
        );
        match edit::retry(dir, id, &note).map_err(|e| Error::failure(e.to_string()))? {
            Some(task) => Ok(Edit::Commit {
                message: format!("farm: retry `{id}`"),
                value: task,
            }),
            None => Err(match board::paths::find(dir, id) {
                Some(Place::Pending) => {
                    Error::usage(format!("`{id}` is on the board already, not failed"))
                }
                Some(Place::Done) => Error::usage(format!("`{id}` is done, not failed"))
                    .hint("add a new task for more work: farm task add ID -m TEXT"),
                Some(Place::Failed) => Error::failure(format!(
                    "{} is not a valid task: fix it by hand",
                    Place::Failed.file(id)
                )),
                None => Error::usage(format!("no task `{id}` on the board"))
                    .hint("list them: farm tasks"),
            }),
        }
    })?;
    match tx {
        Tx::Pushed(task) => {
            ctx.out.say(&format!(
                "`{id}` is back on the board: {} attempt(s) from now (its notes kept)",
                task.max_attempts
            ))?;
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not retry `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

fn run_rm(ctx: &Ctx, args: &RmArgs) -> Result<(), Error> {
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let id = &args.id;
    // A claimed task is being worked on: its holder would push it back.
    if let Some(held) = ctx
        .store()?
        .list()?
        .into_iter()
        .find(|l| l.name == id.as_str())
    {
        return Err(Error::new(
            Code::Held,
            format!(
                "`{id}` is claimed ({}): an agent is working on it",
                held.who()
            ),
        )
        .hint(format!(
            "wait for it, or stop that run first; then: farm task rm {id}"
        )));
    }
    let mut branch = HubBranch::new(&hub, format!("`{id}`"));
    let tx =
        edit::transact(&mut branch, branch::ROUNDS, |dir| {
            let snapshot = board::load(dir).map_err(|e| Error::failure(e.to_string()))?;
            let after: Vec<String> = snapshot
                .pending
                .iter()
                .filter(|t| t.after.contains(id))
                .map(|t| format!("`{}`", t.id))
                .collect();
            if !after.is_empty() && !args.force {
                return Err(Error::usage(format!(
                    "{} come(s) after `{id}`: without it they would be stuck",
                    after.join(", ")
                ))
                .hint(format!("remove it anyway: farm task rm {id} --force")));
            }
            match edit::remove(dir, id).map_err(|e| Error::failure(e.to_string()))? {
                Some(place) => Ok(Edit::Commit {
                    message: format!("farm: remove `{id}` ({})", place_name(place)),
                    value: place,
                }),
                None => Err(Error::usage(format!("no task `{id}` on the board"))
                    .hint("list them: farm tasks")),
            }
        })?;
    match tx {
        Tx::Pushed(place) => {
            ctx.out
                .say(&format!("removed `{id}` (it was {})", place_name(place)))?;
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not remove `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

/// `TEXT` as given, or stdin's whole text when it is `-`.
fn text_or_stdin(text: &str, what: &str) -> Result<String, Error> {
    if text != "-" {
        return Ok(text.to_owned());
    }
    std::io::read_to_string(std::io::stdin())
        .map_err(|e| Error::usage(format!("cannot read {what} from stdin: {e}")).caused_by(e))
}

/// The title a task gets: `title`, else the first line of its description
/// (a heading's `#` taken off), else its id.
fn title_of(id: &TaskId, title: Option<&str>, body: &str) -> String {
    title
        .map(str::to_owned)
        .or_else(|| {
            body.lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().trim_start_matches('#').trim().to_owned())
        })
        .unwrap_or_else(|| id.to_string())
}

/// What a new task is made of, as given on the command line or in a file.
struct NewTask<'a> {
    id: TaskId,
    title: Option<&'a str>,
    body: &'a str,
    after: Vec<TaskId>,
    labels: &'a [String],
    priority: i64,
    max_attempts: u32,
    timeout: Option<Duration>,
    review: bool,
}

/// A new task, checked: a reserved id, or one that would not read back as
/// the same task, is bad usage (`what` names it in the message).
fn new_task(given: NewTask<'_>, what: &str) -> Result<Task, Error> {
    let NewTask {
        id,
        title,
        body,
        after,
        labels,
        priority,
        max_attempts,
        timeout,
        review,
    } = given;
    if id.is_reserved() {
        return Err(Error::usage(format!(
            "{what}task id `{id}` is reserved: {} is the board's readme, which the board does not read as a task",
            board::paths::pending(&id)
        ))
        .hint("pick another id (ids are case-sensitive: `readme` is free)"));
    }
    let title = title_of(&id, title, body);
    let mut task = board::new_task(id, &title, body, after, priority, SystemTime::now());
    task.max_attempts = max_attempts;
    task.timeout = timeout;
    task.review = review;
    for label in labels {
        if !task.labels.contains(label) {
            task.labels.push(label.clone());
        }
    }
    // Whatever we write must read back as the same task.
    board::parse(task.id.clone(), &task.render()).map_err(|e| {
        Error::usage(format!("{what}invalid task `{}`: {e}", task.id))
            .hint("see the format of a task: farm task add --help")
    })?;
    Ok(task)
}

/// An id taken already, as an error of bad usage with what to do.
fn add_error(e: AddError) -> Error {
    match e {
        AddError::Exists { ref id, place } => {
            let hint = match place {
                Place::Pending => {
                    format!("pick another id, or change that one: farm task edit {id}")
                }
                _ => format!("pick another id, or edit {}", place.file(id)),
            };
            Error::new(Code::Usage, e.to_string()).hint(hint)
        }
        AddError::Io { .. } => Error::failure(e.to_string()).caused_by(e),
    }
}

/// Warn of the ids in `after` of `tasks` that no task on the board in
/// `dir` (nor among `tasks`) has.
fn warn_missing(ctx: &Ctx, dir: &std::path::Path, tasks: &[Task]) {
    for task in tasks {
        let missing: Vec<_> = edit::missing(dir, &task.after)
            .into_iter()
            .filter(|d| !tasks.iter().any(|t| &t.id == *d))
            .map(|d| format!("`{d}`"))
            .collect();
        if !missing.is_empty() {
            ctx.out.note(&format!(
                "warning: `{}` comes after {}, which {} not exist yet",
                task.id,
                missing.join(", "),
                if missing.len() == 1 { "does" } else { "do" }
            ));
        }
    }
}

fn run_add(ctx: &Ctx, args: &AddArgs) -> Result<(), Error> {
    if let Some(file) = &args.from {
        return many::run(ctx, file, args.branch.as_deref());
    }
    let id = args.id.clone().expect("clap requires an id without --from");
    let body = match &args.message {
        Some(m) => text_or_stdin(m, "the description")?,
        None => String::new(),
    };
    let task = new_task(
        NewTask {
            id,
            title: args.title.as_deref(),
            body: &body,
            after: args.after.clone(),
            labels: &args.labels,
            priority: args.priority,
            max_attempts: args.max_attempts,
            timeout: args.timeout,
            review: args.review,
        },
        "",
    )?;
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let mut branch = HubBranch::new(&hub, format!("`{}`", task.id));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        edit::add(dir, &task).map_err(add_error)?;
        warn_missing(ctx, dir, std::slice::from_ref(&task));
        Ok(Edit::Commit {
            message: format!("farm: add task `{}`", task.id),
            value: (),
        })
    })?;
    match tx {
        Tx::Pushed(()) => {
            ctx.out
                .say(&format!("added `{}`: {}", task.id, task.title))?;
            Ok(())
        }
        // (An add is never `Gone` nor `Lost`: it refuses, or pushes plainly.)
        Tx::Busy | Tx::Gone | Tx::Lost(()) => Err(Error::failure(format!(
            "could not add `{}`: the hub's `{}` kept moving",
            task.id, hub.branch
        ))),
    }
}
