//! The board: tasks as files on the hub's main branch, and the state of each.
//!
//! A task is `tasks/<id>.md`: TOML front matter between two lines that are
//! exactly `+++`, then a markdown description. A finished task is moved to
//! `tasks/done/`, one that used up its attempts to `tasks/failed/`; the files
//! there are only names (their content is not read). This module owns that
//! format ([`parse`], [`Task::render`]), reading a checked-out board
//! ([`load`], the only I/O here), and the judgement of every task's state
//! ([`statuses`], [`next`], [`settled`], [`counts`]), which is pure: a
//! [`Snapshot`] in, states out. Claims are not this module's business: the
//! caller turns claim files into [`Snapshot::claimed`].
//!
//! Parsing is strict and total: a typo in a key, an id that cannot exist or a
//! task that depends on itself is an error naming the culprit, never a silently
//! different task and never a panic. One bad file does not stop the board: it
//! is listed as [`Invalid`], and only the tasks that depend on it are stuck.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::names::{TaskId, shown};

/// Task files larger than this are invalid without being read further: a
/// description is prose for an agent, not a place for data.
pub const MAX_TASK_BYTES: u64 = 1 << 20;

/// Attempts a task gets when its file does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// The line that opens and closes the front matter.
const FENCE: &str = "+++";

/// Every key the front matter may hold, in the order [`Task::render`] writes them.
const KEYS: [&str; 7] = [
    "title",
    "after",
    "priority",
    "max_attempts",
    "timeout",
    "attempts",
    "created",
];

/// One task, as its file describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    /// One line, not blank.
    pub title: String,
    /// Tasks that must be done first, in the order written; no duplicates, never `id`.
    pub after: Vec<TaskId>,
    /// Higher runs first.
    pub priority: i64,
    /// At least 1.
    pub max_attempts: u32,
    /// Per-task session timeout; longer than zero when given.
    pub timeout: Option<Duration>,
    /// Failed attempts so far, maintained by farm.
    pub attempts: u32,
    pub created: Option<SystemTime>,
    /// Everything after the closing `+++` line, verbatim (line endings included).
    pub body: String,
}

/// Parse the text of `tasks/<id>.md`. Total: every input gives a task or a
/// one-line reason. A leading UTF-8 BOM and CRLF line endings are accepted.
pub fn parse(id: TaskId, text: &str) -> Result<Task, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = split_front_matter(text)?;
    let table: toml::Table = toml::from_str(front).map_err(|e| toml_error(front, &e))?;
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !KEYS.contains(&k.as_str()))
        .map(|k| format!("`{}`", shown(k)))
        .collect();
    if !unknown.is_empty() {
        let s = if unknown.len() == 1 { "" } else { "s" };
        return Err(format!(
            "unknown key{s} {} in the front matter; the keys are {}",
            unknown.join(", "),
            KEYS.join(", ")
        ));
    }
    let title = match table.get("title") {
        None => return Err("`title` is missing; every task needs one".into()),
        Some(v) => string("title", v)?,
    };
    check_title(title)?;
    let after = match table.get("after") {
        None => Vec::new(),
        Some(v) => dependencies(&id, v)?,
    };
    let priority = match table.get("priority") {
        None => 0,
        Some(v) => integer("priority", v)?,
    };
    let max_attempts = match table.get("max_attempts") {
        None => DEFAULT_MAX_ATTEMPTS,
        Some(v) => count("max_attempts", v, 1)?,
    };
    let timeout = table.get("timeout").map(timeout).transpose()?;
    let attempts = match table.get("attempts") {
        None => 0,
        Some(v) => count("attempts", v, 0)?,
    };
    let created = table.get("created").map(created).transpose()?;
    Ok(Task {
        id,
        title: title.to_owned(),
        after,
        priority,
        max_attempts,
        timeout,
        attempts,
        created,
        body: body.to_owned(),
    })
}

/// A title is what listings show for a task: one line, not blank.
pub fn check_title(title: &str) -> Result<(), String> {
    if title.trim().is_empty() {
        Err("`title` is empty".into())
    } else if title
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        Err(format!(
            "`title` `{}` is not a single line of text (it holds a line break or control character)",
            shown(title)
        ))
    } else {
        Ok(())
    }
}

/// Split a file into its front matter (without the fences) and its body.
fn split_front_matter(text: &str) -> Result<(&str, &str), String> {
    let mut lines = lines(text);
    let Some((first, _, front_start)) = lines.next() else {
        return Err("empty file; a task file starts with a `+++` line".into());
    };
    if first != FENCE {
        return Err(format!(
            "line 1 is `{}`, not `+++`; a task file starts with TOML front matter between `+++` lines",
            shown(first)
        ));
    }
    let mut near_miss = None;
    for (n, (line, start, end)) in (2..).zip(lines) {
        if line == FENCE {
            return Ok((&text[front_start..start], &text[end..]));
        }
        if near_miss.is_none() && line.trim() == FENCE {
            near_miss = Some((n, line));
        }
    }
    Err(match near_miss {
        Some((n, line)) => format!(
            "the front matter is never closed: line {n} is `{}`, but a fence is exactly `+++`",
            shown(line)
        ),
        None => "the front matter is never closed: no `+++` line after line 1".into(),
    })
}

/// Each line of `text` without its `\n` or `\r\n`, with the byte offsets of
/// its start and of the next line's start.
fn lines(text: &str) -> impl Iterator<Item = (&str, usize, usize)> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= text.len() {
            return None;
        }
        let start = pos;
        let (line, end) = match text[start..].find('\n') {
            Some(i) => (&text[start..start + i], start + i + 1),
            None => (&text[start..], text.len()),
        };
        pos = end;
        Some((line.strip_suffix('\r').unwrap_or(line), start, end))
    })
}

/// A TOML syntax error, on one line, with its line number in the file (the
/// front matter starts on line 2).
fn toml_error(front: &str, e: &toml::de::Error) -> String {
    let message = one_line(e.message());
    let Some(span) = e.span().filter(|s| s.start <= front.len()) else {
        return format!("the front matter is not valid TOML: {message}");
    };
    let before = front.get(..span.start).unwrap_or(front);
    let line = 2 + before.matches('\n').count();
    let at = front.get(span.clone()).unwrap_or_default();
    if at.is_empty() || at.contains('\n') || at.chars().count() > 40 || message.contains(at) {
        format!("line {line}: {message}")
    } else {
        format!("line {line}: {message} at `{}`", shown(at))
    }
}

fn string<'v>(key: &str, v: &'v toml::Value) -> Result<&'v str, String> {
    v.as_str()
        .ok_or_else(|| format!("`{key}` must be a string, not {}", a(v)))
}

fn integer(key: &str, v: &toml::Value) -> Result<i64, String> {
    v.as_integer()
        .ok_or_else(|| format!("`{key}` must be an integer, not {}", a(v)))
}

fn count(key: &str, v: &toml::Value, min: u32) -> Result<u32, String> {
    let n = integer(key, v)?;
    if n < i64::from(min) {
        return Err(format!("`{key}` is {n}; it must be at least {min}"));
    }
    u32::try_from(n).map_err(|_| format!("`{key}` is {n}; it must be at most {}", u32::MAX))
}

/// `a string`, `an integer`: the type of a value, for messages.
fn a(v: &toml::Value) -> String {
    let t = v.type_str();
    let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {t}")
}

fn dependencies(id: &TaskId, v: &toml::Value) -> Result<Vec<TaskId>, String> {
    let Some(items) = v.as_array() else {
        return Err(format!(
            "`after` must be an array of task ids, like [\"lexer\"], not {}",
            a(v)
        ));
    };
    let mut after = Vec::with_capacity(items.len());
    for item in items {
        let Some(s) = item.as_str() else {
            return Err(format!(
                "`after` must hold task ids as strings, not {}",
                a(item)
            ));
        };
        let dep = TaskId::parse(s).map_err(|e| format!("`after`: {e}"))?;
        if &dep == id {
            return Err(format!(
                "`after` lists the task itself, `{dep}`; a task cannot depend on itself"
            ));
        }
        if after.contains(&dep) {
            return Err(format!("`after` lists `{dep}` twice"));
        }
        after.push(dep);
    }
    Ok(after)
}

