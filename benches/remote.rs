//! What a claim costs in farm's `git` claim store, against the git push it is
//! built on, and how many claims per second eight machines get through one
//! remote. Run with `cargo bench --bench remote`.
//!
//! The hub is "another machine": bare repositories (`git init --bare -b
//! main`, one commit on `main` pushed from a scratch repository) served by
//! `git daemon` on 127.0.0.1, which the bench starts on a free port in a
//! process group of its own and kills (group and all) when it ends, on
//! failure too; killed itself, the bench takes the daemon with it (the
//! parent-death signal). Every claim goes through
//! `git://127.0.0.1:PORT/<hub>.git`. (The daemon's default limit of 32
//! connections is left as it is: at most 9 are open at once here.) git is
//! hermetic (`GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`,
//! a fixed author and committer), set in the bench's own environment before
//! anything runs, so the store's git commands and every child get it.
//!
//! **1. An uncontended claim.** One [`GitStore`] claims a fresh task id
//! (`try_claim`) and, untimed, releases it, 50 times. The store keeps the
//! last tip it saw, so such a claim is four local plumbing commands
//! (`hash-object`, `mktree` twice, `commit-tree`) and one `git push`. The
//! reference is the floor of any compare-and-swap through a git remote: one
//! plain `git push --porcelain URL HEAD:refs/heads/bench/push` from a plain
//! clone, a one-commit fast-forward of another branch of the same hub (the
//! commit is made before the clock starts; only the push is timed). The
//! target is claim ≤ 1.5 × push. For scale, the bench also times `farm claim
//! TASK --hub URL` as a whole process (a separate hub on the same daemon, so
//! that its claims do not move the store's branch): with one state dir
//! reused, and with a new one each time (the cache repository made first).
//! Either way the process knows no tip and must fetch before it pushes; these
//! two run in every second sample only. The four are interleaved within each
//! sample, the order rotating, so machine noise hits them alike.
//!
//! **2. Claims under contention.** The bench re-executes itself as 8 worker
//! processes (worker mode is chosen by the `FARM_BENCH_REMOTE_WORKER`
//! environment variable, which names the hub's URL), each a machine of its
//! own: a cache repository of its own, one `GitStore`. All try to claim the
//! same 200 task ids, worker i starting at offset i × 200 / 8 and wrapping
//! round, never releasing, until each has tried every task; so their claims
//! race on the branch's tip, and in the end on the same tasks. Each worker
//! fetches the tip before it says it is ready; they start together when the
//! parent closes their stdin (spawning is not timed). Each attempt reports
//! when it returned, so claims per second is 200 / the time until the last
//! task was won; the time until the last worker has tried everything (and
//! lost the rest) is printed too. Two runs, each on a fresh hub. For scale,
//! one worker alone claims the same 200 tasks on a hub of its own.
//!
//! After each race, untimed, the bench counts the claim commits each worker
//! made in its cache: the store makes one (with a random operation id) for
//! each push it tries, so this is how many compare-and-swap rounds every
//! `try_claim` pushed in — 1 a claim uncontended; the store gives up with
//! `Busy` after 256 rounds.
//!
//! Correctness fails the bench: every task must be won by exactly one
//! worker, and `farm locks --json --hub URL` (a process with a state dir of
//! its own) must then list exactly the 200 claims, each with the agent of
//! the worker that reported winning it. A `try_claim` that returns an error
//! is quoted as it is and flagged `!!`: the worker goes on to its next task,
//! and the bench fails only if the error left a task unclaimed.
//!
//! Timings are printed with their targets, never asserted: they depend on the
//! machine, and on what else runs on it, so the load average is printed at
//! the start and at the end.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;
use daemon::Daemon;
use process::{FARM_ENV, GIT_ENV, Res, Workers, command, git, output};
use report::{load, verdict};
use stats::{max, median, min};
use std::collections::{BTreeMap, HashMap};
use std::env;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use farm::claims::git::GitStore;
use farm::claims::record::Claim;
use farm::claims::{Attempt, ClaimStore};
use farm::names::TaskId;

const FARM: &str = env!("CARGO_BIN_EXE_farm");

