//! Whether farm's cost per task grows with the size of the board.
//! Run with `cargo bench --bench scale`.
//!
//! Everything runs the real `farm` binary on hubs made in a temp dir (see
//! `common/process.rs`: `git init`, `farm init`, the tasks in one commit).
//!
//! **1. Per task on a small and a large board.** `farm run -j 2` with a
//! trivial agent (appends a line to a file and commits it) on a local bare
//! hub (`git clone --bare` of the template), on a board of 50 independent
//! tasks and on one of 5,000, each run twice from a fresh hub and state
//! dir: with `--max-sessions` [`FEW`] and [`MANY_SESSIONS`]. A task's cost
//! is the difference of the two walls over the difference of the tasks
//! done, so what every run pays once (making the agents' clones: a
//! checkout of every file of the board) is left out, and shown apart as
//! the start-up: the [`FEW`] run's wall less [`FEW`] tasks at that cost.
//! Medians of [`RUNS`] interleaved rounds, and the ratio large / small of
//! the per-task cost (goal ≤ 1.3: a task must not cost more because the
//! board is larger).
//!
//! **2. `farm tasks` over 10,000 tasks** (a work-tree hub): the median of
//! [`RUNS`] runs (goal ≤ 150 ms).
//!
//! **3. `farm locks` over 10,000 claims** in the fs store, made by one
//! `farm claim` of 10,000 ids two seconds before: the median of [`RUNS`]
//! runs, idle and while a busy loop (`sh -c 'while :; do :; done'`) loads one
//! core (goal ≤ 100 ms), and idle with no read cache (each run reads every
//! claim, as the first listing does).
//!
//! Timings are printed with their goals, never asserted; the load average
//! is printed at the start and the end.

#[path = "common/process.rs"]
mod process;
use process::{Res, Workers, command, git, make_hub, output, tail, write_executable};
#[path = "common/report.rs"]
mod report;
use report::{finish, load, verdict};
#[path = "common/stats.rs"]
mod stats;
use stats::{max, median, min};

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

const FARM: &str = env!("CARGO_BIN_EXE_farm");
const RUNS: usize = 5;
/// Tasks done by the short and the long run of part 1, whatever the
/// board's size.
const FEW: usize = 10;
const MANY_SESSIONS: usize = 40;
const JOBS: &str = "2";
const SMALL: usize = 50;
const LARGE: usize = 5_000;
const TARGET_RATIO: f64 = 1.3;
const MANY: usize = 10_000;
const TARGET_TASKS_MS: f64 = 150.0;
const TARGET_LOCKS_MS: f64 = 100.0;

const AGENT: &str = r#"#!/bin/sh
# The bench's trivial agent: one line of work, committed.
set -e
echo "$FARM_TASK" >> "work-$FARM_TASK.txt"
git add "work-$FARM_TASK.txt"
git commit --quiet -m "work on $FARM_TASK"
"#;

fn main() -> ExitCode {
    finish(run())
}

fn run() -> Res<()> {
    let tmp = tempfile::Builder::new()
        .prefix("farm-bench-scale.")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dir = tmp.path();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("farm scale bench: {FARM}");
    println!(
        "under {}; {cores} core(s); load average {}",
        dir.display(),
        load()
    );
    println!();
    per_task(dir)?;
    println!();
    tasks(dir)?;
    println!();
    locks(dir)?;
    println!();
    println!("load average at the end: {}", load());
    Ok(())
}

fn id(i: usize) -> String {
    format!("t{i:05}")
}

