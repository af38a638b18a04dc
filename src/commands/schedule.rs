//! `farm schedule add | rm | next`: manage one schedule on the hub's branch
//! (`schedules/<id>.toml`, one commit, pushed).

use std::time::Duration;

use jiff::Timestamp;

use crate::age::parse_duration;
use crate::board::edit::{self, Branch, Edit, Tx};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::names::TaskId;
use crate::schedule::file::{self, Catchup, Overlap, Raw, Schedule};

/// Manage schedules: recurring and one-shot work that becomes tasks.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm schedule add deps --cron '0 6 * * 1-5' --tz Europe/Berlin -m 'Bump the dependencies'
  farm schedule add once --at 2026-12-02T06:00:00+01:00 -m 'Tag the release'
  farm schedule next deps          when it fires next
  farm schedules                   every schedule, and when each fires
  farm fire                        make the tasks of what is due, without a run
  farm schedule rm deps")]
pub struct Args {
    #[command(subcommand)]
    command: ScheduleCommand,

    /// The branch whose schedules to manage (default: the hub's HEAD branch).
    #[arg(long, global = true)]
    branch: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum ScheduleCommand {
    Add(AddArgs),
    Rm(RmArgs),
    Next(NextArgs),
}

/// Add a schedule: writes schedules/ID.toml on the hub's branch.
///
/// Each occurrence becomes the task ID-YYYYMMDDTHHMMZ (its UTC minute),
/// made by `farm run` (at start-up and every minute) or `farm fire`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm schedule add deps --cron '0 6 * * 1-5' --tz Europe/Berlin -m 'Bump the dependencies'
  farm schedule add docs --cron '0 9 * * mon' -m 'Read the docs; fix what lies' --catchup none
  farm schedule add once --at 2026-12-02T06:00:00+01:00 -m 'Tag the release'

Cron: 5 fields (minute hour day-of-month month day-of-week), names for days
and months, 7 = Sunday, L and # too. Day of month and day of week as in
Vixie cron: either matches when both are restricted; both must when one
starts with `*`.")]
struct AddArgs {
    /// The schedule id (letters, digits, `.`, `_`, `-`; at most 85).
    #[arg(value_parser = TaskId::parse)]
    id: TaskId,

    /// When, recurring: a 5-field cron expression.
    #[arg(
        long,
        value_name = "EXPR",
        conflicts_with = "at",
        required_unless_present = "at"
    )]
    cron: Option<String>,

    /// When, once: an RFC 3339 time with its offset.
    #[arg(long, value_name = "TIME")]
    at: Option<String>,

    /// The time zone the cron expression reads (IANA name).
    #[arg(long = "tz", value_name = "ZONE", default_value = "UTC")]
    timezone: String,

    /// Each task's description (markdown); its first line is the default title.
    #[arg(short, long, value_name = "TEXT")]
    message: String,

    /// Each task's title (default: the first line of the message).
    #[arg(long)]
    title: Option<String>,

    /// Missed occurrences made up after downtime: none, latest or all.
    #[arg(long, value_enum, default_value = "latest")]
    catchup: CatchupArg,

    /// How far back catch-up reaches.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "24h")]
    catchup_window: Duration,

    /// skip: no new occurrence while the last is still pending; allow: make it anyway.
    #[arg(long, value_enum, default_value = "skip")]
    overlap: OverlapArg,

    /// Tasks each occurrence comes after.
    #[arg(long, value_name = "ID", num_args = 1.., value_parser = TaskId::parse)]
    after: Vec<TaskId>,

    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,

    /// Attempts before an occurrence is given up.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: Option<u32>,

    /// Session timeout for each occurrence.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CatchupArg {
    None,
    Latest,
    All,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum OverlapArg {
    Skip,
    Allow,
}

/// Remove a schedule (its tasks stay on the board).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  farm schedule rm deps")]
struct RmArgs {
    #[arg(value_parser = TaskId::parse)]
    id: TaskId,
}

/// The next times a schedule fires, in its zone and in UTC.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  farm schedule next deps\n  farm schedule next deps -n 10")]
struct NextArgs {
    #[arg(value_parser = TaskId::parse)]
    id: TaskId,

    /// How many.
    #[arg(short, default_value_t = 5)]
    n: usize,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    match &args.command {
        ScheduleCommand::Add(add) => run_add(ctx, &hub, add),
        ScheduleCommand::Rm(rm) => run_rm(ctx, &hub, rm),
        ScheduleCommand::Next(next) => run_next(ctx, &hub, next),
    }
}

