//! The project's own test suite, as farm understands it: the `[tests]`
//! table of `farm.toml` ([`Suite`]), running its command in a clone
//! ([`run`](mod@run)), and reading what it reports into test cases
//! ([`report`]) in one of four formats: JUnit XML ([`junit`]), libtest's
//! JSON lines ([`libtest`]), TAP ([`tap`]), or lines matched by patterns
//! ([`lines`]). A failing test is a normal outcome; a report that is
//! missing or cannot be read is the error.

pub mod junit;
pub mod libtest;
pub mod lines;
pub mod report;
pub mod results;
pub mod run;
pub mod tap;
pub mod tasks;

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::suite::lines::Patterns;
use crate::suite::report::{Report, Unparsable};

/// `[tests]` in `farm.toml`, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// The command, split into words like `--agent` (no shell).
    pub command: Option<String>,
    /// `junit`, `libtest-json`, `tap` or `lines`.
    pub format: Option<String>,
    /// The file the command writes its report to, relative to the clone
    /// (default: the report is its standard output).
    pub report: Option<String>,
    /// How long a run may take (default 30m).
    pub timeout: Option<String>,
    /// The command the gate runs before every push (default: `command`);
    /// it writes the same report in the same format.
    pub verify: Option<String>,
    /// The share of the suite the gate runs (`"10%"`): a sample of its own
    /// for each agent and task, plus the tests in files the change touched.
    /// The `verify` command is given the tests to run in a file named by
    /// `FARM_TEST_SAMPLE`, one full name a line.
    pub verify_sample: Option<String>,
    /// The command that runs one test, for the tasks made from failing
    /// tests: `{test}`, `{name}`, `{group}` and `{file}` are replaced.
    pub run_one: Option<String>,
    /// `format = "lines"`: the patterns (see [`lines`]).
    pub passed: Option<String>,
    pub failed: Option<String>,
    pub skipped: Option<String>,
}

/// The report formats farm reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Junit,
    LibtestJson,
    Tap,
    Lines,
}

impl Format {
    pub const NAMES: &str = "junit, libtest-json, tap, lines";

    pub fn name(self) -> &'static str {
        match self {
            Format::Junit => "junit",
            Format::LibtestJson => "libtest-json",
            Format::Tap => "tap",
            Format::Lines => "lines",
        }
    }

    fn parse(name: &str) -> Option<Format> {
        [
            Format::Junit,
            Format::LibtestJson,
            Format::Tap,
            Format::Lines,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }
}

/// The test suite a hub's `farm.toml` describes, checked.
#[derive(Clone, Debug)]
pub struct Suite {
    /// The command, as words.
    pub argv: Vec<String>,
    pub format: Format,
    /// Where the report is, relative to the clone; `None`: standard output.
    pub report: Option<PathBuf>,
    pub timeout: Duration,
    /// The gate's command (`verify`), when it is not `argv`.
    verify: Option<Vec<String>>,
    /// `run_one`, as written.
    pub run_one: Option<String>,
    /// `verify_sample`, in percent (above 0, below 100): `None` runs all.
    pub sample: Option<f64>,
    patterns: Patterns,
}

/// A run may take this long unless `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

impl Suite {
    /// The suite `raw` describes; why it cannot be used, naming the key.
    /// `None` when there is no `[tests]` table.
    pub fn from_raw(raw: Option<&Raw>) -> Result<Option<Suite>, String> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let command = raw
            .command
            .as_deref()
            .ok_or("`[tests]` has no `command`: the command that runs the suite")?;
        let words = |key: &str, command: &str| -> Result<Vec<String>, String> {
            let argv = shell_words::split(command)
                .map_err(|e| format!("`{key}` = {command:?} cannot be split into words: {e}"))?;
            if argv.is_empty() {
                return Err(format!("`{key}` is empty"));
            }
            Ok(argv)
        };
        let argv = words("command", command)?;
        let verify = match raw.verify.as_deref() {
            None => None,
            Some(verify) => Some(words("verify", verify)?),
        };
        let format = match raw.format.as_deref() {
            None => {
                return Err(format!(
                    "`[tests]` has no `format`: one of {}",
                    Format::NAMES
                ));
            }
            Some(name) => Format::parse(name)
                .ok_or_else(|| format!("unknown `format` {name:?}: one of {}", Format::NAMES))?,
        };
        let report = match raw.report.as_deref() {
            None => None,
            Some(path) => Some(inside(path)?),
        };
        let timeout = match raw.timeout.as_deref() {
            None => DEFAULT_TIMEOUT,
            Some(t) => crate::age::parse_duration(t).map_err(|e| format!("`timeout`: {e}"))?,
        };
        let any_pattern = raw.passed.is_some() || raw.failed.is_some() || raw.skipped.is_some();
        if any_pattern && format != Format::Lines {
            return Err(format!(
                "`passed`, `failed` and `skipped` are patterns for `format = \"lines\"`, not {:?}",
                format.name()
            ));
        }
        let patterns = Patterns::new(
            raw.passed.as_deref(),
            raw.failed.as_deref(),
            raw.skipped.as_deref(),
        )?;
        Ok(Some(Suite {
            argv,
            format,
            report,
            timeout,
            verify,
            run_one: raw.run_one.clone(),
            sample: raw
                .verify_sample
                .as_deref()
                .map(percent)
                .transpose()?
                .filter(|p| *p < 100.0),
            patterns,
        }))
    }

    /// The suite as the gate runs it: `verify` for the command, if given.
    pub fn for_gate(&self) -> Suite {
        Suite {
            argv: self.verify.clone().unwrap_or_else(|| self.argv.clone()),
            verify: None,
            ..self.clone()
        }
    }

    /// Read `text`, a report in this suite's format.
    pub fn read(&self, text: &str) -> Result<Report, Unparsable> {
        match self.format {
            Format::Junit => junit::parse(text),
            Format::LibtestJson => libtest::parse(text),
            Format::Tap => tap::parse(text),
            Format::Lines => lines::parse(text, &self.patterns),
        }
    }

    /// The command as one line, for messages.
    pub fn command_line(&self) -> String {
        shell_words::join(&self.argv)
    }
}

