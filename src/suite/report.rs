//! A test run's report as farm reads it, whatever the format: the cases,
//! each passed, failed or skipped, and what they add up to.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How one test case ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// One test case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Its name within its group.
    pub name: String,
    /// The suite, class or module it belongs to, when the format says.
    pub group: Option<String>,
    pub outcome: Outcome,
    /// The first line of why it failed (failed cases only; may be empty).
    pub failure: Option<String>,
    /// The file it is in, when the format says.
    pub file: Option<String>,
}

impl Case {
    /// Its full name: `group::name`, or the name alone.
    pub fn id(&self) -> String {
        match &self.group {
            Some(g) if !g.is_empty() => format!("{g}::{}", self.name),
            _ => self.name.clone(),
        }
    }
}

/// Cases counted by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub total: usize,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Passed => self.passed += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Skipped => self.skipped += 1,
        }
        self.total += 1;
    }
}

/// Every case a run reported, in the report's order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub cases: Vec<Case>,
}

impl Report {
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for case in &self.cases {
            counts.add(case.outcome);
        }
        counts
    }

    /// The counts of each group (cases with none under "").
    pub fn by_group(&self) -> BTreeMap<String, Counts> {
        let mut groups: BTreeMap<String, Counts> = BTreeMap::new();
        for case in &self.cases {
            groups
                .entry(case.group.clone().unwrap_or_default())
                .or_default()
                .add(case.outcome);
        }
        groups
    }

    /// `ERROR: <test>: <first line of the failure>`, one per failed case:
    /// what a session reads first, and greps.
    pub fn error_lines(&self) -> Vec<String> {
        self.cases
            .iter()
            .filter(|c| c.outcome == Outcome::Failed)
            .map(|c| {
                let why = c.failure.as_deref().filter(|w| !w.is_empty());
                format!("ERROR: {}: {}", c.id(), why.unwrap_or("failed"))
            })
            .collect()
    }
}

/// The first line of `text` that is not blank, trimmed (at most 200
/// characters: a failure's first line is a summary, not a dump).
pub fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// A report that could not be read: which format, where, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the test report as {format}: line {line}: {why}{}", shown(.text))]
pub struct Unparsable {
    pub format: &'static str,
    /// 1-based; 0 when the whole report is at fault.
    pub line: usize,
    /// The offending line, as it is.
    pub text: String,
    pub why: String,
}

impl Unparsable {
    /// `text` as a whole is no report in `format` (`why`): shown by its
    /// first line.
    pub fn no_report(format: &'static str, text: &str, why: &str) -> Unparsable {
        Unparsable {
            format,
            line: 1,
            text: text.lines().next().unwrap_or("").to_owned(),
            why: why.to_owned(),
        }
    }
}

fn shown(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(" (`{}`)", first_line(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(group: Option<&str>, name: &str, outcome: Outcome, failure: Option<&str>) -> Case {
        Case {
            name: name.into(),
            group: group.map(Into::into),
            outcome,
            failure: failure.map(Into::into),
            file: None,
        }
    }

    #[test]
    fn counts_groups_and_error_lines() {
        let report = Report {
            cases: vec![
                case(Some("lexer"), "ints", Outcome::Passed, None),
                case(
                    Some("lexer"),
                    "floats",
                    Outcome::Failed,
                    Some("expected 1.5"),
                ),
                case(None, "smoke", Outcome::Skipped, None),
                case(None, "boot", Outcome::Failed, Some("")),
            ],
        };
        assert_eq!(
            report.counts(),
            Counts {
                passed: 1,
                failed: 2,
                skipped: 1,
                total: 4
            }
        );
        let groups = report.by_group();
        assert_eq!(groups["lexer"].failed, 1);
        assert_eq!(groups[""].total, 2);
        assert_eq!(
            report.error_lines(),
            ["ERROR: lexer::floats: expected 1.5", "ERROR: boot: failed"]
        );
    }

    #[test]
    fn first_line_skips_blank_lines_and_is_bounded() {
        assert_eq!(first_line("\n  \n  assert x == 1\nmore"), "assert x == 1");
        assert_eq!(first_line(""), "");
        let long = "x".repeat(300);
        assert_eq!(first_line(&long).chars().count(), 201);
    }
}
