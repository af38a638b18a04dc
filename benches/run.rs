//! What `farm run` costs per task, against the same protocol done with the
//! git CLI, and how close 8 agents come to the best possible makespan on a
//! dependency graph. Run with `cargo bench --bench run`.
//!
//! Everything runs the real `farm` binary (`CARGO_BIN_EXE_farm`, which cargo
//! builds for a bench target) on hubs made in a temp dir: `git init -b main`,
//! an empty commit, `farm init`, then the tasks written straight as
//! `tasks/<id>.md` in one commit. git is hermetic (`GIT_CONFIG_GLOBAL=
//! /dev/null`, `GIT_CONFIG_NOSYSTEM=1`, a fixed author and committer). Each
//! run gets a fresh `cp -a` copy of a template hub, its index refreshed (see
//! [`copy_hub`]). Paths given to farm are absolute.
//!
//! **1. Overhead per task.** farm's job is coordination; its cost is what it
//! adds to each agent session. 40 independent tasks are done three ways, with
//! a no-op agent (a `sh` script that appends one line to
//! `work-$FARM_TASK.txt` and commits it):
//!
//! - `farm run --agent NOOP -j 1 -q`: wall time / 40;
//! - `benches/reference_loop.sh HUB NOOP`: the protocol as people ran it by
//!   hand with the git CLI (pull, pick the first task without a committed
//!   lock file, commit and push the lock, run the agent, `git mv` the task to
//!   `tasks/done/`, commit, push, `git rm` the lock, commit, push);
//! - the agent alone, 40 times in a throwaway clone: the floor.
//!
//! Overhead per task is each protocol's time per task minus the agent's. The
//! target is farm ≤ 1/3 of the reference's overhead: farm claims with a file
//! in the hub, not with two extra commits and pushes. The three are
//! interleaved over 3 runs (the order rotates) and medians are reported.
//!
//! **2. Makespan on a DAG.** 8 agents (`-j 8`) on 200 tasks `t000`..`t199`
//! made by a fixed-seed LCG: each depends on 0–3 random earlier tasks and
//! sleeps a known 400–1600 ms (read from `durations/<id>` in the repo), then
//! commits one line. No schedule can beat LB = max(CP, W/8), with CP the
//! longest duration-weighted dependency path and W the total work; the target
//! is makespan ≤ 1.10 × LB. For scale the bench also simulates farm's pick
//! order (the lowest ready id first) with no overhead, and with part 1's
//! per-task overhead added to every task: what is left above that is
//! contention between the 8 loops. Part 2 starts 35 s after part 1 ends
//! (see [`SETTLE`]). The machine's cores are printed: sleeping
//! agents need none, but farm's git work is CPU-bound, and 8 agents share
//! them. The run must leave all 200 tasks in `tasks/done/` on the hub's main,
//! in an order that respects every `after`, no task pending or failed, and no
//! claim in `farm locks --json`; otherwise the bench fails. What the hub
//! survives but should not happen is flagged `!!`: farm exiting non-zero,
//! more sessions than tasks (a task claimed again), rescue branches left.
//!
//! **3. Where the time goes.** One more, untimed run of farm and of the
//! reference on 40 tasks with `git` wrapped on `PATH`: the top-level git
//! commands each runs per task (the agent's own two not counted).
//!
//! Timings are printed with their targets, never asserted: they depend on the
//! machine, and on what else runs on it, so the load average is printed at
//! the start and at the end.

#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;
use process::{Res, git, output, tail, write_executable};
use report::{Lcg, load, verdict};
use stats::{max, median, min};
use std::collections::{BTreeMap, HashMap};
use std::env;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const FARM: &str = env!("CARGO_BIN_EXE_farm");
const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/reference_loop.sh");

/// Part 1: independent tasks per run, and runs of each variant.
const TASKS: usize = 40;
const RUNS: usize = 3;
const TARGET_OVERHEAD_RATIO: f64 = 1.0 / 3.0;

