//! What running each agent session inside bubblewrap costs. Run with
//! `cargo bench --bench sandbox`.
//!
//! Everything runs the real `farm` binary (`CARGO_BIN_EXE_farm`) on hubs
//! made in a temp dir the way the `run` bench makes them: `git init -b
//! main`, an empty commit, `farm init`, the tasks as `tasks/<id>.md` in one
//! commit, git hermetic; each run on a fresh `cp -a` copy of a template hub,
//! its index refreshed.
//!
//! **1. Session start.** The bwrap profile farm uses, taken word for word
//! from the `[farm] command:` header of a session log of a sandboxed run
//! (a one-task `farm run --sandbox` first, on its own hub, whose clone
//! the profile binds), everything up to bwrap's `--`, then `true`; against
//! `true` alone. [`STARTS`] of each, interleaved (the order alternates each
//! round): median and p90 in ms, and the difference of the medians, which is
//! what the sandbox adds to every session before the agent runs.
//!
//! **2. A run.** 40 independent tasks, `farm run --agent NOOP -j 1 -q` with
//! `--sandbox` (and `--sandbox-bind NOOP`, so that the agent script is
//! visible inside) against `--no-sandbox`, [`ROUNDS`] runs of each,
//! interleaved (the order alternates each round). The agent is the `run`
//! bench's no-op: a `sh` script that appends one line to
//! `work-$FARM_TASK.txt` and commits it. Every run must leave all 40 tasks in
//! `tasks/done/` on the hub's main, none pending or failed, or the bench
//! fails. Printed: medians of the wall time and of ms per task, and the
//! difference per task; the goal is at most [`GOAL_MS`] more per session.
//!
//! Timings are printed, never asserted: they depend on the machine and on
//! what else runs on it, so the load average is printed at the start and at
//! the end.

#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;
use process::{Res, git, output, tail, write_executable};
use report::{load, verdict};
use stats::{max, median, min, quantile};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

const FARM: &str = env!("CARGO_BIN_EXE_farm");

/// Part 1: starts of each, sandboxed and not.
const STARTS: usize = 200;

/// Part 2: tasks per run, and runs of each variant.
const TASKS: usize = 40;
const ROUNDS: usize = 5;

/// The most the sandbox should add to a session, in ms.
const GOAL_MS: f64 = 10.0;

/// Above this 1-minute load average on this project's 2-core VM, figures
/// are noisier than usual: the bench says so.
const BUSY_LOAD: f64 = 6.0;

const NOOP_AGENT: &str = r#"#!/bin/sh
# The bench's no-op agent: one line of work, committed.
set -e
echo "$FARM_TASK" >> "work-$FARM_TASK.txt"
git add "work-$FARM_TASK.txt"
git commit --quiet -m "work on $FARM_TASK"
"#;

fn main() -> ExitCode {
    // Arguments (`--bench`, filters) are cargo's; there is nothing to select.
    report::finish(run())
}

fn run() -> Res<()> {
    let tmp = tempfile::Builder::new()
        .prefix("farm-bench-sandbox.")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let scratch = tmp.path();
    let noop = scratch.join("noop-agent.sh");
    write_executable(&noop, NOOP_AGENT)?;
    println!("farm sandbox bench: {FARM}");
    let bwrap = output(
        process::command("bwrap").arg("--version"),
        "bwrap --version (is bubblewrap installed?)",
    )?;
    println!(
        "{}; hubs under {}; load average {}",
        bwrap.trim(),
        scratch.display(),
        load_noted()
    );
    println!();
    let start = session_start(scratch, &noop)?;
    println!();
    a_run(scratch, &noop, start)?;
    println!();
    println!("load average at the end: {}", load_noted());
    Ok(())
}

/// The load average, with a word when it is high enough to skew figures.
fn load_noted() -> String {
    let now = load();
    let one: f64 = now
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(0.0);
    if one > BUSY_LOAD {
        format!("{now} (above {BUSY_LOAD}: a busy machine, figures noisier)")
    } else {
        now
    }
}

/// A fresh copy of a template hub, its index refreshed: the copied index
/// records the template's inodes and ctimes, and until refreshed `farm run`
/// sees every tracked file as modified and refuses the hub.
fn copy_hub(template: &Path, dest: &Path) -> Res<()> {
    output(
        process::command("cp").arg("-a").arg(template).arg(dest),
        "cp -a the template hub",
    )?;
    git(dest, &["update-index", "-q", "--refresh"])?;
    Ok(())
}

