//! `farm task add`: put a task on the board — committed and pushed to the hub.

use std::time::{Duration, SystemTime};

use crate::age::parse_duration;
use crate::board;
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::command::{Pushed, Repo};
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
  farm task add parse-if --after lexer --priority 2 -m \"Parse if/else\"")]
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
            "task id `{}` is reserved: tasks/{}.md is the board's readme, which the board does not read as a task",
            args.id, args.id
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
    let text = task.render();
    // Whatever we wrote must read back as the same task.
    board::parse(task.id.clone(), &text)
        .map_err(|e| Error::usage(format!("invalid task `{}`: {e}", task.id)).caused_by(e))?;

    let fail = |e: crate::git::command::GitError| Error::failure(e.to_string()).caused_by(e);
    for _ in 0..10 {
        let tmp = tempfile::tempdir()
            .map_err(|e| Error::failure(format!("cannot make a temp dir: {e}")).caused_by(e))?;
        let dir = tmp.path().join("board");
        // A local hub through file:// so that `--depth` is honoured.
        let url = match &hub.local {
            Some(local) => format!(
                "file://{}",
                local
                    .dir
                    .canonicalize()
                    .unwrap_or(local.dir.clone())
                    .display()
            ),
            None => hub.url.clone(),
        };
        Repo::new(tmp.path())
            .run([
                "clone",
                "--quiet",
                "--depth",
                "1",
                "--branch",
                &hub.branch,
                &url,
                dir.to_str().unwrap_or("board"),
            ])
            .map_err(fail)?;
        let repo = Repo::new(&dir);
        for (place, what) in [
            ("tasks", "on the board"),
            ("tasks/done", "done"),
            ("tasks/failed", "failed"),
        ] {
            if dir.join(place).join(format!("{}.md", task.id)).exists() {
                return Err(Error::new(
                    Code::Usage,
                    format!("task `{}` already exists ({what})", task.id),
                )
                .hint(format!("pick another id, or edit {place}/{}.md", task.id)));
            }
        }
        let missing: Vec<_> = task
            .after
            .iter()
            .filter(|d| {
                !["tasks", "tasks/done", "tasks/failed"]
                    .iter()
                    .any(|p| dir.join(p).join(format!("{d}.md")).exists())
            })
            .map(|d| format!("`{d}`"))
            .collect();
        if !missing.is_empty() {
            ctx.out.note(&format!(
                "warning: `{}` comes after {}, which do(es) not exist yet",
                task.id,
                missing.join(", ")
            ));
        }
        std::fs::create_dir_all(dir.join("tasks"))
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
        std::fs::write(dir.join("tasks").join(format!("{}.md", task.id)), &text)
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
        if repo.config_get("user.email").map_err(fail)?.is_none() {
            repo.run(["config", "user.email", "farm@farm.invalid"])
                .map_err(fail)?;
            repo.run(["config", "user.name", "farm"]).map_err(fail)?;
        }
        repo.commit_all(&format!("farm: add task `{}`", task.id))
            .map_err(fail)?;
        let pushed = {
            let _lock = hub.push_lock()?;
            repo.push("origin", &[format!("HEAD:refs/heads/{}", hub.branch)])
                .map_err(fail)?
        };
        if !pushed.only_moved() {
            return Err(Error::failure(format!(
                "the hub refused `{}`: {pushed:?}",
                task.id
            )));
        }
        if pushed == Pushed::Ok {
            ctx.out.say(&format!("added `{}`: {title}", task.id))?;
            return Ok(());
        }
    }
    Err(Error::failure(format!(
        "could not add `{}`: the hub's `{}` kept moving",
        task.id, hub.branch
    )))
}
