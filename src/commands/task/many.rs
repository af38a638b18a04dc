//! `farm task add --from FILE`: many tasks from one TOML file, one
//! `[[task]]` table each, checked all before any is written and added in one
//! commit — a backlog planned in an editor lands whole or not at all.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{NewTask, add_error, new_task, text_or_stdin, warn_missing};
use crate::board::edit::{self, Edit, Tx};
use crate::board::{DEFAULT_MAX_ATTEMPTS, Task};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::names::TaskId;

/// The file: `[[task]]` tables and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    task: Vec<Entry>,
}

/// One `[[task]]`: what `farm task add` takes as flags.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    title: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    after: Vec<String>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    priority: i64,
    max_attempts: Option<i64>,
    timeout: Option<String>,
    #[serde(default)]
    review: bool,
}

/// The tasks `text` (read from `name`) describes, each checked as
/// `farm task add` checks one; the first bad one is the error, naming the
/// file, the task and the fix.
fn parse(name: &str, text: &str) -> Result<Vec<Task>, Error> {
    let file: File = toml::from_str(text).map_err(|e| {
        Error::usage(format!(
            "`{name}` is not a task file: {}",
            crate::error::toml_message(text, &e)
        ))
        .hint("write one [[task]] table per task, with keys id, title, description, after, labels, priority, max_attempts, timeout, review (farm task add --help)")
    })?;
    if file.task.is_empty() {
        return Err(Error::usage(format!("`{name}` holds no [[task]] table"))
            .hint("write one [[task]] table per task: [[task]] then id = \"lexer\""));
    }
    let mut tasks = Vec::with_capacity(file.task.len());
    for (n, entry) in (1..).zip(file.task) {
        let what = format!("`{name}`, task {n} (`{}`): ", entry.id);
        let fix = format!("fix task {n} in `{name}` and run it again: no task was added");
        let bad = |e: String| Error::usage(format!("{what}{e}")).hint(fix.clone());
        let id = TaskId::parse(&entry.id).map_err(|e| bad(e.to_string()))?;
        let after = entry
            .after
            .iter()
            .map(|a| TaskId::parse(a).map_err(|e| bad(format!("`after`: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let labels = entry
            .labels
            .iter()
            .map(|l| crate::names::parse_label(l).map_err(|e| bad(format!("`labels`: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let max_attempts = match entry.max_attempts {
            None => DEFAULT_MAX_ATTEMPTS,
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad(format!("`max_attempts` is {n}; it must be at least 1")))?,
        };
        let timeout: Option<Duration> = entry
            .timeout
            .as_deref()
            .map(|t| crate::age::parse_duration(t).map_err(|e| bad(format!("`timeout`: {e}"))))
            .transpose()?;
        let task = new_task(
            NewTask {
                id,
                title: entry.title.as_deref(),
                body: &entry.description,
                after,
                labels: &labels,
                priority: entry.priority,
                max_attempts,
                timeout,
                review: entry.review,
            },
            &what,
        )
        .map_err(|e| {
            if e.hints.is_empty() {
                e.hint(fix.clone())
            } else {
                e
            }
        })?;
        tasks.push(task);
    }
    Ok(tasks)
}

/// Add every task of `file` (`-`: stdin) to the board of `branch`.
pub(super) fn run(ctx: &Ctx, file: &Path, branch: Option<&str>) -> Result<(), Error> {
    let name = file.display().to_string();
    let text = if name == "-" {
        text_or_stdin("-", "the tasks")?
    } else {
        std::fs::read_to_string(file).map_err(|e| {
            Error::usage(format!("cannot read `{name}`: {e}"))
                .hint("give the path of a TOML file of [[task]] tables, or - for stdin")
        })?
    };
    let tasks = parse(&name, &text)?;
    let hub = Hub::open(&ctx.hub_spec()?, branch)?;
    let mut hub_branch = HubBranch::new(&hub, format!("{} tasks", tasks.len()));
    let tx = edit::transact(&mut hub_branch, branch::ROUNDS, |dir| {
        edit::add_all(dir, &tasks).map_err(|e| {
            let e = add_error(e);
            Error {
                message: format!("`{name}`: {}; no task was added", e.message),
                ..e
            }
        })?;
        warn_missing(ctx, dir, &tasks);
        Ok(Edit::Commit {
            message: format!(
                "farm: add {} tasks from {}",
                tasks.len(),
                file.file_name()
                    .map_or(name.clone(), |n| n.to_string_lossy().into_owned())
            ),
            value: (),
        })
    })?;
    match tx {
        Tx::Pushed(()) => {
            for task in &tasks {
                ctx.out
                    .say(&format!("added `{}`: {}", task.id, task.title))?;
            }
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(()) => Err(Error::failure(format!(
            "could not add the tasks of `{name}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_file_of_tasks_reads_whole_or_names_the_bad_one() {
        let tasks = parse(
            "b.toml",
            "[[task]]\nid = \"a\"\ndescription = \"# Do a\\nmore\"\n\
             [[task]]\nid = \"b\"\ntitle = \"Bee\"\nafter = [\"a\"]\npriority = 2\n\
             max_attempts = 5\ntimeout = \"30m\"\nlabels = [\"docs\"]\n",
        )
        .unwrap();
        assert_eq!(tasks.len(), 2);
        assert_eq!(
            (tasks[0].title.as_str(), tasks[0].max_attempts),
            ("Do a", 3)
        );
        assert_eq!(tasks[1].title, "Bee");
        assert_eq!(tasks[1].after[0].as_str(), "a");
        assert_eq!((tasks[1].priority, tasks[1].max_attempts), (2, 5));
        for (text, says) in [
            ("[[task]]\nid = \"a b\"\n", "task 1 (`a b`)"),
            (
                "[[task]]\nid = \"a\"\n[[task]]\nid = \"b\"\nafter = [\"b\"]\n",
                "task 2 (`b`)",
            ),
            (
                "[[task]]\nid = \"a\"\nmax_attempts = 0\n",
                "`max_attempts` is 0",
            ),
            ("[[task]]\nid = \"a\"\ntitel = \"x\"\n", "titel"),
            (
                "[[task]]\nid = \"a\"\ntimeout = \"soon\"\n",
                "`timeout`: invalid duration `soon`",
            ),
            ("", "holds no [[task]]"),
        ] {
            let e = parse("b.toml", text)
                .err()
                .unwrap_or_else(|| panic!("{text}"));
            assert!(
                e.message.contains(says) && e.message.contains("`b.toml`"),
                "{text}: {}",
                e.message
            );
            assert_eq!(e.code, crate::error::Code::Usage);
        }
    }
}