/// A template hub of `tasks` independent tasks.
fn template(scratch: &Path, name: &str, tasks: usize) -> Res<PathBuf> {
    let dir = scratch.join(name);
    let files: Vec<(String, String)> = (0..tasks)
        .map(|i| {
            let id = format!("t{i:02}");
            (
                format!("tasks/{id}.md"),
                format!("+++\ntitle = \"{id}\"\n+++\n"),
            )
        })
        .collect();
    process::make_hub(FARM, &dir, &files)?;
    Ok(dir)
}

/// `farm run` of the no-op agent, `-j 1`, sandboxed or not, on `hub`; its
/// wall time, once every task is checked done on the hub's main.
fn farm_run(hub: &Path, noop: &Path, sandboxed: bool, tasks: usize, log: &Path) -> Res<Duration> {
    let mut cmd = process::command(FARM);
    cmd.args(["run", "--agent"])
        .arg(noop)
        .args(["-j", "1", "-q", "--hub"])
        .arg(hub);
    if sandboxed {
        cmd.arg("--sandbox").arg("--sandbox-bind").arg(noop);
    } else {
        cmd.arg("--no-sandbox");
    }
    let file = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdout(file).stderr(err);
    let what = if sandboxed {
        "farm run --sandbox"
    } else {
        "farm run --no-sandbox"
    };
    let start = Instant::now();
    let status = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    let took = start.elapsed();
    if !status.success() {
        return Err(format!("{what}: {status}\n{}", tail(log, 20)));
    }
    check_done(hub, tasks, what)?;
    Ok(took)
}