/// Set in a worker's environment to the hub's URL.
const WORKER_ENV: &str = "FARM_BENCH_REMOTE_WORKER";
/// The worker's index, and how many workers there are.
const INDEX_ENV: &str = "FARM_BENCH_REMOTE_INDEX";
const COUNT_ENV: &str = "FARM_BENCH_REMOTE_COUNT";
/// The worker's cache repository.
const CACHE_ENV: &str = "FARM_BENCH_REMOTE_CACHE";
/// The first line a worker prints once it is ready to start.
const READY: &str = "ready";

/// Part 1.
const SAMPLES: usize = 50;
const WARMUP: usize = 3;
/// The CLI rows, only for scale and slower, run in every second sample.
const CLI_EVERY: usize = 2;
const TARGET_RATIO: f64 = 1.5;
const AGENT: &str = "bench";

/// Part 2.
const WORKERS: usize = 8;
const TASKS: usize = 200;
const RUNS: usize = 2;
/// The store's compare-and-swap rounds before it gives up (`Busy`):
/// `ROUNDS` in src/claims/git.rs, private there.
const STORE_ROUNDS: usize = 256;

fn main() -> ExitCode {
    // SAFETY: the first thing the bench does, before any thread exists.
    unsafe {
        for (key, value) in GIT_ENV {
            env::set_var(key, value);
        }
        for key in FARM_ENV {
            env::remove_var(key);
        }
    }
    // Before anything else: a worker must not run the benchmarks itself.
    if let Some(url) = env::var_os(WORKER_ENV) {
        return match worker(&url.to_string_lossy()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench worker {}: {e}", std::process::id());
                ExitCode::FAILURE
            }
        };
    }
    // Arguments (`--bench`, filters) are cargo's; there is nothing to select.
    report::finish(run())
}

fn run() -> Res<()> {
    let scratch = tempfile::Builder::new()
        .prefix("farm-bench-remote.")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let base = scratch.path().join("served");
    fs::create_dir(&base).map_err(|e| format!("create {}: {e}", base.display()))?;
    let mut hubs = vec!["hub".to_owned(), "cli".to_owned(), "solo".to_owned()];
    hubs.extend((1..=RUNS).map(|i| format!("race{i}")));
    make_hubs(scratch.path(), &base, &hubs)?;
    // Declared after the temp dir, so dropped (killed) before it is removed.
    let daemon = Daemon::start(&base)?;

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("farm git claim store bench: {FARM}");
    println!(
        "hubs served by git daemon at git://127.0.0.1:{}/ from {}; this machine has {cores} \
         core(s); load average {}",
        daemon.port,
        base.display(),
        load()
    );
    println!();
    let single = uncontended(scratch.path(), &daemon)?;
    println!();
    let solo = race(scratch.path(), &daemon, "solo", 1)?;
    println!();
    let contended = contended(scratch.path(), &daemon)?;
    println!();
    summary(&single, &solo, &contended);
    println!();
    println!("load average at the end: {}", load());
    let failures: Vec<String> = std::iter::once(&solo)
        .chain(&contended)
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.hub)))
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("CLAIMS WRONG — {}", failures.join("; ")))
    }
}

// ---------------------------------------------------------------------------
// Hubs
// ---------------------------------------------------------------------------