fn timeout(v: &toml::Value) -> Result<Duration, String> {
    let s = string("timeout", v)?;
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("`timeout` is zero; give a duration like 30m or 2h".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!(
            "`timeout` `{}` is not a duration: {}; give one like 30m or 2h",
            shown(s),
            one_line(&e.to_string())
        )),
    }
}

fn created(v: &toml::Value) -> Result<SystemTime, String> {
    // A bare TOML datetime is what a person is likely to type; take it too.
    let s = match v {
        toml::Value::Datetime(d) => d.to_string(),
        v => string("created", v)?.to_owned(),
    };
    humantime::parse_rfc3339(&s).map_err(|e| {
        format!(
            "`created` `{}` is not an RFC 3339 UTC time like 2026-11-30T01:12:42.123Z: {e}",
            shown(&s)
        )
    })
}

/// The front matter as [`Task::render`] writes it: title always, the rest
/// only when it differs from the default.
#[derive(Serialize)]
struct Front<'a> {
    title: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<&'a str>,
    #[serde(skip_serializing_if = "is_zero")]
    priority: i64,
    #[serde(skip_serializing_if = "is_default_max_attempts")]
    max_attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<String>,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn is_default_max_attempts(n: &u32) -> bool {
    *n == DEFAULT_MAX_ATTEMPTS
}

impl Task {
    /// The file's text. `parse(id, &task.render())` gives the task back.
    pub fn render(&self) -> String {
        let front = Front {
            title: &self.title,
            after: self.after.iter().map(TaskId::as_str).collect(),
            priority: self.priority,
            max_attempts: self.max_attempts,
            timeout: self
                .timeout
                .map(|d| humantime::format_duration(d).to_string()),
            attempts: self.attempts,
            created: self.created.map(rfc3339),
        };
        let front = toml::to_string(&front).expect("a task's front matter always serializes");
        format!("{FENCE}\n{front}{FENCE}\n{}", self.body)
    }
}

/// A time as `created` is written: milliseconds like [`crate::claims::record::timestamp`],
/// nanoseconds when that would lose precision, so that every parsed time is
/// written back unchanged.
fn rfc3339(t: SystemTime) -> String {
    // humantime panics before 1970 and fails after 9999; parse never gives
    // such a time, so clamping only guards hand-made tasks.
    let last = UNIX_EPOCH + Duration::new(253_402_300_799, 999_999_999);
    let t = t.clamp(UNIX_EPOCH, last);
    let nanos = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    if nanos.is_multiple_of(1_000_000) {
        humantime::format_rfc3339_millis(t).to_string()
    } else {
        humantime::format_rfc3339_nanos(t).to_string()
    }
}

/// A new task as `farm task add` makes it: default attempts, no timeout,
/// created `now` (to the millisecond, as it will be written), and a body that
/// ends with a newline.
pub fn new_task(
    id: TaskId,
    title: &str,
    body: &str,
    after: Vec<TaskId>,
    priority: i64,
    now: SystemTime,
) -> Task {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let millis = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
    let mut body = body.to_owned();
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    Task {
        id,
        title: title.to_owned(),
        after,
        priority,
        max_attempts: DEFAULT_MAX_ATTEMPTS,
        timeout: None,
        attempts: 0,
        created: Some(UNIX_EPOCH + Duration::from_millis(millis)),
        body,
    }
}

/// A board file that is not a usable task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The path in the worktree: `tasks/x.md`, `tasks/done/x.md`,
    /// `tasks/failed/x.md`, or a directory (`tasks/done`) that is not one.
    pub name: String,
    /// Why, on one line.
    pub error: String,
}

/// The board as read from one checkout, plus who holds which claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `tasks/*.md` that parsed, sorted by id.
    pub pending: Vec<Task>,
    pub done: BTreeSet<TaskId>,
    pub failed: BTreeSet<TaskId>,
    /// Sorted by name.
    pub invalid: Vec<Invalid>,
    /// Task → who holds its claim (`agent@host`), filled in by the caller.
    pub claimed: BTreeMap<TaskId, String>,
}

const TASKS: &str = "tasks";
const DONE: &str = "tasks/done";
const FAILED: &str = "tasks/failed";

/// Read the board from a checked-out worktree. A missing directory is an
/// empty one; a bad file, or a `tasks` directory that is a symlink or not a
/// directory, is [`Invalid`] and the rest is read. Errors are I/O failures.
pub fn load(worktree: &Path) -> io::Result<Snapshot> {
    let mut s = Snapshot::default();
    let mut pending = Vec::new();
    if !readable_dir(worktree, TASKS, &mut s.invalid)? {
        // `tasks/done` under a `tasks` symlink would be read through the link.
        return Ok(s);
    }
    for e in entries(worktree, TASKS)? {
        match read_task(&e) {
            Ok(Some(task)) => pending.push(task),
            Ok(None) => {}
            Err(error) => s.invalid.push(Invalid {
                name: e.name,
                error,
            }),
        }
    }
    for (dir, set) in [(DONE, &mut s.done), (FAILED, &mut s.failed)] {
        if !readable_dir(worktree, dir, &mut s.invalid)? {
            continue;
        }
        for e in entries(worktree, dir)? {
            match e.check() {
                Ok(id) => {
                    set.insert(id);
                }
                Err(error) => s.invalid.push(Invalid {
                    name: e.name,
                    error,
                }),
            }
        }
    }
    // One id, one state: done beats failed beats pending. The losing copy is
    // reported so that someone removes it, rather than silently ignored.
    let twice = |dir: &str| format!("also in {dir}/, which wins; remove this copy");
    let (dup, failed): (BTreeSet<_>, _) = std::mem::take(&mut s.failed)
        .into_iter()
        .partition(|id| s.done.contains(id));
    s.failed = failed;
    for id in dup {
        s.invalid.push(Invalid {
            name: format!("{FAILED}/{id}.md"),
            error: twice(DONE),
        });
    }
    for task in pending {
        let error = if s.done.contains(&task.id) {
            twice(DONE)
        } else if s.failed.contains(&task.id) {
            twice(FAILED)
        } else {
            s.pending.push(task);
            continue;
        };
        s.invalid.push(Invalid {
            name: format!("{TASKS}/{}.md", task.id),
            error,
        });
    }
    s.pending.sort_by(|a, b| a.id.cmp(&b.id));
    s.invalid.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(s)
}

/// One `*.md` entry of a board directory, before its content is read.
struct Entry {
    /// Path in the worktree, for messages and [`Invalid::name`].
    name: String,
    path: PathBuf,
    id: Result<TaskId, String>,
    file_type: fs::FileType,
}

impl Entry {
    /// The task id, if the entry is a regular file with a valid name.
    fn check(&self) -> Result<TaskId, String> {
        let id = self.id.clone()?;
        if self.file_type.is_symlink() {
            Err("a symlink, which farm never follows; replace it with a regular file".into())
        } else if !self.file_type.is_file() {
            Err("not a regular file".into())
        } else {
            Ok(id)
        }
    }
}

/// Whether `worktree/dir` is a directory to read. A missing one is not; nor
/// is a symlink or a non-directory, which is also reported as invalid.
fn readable_dir(worktree: &Path, dir: &str, invalid: &mut Vec<Invalid>) -> io::Result<bool> {
    let path = worktree.join(dir);
    let error = match fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => return Ok(true),
        Ok(m) if m.file_type().is_symlink() => {
            "a symlink, which farm never follows; replace it with a directory"
        }
        Ok(_) => "not a directory",
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error("read", &path, e)),
    };
    invalid.push(Invalid {
        name: dir.to_owned(),
        error: error.to_owned(),
    });
    Ok(false)
}

