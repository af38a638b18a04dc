//! What reading a large test report costs (issue 13): a JUnit XML file of
//! 20,000 cases in 200 suites — a tenth failed with a message and a
//! traceback, a twentieth skipped, the rest passed, as pytest `--junitxml`
//! writes them — read by `farm::suite::junit::parse` into cases.
//!
//! The reference, in the same invocation: the same file scanned by
//! quick-xml alone, every event read and dropped — the floor any reading of
//! it costs. Medians of [`RUNS`] runs each, interleaved (goal: ≤ 100 ms).
//! Timings are printed, never asserted; the load average is printed at the
//! start and the end.

#[path = "common/report.rs"]
mod report;
use report::{finish, load, verdict};
#[path = "common/stats.rs"]
mod stats;
use stats::{max, median, min};

use std::fmt::Write;
use std::process::ExitCode;
use std::time::Instant;

const CASES: usize = 20_000;
const SUITES: usize = 200;
const RUNS: usize = 15;
const GOAL_MS: f64 = 100.0;

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
    println!("load average at the end: {}", load());
    Ok(())
}