/// `git init --bare -b main <base>/<name>.git` for each name, each given the
/// same first commit on `main`, pushed from a scratch repository.
fn make_hubs(scratch: &Path, base: &Path, names: &[String]) -> Res<()> {
    let first = scratch.join("first");
    git(
        scratch,
        &["init", "-q", "-b", "main", &first.display().to_string()],
    )?;
    git(&first, &["commit", "-q", "--allow-empty", "-m", "initial"])?;
    for name in names {
        let hub = base.join(format!("{name}.git"));
        let hub = hub.display().to_string();
        git(base, &["init", "-q", "--bare", "-b", "main", &hub])?;
        git(&first, &["push", "-q", &hub, "main"])?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 1. An uncontended claim
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Variant {
    /// `store.try_claim` of a fresh task, release untimed.
    Claim,
    /// `git push --porcelain` of a one-commit fast-forward, commit untimed.
    Push,
    /// `farm claim TASK --hub URL`, one state dir throughout.
    Cli,
    /// The same with a new state dir each time.
    CliNew,
}

const VARIANTS: [(Variant, &str); 4] = [
    (Variant::Claim, "farm GitStore::try_claim"),
    (Variant::Push, "reference: git push --porcelain"),
    (Variant::Cli, "farm claim (CLI), state dir reused"),
    (Variant::CliNew, "farm claim (CLI), new state dir"),
];

struct Single {
    /// Milliseconds per operation, by variant.
    ms: Vec<Vec<f64>>,
}

impl Single {
    fn median(&self, v: Variant) -> f64 {
        median(&self.ms[v as usize])
    }
}

struct Bench<'a> {
    scratch: &'a Path,
    hub_url: String,
    cli_url: String,
    store: GitStore,
    clone: PathBuf,
    work: PathBuf,
    cli_state: PathBuf,
    n: usize,
}

impl Bench<'_> {
    /// One operation of `variant`, and how long its timed part took.
    fn time(&mut self, variant: Variant) -> Res<Duration> {
        self.n += 1;
        let n = self.n;
        match variant {
            Variant::Claim => {
                let task = TaskId::parse(&format!("u{n:04}")).map_err(|e| e.to_string())?;
                let claim = Claim::new(task.clone(), AGENT, None, 1, SystemTime::now());
                let start = Instant::now();
                let got = self.store.try_claim(claim, false);
                let took = start.elapsed();
                match got {
                    Ok(Attempt::Won(held)) => self
                        .store
                        .release_held(held)
                        .map_err(|e| format!("release_held({task}): {e}"))?,
                    Ok(Attempt::Lost(l)) => {
                        return Err(format!(
                            "try_claim lost the uncontended claim of {task} to {}",
                            l.who()
                        ));
                    }
                    Err(e) => return Err(format!("try_claim({task}): {e}")),
                }
                Ok(took)
            }
            Variant::Push => {
                git(
                    &self.clone,
                    &["commit", "-q", "--allow-empty", "-m", &format!("push {n}")],
                )?;
                let mut cmd = command("git");
                cmd.arg("-C").arg(&self.clone).args([
                    "push",
                    "--porcelain",
                    &self.hub_url,
                    "HEAD:refs/heads/bench/push",
                ]);
                let start = Instant::now();
                let out = output(&mut cmd, "git push (the reference)")?;
                let took = start.elapsed();
                // `<flag>\t<from>:<to>\t<summary>`: ` ` fast-forward, `*` new.
                let landed = out.lines().any(|l| {
                    (l.starts_with(' ') || l.starts_with('*'))
                        && l.contains(":refs/heads/bench/push\t")
                });
                if !landed {
                    return Err(format!("the reference push did not land:\n{out}"));
                }
                Ok(took)
            }
            Variant::Cli | Variant::CliNew => {
                let state = match variant {
                    Variant::Cli => self.cli_state.clone(),
                    _ => self.scratch.join(format!("cli-new/{n}")),
                };
                let task = format!("c{n:04}");
                let mut cmd = command(FARM);
                cmd.args(["-q", "claim", &task, "--hub", &self.cli_url])
                    .env("FARM_STATE_DIR", &state)
                    .env("FARM_AGENT", AGENT)
                    .current_dir(&self.work);
                let start = Instant::now();
                output(
                    &mut cmd,
                    &format!("farm claim {task} --hub {}", self.cli_url),
                )?;
                Ok(start.elapsed())
            }
        }
    }
}