/// The `*.md` entries of the directory `worktree/dir` but `README.md`, sorted by name.
fn entries(worktree: &Path, dir: &str) -> io::Result<Vec<Entry>> {
    let path = worktree.join(dir);
    let mut out = Vec::new();
    for entry in fs::read_dir(&path).map_err(|e| io_error("read", &path, e))? {
        let entry = entry.map_err(|e| io_error("read", &path, e))?;
        let file_name = entry.file_name();
        let as_path = Path::new(&file_name);
        if as_path.extension().is_none_or(|x| x != "md") || file_name == "README.md" {
            continue;
        }
        // Does not follow a symlink: it reports the link itself.
        let file_type = entry
            .file_type()
            .map_err(|e| io_error("read", &entry.path(), e))?;
        let id = match file_name.to_str() {
            Some(n) => TaskId::parse(n.strip_suffix(".md").unwrap_or(n)).map_err(|e| e.to_string()),
            None => Err("the file name is not UTF-8".to_owned()),
        };
        out.push(Entry {
            name: format!("{dir}/{}", file_name.to_string_lossy()),
            path: entry.path(),
            id,
            file_type,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Read and parse a pending task file. `Ok(None)`: it vanished since it was
/// listed. `Err` is why the file is invalid, an unreadable one included: one
/// file farm cannot read must not hide the rest of the board.
fn read_task(e: &Entry) -> Result<Option<Task>, String> {
    let id = e.check()?;
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&e.path)
    {
        Ok(f) => f,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        // Replaced by a symlink since it was listed.
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Err(
                "a symlink, which farm never follows; replace it with a regular file".into(),
            );
        }
        Err(err) => return Err(format!("cannot be read: {err}")),
    };
    let bytes = read_capped(&mut file).map_err(|err| format!("cannot be read: {err}"))?;
    if bytes.len() as u64 > MAX_TASK_BYTES {
        return Err(format!("larger than {} KiB", MAX_TASK_BYTES / 1024));
    }
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    parse(id, &text).map(Some)
}

/// Read at most one byte past the size limit, so an oversized file is
/// recognised without reading it whole; and only from a regular file, which a
/// FIFO swapped in after listing is not.
fn read_capped(file: &mut File) -> io::Result<Vec<u8>> {
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TASK_BYTES + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn io_error(action: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("cannot {action} `{}`: {e}", path.display()),
    )
}

/// Where a task stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Pending, and every task it depends on is done.
    Ready,
    /// Pending; waits for `on` (the dependencies not done yet), each of which can still finish.
    Blocked {
        on: Vec<TaskId>,
    },
    /// Pending and claimed, whatever its dependencies: someone is on it.
    Claimed {
        by: String,
    },
    Done,
    Failed,
    /// Pending and can never become ready without a change to the board.
    Stuck {
        why: String,
    },
}

impl Status {
    /// One word, for a status column.
    pub fn label(&self) -> &'static str {
        match self {
            Status::Ready => "ready",
            Status::Blocked { .. } => "blocked",
            Status::Claimed { .. } => "claimed",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Stuck { .. } => "stuck",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Blocked { on } => {
                let on: Vec<String> = on.iter().map(|id| format!("`{id}`")).collect();
                write!(f, "blocked on {}", on.join(", "))
            }
            Status::Claimed { by } => write!(f, "claimed by {by}"),
            Status::Stuck { why } => write!(f, "stuck: {why}"),
            other => f.write_str(other.label()),
        }
    }
}

/// The status of every pending, done and failed task, sorted by id. An id in
/// several places counts once: done beats failed beats pending (as [`load`]
/// reports it). A claimed task counts as one that can finish, whatever its own
/// dependencies: someone is on it, so the tasks after it are blocked, not stuck.
pub fn statuses(s: &Snapshot) -> Vec<(TaskId, Status)> {
    let g = Graph::new(s);
    let open = g.judge_open();
    let mut all: BTreeMap<TaskId, Status> = BTreeMap::new();
    for id in &s.done {
        all.insert(id.clone(), Status::Done);
    }
    for id in &s.failed {
        all.entry(id.clone()).or_insert(Status::Failed);
    }
    for &id in g.pending.keys() {
        let status = match s.claimed.get(id) {
            Some(by) => Status::Claimed { by: by.clone() },
            // Every unclaimed pending task is judged; were one not, it had
            // better wait than run.
            None => open.get(id).cloned().unwrap_or_else(|| Status::Stuck {
                why: "not judged (a bug in farm)".into(),
            }),
        };
        all.insert(id.clone(), status);
    }
    all.into_iter().collect()
}

/// What a dependency is, seen from the task that waits for it.
enum Dep<'a> {
    Done,
    Failed,
    /// Pending and claimed: it can finish whatever its own dependencies say.
    Claimed,
    /// Pending and unclaimed: it is judged like the task itself.
    Open,
    /// Named only by a file that is not a usable task.
    Invalid(&'a str),
    Missing,
}

/// The dependency graph of one snapshot.
struct Graph<'a> {
    s: &'a Snapshot,
    /// Pending tasks that are neither done nor failed, by id (the first copy wins).
    pending: BTreeMap<&'a TaskId, &'a Task>,
    /// Ids whose file is invalid, with the file's name.
    invalid: BTreeMap<TaskId, &'a str>,
}

impl<'a> Graph<'a> {
    fn new(s: &'a Snapshot) -> Graph<'a> {
        let mut pending = BTreeMap::new();
        for t in &s.pending {
            if !s.done.contains(&t.id) && !s.failed.contains(&t.id) {
                pending.entry(&t.id).or_insert(t);
            }
        }
        let mut invalid = BTreeMap::new();
        for i in &s.invalid {
            let stem = i
                .name
                .strip_suffix(".md")
                .and_then(|n| n.rsplit('/').next());
            if let Some(id) = stem.and_then(|s| TaskId::parse(s).ok()) {
                invalid.entry(id).or_insert(i.name.as_str());
            }
        }
        Graph {
            s,
            pending,
            invalid,
        }
    }

    fn dep(&self, id: &TaskId) -> Dep<'a> {
        if self.s.done.contains(id) {
            Dep::Done
        } else if self.s.failed.contains(id) {
            Dep::Failed
        } else if self.pending.contains_key(id) {
            if self.s.claimed.contains_key(id) {
                Dep::Claimed
            } else {
                Dep::Open
            }
        } else if let Some(name) = self.invalid.get(id) {
            Dep::Invalid(name)
        } else {
            Dep::Missing
        }
    }

    /// The unclaimed pending tasks `id` depends on.
    fn open_deps(&self, id: &TaskId) -> impl Iterator<Item = &'a TaskId> + '_ {
        let after = self.pending.get(id).map_or(&[][..], |t| &t.after[..]);
        after.iter().filter(|d| matches!(self.dep(d), Dep::Open))
    }

    /// Why `t` is stuck by a dependency that can never be done, if it is.
    fn defect(&self, t: &Task) -> Option<String> {
        t.after.iter().find_map(|d| match self.dep(d) {
            Dep::Failed => Some(format!("depends on `{d}`, which failed")),
            Dep::Missing => Some(format!("depends on `{d}`, which does not exist")),
            Dep::Invalid(name) => Some(format!(
                "depends on `{d}`, whose task file `{name}` is invalid"
            )),
            Dep::Done | Dep::Claimed | Dep::Open => None,
        })
    }

