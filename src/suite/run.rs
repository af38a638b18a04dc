//! Running the suite's command in a clone and reading its report: as a
//! process tree of its own ([`crate::procs`]: tagged, in a group led by a
//! keeper, with the parent-death signal), so that a timeout, a stop, its
//! end and farm's death — SIGKILL included — each kill the command and
//! everything it started, what left its group too; standard output and
//! error drained as it runs.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::suite::Suite;
use crate::suite::report::Report;

/// What one run of the suite gave.
#[derive(Debug)]
pub struct Ran {
    pub report: Report,
    /// The command's exit code (`None`: killed by a signal).
    pub exit: Option<i32>,
    pub took: Duration,
}

/// Run `suite` in `dir` and read its report. An error when the command
/// cannot start, outlives its timeout, or leaves no report farm can read —
/// never because tests failed.
pub fn run(suite: &Suite, dir: &Path) -> Result<Ran, Error> {
    run_while(suite, dir, &[], None, &mut || true)?
        .ok_or_else(|| Error::failure("the test run was stopped"))
}

/// What the command runs inside: a sandbox's words (ending in `--`), and
/// the whole environment it has there. The tests run code an agent wrote,
/// so they run where the agent's session ran.
pub struct Inside<'a> {
    pub prefix: &'a [String],
    pub env: &'a [(String, String)],
}

/// Why a test run gave no report.
#[derive(Debug)]
pub enum Unrun {
    /// The command cannot be started at all (not found, not executable):
    /// no run will do better until the setting is fixed.
    CannotStart(Error),
    /// It ran, and left no report farm can read, or outlived its timeout.
    NoReport(Error),
}

impl std::fmt::Display for Unrun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unrun::CannotStart(e) | Unrun::NoReport(e) => e.fmt(f),
        }
    }
}

impl From<Unrun> for Error {
    fn from(u: Unrun) -> Error {
        match u {
            Unrun::CannotStart(e) | Unrun::NoReport(e) => e,
        }
    }
}

/// [`run`] with `env` set for the command, asking `keep_going` at least
/// every 20 ms whether to go on: when it says no, the command and everything
/// it started are killed (`None`).
pub fn run_while(
    suite: &Suite,
    dir: &Path,
    env: &[(&str, String)],
    inside: Option<&Inside<'_>>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Option<Ran>, Unrun> {
    let mut cannot_start = false;
    run_child(suite, dir, env, inside, keep_going, &mut cannot_start).map_err(
        |e| match cannot_start {
            true => Unrun::CannotStart(e),
            false => Unrun::NoReport(e),
        },
    )
}

