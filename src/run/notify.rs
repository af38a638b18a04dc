//! Notifications: `[notify]` in farm.toml names a command that farm runs
//! with one JSON object on its standard input for each thing that needs a
//! person — a task that failed for good, the circuit breaker tripped, a
//! usage-limit wait longer than `limit_wait_over`, the cost budget spent,
//! the run's end with its summary — so that a night can post to a chat
//! webhook, a pager or a phone (`docs/notifications.md` has the JSON).
//!
//! Theory of operation. The run's journal offers every event it records to
//! [`Notifier::observe`], which decides, from the event alone and what it
//! sent before, whether a person needs to hear of it ([`Notifier::notice_of`]:
//! no process, no clock of its own). A notice goes on a queue; one thread
//! of its own sends them, one at a time, each in a process tree of its own
//! (its own process group, see [`crate::procs`]) cut off whole after
//! `timeout`. So a notifier that fails, hangs or forks something that
//! lingers costs the run nothing: no loop waits for it, nothing it starts
//! outlives its timeout, and its failure is said once. At the run's end
//! [`Notifier::finish`] gives the queue at most one `timeout` to drain (the
//! run's end is the notice most wanted) to start, each its own `timeout`
//! to run, then drops what is left.
//!
//! Other parts of farm that need a person (a question asked, a review
//! waiting) call [`Notifier::send`] with their [`Kind`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::age::{Age, parse_duration};
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::output::Out;
use crate::run::event::Event;

/// A usage-limit wait longer than this is notified, unless `limit_wait_over`
/// says otherwise: shorter ones lift by themselves before anyone could act.
pub const LIMIT_WAIT_OVER: &str = "10m";
/// How long a notifier may run, unless `timeout` says otherwise.
pub const TIMEOUT: &str = "30s";
/// At most this many notices wait to be sent; more are dropped (and
/// counted): a notifier slower than the events must not grow farm's memory
/// all night.
const QUEUE: usize = 100;
/// A notice's text is cut to this many characters: it is for a chat line,
/// and stdin of this size is taken by a pipe's buffer whole.
const TEXT_MAX: usize = 2000;

/// `[notify]` in farm.toml, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// The command, split into words (no shell), run once per notice with
    /// the notice's JSON on its standard input.
    pub command: String,
    /// Notify a usage-limit wait only when it is longer than this.
    pub limit_wait_over: Option<String>,
    /// How long one notifier may run before it is killed.
    pub timeout: Option<String>,
}

/// `[notify]`, checked: what the run's [`Notifier`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The command's words; never empty.
    pub argv: Vec<String>,
    pub limit_wait_over: Duration,
    pub timeout: Duration,
}

impl Raw {
    /// The values farm cannot use, each named by its key: found when
    /// farm.toml is read, as its other keys are.
    pub fn check(&self) -> Result<Config, Error> {
        let argv = shell_words::split(&self.command).map_err(|e| {
            Error::usage(format!(
                "farm.toml [notify] `command` = {:?}: cannot split it into words: {e}",
                self.command
            ))
        })?;
        if argv.is_empty() {
            return Err(Error::usage("farm.toml [notify] `command` is empty")
                .hint("command = \"curl -fsS --data-binary @- https://chat.example/hook\", say"));
        }
        let duration = |key: &str, text: Option<&str>, default: &str| {
            let text = text.unwrap_or(default);
            match parse_duration(text) {
                Ok(d) if !d.is_zero() => Ok(d),
                Ok(_) => Err(format!(
                    "farm.toml [notify] `{key}` = {text:?}: it must be longer than 0s"
                )),
                Err(e) => Err(format!("farm.toml [notify] `{key}` = {text:?}: {e}")),
            }
            .map_err(|m| Error::usage(m).hint("a duration: 90s, 10m, 2h"))
        };
        Ok(Config {
            argv,
            limit_wait_over: duration(
                "limit_wait_over",
                self.limit_wait_over.as_deref(),
                LIMIT_WAIT_OVER,
            )?,
            timeout: duration("timeout", self.timeout.as_deref(), TIMEOUT)?,
        })
    }
}

