//! `farm locks`: one row per claim — who holds what, and is the holder alive.

use std::time::{Duration, SystemTime};

use super::judge_now;
use crate::age::{Age, parse_duration};
use crate::claims::Listed;
use crate::claims::liveness::{State, Verdict};
use crate::claims::record::timestamp;
use crate::config::Ctx;
use crate::error::Error;
use crate::output::{Style, table};
use crate::settings::Settings;

/// List the claims: task, agent, host, pid, age, heartbeat age and state.
///
/// States: alive (its process runs, or its heartbeat is fresh), stale
/// (heartbeat older than --stale-after), dead (its process on this host is
/// gone), corrupt (not a valid claim file).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm locks
  farm locks --stale-after 30m
  farm locks --json | jq -r '.claims[] | select(.state == \"dead\") | .task'")]
pub struct Args {
    /// Print JSON: {store, location, stale_after_secs, claims: [...]}.
    #[arg(long)]
    json: bool,

    /// Heartbeat age past which a claim with no live local process is stale
    /// [default: farm run's: farm.toml's `stale_after`, else 30m].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    stale_after: Option<Duration>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let store = ctx.store_for(&spec)?;
    // The threshold `farm run` reaps by (it judged at 2h while runs reaped
    // at 30m): a claim shown alive here must not be reaped by a run.
    let stale_after = match args.stale_after {
        Some(d) => d,
        None => {
            let settings = Settings::of_hub(&spec, None, &ctx.state_dir(&spec))?;
            crate::run::config::stale_after(&settings)?
        }
    };
    let entries = store.list()?;
    let judge = judge_now(Some(stale_after));
    let judged: Vec<(Listed, Verdict)> = entries
        .into_iter()
        .map(|e| {
            let v = e.judge(&judge);
            (e, v)
        })
        .collect();
    if args.json {
        let claims: Vec<_> = judged
            .iter()
            .map(|(e, v)| EntryJson::new(e, v, judge.now))
            .collect();
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            claims: Vec<EntryJson<'a>>,
            location: String,
            stale_after_secs: u64,
            store: &'static str,
        }
        let doc = Doc {
            claims,
            location: store.location(),
            stale_after_secs: stale_after.as_secs(),
            store: store.kind(),
        };
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error::failure(format!("cannot write JSON: {e}")).caused_by(e))?;
        ctx.out.data(&format!("{text}\n"))?;
        return Ok(());
    }
    if judged.is_empty() {
        ctx.out.note(&format!(
            "no claims in {} ({} store)",
            store.location(),
            store.kind()
        ));
        return Ok(());
    }
    ctx.out.note(&format!(
        "{} claim(s) in {} ({} store)",
        judged.len(),
        store.location(),
        store.kind()
    ));
    let rows: Vec<_> = judged.iter().map(|(e, v)| row(e, v, judge.now)).collect();
    let header = [
        "TASK",
        "AGENT",
        "HOST",
        "PID",
        "AGE",
        "HEARTBEAT",
        "STATE",
        "WHY",
    ];
    ctx.out.data(&table(&header, &rows, ctx.out.color_stdout))?;
    Ok(())
}

fn since(now: SystemTime, t: SystemTime) -> Duration {
    now.duration_since(t).unwrap_or_default()
}

fn row(e: &Listed, v: &Verdict, now: SystemTime) -> Vec<(String, Option<Style>)> {
    let style = match v.state {
        State::Alive => Style::Good,
        State::Stale => Style::Warn,
        State::Dead | State::Corrupt => Style::Bad,
    };
    let plain = |s: String| (s, None);
    let why = if v.state == State::Alive {
        String::new()
    } else {
        v.reason.clone()
    };
    match &e.record {
        Ok(c) => vec![
            plain(e.name.clone()),
            plain(c.agent.clone()),
            plain(c.host.clone()),
            plain(c.holder.map_or("-".into(), |h| h.pid.to_string())),
            plain(Age(since(now, c.claimed_at)).to_string()),
            plain(Age(since(now, e.heartbeat)).to_string()),
            (v.state.to_string(), Some(style)),
            plain(why),
        ],
        Err(_) => vec![
            plain(e.name.clone()),
            plain("-".into()),
            plain("-".into()),
            plain("-".into()),
            plain(Age(since(now, e.modified)).to_string()),
            plain("-".into()),
            (v.state.to_string(), Some(style)),
            plain(why),
        ],
    }
}

/// One claim in `--json` output; the field set is stable for scripts (keys
/// in alphabetical order, as before; a struct rather than a `json!` map:
/// ten thousand claims print in half the time).
#[derive(serde::Serialize)]
struct EntryJson<'a> {
    age_secs: Option<u64>,
    agent: Option<&'a str>,
    attempt: Option<u32>,
    boot_id: Option<&'a str>,
    claimed_at: Option<String>,
    heartbeat_age_secs: Option<u64>,
    heartbeat_at: Option<String>,
    host: Option<&'a str>,
    modified_at: String,
    nonce: Option<&'a str>,
    pid: Option<u32>,
    pid_start: Option<u64>,
    reason: &'a str,
    state: State,
    task: &'a str,
}

impl<'a> EntryJson<'a> {
    fn new(e: &'a Listed, v: &'a Verdict, now: SystemTime) -> EntryJson<'a> {
        let c = e.record.as_ref().ok();
        EntryJson {
            age_secs: c.map(|c| since(now, c.claimed_at).as_secs()),
            agent: c.map(|c| c.agent.as_str()),
            attempt: c.map(|c| c.attempt),
            boot_id: c.map(|c| c.boot_id.as_str()),
            claimed_at: c.map(|c| timestamp(c.claimed_at)),
            heartbeat_age_secs: c.map(|_| since(now, e.heartbeat).as_secs()),
            heartbeat_at: c.map(|_| timestamp(e.heartbeat)),
            host: c.map(|c| c.host.as_str()),
            modified_at: timestamp(e.modified),
            nonce: c.map(|c| c.nonce.as_str()),
            pid: c.and_then(|c| c.holder).map(|h| h.pid),
            pid_start: c.and_then(|c| c.holder).map(|h| h.start),
            reason: &v.reason,
            state: v.state,
            task: &e.name,
        }
    }
}
