//! `farm reap`: take back claims whose holder is dead, or whose heartbeat is
//! older than a threshold, keeping each as a tombstone with the reason.

use std::time::Duration;

use serde_json::json;

use super::{held_by, judge_now};
use crate::age::{Age, parse_duration};
use crate::claims::Reap;
use crate::config::Ctx;
use crate::error::Error;

/// Take back dead claims, and with --older-than, stale ones.
///
/// Dead: the holder process on this host is gone (or the host rebooted).
/// Stale: no live local process, and the heartbeat is older than the
/// threshold. A holder process proven alive on this host is never reaped.
/// Each reaped claim is renamed into `current_tasks/.reaped/` with the reason.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm reap                      take back claims whose holder process died
  farm reap --older-than 2h      also those with no heartbeat for 2 hours
  farm reap --older-than 90s --dry-run --json")]
pub struct Args {
    /// Also reap claims whose heartbeat is older than this (90s, 10m, 2h, 1d).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    older_than: Option<Duration>,

    /// Say what would be reaped, change nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,

    /// Print JSON: {dry_run, reaped: [...], skipped: [...]}.
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let store = ctx.store()?;
    let judge = judge_now(args.older_than);
    let mut reaped = Vec::new();
    let mut skipped = Vec::new();
    let mut young = Vec::new();
    for entry in store.list()? {
        let verdict = entry.judge(&judge);
        if !verdict.reapable {
            match too_new_here(&entry, &judge) {
                Some(why) => {
                    if !args.json {
                        ctx.out.note(&format!("kept `{}`: {why}", entry.name));
                    }
                    young.push(json!({"task": entry.name, "why": why}));
                }
                None => ctx.out.debug(&format!(
                    "kept `{}`: {}: {}",
                    entry.name, verdict.state, verdict.reason
                )),
            }
            continue;
        }
        let who = held_by(&entry, judge.now);
        let taken = if args.dry_run {
            Some((verdict, None))
        } else {
            match store.reap(&entry, &judge)? {
                Reap::Reaped { tombstone, verdict } => Some((verdict, Some(tombstone))),
                Reap::Skipped(why) => {
                    ctx.out.debug(&format!("skipped `{}`: {why}", entry.name));
                    skipped.push(json!({"task": entry.name, "why": why}));
                    None
                }
            }
        };
        let Some((verdict, tombstone)) = taken else {
            continue;
        };
        if !args.json {
            let verb = if args.dry_run { "would reap" } else { "reaped" };
            ctx.out.say(&format!(
                "{verb} `{}` (held by {who}): {}: {}",
                entry.name, verdict.state, verdict.reason
            ))?;
            if let Some(t) = &tombstone {
                ctx.out.debug(&format!("  tombstone: {}", t));
            }
        }
        reaped.push(json!({
            "task": entry.name,
            "state": verdict.state,
            "reason": verdict.reason,
            "held_by": who,
            "tombstone": tombstone.map(|t| t.to_string()),
        }));
    }
    if !args.dry_run {
        let tidied = store.tidy(judge.now)?;
        if tidied > 0 {
            ctx.out.debug(&format!(
                "removed {tidied} scratch file(s) left by crashed claimers"
            ));
        }
    }
    if args.json {
        let doc = json!({
            "dry_run": args.dry_run, "reaped": reaped, "skipped": skipped, "too_new_here": young,
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
    } else if reaped.is_empty() {
        let scope = match args.older_than {
            Some(t) => format!("no dead claims and none older than {}", Age(t)),
            None => "no dead claims".to_owned(),
        };
        ctx.out
            .note(&format!("nothing to reap: {scope} in {}", store.location()));
    }
    Ok(())
}

/// Why a claim that its stamp says is older than the threshold was kept:
/// this machine first saw it too recently (claims from other hosts are aged
/// on this machine's clock, whose first look may be now); `None` for any
/// other keeping.
fn too_new_here(
    entry: &crate::claims::Listed,
    judge: &crate::claims::liveness::Judge<'_>,
) -> Option<String> {
    let limit = judge.stale_after?;
    let seen = entry.seen?;
    let stamped = judge.now.duration_since(entry.heartbeat).ok()?;
    let here = judge.now.duration_since(seen.at).unwrap_or_default();
    if stamped <= limit
        || here > limit
        || entry.judge(judge).state != crate::claims::liveness::State::Alive
    {
        return None;
    }
    let wait = Age(limit.saturating_sub(here).max(Duration::from_secs(1)));
    Some(format!(
        "its heartbeat is stamped {} ago, but this machine first saw it {} ago and ages \
         claims from other hosts on its own clock: it can be reaped in {wait} (run this \
         again then), or freed now: farm release {} --force",
        Age(stamped),
        Age(here),
        entry.name
    ))
}
