//! What the tests cost farm.
//!
//! 1. Reading a large report: a JUnit XML file of 20,000 cases in 200
//!    suites — a tenth failed with a message and a traceback, a twentieth
//!    skipped, the rest passed, as pytest `--junitxml` writes them — read by
//!    `farm::suite::junit::parse` into cases. The reference, in the same
//!    invocation: the same file scanned by quick-xml alone, every event read
//!    and dropped — the floor any reading of it costs. Medians of [`RUNS`]
//!    runs each, interleaved (goal: ≤ 100 ms).
//! 2. The gate: `farm run --steer -j 4` on a project of 200 tests of which
//!    60 fail (a `sh` script reads them), gated and with `--no-gate`,
//!    [`GATE_RUNS`] runs each, interleaved: the test runs the journal
//!    counts per integration (goal: exactly one gate run, no baseline and no
//!    rerun; `--steer` tests the branch once at the start, counted apart),
//!    and the run's wall time against the ungated one's.
//!
//! Timings are printed, never asserted; the load average is printed at the
//! start and the end.

#[path = "common/report.rs"]
mod report;
use report::{finish, load, verdict};
#[path = "common/process.rs"]
mod process;
#[path = "common/stats.rs"]
mod stats;
use stats::{max, median, min};

use std::collections::BTreeMap;
use std::fmt::Write;
use std::process::ExitCode;
use std::time::Instant;

