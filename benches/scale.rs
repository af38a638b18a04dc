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
//! board is larger). Beside it, in the same rounds, git alone: the same
//! difference for `reference_loop.sh` (the claim protocol by hand with the
//! git CLI, one loop; see the `run` bench) on the same two boards, whose
//! ratio is what the work tree's size costs git itself — every file of
//! the board is in each clone, and git's own commands read them all.
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
//! **4. Disk over a night** (`cargo bench --bench scale -- disk`, alone):
//! `farm run -j 2` to the end of a board of [`NIGHTS`] tasks (500, then
//! 5,000), an agent that makes an empty commit, on a local bare hub with
//! its own state dir. For each: the wall a task (the whole run's, its
//! first tenth's and its last tenth's, from the journal's `done` lines),
//! what the state dir and the hub hold on disk (blocks, as `du`; a
//! file's links counted once), a task's share of that, and the loose
//! objects and packs of the hub, the agents' clones and the claims cache.
//! Every agent's commit must be on the hub's branch or the bench fails.
//! Goals: disk a task at 5,000 within 1.3× of that at 500; state dir and
//! hub ≤ 200 MB at 5,000; a task's wall at 5,000 within 1.3× of that at 500.
//!
//! Timings are printed with their goals, never asserted; the load average
//! is printed at the start and the end. Name parts to run only those
//! (`cargo bench --bench scale -- tasks locks`): `per-task`, `tasks`,
//! `locks`, `disk`; with none, parts 1 to 3 run.

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
const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference_loop.sh");
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
/// Part 4's boards, run to their end.
const NIGHTS: [usize; 2] = [500, 5_000];
const TARGET_DISK_MB: f64 = 200.0;