fn run_add(ctx: &Ctx, hub: &Hub, args: &AddArgs) -> Result<(), Error> {
    let now = crate::schedule::now().map_err(Error::usage)?;
    let title = args.title.clone().unwrap_or_else(|| {
        args.message
            .lines()
            .find(|l| !l.trim().is_empty())
            .map_or_else(
                || args.id.to_string(),
                |l| l.trim().trim_start_matches('#').trim().to_owned(),
            )
    });
    let raw = Raw {
        cron: args.cron.clone(),
        at: args.at.clone(),
        timezone: Some(args.timezone.clone()),
        title,
        description: args.message.clone(),
        after: args.after.iter().map(ToString::to_string).collect(),
        priority: args.priority,
        max_attempts: args.max_attempts,
        timeout: args
            .timeout
            .map(|d| humantime::format_duration(d).to_string()),
        catchup: Some(match args.catchup {
            CatchupArg::None => Catchup::None,
            CatchupArg::Latest => Catchup::Latest,
            CatchupArg::All => Catchup::All,
        }),
        catchup_window: Some(humantime::format_duration(args.catchup_window).to_string()),
        overlap: Some(match args.overlap {
            OverlapArg::Skip => Overlap::Skip,
            OverlapArg::Allow => Overlap::Allow,
        }),
        created: Some(now.to_string()),
    };
    let invalid = |e: String| Error::usage(format!("invalid schedule `{}`: {e}", args.id));
    let text = toml::to_string(&raw).map_err(|e| invalid(e.to_string()))?;
    let text = format!(
        "# farm schedule: {}\n{text}",
        "see docs/schedules.md in farm's repository"
    );
    // Whatever we write must read back as this schedule.
    let schedule = Schedule::parse(args.id.as_str(), &text).map_err(invalid)?;
    let Some(next) = schedule.when.next_after(now) else {
        return Err(Error::usage(format!(
            "schedule `{}` never fires: {} is in the past",
            args.id,
            args.at.as_deref().unwrap_or("its time")
        ))
        .hint("give a time to come, or --cron for recurring work"));
    };
    let path = file::path(&args.id);
    let mut branch = HubBranch::new(hub, format!("schedule `{}`", args.id));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let target = dir.join(&path);
        if target.exists() {
            return Err(Error::new(
                Code::Usage,
                format!("schedule `{}` already exists ({path})", args.id),
            )
            .hint(format!("remove it first: farm schedule rm {}", args.id)));
        }
        let io = |e: std::io::Error| Error::failure(format!("cannot write `{path}`: {e}"));
        std::fs::create_dir_all(dir.join(file::DIR)).map_err(io)?;
        std::fs::write(&target, &text).map_err(io)?;
        Ok(Edit::Commit {
            message: format!("farm: add schedule `{}`", args.id),
            value: (),
        })
    })?;
    match tx {
        Tx::Pushed(()) => {
            ctx.out.say(&format!(
                "added schedule `{}`: next {}",
                args.id,
                shown(&schedule, next)
            ))?;
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(()) => Err(busy(hub, &args.id)),
    }
}

fn run_rm(ctx: &Ctx, hub: &Hub, args: &RmArgs) -> Result<(), Error> {
    let path = file::path(&args.id);
    let mut branch = HubBranch::new(hub, format!("schedule `{}`", args.id));
    let tx = edit::transact(
        &mut branch,
        branch::ROUNDS,
        |dir| match std::fs::remove_file(dir.join(&path)) {
            Ok(()) => Ok(Edit::Commit {
                message: format!("farm: remove schedule `{}`", args.id),
                value: (),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Edit::Gone),
            Err(e) => Err(Error::failure(format!("cannot remove `{path}`: {e}"))),
        },
    )?;
    match tx {
        Tx::Pushed(()) => {
            ctx.out.say(&format!("removed schedule `{}`", args.id))?;
            Ok(())
        }
        Tx::Gone => Err(Error::usage(format!(
            "no schedule `{}` ({path} is not on `{}`)",
            args.id, hub.branch
        ))
        .hint("list them: farm schedules")),
        Tx::Busy | Tx::Lost(()) => Err(busy(hub, &args.id)),
    }
}

fn run_next(ctx: &Ctx, hub: &Hub, args: &NextArgs) -> Result<(), Error> {
    let now = crate::schedule::now().map_err(Error::usage)?;
    let schedule = read(hub, &args.id)?;
    let mut t = now;
    let mut lines = Vec::new();
    for _ in 0..args.n {
        let Some(next) = schedule.when.next_after(t) else {
            break;
        };
        lines.push(shown(&schedule, next));
        t = next;
    }
    if lines.is_empty() {
        ctx.out
            .note(&format!("schedule `{}` fires no more", args.id));
    }
    ctx.out
        .data(&lines.iter().map(|l| format!("{l}\n")).collect::<String>())?;
    Ok(())
}

/// Schedule `id` as it is on the hub's branch.
fn read(hub: &Hub, id: &TaskId) -> Result<Schedule, Error> {
    let mut branch = HubBranch::new(hub, format!("schedule `{id}`"));
    let (dir, _keep) = branch.checkout(0)?;
    let path = file::path(id);
    let text = std::fs::read_to_string(dir.join(&path)).map_err(|_| {
        Error::usage(format!(
            "no schedule `{id}` ({path} is not on `{}`)",
            hub.branch
        ))
        .hint("list them: farm schedules")
    })?;
    Schedule::parse(id.as_str(), &text)
        .map_err(|e| Error::failure(format!("{path} is not a valid schedule: {e}")))
}

/// `2026-12-02 07:00 CET (2026-12-02T06:00Z)`: in the schedule's zone, and UTC.
pub fn shown(schedule: &Schedule, at: Timestamp) -> String {
    let local = at.to_zoned(schedule.when.zone().clone());
    format!(
        "{} ({})",
        local.strftime("%Y-%m-%d %H:%M %Z"),
        at.strftime("%Y-%m-%dT%H:%MZ")
    )
}

fn busy(hub: &Hub, id: &TaskId) -> Error {
    Error::failure(format!(
        "could not change schedule `{id}`: the hub's `{}` kept moving",
        hub.branch
    ))
}
