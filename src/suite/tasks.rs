//! Failing tests as tasks: one task per failing test — or per file, suite
//! or name prefix — labelled `test`, with an id derived from the test's
//! name, so that the same failure always makes the same id and a second
//! refresh adds nothing; and a test task whose tests all pass now is closed
//! (`tasks/done/`, "passes on <branch> at <sha>").
//!
//! Which tests a task stands for is written in its description, in a line
//! of its own that renders as nothing ([`MARK`]): the task is closed by
//! those tests passing, whatever grouping made it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::SystemTime;

use crate::board::{self, Task, edit, paths};
use crate::names::TaskId;
use crate::suite::report::{Case, Outcome, Report};

/// The label every test task carries.
pub const LABEL: &str = "test";

/// Opens the line that lists a test task's tests (as JSON), closed by `-->`.
pub const MARK: &str = "<!-- farm-tests: ";

/// How failing tests are gathered into tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// One task per failing test.
    Test,
    /// One per file (the test's own name where the format gives no file).
    File,
    /// One per suite (JUnit's classname, libtest's binary…).
    Suite,
    /// One per name prefix: the test's full name up to its last `::`, `/`
    /// or `.`.
    Prefix,
}

impl GroupBy {
    /// The group `case` belongs to.
    fn key(self, case: &Case) -> String {
        let id = case.id();
        match self {
            GroupBy::Test => id,
            GroupBy::File => case.file.clone().unwrap_or(id),
            GroupBy::Suite => case.group.clone().unwrap_or(id),
            GroupBy::Prefix => {
                let cut = ["::", "/", "."]
                    .iter()
                    .filter_map(|sep| id.rfind(sep))
                    .max()
                    .filter(|&at| at > 0);
                cut.map_or(id.clone(), |at| id[..at].to_owned())
            }
        }
    }
}

/// At most this many characters of a slug in a task id.
const SLUG_MAX: usize = 60;

/// The task id for the failures gathered under `key`: `test-` and the key
/// with every character a task id cannot hold turned into `-`; when that
/// lost anything (or the slug was cut short), an 8-digit hash of the key
/// follows, so that two keys never share an id.
pub fn task_id(key: &str) -> TaskId {
    let mut slug = String::new();
    for c in key.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            c
        } else {
            '-'
        };
        // No runs of `-`, and never `..` (not allowed in an id).
        if (c == '-' || c == '.') && slug.ends_with(['-', '.']) {
            slug.pop();
            slug.push('-');
            continue;
        }
        slug.push(c);
    }
    let slug = slug.trim_matches(['-', '.']);
    let short: String = slug.chars().take(SLUG_MAX).collect();
    let id = if short == key {
        format!("test-{short}")
    } else {
        let hash = git2::Oid::hash_object(git2::ObjectType::Blob, key.as_bytes())
            .map(|oid| oid.to_string())
            .unwrap_or_default();
        let sep = if short.is_empty() { "" } else { "-" };
        format!("test-{short}{sep}{}", &hash[..8.min(hash.len())])
    };
    TaskId::parse(&id).unwrap_or_else(|_| unreachable_id())
}

/// Every slug is a valid id by construction; this is never reached.
fn unreachable_id() -> TaskId {
    TaskId::parse("test").unwrap_or_else(|e| panic!("{e}"))
}

/// The tests a test task stands for, from its description's [`MARK`] line.
pub fn tests_of(body: &str) -> Option<Vec<String>> {
    let line = body.lines().find_map(|l| l.trim().strip_prefix(MARK))?;
    serde_json::from_str(line.strip_suffix("-->")?.trim()).ok()
}

/// Where the failures were seen, for descriptions and closing notes.
pub struct Seen<'a> {
    pub branch: &'a str,
    pub commit: &'a str,
    /// The suite's command, when there is no command for one test.
    pub command: &'a str,
    /// `run_one` from `[tests]`: a command with `{test}`, `{name}`,
    /// `{group}`, `{file}` for one test.
    pub run_one: Option<&'a str>,
}

impl Seen<'_> {
    /// The command that runs `case` alone, or the whole suite.
    fn command_for(&self, case: &Case) -> String {
        match self.run_one {
            Some(template) => template
                .replace("{test}", &case.id())
                .replace("{name}", &case.name)
                .replace("{group}", case.group.as_deref().unwrap_or(""))
                .replace("{file}", case.file.as_deref().unwrap_or("")),
            None => self.command.to_owned(),
        }
    }
}

/// At most this many tests are described in one task.
const DESCRIBED: usize = 20;

