//! What a night of farm costs the machine it runs on: the supervisor's
//! memory with 16 sessions running, and how `farm status` and `farm locks`
//! cope with a night's worth of journal and claims. Run with
//! `cargo bench --bench overnight`.
//!
//! Everything runs the real `farm` binary (`CARGO_BIN_EXE_farm`) on hubs
//! made in a temp dir as `benches/run.rs` makes them: `git init -b main`, an
//! empty commit, `farm init`, then the tasks written straight as
//! `tasks/<id>.md` in one commit; git is hermetic (`GIT_CONFIG_GLOBAL=
//! /dev/null`, `GIT_CONFIG_NOSYSTEM=1`, a fixed author and committer).
//!
//! **1. Supervisor memory at -j 16.** A hub with 16 tasks and `farm run
//! --agent "sh IDLE" -j 16 --state-dir DIR -q`, where the idle agent touches
//! a marker file named after its task, then waits (polling every 0.2 s, at
//! most 60 s) for a release file, then commits one line. Once all 16 markers
//! are there, all 16 sessions run at once; the bench then samples `VmHWM`
//! (peak resident set) and `VmRSS` of the farm process alone — not its
//! children — from `/proc/<pid>/status` for one second. Target: VmHWM
//! ≤ 15 MB (1 MB = 1024 kB, as /proc counts). Then it creates the release
//! file, follows the run to its end (the last VmHWM seen covers the 16
//! integrations too), and checks the hub: all 16 tasks in `tasks/done/` on
//! main, no claim left, farm exiting 0. For scale: the peak RSS of a short
//! `farm locks` (`/usr/bin/time -f %M` when present, otherwise VmHWM
//! sampled while it runs) and of a `sleep 5` process.
//!
//! **2. `farm status` over a 10,000-session journal.** A synthetic
//! `journal.jsonl` in a state dir, written line by line as
//! `src/run/journal.rs` writes them: a `run_start` whose pid is a process that
//! has exited (so the run reads as ended), then for each of 10,000 sessions
//! `claim` {task, attempt}, `session_end` {task, attempt, outcome, class,
//! secs, log, and no cost: `null`} and `done` {task}, spread over 16 agents working side by side
//! through a ten-hour night (lines in time order), and a `run_end`. `farm
//! status --state-dir DIR` and `--json` on a small hub are timed (15 runs
//! each, interleaved, order rotating); the reference is the same commands
//! with an empty journal in another state dir on the same hub, so the ratio
//! is the journal's share. Target: median ≤ 100 ms. `--json` must report
//! `totals.sessions` and `totals.done` = 10,000 and the one run as ended, or
//! the bench fails.
//!
//! **3. `farm locks` over 10,000 claims.** `farm claim` makes one claim (no
//! holder process) in a hub; the bench then writes 9,999 more files in
//! `current_tasks/` in the same format (the same record with another task id
//! and nonce), and lets them settle two seconds (see the scale bench). `farm locks` and `farm locks --json` are timed (15 runs each,
//! interleaved with the references): `sh -c 'ls -l current_tasks | wc -l'`
//! on the same directory, and `farm locks` on a hub with no claims. Target:
//! median ≤ 100 ms. `--json` must list 10,000 claims, none corrupt, and the
//! table 10,000 rows, or the bench fails.
//!
//! Timings and sizes are printed with their targets, never asserted: they
//! depend on the machine and on what else runs on it, so the load average
//! is printed at the start and at the end.

#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;
use process::{Res, command, git, output, tail, write_executable, write_file};
use report::{Lcg, load, verdict};
use stats::{max, median, min};
use std::collections::{BTreeMap, HashSet};
use std::env;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use farm::run::journal::Event;
use serde_json::{Value, json};

const FARM: &str = env!("CARGO_BIN_EXE_farm");
const TIME: &str = "/usr/bin/time";

/// Part 1.
const JOBS: usize = 16;
const TARGET_HWM_MB: f64 = 15.0;
/// How long all 16 agents may take to start.
const START_WITHIN: Duration = Duration::from_secs(90);
/// How long the bench samples once all 16 run.
const SAMPLE_FOR: Duration = Duration::from_secs(1);
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// How long the run may take to end once the agents are released.
const END_WITHIN: Duration = Duration::from_secs(90);