    /// The status of `t` given the statuses of its open dependencies in `known`.
    fn judge(&self, t: &Task, known: &BTreeMap<&TaskId, Status>) -> Status {
        if let Some(why) = self.defect(t) {
            return Status::Stuck { why };
        }
        let stuck_dep = self
            .open_deps(&t.id)
            .find(|d| matches!(known.get(d), Some(Status::Stuck { .. })));
        if let Some(d) = stuck_dep {
            return Status::Stuck {
                why: format!("depends on `{d}`, which is stuck"),
            };
        }
        let on: Vec<TaskId> = t
            .after
            .iter()
            .filter(|d| !self.s.done.contains(*d))
            .cloned()
            .collect();
        if on.is_empty() {
            Status::Ready
        } else {
            Status::Blocked { on }
        }
    }

    /// The status of every unclaimed pending task. Dependencies are judged
    /// before their dependents; what is left over is in a cycle or waits for
    /// one, and each cycle is named before the rest is judged.
    fn judge_open(&self) -> BTreeMap<&'a TaskId, Status> {
        let open: Vec<&'a TaskId> = self
            .pending
            .keys()
            .copied()
            .filter(|id| !self.s.claimed.contains_key(*id))
            .collect();
        let mut known = BTreeMap::new();
        self.propagate(&open, &mut known);
        let left: BTreeSet<&'a TaskId> = open
            .iter()
            .copied()
            .filter(|id| !known.contains_key(id))
            .collect();
        for component in self.cycles(&left) {
            // Name a shortest cycle through each member, sharing one search
            // among all the members of the cycle it finds: a big simple cycle
            // costs one search, not one per member.
            let mut named: BTreeMap<&'a TaskId, String> = BTreeMap::new();
            for &id in &component {
                if !named.contains_key(id) {
                    let cycle = self
                        .shortest_cycle(id, &component)
                        .unwrap_or_else(|| vec![id]);
                    let why = cycle_why(&cycle);
                    for member in cycle {
                        named.entry(member).or_insert_with(|| why.clone());
                    }
                }
            }
            for (id, cycle) in named {
                let why = self.defect(self.pending[id]).unwrap_or(cycle);
                known.insert(id, Status::Stuck { why });
            }
        }
        let rest: Vec<&'a TaskId> = left
            .iter()
            .copied()
            .filter(|id| !known.contains_key(id))
            .collect();
        self.propagate(&rest, &mut known);
        known
    }

    /// The strongly connected components of the open dependency graph within
    /// `nodes` that hold a cycle (Tarjan's algorithm, iterative so that a long
    /// chain cannot overflow the stack).
    fn cycles(&self, nodes: &BTreeSet<&'a TaskId>) -> Vec<BTreeSet<&'a TaskId>> {
        let list: Vec<&'a TaskId> = nodes.iter().copied().collect();
        let at: BTreeMap<&TaskId, usize> =
            list.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let succ: Vec<Vec<usize>> = list
            .iter()
            .map(|&id| {
                self.open_deps(id)
                    .filter_map(|d| at.get(d).copied())
                    .collect()
            })
            .collect();
        const UNSEEN: usize = usize::MAX;
        let mut index = vec![UNSEEN; list.len()];
        let mut low = vec![0; list.len()];
        let mut on_stack = vec![false; list.len()];
        let mut stack = Vec::new();
        let mut next_index = 0;
        let mut out = Vec::new();
        for root in 0..list.len() {
            if index[root] != UNSEEN {
                continue;
            }
            // Each frame is a node and how many of its edges it has followed.
            let mut calls = vec![(root, 0)];
            index[root] = next_index;
            low[root] = next_index;
            next_index += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&(v, edge)) = calls.last() {
                if let Some(&w) = succ[v].get(edge) {
                    if let Some(frame) = calls.last_mut() {
                        frame.1 += 1;
                    }
                    if index[w] == UNSEEN {
                        index[w] = next_index;
                        low[w] = next_index;
                        next_index += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                calls.pop();
                if let Some(&(u, _)) = calls.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = BTreeSet::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.insert(list[w]);
                        if w == v {
                            break;
                        }
                    }
                    // One task is a cycle only if it depends on itself, which
                    // parse refuses but a hand-made snapshot may hold.
                    if component.len() > 1 || succ[v].contains(&v) {
                        out.push(component);
                    }
                }
            }
        }
        out
    }

    /// Judge the tasks among `nodes` whose open dependencies are all judged,
    /// or can be judged in turn (Kahn's algorithm; no recursion, so a long
    /// chain cannot overflow the stack).
    fn propagate(&self, nodes: &[&'a TaskId], known: &mut BTreeMap<&'a TaskId, Status>) {
        let mut waiting: BTreeMap<&TaskId, usize> = BTreeMap::new();
        let mut dependents: BTreeMap<&TaskId, Vec<&'a TaskId>> = BTreeMap::new();
        let mut ready = VecDeque::new();
        for &id in nodes {
            let unknown: BTreeSet<&TaskId> = self
                .open_deps(id)
                .filter(|d| !known.contains_key(d))
                .collect();
            for d in &unknown {
                dependents.entry(d).or_default().push(id);
            }
            if unknown.is_empty() {
                ready.push_back(id);
            } else {
                waiting.insert(id, unknown.len());
            }
        }
        while let Some(id) = ready.pop_front() {
            let status = self.judge(self.pending[id], known);
            known.insert(id, status);
            for &r in dependents.get(id).into_iter().flatten() {
                if let Some(n) = waiting.get_mut(r) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push_back(r);
                    }
                }
            }
        }
    }

    /// The shortest dependency cycle through `start` within `within`, as the
    /// path `start → … → last` (last depends on `start` again).
    fn shortest_cycle(
        &self,
        start: &'a TaskId,
        within: &BTreeSet<&'a TaskId>,
    ) -> Option<Vec<&'a TaskId>> {
        let mut parent: BTreeMap<&TaskId, &'a TaskId> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            for d in self.open_deps(u).filter(|d| within.contains(d)) {
                if d == start {
                    let mut path = vec![u];
                    let mut x = u;
                    while x != start {
                        x = parent[x];
                        path.push(x);
                    }
                    path.reverse();
                    return Some(path);
                }
                if !parent.contains_key(d) {
                    parent.insert(d, u);
                    queue.push_back(d);
                }
            }
        }
        None
    }
}

/// Cycles longer than this are shown cut short, so that a reason stays a line.
const CYCLE_SHOWN: usize = 8;

/// "in a dependency cycle: a → b → a", starting from the smallest id so that
/// every task of a simple cycle names it the same way.
fn cycle_why(cycle: &[&TaskId]) -> String {
    let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
    let mut names: Vec<&str> = cycle[first..]
        .iter()
        .chain(&cycle[..first])
        .chain(cycle.get(first))
        .map(|id| id.as_str())
        .collect();
    if cycle.len() > CYCLE_SHOWN {
        // Keep the start, and the end that leads back to it.
        names.drain(CYCLE_SHOWN - 2..names.len() - 2);
        names.insert(CYCLE_SHOWN - 2, "…");
        return format!(
            "in a dependency cycle of {} tasks: {}",
            cycle.len(),
            names.join(" → ")
        );
    }
    format!("in a dependency cycle: {}", names.join(" → "))
}

/// The task to work on next: the best ready task not in `skip`. Highest
/// priority first, then the oldest (tasks that do not say when they were
/// created come after those that do), then the smallest id.
pub fn next<'a>(s: &'a Snapshot, skip: &HashSet<TaskId>) -> Option<&'a Task> {
    let ready: BTreeSet<TaskId> = statuses(s)
        .into_iter()
        .filter(|(_, st)| *st == Status::Ready)
        .map(|(id, _)| id)
        .collect();
    s.pending
        .iter()
        .filter(|t| ready.contains(&t.id) && !skip.contains(&t.id))
        .min_by(|a, b| run_order(a, b))
}

