//! libtest's JSON lines (`cargo test -- -Z unstable-options --format json`,
//! `cargo nextest run --message-format libtest-json`): one object a line;
//! the cases are the `"type": "test"` ones whose `event` is `ok`, `failed`
//! or `ignored`. A failed case's `stdout` holds the panic: its message is
//! the line after `panicked at <file>:<line>:<col>:`.

use serde::Deserialize;

use crate::suite::report::{Case, Outcome, Report, Unparsable, first_line};

const FORMAT: &str = "libtest-json";

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    event: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    stdout: Option<String>,
}

/// The cases of a libtest JSON report.
pub fn parse(text: &str) -> Result<Report, Unparsable> {
    let mut report = Report::default();
    let mut seen_any = false;
    for (n, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).map_err(|e| Unparsable {
            format: FORMAT,
            line: n + 1,
            text: raw.to_owned(),
            why: format!("not a libtest JSON event: {e}"),
        })?;
        seen_any = true;
        if line.kind != "test" {
            continue;
        }
        let outcome = match line.event.as_str() {
            "ok" => Outcome::Passed,
            "failed" | "timeout" => Outcome::Failed,
            "ignored" => Outcome::Skipped,
            _ => continue, // "started", …
        };
        let Some(full) = line.name else {
            return Err(Unparsable {
                format: FORMAT,
                line: n + 1,
                text: raw.to_owned(),
                why: "a test event with no `name`".into(),
            });
        };
        let (group, name) = match full.rsplit_once("::") {
            Some((g, n)) => (Some(g.to_owned()), n.to_owned()),
            None => (None, full),
        };
        let (failure, file) = match outcome {
            Outcome::Failed => panic_of(line.stdout.as_deref().unwrap_or("")),
            _ => (None, None),
        };
        report.cases.push(Case {
            name,
            group,
            outcome,
            failure,
            file,
        });
    }
    if !seen_any {
        return Err(Unparsable {
            format: FORMAT,
            line: 0,
            text: String::new(),
            why: "the report is empty".into(),
        });
    }
    Ok(report)
}

/// Why a test failed, from its output, and the file it panicked in.
fn panic_of(stdout: &str) -> (Option<String>, Option<String>) {
    let mut lines = stdout.lines();
    while let Some(line) = lines.next() {
        if let Some((_, at)) = line.split_once("panicked at ") {
            // `src/lib.rs:10:5:` (since Rust 1.73), or `'message', src/lib.rs:10:5`.
            let place = at.trim_end_matches(':');
            let file = place
                .rsplit(", ")
                .next()
                .and_then(|p| p.split(':').next())
                .map(str::to_owned);
            let message = lines
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or(place);
            return (Some(first_line(message)), file);
        }
    }
    (Some(first_line(stdout)), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_test_json_reads_to_cases() {
        let text = r#"{ "type": "suite", "event": "started", "test_count": 3 }
{ "type": "test", "event": "started", "name": "lexer::tests::ints" }
{ "type": "test", "name": "lexer::tests::ints", "event": "ok" }
{ "type": "test", "name": "lexer::tests::floats", "event": "failed", "stdout": "\nthread 'lexer::tests::floats' panicked at src/lexer.rs:40:9:\nassertion `left == right` failed\n  left: 1.4\n right: 1.5\n" }
{ "type": "test", "name": "smoke", "event": "ignored" }

{ "type": "suite", "event": "failed", "passed": 1, "failed": 1, "ignored": 1 }
"#;
        let report = parse(text).unwrap();
        assert_eq!(report.counts().total, 3);
        let failed = &report.cases[1];
        assert_eq!(failed.id(), "lexer::tests::floats");
        assert_eq!(failed.outcome, Outcome::Failed);
        assert_eq!(
            failed.failure.as_deref(),
            Some("assertion `left == right` failed")
        );
        assert_eq!(failed.file.as_deref(), Some("src/lexer.rs"));
        assert_eq!(report.cases[2].id(), "smoke");
        assert_eq!(report.cases[2].outcome, Outcome::Skipped);
    }

    #[test]
    fn a_line_that_is_not_json_is_named() {
        let err = parse("{ \"type\": \"suite\", \"event\": \"started\" }\nrunning 3 tests\n")
            .unwrap_err();
        assert_eq!((err.format, err.line), ("libtest-json", 2));
        assert!(err.to_string().contains("`running 3 tests`"), "{err}");
        assert!(parse("\n\n").unwrap_err().why.contains("empty"));
    }
}
