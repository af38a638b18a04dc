//! `farm task add`: put a task on the board — committed and pushed to the hub.

use std::time::{Duration, SystemTime};

use crate::age::parse_duration;
use crate::board;
use crate::board::edit::{self, AddError, Edit, Tx};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::names::TaskId;

/// Manage tasks on the board.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TaskCommand {
    Add(AddArgs),
}

/// Add a task: writes tasks/ID.md on the hub's branch (one commit, pushed).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm task add lexer -m \"Write the lexer for the C subset in src/lex.c\"
  farm task add parse-if --after lexer --priority 2 -m \"Parse if/else\"
  farm task add doc-cli --label docs -m \"Document every flag\"")]
struct AddArgs {
    /// The task id (a name: letters, digits, `.`, `_`, `-`).
    #[arg(value_parser = TaskId::parse)]
    id: TaskId,

    /// The description (markdown); its first line is the default title.
    #[arg(short, long, value_name = "TEXT")]
    message: Option<String>,

    /// The title (default: the first line of the message, else the id).
    #[arg(long)]
    title: Option<String>,

    /// Tasks that must be done first.
    #[arg(long, value_name = "ID", num_args = 1.., value_parser = TaskId::parse)]
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

    /// The branch whose board to add to (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    match &args.command {
        TaskCommand::Add(add) => run_add(ctx, add),
    }
}

fn run_add(ctx: &Ctx, args: &AddArgs) -> Result<(), Error> {
    if args.id.is_reserved() {
        return Err(Error::usage(format!(
            "task id `{}` is reserved: {} is the board's readme, which the board does not read as a task",
            args.id,
            board::paths::pending(&args.id)
        ))
        .hint("pick another id (ids are case-sensitive: `readme` is free)"));
    }
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let body = args.message.clone().unwrap_or_default();
    let title = args
        .title
        .clone()
        .or_else(|| {
            body.lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().trim_start_matches('#').trim().to_owned())
        })
        .unwrap_or_else(|| args.id.to_string());
    let mut task = board::new_task(
        args.id.clone(),
        &title,
        &body,
        args.after.clone(),
        args.priority,
        SystemTime::now(),
    );
    task.max_attempts = args.max_attempts;
    task.timeout = args.timeout;
    for label in &args.labels {
        if !task.labels.contains(label) {
            task.labels.push(label.clone());
        }
    }
    // Whatever we write must read back as the same task.
    board::parse(task.id.clone(), &task.render())
        .map_err(|e| Error::usage(format!("invalid task `{}`: {e}", task.id)).caused_by(e))?;

    let mut branch = HubBranch::new(&hub, format!("`{}`", task.id));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        edit::add(dir, &task).map_err(|e| match e {
            AddError::Exists { ref place, .. } => {
                let hint = format!("pick another id, or edit {}", place.file(&task.id));
                Error::new(Code::Usage, e.to_string()).hint(hint)
            }
            AddError::Io { .. } => Error::failure(e.to_string()).caused_by(e),
        })?;
        let missing: Vec<_> = edit::missing(dir, &task.after)
            .into_iter()
            .map(|d| format!("`{d}`"))
            .collect();
        if !missing.is_empty() {
            ctx.out.note(&format!(
                "warning: `{}` comes after {}, which do(es) not exist yet",
                task.id,
                missing.join(", ")
            ));
        }
        Ok(Edit::Commit {
            message: format!("farm: add task `{}`", task.id),
            value: (),
        })
    })?;
    match tx {
        Tx::Pushed(()) => {
            ctx.out.say(&format!("added `{}`: {title}", task.id))?;
            Ok(())
        }
        // (An add is never `Gone` nor `Lost`: it refuses, or pushes plainly.)
        Tx::Busy | Tx::Gone | Tx::Lost(()) => Err(Error::failure(format!(
            "could not add `{}`: the hub's `{}` kept moving",
            task.id, hub.branch
        ))),
    }
}
