//! `farm logs`: the latest session log, of a task or an agent — or, with
//! `-F`, each of its sessions' logs in turn until its run ends.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::Ctx;
use crate::error::Error;
use crate::run::journal::{self, Event};
use crate::run::transcript::Transcript;

/// Print the latest session log, of a task or an agent (default: the latest
/// of all). Logs live in the state directory, `logs/<agent>/<task>-<time>.log`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm logs                 the latest session's log
  farm logs parse-if        the latest log of task parse-if
  farm logs vm-2 -f         follow agent vm-2's latest log as it grows
  farm logs vm-2 -F         follow agent vm-2 from session to session, until its run ends
  farm logs --list          which logs there are, newest last
  farm logs vm-2 --pretty   stream-json as turns: text, tool calls, results")]
pub struct Args {
    /// A task id or an agent name.
    #[arg(
        value_name = "TASK|AGENT",
        add = clap_complete::ArgValueCandidates::new(super::completions::log_names)
    )]
    what: Option<String>,

    /// Keep printing what is appended, until interrupted.
    #[arg(short, long)]
    follow: bool,

    /// Follow the agent (or task) across its sessions: print its latest
    /// log as it grows, then each next session's log as that session
    /// starts; end when its run ends (at once when no run is running).
    #[arg(short = 'F', long, requires = "what", conflicts_with = "follow")]
    follow_sessions: bool,

    /// List the matching logs (path, size, age) instead of printing one.
    #[arg(long, conflicts_with_all = ["follow", "follow_sessions"])]
    list: bool,

    /// Render the JSON lines of Claude Code, Codex and Gemini CLI as
    /// turns: what the agent said, one line per tool call and per result,
    /// API retries, the result (other lines as they are).
    #[arg(long, conflicts_with = "list")]
    pretty: bool,
}