/// Part 2: the DAG.
const DAG_TASKS: usize = 200;
const JOBS: usize = 8;
const MAX_DEPS: u64 = 3;
const MIN_MS: u64 = 400;
const MAX_MS: u64 = 1600;
const SEED: u64 = 2026;
const TARGET_MAKESPAN_RATIO: f64 = 1.10;

/// How long part 2 waits after part 1. On ext4 without a journal (this
/// VM's disk) the inode allocator skips inodes freed in the last 30 s, a
/// lookup each; part 1 frees thousands, and part 2 would pay for them.
const SETTLE: Duration = Duration::from_secs(35);

/// Set for the git wrapper of part 3: the file it logs commands to.
const GIT_LOG_ENV: &str = "FARM_BENCH_GIT_LOG";

const NOOP_AGENT: &str = r#"#!/bin/sh
# The bench's no-op agent: one line of work, committed.
set -e
echo "$FARM_TASK" >> "work-$FARM_TASK.txt"
git add "work-$FARM_TASK.txt"
git commit --quiet -m "work on $FARM_TASK"
"#;

const SLEEP_AGENT: &str = r#"#!/bin/sh
# The DAG bench's agent: sleep as long as durations/$FARM_TASK says, then
# one line of work, committed.
set -e
sleep "$(cat "durations/$FARM_TASK")"
echo "$FARM_TASK" >> "work-$FARM_TASK.txt"
git add "work-$FARM_TASK.txt"
git commit --quiet -m "work on $FARM_TASK"
"#;

fn main() -> ExitCode {
    // Arguments (`--bench`, filters) are cargo's; there is nothing to select.
    report::finish(run())
}

fn run() -> Res<()> {
    let scratch = Scratch::new()?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("farm run bench: {FARM}");
    println!(
        "hubs under {} ({}); this machine has {cores} core(s); load average {}",
        env::temp_dir().display(),
        filesystem(&env::temp_dir()),
        load()
    );
    println!();
    let overhead = overhead(&scratch)?;
    println!();
    makespan(&scratch, cores, overhead)?;
    println!();
    git_commands(&scratch)?;
    println!();
    println!("load average at the end: {}", load());
    Ok(())
}

/// The filesystem `dir` is on, as this bench's figures depend on it: its
/// type, and for ext4 whether it has a journal. Without one (this project's
/// CI VMs) the inode allocator skips every inode freed in the last 30 s, and
/// git's churn of lock files and rewritten files makes every new file dearer
/// (see src/git/workdir.rs); run with `TMPDIR=DIR` to measure elsewhere.
fn filesystem(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    // The longest mount point that contains `dir`.
    let Some((source, kind)) = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && dir.starts_with(f[1])).then(|| (f[1].len(), f[0], f[2]))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, source, kind)| (source, kind))
    else {
        return "filesystem unknown".to_owned();
    };
    if kind != "ext4" {
        return kind.to_owned();
    }
    let device = Path::new(source).file_name().unwrap_or_default();
    let journal = Path::new("/sys/fs/ext4").join(device).join("journal_task");
    match fs::read_to_string(journal) {
        Ok(task) if task.trim() == "<none>" => "ext4 without a journal".to_owned(),
        Ok(_) => "ext4 with a journal".to_owned(),
        Err(_) => "ext4".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Processes, hubs, boards
// ---------------------------------------------------------------------------

/// A command in the bench's hermetic environment.
fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = process::command(program);
    cmd.env_remove(GIT_LOG_ENV);
    cmd
}

/// Run `cmd` with stdout and stderr in `log`; how long it took. A failure
/// quotes the end of the log.
fn timed(cmd: &mut Command, log: &Path, what: &str) -> Res<Duration> {
    let (took, status) = timed_status(cmd, log, what)?;
    if !status.success() {
        return Err(format!("{what}: {status}\n{}", tail(log, 20)));
    }
    Ok(took)
}

/// Like [`timed`], but a failure is the caller's to judge.
fn timed_status(cmd: &mut Command, log: &Path, what: &str) -> Res<(Duration, ExitStatus)> {
    let file = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdout(file).stderr(err);
    let start = Instant::now();
    let status = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    Ok((start.elapsed(), status))
}

