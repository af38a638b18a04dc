//! `farm report`: the night as one HTML page (and a Chrome trace), from the
//! journal in the state directory and the board's dependencies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::report::html::Page;
use crate::report::needs::NeedsYou;
use crate::report::night::{self, Kind, Night, Scope};
use crate::report::{path, trace};
use crate::run::journal;

/// Draw the night: one self-contained HTML page (no network: styles, charts
/// and data inline) with a lane per agent, each session a bar coloured by
/// how it ended, usage-limit and circuit-breaker waits, the tasks-done
/// curve, the board's critical path, and cost and tokens per agent, CLI and
/// task. Click a bar for its task, attempt, duration, outcome and log.
///
/// By default the last night: the latest run, and the runs before it that
/// ended less than 30 minutes before the next began (a night of `loop.sh`
/// restarts).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm report                         the last night, to .farm/report.html
  farm report --open                  ... and open it in a browser
  farm report --since 12h -o night.html
  farm report --run 4121 --trace run.json   a Chrome trace too (open in ui.perfetto.dev)
  farm report --json | jq .counts")]
pub struct Args {
    /// Where to write the page (default: `report.html` in the state dir).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Also write the night as Chrome trace JSON to FILE (Perfetto,
    /// chrome://tracing).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,

    /// The run of this process id (`farm status` lists them).
    #[arg(long, value_name = "PID", conflicts_with_all = ["since", "until"])]
    run: Option<u32>,

    /// From this time: a duration back from now (12h) or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,

    /// Up to this time (default: now); as --since.
    #[arg(long, value_name = "WHEN", requires = "since")]
    until: Option<String>,

    /// Open the page in a browser ($BROWSER, else xdg-open or open).
    #[arg(long)]
    open: bool,

    /// Print what the page shows, as JSON: {report, scope, runs, lanes,
    /// counts, done, total, by_agent, by_cli, by_task, critical_path,
    /// needs_you, outcomes}.
    #[arg(long)]
    json: bool,
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let state = ctx.state_dir(&spec);
    let now = SystemTime::now();
    let scope = match (&args.run, &args.since) {
        (Some(pid), _) => Scope::Run(*pid),
        (None, Some(since)) => {
            let from = crate::age::parse_since(since, now).map_err(Error::usage)?;
            let to = match &args.until {
                Some(u) => crate::age::parse_since(u, now).map_err(Error::usage)?,
                None => now,
            };
            if to < from {
                return Err(Error::usage(format!(
                    "--until ({}) is before --since ({})",
                    crate::claims::record::timestamp(to),
                    crate::claims::record::timestamp(from)
                )));
            }
            Scope::Range {
                from: epoch(from),
                to: epoch(to),
            }
        }
        (None, None) => Scope::LastNight,
    };
    let journal_path = state.join(journal::FILE);
    let text = journal::read(&state).map_err(|e| {
        Error::failure(format!(
            "cannot read the journal `{}`: {e}",
            journal_path.display()
        ))
        .caused_by(e)
    })?;
    let entries = journal::entries(&text);
    let (lines, runs) = night::select(&entries, &scope);
    if runs.is_empty() && lines.is_empty() {
        let what = match &scope {
            Scope::Run(pid) => format!("no run of pid {pid}"),
            Scope::Range { .. } => "nothing in that time range".to_owned(),
            Scope::LastNight => "no run".to_owned(),
        };
        return Err(Error::usage(format!(
            "{what} in the journal `{}`",
            journal_path.display()
        ))
        .hint(
            "farm status lists the runs; a run writes the journal in the state dir (--state-dir)",
        ));
    }
    let words = match &scope {
        Scope::Run(pid) => format!("the run of pid {pid}"),
        Scope::Range { .. } => format!("{} of the time range", count_runs(runs.len())),
        Scope::LastNight => format!("the last night: {}", count_runs(runs.len())),
    };
    let night = Night::new(&lines, runs);
    let critical = critical_path(&spec, &night);
    let (needs, outcomes) = needs_and_outcomes(ctx, &spec, &state, &lines, &night);
    let last_words = last_words(&night);