fn run_order(a: &Task, b: &Task) -> Ordering {
    let created = match (a.created, b.created) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    b.priority
        .cmp(&a.priority)
        .then(created)
        .then_with(|| a.id.cmp(&b.id))
}

/// Nothing more can happen without a change to the board: no task is ready,
/// claimed or blocked (blocked tasks wait for something that can still
/// finish). Agents stop waiting only then.
pub fn settled(s: &Snapshot) -> bool {
    statuses(s)
        .iter()
        .all(|(_, st)| matches!(st, Status::Done | Status::Failed | Status::Stuck { .. }))
}

/// How many tasks are in each state, and how many files are invalid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub ready: usize,
    pub blocked: usize,
    pub claimed: usize,
    pub done: usize,
    pub failed: usize,
    pub stuck: usize,
    pub invalid: usize,
}

pub fn counts(s: &Snapshot) -> Counts {
    let mut c = Counts {
        invalid: s.invalid.len(),
        ..Counts::default()
    };
    for (_, st) in statuses(s) {
        *match st {
            Status::Ready => &mut c.ready,
            Status::Blocked { .. } => &mut c.blocked,
            Status::Claimed { .. } => &mut c.claimed,
            Status::Done => &mut c.done,
            Status::Failed => &mut c.failed,
            Status::Stuck { .. } => &mut c.stuck,
        } += 1;
    }
    c
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(s: &str) -> TaskId {
        TaskId::parse(s).unwrap()
    }

    fn ids(v: &[&str]) -> Vec<TaskId> {
        v.iter().map(|s| id(s)).collect()
    }

    const T0_MS: u64 = 1_796_000_000_123;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    const EXAMPLE: &str = r#"+++
title = "Parse if statements"
after = ["lexer"]        # ids this task depends on
priority = 2
max_attempts = 5
timeout = "30m"
attempts = 1
created = "2026-11-30T00:53:20.123Z"
+++
Description in markdown…
"#;

    fn example() -> Task {
        Task {
            id: id("parse-if"),
            title: "Parse if statements".into(),
            after: ids(&["lexer"]),
            priority: 2,
            max_attempts: 5,
            timeout: Some(Duration::from_secs(1800)),
            attempts: 1,
            created: Some(at(T0_MS)),
            body: "Description in markdown…\n".into(),
        }
    }

    fn minimal(name: &str) -> Task {
        Task {
            id: id(name),
            title: format!("Do {name}"),
            after: Vec::new(),
            priority: 0,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: None,
            attempts: 0,
            created: None,
            body: String::new(),
        }
    }

    fn parse_as(name: &str, text: &str) -> Result<Task, String> {
        parse(id(name), text)
    }

    // --- parsing ---

    #[test]
    fn parses_every_key() {
        assert_eq!(parse_as("parse-if", EXAMPLE).unwrap(), example());
    }

    #[test]
    fn only_title_is_required() {
        let t = parse_as("x", "+++\ntitle = \"Do x\"\n+++\n").unwrap();
        assert_eq!(t, minimal("x"));
        // No newline after the closing fence: an empty body all the same.
        assert_eq!(parse_as("x", "+++\ntitle = \"Do x\"\n+++").unwrap(), t);
    }

    #[test]
    fn body_is_kept_verbatim() {
        let text = "+++\ntitle = \"Do x\"\n+++\n\n# Heading\n+++\nnot a fence any more\n";
        let t = parse_as("x", text).unwrap();
        assert_eq!(t.body, "\n# Heading\n+++\nnot a fence any more\n");
    }

    #[test]
    fn accepts_crlf_and_bom() {
        let crlf = format!("\u{feff}{}", EXAMPLE.replace('\n', "\r\n"));
        let t = parse_as("parse-if", &crlf).unwrap();
        assert_eq!(t.body, "Description in markdown…\r\n");
        assert_eq!(
            Task {
                body: example().body,
                ..t
            },
            example()
        );
    }

    #[test]
    fn accepts_a_bare_toml_datetime() {
        let text = "+++\ntitle = \"Do x\"\ncreated = 2026-11-30T00:53:20.123Z\n+++\n";
        assert_eq!(parse_as("x", text).unwrap().created, Some(at(T0_MS)));
    }

    #[test]
    fn bad_files_say_why_on_one_line() {
        let with = |front: &str| format!("+++\ntitle = \"Do x\"\n{front}\n+++\nbody\n");
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "empty file"),
            (
                "title = \"x\"\n".into(),
                "line 1 is `title = \\\"x\\\"`, not `+++`",
            ),
            ("++++\ntitle = \"x\"\n+++\n".into(), "line 1 is `++++`"),
            ("+++\ntitle = \"x\"\n".into(), "never closed: no `+++` line"),
            (
                "+++\ntitle = \"x\"\n+++ \nbody".into(),
                "line 3 is `+++ `, but a fence is exactly `+++`",
            ),
            ("+++\ntitle = \"x\n+++\n".into(), "line 2: "),
            (with("\n\npriority = = 2"), "line 5: "),
            (with("title = \"y\""), "duplicate key at `title`"),
            (
                with("afer = [\"lexer\"]"),
                "unknown key `afer` in the front matter; the keys are title, after,",
            ),
            (with("afer = 1\n[x]"), "unknown keys `afer`, `x`"),
            ("+++\npriority = 1\n+++\n".into(), "`title` is missing"),
            ("+++\ntitle = \"\"\n+++\n".into(), "`title` is empty"),
            ("+++\ntitle = \" \t \"\n+++\n".into(), "`title` is empty"),
            (
                "+++\ntitle = \"\"\"a\nb\"\"\"\n+++\n".into(),
                "`title` `a\\nb` is not a single line",
            ),
            (
                "+++\ntitle = 3\n+++\n".into(),
                "`title` must be a string, not an integer",
            ),
            (
                with("after = [\"a b\"]"),
                "`after`: invalid task id `a b`: it may only contain",
            ),
            (with("after = [\"../x\"]"), "a task id is a letter or digit"),
            (
                with("after = \"lexer\""),
                "`after` must be an array of task ids",
            ),
            (
                with("after = [1]"),
                "`after` must hold task ids as strings, not an integer",
            ),
            (
                with("after = [\"a\", \"x\"]"),
                "`after` lists the task itself, `x`",
            ),
            (
                with("after = [\"a\", \"b\", \"a\"]"),
                "`after` lists `a` twice",
            ),
            (
                with("max_attempts = 0"),
                "`max_attempts` is 0; it must be at least 1",
            ),
            (
                with("max_attempts = -1"),
                "`max_attempts` is -1; it must be at least 1",
            ),
            (
                with("attempts = -2"),
                "`attempts` is -2; it must be at least 0",
            ),
            (
                with("attempts = 5000000000"),
                "`attempts` is 5000000000; it must be at most 4294967295",
            ),
            (
                with("priority = \"2\""),
                "`priority` must be an integer, not a string",
            ),
            (
                with("priority = 1.5"),
                "`priority` must be an integer, not a float",
            ),
            (
                with("timeout = \"soon\""),
                "`timeout` `soon` is not a duration",
            ),
            (with("timeout = 30"), "`timeout` must be a string"),
            (with("timeout = \"0s\""), "`timeout` is zero"),
            (
                with("created = \"yesterday\""),
                "`created` `yesterday` is not an RFC 3339",
            ),
            (
                with("created = 2026-11-30T00:53:20"),
                "`created` `2026-11-30T00:53:20`",
            ),
        ];
        for (text, want) in cases {
            let why = parse_as("x", &text).unwrap_err();
            assert!(why.contains(want), "{text:?}: want {want:?} in {why:?}");
            assert!(!why.contains('\n'), "one line: {why:?}");
        }
    }

    // --- rendering ---

    #[test]
    fn renders_readable_files() {
        insta::assert_snapshot!(example().render(), @r#"
        +++
        title = "Parse if statements"
        after = ["lexer"]
        priority = 2
        max_attempts = 5
        timeout = "30m"
        attempts = 1
        created = "2026-11-30T00:53:20.123Z"
        +++
        Description in markdown…
        "#);
    }

    #[test]
    fn render_omits_defaults_but_the_title() {
        assert_eq!(minimal("x").render(), "+++\ntitle = \"Do x\"\n+++\n");
    }

    #[test]
    fn new_task_is_what_its_file_says() {
        let now = at(T0_MS) + Duration::from_nanos(456_789);
        let t = new_task(id("b"), "Do b", "Body", ids(&["a"]), 1, now);
        assert_eq!(t.created, Some(at(T0_MS)));
        assert_eq!(t.body, "Body\n");
        assert_eq!((t.max_attempts, t.attempts, t.timeout), (3, 0, None));
        assert_eq!(parse_as("b", &t.render()).unwrap(), t);
        assert_eq!(new_task(id("b"), "Do b", "", vec![], 0, now).body, "");
    }

    #[test]
    fn sub_millisecond_times_survive_a_round_trip() {
        let t = Task {
            created: Some(at(T0_MS) + Duration::from_nanos(7)),
            ..minimal("x")
        };
        assert!(t.render().contains("00:53:20.123000007Z"), "{}", t.render());
        assert_eq!(parse_as("x", &t.render()).unwrap(), t);
    }

    fn arb_id() -> impl Strategy<Value = TaskId> {
        "[a-z0-9][a-z0-9_-]{0,12}".prop_map(|s| id(&s))
    }

    fn arb_task() -> impl Strategy<Value = Task> {
        (
            (
                arb_id(),
                "\\PC{1,40}".prop_filter("a valid title", |t| check_title(t).is_ok()),
                proptest::collection::vec(arb_id(), 0..5),
                any::<i64>(),
                1u32..,
            ),
            (
                proptest::option::of((0u64..10_000_000_000, 0u32..1_000_000_000)),
                any::<u32>(),
                proptest::option::of((0u64..253_402_300_800, 0u32..1_000_000_000)),
                "(\\PC|\r|\n){0,80}",
            ),
        )
            .prop_map(
                |(
                    (id, title, after, priority, max_attempts),
                    (timeout, attempts, created, body),
                )| {
                    let mut after: Vec<TaskId> = after.into_iter().filter(|d| *d != id).collect();
                    after.sort();
                    after.dedup();
                    Task {
                        id,
                        title,
                        after,
                        priority,
                        max_attempts,
                        timeout: timeout
                            .map(|(s, n)| Duration::new(s, n))
                            .filter(|d| !d.is_zero()),
                        attempts,
                        created: created.map(|(s, n)| UNIX_EPOCH + Duration::new(s, n)),
                        body,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn every_valid_task_round_trips(t in arb_task()) {
            let text = t.render();
            prop_assert_eq!(parse(t.id.clone(), &text), Ok(t));
        }

        #[test]
        fn parse_never_panics(text in "(\\PC|\r|\n){0,300}") {
            if let Err(why) = parse_as("x", &text) {
                prop_assert!(!why.contains('\n'), "{}", why);
            }
        }

        #[test]
        fn parse_never_panics_on_near_files(cut in 0usize..300, junk in "(\\PC|\r|\n){0,20}", at in 0usize..300) {
            let mut text = EXAMPLE.to_owned();
            let at = text.char_indices().map(|(i, _)| i).find(|&i| i >= at.min(text.len())).unwrap_or(text.len());
            text.insert_str(at, &junk);
            let cut = text.char_indices().map(|(i, _)| i).find(|&i| i >= cut).unwrap_or(text.len());
            if let Err(why) = parse_as("parse-if", &text[..cut]) {
                prop_assert!(!why.contains('\n'), "{}", why);
            }
        }
    }

    // --- statuses ---

    fn pending(name: &str, after: &[&str]) -> Task {
        Task {
            after: ids(after),
            ..minimal(name)
        }
    }

    fn board(tasks: &[(&str, &[&str])], done: &[&str], failed: &[&str]) -> Snapshot {
        Snapshot {
            pending: tasks.iter().map(|(n, a)| pending(n, a)).collect(),
            done: ids(done).into_iter().collect(),
            failed: ids(failed).into_iter().collect(),
            ..Snapshot::default()
        }
    }

    fn status_of(s: &Snapshot, name: &str) -> Status {
        statuses(s)
            .into_iter()
            .find(|(i, _)| i.as_str() == name)
            .unwrap_or_else(|| panic!("no status for {name}"))
            .1
    }

    fn blocked(on: &[&str]) -> Status {
        Status::Blocked { on: ids(on) }
    }

    fn stuck(why: &str) -> Status {
        Status::Stuck { why: why.into() }
    }

    #[test]
    fn chain_runs_in_order() {
        // c after b after a.
        let mut s = board(&[("a", &[]), ("b", &["a"]), ("c", &["b"])], &[], &[]);
        assert_eq!(
            statuses(&s),
            vec![
                (id("a"), Status::Ready),
                (id("b"), blocked(&["a"])),
                (id("c"), blocked(&["b"])),
            ]
        );
        s.pending.remove(0);
        s.done.insert(id("a"));
        assert_eq!(status_of(&s, "a"), Status::Done);
        assert_eq!(status_of(&s, "b"), Status::Ready);
        assert_eq!(status_of(&s, "c"), blocked(&["b"]));
    }

    #[test]
    fn diamond_waits_for_both_sides() {
        let tasks: &[(&str, &[&str])] = &[("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])];
        let s = board(tasks, &["a"], &[]);
        assert_eq!(status_of(&s, "b"), Status::Ready);
        assert_eq!(status_of(&s, "c"), Status::Ready);
        assert_eq!(status_of(&s, "d"), blocked(&["b", "c"]));
        let s = board(&[("c", &["a"]), ("d", &["b", "c"])], &["a", "b"], &[]);
        assert_eq!(status_of(&s, "d"), blocked(&["c"]));
    }

    #[test]
    fn missing_and_failed_dependencies_make_a_task_stuck() {
        let s = board(&[("a", &["x", "ghost"]), ("b", &["f"])], &["x"], &["f"]);
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `ghost`, which does not exist")
        );
        assert_eq!(status_of(&s, "b"), stuck("depends on `f`, which failed"));
        assert_eq!(status_of(&s, "f"), Status::Failed);
        assert_eq!(status_of(&s, "x"), Status::Done);
        assert!(settled(&s));
    }

    #[test]
    fn invalid_dependency_makes_a_task_stuck() {
        let mut s = board(&[("a", &["bad"])], &[], &[]);
        s.invalid.push(Invalid {
            name: "tasks/bad.md".into(),
            error: "`title` is missing".into(),
        });
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `bad`, whose task file `tasks/bad.md` is invalid")
        );
        assert_eq!(counts(&s).invalid, 1);
        // A directory that is not one names no task.
        let mut s = board(&[("a", &["tasks"])], &[], &[]);
        s.invalid.push(Invalid {
            name: "tasks".into(),
            error: "not a directory".into(),
        });
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `tasks`, which does not exist")
        );
    }

    #[test]
    fn cycles_are_named_and_the_rest_keeps_working() {
        let tasks: &[(&str, &[&str])] = &[
            ("a", &["b"]),
            ("b", &["a"]),
            ("p", &["q"]),
            ("q", &["r"]),
            ("r", &["p"]),
            ("innocent", &[]),
            ("later", &["innocent"]),
        ];
        let s = board(tasks, &[], &[]);
        let two = stuck("in a dependency cycle: a → b → a");
        let three = stuck("in a dependency cycle: p → q → r → p");
        assert_eq!(
            statuses(&s),
            vec![
                (id("a"), two.clone()),
                (id("b"), two),
                (id("innocent"), Status::Ready),
                (id("later"), blocked(&["innocent"])),
                (id("p"), three.clone()),
                (id("q"), three.clone()),
                (id("r"), three),
            ]
        );
        assert_eq!(
            next(&s, &HashSet::new()).map(|t| t.id.as_str()),
            Some("innocent")
        );
        assert!(!settled(&s));
    }

    #[test]
    fn stuck_spreads_to_everything_downstream() {
        let tasks: &[(&str, &[&str])] = &[
            ("a", &["b"]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("d", &["c", "ok"]),
            ("e", &["ghost"]),
            ("f", &["e"]),
            ("ok", &[]),
        ];
        let s = board(tasks, &[], &[]);
        assert_eq!(status_of(&s, "c"), stuck("depends on `a`, which is stuck"));
        assert_eq!(status_of(&s, "d"), stuck("depends on `c`, which is stuck"));
        assert_eq!(status_of(&s, "f"), stuck("depends on `e`, which is stuck"));
        assert_eq!(status_of(&s, "ok"), Status::Ready);
    }

    #[test]
    fn a_defect_is_named_before_a_cycle() {
        let s = board(&[("a", &["ghost", "b"]), ("b", &["a"])], &[], &[]);
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `ghost`, which does not exist")
        );
        assert_eq!(
            status_of(&s, "b"),
            stuck("in a dependency cycle: a → b → a")
        );
    }

    #[test]
    fn claimed_wins_and_blocks_its_dependents() {
        let mut s = board(&[("a", &[]), ("b", &["a"]), ("c", &["ghost"])], &[], &[]);
        s.claimed.insert(id("a"), "alice@vm".into());
        s.claimed.insert(id("c"), "bob@vm".into());
        // Claims on tasks that are not pending change nothing.
        s.claimed.insert(id("zzz"), "carol@vm".into());
        assert_eq!(
            statuses(&s),
            vec![
                (
                    id("a"),
                    Status::Claimed {
                        by: "alice@vm".into()
                    }
                ),
                (id("b"), blocked(&["a"])),
                (
                    id("c"),
                    Status::Claimed {
                        by: "bob@vm".into()
                    }
                ),
            ]
        );
        assert_eq!(next(&s, &HashSet::new()), None);
        assert!(!settled(&s));
    }

    #[test]
    fn a_claimed_task_breaks_its_cycle() {
        let mut s = board(&[("a", &["b"]), ("b", &["a"])], &[], &[]);
        s.claimed.insert(id("a"), "alice@vm".into());
        assert_eq!(status_of(&s, "b"), blocked(&["a"]));
    }

    #[test]
    fn done_beats_failed_beats_pending() {
        let s = board(&[("a", &[]), ("b", &[])], &["a", "c"], &["b", "c"]);
        assert_eq!(
            statuses(&s),
            vec![
                (id("a"), Status::Done),
                (id("b"), Status::Failed),
                (id("c"), Status::Done),
            ]
        );
    }

    #[test]
    fn next_prefers_priority_then_age_then_id() {
        let t = |name: &str, priority: i64, created: Option<u64>| Task {
            priority,
            created: created.map(at),
            ..minimal(name)
        };
        let mut s = Snapshot {
            pending: vec![
                t("a", 0, Some(1)),
                t("b", 5, None),
                t("c", 5, Some(30)),
                t("d", 5, Some(20)),
                t("e", 5, Some(20)),
                t("f", 9, None),
            ],
            ..Snapshot::default()
        };
        s.pending.push(Task {
            after: ids(&["a"]),
            ..t("blocked", 100, Some(0))
        });
        let order = |s: &Snapshot| {
            let mut skip = HashSet::new();
            let mut out = Vec::new();
            while let Some(t) = next(s, &skip) {
                out.push(t.id.to_string());
                skip.insert(t.id.clone());
            }
            out
        };
        assert_eq!(order(&s), ["f", "d", "e", "c", "b", "a"]);
        let skip: HashSet<TaskId> = ids(&["f", "d"]).into_iter().collect();
        assert_eq!(next(&s, &skip).map(|t| t.id.as_str()), Some("e"));
    }

    #[test]
    fn settled_only_when_nothing_can_move() {
        assert!(settled(&Snapshot::default()));
        assert!(settled(&board(&[], &["a"], &["b"])));
        assert!(settled(&board(&[("a", &["b"]), ("b", &["a"])], &[], &[])));
        assert!(!settled(&board(&[("a", &[])], &[], &[])));
        // Nothing is ready, but a claimed task may finish and unblock the rest.
        let mut s = board(&[("a", &[]), ("b", &["a"])], &[], &[]);
        s.claimed.insert(id("a"), "alice@vm".into());
        assert!(!settled(&s));
        s.pending.remove(0);
        s.claimed.clear();
        s.done.insert(id("a"));
        assert!(!settled(&s));
    }

    #[test]
    fn counts_every_state() {
        let mut s = board(
            &[("r", &[]), ("b", &["r"]), ("c", &[]), ("s", &["ghost"])],
            &["d"],
            &["f"],
        );
        s.claimed.insert(id("c"), "alice@vm".into());
        s.invalid.push(Invalid {
            name: "tasks/X y.md".into(),
            error: "bad".into(),
        });
        assert_eq!(
            counts(&s),
            Counts {
                ready: 1,
                blocked: 1,
                claimed: 1,
                done: 1,
                failed: 1,
                stuck: 1,
                invalid: 1,
            }
        );
    }

    #[test]
    fn a_long_chain_does_not_overflow() {
        let names: Vec<String> = (0..20_000).map(|i| format!("t{i:05}")).collect();
        let mut s = Snapshot::default();
        for (i, n) in names.iter().enumerate() {
            // Each task depends on the next, so the last one is the only ready one.
            let after = names.get(i + 1).map(|d| vec![id(d)]).unwrap_or_default();
            s.pending.push(Task {
                after,
                ..minimal(n)
            });
        }
        assert_eq!(next(&s, &HashSet::new()).unwrap().id.as_str(), "t19999");
        s.pending.last_mut().unwrap().after = ids(&["t00000"]);
        assert_eq!(counts(&s).stuck, 20_000);
        assert_eq!(
            status_of(&s, "t12345"),
            stuck(
                "in a dependency cycle of 20000 tasks: \
                 t00000 → t00001 → t00002 → t00003 → t00004 → t00005 → … → t19999 → t00000"
            )
        );
    }

    /// Can a task still finish? The least fixed point, computed as plainly as
    /// possible: done and claimed tasks can; so can any pending task whose
    /// dependencies all can.
    fn can_finish_reference(s: &Snapshot) -> BTreeSet<TaskId> {
        let mut can: BTreeSet<TaskId> = s.done.clone();
        can.extend(
            s.pending
                .iter()
                .filter(|t| s.claimed.contains_key(&t.id))
                .map(|t| t.id.clone()),
        );
        loop {
            let before = can.len();
            for t in &s.pending {
                if t.after.iter().all(|d| can.contains(d)) {
                    can.insert(t.id.clone());
                }
            }
            if can.len() == before {
                return can;
            }
        }
    }

    fn arb_board() -> impl Strategy<Value = Snapshot> {
        // Ten tasks t0..t9; each is pending, done, failed, missing or
        // invalid, may be claimed, and depends on any of the others.
        proptest::collection::vec(
            (
                0u8..5,
                any::<bool>(),
                proptest::collection::btree_set(0usize..10, 0..4),
            ),
            10,
        )
        .prop_map(|spec| {
            let mut s = Snapshot::default();
            for (i, (place, claimed, deps)) in spec.into_iter().enumerate() {
                let name = format!("t{i}");
                let after = deps
                    .into_iter()
                    .filter(|&d| d != i)
                    .map(|d| id(&format!("t{d}")))
                    .collect();
                match place {
                    0 | 1 => s.pending.push(Task {
                        after,
                        ..minimal(&name)
                    }),
                    2 => drop(s.done.insert(id(&name))),
                    3 => drop(s.failed.insert(id(&name))),
                    _ => s.invalid.push(Invalid {
                        name: format!("tasks/{name}.md"),
                        error: "bad".into(),
                    }),
                }
                if claimed && place < 2 {
                    s.claimed.insert(id(&name), "someone".into());
                }
            }
            s
        })
    }

    proptest! {
        #[test]
        fn statuses_agree_with_the_reference(s in arb_board()) {
            let all = statuses(&s);
            let listed: Vec<&TaskId> = all.iter().map(|(i, _)| i).collect();
            let mut want: Vec<&TaskId> = s.pending.iter().map(|t| &t.id).chain(&s.done).chain(&s.failed).collect();
            want.sort();
            prop_assert_eq!(listed, want);
            let can = can_finish_reference(&s);
            for (i, st) in &all {
                let task = s.pending.iter().find(|t| &t.id == i);
                match st {
                    Status::Done => prop_assert!(s.done.contains(i)),
                    Status::Failed => prop_assert!(s.failed.contains(i)),
                    Status::Claimed { .. } => prop_assert!(s.claimed.contains_key(i)),
                    Status::Ready => {
                        prop_assert!(task.unwrap().after.iter().all(|d| s.done.contains(d)));
                    }
                    Status::Blocked { on } => {
                        prop_assert!(can.contains(i), "{} is blocked but cannot finish", i);
                        let want: Vec<TaskId> = task.unwrap().after.iter().filter(|d| !s.done.contains(*d)).cloned().collect();
                        prop_assert_eq!(on, &want);
                        prop_assert!(!on.is_empty());
                    }
                    Status::Stuck { why } => {
                        prop_assert!(!can.contains(i), "{} is stuck ({}) but can finish", i, why);
                    }
                }
                if !matches!(st, Status::Done | Status::Failed | Status::Claimed { .. }) {
                    prop_assert!(!s.claimed.contains_key(i));
                }
            }
            let moving = all.iter().any(|(_, st)| matches!(st, Status::Ready | Status::Blocked { .. } | Status::Claimed { .. }));
            prop_assert_eq!(settled(&s), !moving);
        }
    }

    // --- loading ---

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn load_reads_the_whole_board() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "tasks/a.md", "+++\ntitle = \"Do a\"\n+++\n");
        write(
            root,
            "tasks/b.md",
            "+++\ntitle = \"Do b\"\nafter = [\"a\", \"d\"]\n+++\nBody\n",
        );
        write(root, "tasks/README.md", "not a task");
        write(root, "tasks/notes.txt", "ignored");
        write(root, "tasks/bad.md", "+++\nafer = []\n+++\n");
        write(root, "tasks/Bad Name.md", "+++\ntitle = \"x\"\n+++\n");
        write(root, "tasks/twice.md", "+++\ntitle = \"x\"\n+++\n");
        write(
            root,
            "tasks/huge.md",
            &"x".repeat(MAX_TASK_BYTES as usize + 1),
        );
        fs::write(
            root.join("tasks/latin1.md"),
            b"+++\ntitle = \"\xe9\"\n+++\n",
        )
        .unwrap();
        fs::create_dir(root.join("tasks/dir.md")).unwrap();
        std::os::unix::fs::symlink(root.join("tasks/a.md"), root.join("tasks/link.md")).unwrap();
        write(root, "tasks/done/d.md", "content is not read");
        write(root, "tasks/done/twice.md", "");
        write(root, "tasks/done/README.md", "");
        write(root, "tasks/failed/f.md", "");
        write(root, "tasks/failed/-x.md", "");
        std::os::unix::fs::symlink("/etc/passwd", root.join("tasks/failed/g.md")).unwrap();

        let s = load(root).unwrap();
        let names: Vec<&str> = s.pending.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(s.pending[1].after, ids(&["a", "d"]));
        assert_eq!(s.done, ids(&["d", "twice"]).into_iter().collect());
        assert_eq!(s.failed, ids(&["f"]).into_iter().collect());
        let invalid: Vec<(&str, &str)> = s
            .invalid
            .iter()
            .map(|i| (i.name.as_str(), i.error.as_str()))
            .collect();
        let want = [
            ("tasks/Bad Name.md", "invalid task id `Bad Name`"),
            ("tasks/bad.md", "unknown key `afer`"),
            ("tasks/dir.md", "not a regular file"),
            ("tasks/failed/-x.md", "invalid task id `-x`"),
            ("tasks/failed/g.md", "a symlink, which farm never follows"),
            ("tasks/huge.md", "larger than 1024 KiB"),
            ("tasks/latin1.md", "not UTF-8 text"),
            ("tasks/link.md", "a symlink, which farm never follows"),
            ("tasks/twice.md", "also in tasks/done/"),
        ];
        assert_eq!(invalid.len(), want.len(), "{invalid:#?}");
        for ((name, error), (want_name, want_error)) in invalid.iter().zip(want) {
            assert_eq!(*name, want_name);
            assert!(error.contains(want_error), "{name}: {error}");
            assert!(!error.contains('\n'), "{name}: {error}");
        }
        assert_eq!(status_of(&s, "b"), blocked(&["a"]));
        assert_eq!(status_of(&s, "twice"), Status::Done);
    }

    #[test]
    fn load_without_a_board_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), Snapshot::default());
        write(dir.path(), "tasks/a.md", "+++\ntitle = \"Do a\"\n+++\n");
        let s = load(dir.path()).unwrap();
        assert_eq!(s.pending, vec![minimal_titled("a", "Do a")]);
    }

    fn minimal_titled(name: &str, title: &str) -> Task {
        Task {
            title: title.into(),
            ..minimal(name)
        }
    }

    #[test]
    fn load_pending_and_failed_copies() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "tasks/x.md", "+++\ntitle = \"x\"\n+++\n");
        write(root, "tasks/failed/x.md", "");
        write(root, "tasks/done/y.md", "");
        write(root, "tasks/failed/y.md", "");
        let s = load(root).unwrap();
        assert!(s.pending.is_empty());
        assert_eq!(s.failed, ids(&["x"]).into_iter().collect());
        assert_eq!(s.done, ids(&["y"]).into_iter().collect());
        let names: Vec<(&str, &str)> = s
            .invalid
            .iter()
            .map(|i| (i.name.as_str(), i.error.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "tasks/failed/y.md",
                    "also in tasks/done/, which wins; remove this copy"
                ),
                (
                    "tasks/x.md",
                    "also in tasks/failed/, which wins; remove this copy"
                ),
            ]
        );
    }

    #[test]
    fn load_reports_a_board_directory_that_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "elsewhere/done/x.md", "");
        write(
            root,
            "tasks/a.md",
            "+++\ntitle = \"Do a\"\nafter = [\"x\"]\n+++\n",
        );
        std::os::unix::fs::symlink(root.join("elsewhere/done"), root.join("tasks/done")).unwrap();
        write(root, "tasks/failed", "a file");
        let s = load(root).unwrap();
        assert_eq!(
            s.invalid,
            [
                Invalid {
                    name: "tasks/done".into(),
                    error: "a symlink, which farm never follows; replace it with a directory"
                        .into(),
                },
                Invalid {
                    name: "tasks/failed".into(),
                    error: "not a directory".into(),
                },
            ]
        );
        assert!(s.done.is_empty());
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `x`, which does not exist")
        );

        // A symlinked `tasks` is not read, nor anything under it.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(root.join("tasks"), other.path().join("tasks")).unwrap();
        let s = load(other.path()).unwrap();
        assert_eq!(s.pending, []);
        assert_eq!(s.invalid.len(), 1);
        assert_eq!(s.invalid[0].name, "tasks");
    }
}