/// The bench's temp dir: agents, the git wrapper, hubs and their copies.
struct Scratch {
    tmp: tempfile::TempDir,
    noop: PathBuf,
    sleeper: PathBuf,
}

impl Scratch {
    fn new() -> Res<Scratch> {
        let tmp = tempfile::Builder::new()
            .prefix("farm-bench-run.")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let noop = tmp.path().join("noop-agent.sh");
        let sleeper = tmp.path().join("sleep-agent.sh");
        write_executable(&noop, NOOP_AGENT)?;
        write_executable(&sleeper, SLEEP_AGENT)?;
        Ok(Scratch { tmp, noop, sleeper })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
}

/// A fresh copy of a template hub.
fn copy_hub(template: &Path, dest: &Path) -> Res<()> {
    output(
        command("cp").arg("-a").arg(template).arg(dest),
        "cp -a the template hub",
    )?;
    // The copied index still records the template's inodes and ctimes: until
    // it is refreshed, `git diff-index` sees every tracked file as modified,
    // and `farm run` refuses the hub ("uncommitted changes").
    git(dest, &["update-index", "-q", "--refresh"])?;
    Ok(())
}

fn remove(dir: &Path) {
    let _ = fs::remove_dir_all(dir);
}

/// The board on the hub's main branch.
#[derive(Debug, Default)]
struct Board {
    /// Ids in `tasks/done/`.
    done: Vec<String>,
    /// `tasks/*.md` but README.md.
    pending: Vec<String>,
    failed: Vec<String>,
    /// Files in `current_tasks/` but `.gitignore` and README.md.
    locks: Vec<String>,
    /// `work-*.txt` files at the top.
    work: usize,
}

fn board(hub: &Path) -> Res<Board> {
    let listing = git(hub, &["ls-tree", "-r", "--name-only", "main"])?;
    let mut b = Board::default();
    for path in listing.lines() {
        let id = |p: &str| p.strip_suffix(".md").unwrap_or(p).to_owned();
        if let Some(name) = path.strip_prefix("tasks/done/") {
            b.done.push(id(name));
        } else if let Some(name) = path.strip_prefix("tasks/failed/") {
            b.failed.push(id(name));
        } else if let Some(name) = path.strip_prefix("tasks/") {
            if name != "README.md" && name.ends_with(".md") {
                b.pending.push(id(name));
            }
        } else if let Some(name) = path.strip_prefix("current_tasks/") {
            if name != ".gitignore" && name != "README.md" {
                b.locks.push(name.to_owned());
            }
        } else if path.starts_with("work-") {
            b.work += 1;
        }
    }
    Ok(b)
}

/// Every task done, none pending or failed, no lock file committed, one work
/// file per task.
fn check_board(hub: &Path, tasks: usize, who: &str) -> Res<Board> {
    let b = board(hub)?;
    if b.done.len() != tasks
        || !b.pending.is_empty()
        || !b.failed.is_empty()
        || !b.locks.is_empty()
        || b.work != tasks
    {
        return Err(format!(
            "{who} left the board on {}'s main wrong: {} of {tasks} done, pending {:?}, \
             failed {:?}, lock files {:?}, {} work files",
            hub.display(),
            b.done.len(),
            b.pending,
            b.failed,
            b.locks,
            b.work
        ));
    }
    Ok(b)
}

fn task_id(i: usize, width: usize) -> String {
    format!("t{i:0width$}")
}

fn task_file(id: &str, after: &[String], body: &str) -> String {
    let mut text = format!("+++\ntitle = \"{id}\"\n");
    if !after.is_empty() {
        let quoted: Vec<String> = after.iter().map(|a| format!("\"{a}\"")).collect();
        text.push_str(&format!("after = [{}]\n", quoted.join(", ")));
    }
    text.push_str("+++\n");
    text.push_str(body);
    text
}

/// The template hub of parts 1 and 3: `TASKS` independent tasks.
fn independent_hub(scratch: &Scratch) -> Res<PathBuf> {
    let dir = scratch.path("template-independent");
    let files: Vec<(String, String)> = (0..TASKS)
        .map(|i| {
            let id = task_id(i, 2);
            (format!("tasks/{id}.md"), task_file(&id, &[], ""))
        })
        .collect();
    process::make_hub(FARM, &dir, &files)?;
    Ok(dir)
}

// ---------------------------------------------------------------------------
// 1. Overhead per task
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Variant {
    Farm,
    Reference,
    Alone,
}

const VARIANTS: [(Variant, &str); 3] = [
    (Variant::Farm, "farm run -j 1"),
    (Variant::Reference, "reference_loop.sh (git CLI)"),
    (Variant::Alone, "the agent alone"),
];

/// One run of `variant` on a fresh copy of `template`; its wall time.
fn once(scratch: &Scratch, template: &Path, variant: Variant, tag: &str) -> Res<Duration> {
    let hub = scratch.path(&format!("hub-{tag}"));
    copy_hub(template, &hub)?;
    let log = scratch.path(&format!("log-{tag}.txt"));
    let took = match variant {
        Variant::Farm => {
            let took = timed(
                command(FARM)
                    .args(["run", "--agent"])
                    .arg(&scratch.noop)
                    .args(["-j", "1", "-q", "--hub"])
                    .arg(&hub),
                &log,
                "farm run -j 1",
            )?;
            check_board(&hub, TASKS, "farm run")?;
            took
        }
        Variant::Reference => {
            let took = timed(
                command("bash").arg(REFERENCE).arg(&hub).arg(&scratch.noop),
                &log,
                "reference_loop.sh",
            )?;
            // Its last line is how many tasks it did.
            let said = fs::read_to_string(&log).unwrap_or_default();
            let count = said.lines().last().unwrap_or("").trim();
            if count != TASKS.to_string() {
                return Err(format!(
                    "reference_loop.sh says it did {count:?} tasks, not {TASKS}\n{}",
                    tail(&log, 20)
                ));
            }
            check_board(&hub, TASKS, "reference_loop.sh")?;
            took
        }
        Variant::Alone => {
            let clone = scratch.path(&format!("clone-{tag}"));
            output(
                command("git").arg("clone").arg("-q").arg(&hub).arg(&clone),
                "git clone",
            )?;
            let start = Instant::now();
            for i in 0..TASKS {
                let id = task_id(i, 2);
                let status = command(&scratch.noop)
                    .arg(&id)
                    .env("FARM_TASK", &id)
                    .current_dir(&clone)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map_err(|e| format!("the agent: {e}"))?;
                if !status.success() {
                    return Err(format!("the agent alone failed on {id}: {status}"));
                }
            }
            let took = start.elapsed();
            let commits = git(&clone, &["rev-list", "--count", "origin/main..HEAD"])?;
            if commits.trim() != TASKS.to_string() {
                return Err(format!(
                    "the agent alone made {} commits, not {TASKS}",
                    commits.trim()
                ));
            }
            remove(&clone);
            took
        }
    };
    remove(&hub);
    Ok(took)
}

/// Part 1; returns farm's median overhead per task.
fn overhead(scratch: &Scratch) -> Res<Duration> {
    let template = independent_hub(scratch)?;
    let mut per_task: Vec<Vec<f64>> = vec![Vec::with_capacity(RUNS); VARIANTS.len()];
    for run in 0..RUNS {
        for k in 0..VARIANTS.len() {
            let i = (run + k) % VARIANTS.len();
            let took = once(scratch, &template, VARIANTS[i].0, &format!("{run}-{i}"))?;
            per_task[i].push(took.as_secs_f64() * 1e3 / TASKS as f64);
        }
    }

    println!(
        "1. overhead per task: {TASKS} independent tasks, one agent, a no-op agent \
         (append a line, commit)"
    );
    println!("   median of {RUNS} runs of each, interleaved; every run on a fresh copy of the hub");
    println!();
    println!(
        "  {:<30} {:>9} {:>9} {:>9} {:>12}",
        "variant", "ms/task", "min", "max", "overhead"
    );
    let medians: Vec<f64> = per_task.iter().map(|s| median(s)).collect();
    let alone = medians[2];
    for ((variant, name), samples) in VARIANTS.iter().zip(&per_task) {
        let med = median(samples);
        let over = match variant {
            Variant::Alone => "-".to_owned(),
            _ => format!("{:.1}", med - alone),
        };
        println!(
            "  {name:<30} {med:>9.1} {:>9.1} {:>9.1} {over:>12}",
            min(samples),
            max(samples)
        );
    }
    let farm = medians[0] - alone;
    let reference = medians[1] - alone;
    let ratio = farm / reference;
    println!();
    println!("  overhead = ms/task - the agent alone's ms/task");
    println!(
        "  farm / reference overhead  {ratio:>5.2}   target <= {TARGET_OVERHEAD_RATIO:.2}: {}",
        verdict(ratio <= TARGET_OVERHEAD_RATIO)
    );
    println!(
        "  farm / reference wall      {:>5.2}",
        medians[0] / medians[1]
    );
    Ok(Duration::from_secs_f64(farm.max(0.0) / 1e3))
}

// ---------------------------------------------------------------------------
// 2. Makespan on a DAG
// ---------------------------------------------------------------------------

struct Dag {
    /// For each task, the earlier tasks it depends on, sorted.
    after: Vec<Vec<usize>>,
    /// For each task, how long its agent sleeps.
    ms: Vec<u64>,
}

impl Dag {
    fn generate() -> Dag {
        let mut rng = Lcg(SEED);
        let mut after = Vec::with_capacity(DAG_TASKS);
        let mut ms = Vec::with_capacity(DAG_TASKS);
        for i in 0..DAG_TASKS {
            let want = (rng.below(MAX_DEPS + 1) as usize).min(i);
            let mut deps: Vec<usize> = Vec::with_capacity(want);
            while deps.len() < want {
                let d = rng.below(i as u64) as usize;
                if !deps.contains(&d) {
                    deps.push(d);
                }
            }
            deps.sort_unstable();
            after.push(deps);
            ms.push(MIN_MS + rng.below(MAX_MS - MIN_MS + 1));
        }
        Dag { after, ms }
    }