/// A work-tree hub of `n` independent tasks.
fn board(dir: &Path, n: usize) -> Res<PathBuf> {
    let hub = dir.join(format!("board-{n}"));
    let files: Vec<(String, String)> = (0..n)
        .map(|i| {
            let id = id(i);
            (
                format!("tasks/{id}.md"),
                format!("+++\ntitle = \"Task {id}\"\n+++\nDo {id}.\n"),
            )
        })
        .collect();
    make_hub(FARM, &hub, &files)?;
    Ok(hub)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(v: &[f64]) -> String {
    format!(
        "median {:>8.1} ms  (min {:.1}, max {:.1})",
        median(v),
        min(v),
        max(v)
    )
}

/// Part 1.
fn per_task(dir: &Path) -> Res<()> {
    let agent = dir.join("agent.sh");
    write_executable(&agent, AGENT)?;
    let mut templates = Vec::new();
    for n in [SMALL, LARGE] {
        let work = board(dir, n)?;
        let bare = dir.join(format!("bare-{n}.git"));
        output(
            command("git")
                .args(["clone", "-q", "--bare"])
                .arg(&work)
                .arg(&bare),
            "git clone --bare",
        )?;
        templates.push(bare);
    }
    // Per board: the per-task cost and the start-up of each round.
    let mut per: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    let mut startup: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    for run in 0..RUNS {
        for k in 0..2 {
            // The order alternates, so that drift hits both alike.
            let i = (run + k) % 2;
            let few = ms(farm_run(
                dir,
                &agent,
                &templates[i],
                FEW,
                &format!("{run}-{i}-few"),
            )?);
            let many = ms(farm_run(
                dir,
                &agent,
                &templates[i],
                MANY_SESSIONS,
                &format!("{run}-{i}-many"),
            )?);
            let cost = (many - few) / (MANY_SESSIONS - FEW) as f64;
            per[i].push(cost);
            startup[i].push(few - FEW as f64 * cost);
        }
    }
    println!(
        "1. per task: farm run -j {JOBS}, --max-sessions {MANY_SESSIONS} less --max-sessions {FEW}, \
         trivial agent, local bare hub, {RUNS} rounds"
    );
    for (i, n) in [SMALL, LARGE].iter().enumerate() {
        println!("  {n:>6} tasks on the board   {}", summary(&per[i]));
    }
    let ratio = median(&per[1]) / median(&per[0]);
    println!(
        "  ratio {LARGE} / {SMALL}          {ratio:>6.2} x   goal <= {TARGET_RATIO:.1}: {}",
        verdict(ratio <= TARGET_RATIO)
    );
    println!("  start-up (the agents' clones), once per run:");
    for (i, n) in [SMALL, LARGE].iter().enumerate() {
        println!("  {n:>6} tasks on the board   {}", summary(&startup[i]));
    }
    Ok(())
}

/// One `farm run` of `sessions` tasks on a fresh copy of `template`, with
/// its own state dir; its wall time. Checks that it did that many tasks.
fn farm_run(
    dir: &Path,
    agent: &Path,
    template: &Path,
    sessions: usize,
    tag: &str,
) -> Res<Duration> {
    let hub = dir.join(format!("hub-{tag}.git"));
    let state = dir.join(format!("state-{tag}"));
    output(command("cp").arg("-a").arg(template).arg(&hub), "cp -a")?;
    let log = dir.join(format!("log-{tag}.txt"));
    let file = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let status = command(FARM)
        .args(["run", "-q", "-j", JOBS, "--max-sessions"])
        .arg(sessions.to_string())
        .arg("--agent")
        .arg(agent)
        .arg("--hub")
        .arg(&hub)
        .env("FARM_STATE_DIR", &state)
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|e| format!("farm run: {e}"))?;
    let took = start.elapsed();
    if !status.success() {
        return Err(format!("farm run: {status}\n{}", tail(&log, 20)));
    }
    let listing = git(&hub, &["ls-tree", "--name-only", "main", "tasks/done/"])?;
    let done = listing.lines().filter(|l| l.ends_with(".md")).count();
    if done != sessions {
        return Err(format!(
            "farm run did {done} tasks, not {sessions}\n{}",
            tail(&log, 20)
        ));
    }
    let _ = fs::remove_dir_all(&hub);
    let _ = fs::remove_dir_all(&state);
    Ok(took)
}