    let out = args
        .output
        .clone()
        .unwrap_or_else(|| state.join("report.html"));
    // Both files go where they are asked to, or neither is written.
    into_a_directory(&out, "-o")?;
    if let Some(t) = &args.trace {
        into_a_directory(t, "--trace")?;
    }
    let page = Page {
        night: &night,
        scope: words.clone(),
        critical: critical.clone(),
        tz: jiff::tz::TimeZone::system(),
        made: epoch(now),
        needs: Some(&needs),
        outcomes: outcomes.clone(),
        last_words,
    }
    .render();
    write_whole(&out, page.as_bytes())?;
    if let Some(t) = &args.trace {
        let text = serde_json::to_string(&trace::trace(&night)).expect("JSON values serialize");
        write_whole(t, text.as_bytes())?;
    }
    if args.json {
        let (chain, secs) = critical.as_ref().cloned().unwrap_or_default();
        let counts: BTreeMap<&str, usize> =
            night.counts.iter().map(|(k, n)| (k.label(), *n)).collect();
        ctx.out.data(&format!(
            "{:#}\n",
            json!({
                "report": out.display().to_string(),
                "trace": args.trace.as_ref().map(|t| t.display().to_string()),
                "scope": words,
                "runs": night.runs,
                "lanes": night.lanes,
                "counts": counts,
                "done": night.done.len(),
                "total": night.total,
                "by_agent": night.by_agent,
                "by_cli": night.by_cli,
                "by_task": night.by_task,
                "critical_path": {"tasks": chain, "secs": secs, "unknown": critical.err()},
                "needs_you": needs,
                "outcomes": outcomes,
            })
        ))?;
    } else {
        let failed = [Kind::Failed, Kind::TimedOut]
            .iter()
            .map(|k| night.counts.get(k).copied().unwrap_or(0))
            .sum::<usize>();
        // Merge sessions apart, as `farm run` and `farm status` count them.
        let merges = night.counts.get(&Kind::Merge).copied().unwrap_or(0);
        let mut sessions = crate::output::count(
            night.total.sessions.saturating_sub(merges),
            "session",
            "sessions",
        );
        if merges > 0 {
            sessions.push_str(&format!(
                ", {}",
                crate::output::count(merges, "merge session", "merge sessions")
            ));
        }
        ctx.out.note(&format!(
            "farm report: {}: {sessions}, {} done, {failed} failed, {} ({} KiB)",
            words,
            night.done.len(),
            out.display(),
            page.len().div_ceil(1024)
        ));
        if let Some(t) = &args.trace {
            ctx.out.note(&format!(
                "farm report: trace in {} (ui.perfetto.dev)",
                t.display()
            ));
        }
    }
    if args.open {
        open(ctx, &out);
    }
    Ok(())
}

fn count_runs(n: usize) -> String {
    crate::output::count(n, "run", "runs")
}

