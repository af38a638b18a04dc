//! `farm claim`: win tasks, or say who holds them; with `-- COMMAND`, hold
//! the claim while the command runs.

use std::ffi::OsString;
use std::time::{Duration, SystemTime};

use serde_json::json;

use super::{default_agent, held_by, judge_now, parse_agent};
use crate::age::parse_duration;
use crate::claims::Attempt;
use crate::claims::host;
use crate::claims::liveness::State;
use crate::claims::record::{Claim, Holder, timestamp};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::names::TaskId;

/// Claim tasks: exit 0 when won, 3 with "held by …" when someone else holds one.
///
/// A claim made this way has no holder process: it lives until `farm release`
/// or until its heartbeat is older than a reaper's threshold. With
/// `-- COMMAND`, this farm process holds the claim while COMMAND runs (argv
/// as given, no shell), heartbeats it, releases it when COMMAND exits and
/// exits with COMMAND's status; if farm is killed the claim is dead at once.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm claim parse-if                   claim one task
  farm claim lexer parser --agent bob   claim each of several tasks
  farm claim parse-if -- make test      run `make test` while holding the claim
  FARM_AGENT=ci-7 farm claim parse-if --json

COMMAND sees FARM_TASK, FARM_AGENT, FARM_NONCE and FARM_CLAIM (the claim file).")]
pub struct Args {
    /// The task(s) to claim.
    #[arg(
        required = true,
        value_name = "TASK",
        value_parser = TaskId::parse,
        add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids)
    )]
    tasks: Vec<TaskId>,

    /// The agent name recorded in the claim.
    #[arg(long, env = "FARM_AGENT", default_value_t = default_agent(), value_parser = parse_agent)]
    agent: String,

    /// Which attempt at the task this is (recorded in the claim).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    attempt: u32,

    /// How often to refresh the heartbeat while COMMAND runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    heartbeat: Duration,

    /// Print the claims won as JSON (one object per line).
    #[arg(long)]
    json: bool,

    /// The command to run while holding the claim (one TASK only).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    if !args.command.is_empty() && args.tasks.len() != 1 {
        return Err(
            Error::usage("`farm claim -- COMMAND` holds exactly one task")
                .hint("name one TASK before `--`"),
        );
    }
    if args.heartbeat.is_zero() {
        return Err(Error::usage("--heartbeat must be longer than 0s"));
    }
    let store = ctx.store()?;
    crate::claims::protocol::join(&*store)?;
    let holding = !args.command.is_empty();
    let holder = if holding {
        host::own_start().map(|start| Holder {
            pid: std::process::id(),
            start,
        })
    } else {
        None
    };
    let mut lost = Vec::new();
    for task in &args.tasks {
        let claim = Claim::new(
            task.clone(),
            &args.agent,
            holder,
            args.attempt,
            SystemTime::now(),
        );
        match store.try_claim(claim, holding)? {
            Attempt::Won(held) => {
                let c = held.claim();
                if args.json {
                    ctx.out.data(&format!("{}\n", claim_json(c)))?;
                } else if !holding {
                    ctx.out.say(&format!(
                        "claimed `{task}` as {} (nonce {})",
                        c.who(),
                        c.nonce
                    ))?;
                }
                if holding {
                    let code = crate::claims::hold::run(
                        &*store,
                        held,
                        &args.command,
                        args.heartbeat,
                        &ctx.out,
                    )?;
                    // The command's own status, passed through.
                    return match code {
                        0 => Ok(()),
                        status => Err(Error::said(Code::Status(status))),
                    };
                }
            }
            Attempt::Lost(entry) => lost.push((task, entry)),
        }
    }
    let Some((task, entry)) = lost.first() else {
        return Ok(());
    };
    let judge = judge_now(None);
    let now = judge.now;
    if lost.len() == 1 {
        // `farm reap` is the safe way to take a claim back: it judges the
        // holder first (`release --force` takes even a live one).
        let hint = match entry.judge(&judge).state {
            State::Dead => "its holder is dead; take it back with: farm reap".to_owned(),
            State::Stale => format!(
                "its heartbeat is old; if its holder is gone, take it back: farm reap --older-than {}",
                crate::age::Age(now.duration_since(entry.heartbeat).unwrap_or_default())
            ),
            State::Corrupt => {
                format!("inspect the claim file, then free it: farm release {task} --force")
            }
            State::Alive => "wait for its release; a holder gone for good is taken back by farm reap --older-than DURATION once its heartbeat is that old".to_owned(),
        };
        return Err(Error::new(
            Code::Held,
            format!("cannot claim `{task}`: held by {}", held_by(entry, now)),
        )
        .hint(hint));
    }
    for (task, entry) in &lost {
        ctx.out.note(&format!(
            "cannot claim `{task}`: held by {}",
            held_by(entry, now)
        ));
    }
    Err(Error::said(Code::Held))
}

fn claim_json(c: &Claim) -> serde_json::Value {
    json!({
        "task": c.task.as_str(),
        "agent": c.agent,
        "host": c.host,
        "pid": c.holder.map(|h| h.pid),
        "nonce": c.nonce.as_str(),
        "claimed_at": timestamp(c.claimed_at),
        "attempt": c.attempt,
    })
}