/// The medians of `RUNS` runs of `farm ARGS --hub HUB`, in ms.
fn times(hub: &Path, args: &[&str]) -> Res<Vec<f64>> {
    times_n(hub, args, RUNS)
}

/// The walls of `n` runs of `farm ARGS --hub HUB`, in milliseconds.
fn times_n(hub: &Path, args: &[&str], n: usize) -> Res<Vec<f64>> {
    let mut v = Vec::new();
    for _ in 0..n {
        let start = Instant::now();
        output(
            command(FARM).args(args).arg("--hub").arg(hub),
            &format!("farm {}", args.join(" ")),
        )?;
        v.push(ms(start.elapsed()));
    }
    Ok(v)
}

/// Part 2.
fn tasks(dir: &Path) -> Res<()> {
    let hub = board(dir, MANY)?;
    let out = output(
        command(FARM).args(["tasks", "--hub"]).arg(&hub),
        "farm tasks",
    )?;
    let rows = out.lines().filter(|l| l.contains("t0")).count();
    if rows != MANY {
        return Err(format!("farm tasks listed {rows} tasks, not {MANY}"));
    }
    let v = times(&hub, &["tasks"])?;
    println!("2. farm tasks over {MANY} tasks, {RUNS} runs");
    println!(
        "  farm tasks                   {}   goal <= {TARGET_TASKS_MS:.0} ms: {}",
        summary(&v),
        verdict(median(&v) <= TARGET_TASKS_MS)
    );
    let _ = fs::remove_dir_all(&hub);
    Ok(())
}

/// Part 3.
fn locks(dir: &Path) -> Res<()> {
    let hub = board(dir, 1)?;
    let ids: Vec<String> = (0..MANY).map(id).collect();
    output(
        command(FARM)
            .args(["-q", "claim", "--hub"])
            .arg(&hub)
            .args(&ids),
        "farm claim",
    )?;
    // A listing keeps what it read only of files that last changed two
    // seconds or more before (see src/claims/read_cache.rs); claims in a
    // night are minutes old.
    std::thread::sleep(Duration::from_millis(2100));
    let listed = output(
        command(FARM).args(["locks", "--json", "--hub"]).arg(&hub),
        "farm locks --json",
    )?;
    let doc: serde_json::Value =
        serde_json::from_str(&listed).map_err(|e| format!("farm locks --json: {e}"))?;
    let n = doc["claims"].as_array().map_or(0, Vec::len);
    if n != MANY {
        return Err(format!("farm locks lists {n} claims, not {MANY}"));
    }
    let cache = hub.join("current_tasks").join(".read-cache");
    if !cache.is_file() {
        return Err(format!("no read cache at {}", cache.display()));
    }
    // With no read cache, every claim is opened and read (and the cache
    // written again).
    let mut cold = Vec::new();
    for _ in 0..RUNS {
        fs::remove_file(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        cold.extend(times_n(&hub, &["locks"], 1)?);
    }
    let idle = times(&hub, &["locks"])?;
    let busy = {
        let _load = Workers(vec![
            command("sh")
                .args(["-c", "while :; do :; done"])
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("the busy loop: {e}"))?,
        ]);
        times(&hub, &["locks"])?
    };
    println!("3. farm locks over {MANY} claims (fs store), {RUNS} runs");
    println!(
        "  {:<28} {}   (every claim read: no read cache)",
        "idle, cold",
        summary(&cold)
    );
    for (what, v) in [("idle", &idle), ("one core busy", &busy)] {
        println!(
            "  {what:<28} {}   goal <= {TARGET_LOCKS_MS:.0} ms: {}",
            summary(v),
            verdict(median(v) <= TARGET_LOCKS_MS)
        );
    }
    let _ = fs::remove_dir_all(&hub);
    Ok(())
}
