//! Plain lines, for a suite with no structured report: three patterns (Rust
//! regexes) say which lines tell that a test passed, failed or was skipped,
//! their group `name` naming the test and an optional group `why` saying
//! why it failed. By default automake's test driver (`PASS: t`, `FAIL: t`,
//! `SKIP: t`, `XFAIL`, `XPASS`, `ERROR`). Lines that match none are left
//! alone.

use regex::Regex;

use crate::suite::report::{Case, Outcome, Report, Unparsable, first_line};

const FORMAT: &str = "lines";

pub const PASSED: &str = r"^(?:PASS|XFAIL): (?P<name>.+?)\s*$";
pub const FAILED: &str = r"^(?:FAIL|XPASS|ERROR): (?P<name>.+?)\s*$";
pub const SKIPPED: &str = r"^SKIP: (?P<name>.+?)\s*$";

/// The three patterns, compiled.
#[derive(Clone, Debug)]
pub struct Patterns {
    passed: Regex,
    failed: Regex,
    skipped: Regex,
}

impl Patterns {
    /// The patterns given (`None`: the default for that outcome); why one is
    /// not usable, naming its key.
    pub fn new(
        passed: Option<&str>,
        failed: Option<&str>,
        skipped: Option<&str>,
    ) -> Result<Patterns, String> {
        let compile = |key: &str, given: Option<&str>, default: &str| {
            let text = given.unwrap_or(default);
            let re = Regex::new(text).map_err(|e| format!("`{key}` is not a regex: {e}"))?;
            if !re.capture_names().flatten().any(|n| n == "name") {
                return Err(format!(
                    "`{key}` = {text:?} has no group `name` for the test's name, as in {default:?}"
                ));
            }
            Ok(re)
        };
        Ok(Patterns {
            passed: compile("passed", passed, PASSED)?,
            failed: compile("failed", failed, FAILED)?,
            skipped: compile("skipped", skipped, SKIPPED)?,
        })
    }
}

/// The cases the lines of `text` tell of.
pub fn parse(text: &str, patterns: &Patterns) -> Result<Report, Unparsable> {
    let mut report = Report::default();
    for line in text.lines() {
        for (re, outcome) in [
            (&patterns.failed, Outcome::Failed),
            (&patterns.passed, Outcome::Passed),
            (&patterns.skipped, Outcome::Skipped),
        ] {
            if let Some(caps) = re.captures(line) {
                let name = caps.name("name").map_or("", |m| m.as_str()).to_owned();
                let failure = (outcome == Outcome::Failed).then(|| {
                    caps.name("why")
                        .map_or(String::new(), |m| first_line(m.as_str()))
                });
                report.cases.push(Case {
                    name,
                    group: None,
                    outcome,
                    failure,
                    file: None,
                });
                break;
            }
        }
    }
    if report.cases.is_empty() {
        return Err(Unparsable::no_report(
            FORMAT,
            text,
            "no line matched the `passed`, `failed` or `skipped` patterns",
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn automake_lines_by_default() {
        let p = Patterns::new(None, None, None).unwrap();
        let text =
            "make check\nPASS: t/lexer\nFAIL: t/parser \nSKIP: t/net\nXFAIL: t/known\n# TOTAL: 4\n";
        let report = parse(text, &p).unwrap();
        let got: Vec<(&str, Outcome)> = report
            .cases
            .iter()
            .map(|c| (c.name.as_str(), c.outcome))
            .collect();
        assert_eq!(
            got,
            [
                ("t/lexer", Outcome::Passed),
                ("t/parser", Outcome::Failed),
                ("t/net", Outcome::Skipped),
                ("t/known", Outcome::Passed),
            ]
        );
    }

    #[test]
    fn patterns_of_ones_own_with_a_reason() {
        let p = Patterns::new(
            Some(r"^\[ok\] (?P<name>\S+)"),
            Some(r"^\[bad\] (?P<name>\S+): (?P<why>.*)"),
            None,
        )
        .unwrap();
        let report = parse("[ok] a\n[bad] b: expected 2\n", &p).unwrap();
        assert_eq!(report.error_lines(), ["ERROR: b: expected 2"]);
    }

    #[test]
    fn bad_patterns_and_no_match_are_named() {
        let e = Patterns::new(Some("(unclosed"), None, None).unwrap_err();
        assert!(e.starts_with("`passed` is not a regex"), "{e}");
        let e = Patterns::new(None, Some("^FAIL: .*"), None).unwrap_err();
        assert!(e.contains("`failed`") && e.contains("group `name`"), "{e}");
        let p = Patterns::new(None, None, None).unwrap();
        let err = parse("Traceback (most recent call last):\n", &p).unwrap_err();
        assert_eq!(err.format, "lines");
        assert!(err.to_string().contains("`Traceback"), "{err}");
    }
}