fn uncontended(scratch: &Path, daemon: &Daemon) -> Res<Single> {
    let hub_url = daemon.url("hub");
    let clone = scratch.join("reference-clone");
    git(
        scratch,
        &["clone", "-q", &hub_url, &clone.display().to_string()],
    )?;
    let work = scratch.join("work");
    fs::create_dir(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    let store = GitStore::open(&hub_url, &scratch.join("state/claims.git"))
        .map_err(|e| format!("GitStore::open({hub_url}): {e}"))?;
    let mut bench = Bench {
        scratch,
        hub_url,
        cli_url: daemon.url("cli"),
        store,
        clone,
        work,
        cli_state: scratch.join("cli-state"),
        n: 0,
    };

    // Warm up: the store's first claim fetches, the first push makes the
    // branch, the first CLI run makes the reused state dir.
    for _ in 0..WARMUP {
        for (variant, _) in VARIANTS {
            bench.time(variant)?;
        }
    }
    let mut ms: Vec<Vec<f64>> = vec![Vec::with_capacity(SAMPLES); VARIANTS.len()];
    for sample in 0..SAMPLES {
        for k in 0..VARIANTS.len() {
            let i = (sample + k) % VARIANTS.len();
            let cli = matches!(VARIANTS[i].0, Variant::Cli | Variant::CliNew);
            if cli && sample % CLI_EVERY != 0 {
                continue;
            }
            let took = bench.time(VARIANTS[i].0)?;
            ms[i].push(took.as_secs_f64() * 1e3);
        }
    }
    // Every claim was released: the store's branch must be empty again.
    let left = bench
        .store
        .list()
        .map_err(|e| format!("list {}: {e}", bench.hub_url))?;
    if !left.is_empty() {
        let names: Vec<&str> = left.iter().map(|l| l.name.as_str()).collect();
        return Err(format!(
            "claim + release left claims on {}: {names:?}",
            bench.hub_url
        ));
    }

    println!(
        "an uncontended claim through git://127.0.0.1: medians of {SAMPLES} samples \
         ({} of the CLI), interleaved, after {WARMUP} warm-up rounds",
        SAMPLES.div_ceil(CLI_EVERY)
    );
    println!();
    println!(
        "  {:<36} {:>9} {:>9} {:>9} {:>9}",
        "variant", "ms/op", "min", "max", "vs push"
    );
    let single = Single { ms };
    let push = single.median(Variant::Push);
    for ((variant, name), samples) in VARIANTS.iter().zip(&single.ms) {
        let (med, lo, hi) = (median(samples), min(samples), max(samples));
        let ratio = match variant {
            Variant::Push => "-".to_owned(),
            _ => format!("{:.2}x", med / push),
        };
        println!("  {name:<36} {med:>9.2} {lo:>9.2} {hi:>9.2} {ratio:>9}");
    }
    let ratio = single.median(Variant::Claim) / push;
    println!();
    println!(
        "  try_claim / push {ratio:>5.2}x   target <= {TARGET_RATIO}x: {}",
        verdict(ratio <= TARGET_RATIO)
    );
    Ok(single)
}

/// The 90th percentile (nearest rank).
fn p90(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() * 9).div_ceil(10).saturating_sub(1)]
}

// ---------------------------------------------------------------------------
// 2. Claims under contention
// ---------------------------------------------------------------------------

fn task_ids() -> Vec<TaskId> {
    (0..TASKS)
        .map(|i| TaskId::parse(&format!("t{i:04}")).expect("t0000.. are task ids"))
        .collect()
}

fn env_number(key: &str) -> Res<usize> {
    env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{key} is not set to a number"))
}

fn micros_since_epoch(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()
}

fn agent_of(index: usize) -> String {
    format!("w{index}")
}

