//! `farm logs`: the latest session log, of a task or an agent.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::config::Ctx;
use crate::error::Error;

/// Print the latest session log, of a task or an agent (default: the latest
/// of all). Logs live in the state directory, `logs/<agent>/<task>-<time>.log`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm logs                 the latest session's log
  farm logs parse-if        the latest log of task parse-if
  farm logs vm-2 -f         follow agent vm-2's latest log as it grows
  farm logs --list          which logs there are, newest last
  farm logs vm-2 --pretty   stream-json as turns: text, tool calls, results")]
pub struct Args {
    /// A task id or an agent name.
    #[arg(value_name = "TASK|AGENT")]
    what: Option<String>,

    /// Keep printing what is appended, until interrupted.
    #[arg(short, long)]
    follow: bool,

    /// List the matching logs (path, size, age) instead of printing one.
    #[arg(long, conflicts_with = "follow")]
    list: bool,

    /// Render the JSON lines of Claude Code, Codex and Gemini CLI as
    /// turns: what the agent said, one line per tool call and per result,
    /// API retries, the result (other lines as they are).
    #[arg(long, conflicts_with = "list")]
    pretty: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let dir = ctx.state_dir(&spec).join("logs");
    let mut logs = find(&dir, args.what.as_deref());
    if logs.is_empty() {
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
    let (path, _) = logs.pop().expect("not empty");
    ctx.out.note(&format!("==> {} <==", path.display()));
    let mut file = std::fs::File::open(&path).map_err(|e| {
        Error::failure(format!("cannot open `{}`: {e}", path.display())).caused_by(e)
    })?;
    let mut stdout = std::io::stdout().lock();
    let mut buf = Vec::new();
    // With --pretty, whole lines are rendered; a line still being written
    // waits for its end.
    let mut turns = crate::run::transcript::Transcript::default();
    let mut partial = Vec::new();
    loop {
        buf.clear();
        file.read_to_end(&mut buf).map_err(|e| {
            Error::failure(format!("cannot read `{}`: {e}", path.display())).caused_by(e)
        })?;
        if args.pretty {
            partial.extend_from_slice(&buf);
            let end = partial
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            let whole: Vec<u8> = partial.drain(..end).collect();
            let mut lines: Vec<String> = String::from_utf8_lossy(&whole)
                .lines()
                .flat_map(|l| turns.line(l))
                .collect();
            if !args.follow {
                let rest = String::from_utf8_lossy(&partial).into_owned();
                lines.extend(rest.lines().flat_map(|l| turns.line(l)));
                lines.extend(turns.finish());
            }
            for l in lines {
                writeln!(stdout, "{l}")?;
            }
        } else {
            stdout.write_all(&buf)?;
        }
        stdout.flush()?;
        if !args.follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
        // Truncated (a new session reusing the name): start over.
        let len = file.metadata().map_or(0, |m| m.len());
        let pos = file.stream_position().unwrap_or(0);
        if len < pos {
            let _ = file.seek(SeekFrom::Start(0));
        }
    }
}

/// Logs under `dir` whose agent directory or file name matches `what`
/// (every log when `None`), with their modification times.
fn find(dir: &std::path::Path, what: Option<&str>) -> Vec<(PathBuf, SystemTime)> {
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
            if !name.ends_with(".log") {
                continue;
            }
            // `<task>-<stamp>.log`: the task is all but the last `-` part.
            let task = name.rsplit_once('-').map_or("", |(t, _)| t);
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
