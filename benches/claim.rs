//! What a claim costs in farm's fs store, and whether it stays exclusive
//! under contention. Run with `cargo bench --bench claim`.
//!
//! **1. Cost per claim + release, uncontended.** One process claims and
//! releases one task over and over in a temp hub, and the median cost per
//! operation is compared with a raw reference on the same directory:
//! `open(O_CREAT|O_EXCL)` of `current_tasks/<task>.txt`, write a buffer as
//! long as a real claim record, close, `unlink`. That is the floor any
//! exclusive file claim must pay: one atomic create that fails if the name
//! exists, and one remove. farm pays more on purpose: it builds the record
//! (a random nonce, TOML), writes it to a private temp file and publishes it
//! with `link(2)`, so a reader never sees a half-written claim, then unlinks
//! the temp name; it releases by renaming the claim aside, checking the
//! inode is its own and only then deleting it, so a claim that was forced
//! away and re-claimed meanwhile is never deleted by the old holder. The
//! `hold` row also takes an OS `flock` on the claim, as a holder process
//! does. The target is farm ≤ 3× raw; it is printed, not asserted,
//! since timings depend on the machine. The variants are interleaved within
//! each sample, so machine noise hits them alike.
//!
//! **2. Claims under contention.** The bench re-executes itself as 16 worker
//! processes (worker mode is chosen by the `FARM_BENCH_WORKER` environment
//! variable, which names the hub). Every worker tries to claim all 2,000
//! task ids in the same order, never releasing, so all 16 race for the same
//! name at once — the worst case for exclusivity. Workers start together
//! when the parent closes their stdin (spawning is not timed); the clock
//! stops when the last one has exited. Each worker prints the ids it won;
//! every task must be won exactly once, and the directory must then hold
//! the 2,000 claims and nothing else. Any duplicate fails the bench.

#[path = "common/process.rs"]
mod process;
use process::Workers;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;
use stats::{max, median, min};
use std::collections::HashSet;
use std::env;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use farm::claims::fs::FsStore;
use farm::claims::record::{Claim, Holder};
use farm::claims::{Attempt, ClaimStore};
use farm::names::CLAIMS_DIR;
use farm::names::TaskId;

/// Set in a worker's environment to the hub it claims in.
const WORKER_ENV: &str = "FARM_BENCH_WORKER";
/// The first line a worker prints once it is ready to start.
const READY: &str = "ready";

const SAMPLES: usize = 15;
const OPS_PER_SAMPLE: u32 = 2_000;
const WARMUP_OPS: u32 = 500;
const TARGET_RATIO: f64 = 3.0;

const WORKERS: usize = 16;
const TASKS: usize = 2_000;
const RUNS: usize = 3;

const TASK: &str = "bench-task";
const AGENT: &str = "bench";

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    // Before anything else: a worker must not run the benchmarks itself.
    if let Some(hub) = env::var_os(WORKER_ENV) {
        return match worker(Path::new(&hub)) {
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
    single()?;
    println!();
    contended()
}

// ---------------------------------------------------------------------------
// 1. Cost per claim + release
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Variant {
    /// O_CREAT|O_EXCL + write + close + unlink.
    Raw,
    /// `try_claim(.., false)` + `release_held`.
    Farm,
    /// `try_claim(.., true)` + `release_held`, with a holder in the record.
    FarmHold,
    /// `Claim::new` + `to_toml` only: the CPU part of a farm claim, no I/O.
    Record,
}

const VARIANTS: [(Variant, &str); 4] = [
    (Variant::Raw, "raw O_EXCL create+write+unlink"),
    (Variant::Farm, "farm try_claim+release_held"),
    (Variant::FarmHold, "farm, hold=true (flock)"),
    (Variant::Record, "  of which: build record, no I/O"),
];

struct Bench {
    store: FsStore,
    task: TaskId,
    raw_path: std::path::PathBuf,
    raw_buf: Vec<u8>,
    holder: Holder,
}

impl Bench {
    /// Run `ops` operations of `variant` and return the time taken.
    fn time(&self, variant: Variant, ops: u32) -> Res<Duration> {
        let start = Instant::now();
        for _ in 0..ops {
            match variant {
                Variant::Raw => self.raw_op()?,
                Variant::Farm => self.farm_op(false)?,
                Variant::FarmHold => self.farm_op(true)?,
                Variant::Record => {
                    let claim = Claim::new(self.task.clone(), AGENT, None, 1, SystemTime::now());
                    std::hint::black_box(claim.to_toml());
                }
            }
        }
        Ok(start.elapsed())
    }

    fn raw_op(&self) -> Res<()> {
        let io_err =
            |what: &str, e: io::Error| format!("raw {what} {}: {e}", self.raw_path.display());
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.raw_path)
            .map_err(|e| io_err("create", e))?;
        file.write_all(&self.raw_buf)
            .map_err(|e| io_err("write", e))?;
        drop(file);
        fs::remove_file(&self.raw_path).map_err(|e| io_err("remove", e))
    }

    fn farm_op(&self, hold: bool) -> Res<()> {
        let holder = hold.then_some(self.holder);
        let claim = Claim::new(self.task.clone(), AGENT, holder, 1, SystemTime::now());
        match self.store.try_claim(claim, hold) {
            Ok(Attempt::Won(held)) => self
                .store
                .release_held(held)
                .map_err(|e| format!("release_held: {e}")),
            Ok(Attempt::Lost(l)) => Err(format!(
                "try_claim lost an uncontended claim to {:?}",
                l.record
            )),
            Err(e) => Err(format!("try_claim: {e}")),
        }
    }
}