/// A worker: open the store, learn the tip, say ready, wait for stdin to
/// close, then try every task once from its offset on, never releasing.
/// One line per attempt: `won|lost TASK MICROS AT`, or `error TASK MICROS AT
/// WHY`: how long `try_claim` took, and when it returned (µs since the epoch).
fn worker(url: &str) -> Res<()> {
    let index = env_number(INDEX_ENV)?;
    let count = env_number(COUNT_ENV)?;
    let cache = env::var_os(CACHE_ENV).ok_or(format!("{CACHE_ENV} is not set"))?;
    let store =
        GitStore::open(url, Path::new(&cache)).map_err(|e| format!("GitStore::open: {e}"))?;
    let agent = agent_of(index);
    let tasks = task_ids();
    // Fetch the tip and read /proc now rather than inside the timed part.
    store.list().map_err(|e| format!("list: {e}"))?;
    farm::claims::host::Here::current();
    let mut out = io::stdout().lock();
    writeln!(out, "{READY}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    io::stdin()
        .read_to_end(&mut Vec::new())
        .map_err(|e| format!("stdin: {e}"))?;

    let offset = index * TASKS / count;
    let mut report = String::with_capacity(TASKS * 20);
    for k in 0..TASKS {
        let task = tasks[(offset + k) % TASKS].clone();
        let claim = Claim::new(task.clone(), &agent, None, 1, SystemTime::now());
        let start = Instant::now();
        let got = store.try_claim(claim, false);
        let us = start.elapsed().as_micros();
        let at = micros_since_epoch(SystemTime::now());
        let line = match got {
            // Dropped without release: the claim stays, as intended.
            Ok(Attempt::Won(_)) => format!("won {task} {us} {at}"),
            Ok(Attempt::Lost(_)) => format!("lost {task} {us} {at}"),
            Err(e) => format!("error {task} {us} {at} {e}"),
        };
        report.push_str(&line.replace('\n', " "));
        report.push('\n');
    }
    out.write_all(report.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// One race: its figures and what went wrong.
struct Race {
    hub: String,
    workers: usize,
    /// From the start until the last worker exited.
    wall: Duration,
    /// From the start until the last claim was won: every task claimed.
    all_claimed: Duration,
    /// Claims won, by worker.
    per_worker: Vec<usize>,
    /// The (first) winner of each task won.
    winners: BTreeMap<String, usize>,
    attempts: usize,
    wins: usize,
    distinct: usize,
    duplicates: usize,
    missing: usize,
    /// Listed by `farm locks --json` afterwards.
    listed: usize,
    /// (worker, task, what try_claim returned), verbatim.
    errors: Vec<(usize, String, String)>,
    /// try_claim latency in ms, by outcome.
    won_ms: Vec<f64>,
    lost_ms: Vec<f64>,
    /// Correctness failures: any fails the bench.
    failures: Vec<String>,
    /// Push attempts of each try_claim that made at least one: one claim
    /// commit per compare-and-swap round.
    pushes: Vec<usize>,
}

impl Race {
    /// Tasks claimed over the time until all were.
    fn claims_per_sec(&self) -> f64 {
        self.distinct as f64 / self.all_claimed.as_secs_f64()
    }
}

/// One race of `workers` processes on a fresh hub, checked.
fn race(scratch: &Path, daemon: &Daemon, hub: &str, workers: usize) -> Res<Race> {
    let url = daemon.url(hub);
    let reports = run_workers(scratch, &url, hub, workers)?;
    let mut r = tally(hub, workers, &reports)?;
    check_locks(scratch, &url, &mut r)?;
    for i in 0..workers {
        let made = claim_commits(&cache_of(scratch, hub, i), &agent_of(i))?;
        r.pushes.extend(made.into_values());
    }
    print_race(&r);
    Ok(r)
}

/// What the workers of one race said, and when.
struct Reports {
    /// µs since the epoch when they were told to go.
    started_at: u128,
    wall: Duration,
    /// Each worker's report.
    texts: Vec<String>,
}

/// Start `workers` workers on `url`, let them go together, and collect
/// their reports.
fn run_workers(scratch: &Path, url: &str, hub: &str, workers: usize) -> Res<Reports> {
    let exe = env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut children = Workers(Vec::with_capacity(workers));
    for i in 0..workers {
        let mut cmd = command(&exe);
        farm::procs::die_with_parent(&mut cmd);
        let child = cmd
            .env(WORKER_ENV, url)
            .env(INDEX_ENV, i.to_string())
            .env(COUNT_ENV, workers.to_string())
            .env(CACHE_ENV, cache_of(scratch, hub, i))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", exe.display()))?;
        children.0.push(child);
    }
    let mut outs = Vec::with_capacity(workers);
    for child in &mut children.0 {
        let mut out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| format!("worker stdout: {e}"))?;
        if line.trim_end() != READY {
            return Err(format!("a worker did not get ready (said {line:?})"));
        }
        outs.push(out);
    }

    // Go: every worker sees EOF on stdin at once. Their reports are read
    // on threads, so that no worker can stall on a full pipe.
    let start = Instant::now();
    let started_at = micros_since_epoch(SystemTime::now());
    for child in &mut children.0 {
        drop(child.stdin.take());
    }
    let readers: Vec<_> = outs
        .into_iter()
        .map(|mut out| {
            std::thread::spawn(move || {
                let mut text = String::new();
                out.read_to_string(&mut text).map(|_| text)
            })
        })
        .collect();
    for child in &mut children.0 {
        let status = child.wait().map_err(|e| format!("wait: {e}"))?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    let wall = start.elapsed();
    children.0.clear();
    let mut texts = Vec::with_capacity(workers);
    for reader in readers {
        let text = reader
            .join()
            .map_err(|_| "a reader thread panicked".to_owned())?
            .map_err(|e| format!("worker stdout: {e}"))?;
        texts.push(text);
    }
    Ok(Reports {
        started_at,
        wall,
        texts,
    })
}

/// Who won what, by the workers' own account: exactly one winner a task.
fn tally(hub: &str, workers: usize, reports: &Reports) -> Res<Race> {
    let tasks: Vec<String> = task_ids().iter().map(|t| t.to_string()).collect();
    let mut winners: BTreeMap<&str, Vec<usize>> =
        tasks.iter().map(|t| (t.as_str(), Vec::new())).collect();
    let mut r = Race {
        hub: hub.to_owned(),
        workers,
        wall: reports.wall,
        all_claimed: Duration::ZERO,
        per_worker: vec![0; workers],
        winners: BTreeMap::new(),
        pushes: Vec::new(),
        attempts: 0,
        wins: 0,
        distinct: 0,
        duplicates: 0,
        missing: 0,
        listed: 0,
        errors: Vec::new(),
        won_ms: Vec::new(),
        lost_ms: Vec::new(),
        failures: Vec::new(),
    };
    for (i, text) in reports.texts.iter().enumerate() {
        for line in text.lines() {
            let mut f = line.splitn(5, ' ');
            let (kind, task) = (f.next(), f.next());
            let us = f.next().and_then(|u| u.parse::<f64>().ok());
            let at = f.next().and_then(|a| a.parse::<u128>().ok());
            let (Some(kind), Some(task), Some(us), Some(at)) = (kind, task, us, at) else {
                return Err(format!("worker {i} said {line:?}"));
            };
            let ms = us / 1e3;
            let Some(won_by) = winners.get_mut(task) else {
                return Err(format!("worker {i} tried {task:?}, which is no task"));
            };
            r.attempts += 1;
            match kind {
                "won" => {
                    won_by.push(i);
                    r.wins += 1;
                    r.per_worker[i] += 1;
                    r.won_ms.push(ms);
                    let after = Duration::from_micros(
                        u64::try_from(at.saturating_sub(reports.started_at)).unwrap_or(u64::MAX),
                    );
                    r.all_claimed = r.all_claimed.max(after);
                }
                "lost" => r.lost_ms.push(ms),
                "error" => r
                    .errors
                    .push((i, task.to_owned(), f.next().unwrap_or("").to_owned())),
                _ => return Err(format!("worker {i} said {line:?}")),
            }
        }
    }
    if r.attempts != workers * TASKS {
        r.failures.push(format!(
            "the workers reported {} attempts, not {}",
            r.attempts,
            workers * TASKS
        ));
    }
    let mut dups = Vec::new();
    let mut missing = Vec::new();
    for (task, won_by) in &winners {
        match won_by.len() {
            0 => missing.push(*task),
            1 => {}
            _ => dups.push(format!("{task} by {won_by:?}")),
        }
    }
    r.winners = winners
        .iter()
        .filter_map(|(task, w)| Some(((*task).to_owned(), *w.first()?)))
        .collect();
    r.distinct = r.winners.len();
    r.duplicates = r.wins - r.distinct;
    r.missing = missing.len();
    if !dups.is_empty() {
        r.failures.push(format!(
            "EXCLUSIVITY BROKEN: {} task(s) won twice: {}",
            dups.len(),
            dups.join(", ")
        ));
    }
    if !missing.is_empty() {
        r.failures.push(format!(
            "{} task(s) won by nobody: {missing:?}",
            missing.len()
        ));
    }
    Ok(r)
}

/// Worker `i`'s cache repository.
fn cache_of(scratch: &Path, hub: &str, i: usize) -> PathBuf {
    scratch.join(format!("caches/{hub}/w{i}"))
}

/// The claim commits `agent` made in its cache, by task. The store makes
/// one (with a random operation id) for every push it tries, and these
/// workers make no others: this is how many compare-and-swap rounds each
/// `try_claim` pushed in. Read after the race, untimed.
fn claim_commits(cache: &Path, agent: &str) -> Res<HashMap<String, usize>> {
    let listing = git(
        cache,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objecttype) %(objectname)",
        ],
    )?;
    let commits: String = listing
        .lines()
        .filter_map(|l| l.strip_prefix("commit "))
        .map(|oid| format!("{oid}\n"))
        .collect();
    let mut child = command("git")
        .arg("-C")
        .arg(cache)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("git cat-file in {}: {e}", cache.display()))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || stdin.write_all(commits.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| format!("git cat-file in {}: {e}", cache.display()))?;
    let _ = writer.join();
    // `farm: claim `TASK` for AGENT@HOST`
    let mine = format!("` for {agent}@");
    let mut made: HashMap<String, usize> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((task, rest)) = line
            .strip_prefix("farm: claim `")
            .and_then(|l| l.split_once('`'))
            && format!("`{rest}").starts_with(&mine)
        {
            *made.entry(task.to_owned()).or_default() += 1;
        }
    }
    Ok(made)
}