/// `verify_sample` = `"10%"`: the share, in percent.
fn percent(text: &str) -> Result<f64, String> {
    text.trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| {
            format!("`verify_sample` = {text:?} is not a share of the suite: write a percentage above 0, such as \"10%\"")
        })
}

/// `path`, checked to stay inside the clone: relative, no `..`.
fn inside(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(p.to_path_buf())
    } else {
        Err(format!(
            "`report` = {path:?} must be a path inside the clone (relative, no `..`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Raw {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_tests_table_is_checked_key_by_key() {
        let s = Suite::from_raw(Some(&raw(
            "command = \"pytest -q --junitxml=out/r.xml\"\nformat = \"junit\"\nreport = \"out/r.xml\"\ntimeout = \"5m\"",
        )))
        .unwrap()
        .unwrap();
        assert_eq!(s.argv, ["pytest", "-q", "--junitxml=out/r.xml"]);
        assert_eq!(s.format, Format::Junit);
        assert_eq!(s.report.as_deref(), Some(Path::new("out/r.xml")));
        assert_eq!(s.timeout, Duration::from_secs(300));
        assert_eq!(s.for_gate().argv, s.argv);
        assert!(Suite::from_raw(None).unwrap().is_none());
        let s = Suite::from_raw(Some(&raw(
            "command = \"pytest\"\nformat = \"junit\"\nverify = \"pytest -x -q\"",
        )))
        .unwrap()
        .unwrap();
        assert_eq!(s.argv, ["pytest"]);
        assert_eq!(s.for_gate().argv, ["pytest", "-x", "-q"]);
        assert_eq!(s.sample, None);
        let sampled = |share: &str| {
            let text = format!("command = \"t\"\nformat = \"tap\"\nverify_sample = \"{share}\"");
            Suite::from_raw(Some(&raw(&text))).unwrap().unwrap().sample
        };
        assert_eq!(sampled("10%"), Some(10.0));
        assert_eq!(sampled(" 2.5 %"), Some(2.5));
        assert_eq!(sampled("100%"), None, "all of it is no sample");

        for (text, says) in [
            ("format = \"tap\"", "no `command`"),
            ("command = \"t\"", "no `format`"),
            (
                "command = \"t\"\nformat = \"xunit\"",
                "unknown `format` \"xunit\": one of junit",
            ),
            (
                "command = \"t\"\nformat = \"tap\"\nreport = \"../r\"",
                "inside the clone",
            ),
            (
                "command = \"t\"\nformat = \"tap\"\nreport = \"/tmp/r\"",
                "inside the clone",
            ),
            (
                "command = \"t\"\nformat = \"tap\"\ntimeout = \"soon\"",
                "`timeout`",
            ),
            (
                "command = \"t\"\nformat = \"tap\"\nfailed = \"x\"",
                "for `format = \"lines\"`",
            ),
            (
                "command = \"t\"\nformat = \"lines\"\nfailed = \"x\"",
                "group `name`",
            ),
            (
                "command = \"'unclosed\"\nformat = \"tap\"",
                "cannot be split",
            ),
            (
                "command = \"t\"\nformat = \"tap\"\nverify = \"\"",
                "`verify` is empty",
            ),
        ] {
            let e = Suite::from_raw(Some(&raw(text))).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
