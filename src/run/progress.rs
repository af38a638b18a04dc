//! The progress document: `PROGRESS.md` (`progress` in farm.toml) on the
//! branch, which a fresh session reads to pick up where the last one was —
//! the tests on the branch (the aggregate, and the first `ERROR:` lines),
//! and one line per integrated task (time, task, agent, passing tests
//! before → after). Bounded: past [`KEEP`] lines the oldest are folded into
//! a count, so that it never floods a session's context.
//!
//! farm writes it in the commit it pushes, on top of the work, after the
//! gate (see [`integrate`](super::integrate)): under the push lock the
//! file is the branch's own, so two agents never conflict on it.

use std::time::SystemTime;

use crate::claims::record::timestamp;
use crate::suite::report::Counts;

/// How the subject of farm's commit of the document begins (no agent's
/// work: such a commit alone needs no rescue).
pub const SUBJECT: &str = "farm: progress: ";

/// The document's default name.
pub const DEFAULT: &str = "PROGRESS.md";

/// Lines of integrated tasks kept; older ones are counted in a summary.
pub const KEEP: usize = 50;

/// `ERROR:` lines shown of the tests failing on the branch.
pub const ERRORS: usize = 10;

const TESTS: &str = "## Tests";
const INTEGRATED: &str = "## Integrated";
const EARLIER: &str = "Earlier: ";

/// One integrated task.
pub struct Entry<'a> {
    pub at: SystemTime,
    pub task: &'a str,
    pub agent: &'a str,
    /// Passing tests on the branch before, and with it (when the gate ran or
    /// knew them).
    pub tests: Option<(usize, usize)>,
    /// The task whose tests covered this one's code with its own (it
    /// landed in a batch without tests of its own; see the merge queue).
    pub tested_with: Option<&'a str>,
}

/// The tests on the branch once the task is in.
pub struct Tests<'a> {
    pub counts: Counts,
    /// Every failing test's `ERROR:` line.
    pub errors: &'a [String],
}