/// What the hub itself holds, as another machine lists it: `farm locks
/// --json` must list each task once, for the worker that won it.
fn check_locks(scratch: &Path, url: &str, r: &mut Race) -> Res<()> {
    let hub = &r.hub;
    let state = scratch.join(format!("locks-state/{hub}"));
    let json = output(
        command(FARM)
            .args(["locks", "--json", "--hub", url])
            .env("FARM_STATE_DIR", &state)
            .current_dir(scratch),
        &format!("farm locks --json --hub {url}"),
    )?;
    let doc: serde_json::Value =
        serde_json::from_str(&json).map_err(|e| format!("farm locks --json: {e}:\n{json}"))?;
    let claims = doc["claims"]
        .as_array()
        .ok_or_else(|| format!("farm locks --json has no claims array:\n{json}"))?;
    r.listed = claims.len();
    let mut listed: HashMap<&str, &str> = HashMap::new();
    for c in claims {
        let task = c["task"].as_str().unwrap_or("?");
        let agent = c["agent"].as_str().unwrap_or("?");
        if listed.insert(task, agent).is_some() {
            r.failures
                .push(format!("farm locks lists {task} more than once"));
        }
    }
    if r.listed != TASKS {
        r.failures
            .push(format!("farm locks lists {} claims, not {TASKS}", r.listed));
    }
    let mut wrong = Vec::new();
    for task in task_ids() {
        let task = task.as_str();
        let want = r.winners.get(task).map(|&i| agent_of(i));
        let have = listed.get(task).map(|a| (*a).to_owned());
        if want != have {
            wrong.push(format!(
                "{task}: won by {}, listed for {}",
                want.as_deref().unwrap_or("nobody"),
                have.as_deref().unwrap_or("nobody")
            ));
        }
    }
    if !wrong.is_empty() {
        r.failures.push(format!(
            "farm locks disagrees with the winners on {} task(s): {}",
            wrong.len(),
            wrong
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok(())
}

fn contended(scratch: &Path, daemon: &Daemon) -> Res<Vec<Race>> {
    println!(
        "contention: {WORKERS} processes, each with its own cache, try all {TASKS} tasks, \
         worker i from offset i*{TASKS}/{WORKERS}, no release; {RUNS} runs, a fresh hub each"
    );
    let mut runs = Vec::with_capacity(RUNS);
    for i in 1..=RUNS {
        println!();
        runs.push(race(scratch, daemon, &format!("race{i}"), WORKERS)?);
    }
    Ok(runs)
}

fn print_race(r: &Race) {
    println!(
        "  {} ({} worker(s)): all {TASKS} claimed after {:.2} s: {:.1} claims/s; \
         last worker done after {:.2} s ({:.1} attempts/s)",
        r.hub,
        r.workers,
        r.all_claimed.as_secs_f64(),
        r.claims_per_sec(),
        r.wall.as_secs_f64(),
        r.attempts as f64 / r.wall.as_secs_f64(),
    );
    println!(
        "    wins {} distinct {} duplicates {} missing {}; farm locks lists {}; \
         wins by worker {:?}",
        r.wins, r.distinct, r.duplicates, r.missing, r.listed, r.per_worker
    );
    let pushes: usize = r.pushes.iter().sum();
    let most = r.pushes.iter().copied().max().unwrap_or(0);
    let over_half = r.pushes.iter().filter(|&&p| p > STORE_ROUNDS / 2).count();
    println!(
        "    pushes tried {pushes} for {} claims ({:.2} a claim); the most by one try_claim \
         {most} of the store's {STORE_ROUNDS} rounds; try_claims over {} rounds: {over_half}",
        r.distinct,
        pushes as f64 / r.distinct.max(1) as f64,
        STORE_ROUNDS / 2
    );
    for (label, ms) in [("won", &r.won_ms), ("lost", &r.lost_ms)] {
        if !ms.is_empty() {
            println!(
                "    try_claim {label:<4} x{:<5} median {:>8.1} ms  p90 {:>8.1}  \
                 min {:>8.1}  max {:>8.1}",
                ms.len(),
                median(ms),
                p90(ms),
                min(ms),
                max(ms)
            );
        }
    }
    if !r.errors.is_empty() {
        println!(
            "    !! {} try_claim error(s) (the worker went on):",
            r.errors.len()
        );
        for (worker, task, why) in &r.errors {
            println!("    !!   worker {worker}, {task}: {why}");
        }
    }
    for f in &r.failures {
        println!("    !!!! {f}");
    }
}

// ---------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------

fn pushes_a_claim(r: &Race) -> f64 {
    r.pushes.iter().sum::<usize>() as f64 / r.distinct.max(1) as f64
}

fn summary(single: &Single, solo: &Race, contended: &[Race]) {
    let claim = single.median(Variant::Claim);
    let push = single.median(Variant::Push);
    let ratio = claim / push;
    let rates: Vec<f64> = contended.iter().map(Race::claims_per_sec).collect();
    let rate = median(&rates);
    let cps: Vec<String> = contended
        .iter()
        .map(|r| {
            format!(
                "{:.1} in {:.1} s",
                r.claims_per_sec(),
                r.all_claimed.as_secs_f64()
            )
        })
        .collect();
    let dups: usize = contended.iter().map(|r| r.duplicates).sum::<usize>() + solo.duplicates;
    let missing: usize = contended.iter().map(|r| r.missing).sum::<usize>() + solo.missing;
    let listed: Vec<String> = std::iter::once(solo)
        .chain(contended)
        .map(|r| r.listed.to_string())
        .collect();
    let errors: usize = contended.iter().map(|r| r.errors.len()).sum::<usize>() + solo.errors.len();

    let rows: Vec<(String, String, String)> = vec![
        (
            "uncontended try_claim, median".into(),
            format!("<= {TARGET_RATIO} x push"),
            format!(
                "{claim:.1} ms vs push {push:.1} ms: {ratio:.2}x ({})",
                verdict(ratio <= TARGET_RATIO)
            ),
        ),
        (
            "farm claim CLI, state dir reused".into(),
            "(for scale)".into(),
            format!(
                "{:.1} ms ({:.2}x push)",
                single.median(Variant::Cli),
                single.median(Variant::Cli) / push
            ),
        ),
        (
            "farm claim CLI, new state dir".into(),
            "(for scale)".into(),
            format!(
                "{:.1} ms ({:.2}x push)",
                single.median(Variant::CliNew),
                single.median(Variant::CliNew) / push
            ),
        ),
        (
            format!("1 process x {TASKS} tasks"),
            "(for scale)".into(),
            format!(
                "{:.1} claims/s ({:.1} s)",
                solo.claims_per_sec(),
                solo.all_claimed.as_secs_f64()
            ),
        ),
        (
            format!("{WORKERS} processes x {TASKS} tasks, median of {RUNS}"),
            "-".into(),
            format!(
                "{rate:.1} claims/s ({:.2}x one process; runs: {})",
                rate / solo.claims_per_sec(),
                cps.join(", ")
            ),
        ),
        (
            "pushes a claim: 1 process / 8 processes".into(),
            "1 / -".into(),
            format!(
                "{:.2} / {}",
                pushes_a_claim(solo),
                contended
                    .iter()
                    .map(|r| format!("{:.2}", pushes_a_claim(r)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        (
            "most rounds in one try_claim (8 processes)".into(),
            format!("< {STORE_ROUNDS} (then Busy)"),
            contended
                .iter()
                .map(|r| r.pushes.iter().max().unwrap_or(&0).to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "duplicates / tasks won by nobody".into(),
            "0 / 0".into(),
            format!("{dups} / {missing}"),
        ),
        (
            "claims listed by farm locks --json".into(),
            format!("{TASKS} each run"),
            listed.join(", "),
        ),
        (
            "try_claim errors".into(),
            "0".into(),
            format!("{errors}{}", if errors > 0 { "  !!" } else { "" }),
        ),
    ];
    println!("summary");
    println!();
    let w0 = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
    println!("  {:<w0$}  {:<w1$}  measured", "figure", "target");
    for (figure, target, measured) in &rows {
        println!("  {figure:<w0$}  {target:<w1$}  {measured}");
    }
}
