//! `farm tasks`: the board — ready, blocked, claimed, done, failed, stuck, invalid.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::board::{self, Status};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::names::TaskId;
use crate::output::{Style, count, table};

/// Show the board on the hub's branch, with each task's state.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm tasks
  farm tasks --json | jq -r '.tasks[] | select(.status == \"ready\") | .id'")]
pub struct Args {
    /// Print JSON: {branch, counts, tasks: [{id, title, status, detail, priority, after, attempts, max_attempts, review, change}], invalid: [...]}.
    #[arg(long)]
    json: bool,

    /// The branch whose board to show (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// A done or failed task as its file says (the board keeps only their ids).
pub(crate) struct Finished {
    pub title: String,
    /// The tasks it waited for.
    pub after: Vec<TaskId>,
    attempts: u32,
    max_attempts: u32,
    /// The heading of its last attempt's note: why it failed.
    pub last: Option<String>,
}

/// The last `## Attempt N — why` of a task's notes: `why`.
fn last_reason(body: &str) -> Option<String> {
    body.lines()
        .rev()
        .find_map(|l| l.strip_prefix("## Attempt "))
        .map(|l| l.split_once(" — ").map_or(l, |(_, why)| why).to_owned())
}

/// The done and failed tasks of the board at the hub's branch, read from
/// their files (the board's states need only their ids, so it does not).
pub(crate) fn finished(hub: &Hub, snapshot: &board::Snapshot) -> BTreeMap<TaskId, Finished> {
    read_finished(
        hub,
        &[
            (board::paths::DONE, &snapshot.done),
            (board::paths::FAILED, &snapshot.failed),
        ],
    )
}

/// The failed tasks of the board at the hub's branch, read from their
/// files: what "needs you" asks of them (their last reason), without
/// reading every done task too.
pub(crate) fn failed(hub: &Hub, snapshot: &board::Snapshot) -> BTreeMap<TaskId, Finished> {
    read_finished(hub, &[(board::paths::FAILED, &snapshot.failed)])
}

/// The tasks `ids` of each directory of `dirs`, read from their files.
fn read_finished(hub: &Hub, dirs: &[(&str, &BTreeSet<TaskId>)]) -> BTreeMap<TaskId, Finished> {
    let mut out = BTreeMap::new();
    let mut read = |id: &TaskId, text: &str| {
        if let Ok(t) = board::parse(id.clone(), text) {
            let last = last_reason(&t.body);
            out.insert(
                id.clone(),
                Finished {
                    title: t.title,
                    after: t.after,
                    attempts: t.attempts,
                    max_attempts: t.max_attempts,
                    last,
                },
            );
        }
    };
    match (hub.git_dir(), hub.branch_rev()) {
        (Some(git_dir), Some(rev)) => {
            // Each directory's tree is read once and its entries walked: a
            // lookup by path per task parsed the 10,000-entry tree each
            // time (14 s for `farm tasks` on 10,000 done tasks).
            let Ok(repo) = git2::Repository::open(git_dir) else {
                return out;
            };
            let Ok(root) = repo.revparse_single(&rev).and_then(|c| c.peel_to_tree()) else {
                return out;
            };
            for &(dir, ids) in dirs {
                let Some(tree) = root
                    .get_path(std::path::Path::new(dir))
                    .ok()
                    .and_then(|e| repo.find_tree(e.id()).ok())
                else {
                    continue;
                };
                for entry in tree.iter() {
                    let Some(id) = entry
                        .name()
                        .ok()
                        .and_then(|n| n.strip_suffix(".md"))
                        .and_then(|n| TaskId::parse(n).ok())
                        .filter(|id| ids.contains(id))
                    else {
                        continue;
                    };
                    if let Ok(blob) = repo.find_blob(entry.id()) {
                        read(&id, &String::from_utf8_lossy(blob.content()));
                    }
                }
            }
        }
        _ => {
            let Ok(tmp) = tempfile::tempdir() else {
                return out;
            };
            let Ok(board_dir) = hub.extract_board(tmp.path()) else {
                return out;
            };
            for &(dir, ids) in dirs {
                for id in ids {
                    let path = board_dir.join(dir).join(format!("{id}.md"));
                    if let Ok(text) = std::fs::read_to_string(path) {
                        read(id, &text);
                    }
                }
            }
        }
    }
    out
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let mut snapshot = read_board(&hub)?;
    let finished = finished(&hub, &snapshot);
    snapshot.claimed = crate::claims::holders(&ctx.store()?.list()?);
    let statuses = board::statuses(&snapshot);
    // `pending` is sorted by id (the first copy of a duplicate wins, as the
    // board's states say).
    let find = |id: &TaskId| {
        let at = snapshot.pending.partition_point(|t| &t.id < id);
        snapshot
            .pending
            .get(at)
            .map(|t| &**t)
            .filter(|t| &t.id == id)
    };
    if args.json {
        let tasks: Vec<_> = statuses
            .iter()
            .map(|(id, status)| {
                let t = find(id);
                let f = finished.get(id);
                let (name, detail) = describe_task(status, find(id));
                json!({
                    "id": id.as_str(),
                    "status": name,
                    "detail": detail,
                    "title": t.map(|t| &t.title).or(f.map(|f| &f.title)),
                    "priority": t.map(|t| t.priority),
                    "after": t.map(|t| t.after.iter().map(TaskId::as_str).collect::<Vec<_>>()),
                    "labels": t.map(|t| &t.labels),
                    "review": t.map(|t| t.review),
                    "change": t.and_then(|t| t.change.as_deref()),
                    "attempts": t.map(|t| t.attempts).or(f.map(|f| f.attempts)),
                    "max_attempts": t.map(|t| t.max_attempts).or(f.map(|f| f.max_attempts)),
                    "last_reason": t.and_then(|t| last_reason(&t.body)).or(f.and_then(|f| f.last.clone())),
                })
            })
            .collect();
        let invalid: Vec<_> = snapshot
            .invalid
            .iter()
            .map(|i| json!({"file": i.name, "error": i.error}))
            .collect();
        let doc = json!({
            "branch": hub.branch,
            "counts": board::counts(&snapshot),
            "tasks": tasks,
            "invalid": invalid,
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    if statuses.is_empty() && snapshot.invalid.is_empty() {
        ctx.out.note(&format!(
            "no tasks on `{}`; add one: farm task add ID -m TEXT",
            hub.branch
        ));
        return Ok(());
    }
    let mut rows: Vec<_> = statuses
        .iter()
        .map(|(id, status)| {
            let (name, detail) = describe_task(status, find(id));
            let style = match status {
                Status::Ready => Style::Good,
                Status::Claimed { .. }
                | Status::Blocked { .. }
                | Status::Waiting { .. }
                | Status::Review { .. } => Style::Warn,
                Status::Done => Style::Dim,
                Status::Failed | Status::Stuck { .. } => Style::Bad,
            };
            let (title, attempts, last) = match (find(id), finished.get(id)) {
                (Some(t), _) => (t.title.clone(), t.attempts, last_reason(&t.body)),
                (None, Some(f)) => (f.title.clone(), f.attempts, f.last.clone()),
                (None, None) => (String::new(), 0, None),
            };
            // Why it failed last, for a task that has failed attempts.
            let detail = match (last, attempts) {
                (Some(why), n) if n > 0 && detail.is_empty() => format!(
                    "{}, last: {why}",
                    count(n as usize, "failed attempt", "failed attempts")
                ),
                (Some(why), n) if n > 0 => format!("{detail}; {n} failed, last: {why}"),
                _ => detail,
            };
            vec![
                (id.to_string(), None),
                (name.to_owned(), Some(style)),
                (title, None),
                (detail, None),
            ]
        })
        .collect();
    for i in &snapshot.invalid {
        rows.push(vec![
            (i.name.clone(), None),
            ("invalid".to_owned(), Some(Style::Bad)),
            (String::new(), None),
            (i.error.clone(), None),
        ]);
    }
    ctx.out.data(&table(
        &["TASK", "STATUS", "TITLE", "DETAIL"],
        &rows,
        ctx.out.color_stdout,
    ))?;
    Ok(())
}

/// [`describe`], and a pending task's approved change, which lands next.
fn describe_task(status: &Status, task: Option<&board::Task>) -> (&'static str, String) {
    match task {
        Some(board::Task {
            change: Some(change),
            approved: Some(_),
            ..
        }) => (
            status.label(),
            format!("approved: its change on `{change}` lands next"),
        ),
        _ => describe(status),
    }
}

pub(crate) fn describe(status: &Status) -> (&'static str, String) {
    let detail = match status {
        Status::Blocked { on } => {
            let on: Vec<_> = on.iter().map(|t| format!("`{t}`")).collect();
            format!("after {}", on.join(", "))
        }
        Status::Claimed { by } => format!("by {by}"),
        Status::Stuck { why } => why.clone(),
        Status::Waiting { question } => {
            let first = question.lines().next().unwrap_or_default();
            format!("asked: {first}")
        }
        Status::Review { change } => {
            format!("change on `{change}`: farm approve / farm reject")
        }
        Status::Ready | Status::Done | Status::Failed => String::new(),
    };
    (status.label(), detail)
}

/// The board on the hub's branch: a hub on this machine is read from the
/// branch's tree, in process (10,000 task files written out and read back
/// took seconds); a hub elsewhere is cloned one commit deep and read.
pub(crate) fn read_board(hub: &Hub) -> Result<board::Snapshot, Error> {
    if let (Some(git_dir), Some(rev)) = (hub.git_dir(), hub.branch_rev()) {
        return board::Cache::default().read(git_dir, &rev).map_err(|e| {
            Error::failure(format!("cannot read the board of `{rev}`: {}", e.message()))
                .caused_by(e)
        });
    }
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::failure(format!("cannot make a temp dir: {e}")).caused_by(e))?;
    let dir = hub.extract_board(tmp.path())?;
    board::load(&dir)
        .map_err(|e| Error::failure(format!("cannot read the board: {e}")).caused_by(e))
}