/// [`run_while`]; `cannot_start` is set when the command could not be
/// started.
fn run_child(
    suite: &Suite,
    dir: &Path,
    env: &[(&str, String)],
    inside: Option<&Inside<'_>>,
    keep_going: &mut dyn FnMut() -> bool,
    cannot_start: &mut bool,
) -> Result<Option<Ran>, Error> {
    let shown = suite.command_line();
    // A report left by an earlier run must not pass for this one's.
    if let Some(rel) = &suite.report {
        match std::fs::remove_file(dir.join(rel)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::failure(format!(
                    "cannot remove the old test report `{}`: {e}",
                    rel.display()
                )));
            }
            _ => {}
        }
    }
    let start = Instant::now();
    // Ended (the group, then what left it) on every way out of this
    // function, as it drops.
    let mut tree = crate::procs::Tree::new(dir);
    let argv: Vec<&String> = match inside {
        Some(i) => i.prefix.iter().chain(&suite.argv).collect(),
        None => suite.argv.iter().collect(),
    };
    let mut cmd = Command::new(argv[0]);
    if let Some(i) = inside {
        cmd.env_clear().envs(i.env.iter().map(|(k, v)| (k, v)));
    }
    cmd.args(&argv[1..])
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = tree.root(&mut cmd).spawn().map_err(|e| {
        *cannot_start = true;
        Error::usage(format!("cannot run the test command `{shown}`: {e}"))
            .hint("set `command` in the `[tests]` table of farm.toml")
    })?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    tree.spawned(&child);
    let mut poll = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= suite.timeout => {
                tree.kill();
                let _ = child.wait();
                return Err(Error::failure(format!(
                    "the test command `{shown}` did not finish within {}: killed",
                    crate::age::Age(suite.timeout)
                ))
                .hint("raise `timeout` in the `[tests]` table of farm.toml"));
            }
            Ok(None) if !keep_going() => {
                tree.kill();
                let _ = child.wait();
                return Ok(None);
            }
            // From 1 ms, doubling to 20: a quick suite is not kept waiting
            // for the poll, a long one costs a wake-up every 20 ms.
            Ok(None) => {
                std::thread::sleep(poll);
                poll = (poll * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                tree.kill();
                let _ = child.wait();
                return Err(Error::failure(format!("waiting for `{shown}`: {e}")));
            }
        }
    };
    // Whatever the command left running goes with it — before its output
    // is read to the end (a child holding the pipes open would keep the
    // drains waiting) and before the report is read.
    tree.end();
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let took = start.elapsed();
    let exit = status.code();
    let said = || {
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let code = exit.map_or("a signal".to_owned(), |c| format!("exit {c}"));
        if tail.is_empty() {
            code
        } else {
            format!("{code}; it said: {}", tail.join(" / "))
        }
    };
    let text = match &suite.report {
        None => stdout,
        Some(rel) => std::fs::read_to_string(dir.join(rel)).map_err(|e| {
            Error::failure(format!(
                "the test command `{shown}` left no report at `{}` ({e}; {})",
                rel.display(),
                said()
            ))
            .hint("check `report` in the `[tests]` table of farm.toml")
        })?,
    };
    let report = suite.read(&text).map_err(|e| {
        Error::failure(format!("`{shown}` ({}): {e}", said())).hint(format!(
            "check `format` in the `[tests]` table of farm.toml (now {:?})",
            suite.format.name()
        ))
    })?;
    Ok(Some(Ran { report, exit, took }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Raw;

    fn suite(command: &str, format: &str, report: Option<&str>, timeout: &str) -> Suite {
        let raw = Raw {
            command: Some(command.into()),
            format: Some(format.into()),
            report: report.map(Into::into),
            timeout: Some(timeout.into()),
            ..Raw::default()
        };
        Suite::from_raw(Some(&raw)).unwrap().unwrap()
    }

    #[test]
    fn a_failing_run_is_read_not_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let s = suite(
            "sh -c 'echo PASS: a; echo FAIL: b; exit 1'",
            "lines",
            None,
            "10s",
        );
        let ran = run(&s, tmp.path()).unwrap();
        assert_eq!(ran.exit, Some(1));
        assert_eq!(ran.report.error_lines(), ["ERROR: b: failed"]);
    }

    #[test]
    fn a_report_file_is_read_from_the_clone() {
        let tmp = tempfile::tempdir().unwrap();
        let s = suite(
            "sh -c 'mkdir -p out && printf \"1..1\\nnot ok 1 - x\\n\" > out/t.tap'",
            "tap",
            Some("out/t.tap"),
            "10s",
        );
        let ran = run(&s, tmp.path()).unwrap();
        assert_eq!(ran.report.counts().failed, 1);
        // The next run's report is its own: one left before does not count.
        let s = suite("true", "tap", Some("out/t.tap"), "10s");
        let e = run(&s, tmp.path()).unwrap_err();
        assert!(e.to_string().contains("left no report"), "{e}");
    }

    #[test]
    fn a_run_told_to_stop_is_killed() {
        let tmp = tempfile::tempdir().unwrap();
        let s = suite("sleep 30", "tap", None, "1m");
        let start = Instant::now();
        let mut asked = 0;
        let ran = run_while(&s, tmp.path(), &[], None, &mut || {
            asked += 1;
            asked < 3
        })
        .unwrap();
        assert!(ran.is_none());
        assert_eq!(asked, 3);
        assert!(start.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn missing_command_missing_report_garbage_and_a_hang_are_clear_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let e = run(
            &suite("no-such-test-runner", "tap", None, "10s"),
            tmp.path(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot run the test command `no-such-test-runner`"),
            "{e}"
        );

        let e = run(&suite("true", "junit", Some("r.xml"), "10s"), tmp.path()).unwrap_err();
        assert!(e.to_string().contains("left no report at `r.xml`"), "{e}");

        let e = run(
            &suite(
                "sh -c 'echo Segmentation fault; echo oops >&2; exit 139'",
                "tap",
                None,
                "10s",
            ),
            tmp.path(),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("as tap") && text.contains("`Segmentation fault`"),
            "{text}"
        );
        assert!(text.contains("exit 139; it said: oops"), "{text}");

        // A hang: the command and its child are killed at the timeout.
        let marker = tmp.path().join("child");
        let s = suite(
            &format!("sh -c 'sleep 30 & echo $! > {}; wait'", marker.display()),
            "tap",
            None,
            "1s",
        );
        let e = run(&s, tmp.path()).unwrap_err();
        assert!(e.to_string().contains("did not finish within 1s"), "{e}");
        let pid: i32 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = (0..100).any(|_| {
            let alive = unsafe { libc::kill(pid, 0) } == 0
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "));
            if alive {
                std::thread::sleep(Duration::from_millis(20));
            }
            !alive
        });
        assert!(gone, "the command's child outlived the timeout");
    }
}
