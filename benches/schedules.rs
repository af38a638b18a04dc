//! What firing costs at a minute boundary: 1,000 schedules — every minute,
//! hourly, daily and weekdays in several zones, monthly on the 31st,
//! one-shots; half `catchup = "latest"`, a tenth `"all"` over an hour — on
//! a board of 5,000 done and 500 pending tasks, read from a checked-out
//! branch as `farm fire` and `farm run` read it.
//!
//! Measured at successive minute boundaries, as a run fires: reading the
//! schedule files (each text parsed once, `fire::Loader`), then planning
//! the firing (`fire::plan`: each schedule's due occurrences, each looked
//! up on the board); the tasks made are written to the board for the next
//! minute. The first firing (the backlog) and the first parse are printed
//! apart; then medians of [`RUNS`] minutes (goal: ≤ 20 ms for the two
//! together). Timings are printed,
//! never asserted; the load average is printed at the start and the end.

#[path = "common/report.rs"]
mod report;
use report::{finish, load, verdict};
#[path = "common/stats.rs"]
mod stats;
use stats::{max, median, min};

use std::fs;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use farm::board::paths;
use farm::schedule::fire;

const SCHEDULES: usize = 1000;
const RUNS: usize = 21;
const GOAL_MS: f64 = 20.0;

fn main() -> ExitCode {
    finish(bench())
}

fn rule(i: usize) -> String {
    let zones = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"];
    let zone = zones[i % zones.len()];
    let (when, extra) = match i % 10 {
        0 => ("cron = \"* * * * *\"".to_owned(), ""),
        1 | 2 => (format!("cron = \"{} * * * *\"", i % 60), ""),
        3 | 4 => (format!("cron = \"{} {} * * *\"", i % 60, i % 24), ""),
        5 | 6 => (
            format!("cron = \"{} 9 * * 1-5\"", i % 60),
            "catchup = \"none\"\n",
        ),
        7 => ("cron = \"0 0 31 * *\"".to_owned(), ""),
        8 => (
            format!("cron = \"*/{} * * * *\"", 2 + i % 13),
            "catchup = \"all\"\ncatchup_window = \"1h\"\noverlap = \"allow\"\n",
        ),
        _ => (format!("at = \"2026-12-0{}T06:00:00Z\"", 1 + i % 9), ""),
    };
    format!(
        "{when}\ntimezone = \"{zone}\"\ntitle = \"Schedule {i}\"\n{extra}created = \"2026-11-01T00:00:00Z\"\n"
    )
}

fn board(dir: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    fs::create_dir_all(dir.join("schedules")).map_err(io)?;
    fs::create_dir_all(dir.join(paths::DONE)).map_err(io)?;
    for i in 0..SCHEDULES {
        fs::write(dir.join(format!("schedules/s{i:04}.toml")), rule(i)).map_err(io)?;
    }
    let task = "+++\ntitle = \"T\"\n+++\nDo it.\n";
    for i in 0..5000 {
        fs::write(dir.join(paths::done(format!("d{i:05}"))), task).map_err(io)?;
    }
    for i in 0..500 {
        fs::write(dir.join(paths::pending(format!("p{i:04}"))), task).map_err(io)?;
    }
    Ok(())
}

fn bench() -> Result<(), String> {
    println!("schedules bench: load average {}", load());
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = tmp.path();
    board(dir)?;
    let (schedules, invalid) = fire::load(dir);
    if schedules.len() != SCHEDULES || !invalid.is_empty() {
        return Err(format!(
            "{} schedules read, invalid: {invalid:?}",
            schedules.len()
        ));
    }
    let start: jiff::Timestamp = "2026-12-01T09:00:00Z".parse().map_err(|e| format!("{e}"))?;
    let (mut loads, mut plans, mut made, mut looked) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // As a run keeps it: each file's text parsed once.
    let mut loader = fire::Loader::default();
    let t = Instant::now();
    let _ = loader.load(dir);
    let cold = t.elapsed().as_secs_f64() * 1e3;
    println!("reading and parsing the files the first time: {cold:.2} ms");
    for run in 0..=RUNS {
        let now = start + jiff::SignedDuration::from_mins(run as i64);
        let t = Instant::now();
        let (schedules, _) = loader.load(dir);
        let schedules = loader.unsettled(schedules, now);
        let loaded = t.elapsed();
        let pending = fire::pending(dir);
        let plan = fire::plan(
            &schedules,
            now,
            SystemTime::UNIX_EPOCH,
            |id| paths::find(dir, id).is_some(),
            &pending,
        );
        loader.settle(&plan);
        let planned = t.elapsed() - loaded;
        // What the firing made is on the board for the next minute, as
        // after `farm fire`'s commit.
        for task in &plan.create {
            fs::write(dir.join(paths::pending(&task.id)), task.render())
                .map_err(|e| e.to_string())?;
        }
        if run == 0 {
            println!(
                "first firing (the backlog: {} tasks): {:.2} ms to plan",
                plan.create.len(),
                planned.as_secs_f64() * 1e3
            );
            continue;
        }
        loads.push(loaded.as_secs_f64() * 1e3);
        plans.push(planned.as_secs_f64() * 1e3);
        made.push(plan.create.len() as f64);
        looked.push(schedules.len() as f64);
    }
    let total: Vec<f64> = loads.iter().zip(&plans).map(|(a, b)| a + b).collect();
    println!(
        "{SCHEDULES} schedules, a board of 5,000 done and 500 pending tasks; the next {RUNS} minute boundaries"
    );
    println!("  step                         median       min       max");
    for (what, v) in [
        ("read the files", &loads),
        ("plan the firing", &plans),
        ("both", &total),
    ] {
        println!(
            "  {what:<26} {:>8.2} ms {:>8.2} {:>9.2}",
            median(v),
            min(v),
            max(v)
        );
    }
    println!(
        "  schedules a firing looks at (the rest settled till their next occurrence): median {:.0}, max {:.0}",
        median(&looked),
        max(&looked)
    );
    println!(
        "  tasks a firing makes: median {:.0}, min {:.0}, max {:.0}",
        median(&made),
        min(&made),
        max(&made)
    );
    println!(
        "  both: {:.2} ms   goal <= {GOAL_MS:.0} ms: {}",
        median(&total),
        verdict(median(&total) <= GOAL_MS)
    );
    println!("load average at the end: {}", load());
    Ok(())
}
