//! The Test Anything Protocol (TAP 12–14): `ok N - name`, `not ok N - name`,
//! a `# SKIP` or `# TODO` directive (a TODO that fails is expected to: not
//! a failure), a YAML block under a failed line whose `message:` says why
//! (else the `# ` diagnostics after it), `Bail out!` when the run gave up.
//! Other lines, subtests (indented) included, are left alone, as TAP says.

use crate::suite::report::{Case, Outcome, Report, Unparsable, first_line};

const FORMAT: &str = "tap";

/// The cases of a TAP stream.
pub fn parse(text: &str) -> Result<Report, Unparsable> {
    let mut report = Report::default();
    let mut planned = false;
    // The failed case whose diagnostics may follow, by index.
    let mut last_failed: Option<usize> = None;
    let mut in_yaml = false;
    for (n, line) in text.lines().enumerate() {
        if in_yaml {
            let t = line.trim();
            if t == "..." {
                in_yaml = false;
            } else if let (Some(i), Some(m)) = (last_failed, t.strip_prefix("message:")) {
                let m = m.trim().trim_matches(|c| c == '\'' || c == '"');
                report.cases[i].failure = Some(first_line(m));
            }
            continue;
        }
        if line.trim() == "---" && last_failed.is_some() {
            in_yaml = true;
            continue;
        }
        if let Some(why) = line.strip_prefix("Bail out!") {
            return Err(Unparsable {
                format: FORMAT,
                line: n + 1,
                text: line.to_owned(),
                why: format!("the test run bailed out:{why}"),
            });
        }
        if let Some(d) = line.strip_prefix('#') {
            if let Some(i) = last_failed
                && report.cases[i].failure.as_deref() == Some("")
            {
                report.cases[i].failure = Some(first_line(d));
            }
            continue;
        }
        if line.starts_with("1..") {
            planned = true;
            continue;
        }
        let (ok, rest) = if let Some(rest) = line.strip_prefix("ok") {
            (true, rest)
        } else if let Some(rest) = line.strip_prefix("not ok") {
            (false, rest)
        } else {
            continue;
        };
        // ` 3 - name # SKIP why`: the number and the dash are optional.
        let rest = rest
            .trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit());
        let rest = rest.trim_start();
        let rest = rest.strip_prefix("- ").unwrap_or(rest);
        let (name, directive) = match rest.split_once(" # ") {
            Some((name, d)) => (name.trim(), d.trim().to_ascii_uppercase()),
            None => match rest.strip_prefix("# ") {
                Some(d) => ("", d.trim().to_ascii_uppercase()),
                None => (rest.trim(), String::new()),
            },
        };
        let outcome = if directive.starts_with("SKIP") || directive.starts_with("TODO") {
            Outcome::Skipped
        } else if ok {
            Outcome::Passed
        } else {
            Outcome::Failed
        };
        let name = if name.is_empty() {
            format!("test {}", report.cases.len() + 1)
        } else {
            name.to_owned()
        };
        last_failed = (outcome == Outcome::Failed).then_some(report.cases.len());
        report.cases.push(Case {
            name,
            group: None,
            outcome,
            failure: (outcome == Outcome::Failed).then(String::new),
            file: None,
        });
    }
    if !planned && report.cases.is_empty() {
        return Err(Unparsable::no_report(
            FORMAT,
            text,
            "no plan (`1..N`) and no `ok`/`not ok` line",
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tap_stream_reads_to_cases() {
        let text = "TAP version 13
1..5
ok 1 - lexer ints
not ok 2 - lexer floats
  ---
  message: 'expected 1.5, got 1.4'
  severity: fail
  ...
ok 3 - network # SKIP no network here
not ok 4 - someday # TODO not written yet
not ok 5 parser if
# Failed test 'parser if'
#   at t/parser.t line 9.
";
        let report = parse(text).unwrap();
        let got: Vec<(String, Outcome, Option<String>)> = report
            .cases
            .iter()
            .map(|c| (c.name.clone(), c.outcome, c.failure.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("lexer ints".into(), Outcome::Passed, None),
                (
                    "lexer floats".into(),
                    Outcome::Failed,
                    Some("expected 1.5, got 1.4".into())
                ),
                ("network".into(), Outcome::Skipped, None),
                ("someday".into(), Outcome::Skipped, None),
                (
                    "parser if".into(),
                    Outcome::Failed,
                    Some("Failed test 'parser if'".into())
                ),
            ]
        );
    }

    #[test]
    fn bail_out_and_no_tap_at_all_are_errors() {
        let err = parse("1..3\nok 1\nBail out! no database\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.why.contains("no database"), "{err}");
        let err = parse("Segmentation fault\n").unwrap_err();
        assert!(err.to_string().contains("`Segmentation fault`"), "{err}");
    }
}