/// Part 4's agent: a commit with no change, so that what the repositories
/// hold is farm's own writing (the board's moves), not the agent's.
const EMPTY_AGENT: &str = r#"#!/bin/sh
set -e
git commit --quiet --allow-empty -m "work on $FARM_TASK"
"#;

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
    // The parts named on the command line (cargo adds `--bench`), else
    // the first three.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |part: &str| {
        if named.is_empty() {
            part != "disk"
        } else {
            named.iter().any(|n| n == part)
        }
    };
    type Part = fn(&Path) -> Res<()>;
    let parts: [(&str, Part); 4] = [
        ("per-task", per_task),
        ("tasks", tasks),
        ("locks", locks),
        ("disk", disk),
    ];
    if let Some(unknown) = named.iter().find(|n| !parts.iter().any(|(p, _)| p == n)) {
        return Err(format!(
            "no part `{unknown}`: per-task, tasks, locks or disk"
        ));
    }
    for (name, part) in parts {
        if wanted(name) {
            println!();
            part(dir)?;
        }
    }
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
    // Per board: the per-task cost and the start-up of each round; and
    // git alone's per-task cost.
    let mut per: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    let mut startup: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    let mut git_alone: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
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
            let few = ms(reference_run(&agent, &templates[i], FEW, dir)?);
            let many = ms(reference_run(&agent, &templates[i], MANY_SESSIONS, dir)?);
            git_alone[i].push((many - few) / (MANY_SESSIONS - FEW) as f64);
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
    println!("  git alone (reference_loop.sh, one loop), the same difference:");
    for (i, n) in [SMALL, LARGE].iter().enumerate() {
        println!("  {n:>6} tasks on the board   {}", summary(&git_alone[i]));
    }
    println!(
        "  ratio {LARGE} / {SMALL}, git alone {:>6.2} x   (farm's floor while every file is in each clone)",
        median(&git_alone[1]) / median(&git_alone[0])
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
    // Every run here stops at --max-sessions with tasks left on the board,
    // and farm says so with exit 6 ("ended with work left"); the count of
    // tasks done below is what tells whether it did its part.
    if !matches!(status.code(), Some(0 | 6)) {
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

/// `reference_loop.sh` on a fresh copy of `template`, stopped after
/// `tasks` tasks; its wall, once it said it did them all.
fn reference_run(agent: &Path, template: &Path, tasks: usize, dir: &Path) -> Res<Duration> {
    let hub = dir.join("hub-reference.git");
    let _ = fs::remove_dir_all(&hub);
    output(command("cp").arg("-a").arg(template).arg(&hub), "cp -a")?;
    let start = Instant::now();
    let said = output(
        command("bash")
            .arg(REFERENCE)
            .arg(&hub)
            .arg(agent)
            .env("REFERENCE_MAX", tasks.to_string())
            .env("TMPDIR", dir),
        "reference_loop.sh",
    )?;
    let took = start.elapsed();
    if said.trim() != tasks.to_string() {
        return Err(format!(
            "reference_loop.sh says it did {said:?} tasks, not {tasks}"
        ));
    }
    let _ = fs::remove_dir_all(&hub);
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

/// What a night left: its wall per task and the repositories' disk.
struct Night {
    tasks: usize,
    wall: Duration,
    /// Milliseconds a task over the first and the last tenth of the run.
    first_tenth: f64,
    last_tenth: f64,
    /// Bytes on disk: the state dir, the hub.
    state: u64,
    hub: u64,
    repos: Vec<Objects>,
}

/// One repository's objects.
struct Objects {
    name: String,
    loose: usize,
    loose_bytes: u64,
    packs: usize,
    pack_bytes: u64,
}

/// Part 4.
fn disk(dir: &Path) -> Res<()> {
    let agent = dir.join("empty-agent.sh");
    write_executable(&agent, EMPTY_AGENT)?;
    let mut nights = Vec::new();
    for n in NIGHTS {
        nights.push(night(dir, &agent, n)?);
    }
    println!(
        "4. disk over a night: farm run -j {JOBS} to the end of the board, an agent that \
         commits nothing, local bare hub"
    );
    let row = |what: &str, f: &dyn Fn(&Night) -> String| {
        let cells: Vec<String> = nights.iter().map(|n| format!("{:>18}", f(n))).collect();
        println!("  {what:<34}{}", cells.join(""));
    };
    row("tasks", &|n| n.tasks.to_string());
    row("wall", &|n| format!("{:.1} s", n.wall.as_secs_f64()));
    row("ms a task, whole run", &|n| {
        format!("{:.1}", ms(n.wall) / n.tasks as f64)
    });
    row("ms a task, first tenth", &|n| {
        format!("{:.1}", n.first_tenth)
    });
    row("ms a task, last tenth", &|n| format!("{:.1}", n.last_tenth));
    let mb = |b: u64| b as f64 / 1e6;
    row("state dir + hub, MB", &|n| {
        format!("{:.1}", mb(n.state + n.hub))
    });
    row("  state dir, MB", &|n| format!("{:.1}", mb(n.state)));
    row("  hub, MB", &|n| format!("{:.1}", mb(n.hub)));
    row("KB a task", &|n| {
        format!("{:.1}", (n.state + n.hub) as f64 / 1e3 / n.tasks as f64)
    });
    let names: Vec<String> = nights[0].repos.iter().map(|r| r.name.clone()).collect();
    for name in &names {
        let of = |n: &Night| {
            n.repos
                .iter()
                .find(|r| &r.name == name)
                .map(|r| format!("{} ({:.1} MB)", r.loose, mb(r.loose_bytes)))
        };
        row(&format!("loose objects: {name}"), &|n| {
            of(n).unwrap_or_default()
        });
        let packs = |n: &Night| {
            n.repos
                .iter()
                .find(|r| &r.name == name)
                .map(|r| format!("{} ({:.1} MB)", r.packs, mb(r.pack_bytes)))
        };
        row(&format!("packs: {name}"), &|n| packs(n).unwrap_or_default());
    }
    let (small, large) = (&nights[0], &nights[1]);
    let per = |n: &Night| (n.state + n.hub) as f64 / n.tasks as f64;
    let disk_ratio = per(large) / per(small);
    println!(
        "  disk a task, {} / {}          {disk_ratio:>6.2} x   goal <= {TARGET_RATIO:.1}: {}",
        large.tasks,
        small.tasks,
        verdict(disk_ratio <= TARGET_RATIO)
    );
    let total = mb(large.state + large.hub);
    println!(
        "  state dir + hub at {}        {total:>6.1} MB  goal <= {TARGET_DISK_MB:.0} MB: {}",
        large.tasks,
        verdict(total <= TARGET_DISK_MB)
    );
    let wall = |n: &Night| ms(n.wall) / n.tasks as f64;
    let cost_ratio = wall(large) / wall(small);
    println!(
        "  ms a task, {} / {}           {cost_ratio:>6.2} x   goal <= {TARGET_RATIO:.1}: {}",
        large.tasks,
        small.tasks,
        verdict(cost_ratio <= TARGET_RATIO)
    );
    Ok(())
}

/// One night of part 4: `farm run` to the end of a fresh board of `n`
/// tasks; checks that every agent commit landed, then measures.
fn night(dir: &Path, agent: &Path, n: usize) -> Res<Night> {
    let work = board(dir, n)?;
    let hub = dir.join(format!("night-{n}.git"));
    let state = dir.join(format!("night-{n}-state"));
    // `--no-local`: the hub's objects are its own, not links to the
    // template's, and packed as a clone from a server would have them.
    output(
        command("git")
            .args(["clone", "-q", "--bare", "--no-local"])
            .arg(&work)
            .arg(&hub),
        "git clone --bare",
    )?;
    let _ = fs::remove_dir_all(&work);
    let log = dir.join(format!("night-{n}.log"));
    let file = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let status = command(FARM)
        .args(["run", "-q", "-j", JOBS, "--agent"])
        .arg(agent)
        .arg("--hub")
        .arg(&hub)
        .env("FARM_STATE_DIR", &state)
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|e| format!("farm run: {e}"))?;
    let wall = start.elapsed();
    if !status.success() {
        return Err(format!("farm run: {status}\n{}", tail(&log, 20)));
    }
    // Nothing lost: every task done, and each agent commit on the branch.
    let listing = git(&hub, &["ls-tree", "--name-only", "main", "tasks/done/"])?;
    let done = listing.lines().filter(|l| l.ends_with(".md")).count();
    let subjects = git(&hub, &["log", "--format=%s", "main"])?;
    let landed = subjects
        .lines()
        .filter(|l| l.starts_with("work on "))
        .count();
    if done != n || landed != n {
        return Err(format!(
            "farm run did {done} tasks and landed {landed} agent commits, not {n}\n{}",
            tail(&log, 20)
        ));
    }
    let (first_tenth, last_tenth) = tenths(&state.join("journal.jsonl"), n)?;
    let mut repos = vec![objects("hub", &hub)];
    let clones = state.join("clones");
    let mut names: Vec<_> = fs::read_dir(&clones)
        .map_err(|e| format!("{}: {e}", clones.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.path().join(".git").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut all = Objects {
        name: format!("{} clones", names.len()),
        loose: 0,
        loose_bytes: 0,
        packs: 0,
        pack_bytes: 0,
    };
    for name in &names {
        let o = objects(name, &clones.join(name).join(".git"));
        all.loose += o.loose;
        all.loose_bytes += o.loose_bytes;
        all.packs += o.packs;
        all.pack_bytes += o.pack_bytes;
    }
    repos.push(all);
    let cache = state.join("claims.git");
    if cache.is_dir() {
        repos.push(objects("claims cache", &cache));
    }
    let night = Night {
        tasks: n,
        wall,
        first_tenth,
        last_tenth,
        state: du(&state),
        hub: du(&hub),
        repos,
    };
    let _ = fs::remove_dir_all(&hub);
    let _ = fs::remove_dir_all(&state);
    Ok(night)
}

/// Milliseconds a task over the first and the last tenth of the `done`
/// lines of a journal of `n` tasks.
fn tenths(journal: &Path, n: usize) -> Res<(f64, f64)> {
    let text = fs::read_to_string(journal).map_err(|e| format!("{}: {e}", journal.display()))?;
    // `"at":"2026-12-03T07:57:25.730Z"`: seconds of the day, carried over
    // midnight.
    let mut at = Vec::new();
    let mut day = 0.0;
    for line in text.lines().filter(|l| l.contains(r#""event":"done""#)) {
        let time = line
            .split(r#""at":""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|stamp| stamp.split('T').nth(1))
            .ok_or_else(|| format!("no time in the journal's line {line}"))?;
        let hms: Vec<f64> = time
            .trim_end_matches('Z')
            .split(':')
            .map(|f| f.parse().unwrap_or(0.0))
            .collect();
        let secs = hms.iter().fold(0.0, |acc, f| acc * 60.0 + f);
        if at
            .last()
            .is_some_and(|&last: &f64| secs + day < last - 3600.0)
        {
            day += 86_400.0;
        }
        at.push(secs + day);
    }
    if at.len() != n {
        return Err(format!("the journal has {} done lines, not {n}", at.len()));
    }
    let tenth = n / 10;
    let first = (at[tenth] - at[0]) / tenth as f64 * 1e3;
    let last = (at[n - 1] - at[n - 1 - tenth]) / tenth as f64 * 1e3;
    Ok((first, last))
}

/// The loose objects and packs of the repository whose git dir is `git_dir`.
fn objects(name: &str, git_dir: &Path) -> Objects {
    let mut o = Objects {
        name: name.to_owned(),
        loose: 0,
        loose_bytes: 0,
        packs: 0,
        pack_bytes: 0,
    };
    let objects = git_dir.join("objects");
    for entry in fs::read_dir(&objects).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.len() == 2 && name.chars().all(|c| c.is_ascii_hexdigit()) {
            for file in fs::read_dir(entry.path()).into_iter().flatten().flatten() {
                o.loose += 1;
                o.loose_bytes += du(&file.path());
            }
        }
    }
    for entry in fs::read_dir(objects.join("pack"))
        .into_iter()
        .flatten()
        .flatten()
    {
        o.pack_bytes += du(&entry.path());
        if entry.path().extension().is_some_and(|e| e == "pack") {
            o.packs += 1;
        }
    }
    o
}

/// What `path` holds on disk, as `du` counts it: blocks, each file once
/// however many links it has.
fn du(path: &Path) -> u64 {
    fn walk(path: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = fs::symlink_metadata(path) else {
            return 0;
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            return 0;
        }
        let mut bytes = meta.blocks() * 512;
        if meta.is_dir() {
            for entry in fs::read_dir(path).into_iter().flatten().flatten() {
                bytes += walk(&entry.path(), seen);
            }
        }
        bytes
    }
    walk(path, &mut std::collections::HashSet::new())
}