/// All `tasks` in `tasks/done/` on the hub's main, none pending or failed.
fn check_done(hub: &Path, tasks: usize, who: &str) -> Res<()> {
    let listing = git(hub, &["ls-tree", "-r", "--name-only", "main", "tasks"])?;
    let (mut done, mut left) = (0, Vec::new());
    for path in listing.lines() {
        let Some(name) = path.strip_prefix("tasks/") else {
            continue;
        };
        if name.starts_with("done/") {
            done += 1;
        } else if name != "README.md" {
            left.push(name.to_owned());
        }
    }
    if done != tasks || !left.is_empty() {
        return Err(format!(
            "{who} left {done} of {tasks} tasks in tasks/done/ on {}'s main; also {left:?}",
            hub.display()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 1. Session start
// ---------------------------------------------------------------------------

/// bwrap's words, up to and including `--`, from the `[farm] command:`
/// line of the one session log under `hub`'s state directory.
fn profile_from_log(hub: &Path) -> Res<Vec<String>> {
    let logs = hub.join(".farm/logs");
    let mut found = Vec::new();
    for agent in fs::read_dir(&logs).map_err(|e| format!("{}: {e}", logs.display()))? {
        let dir = agent
            .map_err(|e| format!("{}: {e}", logs.display()))?
            .path();
        for log in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            found.push(log.map_err(|e| format!("{}: {e}", dir.display()))?.path());
        }
    }
    let [log] = found.as_slice() else {
        return Err(format!(
            "expected one session log under {}, found {found:?}",
            logs.display()
        ));
    };
    let text = fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("[farm] command: "))
        .ok_or_else(|| format!("no `[farm] command:` line in {}", log.display()))?;
    // The words after bwrap's `--` are the agent's and the prompt's; the
    // header's closing "(the prompt, …)" comes after them.
    let words = shell_words::split(line).map_err(|e| format!("{}: {e}: {line}", log.display()))?;
    let end = words
        .iter()
        .position(|w| w == "--")
        .ok_or_else(|| format!("no `--` in the session command: {line}"))?;
    if !words[0].ends_with("bwrap") {
        return Err(format!("the sandboxed session did not start bwrap: {line}"));
    }
    Ok(words[..=end].to_vec())
}

/// One start of `argv` to its end; how long it took.
fn start_once(argv: &[String]) -> Res<Duration> {
    let mut cmd = process::command(&argv[0]);
    cmd.args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{}: {e}", argv.join(" ")))?;
    let took = start.elapsed();
    if !status.success() {
        return Err(format!("`{}`: {status}", shell_words::join(argv)));
    }
    Ok(took)
}

/// Part 1; returns the difference of the medians, in ms.
fn session_start(scratch: &Path, noop: &Path) -> Res<f64> {
    // One sandboxed session, for its log's header; its hub stays, as the
    // profile binds and enters the session's clone there.
    let one = template(scratch, "template-one", 1)?;
    let hub = scratch.join("hub-profile");
    copy_hub(&one, &hub)?;
    farm_run(&hub, noop, true, 1, &scratch.join("log-profile.txt"))?;
    let mut sandboxed = profile_from_log(&hub)?;
    let binds = sandboxed.iter().filter(|w| w.contains("bind")).count();
    sandboxed.push("true".to_owned());
    let bare = vec!["true".to_owned()];

    let mut ms: [Vec<f64>; 2] = [Vec::with_capacity(STARTS), Vec::with_capacity(STARTS)];
    for round in 0..STARTS {
        for k in 0..2 {
            let i = (round + k) % 2;
            let argv = if i == 0 { &sandboxed } else { &bare };
            ms[i].push(start_once(argv)?.as_secs_f64() * 1e3);
        }
    }

    println!(
        "1. session start: farm's bwrap profile ({} words, {binds} binds, from a session log) \
         running `true`, against `true` alone",
        sandboxed.len() - 1
    );
    println!("   {STARTS} of each, interleaved (the order alternates each round)");
    println!();
    println!(
        "  {:<26} {:>9} {:>9} {:>9} {:>9}",
        "", "median ms", "p90 ms", "min ms", "max ms"
    );
    for (name, v) in [("bwrap … -- true", &ms[0]), ("true", &ms[1])] {
        println!(
            "  {name:<26} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            median(v),
            quantile(v, 0.9),
            min(v),
            max(v)
        );
    }
    let diff = median(&ms[0]) - median(&ms[1]);
    println!();
    println!(
        "  the sandbox adds {diff:.2} ms to a start (medians; p90s differ by {:.2} ms); \
         ratio {:.1}×",
        quantile(&ms[0], 0.9) - quantile(&ms[1], 0.9),
        median(&ms[0]) / median(&ms[1])
    );
    let _ = fs::remove_dir_all(&hub);
    Ok(diff)
}

// ---------------------------------------------------------------------------
// 2. A run
// ---------------------------------------------------------------------------

/// Part 2; `start` is part 1's difference, for comparison.
fn a_run(scratch: &Path, noop: &Path, start: f64) -> Res<()> {
    let template = template(scratch, "template-run", TASKS)?;
    // [sandboxed, not]: wall times in ms.
    let mut wall: [Vec<f64>; 2] = [Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS)];
    for round in 0..ROUNDS {
        for k in 0..2 {
            let i = (round + k) % 2;
            let tag = format!("{round}-{i}");
            let hub = scratch.join(format!("hub-{tag}"));
            copy_hub(&template, &hub)?;
            let log = scratch.join(format!("log-{tag}.txt"));
            let took = farm_run(&hub, noop, i == 0, TASKS, &log)?;
            wall[i].push(took.as_secs_f64() * 1e3);
            let _ = fs::remove_dir_all(&hub);
        }
    }

    println!(
        "2. a run: {TASKS} independent tasks, `farm run -j 1`, a no-op agent (append a line, \
         commit), --sandbox against --no-sandbox"
    );
    println!(
        "   {ROUNDS} runs of each, interleaved (the order alternates each round); \
         every run on a fresh copy of the hub"
    );
    println!();
    println!(
        "  {:<16} {:>10} {:>10} {:>9} {:>9}",
        "", "median s", "ms/task", "min", "max"
    );
    let per_task = |v: &[f64]| v.iter().map(|ms| ms / TASKS as f64).collect::<Vec<f64>>();
    for (name, v) in [("--sandbox", &wall[0]), ("--no-sandbox", &wall[1])] {
        let t = per_task(v);
        println!(
            "  {name:<16} {:>10.2} {:>10.1} {:>9.1} {:>9.1}",
            median(v) / 1e3,
            median(&t),
            min(&t),
            max(&t)
        );
    }
    let on = median(&per_task(&wall[0]));
    let off = median(&per_task(&wall[1]));
    let diff = on - off;
    println!();
    println!(
        "  the sandbox adds {diff:.1} ms per task (medians), ratio {:.3}; goal <= {GOAL_MS:.0} ms: {}",
        on / off,
        verdict(diff <= GOAL_MS)
    );
    println!("  (part 1's difference at the start of a session: {start:.2} ms)");
    Ok(())
}