/// Part 2.
const SESSIONS: usize = 10_000;
const AGENTS: usize = 16;
const NIGHT_SECS: u64 = 10 * 3600;
/// Parts 2 and 3.
const RUNS: usize = 15;
const TARGET_MS: f64 = 100.0;

/// Part 3.
const CLAIMS: usize = 10_000;

/// The idle agent: @MARKERS@ and @RELEASE@ are replaced with paths.
const IDLE_AGENT: &str = r#"#!/bin/sh
# The overnight bench's idle agent: say it started, wait for the release
# file (at most 60 s), say it stopped waiting, then one line of work,
# committed. The prompt (the last argument) is ignored.
set -e
touch '@MARKERS@'/"$FARM_TASK"
i=0
while [ ! -e '@RELEASE@' ] && [ "$i" -lt 300 ]; do
  sleep 0.2
  i=$((i + 1))
done
touch '@MARKERS@'/"$FARM_TASK.gone"
echo "$FARM_TASK" >> "work-$FARM_TASK.txt"
git add "work-$FARM_TASK.txt"
git commit --quiet -m "work on $FARM_TASK"
"#;

fn main() -> ExitCode {
    // Arguments (`--bench`, filters) are cargo's; there is nothing to select.
    report::finish(run())
}

fn run() -> Res<()> {
    let scratch = tempfile::Builder::new()
        .prefix("farm-bench-overnight.")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let scratch = scratch.path();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let started = Instant::now();
    println!("farm overnight bench: {FARM}");
    println!(
        "hubs under {}; this machine has {cores} core(s); load average {}",
        env::temp_dir().display(),
        load()
    );
    println!();
    let mut summary: Vec<[String; 3]> = Vec::new();
    memory(scratch, &mut summary)?;
    println!();
    status(scratch, &mut summary)?;
    println!();
    locks(scratch, &mut summary)?;
    println!();

    println!("summary");
    println!();
    println!("  {:<44} {:<12} measured", "figure", "target");
    for [figure, target, measured] in &summary {
        println!("  {figure:<44} {target:<12} {measured}");
    }
    println!();
    println!(
        "load average at the end: {} ({:.0} s in all)",
        load(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// 10000 as "10,000".
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------
// Processes and hubs
// ---------------------------------------------------------------------------

/// `n` independent tasks `t01`.., as (path, text).
fn tasks(n: usize) -> Vec<(String, String)> {
    (1..=n)
        .map(|i| {
            let id = format!("t{i:02}");
            (
                format!("tasks/{id}.md"),
                format!("+++\ntitle = \"{id}\"\n+++\nCommit one line.\n"),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------
// 1. Supervisor memory at -j 16
// ---------------------------------------------------------------------------

/// What /proc/<pid>/status says of a process's memory, in kB; None once it
/// has exited (a zombie has no `VmHWM`).
#[derive(Clone, Copy, Debug)]
struct Mem {
    hwm: u64,
    rss: u64,
    threads: u64,
}

fn mem(pid: u32) -> Option<Mem> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some(Mem {
        hwm: field("VmHWM:")?,
        rss: field("VmRSS:")?,
        threads: field("Threads:").unwrap_or(0),
    })
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// The farm run of part 1: on drop (an early return) the agents are
/// released and farm is killed if it still runs.
struct FarmRun {
    child: Child,
    release: PathBuf,
}

impl Drop for FarmRun {
    fn drop(&mut self) {
        let _ = File::create(&self.release);
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Markers in `dir`: agents that started, and of those, how many stopped
/// waiting.
fn markers(dir: &Path) -> (usize, usize) {
    let mut started = 0;
    let mut gone = 0;
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(".gone") {
                gone += 1;
            } else {
                started += 1;
            }
        }
    }
    (started, gone)
}

/// Part 1.
fn memory(scratch: &Path, summary: &mut Vec<[String; 3]>) -> Res<()> {
    let hub = scratch.join("hub-memory");
    process::make_hub(FARM, &hub, &tasks(JOBS))?;
    let state = scratch.join("state-memory");
    let marks = scratch.join("markers");
    let release = scratch.join("release");
    fs::create_dir_all(&marks).map_err(|e| format!("create {}: {e}", marks.display()))?;
    let agent = scratch.join("idle-agent.sh");
    write_executable(
        &agent,
        &IDLE_AGENT
            .replace("@MARKERS@", &marks.display().to_string())
            .replace("@RELEASE@", &release.display().to_string()),
    )?;
    let log = scratch.join("log-memory.txt");
    let file = File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let agent_cmd = format!("sh {}", shell_words::quote(&agent.display().to_string()));
    let child = command(FARM)
        .args(["run", "--agent", &agent_cmd, "-j", &JOBS.to_string()])
        .arg("--state-dir")
        .arg(&state)
        .arg("-q")
        .arg("--hub")
        .arg(&hub)
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawn farm run: {e}"))?;
    let pid = child.id();
    let mut run = FarmRun {
        child,
        release: release.clone(),
    };

    // Until all 16 agents have started.
    let t0 = Instant::now();
    let mut last: Option<Mem> = None;
    let rising = loop {
        if let Some(m) = mem(pid) {
            last = Some(m);
        }
        let (started, gone) = markers(&marks);
        if gone > 0 {
            return Err(format!(
                "{gone} agent(s) stopped waiting before all {JOBS} ran ({started} started in {:.1} s)",
                t0.elapsed().as_secs_f64()
            ));
        }
        if started >= JOBS {
            break last;
        }
        if let Ok(Some(status)) = run.child.try_wait() {
            return Err(format!(
                "farm run ended ({status}) with {started} of {JOBS} agents started\n{}",
                tail(&log, 20)
            ));
        }
        if t0.elapsed() > START_WITHIN {
            return Err(format!(
                "only {started} of {JOBS} agents started within {} s\n{}",
                START_WITHIN.as_secs(),
                tail(&log, 20)
            ));
        }
        std::thread::sleep(SAMPLE_EVERY);
    };
    let all_running = t0.elapsed();

    // All 16 run: sample the supervisor alone.
    let mut samples: Vec<Mem> = Vec::new();
    let s0 = Instant::now();
    while s0.elapsed() < SAMPLE_FOR {
        if let Some(m) = mem(pid) {
            samples.push(m);
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    let (started, gone) = markers(&marks);
    if samples.is_empty() || started != JOBS || gone != 0 {
        return Err(format!(
            "while sampling: {} samples of farm's memory, {started} agents started, {gone} \
             stopped waiting\n{}",
            samples.len(),
            tail(&log, 20)
        ));
    }
    let hwm = samples.iter().map(|m| m.hwm).max().unwrap_or(0);
    let rss_max = samples.iter().map(|m| m.rss).max().unwrap_or(0);
    let rss_min = samples.iter().map(|m| m.rss).min().unwrap_or(0);
    let threads = samples.last().map_or(0, |m| m.threads);

    // Release the agents; follow the run to its end.
    File::create(&release).map_err(|e| format!("create {}: {e}", release.display()))?;
    let r0 = Instant::now();
    let mut last_seen = samples.last().copied();
    let status = loop {
        if let Some(m) = mem(pid) {
            last_seen = Some(m);
        }
        if let Some(status) = run
            .child
            .try_wait()
            .map_err(|e| format!("wait for farm run: {e}"))?
        {
            break status;
        }
        if r0.elapsed() > END_WITHIN {
            return Err(format!(
                "farm run did not end within {} s of the release\n{}",
                END_WITHIN.as_secs(),
                tail(&log, 20)
            ));
        }
        std::thread::sleep(SAMPLE_EVERY);
    };
    let to_end = r0.elapsed();
    if !status.success() {
        return Err(format!("farm run: {status}\n{}", tail(&log, 20)));
    }
    check_done(&hub, JOBS)?;
    let left = claims_json(&hub)?;
    if !left.is_empty() {
        return Err(format!("claims left after the run: {left:?}"));
    }

    // For scale.
    let (locks_kb, how) = peak_of_short(command(FARM).arg("locks").arg("--hub").arg(&hub))?;
    let sleep_kb = peak_of_sleep()?;

    println!(
        "1. supervisor memory: farm run -j {JOBS} on {JOBS} tasks, idle agents (sh, waiting \
         for a file), farm's own process"
    );
    println!(
        "   all {JOBS} agents running {:.1} s after the start; sampled every {} ms for {} s; \
         {threads} threads",
        all_running.as_secs_f64(),
        SAMPLE_EVERY.as_millis(),
        SAMPLE_FOR.as_secs()
    );
    println!();
    let row = |name: &str, kb: u64, note: &str| {
        println!("  {name:<54} {:>7.1} MB  {note}", mb(kb));
    };
    if let Some(m) = rising {
        row("VmHWM as the 16th agent started", m.hwm, "");
    }
    row(
        &format!("VmHWM with {JOBS} sessions running"),
        hwm,
        &format!(
            "target <= {TARGET_HWM_MB:.0} MB: {}",
            verdict(mb(hwm) <= TARGET_HWM_MB)
        ),
    );
    row(
        &format!("VmRSS with {JOBS} sessions running (max)"),
        rss_max,
        &format!("min {:.1} MB", mb(rss_min)),
    );
    if let Some(m) = last_seen {
        row(
            "VmHWM last seen before exit (after integrating)",
            m.hwm,
            &format!("run ended {:.1} s after the release", to_end.as_secs_f64()),
        );
    }
    row(
        &format!("for scale: farm locks, peak RSS ({how})"),
        locks_kb,
        "",
    );
    row("for scale: sleep 5, VmHWM", sleep_kb, "");
    println!(
        "  {:<54} {JOBS} of {JOBS} tasks done on main, no claim left, exit 0",
        "the run"
    );
    summary.push([
        format!("supervisor VmHWM, -j {JOBS}, idle agents"),
        format!("<= {TARGET_HWM_MB:.0} MB"),
        format!(
            "{:.1} MB ({}; farm locks {:.1} MB, sleep {:.1} MB)",
            mb(hwm),
            verdict(mb(hwm) <= TARGET_HWM_MB),
            mb(locks_kb),
            mb(sleep_kb)
        ),
    ]);
    Ok(())
}

/// Every task in `tasks/done/` on the hub's main, none pending or failed.
fn check_done(hub: &Path, n: usize) -> Res<()> {
    let listing = git(hub, &["ls-tree", "-r", "--name-only", "main"])?;
    let mut done = 0;
    let mut other = Vec::new();
    for path in listing.lines() {
        if path.starts_with("tasks/done/") {
            done += 1;
        } else if let Some(name) = path.strip_prefix("tasks/")
            && name != "README.md"
            && name.ends_with(".md")
        {
            other.push(path.to_owned());
        } else if path.starts_with("tasks/failed/") {
            other.push(path.to_owned());
        }
    }
    if done != n || !other.is_empty() {
        return Err(format!(
            "the board on {}'s main: {done} of {n} tasks done; not done: {other:?}",
            hub.display()
        ));
    }
    Ok(())
}

/// The claims `farm locks --json` lists.
fn claims_json(hub: &Path) -> Res<Vec<Value>> {
    let text = output(
        command(FARM).args(["locks", "--json", "--hub"]).arg(hub),
        "farm locks --json",
    )?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("farm locks --json: {e}"))?;
    doc["claims"]
        .as_array()
        .cloned()
        .ok_or_else(|| "farm locks --json has no `claims` array".to_owned())
}

/// The peak RSS in kB of a short-lived command, and how it was measured.
fn peak_of_short(cmd: &mut Command) -> Res<(u64, &'static str)> {
    if Path::new(TIME).exists() {
        let out = tempfile::NamedTempFile::new().map_err(|e| format!("temp file: {e}"))?;
        let program = cmd.get_program().to_owned();
        let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
        let status = command(TIME)
            .args(["-f", "%M", "-o"])
            .arg(out.path())
            .arg(&program)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("{TIME}: {e}"))?;
        if !status.success() {
            return Err(format!("{TIME} {program:?} {args:?}: {status}"));
        }
        let text = fs::read_to_string(out.path()).map_err(|e| format!("{TIME} -o: {e}"))?;
        let kb = text
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| format!("{TIME} -f %M said {text:?}"))?;
        return Ok((kb, "/usr/bin/time -f %M"));
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn {:?}: {e}", cmd.get_program()))?;
    let mut peak = 0;
    loop {
        if let Some(m) = mem(child.id()) {
            peak = peak.max(m.hwm);
        }
        if child
            .try_wait()
            .map_err(|e| format!("wait: {e}"))?
            .is_some()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((peak, "VmHWM sampled, may miss the peak"))
}

/// VmHWM of a `sleep 5`, read once it has settled; then it is killed.
fn peak_of_sleep() -> Res<u64> {
    let mut child = command("sleep")
        .arg("5")
        .spawn()
        .map_err(|e| format!("spawn sleep: {e}"))?;
    std::thread::sleep(Duration::from_millis(200));
    let m = mem(child.id());
    let _ = child.kill();
    let _ = child.wait();
    m.map(|m| m.hwm)
        .ok_or_else(|| "cannot read sleep's /proc/<pid>/status".to_owned())
}

// ---------------------------------------------------------------------------
// Timing commands
// ---------------------------------------------------------------------------

/// Run each command `RUNS` times (after one warm-up run each), interleaved
/// with the order rotating; the wall time of each run in ms. stdout and
/// stderr go to /dev/null; every run must succeed.
fn time_all(variants: &mut [(&str, Command)]) -> Res<Vec<Vec<f64>>> {
    let once = |name: &str, cmd: &mut Command| -> Res<f64> {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let start = Instant::now();
        let status = cmd.status().map_err(|e| format!("{name}: {e}"))?;
        let took = start.elapsed();
        if !status.success() {
            return Err(format!("{name}: {status}"));
        }
        Ok(took.as_secs_f64() * 1e3)
    };
    for (name, cmd) in variants.iter_mut() {
        once(name, cmd)?;
    }
    let n = variants.len();
    let mut ms = vec![Vec::with_capacity(RUNS); n];
    for run in 0..RUNS {
        for k in 0..n {
            let i = (run + k) % n;
            let (name, cmd) = &mut variants[i];
            ms[i].push(once(name, cmd)?);
        }
    }
    Ok(ms)
}

/// One row per command: median, min, max, and the ratio of its median to
/// that of the row `refs[i]` names (none: no ratio).
fn print_timings(names: &[&str], ms: &[Vec<f64>], refs: &[Option<usize>]) {
    println!(
        "  {:<54} {:>9} {:>8} {:>8} {:>11}",
        "command", "median ms", "min", "max", "ratio"
    );
    for (i, (name, samples)) in names.iter().zip(ms).enumerate() {
        let med = median(samples);
        let ratio = match refs[i] {
            Some(r) if r != i => format!("{:.2}x [{}]", med / median(&ms[r]), r + 1),
            _ => "-".to_owned(),
        };
        println!(
            "  [{}] {name:<50} {med:>9.1} {:>8.1} {:>8.1} {ratio:>11}",
            i + 1,
            min(samples),
            max(samples)
        );
    }
}

// ---------------------------------------------------------------------------
// 2. farm status over a 10,000-session journal
// ---------------------------------------------------------------------------

/// The pid of a process that has exited (and whose pid nothing has taken
/// since).
fn dead_pid() -> Res<u32> {
    for _ in 0..10 {
        let mut child = Command::new("true")
            .spawn()
            .map_err(|e| format!("spawn true: {e}"))?;
        let pid = child.id();
        child.wait().map_err(|e| format!("wait: {e}"))?;
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Ok(pid);
        }
    }
    Err("no dead pid found".to_owned())
}

/// A night of `SESSIONS` sessions on `AGENTS` agents: the journal's text.
fn night(state: &Path, pid: u32) -> String {
    let ms = Duration::from_millis;
    let start = SystemTime::now() - Duration::from_secs(NIGHT_SECS + 3600);
    // Each agent runs its sessions back to back; they start staggered.
    let slot_ms = NIGHT_SECS * 1000 / SESSIONS.div_ceil(AGENTS) as u64;
    let mut rng = Lcg(2026);
    let mut events: Vec<(SystemTime, String)> = Vec::with_capacity(3 * SESSIONS + 2);
    for i in 0..SESSIONS {
        let agent = format!("bench-{}", i % AGENTS + 1);
        let task = format!("t{i:05}");
        let claim_at = start
            + ms(1000 + (i / AGENTS) as u64 * slot_ms + (i % AGENTS) as u64 * 250)
            + ms(rng.below(500));
        // A session fills most of its slot; the push takes the rest.
        let secs_ms = slot_ms * 8 / 10 + rng.below(slot_ms / 10);
        let end_at = claim_at + ms(secs_ms);
        let done_at = end_at + ms(300 + rng.below(500));
        let stamp: String = farm::claims::record::timestamp(claim_at)
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let log = state
            .join("logs")
            .join(&agent)
            .join(format!("{task}-{stamp}.log"));
        events.push((
            claim_at,
            farm::run::journal::line(
                claim_at,
                pid,
                &agent,
                &Event::Claim {
                    task: task.as_str().into(),
                    attempt: 1,
                    role: None,
                },
            ),
        ));
        events.push((
            end_at,
            farm::run::journal::line(
                end_at,
                pid,
                &agent,
                &Event::SessionEnd {
                    task: task.as_str().into(),
                    attempt: 1,
                    outcome: "success".into(),
                    class: "success".into(),
                    secs: secs_ms as f64 / 1e3,
                    log: log.display().to_string().into(),
                    cost_usd: None,
                    input_tokens: None,
                    output_tokens: None,
                },
            ),
        ));
        events.push((
            done_at,
            farm::run::journal::line(
                done_at,
                pid,
                &agent,
                &Event::Done {
                    task: task.as_str().into(),
                },
            ),
        ));
    }
    events.sort_by_key(|(at, _)| *at);
    let agents: Vec<String> = (1..=AGENTS).map(|a| format!("bench-{a}")).collect();
    let end = events.last().map_or(start, |(at, _)| *at) + ms(500);
    let mut text = farm::run::journal::line(
        start,
        pid,
        "",
        &Event::RunStart {
            agents,
            cli: None,
            roles: BTreeMap::new(),
            hub: "/srv/hub".into(),
            store: "fs".into(),
            host: "bench".into(),
        },
    );
    for (_, line) in &events {
        text.push_str(line);
    }
    text.push_str(&farm::run::journal::line(
        end,
        pid,
        "",
        &Event::RunEnd {
            sessions: SESSIONS,
            done: SESSIONS,
            failed: 0,
            rescued: 0,
            cost_usd: None,
            input_tokens: None,
            output_tokens: None,
        },
    ));
    text
}

/// Part 2.
fn status(scratch: &Path, summary: &mut Vec<[String; 3]>) -> Res<()> {
    let hub = scratch.join("hub-status");
    process::make_hub(FARM, &hub, &tasks(4))?;
    let full = scratch.join("state-10k");
    let empty = scratch.join("state-empty");
    let pid = dead_pid()?;
    let text = night(&full, pid);
    write_file(&full.join(farm::run::journal::FILE), &text)?;
    write_file(&empty.join(farm::run::journal::FILE), "")?;
    let lines = text.lines().count();

    // Correctness first: what --json says of the night.
    let status_cmd = |state: &Path, json: bool| {
        let mut c = command(FARM);
        c.arg("status");
        if json {
            c.arg("--json");
        }
        c.arg("--state-dir").arg(state).arg("--hub").arg(&hub);
        c
    };
    let said = output(&mut status_cmd(&full, true), "farm status --json")?;
    let doc: Value = serde_json::from_str(&said).map_err(|e| format!("farm status --json: {e}"))?;
    let total = |k: &str| doc["totals"][k].as_u64();
    let runs = doc["runs"].as_array().map_or(0, Vec::len);
    let ended = doc["runs"][0]["running"] == json!(false);
    let agents = doc["agents"].as_array().map_or(0, Vec::len);
    if total("sessions") != Some(SESSIONS as u64)
        || total("done") != Some(SESSIONS as u64)
        || runs != 1
        || !ended
        || agents != AGENTS
    {
        return Err(format!(
            "farm status --json over the {SESSIONS}-session journal: totals {}, {runs} run(s) \
             (running: {}), {agents} agents; expected {SESSIONS} sessions and done, one \
             ended run, {AGENTS} agents",
            doc["totals"], doc["runs"][0]["running"]
        ));
    }
    let plain = output(&mut status_cmd(&full, false), "farm status")?;
    let want = format!("{SESSIONS} sessions");
    if !plain.contains(&want) {
        return Err(format!(
            "farm status over the {SESSIONS}-session journal does not say `{want}`:\n{plain}"
        ));
    }
    let said = output(&mut status_cmd(&empty, true), "farm status --json (empty)")?;
    let doc: Value = serde_json::from_str(&said).map_err(|e| format!("farm status --json: {e}"))?;
    if doc["totals"] != json!({}) || doc["runs"] != json!([]) {
        return Err(format!(
            "farm status --json over an empty journal: totals {}, runs {}",
            doc["totals"], doc["runs"]
        ));
    }

    let names = [
        "farm status, 10,000 sessions",
        "farm status --json, 10,000 sessions",
        "farm status, empty journal (reference)",
        "farm status --json, empty journal (reference)",
    ];
    let mut variants = [
        (names[0], status_cmd(&full, false)),
        (names[1], status_cmd(&full, true)),
        (names[2], status_cmd(&empty, false)),
        (names[3], status_cmd(&empty, true)),
    ];
    let ms = time_all(&mut variants)?;

    println!(
        "2. farm status over a journal of {} sessions on {AGENTS} agents ({} lines, {:.1} MB), \
         a hub of 4 tasks",
        thousands(SESSIONS),
        thousands(lines),
        text.len() as f64 / 1e6
    );
    println!(
        "   {RUNS} runs of each after one warm-up, interleaved; ratio against the same \
         command on an empty journal"
    );
    println!();
    print_timings(&names, &ms, &[Some(2), Some(3), None, None]);
    println!();
    for (i, name) in ["farm status", "farm status --json"].iter().enumerate() {
        let med = median(&ms[i]);
        let share = med - median(&ms[i + 2]);
        println!(
            "  {name:<20} {med:>7.1} ms   target <= {TARGET_MS:.0} ms: {}; the journal's share \
             {share:.1} ms ({:.1} µs a session)",
            verdict(med <= TARGET_MS),
            share * 1e3 / SESSIONS as f64
        );
        summary.push([
            format!("{name}, {} sessions, median", thousands(SESSIONS)),
            format!("<= {TARGET_MS:.0} ms"),
            format!(
                "{med:.1} ms ({}; {:.2}x empty journal)",
                verdict(med <= TARGET_MS),
                med / median(&ms[i + 2])
            ),
        ]);
    }
    println!(
        "  totals (--json): {0} sessions, {0} done; the run ended; {AGENTS} agents",
        thousands(SESSIONS)
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 3. farm locks over 10,000 claims
// ---------------------------------------------------------------------------

/// Part 3.
fn locks(scratch: &Path, summary: &mut Vec<[String; 3]>) -> Res<()> {
    let hub = scratch.join("hub-locks");
    let bare = scratch.join("hub-locks-empty");
    process::make_hub(FARM, &hub, &[])?;
    process::make_hub(FARM, &bare, &[])?;
    let dir = hub.join("current_tasks");

    // One real claim, then 9,999 more in its format.
    let first = "c00000";
    output(
        command(FARM)
            .args(["claim", first, "--json", "--agent", "bench", "--hub"])
            .arg(&hub),
        "farm claim",
    )?;
    let template_path = dir.join(format!("{first}.txt"));
    let template = fs::read_to_string(&template_path)
        .map_err(|e| format!("read {}: {e}", template_path.display()))?;
    let has = |key: &str| template.lines().any(|l| l.starts_with(key));
    if !has("task = ") || !has("nonce = ") {
        return Err(format!(
            "farm claim wrote no `task = ` or `nonce = ` line:\n{template}"
        ));
    }
    let mut rng = Lcg(1130);
    for i in 1..CLAIMS {
        let task = format!("c{i:05}");
        let nonce = format!(
            "{:08x}{:08x}{:08x}{:08x}",
            rng.next() as u32,
            rng.next() as u32,
            rng.next() as u32,
            rng.next() as u32
        );
        let mut record = String::with_capacity(template.len());
        for line in template.lines() {
            if line.starts_with("task = ") {
                record.push_str(&format!("task = \"{task}\""));
            } else if line.starts_with("nonce = ") {
                record.push_str(&format!("nonce = \"{nonce}\""));
            } else {
                record.push_str(line);
            }
            record.push('\n');
        }
        let path = dir.join(format!("{task}.txt"));
        fs::write(&path, record).map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    // A listing keeps what it read only of files that last changed two
    // seconds or more before (src/claims/read_cache.rs); a night's claims
    // are minutes old.
    std::thread::sleep(std::time::Duration::from_millis(2100));

    // Correctness: every claim listed, none corrupt, all distinct.
    let claims = claims_json(&hub)?;
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    let mut names = HashSet::new();
    let mut nonces = HashSet::new();
    for c in &claims {
        *states
            .entry(c["state"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
        names.insert(c["task"].as_str().unwrap_or("").to_owned());
        nonces.insert(c["nonce"].as_str().unwrap_or("").to_owned());
    }
    if claims.len() != CLAIMS
        || names.len() != CLAIMS
        || nonces.len() != CLAIMS
        || states.contains_key("corrupt")
    {
        return Err(format!(
            "farm locks --json over {CLAIMS} claims: {} listed, {} distinct tasks, {} distinct \
             nonces, states {states:?}",
            claims.len(),
            names.len(),
            nonces.len()
        ));
    }
    let table = output(
        command(FARM).arg("locks").arg("--hub").arg(&hub),
        "farm locks",
    )?;
    let rows = table.lines().filter(|l| l.starts_with('c')).count();
    if rows != CLAIMS {
        return Err(format!(
            "farm locks printed {rows} claim rows of {CLAIMS} ({} lines in all)",
            table.lines().count()
        ));
    }
    if !claims_json(&bare)?.is_empty() {
        return Err("the hub without claims lists claims".to_owned());
    }

    let locks_cmd = |hub: &Path, json: bool| {
        let mut c = command(FARM);
        c.arg("locks");
        if json {
            c.arg("--json");
        }
        c.arg("--hub").arg(hub);
        c
    };
    let mut ls = command("sh");
    ls.args(["-c", "ls -l current_tasks | wc -l"])
        .current_dir(&hub);
    let names = [
        "farm locks, 10,000 claims",
        "farm locks --json, 10,000 claims",
        "sh -c 'ls -l current_tasks | wc -l' (reference)",
        "farm locks, no claims (reference)",
    ];
    let mut variants = [
        (names[0], locks_cmd(&hub, false)),
        (names[1], locks_cmd(&hub, true)),
        (names[2], ls),
        (names[3], locks_cmd(&bare, false)),
    ];
    let ms = time_all(&mut variants)?;

    println!(
        "3. farm locks over {} claim files in current_tasks/ (no holder process; states: {})",
        thousands(CLAIMS),
        states
            .iter()
            .map(|(s, n)| format!("{} {s}", thousands(*n)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "   {RUNS} runs of each after one warm-up, interleaved; ratio against `ls -l` on the \
         same directory"
    );
    println!();
    print_timings(&names, &ms, &[Some(2), Some(2), None, Some(2)]);
    println!();
    let base_ls = median(&ms[2]);
    let base_empty = median(&ms[3]);
    for (i, name) in ["farm locks", "farm locks --json"].iter().enumerate() {
        let med = median(&ms[i]);
        let share = med - base_empty;
        println!(
            "  {name:<20} {med:>7.1} ms   target <= {TARGET_MS:.0} ms: {}; {:.2}x ls -l; the \
             claims' share {share:.1} ms ({:.1} µs a claim)",
            verdict(med <= TARGET_MS),
            med / base_ls,
            share * 1e3 / CLAIMS as f64
        );
        summary.push([
            format!("{name}, {} claims, median", thousands(CLAIMS)),
            format!("<= {TARGET_MS:.0} ms"),
            format!(
                "{med:.1} ms ({}; {:.2}x ls -l, {:.2}x no claims)",
                verdict(med <= TARGET_MS),
                med / base_ls,
                med / base_empty
            ),
        ]);
    }
    println!(
        "  listed: {0} claims, {0} distinct tasks and nonces, none corrupt; the table {0} rows",
        thousands(CLAIMS)
    );
    Ok(())
}