fn single() -> Res<()> {
    let hub = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let dir = hub.path().join(CLAIMS_DIR);
    fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let task = TaskId::parse(TASK).map_err(|e| e.to_string())?;
    let record_len = Claim::new(task.clone(), AGENT, None, 1, SystemTime::now())
        .to_toml()
        .len();
    let holder = Holder {
        pid: std::process::id(),
        start: farm::claims::host::own_start().ok_or("cannot read this process's start time")?,
    };
    let bench = Bench {
        store: FsStore::new(hub.path()),
        raw_path: dir.join(format!("{TASK}.txt")),
        raw_buf: vec![b'#'; record_len],
        task,
        holder,
    };

    for (variant, _) in VARIANTS {
        bench.time(variant, WARMUP_OPS)?;
    }
    let mut per_op: Vec<Vec<f64>> = vec![Vec::with_capacity(SAMPLES); VARIANTS.len()];
    for sample in 0..SAMPLES {
        // Rotate the order too, so no variant always runs first after a pause.
        for k in 0..VARIANTS.len() {
            let i = (sample + k) % VARIANTS.len();
            let took = bench.time(VARIANTS[i].0, OPS_PER_SAMPLE)?;
            per_op[i].push(took.as_secs_f64() * 1e6 / f64::from(OPS_PER_SAMPLE));
        }
    }
    let left: Vec<_> = fs::read_dir(&dir)
        .and_then(|d| {
            d.map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()
        })
        .map_err(|e| format!("read {}: {e}", dir.display()))?;
    if !left.is_empty() {
        return Err(format!(
            "claim+release left files behind in {}: {left:?}",
            dir.display()
        ));
    }

    println!(
        "claim + release, uncontended: median of {SAMPLES} samples x {OPS_PER_SAMPLE} ops, \
         record {record_len} bytes, hub in {}",
        env::temp_dir().display()
    );
    println!();
    println!(
        "  {:<34} {:>9} {:>9} {:>9} {:>9}",
        "variant", "µs/op", "min", "max", "vs raw"
    );
    let raw = median(&per_op[0]);
    for ((variant, name), samples) in VARIANTS.iter().zip(&per_op) {
        let (med, lo, hi) = (median(samples), min(samples), max(samples));
        let ratio = match variant {
            Variant::Raw => "-".to_owned(),
            _ => format!("{:.2}x", med / raw),
        };
        println!("  {name:<34} {med:>9.2} {lo:>9.2} {hi:>9.2} {ratio:>9}");
    }
    let farm = median(&per_op[1]);
    let hold = median(&per_op[2]);
    println!();
    for (name, value) in [("farm / raw", farm / raw), ("farm hold / raw", hold / raw)] {
        let verdict = if value <= TARGET_RATIO {
            "meets"
        } else {
            "MISSES"
        };
        println!("  {name:<16} {value:>5.2}x   target <= {TARGET_RATIO:.0}x: {verdict}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Contention
// ---------------------------------------------------------------------------

fn task_ids() -> Vec<TaskId> {
    (0..TASKS)
        .map(|i| TaskId::parse(&format!("t{i:04}")).expect("t0000.. are task ids"))
        .collect()
}

/// A worker: say ready, wait for stdin to close, try every task once, then
/// print the ids won, one a line.
fn worker(hub: &Path) -> Res<()> {
    let store = FsStore::new(hub);
    let tasks = task_ids();
    // Read /proc once now rather than inside the timed part.
    farm::claims::host::Here::current();
    let mut out = io::stdout().lock();
    writeln!(out, "{READY}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    io::stdin()
        .read_to_end(&mut Vec::new())
        .map_err(|e| format!("stdin: {e}"))?;

    let mut won = String::with_capacity(TASKS * 6);
    for task in tasks {
        let claim = Claim::new(task, AGENT, None, 1, SystemTime::now());
        match store.try_claim(claim, false) {
            Ok(Attempt::Won(held)) => {
                won.push_str(held.claim().task.as_str());
                won.push('\n');
                // Dropped without release: the claim stays, as intended.
            }
            Ok(Attempt::Lost(_)) => {}
            Err(e) => return Err(format!("try_claim: {e}")),
        }
    }
    out.write_all(won.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}

struct Contention {
    wall: Duration,
    wins: usize,
    distinct: usize,
}

impl Contention {
    fn duplicates(&self) -> usize {
        self.wins - self.distinct
    }
}

fn contend() -> Res<Contention> {
    let hub = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let dir = hub.path().join(CLAIMS_DIR);
    fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let exe = env::current_exe().map_err(|e| format!("current_exe: {e}"))?;

    let mut workers = Workers(Vec::with_capacity(WORKERS));
    for _ in 0..WORKERS {
        let child = Command::new(&exe)
            .env(WORKER_ENV, hub.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", exe.display()))?;
        workers.0.push(child);
    }
    let mut outs: Vec<BufReader<ChildStdout>> = Vec::with_capacity(WORKERS);
    for child in &mut workers.0 {
        let mut out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| format!("worker stdout: {e}"))?;
        if line.trim_end() != READY {
            return Err(format!("a worker did not get ready (said {line:?})"));
        }
        outs.push(out);
    }

    // Go: every worker sees EOF on stdin at once.
    let start = Instant::now();
    for child in &mut workers.0 {
        drop(child.stdin.take());
    }
    // A worker's output (at most 2,000 short lines) fits in a pipe, so
    // reading the workers in turn cannot stall any of them.
    let mut texts = Vec::with_capacity(WORKERS);
    for (child, out) in workers.0.iter_mut().zip(&mut outs) {
        let mut text = String::new();
        out.read_to_string(&mut text)
            .map_err(|e| format!("worker stdout: {e}"))?;
        let status = child.wait().map_err(|e| format!("wait: {e}"))?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
        texts.push(text);
    }
    let wall = start.elapsed();
    workers.0.clear();

    let valid: HashSet<String> = task_ids().iter().map(|t| t.to_string()).collect();
    let mut won = HashSet::with_capacity(TASKS);
    let mut wins = 0;
    for line in texts.iter().flat_map(|t| t.lines()) {
        if !valid.contains(line) {
            return Err(format!(
                "a worker reported winning {line:?}, which is no task"
            ));
        }
        wins += 1;
        won.insert(line);
    }

    // The directory must hold exactly the claims and no leftovers.
    let mut names = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|e| format!("read {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    let strays: Vec<_> = names
        .iter()
        .filter(|n| n.strip_suffix(".txt").is_none_or(|t| !valid.contains(t)))
        .collect();
    if !strays.is_empty() || names.len() != TASKS {
        return Err(format!(
            "after the race {} holds {} entries, {} of them not claim files: {:?}",
            dir.display(),
            names.len(),
            strays.len(),
            strays.iter().take(10).collect::<Vec<_>>()
        ));
    }

    Ok(Contention {
        wall,
        wins,
        distinct: won.len(),
    })
}

fn contended() -> Res<()> {
    println!(
        "contention: {WORKERS} processes each try all {TASKS} tasks in the same order, \
         no release; {RUNS} runs"
    );
    println!();
    println!(
        "  {:<8} {:>9} {:>10} {:>12} {:>7} {:>9} {:>11}",
        "run", "wall ms", "claims/s", "attempts/s", "wins", "distinct", "duplicates"
    );
    let mut runs = Vec::with_capacity(RUNS);
    let mut failures = Vec::new();
    for i in 1..=RUNS {
        let c = contend()?;
        print_run(&format!("{i}"), &c);
        if c.duplicates() != 0 || c.distinct != TASKS {
            failures.push(format!(
                "run {i}: {} duplicate claims, {} of {TASKS} tasks won",
                c.duplicates(),
                c.distinct
            ));
        }
        runs.push(c);
    }
    runs.sort_by_key(|c| c.wall);
    print_run("median", &runs[runs.len() / 2]);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("EXCLUSIVITY BROKEN — {}", failures.join("; ")))
    }
}

fn print_run(label: &str, c: &Contention) {
    let secs = c.wall.as_secs_f64();
    println!(
        "  {label:<8} {:>9.1} {:>10.0} {:>12.0} {:>7} {:>9} {:>11}",
        secs * 1e3,
        TASKS as f64 / secs,
        (WORKERS * TASKS) as f64 / secs,
        c.wins,
        c.distinct,
        c.duplicates()
    );
}