/// The board's critical path over the night's sessions, or why it cannot
/// be known (a hub that cannot be read now).
fn critical_path(
    spec: &crate::git::hub::HubSpec,
    night: &Night,
) -> Result<(Vec<String>, f64), String> {
    let hub = Hub::open(spec, None).map_err(|e| format!("cannot open the hub: {}", e.message))?;
    let snapshot = super::tasks::read_board(&hub).map_err(|e| e.message)?;
    let mut after: BTreeMap<String, Vec<String>> = snapshot
        .pending
        .iter()
        .map(|t| {
            (
                t.id.to_string(),
                t.after.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    for (id, f) in super::tasks::finished(&hub, &snapshot) {
        after.insert(
            id.to_string(),
            f.after.iter().map(ToString::to_string).collect(),
        );
    }
    let weight = night
        .by_task
        .iter()
        .map(|(t, s)| (t.clone(), s.secs))
        .collect();
    Ok(path::critical(&after, &weight))
}

/// What needs a person now (the board, the claims, the rescue branches,
/// the night's cost), and how each task of the board stands.
fn needs_and_outcomes(
    ctx: &Ctx,
    spec: &crate::git::hub::HubSpec,
    state: &Path,
    lines: &[&journal::Entry<'_>],
    night: &Night,
) -> (NeedsYou, BTreeMap<String, String>) {
    let hub = Hub::open(spec, None).map_err(|e| format!("cannot open the hub: {}", e.message));
    // Without the claims (a hub elsewhere that does not answer), what
    // needs a person is told without the silent holders.
    let listed: Vec<crate::claims::Listed> = ctx
        .store_for(spec)
        .ok()
        .and_then(|s| s.list().ok())
        .unwrap_or_default();
    let stale_after = crate::settings::Settings::of_hub(spec, None, state)
        .and_then(|s| crate::run::config::stale_after(&s))
        .unwrap_or(std::time::Duration::from_secs(30 * 60));
    let rescues = super::needs::rescues_of(lines);
    // The board, read once for what needs you and for each task's outcome.
    let snapshot = hub.as_ref().map_err(Clone::clone).and_then(|hub| {
        let mut snapshot = super::tasks::read_board(hub).map_err(|e| e.message)?;
        snapshot.claimed = crate::claims::holders(&listed);
        Ok(snapshot)
    });
    let needs = super::needs::gather(
        hub.as_ref().map_err(Clone::clone),
        snapshot.as_ref().map_err(Clone::clone),
        &listed,
        stale_after,
        &rescues,
        night.total.cost_usd,
    );
    let mut outcomes = BTreeMap::new();
    if let Ok(snapshot) = &snapshot {
        for (id, status) in crate::board::statuses(snapshot) {
            outcomes.insert(id.to_string(), status.label().to_owned());
        }
    }
    (needs, outcomes)
}

/// The agent's last words in each failed, timed-out or rescued session's
/// log (what `farm logs` shows last), by the session's index.
fn last_words(night: &Night) -> BTreeMap<usize, String> {
    night
        .sessions
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.kind, Kind::Failed | Kind::TimedOut | Kind::Rescued))
        .filter_map(|(i, s)| {
            let log = s.log.as_deref()?;
            let said = crate::run::attempts::last_line(Path::new(log))?;
            // Quoted as code for the task's notes; the panel shows it bare.
            let bare = said.strip_prefix('`').and_then(|s| s.strip_suffix('`'));
            Some((i, bare.map_or(said.clone(), str::to_owned)))
        })
        .collect()
}

/// The directory a file at `path` goes into.
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Refuse a file (given by `flag`) into a directory that does not exist:
/// made on the way, a mistyped path left directories about (at `/`, as
/// root).
fn into_a_directory(path: &Path, flag: &str) -> Result<(), Error> {
    let dir = dir_of(path);
    if dir.is_dir() {
        return Ok(());
    }
    Err(Error::usage(format!(
        "cannot write `{}`: there is no directory `{}`",
        path.display(),
        dir.display()
    ))
    .hint(format!(
        "make it first (mkdir -p {}), or give {flag} a path in one that exists",
        dir.display()
    )))
}

/// Write `bytes` to `path` whole or not at all: a temp file beside it,
/// renamed over it.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let fail = |e: std::io::Error| {
        Error::failure(format!("cannot write `{}`: {e}", path.display())).caused_by(e)
    };
    let dir = dir_of(path);
    // A temp file is made 0600; the page is for reading by others as any
    // file is, so asked for 0666 and left to the umask.
    let mut tmp = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(fail)?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

/// Open `page` in a browser: `$BROWSER`, else the desktop's opener. Said,
/// not an error, when there is none (the page is written).
fn open(ctx: &Ctx, page: &Path) {
    let candidates: Vec<String> = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .into_iter()
        .chain(["xdg-open".to_owned(), "open".to_owned()])
        .collect();
    for c in candidates {
        let Ok(mut words) = shell_words::split(&c) else {
            continue;
        };
        if words.is_empty() {
            continue;
        }
        let program = words.remove(0);
        let spawned = std::process::Command::new(&program)
            .args(&words)
            .arg(page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if spawned.is_ok_and(opened) {
            ctx.out.note(&format!(
                "farm report: opened {} with {program}",
                page.display()
            ));
            return;
        }
    }
    ctx.out.note(&format!(
        "farm report: no browser could open it (set $BROWSER, or is there no display?); the page is {}",
        page.display()
    ));
}

/// Did an opener open the page? An opener hands the page on and exits 0;
/// one that fails does so at once (xdg-open with no display exits 3); a
/// browser itself runs on. So: not if it exits unsuccessfully within a
/// few seconds.
fn opened(mut child: std::process::Child) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(3) {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(_) => return false,
        }
    }
    true
}
