//! `farm release`: give a claim back — your own, or anyone's with --force.

use super::{default_agent, held_by, parse_agent};
use crate::claims::host::Here;
use crate::claims::record::Nonce;
use crate::claims::{Release, Released, StoreError};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::names::TaskId;

/// Release a claim.
///
/// Yours is found by agent name (on this host) or --nonce;
/// someone else's is refused unless --force, which keeps it as a tombstone.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm release parse-if
  farm release parse-if --agent bob
  farm release parse-if --nonce 00112233445566778899aabbccddeeff
  farm release parse-if --force     take it from whoever holds it")]
pub struct Args {
    /// The task whose claim to release.
    #[arg(value_name = "TASK", value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    task: TaskId,

    /// Your agent name: the claim must carry it (and this host's name).
    #[arg(long, env = "FARM_AGENT", default_value_t = default_agent(), value_parser = parse_agent)]
    agent: String,

    /// The claim's nonce, as `farm claim` printed it (instead of --agent).
    #[arg(long, value_parser = Nonce::parse)]
    nonce: Option<Nonce>,

    /// Release it whoever holds it, even a live process.
    #[arg(long)]
    force: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let store = ctx.store()?;
    let task = &args.task;
    let Some(entry) = store.read(task)? else {
        return Err(StoreError::NotFound { task: task.clone() }.into());
    };
    let now = std::time::SystemTime::now();
    let who = held_by(&entry, now);
    if args.force {
        let by = format!("{}@{}", args.agent, Here::current().host);
        let waiting = |what: &str| {
            ctx.out.note(&format!(
                "farm release: waiting for {what}; Ctrl-C to give up"
            ));
        };
        match store.release_waiting(task, Release::Force { by: &by }, &waiting)? {
            Released::Tombstoned(tomb) => {
                ctx.out
                    .say(&format!("released `{task}` by force (was held by {who})"))?;
                ctx.out.debug(&format!("  tombstone: {tomb}"));
            }
            Released::Gone | Released::Removed => {
                ctx.out.say(&format!(
                    "`{task}`: the claim held by {who} was given up once its push ended; \
                     nothing taken (farm locks shows who holds it now)"
                ))?;
            }
        }
        return Ok(());
    }
    let claim = entry.record.as_ref().map_err(|why| {
        Error::failure(format!(
            "cannot release `{task}`: the claim file is corrupt ({why})"
        ))
        .hint(format!(
            "take it anyway (it is kept as a tombstone): farm release {task} --force"
        ))
    })?;
    let mine = match &args.nonce {
        Some(nonce) => &claim.nonce == nonce,
        None => claim.agent == args.agent && claim.host == Here::current().host,
    };
    if !mine {
        let you = match &args.nonce {
            Some(n) => format!("nonce {}", n.short()),
            None => format!("{}@{}", args.agent, Here::current().host),
        };
        return Err(Error::new(
            Code::Held,
            format!("cannot release `{task}`: held by {who}, not by {you}"),
        )
        .hint(format!(
            "pass --agent {} or its --nonce, or take it anyway: farm release {task} --force",
            claim.agent
        )));
    }
    store.release(task, Release::Own(&claim.nonce))?;
    ctx.out.say(&format!("released `{task}`"))?;
    Ok(())
}