/// `[notify]` resolved for a run: checked, and its program found (a path,
/// or a name on `PATH`).
pub fn resolve(
    raw: Option<&Raw>,
    runnable: &dyn Fn(&str) -> bool,
) -> Result<Option<Config>, Error> {
    let Some(raw) = raw else { return Ok(None) };
    let config = raw.check()?;
    let program = &config.argv[0];
    if !runnable(program) {
        return Err(Error::usage(format!(
            "the notifier `{program}` ([notify] in farm.toml) not found (looked on PATH)"
        ))
        .hint("install it, or give its full path in [notify] `command`"));
    }
    Ok(Some(config))
}

/// What a notice is about: its JSON's `event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A task went to `tasks/failed/`: its attempts are used up.
    TaskFailed,
    /// An agent's circuit breaker tripped: it pauses.
    BreakerTripped,
    /// The agent CLI hit a limit and every agent waits longer than
    /// `limit_wait_over`.
    LimitWait,
    /// The cost budget is spent: no new claims.
    BudgetSpent,
    /// The run ended; its summary.
    RunEnded,
    /// A session asked a question and its task waits for an answer.
    QuestionAsked,
    /// A change waits for a person's review.
    ReviewWaiting,
}

/// One notice: the JSON object a notifier reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    pub event: Kind,
    /// The task it is about, if one.
    pub task: Option<String>,
    /// The agent it is about, if one.
    pub agent: Option<String>,
    /// What happened, in one line a person reads.
    pub text: String,
    /// Fields of its kind (`until`, `summary`, …).
    #[serde(flatten)]
    pub more: Map<String, Value>,
}

impl Notice {
    pub fn new(event: Kind, task: Option<&str>, agent: Option<&str>, text: String) -> Notice {
        Notice {
            event,
            task: task.map(str::to_owned),
            agent: agent.map(str::to_owned),
            text,
            more: Map::new(),
        }
    }

    fn with(mut self, key: &str, value: Value) -> Notice {
        self.more.insert(key.to_owned(), value);
        self
    }
}

/// What the notifier sent before, for the notices it keeps to one.
#[derive(Debug, Default)]
struct Sent {
    /// The end of the limit wait last notified: the same wait, grown or hit
    /// again by another agent, is not notified again.
    limit_until: Option<SystemTime>,
    /// The same for the breaker: agents tripped together are one notice.
    breaker_until: Option<SystemTime>,
    budget: bool,
}

/// The run's notifier. Without `[notify]` it sends nothing and starts no
/// thread.
pub struct Notifier {
    config: Option<Config>,
    sent: Mutex<Sent>,
    shared: Arc<Shared>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What the run's threads and the sending thread share.
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Fields every notice carries: the hub, the host.
    about: Map<String, Value>,
    dir: PathBuf,
    out: Out,
    failed: AtomicUsize,
    delivered: AtomicUsize,
    dropped: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    notices: VecDeque<Notice>,
    /// Set by [`Notifier::finish`]: send what is queued by then, and stop.
    closing: Option<Instant>,
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn none() -> Notifier {
        Notifier::start(
            None,
            Path::new("."),
            Out::new(crate::output::ColorWhen::Never, true, 0),
            Map::new(),
        )
    }