/// How often a followed log, and the logs directory, are looked at.
const POLL: Duration = Duration::from_millis(200);

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let state = ctx.state_dir(&spec);
    let dir = state.join("logs");
    let mut logs = find(&dir, args.what.as_deref());
    // A run whose agent has not started a session yet: -F waits for it.
    let run = match (&args.what, args.follow_sessions) {
        (Some(what), true) => live_run(&state, what),
        _ => None,
    };
    if logs.is_empty() && run.is_none() {
        let which = args
            .what
            .as_deref()
            .map_or(String::new(), |w| format!(" of `{w}`"));
        return Err(
            Error::usage(format!("no session logs{which} in `{}`", dir.display()))
                .hint("farm status lists the agents and tasks; logs appear when a session starts"),
        );
    }
    logs.sort_by_key(|(_, t)| *t);
    if args.list {
        // A table: the columns line up whatever the sizes and ages.
        let now = SystemTime::now();
        let rows: Vec<Vec<(String, Option<crate::output::Style>)>> = logs
            .iter()
            .map(|(path, t)| {
                let size = std::fs::metadata(path).map_or(0, |m| m.len());
                let age = crate::age::Age(now.duration_since(*t).unwrap_or_default());
                vec![
                    (format!("{age} ago"), None),
                    (format!("{size} B"), None),
                    (path.display().to_string(), None),
                ]
            })
            .collect();
        ctx.out.data(&crate::output::table(
            &["AGE", "SIZE", "LOG"],
            &rows,
            ctx.out.color_stdout,
        ))?;
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    if args.follow_sessions {
        let what = args.what.as_deref().expect("-F requires a name");
        return follow_sessions(ctx, &dir, what, run, logs, args.pretty, &mut stdout);
    }
    let (path, _) = logs.pop().expect("not empty");
    let mut tail = Tail::open(ctx, path)?;
    loop {
        tail.pump(&mut stdout, args.pretty, !args.follow)?;
        if !args.follow {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// `-F`: the latest log, then each newer one as it appears, until the run
/// (`run`: its pid and start time) is over and every log it wrote is read.
fn follow_sessions(
    ctx: &Ctx,
    dir: &Path,
    what: &str,
    run: Option<(u32, u64)>,
    logs: Vec<(PathBuf, SystemTime)>,
    pretty: bool,
    out: &mut impl Write,
) -> Result<(), Error> {
    let mut seen: BTreeSet<PathBuf> = logs.iter().map(|(p, _)| p.clone()).collect();
    let mut tail = match logs.last() {
        Some((path, _)) => Some(Tail::open(ctx, path.clone())?),
        None => None,
    };
    loop {
        if let Some(t) = tail.as_mut() {
            t.pump(out, pretty, false)?;
        }
        // Whether the run is over is asked before the directory is: a log
        // its last session made is then always found below.
        let over =
            run.is_none_or(|(pid, start)| crate::claims::host::process_start(pid) != Some(start));
        let mut fresh: Vec<PathBuf> = find(dir, Some(what))
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| !seen.contains(p))
            .collect();
        // Oldest first: the names end in the session's start time.
        fresh.sort_by_key(|p| stamp(p));
        if let Some(next) = fresh.into_iter().next() {
            // A session starts after its agent's last one ended: that log is
            // whole; what is left of it is printed before the next.
            if let Some(t) = tail.as_mut() {
                t.pump(out, pretty, true)?;
            }
            seen.insert(next.clone());
            tail = Some(Tail::open(ctx, next)?);
            continue;
        }
        if over {
            if let Some(t) = tail.as_mut() {
                t.pump(out, pretty, true)?;
            }
            ctx.out.note(&match run {
                Some((pid, _)) => format!("==> the run (pid {pid}) ended <=="),
                None => "==> no run is running: nothing more to follow <==".to_owned(),
            });
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// The newest running run with `what` among its agents, or else (a task,
/// or a name the run did not list) the newest running run: its pid and
/// the process's start time, to tell it from a later process of that pid.
fn live_run(state: &Path, what: &str) -> Option<(u32, u64)> {
    let text = journal::read(state).ok()?;
    let entries = journal::entries(&text);
    let running = journal::running(&entries);
    let starts: Vec<(u32, bool)> = entries
        .iter()
        .filter(|e| running.contains(&e.pid))
        .filter_map(|e| match &e.event {
            Event::RunStart { agents, .. } => Some((e.pid, agents.iter().any(|a| a == what))),
            _ => None,
        })
        .collect();
    let pid = starts
        .iter()
        .rev()
        .find(|(_, has)| *has)
        .or(starts.last())
        .map(|(pid, _)| *pid)?;
    Some((pid, crate::claims::host::process_start(pid)?))
}

/// The start time a log's name ends in (`<task>-<time>.log`).
fn stamp(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    name.as_deref()
        .and_then(|n| n.strip_suffix(".log")?.rsplit_once('-'))
        .map(|(_, s)| s.to_owned())
        .unwrap_or_default()
}

/// A log being printed: where it is, and (with --pretty) the turns so far
/// and a line not yet whole.
struct Tail {
    path: PathBuf,
    file: std::fs::File,
    turns: Transcript,
    partial: Vec<u8>,
}

impl Tail {
    fn open(ctx: &Ctx, path: PathBuf) -> Result<Tail, Error> {
        ctx.out.note(&format!("==> {} <==", path.display()));
        let file = std::fs::File::open(&path).map_err(|e| {
            Error::failure(format!("cannot open `{}`: {e}", path.display())).caused_by(e)
        })?;
        Ok(Tail {
            path,
            file,
            turns: Transcript::default(),
            partial: Vec::new(),
        })
    }

    /// Print what the log has that was not printed yet. `last`: nothing
    /// more will be appended, so a line without its end is printed too.
    fn pump(&mut self, out: &mut impl Write, pretty: bool, last: bool) -> Result<(), Error> {
        // Truncated (a new session reusing the name): start over.
        let len = self.file.metadata().map_or(0, |m| m.len());
        let pos = self.file.stream_position().unwrap_or(0);
        if len < pos {
            let _ = self.file.seek(SeekFrom::Start(0));
        }
        let mut buf = Vec::new();
        self.file.read_to_end(&mut buf).map_err(|e| {
            Error::failure(format!("cannot read `{}`: {e}", self.path.display())).caused_by(e)
        })?;
        if pretty {
            // Whole lines are rendered; a line still being written waits
            // for its end.
            self.partial.extend_from_slice(&buf);
            let end = self
                .partial
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            let whole: Vec<u8> = self.partial.drain(..end).collect();
            let mut lines: Vec<String> = String::from_utf8_lossy(&whole)
                .lines()
                .flat_map(|l| self.turns.line(l))
                .collect();
            if last {
                let rest = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                lines.extend(rest.lines().flat_map(|l| self.turns.line(l)));
                lines.extend(self.turns.finish());
            }
            for l in lines {
                writeln!(out, "{l}")?;
            }
        } else {
            out.write_all(&buf)?;
        }
        out.flush()?;
        Ok(())
    }
}

/// The task a log's file name (`<task>-<time>.log`) is of: all but the
/// last `-` part.
pub(crate) fn task_of(name: &str) -> Option<&str> {
    name.strip_suffix(".log")?.rsplit_once('-').map(|(t, _)| t)
}

/// Logs under `dir` whose agent directory or file name matches `what`
/// (every log when `None`), with their modification times.
fn find(dir: &Path, what: Option<&str>) -> Vec<(PathBuf, SystemTime)> {
    let Ok(agents) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for agent in agents.flatten() {
        let agent_name = agent.file_name().to_string_lossy().into_owned();
        let Ok(files) = std::fs::read_dir(agent.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let Some(task) = task_of(&name) else {
                continue;
            };
            let matches = what.is_none_or(|w| {
                w == agent_name || w == task || task.strip_suffix("-merge") == Some(w)
            });
            if matches && let Ok(t) = f.metadata().and_then(|m| m.modified()) {
                out.push((f.path(), t));
            }
        }
    }
    out
}
