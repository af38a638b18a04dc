//! What the morning view costs. Run with `cargo bench --bench report`.
//!
//! 1. **Rolling up 10,000 sessions**: the journal of a generated
//!    16-agent night (`common/night.rs`: claims, session ends, merges,
//!    limits, breaker pauses, costs and tokens) read and rolled up in
//!    process — `journal::read`, the scope chosen, `Night::new` (sessions by
//!    outcome, waits, cost and tokens per agent, task and CLI), as
//!    `farm status` and `farm report` do. The reference, in the same
//!    invocation: `journal::read` alone, the floor any reading of the journal
//!    costs. Medians of [`RUNS`] interleaved runs (goal ≤ 200 ms).
//! 2. **The real commands** on that journal, the release binary with a hub of
//!    its own: `farm status --json` and `farm report --json` (the page
//!    written), medians of [`CMD_RUNS`]; and `farm report` of the
//!    16-agent, 2,000-session night the browser test loads: its wall time and
//!    the page's size (goal < 2 MB).
//! 3. **Rendering** that page in headless Chromium, when one is on PATH:
//!    the page's own `performance.now()` at its end (goal < 2 s), medians of
//!    [`CMD_RUNS`].
//!
//! Timings are printed, never asserted; the load average is printed at the
//! start and the end.

#[path = "common/night.rs"]
mod night;
#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use report::{finish, load, verdict};
use stats::{max, median, min};

use farm::report::night::{Night, Scope, select};
use farm::run::journal;

const RUNS: usize = 15;
const CMD_RUNS: usize = 5;
const GOAL_MS: f64 = 200.0;
const FARM: &str = env!("CARGO_BIN_EXE_farm");

fn main() -> ExitCode {
    finish(bench())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn line(what: &str, v: &[f64]) {
    println!(
        "  {what:<44} median {:>8.1} ms (min {:.1}, max {:.1})",
        median(v),
        min(v),
        max(v)
    );
}

/// A hub (an empty git repository) and a state dir holding `journal`.
fn setup(root: &Path, journal: &str) -> Result<(), String> {
    std::fs::create_dir_all(root.join("hub")).map_err(|e| e.to_string())?;
    process::git(&root.join("hub"), &["init", "-q", "-b", "main"])?;
    process::git(
        &root.join("hub"),
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "empty",
        ],
    )?;
    std::fs::create_dir_all(root.join("state")).map_err(|e| e.to_string())?;
    std::fs::write(root.join("state/journal.jsonl"), journal).map_err(|e| e.to_string())
}

fn farm(root: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = process::command(FARM);
    cmd.args(args)
        .arg("--hub")
        .arg(root.join("hub"))
        .arg("--state-dir")
        .arg(root.join("state"));
    process::output(&mut cmd, &format!("farm {}", args.join(" ")))
}

fn bench() -> Result<(), String> {
    println!("load average at start: {}", load());
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;

    // 1. The rollup, in process.
    let big = night::night(16, 10_000, 1_796_000_000.0, 4242);
    let root = tmp.path().join("big");
    setup(&root, &big.journal)?;
    let state = root.join("state");
    println!(
        "\n1. rolling up a journal of {} sessions ({} lines, {:.1} MB)",
        big.sessions,
        big.journal.lines().count(),
        big.journal.len() as f64 / 1e6
    );
    let (mut read, mut rolled) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = Instant::now();
        let text = journal::read(&state).map_err(|e| e.to_string())?;
        let entries = journal::entries(&text);
        read.push(ms(t));
        std::hint::black_box(&entries);

        let t = Instant::now();
        let text = journal::read(&state).map_err(|e| e.to_string())?;
        let entries = journal::entries(&text);
        let (lines, runs) = select(&entries, &Scope::LastNight);
        let n = Night::new(&lines, runs);
        rolled.push(ms(t));
        if n.total.sessions != big.sessions {
            return Err(format!(
                "rolled up {} sessions of {}",
                n.total.sessions, big.sessions
            ));
        }
        let cents = (n.total.cost_usd.unwrap_or(0.0) * 100.0).round() as u64;
        if cents != big.cost_cents {
            return Err(format!("rolled up {cents} cents of {}", big.cost_cents));
        }
    }
    line("journal::read alone (reference)", &read);
    line("read + scope + Night::new (the rollup)", &rolled);
    println!(
        "  ratio rollup / read: {:.2}; goal ≤ {GOAL_MS} ms: {}",
        median(&rolled) / median(&read),
        verdict(median(&rolled) <= GOAL_MS)
    );

    // 2. The commands.
    println!("\n2. the commands (release binary), on the same journal");
    let (mut status, mut report) = (Vec::new(), Vec::new());
    for _ in 0..CMD_RUNS {
        let t = Instant::now();
        farm(&root, &["status", "--json"])?;
        status.push(ms(t));
        let t = Instant::now();
        farm(&root, &["report", "--json"])?;
        report.push(ms(t));
    }
    line("farm status --json (10,000 sessions)", &status);
    line("farm report (10,000 sessions)", &report);
    let size = std::fs::metadata(state.join("report.html"))
        .map_err(|e| e.to_string())?
        .len();
    println!("  its page: {:.2} MB", size as f64 / 1e6);

    let night = night::night(16, 2000, 1_796_000_000.0, 4242);
    let root = tmp.path().join("night");
    setup(&root, &night.journal)?;
    let mut walls = Vec::new();
    for _ in 0..CMD_RUNS {
        let t = Instant::now();
        farm(&root, &["report", "--json"])?;
        walls.push(ms(t));
    }
    let page = root.join("state/report.html");
    let size = std::fs::metadata(&page).map_err(|e| e.to_string())?.len();
    line("farm report (16 agents, 2,000 sessions)", &walls);
    println!(
        "  its page: {:.2} MB; goal < 2 MB: {}",
        size as f64 / 1e6,
        verdict(size < 2 * 1024 * 1024)
    );

    // 3. Rendering, in a real browser.
    println!("\n3. rendering the 2,000-session page in headless Chromium");
    let Some(browser) = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|b| {
            process::command("which")
                .arg(b)
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        println!("  skipped: no chromium on PATH");
        println!("\nload average at end: {}", load());
        return Ok(());
    };
    let mut rendered = Vec::new();
    for _ in 0..CMD_RUNS {
        let dom = process::output(
            process::command(browser)
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                ])
                .arg(format!(
                    "--user-data-dir={}",
                    tmp.path().join("profile").display()
                ))
                .arg("--dump-dom")
                .arg(format!("file://{}", page.display())),
            "chromium",
        )?;
        let at = dom
            .split("data-rendered=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or("the page's script did not run")?;
        rendered.push(at);
    }
    line("performance.now() at the page's end", &rendered);
    println!("  goal < 2,000 ms: {}", verdict(median(&rendered) < 2000.0));
    println!("\nload average at end: {}", load());
    Ok(())
}
