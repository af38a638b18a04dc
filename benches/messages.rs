//! How soon an idle agent reads a message said to it. Run with `cargo
//! bench --bench messages`.
//!
//! Everything runs the real `farm` binary (`CARGO_BIN_EXE_farm`) on a hub
//! made in a temp dir the way the other benches make one (`git init -b
//! main`, an empty commit, `farm init`, one task), git hermetic.
//!
//! One agent, `farm run --watch --name box`, does the board's one task and
//! then waits, idle. The bench then says [`LOCAL`] (or [`REMOTE`])
//! messages to it, one at a time, a pause of 200–500 ms between them, and
//! for each measures, from `farm say`'s exit, how long until the agent's
//! journal has it taken (the bench reads the journal every millisecond);
//! also from `farm say`'s start, which adds the say itself. Printed: the
//! median, p90 and the largest of each.
//!
//! **1. A hub on this machine** (the fs store): the agent waits on inotify
//! of `current_tasks/`, where a message is written. Goal: at most
//! [`GOAL_LOCAL_MS`] from `farm say`'s exit.
//!
//! **2. A hub elsewhere** (`git daemon` on loopback, the git store): the
//! agent looks at the hub at its polling interval (3 s, jittered to
//! 1.5–4.5 s). Goal: every message read within the interval's longest,
//! 4.5 s, plus one look at the hub.
//!
//! Every message must be taken exactly once, by `box`, or the bench
//! fails. Timings are printed, never asserted: they depend on the machine
//! and on what else runs on it, so the load average is printed at the
//! start and at the end.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;
use daemon::Daemon;
use process::{Res, Workers, command, make_hub, output, tail, write_executable};
use report::{Lcg, load, verdict};
use stats::{max, median, quantile};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const FARM: &str = env!("CARGO_BIN_EXE_farm");

/// Messages said to the agent on a hub on this machine, and elsewhere.
const LOCAL: usize = 40;
const REMOTE: usize = 10;

/// The goal on a hub on this machine, in ms from `farm say`'s exit.
const GOAL_LOCAL_MS: f64 = 100.0;

/// The longest of a remote hub's polling interval (3 s, jittered ×0.5–1.5).
const REMOTE_INTERVAL_MAX_MS: f64 = 4_500.0;

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
        .prefix("farm-bench-messages.")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dir = tmp.path();
    println!("messages: load average at the start: {}", load());
    let agent = dir.join("noop.sh");
    write_executable(&agent, NOOP_AGENT)?;
    let agent = format!("sh {}", agent.display());
    let files = [(
        "tasks/t1.md".to_owned(),
        "+++\ntitle = \"Task t1\"\n+++\ndo it\n".to_owned(),
    )];

    let local = dir.join("local");
    make_hub(FARM, &local, &files)?;
    let hub = local.display().to_string();
    let figures = measure(
        dir,
        &agent,
        &hub,
        &local.join(".farm"),
        LOCAL,
        "hub on this machine",
    )?;
    let local_met = figures.after_say_median <= GOAL_LOCAL_MS;
    println!(
        "  goal: median from `farm say`'s exit ≤ {GOAL_LOCAL_MS:.0} ms: {} ({:.1} ms)",
        verdict(local_met),
        figures.after_say_median
    );

    let served = dir.join("served");
    make_hub(FARM, &dir.join("template"), &files)?;
    fs::create_dir_all(&served).map_err(|e| format!("create {}: {e}", served.display()))?;
    output(
        command("git")
            .args(["clone", "-q", "--bare", "--no-local"])
            .arg(dir.join("template"))
            .arg(served.join("hub.git")),
        "git clone --bare",
    )?;
    let daemon = Daemon::start(&served)?;
    let state = dir.join("state-remote");
    let figures = measure(
        dir,
        &agent,
        &daemon.url("hub"),
        &state,
        REMOTE,
        "hub elsewhere (git daemon)",
    )?;
    let remote_met = figures.after_say_max <= REMOTE_INTERVAL_MAX_MS + figures.look_ms;
    println!(
        "  goal: every message within the polling interval's longest ({REMOTE_INTERVAL_MAX_MS:.0} ms) \
         plus one look at the hub ({:.0} ms): {} (largest {:.0} ms)",
        figures.look_ms,
        verdict(remote_met),
        figures.after_say_max
    );
    drop(daemon);
    println!("messages: load average at the end: {}", load());
    Ok(())
}

/// What one part measured, in ms.
struct Figures {
    after_say_median: f64,
    after_say_max: f64,
    /// The median of a `farm say` itself: roughly one look at the hub.
    look_ms: f64,
}

/// Start the agent on `hub` (its state dir `state`), let it do the board
/// and fall idle, then say `n` messages to it and time each one's taking.
fn measure(dir: &Path, agent: &str, hub: &str, state: &Path, n: usize, what: &str) -> Res<Figures> {
    let log = dir.join(format!("farm-{}.log", n));
    let file = File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("{e}"))?;
    let child = command(FARM)
        .args(["run", "--agent", agent, "--name", "box", "--watch"])
        .args(["--hub", hub, "--state-dir"])
        .arg(state)
        .current_dir(dir)
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawn farm run: {e}"))?;
    let _farm = Workers(vec![child]);
    let journal = state.join("journal.jsonl");
    // Idle: the task integrated, and a moment for the agent to wait.
    wait_until(Duration::from_secs(60), || {
        count(&journal, "\"event\":\"done\"") >= 1
    })
    .map_err(|()| format!("the agent never did its task\n{}", tail(&log, 20)))?;
    std::thread::sleep(Duration::from_millis(500));

    let mut rng = Lcg(0x5eed_0ffa);
    let (mut after, mut from_start, mut says) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..=n {
        let start = Instant::now();
        output(
            command(FARM)
                .args(["say", "-q", "--to", "box", "--hub", hub, "--state-dir"])
                .arg(state)
                .arg(format!("message {i}"))
                .current_dir(dir),
            "farm say",
        )?;
        let said = Instant::now();
        wait_until(Duration::from_secs(30), || {
            count(&journal, "\"event\":\"message\"") >= i
        })
        .map_err(|()| format!("message {i} never taken\n{}", tail(&log, 20)))?;
        let seen = Instant::now();
        after.push(ms(seen - said));
        from_start.push(ms(seen - start));
        says.push(ms(said - start));
        std::thread::sleep(Duration::from_millis(200 + rng.below(300)));
    }
    // Exactly once each: no message taken twice.
    std::thread::sleep(Duration::from_millis(500));
    let taken = count(&journal, "\"event\":\"message\"");
    if taken != n {
        return Err(format!("{n} messages said, {taken} taken"));
    }
    println!(
        "{what}: {n} messages to an idle agent; from `farm say`'s exit to taken: median {:.1} ms, \
         p90 {:.1} ms, largest {:.1} ms; from its start: median {:.1} ms; a `farm say`: median {:.1} ms",
        median(&after),
        quantile(&after, 0.9),
        max(&after),
        median(&from_start),
        median(&says),
    );
    Ok(Figures {
        after_say_median: median(&after),
        after_say_max: max(&after),
        look_ms: median(&says),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// Lines of `journal` that hold `needle`.
fn count(journal: &PathBuf, needle: &str) -> usize {
    fs::read_to_string(journal)
        .map(|t| t.lines().filter(|l| l.contains(needle)).count())
        .unwrap_or(0)
}

/// Wait (a millisecond at a time) until `done`, at most `limit`.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> Result<(), ()> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