/// The task for `cases`, the failures gathered under `key`.
fn task_for(key: &str, cases: &[&Case], seen: &Seen<'_>, now: SystemTime) -> Task {
    let title = if cases.len() == 1 {
        format!("Make `{}` pass", cases[0].id())
    } else {
        format!("Make the {} failing tests of `{key}` pass", cases.len())
    };
    let short = &seen.commit[..12.min(seen.commit.len())];
    let mut body = format!(
        "{} on `{}` at {short}:\n\n~~~~text\n",
        if cases.len() == 1 {
            "This test fails"
        } else {
            "These tests fail"
        },
        seen.branch
    );
    for case in cases.iter().take(DESCRIBED) {
        let why = case.failure.as_deref().filter(|w| !w.is_empty());
        let line = format!("ERROR: {}: {}", case.id(), why.unwrap_or("failed"));
        body.push_str(&line.replace("~~~~", "~ ~ ~ ~"));
        body.push('\n');
    }
    if cases.len() > DESCRIBED {
        body.push_str(&format!("… and {} more\n", cases.len() - DESCRIBED));
    }
    body.push_str("~~~~\n\n");
    let commands: BTreeSet<String> = cases.iter().map(|c| seen.command_for(c)).collect();
    let run = if seen.run_one.is_some() {
        "Run it"
    } else {
        "Run the suite"
    };
    for command in commands.iter().take(DESCRIBED) {
        body.push_str(&format!("{run}: `{command}`\n"));
    }
    body.push_str(
        "\nFix the code so that it passes, and keep every other test passing \
         (farm's gate runs the suite before your work is pushed).\n\n",
    );
    let names: Vec<String> = cases.iter().map(|c| c.id()).collect();
    let json = serde_json::to_string(&names).unwrap_or_default();
    body.push_str(&format!("{MARK}{} -->\n", json.replace("-->", "--\\u003e")));
    let mut task = board::new_task(task_id(key), &title, &body, Vec::new(), 0, now);
    task.labels.push(LABEL.to_owned());
    task
}

/// What one refresh did to the board.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Tasks added for failures that had none.
    pub added: Vec<TaskId>,
    /// Failures whose task is on the board already (pending, done or failed).
    pub kept: Vec<TaskId>,
    /// Test tasks closed: their tests pass.
    pub closed: Vec<TaskId>,
}