    /// The notifier of `config`, its notifiers run in `dir` (made if need
    /// be); `about` goes into every notice (the hub, the host).
    pub fn start(
        config: Option<Config>,
        dir: &Path,
        out: Out,
        about: Map<String, Value>,
    ) -> Notifier {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            ready: Condvar::new(),
            about,
            dir: dir.to_path_buf(),
            out,
            failed: AtomicUsize::new(0),
            delivered: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        });
        let worker = config.clone().map(|config| {
            let _ = std::fs::create_dir_all(dir);
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || shared.work(&config))
        });
        Notifier {
            config,
            sent: Mutex::default(),
            shared,
            worker: Mutex::new(worker),
        }
    }

    /// Whether notices go anywhere.
    pub fn on(&self) -> bool {
        self.config.is_some()
    }

    /// Send a notice of `kind` (queued; never waits for the notifier).
    pub fn send(&self, kind: Kind, task: Option<&str>, agent: Option<&str>, text: &str) {
        self.send_notice(Notice::new(kind, task, agent, text.to_owned()));
    }

    /// Send `notice` (queued; never waits for the notifier).
    pub fn send_notice(&self, mut notice: Notice) {
        if !self.on() {
            return;
        }
        if notice.text.chars().count() > TEXT_MAX {
            notice.text = notice.text.chars().take(TEXT_MAX - 1).collect::<String>() + "…";
        }
        let mut q = self.shared.lock();
        if q.closing.is_some() || q.notices.len() >= QUEUE {
            self.shared.dropped.fetch_add(1, Ordering::SeqCst);
            return;
        }
        q.notices.push_back(notice);
        self.shared.ready.notify_all();
    }

    /// A journaled `event` of `agent` ("" for the run itself): sent if a
    /// person needs to hear of it.
    pub fn observe(&self, agent: &str, event: &Event<'_>) {
        if !self.on() {
            return;
        }
        if let Some(notice) = self.notice_of(agent, event, SystemTime::now()) {
            self.send_notice(notice);
        }
    }

    /// The notice `event` of `agent` makes at `now`, if any: the decision
    /// alone, no process started.
    pub fn notice_of(&self, agent: &str, event: &Event<'_>, now: SystemTime) -> Option<Notice> {
        let config = self.config.as_ref()?;
        let agent = (!agent.is_empty()).then_some(agent);
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let until_of = |until: &str| humantime::parse_rfc3339_weak(until).ok();
        Some(match event {
            Event::Failed {
                task,
                attempt,
                attempts,
                why,
                gave_up: true,
            } => failed_notice(agent, task, attempt.or(*attempts), why),
            Event::Trip { until, why } => {
                let until_t = until_of(until)?;
                if sent.breaker_until.is_some_and(|u| u > now) {
                    sent.breaker_until = sent.breaker_until.max(Some(until_t));
                    return None;
                }
                sent.breaker_until = Some(until_t);
                let pause = Age(until_t.duration_since(now).unwrap_or_default());
                Notice::new(
                    Kind::BreakerTripped,
                    None,
                    agent,
                    format!(
                        "{}: the circuit breaker tripped ({why}); pausing {pause}",
                        agent.unwrap_or("farm run")
                    ),
                )
                .with("until", json!(until))
            }
            Event::Limit { task, until, why } => {
                let until_t = until_of(until)?;
                let wait = until_t.duration_since(now).unwrap_or_default();
                if wait <= config.limit_wait_over {
                    return None;
                }
                if sent.limit_until.is_some_and(|u| u > now) {
                    sent.limit_until = sent.limit_until.max(Some(until_t));
                    return None;
                }
                sent.limit_until = Some(until_t);
                Notice::new(
                    Kind::LimitWait,
                    Some(task),
                    agent,
                    format!(
                        "the agent CLI hit its {} on `{task}`: every agent waits {} (until {until})",
                        why.label(),
                        Age(wait)
                    ),
                )
                .with("until", json!(until))
                .with("why", json!(why.label()))
            }
            Event::Budget { spent_usd, max_usd } => {
                if std::mem::replace(&mut sent.budget, true) {
                    return None;
                }
                Notice::new(
                    Kind::BudgetSpent,
                    None,
                    agent,
                    event.line().unwrap_or_default(),
                )
                .with("spent_usd", json!(spent_usd))
                .with("max_usd", json!(max_usd))
            }
            Event::Asked {
                task,
                question,
                work,
            } => {
                let first = question.lines().next().unwrap_or_default();
                Notice::new(
                    Kind::QuestionAsked,
                    Some(task),
                    agent,
                    format!("`{task}` asks: {first} (farm answer {task} TEXT)"),
                )
                .with("question", json!(question))
                .with("answer_with", json!(format!("farm answer {task} TEXT")))
                .with("work", json!(work))
            }
            Event::Review { task, change } => Notice::new(
                Kind::ReviewWaiting,
                Some(task),
                agent,
                format!("`{task}`'s change waits for review on `{change}` (farm approve {task})"),
            )
            .with("change", json!(change))
            .with("approve_with", json!(format!("farm approve {task}")))
            .with("reject_with", json!(format!("farm reject {task} -m WHY"))),
            Event::RunEnd { .. } => run_end_notice(event)?,
            _ => return None,
        })
    }

    /// Give what is queued at most one `timeout` to start being sent (each
    /// notice then has its own), drop the rest, and stop the sending thread;
    /// say what could not be sent. Called once the run's end is journaled; again, it does
    /// nothing.
    pub fn finish(&self) {
        let Some(worker) = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let timeout = self.config.as_ref().map_or(Duration::ZERO, |c| c.timeout);
        {
            let mut q = self.shared.lock();
            q.closing = Some(Instant::now() + timeout);
            self.shared.ready.notify_all();
        }
        let _ = worker.join();
        let s = &self.shared;
        let (failed, dropped) = (
            s.failed.load(Ordering::SeqCst),
            s.dropped.load(Ordering::SeqCst),
        );
        if failed + dropped > 1 {
            s.out.warn(&format!(
                "farm run: {} of {} notifications were not sent ({failed} failed, {dropped} dropped)",
                failed + dropped,
                failed + dropped + s.delivered.load(Ordering::SeqCst),
            ));
        }
    }

    /// How many notices were delivered, failed and dropped so far.
    pub fn counts(&self) -> (usize, usize, usize) {
        let s = &self.shared;
        (
            s.delivered.load(Ordering::SeqCst),
            s.failed.load(Ordering::SeqCst),
            s.dropped.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sending thread: one notice at a time, until closed and empty
    /// (or closed and out of time: what is left is dropped).
    fn work(&self, config: &Config) {
        loop {
            let (notice, closing) = {
                let mut q = self.lock();
                loop {
                    if let Some(n) = q.notices.pop_front() {
                        break (n, q.closing);
                    }
                    if q.closing.is_some() {
                        return;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            // Each notice started gets its whole timeout: the run's end,
            // queued behind one that hangs, still gets its chance.
            if closing.is_some_and(|c| Instant::now() >= c) {
                self.dropped.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            match self.deliver(config, &notice, Instant::now() + config.timeout) {
                Ok(()) => {
                    self.delivered.fetch_add(1, Ordering::SeqCst);
                }
                Err(why) => {
                    if self.failed.fetch_add(1, Ordering::SeqCst) == 0 {
                        self.out.warn(&format!(
                            "farm run: warning: the notifier `{}` failed on a `{}` notice: {why} \
                             (further failures are not said; the run goes on)",
                            config.argv[0],
                            serde_json::to_value(notice.event)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default()
                        ));
                    }
                }
            }
        }
    }

    /// Run the notifier once with `notice` on its stdin, in a tree of its
    /// own, killed whole at `deadline`.
    fn deliver(&self, config: &Config, notice: &Notice, deadline: Instant) -> Result<(), String> {
        let mut doc = serde_json::to_value(notice).map_err(|e| e.to_string())?;
        if let Value::Object(fields) = &mut doc {
            fields.insert("at".into(), json!(timestamp(SystemTime::now())));
            for (k, v) in &self.about {
                fields.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let mut body = doc.to_string();
        body.push('\n');
        let err_path = self.dir.join("stderr.txt");
        let err = std::fs::File::create(&err_path)
            .map_err(|e| format!("cannot write `{}`: {e}", err_path.display()))?;
        let mut tree = crate::procs::Tree::new(&self.dir);
        let mut cmd = Command::new(&config.argv[0]);
        cmd.args(&config.argv[1..])
            .current_dir(&self.dir)
            .env("FARM_EVENT", doc["event"].as_str().unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(err);
        tree.root(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start it: {e}"))?;
        tree.spawned(&child);
        // The body is far below a pipe's buffer: written whole at once, even
        // to a notifier that never reads; then closed, for its end of input.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = std::io::Write::write_all(&mut stdin, body.as_bytes());
        }
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("cannot wait for it: {e}")),
            }
        };
        let Some(status) = status else {
            tree.kill();
            let _ = child.wait();
            tree.end();
            return Err(format!(
                "still running after {}: killed (with all it started)",
                Age(config.timeout)
            ));
        };
        // What it left running in the background goes too.
        tree.end();
        if status.success() {
            return Ok(());
        }
        let said = std::fs::read_to_string(&err_path).unwrap_or_default();
        let last = said.lines().rev().find(|l| !l.trim().is_empty());
        let code = status
            .code()
            .map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit {c}"));
        Err(match last {
            Some(l) => format!("{code}: {}", l.trim()),
            None => code,
        })
    }
}

/// The notice of a task that failed for good after `attempt` attempts.
fn failed_notice(agent: Option<&str>, task: &str, attempt: Option<u32>, why: &str) -> Notice {
    let tried = attempt.map_or(String::new(), |a| {
        format!(
            " after {}",
            crate::output::count(a as usize, "attempt", "attempts")
        )
    });
    Notice::new(
        Kind::TaskFailed,
        Some(task),
        agent,
        format!("`{task}` failed for good{tried} ({why}): moved to tasks/failed/"),
    )
    .with("why", json!(why))
}

/// The notice of the run's end, with its summary.
fn run_end_notice(event: &Event<'_>) -> Option<Notice> {
    let Event::RunEnd {
        sessions,
        done,
        failed,
        rescued,
        cost_usd,
        input_tokens,
        output_tokens,
    } = event
    else {
        return None;
    };
    let cost = cost_usd.map_or(String::new(), |c| format!(", ${c:.2}"));
    let notice = Notice::new(
        Kind::RunEnded,
        None,
        None,
        format!(
            "farm run ended: {}: {done} done, {}, {rescued} rescued{cost}",
            crate::output::count(*sessions, "session", "sessions"),
            crate::output::count(*failed, "failed attempt", "failed attempts"),
        ),
    );
    Some(notice.with(
        "summary",
        json!({
            "sessions": sessions, "done": done, "failed": failed,
            "rescued": rescued, "cost_usd": cost_usd,
            "input_tokens": input_tokens, "output_tokens": output_tokens,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notifier(limit: &str) -> Notifier {
        let config = Raw {
            command: "true".into(),
            limit_wait_over: Some(limit.into()),
            timeout: None,
        }
        .check()
        .unwrap();
        // A notifier whose decisions are looked at, not sent: its thread is
        // stopped at once.
        let n = Notifier::start(
            Some(config),
            &std::env::temp_dir(),
            Out::new(crate::output::ColorWhen::Never, true, 0),
            Map::new(),
        );
        n.finish();
        n
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn stamp(secs: u64) -> String {
        timestamp(at(secs))
    }

    #[test]
    fn a_task_failed_for_good_is_notified_and_a_failed_attempt_is_not() {
        let n = notifier("10m");
        let failed = |gave_up| Event::Failed {
            task: "parse-if".into(),
            attempt: Some(3),
            attempts: None,
            why: "failed with exit code 1".into(),
            gave_up,
        };
        assert_eq!(n.notice_of("box-1", &failed(false), at(0)), None);
        let notice = n.notice_of("box-1", &failed(true), at(0)).unwrap();
        assert_eq!(notice.event, Kind::TaskFailed);
        assert_eq!(notice.task.as_deref(), Some("parse-if"));
        assert_eq!(notice.agent.as_deref(), Some("box-1"));
        assert_eq!(
            notice.text,
            "`parse-if` failed for good after 3 attempts (failed with exit code 1): moved to tasks/failed/"
        );
        let doc = serde_json::to_value(&notice).unwrap();
        assert_eq!(doc["event"], "task_failed");
        assert_eq!(doc["why"], "failed with exit code 1");
    }

    /// A wait over the threshold is notified once, however many agents hit
    /// the limit or however it grows; a wait at or under it is not; a new
    /// wait after the first ended is notified again.
    #[test]
    fn a_long_limit_wait_is_notified_once() {
        let n = notifier("10m");
        let limit = |until: u64| Event::Limit {
            task: "t".into(),
            until: stamp(until).into(),
            why: crate::run::event::Limited::UsageLimit,
        };
        assert_eq!(n.notice_of("a", &limit(1_000 + 600), at(1_000)), None);
        let first = n.notice_of("a", &limit(1_000 + 3_600), at(1_000)).unwrap();
        assert_eq!(first.event, Kind::LimitWait);
        assert!(
            first.text.contains("every agent waits 1h"),
            "{}",
            first.text
        );
        assert_eq!(n.notice_of("b", &limit(1_000 + 7_200), at(1_010)), None);
        assert!(n.notice_of("b", &limit(9_000 + 3_600), at(9_000)).is_some());
    }

    #[test]
    fn the_breaker_and_the_budget_are_one_notice_each_and_the_end_has_its_summary() {
        let n = notifier("10m");
        let trip = Event::Trip {
            until: stamp(1_060).into(),
            why: "5 failed sessions in a row".into(),
        };
        let first = n.notice_of("a", &trip, at(1_000)).unwrap();
        assert_eq!(
            first.text,
            "a: the circuit breaker tripped (5 failed sessions in a row); pausing 1m"
        );
        assert_eq!(n.notice_of("b", &trip, at(1_001)), None);
        assert!(n.notice_of("b", &trip, at(2_000)).is_some(), "a later trip");
        let budget = Event::Budget {
            spent_usd: 1.2,
            max_usd: 1.0,
        };
        assert!(n.notice_of("a", &budget, at(0)).is_some());
        assert_eq!(n.notice_of("b", &budget, at(0)), None);
        let end = Event::RunEnd {
            sessions: 4,
            done: 2,
            failed: 2,
            rescued: 1,
            cost_usd: Some(0.5),
            input_tokens: None,
            output_tokens: None,
        };
        let notice = n.notice_of("", &end, at(0)).unwrap();
        assert_eq!(
            notice.text,
            "farm run ended: 4 sessions: 2 done, 2 failed attempts, 1 rescued, $0.50"
        );
        assert_eq!(notice.more["summary"]["done"], 2);
        assert_eq!(notice.agent, None);
        let asked = Event::Asked {
            task: "q".into(),
            question: "Tabs or spaces?\nThe guide is silent.".into(),
            work: Some("farm/rescue/q/n1".into()),
        };
        let notice = n.notice_of("a", &asked, at(0)).unwrap();
        assert_eq!(notice.event, Kind::QuestionAsked);
        assert_eq!(
            notice.text,
            "`q` asks: Tabs or spaces? (farm answer q TEXT)"
        );
        assert_eq!(
            notice.more["question"],
            "Tabs or spaces?\nThe guide is silent."
        );
        assert_eq!(notice.more["work"], "farm/rescue/q/n1");
        let review = Event::Review {
            task: "r".into(),
            change: "farm/review/r/n2".into(),
        };
        let notice = n.notice_of("a", &review, at(0)).unwrap();
        assert_eq!(notice.event, Kind::ReviewWaiting);
        assert_eq!(notice.task.as_deref(), Some("r"));
        assert_eq!(notice.more["change"], "farm/review/r/n2");
        assert_eq!(notice.more["approve_with"], "farm approve r");
        // Everything else says nothing.
        assert_eq!(
            n.notice_of("a", &Event::Done { task: "t".into() }, at(0)),
            None
        );
    }

    #[test]
    fn bad_settings_are_named_by_their_key() {
        let raw = |command: &str, limit: Option<&str>| Raw {
            command: command.into(),
            limit_wait_over: limit.map(str::to_owned),
            timeout: None,
        };
        let e = raw("", None).check().unwrap_err();
        assert!(
            e.message.contains("[notify] `command` is empty"),
            "{}",
            e.message
        );
        let e = raw("curl 'open", None).check().unwrap_err();
        assert!(
            e.message.contains("cannot split it into words"),
            "{}",
            e.message
        );
        let e = raw("curl", Some("soon")).check().unwrap_err();
        assert!(
            e.message.contains("`limit_wait_over` = \"soon\""),
            "{}",
            e.message
        );
        let e = raw("curl", Some("0s")).check().unwrap_err();
        assert!(e.message.contains("longer than 0s"), "{}", e.message);
        let c = raw("curl -d @- 'http://x/a b'", None).check().unwrap();
        assert_eq!(c.argv, ["curl", "-d", "@-", "http://x/a b"]);
        assert_eq!(c.limit_wait_over, Duration::from_secs(600));
        let e = resolve(Some(&raw("nowhere", None)), &|_| false).unwrap_err();
        assert!(
            e.message.contains("the notifier `nowhere`"),
            "{}",
            e.message
        );
    }
}