    fn id(i: usize) -> String {
        task_id(i, 3)
    }

    fn work_ms(&self) -> u64 {
        self.ms.iter().sum()
    }

    /// The longest duration-weighted path; tasks only depend on earlier ones.
    fn critical_path_ms(&self) -> u64 {
        let mut finish = vec![0u64; self.ms.len()];
        for i in 0..self.ms.len() {
            let ready = self.after[i].iter().map(|&d| finish[d]).max().unwrap_or(0);
            finish[i] = ready + self.ms[i];
        }
        finish.into_iter().max().unwrap_or(0)
    }

    fn edges(&self) -> usize {
        self.after.iter().map(Vec::len).sum()
    }

    /// Greedy list scheduling as farm picks: whenever an agent is free it
    /// takes the lowest ready id; each task occupies its agent for its
    /// duration plus `overhead_ms`. The makespan in ms.
    fn simulate(&self, jobs: usize, overhead_ms: f64) -> f64 {
        let n = self.ms.len();
        let mut done = vec![false; n];
        let mut started = vec![false; n];
        // (finish time, task) of what runs now.
        let mut running: Vec<(f64, usize)> = Vec::with_capacity(jobs);
        let mut now = 0.0;
        loop {
            while running.len() < jobs {
                let Some(next) =
                    (0..n).find(|&i| !started[i] && self.after[i].iter().all(|&d| done[d]))
                else {
                    break;
                };
                started[next] = true;
                running.push((now + self.ms[next] as f64 + overhead_ms, next));
            }
            let Some(first) = running
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.0.total_cmp(&b.1.0))
                .map(|(k, _)| k)
            else {
                break;
            };
            let (at, task) = running.swap_remove(first);
            now = at;
            done[task] = true;
        }
        now
    }