const CASES: usize = 20_000;
const SUITES: usize = 200;
const RUNS: usize = 15;
const GOAL_MS: f64 = 100.0;
const GATE_RUNS: usize = 5;
const FARM: &str = env!("CARGO_BIN_EXE_farm");
/// The project's tests: each `tests/<n>.t` holds what `src/<n>` must.
const CHECK: &str = r#"for t in tests/*.t; do
  n=${t#tests/}; n=${n%.t}
  read want < "$t"
  got=; [ -f "src/$n" ] && read got < "src/$n"
  if [ "$got" = "$want" ]; then echo "PASS: $n"; else echo "FAIL: $n: want $want got $got"; fi
done
"#;

fn main() -> ExitCode {
    finish(bench())
}

/// The report, as pytest writes one.
fn report() -> String {
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<testsuites name=\"pytest tests\">\n",
    );
    let per = CASES / SUITES;
    for s in 0..SUITES {
        let _ = writeln!(
            xml,
            "<testsuite name=\"pytest\" errors=\"0\" failures=\"{}\" skipped=\"{}\" tests=\"{per}\" time=\"12.5\">",
            per / 10,
            per / 20
        );
        for c in 0..per {
            let i = s * per + c;
            let head = format!(
                "<testcase classname=\"tests.test_mod{s:03}\" name=\"test_case_{i:05}[param-{c}]\" file=\"tests/test_mod{s:03}.py\" line=\"{c}\" time=\"0.00{}\"",
                c % 10
            );
            if i % 10 == 3 {
                let _ = writeln!(
                    xml,
                    "{head}><failure message=\"AssertionError: assert {i} == {}&#10;  where {i} = f(&quot;x&quot;)\">def test_case_{i:05}():\n&gt;       assert f(\"x\") == {}\nE       AssertionError: assert {i} == {}\n\ntests/test_mod{s:03}.py:{c}: AssertionError</failure></testcase>",
                    i + 1,
                    i + 1,
                    i + 1
                );
            } else if i % 20 == 7 {
                let _ = writeln!(
                    xml,
                    "{head}><skipped type=\"pytest.skip\" message=\"needs a network\">tests/test_mod{s:03}.py:{c}: needs a network</skipped></testcase>"
                );
            } else {
                let _ = writeln!(xml, "{head} />");
            }
        }
        xml.push_str("</testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// Every event of `xml` read and dropped; how many.
fn scan(xml: &str) -> usize {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut n = 0;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) | Err(_) => return n,
            Ok(_) => n += 1,
        }
    }
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

fn bench() -> Result<(), String> {
    println!("farm suite bench: load average {}", load());
    let xml = report();
    let report = farm::suite::junit::parse(&xml).map_err(|e| e.to_string())?;
    let counts = report.counts();
    if counts.total != CASES || counts.failed != CASES / 10 || counts.skipped != CASES / 20 {
        return Err(format!("the report read as {counts:?}, not {CASES} cases"));
    }
    println!(
        "a JUnit report of {CASES} cases in {SUITES} suites, {:.1} MB: {} passed, {} failed, {} skipped",
        xml.len() as f64 / 1e6,
        counts.passed,
        counts.failed,
        counts.skipped
    );
    let (mut parse, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let start = Instant::now();
        let r = farm::suite::junit::parse(&xml).map_err(|e| e.to_string())?;
        parse.push(ms(start));
        std::hint::black_box(r);
        let start = Instant::now();
        std::hint::black_box(scan(&xml));
        floor.push(ms(start));
    }
    let show = |v: &[f64]| {
        format!(
            "median {:6.1} ms (min {:.1}, max {:.1})",
            median(v),
            min(v),
            max(v)
        )
    };
    println!("  quick-xml scan alone (floor)  {}", show(&floor));
    println!(
        "  farm::suite::junit::parse     {}   {:.2}x the floor; goal <= {GOAL_MS:.0} ms: {}",
        show(&parse),
        median(&parse) / median(&floor),
        verdict(median(&parse) <= GOAL_MS)
    );
    gate()?;
    println!("load average at the end: {}", load());
    Ok(())
}

/// One `farm run --steer -j 4` on a fresh copy of the 200-test project
/// (`--no-gate` when not `gated`): its wall time in seconds, and the
/// journal's test runs by kind and its integrations.
fn steer_run(
    dir: &std::path::Path,
    gated: bool,
) -> Result<(f64, BTreeMap<String, usize>, usize), String> {
    let hub = dir.join("hub");
    let mut files: Vec<(String, String)> = vec![
        ("check.sh".into(), CHECK.into()),
        (
            "farm.toml".into(),
            "[tests]\ncommand = \"sh check.sh\"\nformat = \"lines\"\nfailed = '^FAIL: (?P<name>\\S+): (?P<why>.*)$'\n".into(),
        ),
    ];
    for i in 0..200 {
        files.push((format!("tests/t{i:03}.t"), format!("{i}\n")));
        let v = if [0, 3, 7].contains(&(i % 10)) {
            "x".to_owned()
        } else {
            i.to_string()
        };
        files.push((format!("src/t{i:03}"), format!("{v}\n")));
    }
    process::make_hub(FARM, &hub, &files)?;
    let agent = dir.join("fixer.sh");
    process::write_file(
        &agent,
        "n=${FARM_TASK#test-}\ncp \"tests/$n.t\" \"src/$n\"\ngit add -A\ngit commit -qm \"fix $n\"\n",
    )?;
    let state = dir.join("state");
    let mut cmd = process::command(FARM);
    cmd.arg("-q")
        .args([
            "run",
            "--agent",
            &format!("sh {}", agent.display()),
            "--steer",
            "-j",
            "4",
        ])
        .arg("--state-dir")
        .arg(&state)
        .env("FARM_HUB", &hub);
    if !gated {
        cmd.arg("--no-gate");
    }
    let start = Instant::now();
    process::output(&mut cmd, "farm run --steer")?;
    let secs = start.elapsed().as_secs_f64();
    let journal =
        std::fs::read_to_string(state.join("journal.jsonl")).map_err(|e| e.to_string())?;
    let mut runs = BTreeMap::new();
    let mut done = 0;
    for line in journal.lines() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        match v["event"].as_str() {
            Some("tests") => {
                *runs
                    .entry(v["kind"].as_str().unwrap_or("?").to_owned())
                    .or_default() += 1
            }
            Some("done") => done += 1,
            Some("steer") if v["ran"] == true => {
                *runs.entry("steer".to_owned()).or_default() += 1;
            }
            _ => {}
        }
    }
    if done != 60 {
        return Err(format!("{done} tasks done, not 60"));
    }
    Ok((secs, runs, done))
}

fn gate() -> Result<(), String> {
    println!("the gate: farm run --steer -j 4 on 200 tests, 60 failing (60 tasks)");
    let (mut gated, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..GATE_RUNS {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (secs, runs, done) = steer_run(tmp.path(), true)?;
        let per = runs.get("gate").copied().unwrap_or(0) as f64 / done as f64;
        println!(
            "  gated run: {secs:.2} s; test runs {runs:?} for {done} integrations: {per:.2} gate run(s) per integration, goal exactly 1 and no baseline or rerun: {}",
            verdict(per == 1.0 && !runs.contains_key("baseline") && !runs.contains_key("rerun"))
        );
        gated.push(secs);
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (secs, runs, _) = steer_run(tmp.path(), false)?;
        if runs.keys().any(|k| k != "steer") {
            return Err(format!("--no-gate ran the gate: {runs:?}"));
        }
        plain.push(secs);
    }
    println!(
        "  wall time: gated median {:.2} s (min {:.2}), --no-gate median {:.2} s (min {:.2}): {:.2}x ({:.0} ms per integration)",
        median(&gated),
        min(&gated),
        median(&plain),
        min(&plain),
        median(&gated) / median(&plain),
        (median(&gated) - median(&plain)) * 1000.0 / 60.0
    );
    Ok(())
}