/// Bring the board in `worktree` in line with `report`: a task for each
/// group of failures without one, and every pending test task whose tests
/// all pass moved to `tasks/done/` — but those in `claimed` (an agent is on
/// them: its own push closes them).
pub fn apply(
    worktree: &Path,
    report: &Report,
    by: GroupBy,
    seen: &Seen<'_>,
    claimed: &BTreeSet<TaskId>,
    now: SystemTime,
) -> std::io::Result<Applied> {
    let mut applied = Applied::default();
    let mut groups: BTreeMap<String, Vec<&Case>> = BTreeMap::new();
    let mut named = BTreeSet::new();
    for case in &report.cases {
        if case.outcome == Outcome::Failed && named.insert(case.id()) {
            groups.entry(by.key(case)).or_default().push(case);
        }
    }
    let passed: BTreeSet<String> = report
        .cases
        .iter()
        .filter(|c| c.outcome == Outcome::Passed)
        .map(Case::id)
        .collect();
    let board = board::load(worktree)?;
    let short = &seen.commit[..12.min(seen.commit.len())];
    for task in &board.pending {
        if !task.labels.iter().any(|l| l == LABEL) || claimed.contains(&task.id) {
            continue;
        }
        let Some(tests) = tests_of(&task.body) else {
            continue;
        };
        if !tests.is_empty() && tests.iter().all(|t| passed.contains(t)) {
            edit::done(
                worktree,
                task,
                &format!("passes on `{}` at {short}", seen.branch),
            )?;
            applied.closed.push(task.id.clone());
        }
    }
    for (key, cases) in &groups {
        let task = task_for(key, cases, seen, now);
        if paths::find(worktree, &task.id).is_some() {
            applied.kept.push(task.id);
            continue;
        }
        edit::add(worktree, &task).map_err(|e| match e {
            edit::AddError::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        })?;
        applied.added.push(task.id);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(text: &str) -> Report {
        crate::suite::tap::parse(text).unwrap()
    }

    const SEEN: Seen<'static> = Seen {
        branch: "main",
        commit: "0123456789abcdef",
        command: "sh check.sh",
        run_one: Some("sh check.sh --only {test}"),
    };

    #[test]
    fn an_id_is_the_name_slugged_with_a_hash_when_it_lost_anything() {
        assert_eq!(task_id("parser_if").as_str(), "test-parser_if");
        let id = task_id("tests/test_lexer.py::TestInts::test_hex[0x10]");
        assert!(
            id.as_str()
                .starts_with("test-tests-test_lexer.py-TestInts-test_hex-0x10-"),
            "{id:?}"
        );
        assert_eq!(
            id.as_str().len(),
            "test-tests-test_lexer.py-TestInts-test_hex-0x10-".len() + 8
        );
        // Deterministic, and two names that slug alike differ by the hash.
        assert_eq!(task_id("a b"), task_id("a b"));
        assert_ne!(task_id("a b"), task_id("a/b"));
        // Anything at all is an id: dots, nothing left, very long.
        for key in ["..", "a..b", "∂", "", &"x".repeat(500), "-a-"] {
            let id = task_id(key);
            assert!(!id.as_str().contains(".."), "{key:?}: {id:?}");
            assert!(id.as_str().len() <= 5 + SLUG_MAX + 9, "{key:?}: {id:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_name_makes_a_valid_id(key in "\\PC{0,200}") {
            let id = task_id(&key);
            proptest::prop_assert!(TaskId::parse(id.as_str()).is_ok());
            proptest::prop_assert_eq!(id, task_id(&key));
        }
    }

    #[test]
    fn groups_by_test_file_suite_or_prefix() {
        let case = |name: &str, group: Option<&str>, file: Option<&str>| Case {
            name: name.into(),
            group: group.map(Into::into),
            outcome: Outcome::Failed,
            failure: None,
            file: file.map(Into::into),
        };
        let c = case("test_if", Some("tests.parser"), Some("tests/parser.py"));
        assert_eq!(GroupBy::Test.key(&c), "tests.parser::test_if");
        assert_eq!(GroupBy::File.key(&c), "tests/parser.py");
        assert_eq!(GroupBy::Suite.key(&c), "tests.parser");
        assert_eq!(GroupBy::Prefix.key(&c), "tests.parser");
        let c = case("lexer/ints/hex", None, None);
        assert_eq!(GroupBy::Prefix.key(&c), "lexer/ints");
        assert_eq!(GroupBy::File.key(&c), "lexer/ints/hex");
    }

    #[test]
    fn a_refresh_adds_once_and_closes_what_passes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let now = SystemTime::now();
        let none = BTreeSet::new();
        let first = report("1..3\nok 1 - a\nnot ok 2 - b\n# boom\nnot ok 3 - c\n");
        let applied = apply(dir, &first, GroupBy::Test, &SEEN, &none, now).unwrap();
        assert_eq!(applied.added, [task_id("b"), task_id("c")]);
        let text = std::fs::read_to_string(dir.join("tasks/test-b.md")).unwrap();
        let task = board::parse(task_id("b"), &text).unwrap();
        assert_eq!(task.title, "Make `b` pass");
        assert_eq!(task.labels, ["test"]);
        assert!(
            task.body.contains("Run it: `sh check.sh --only b`"),
            "{}",
            task.body
        );
        assert!(task.body.contains("at 0123456789ab:"), "{}", task.body);
        assert_eq!(tests_of(&task.body), Some(vec!["b".to_owned()]));

        // Again: nothing added.
        let again = apply(dir, &first, GroupBy::Test, &SEEN, &none, now).unwrap();
        assert!(again.added.is_empty() && again.closed.is_empty());
        assert_eq!(again.kept.len(), 2);

        // b passes now; c is claimed: only b is closed.
        let fixed = report("1..3\nok 1 - a\nok 2 - b\nok 3 - c\n");
        let claimed = BTreeSet::from([task_id("c")]);
        let applied = apply(dir, &fixed, GroupBy::Test, &SEEN, &claimed, now).unwrap();
        assert_eq!(applied.closed, [task_id("b")]);
        let done = std::fs::read_to_string(dir.join("tasks/done/test-b.md")).unwrap();
        assert!(done.contains("passes on `main` at 0123456789ab"), "{done}");
        assert!(dir.join("tasks/test-c.md").exists());
        // A task of the user's labelled `test` but not made from tests stays.
        let mine = board::new_task(
            TaskId::parse("mine").unwrap(),
            "Mine",
            "x\n",
            vec![],
            0,
            now,
        );
        let mut mine = mine;
        mine.labels.push(LABEL.into());
        edit::add(dir, &mine).unwrap();
        let applied = apply(dir, &fixed, GroupBy::Test, &SEEN, &none, now).unwrap();
        assert_eq!(applied.closed, [task_id("c")]);
    }

    #[test]
    fn a_group_task_names_its_tests_and_closes_when_all_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let now = SystemTime::now();
        let none = BTreeSet::new();
        let seen = Seen {
            run_one: None,
            ..SEEN
        };
        let failing = report("1..3\nnot ok 1 - lexer/a\nnot ok 2 - lexer/b\nok 3 - parser/c\n");
        let applied = apply(dir, &failing, GroupBy::Prefix, &seen, &none, now).unwrap();
        assert_eq!(applied.added, [task_id("lexer")]);
        let text = std::fs::read_to_string(dir.join("tasks/test-lexer.md")).unwrap();
        assert!(
            text.contains("Make the 2 failing tests of `lexer` pass"),
            "{text}"
        );
        assert!(text.contains("Run the suite: `sh check.sh`"), "{text}");
        let half = report("1..3\nok 1 - lexer/a\nnot ok 2 - lexer/b\nok 3 - parser/c\n");
        let applied = apply(dir, &half, GroupBy::Prefix, &seen, &none, now).unwrap();
        assert!(applied.closed.is_empty());
        let all = report("1..3\nok 1 - lexer/a\nok 2 - lexer/b\nok 3 - parser/c\n");
        let applied = apply(dir, &all, GroupBy::Test, &seen, &none, now).unwrap();
        assert_eq!(applied.closed, [task_id("lexer")]);
    }
}
