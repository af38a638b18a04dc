//! A task and its file. `tasks/<id>.md` is TOML front matter between two
//! lines that are exactly `+++`, then a markdown description: [`parse`] reads
//! it, [`Task::render`] writes it back, [`new_task`] makes one as
//! `farm task add` does.
//!
//! Parsing is strict and total: a typo in a key, an id that cannot exist or a
//! task that depends on itself is an error naming the culprit, never a silently
//! different task and never a panic.

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
const KEYS: [&str; 12] = [
    "title",
    "after",
    "labels",
    "priority",
    "max_attempts",
    "timeout",
    "review",
    "attempts",
    "created",
    "asked",
    "change",
    "approved",
];

/// Where a change waiting for review is kept on the hub: `farm/review/<id>/<nonce>`.
pub const REVIEW_PREFIX: &str = "farm/review/";

/// One task, as its file describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    /// One line, not blank.
    pub title: String,
    /// Tasks that must be done first, in the order written; no duplicates, never `id`.
    pub after: Vec<TaskId>,
    /// What kind of work it is (`test`, `docs`, …), for roles to pick by:
    /// each a name as task ids are, in the order written, no duplicates.
    pub labels: Vec<String>,
    /// Higher runs first.
    pub priority: i64,
    /// At least 1.
    pub max_attempts: u32,
    /// Per-task session timeout; longer than zero when given.
    pub timeout: Option<Duration>,
    /// Failed attempts so far, maintained by farm.
    pub attempts: u32,
    pub created: Option<SystemTime>,
    /// When a session asked a question the task waits to have answered
    /// (`farm answer`); the question is the body's last `## Question`
    /// section. Maintained by farm.
    pub asked: Option<SystemTime>,
    /// `review = true`: a change lands only after `farm approve`.
    pub review: bool,
    /// The branch on the hub (`farm/review/<id>/<nonce>`) holding the
    /// change that waits for review; maintained by farm.
    pub change: Option<String>,
    /// When `farm approve` approved [`Task::change`]: the task is ready
    /// again, to be landed without a session. Maintained by farm.
    pub approved: Option<SystemTime>,
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
    let labels = match table.get("labels") {
        None => Vec::new(),
        Some(v) => labels(v)?,
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
    let asked = table.get("asked").map(asked).transpose()?;
    let review = match table.get("review") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(v) => return Err(format!("`review` must be true or false, not {}", a(v))),
    };
    let change = table.get("change").map(|v| change(&id, v)).transpose()?;
    let approved = table
        .get("approved")
        .map(|v| time("approved", v))
        .transpose()?;
    if approved.is_some() && change.is_none() {
        return Err("`approved` without a `change`: nothing was approved".into());
    }
    Ok(Task {
        id,
        title: title.to_owned(),
        after,
        labels,
        priority,
        max_attempts,
        timeout,
        attempts,
        created,
        asked,
        review,
        change,
        approved,
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

fn labels(v: &toml::Value) -> Result<Vec<String>, String> {
    let Some(items) = v.as_array() else {
        return Err(format!(
            "`labels` must be an array of names, like [\"test\"], not {}",
            a(v)
        ));
    };
    let mut labels: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Some(s) = item.as_str() else {
            return Err(format!(
                "`labels` must hold names as strings, not {}",
                a(item)
            ));
        };
        let label = crate::names::parse_label(s).map_err(|e| format!("`labels`: {e}"))?;
        if labels.contains(&label) {
            return Err(format!("`labels` lists `{label}` twice"));
        }
        labels.push(label);
    }
    Ok(labels)
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

fn asked(v: &toml::Value) -> Result<SystemTime, String> {
    time("asked", v)
}

fn time(key: &str, v: &toml::Value) -> Result<SystemTime, String> {
    let s = match v {
        toml::Value::Datetime(d) => d.to_string(),
        v => string(key, v)?.to_owned(),
    };
    humantime::parse_rfc3339(&s).map_err(|e| {
        format!(
            "`{key}` `{}` is not an RFC 3339 UTC time like 2026-11-30T01:12:42.123Z: {e}",
            shown(&s)
        )
    })
}

/// `change`: a branch `farm/review/<id>/<nonce>`, nothing git could read as
/// an option or a path outside `refs/heads/`.
fn change(id: &TaskId, v: &toml::Value) -> Result<String, String> {
    let s = string("change", v)?;
    let nonce = s
        .strip_prefix(REVIEW_PREFIX)
        .and_then(|rest| rest.strip_prefix(id.as_str()))
        .and_then(|rest| rest.strip_prefix('/'));
    match nonce {
        Some(n)
            if !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            Ok(s.to_owned())
        }
        _ => Err(format!(
            "`change` `{}` is not a review branch `{REVIEW_PREFIX}{id}/<nonce>`",
            shown(s)
        )),
    }
}

/// The review branch of task `id` for the claim `nonce`.
pub fn review_branch(id: &TaskId, nonce: &str) -> String {
    format!("{REVIEW_PREFIX}{id}/{nonce}")
}

/// The front matter as [`Task::render`] writes it: title always, the rest
/// only when it differs from the default.
#[derive(Serialize)]
struct Front<'a> {
    title: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    labels: &'a [String],
    #[serde(skip_serializing_if = "is_zero")]
    priority: i64,
    #[serde(skip_serializing_if = "is_default_max_attempts")]
    max_attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    review: bool,
    #[serde(skip_serializing_if = "is_zero")]
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    asked: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    change: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approved: Option<String>,
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
            labels: &self.labels,
            priority: self.priority,
            max_attempts: self.max_attempts,
            timeout: self
                .timeout
                .map(|d| humantime::format_duration(d).to_string()),
            review: self.review,
            attempts: self.attempts,
            created: self.created.map(rfc3339),
            asked: self.asked.map(rfc3339),
            change: self.change.as_deref(),
            approved: self.approved.map(rfc3339),
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
        labels: Vec::new(),
        priority,
        max_attempts: DEFAULT_MAX_ATTEMPTS,
        timeout: None,
        attempts: 0,
        created: Some(UNIX_EPOCH + Duration::from_millis(millis)),
        asked: None,
        review: false,
        change: None,
        approved: None,
        body,
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::testing::{at, id, ids, minimal};
    use proptest::prelude::*;

    const T0_MS: u64 = 1_796_000_000_123;

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
            labels: Vec::new(),
            priority: 2,
            max_attempts: 5,
            timeout: Some(Duration::from_secs(1800)),
            attempts: 1,
            created: Some(at(T0_MS)),
            asked: None,
            review: false,
            change: None,
            approved: None,
            body: "Description in markdown…\n".into(),
        }
    }

    fn parse_as(name: &str, text: &str) -> Result<Task, String> {
        parse(id(name), text)
    }

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

    /// Labels (what roles pick by) are read in the order written and
    /// written back after `after`.
    #[test]
    fn labels_are_read_and_written_back() {
        let text = "+++\ntitle = \"Do x\"\nlabels = [\"test\", \"docs\"]\n+++\n";
        let t = parse_as("x", text).unwrap();
        assert_eq!(t.labels, ["test", "docs"]);
        assert_eq!(t.render(), text);
        assert_eq!(parse_as("x", &t.render()).unwrap(), t);
        assert!(
            minimal("x")
                .render()
                .lines()
                .all(|l| !l.starts_with("labels"))
        );
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
                with("labels = \"test\""),
                "`labels` must be an array of names, like [\"test\"]",
            ),
            (
                with("labels = [2]"),
                "`labels` must hold names as strings, not an integer",
            ),
            (
                with("labels = [\"unit tests\"]"),
                "`labels`: invalid label `unit tests`: it may only contain",
            ),
            (
                with("labels = [\"test\", \"docs\", \"test\"]"),
                "`labels` lists `test` twice",
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
                        labels: Vec::new(),
                        priority,
                        max_attempts,
                        timeout: timeout
                            .map(|(s, n)| Duration::new(s, n))
                            .filter(|d| !d.is_zero()),
                        attempts,
                        created: created.map(|(s, n)| UNIX_EPOCH + Duration::new(s, n)),
                        asked: created.map(|(s, _)| UNIX_EPOCH + Duration::from_secs(s)),
                        review: attempts % 2 == 1,
                        change: None,
                        approved: None,
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
}