/// The document `old` (empty: none yet) with `entry` added, and the tests
/// section replaced by `tests` when given (kept as it was otherwise).
pub fn update(old: &str, branch: &str, entry: &Entry<'_>, tests: Option<&Tests<'_>>) -> String {
    let parsed = Parsed::read(old);
    let mut lines = parsed.lines;
    let mut line = format!(
        "- {} `{}` by {}",
        timestamp(entry.at),
        entry.task,
        entry.agent
    );
    if let Some((before, after)) = entry.tests {
        line.push_str(&format!("; passing tests {before} → {after}"));
    } else if let Some(task) = entry.tested_with {
        line.push_str(&format!("; tested with `{task}`"));
    }
    lines.push(line);
    let (mut folded, mut since) = (parsed.folded, parsed.since);
    if lines.len() > KEEP {
        let gone: Vec<String> = lines.drain(..lines.len() - KEEP).collect();
        folded += gone.len();
        if since.is_none() {
            since = gone[0]
                .strip_prefix("- ")
                .and_then(|l| l.split_whitespace().next())
                .map(str::to_owned);
        }
    }
    let tests_section = match tests {
        Some(t) => {
            let c = t.counts;
            let mut text = format!(
                "{} passed, {} failed, {} skipped, {} total (after `{}`, {}).\n",
                c.passed,
                c.failed,
                c.skipped,
                c.total,
                entry.task,
                timestamp(entry.at)
            );
            if !t.errors.is_empty() {
                text.push_str(&format!(
                    "\nFailing ({} of {}):\n\n",
                    t.errors.len().min(ERRORS),
                    t.errors.len()
                ));
                for e in t.errors.iter().take(ERRORS) {
                    text.push_str(&format!("    {e}\n"));
                }
            }
            Some(text)
        }
        None => parsed.tests,
    };
    let mut out = format!(
        "# Progress\n\nKept by farm on `{branch}`: the tests, and one line per integrated task, \
         newest last (older lines are folded into a count). Read it first.\n"
    );
    if let Some(t) = tests_section {
        out.push_str(&format!("\n{TESTS}\n\n{}", t.trim_end()));
        out.push('\n');
    }
    out.push_str(&format!("\n{INTEGRATED}\n\n"));
    if folded > 0 {
        out.push_str(&format!(
            "{EARLIER}{folded} task(s), since {}.\n\n",
            since.as_deref().unwrap_or("the start")
        ));
    }
    for l in &lines {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// What an earlier document says: whatever else it holds (edited by hand,
/// cut short) is dropped, never an error.
#[derive(Default)]
struct Parsed {
    tests: Option<String>,
    folded: usize,
    since: Option<String>,
    lines: Vec<String>,
}

impl Parsed {
    fn read(text: &str) -> Parsed {
        let mut parsed = Parsed::default();
        let mut section = "";
        let mut tests = String::new();
        for line in text.lines() {
            if line.starts_with("## ") {
                section = line.trim();
                continue;
            }
            match section {
                TESTS => {
                    tests.push_str(line);
                    tests.push('\n');
                }
                INTEGRATED => {
                    if let Some(rest) = line.strip_prefix(EARLIER) {
                        let mut words = rest.split_whitespace();
                        parsed.folded = words.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                        parsed.since = rest
                            .split_once("since ")
                            .map(|(_, s)| s.trim_end_matches('.').to_owned());
                    } else if line.starts_with("- ") {
                        parsed.lines.push(line.to_owned());
                    }
                }
                _ => {}
            }
        }
        if !tests.trim().is_empty() {
            parsed.tests = Some(tests.trim().to_owned());
        }
        parsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    #[test]
    fn a_line_per_task_and_the_tests_replaced() {
        let errors = vec!["ERROR: b: boom".to_owned()];
        let tests = Tests {
            counts: Counts {
                passed: 2,
                failed: 1,
                skipped: 0,
                total: 3,
            },
            errors: &errors,
        };
        let one = Entry {
            at: at(0),
            task: "fix-a",
            agent: "h-1",
            tests: Some((1, 2)),
            tested_with: None,
        };
        let doc = update("", "main", &one, Some(&tests));
        assert!(doc.starts_with("# Progress\n"), "{doc}");
        assert!(
            doc.contains("## Tests\n\n2 passed, 1 failed, 0 skipped, 3 total (after `fix-a`, "),
            "{doc}"
        );
        assert!(
            doc.contains("Failing (1 of 1):\n\n    ERROR: b: boom\n"),
            "{doc}"
        );
        assert!(
            doc.contains("`fix-a` by h-1; passing tests 1 → 2\n"),
            "{doc}"
        );
        // A task without test counts keeps the tests section as it was.
        let two = Entry {
            at: at(60),
            task: "docs",
            agent: "h-2",
            tests: None,
            tested_with: None,
        };
        let doc2 = update(&doc, "main", &two, None);
        assert!(
            doc2.contains("Failing (1 of 1):\n\n    ERROR: b: boom\n"),
            "{doc2}"
        );
        assert!(doc2.ends_with("`docs` by h-2\n"), "{doc2}");
        assert_eq!(doc2.matches("\n- ").count(), 2);
        // Read back, it is the same document.
        assert_eq!(update(&doc, "main", &two, None), doc2);
        // A change that landed in a batch, tested with the one after it.
        let three = Entry {
            tested_with: Some("fix-c"),
            ..two
        };
        let doc3 = update(&doc2, "main", &three, None);
        assert!(
            doc3.ends_with("`docs` by h-2; tested with `fix-c`\n"),
            "{doc3}"
        );
    }

    #[test]
    fn it_stays_bounded_folding_the_oldest_into_a_count() {
        let mut doc = String::new();
        for i in 0..(KEEP as u64 * 3) {
            let task = format!("t{i}");
            let e = Entry {
                at: at(i),
                task: &task,
                agent: "a",
                tests: None,
                tested_with: None,
            };
            doc = update(&doc, "main", &e, None);
        }
        assert_eq!(doc.matches("\n- ").count(), KEEP, "{doc}");
        assert!(
            doc.contains(&format!(
                "Earlier: {} task(s), since {}.",
                KEEP * 2,
                timestamp(at(0))
            )),
            "{doc}"
        );
        assert!(
            doc.ends_with(&format!("`t{}` by a\n", KEEP * 3 - 1)),
            "{doc}"
        );
        assert!(doc.len() < 8_000, "{} bytes", doc.len());
    }

    #[test]
    fn a_document_edited_by_hand_is_read_for_what_it_holds() {
        let e = Entry {
            at: at(0),
            task: "x",
            agent: "a",
            tests: None,
            tested_with: None,
        };
        let doc = update(
            "random notes\n## Integrated\nEarlier: lots\n- kept line\n",
            "main",
            &e,
            None,
        );
        assert!(doc.contains("- kept line\n- "), "{doc}");
        assert!(!doc.contains("random notes"), "{doc}");
    }
}