    fn files(&self) -> Vec<(String, String)> {
        let mut files = Vec::with_capacity(2 * self.ms.len());
        for (i, (after, ms)) in self.after.iter().zip(&self.ms).enumerate() {
            let id = Dag::id(i);
            let after: Vec<String> = after.iter().map(|&d| Dag::id(d)).collect();
            let secs = format!("{}.{:03}", ms / 1000, ms % 1000);
            let body = format!("Sleep {secs} s (durations/{id}), then commit one line.\n");
            files.push((format!("tasks/{id}.md"), task_file(&id, &after, &body)));
            files.push((format!("durations/{id}"), format!("{secs}\n")));
        }
        files
    }
}

/// Part 2.
fn makespan(scratch: &Scratch, cores: usize, overhead: Duration) -> Res<()> {
    let dag = Dag::generate();
    let hub = scratch.path("hub-dag");
    process::make_hub(FARM, &hub, &dag.files())?;
    println!(
        "   (waiting {}s first: part 1's deleted files would otherwise slow this part's, see above)",
        SETTLE.as_secs()
    );
    std::thread::sleep(SETTLE);
    let log = scratch.path("log-dag.txt");
    let (wall, status) = timed_status(
        command(FARM)
            .args(["run", "--agent"])
            .arg(&scratch.sleeper)
            .args(["-j", &JOBS.to_string(), "--hub"])
            .arg(&hub),
        &log,
        &format!("farm run -j {JOBS}"),
    )?;

    // Did it do the work, all of it, in an order the DAG allows?
    let notes = fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    // The hub is the judge of what was done, not farm's summary: a loop that
    // ends in an error loses its count.
    let done = check_board(&hub, DAG_TASKS, &format!("farm run -j {JOBS}"))
        .map_err(|e| format!("{e}\n{}", tail(&log, 20)))?
        .done
        .len();
    check_order(&hub, &dag)?;
    let summary = notes
        .lines()
        .rev()
        .find(|l| l.contains(" session(s): "))
        .unwrap_or("(no summary)");
    let rescued: Vec<String> = git(
        &hub,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/farm/",
        ],
    )?
    .lines()
    .map(str::to_owned)
    .collect();
    let locks = output(
        command(FARM).args(["locks", "--json", "--hub"]).arg(&hub),
        "farm locks --json",
    )?;
    let locks: serde_json::Value =
        serde_json::from_str(&locks).map_err(|e| format!("farm locks --json: {e}"))?;
    let claims = locks["claims"]
        .as_array()
        .ok_or("farm locks --json has no `claims` array")?;
    if !claims.is_empty() {
        return Err(format!("claims left after the run: {claims:?}"));
    }
    let rejected = notes.matches("push rejected").count();
    let lost = notes.matches("lost the race").count();
    let unready = notes.matches("is not ready on the branch").count();
    // Sessions as claims won ("vm-3: claimed `t012` (attempt 1 of 3)"): the
    // summary misses those of a loop that ended in an error.
    let mut won: BTreeMap<&str, usize> = BTreeMap::new();
    for line in notes.lines() {
        if let Some(id) = line
            .split_once(": claimed `")
            .and_then(|(_, rest)| rest.split('`').next())
        {
            *won.entry(id).or_insert(0) += 1;
        }
    }
    let sessions: usize = won.values().sum();
    let again: Vec<&str> = won
        .iter()
        .filter(|&(_, &n)| n > 1)
        .map(|(&id, _)| id)
        .collect();
    // What farm said about sessions that did not end in a clean push.
    let trouble: Vec<&str> = notes
        .lines()
        .filter(|l| {
            [
                "conflict with",
                "could not",
                "failed (",
                "taken away",
                "error:",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .collect();

    let w = dag.work_ms() as f64;
    let cp = dag.critical_path_ms() as f64;
    let lb = cp.max(w / JOBS as f64);
    let ideal = dag.simulate(JOBS, 0.0);
    let with_overhead = dag.simulate(JOBS, overhead.as_secs_f64() * 1e3);
    let span = wall.as_secs_f64() * 1e3;
    let ratio = span / lb;

    println!(
        "2. makespan: {JOBS} agents (-j {JOBS}) on a {DAG_TASKS}-task DAG ({} edges, \
         0-{MAX_DEPS} deps each, seed {SEED}),",
        dag.edges()
    );
    println!(
        "   each task sleeps {MIN_MS}-{MAX_MS} ms then commits; the {JOBS} agents share \
         this machine's {cores} core(s)"
    );
    println!();
    let row = |name: &str, ms: f64, note: &str| {
        println!("  {name:<46} {:>8.2} s   {note}", ms / 1e3);
    };
    row("total work W", w, "");
    row("critical path CP", cp, "");
    row(&format!("W / {JOBS}"), w / JOBS as f64, "");
    row("lower bound LB = max(CP, W/8)", lb, "");
    row(
        "simulated: farm's pick order, no overhead",
        ideal,
        &format!("{:.2} x LB", ideal / lb),
    );
    row(
        &format!(
            "simulated: + part 1's {:.0} ms/task overhead",
            overhead.as_secs_f64() * 1e3
        ),
        with_overhead,
        &format!("{:.2} x LB", with_overhead / lb),
    );
    row(
        &format!("makespan: wall of farm run -j {JOBS}"),
        span,
        &format!("{ratio:.2} x LB"),
    );
    println!();
    println!(
        "  makespan / LB  {ratio:>5.2}   target <= {TARGET_MAKESPAN_RATIO:.2}: {}",
        verdict(ratio <= TARGET_MAKESPAN_RATIO)
    );
    println!(
        "  tasks done     {done:>5}   of {DAG_TASKS}: all in tasks/done/ on main, in dependency \
         order; no claim left"
    );
    let bang = |bad: bool| if bad { "!!" } else { "  " };
    println!(
        "{} farm run       exit {}; it said `{}`",
        bang(!status.success()),
        status
            .code()
            .map_or_else(|| status.to_string(), |c| c.to_string()),
        summary.trim()
    );
    println!(
        "{} sessions       {sessions:>5}   (claims won) for {DAG_TASKS} tasks; {} task(s) \
         claimed more than once{}",
        bang(sessions != DAG_TASKS),
        again.len(),
        if again.is_empty() {
            String::new()
        } else {
            format!(": {}", shorten(&again.join(" "), 80))
        }
    );
    println!(
        "{} rescue branches {:>4}   left on the hub (farm/rescue/...)",
        bang(!rescued.is_empty()),
        rescued.len()
    );
    println!(
        "   pushes rejected {rejected:>4}   (main moved: fetch, rebase, push again); \
         claim races lost: {lost}; not ready on the branch once claimed: {unready}"
    );
    if !trouble.is_empty() {
        println!(
            "!! farm's notes on sessions that did not end in a clean push ({}; first 6):",
            trouble.len()
        );
        for line in trouble.iter().take(6) {
            println!("     {}", shorten(line.trim(), 140));
        }
    }
    remove(&hub);
    Ok(())
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

/// Every task's "done" commit on main comes after those of the tasks it
/// depends on.
fn check_order(hub: &Path, dag: &Dag) -> Res<()> {
    let subjects = git(hub, &["log", "--reverse", "--format=%s", "main"])?;
    let mut at: HashMap<String, usize> = HashMap::new();
    for (n, s) in subjects.lines().enumerate() {
        if let Some(id) = s
            .strip_prefix("farm: `")
            .and_then(|r| r.strip_suffix("` done"))
        {
            // The first: a task run twice must not hide a wrong order.
            at.entry(id.to_owned()).or_insert(n);
        }
    }
    for (i, after) in dag.after.iter().enumerate() {
        let id = Dag::id(i);
        let mine = at
            .get(&id)
            .ok_or_else(|| format!("no `farm: `{id}` done` commit on main"))?;
        for &d in after {
            let dep = Dag::id(d);
            match at.get(&dep) {
                Some(theirs) if theirs < mine => {}
                _ => return Err(format!("`{id}` was done before `{dep}`, which it is after")),
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 3. git commands per task
// ---------------------------------------------------------------------------

/// Logs the subcommand to $FARM_BENCH_GIT_LOG, then runs the real git (@GIT@).
const GIT_WRAPPER: &str = r#"#!/bin/sh
skip=
sub=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case $a in
    -C|-c) skip=1 ;;
    -*) ;;
    *) sub=$a; break ;;
  esac
done
echo "${FARM_TASK:+agent }$sub" >> "$FARM_BENCH_GIT_LOG"
exec '@GIT@' "$@"
"#;

/// Find a program on PATH.
fn which(name: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A `git` that logs its subcommand (prefixed `agent ` inside a session,
/// where FARM_TASK is set), then runs the real one.
fn git_wrapper(scratch: &Scratch) -> Res<PathBuf> {
    let real = which("git").ok_or("no git on PATH")?;
    let dir = scratch.path("wrapped");
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let script = GIT_WRAPPER.replace("@GIT@", &real.display().to_string());
    write_executable(&dir.join("git"), &script)?;
    Ok(dir)
}

/// Part 3.
fn git_commands(scratch: &Scratch) -> Res<()> {
    let template = scratch.path("template-independent");
    let wrapped = git_wrapper(scratch)?;
    let path = env::join_paths(
        std::iter::once(wrapped).chain(env::split_paths(&env::var_os("PATH").unwrap_or_default())),
    )
    .map_err(|e| format!("PATH: {e}"))?;
    let mut counts: Vec<BTreeMap<String, usize>> = Vec::new();
    for (variant, tag) in [(Variant::Farm, "farm"), (Variant::Reference, "reference")] {
        let hub = scratch.path(&format!("hub-count-{tag}"));
        copy_hub(&template, &hub)?;
        let log = scratch.path(&format!("log-count-{tag}.txt"));
        let gitlog = scratch.path(&format!("git-count-{tag}.txt"));
        let mut cmd = match variant {
            Variant::Farm => {
                let mut c = command(FARM);
                c.args(["run", "--agent"])
                    .arg(&scratch.noop)
                    .args(["-j", "1", "-q", "--hub"])
                    .arg(&hub);
                c
            }
            _ => {
                let mut c = command("bash");
                c.arg(REFERENCE).arg(&hub).arg(&scratch.noop);
                c
            }
        };
        cmd.env("PATH", &path).env(GIT_LOG_ENV, &gitlog);
        timed(&mut cmd, &log, tag)?;
        check_board(&hub, TASKS, tag)?;
        let text = fs::read_to_string(&gitlog).map_err(|e| format!("{}: {e}", gitlog.display()))?;
        let mut c = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with("agent ")) {
            *c.entry(line.to_owned()).or_insert(0) += 1;
        }
        counts.push(c);
        remove(&hub);
    }

    println!(
        "3. git commands per task, outside the agent: one more, untimed run of each on \
         {TASKS} tasks, git wrapped on PATH"
    );
    println!(
        "   top-level commands only; each may start more git processes (fetch -> \
         upload-pack, push -> receive-pack, auto-maintenance)"
    );
    println!();
    let mut names: Vec<&String> = counts.iter().flat_map(|c| c.keys()).collect();
    names.sort();
    names.dedup();
    let per = |c: &BTreeMap<String, usize>, name: &str| {
        c.get(name).copied().unwrap_or(0) as f64 / TASKS as f64
    };
    names.sort_by(|a, b| {
        per(&counts[0], b)
            .total_cmp(&per(&counts[0], a))
            .then(per(&counts[1], b).total_cmp(&per(&counts[1], a)))
            .then(a.cmp(b))
    });
    println!("  {:<16} {:>8} {:>10}", "git command", "farm", "reference");
    for name in names {
        println!(
            "  {name:<16} {:>8.2} {:>10.2}",
            per(&counts[0], name),
            per(&counts[1], name)
        );
    }
    let total = |c: &BTreeMap<String, usize>| c.values().sum::<usize>() as f64 / TASKS as f64;
    println!(
        "  {:<16} {:>8.2} {:>10.2}",
        "total",
        total(&counts[0]),
        total(&counts[1])
    );
    Ok(())
}
