//! The state one `farm run` shares between its agents' loops: its
//! configuration, the hub and the claim store, the journal, the stop asked
//! of it, what its sessions cost, and the counters the loops share (how many
//! sessions started, which did not start, how many loops the breaker paused);
//! and how an idle loop waits for the hub to change.
//!
//! Everything in `run/` that needs the run imports it from here; nothing
//! here imports the loop or what it drives.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::claims::ClaimStore;
use crate::claims::notice::{self, Notice};
use crate::claims::record::timestamp;
use crate::git::hub::Hub;
use crate::output::{Out, Style};
use crate::run::config::RunConfig;
use crate::run::event::Event;
use crate::run::journal::Journal;
use crate::run::limits::Limits;
use crate::run::usage::Usage;

/// How far a run has been asked to stop.
#[derive(Debug, Default)]
pub struct Stop(AtomicU8);

impl Stop {
    /// No new claims; running sessions finish.
    pub fn drain(&self) {
        let _ = self
            .0
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst);
    }
    /// Kill running sessions too.
    pub fn kill(&self) {
        self.0.store(2, Ordering::SeqCst);
    }
    pub fn draining(&self) -> bool {
        self.0.load(Ordering::SeqCst) >= 1
    }
    pub fn killing(&self) -> bool {
        self.0.load(Ordering::SeqCst) >= 2
    }
}

/// What every loop of one `farm run` shares: its configuration, as
/// resolved once ([`RunConfig`], never changed while it runs), and the run's
/// state — the hub and the claim store, the journal, what is spent, and the
/// counters the loops share.
pub struct Run {
    pub config: RunConfig,
    pub hub: Hub,
    pub store: Box<dyn ClaimStore>,
    /// How long a stopped session has after TERM before KILL.
    pub grace: Duration,
    pub state: PathBuf,
    pub stop: Stop,
    /// The agents of this run that `farm stop --agent`/`--role` asked to
    /// drain (the others go on).
    stopped: Mutex<BTreeSet<String>>,
    pub out: Out,
    /// The sandbox every session runs in (`None`: off).
    pub sandbox: Option<crate::run::sandbox::Sandbox>,
    /// Usage limits and API errors of the agent CLI: when every loop waits.
    pub(super) limits: Limits,
    /// Every session and notable event, for `farm status`.
    pub journal: Journal,
    /// What the sessions cost, as far as the CLI reported it.
    pub(super) spent: Mutex<Usage>,
    /// How many loops the breaker has paused (of `config.names.len()`).
    pub(super) tripped: AtomicUsize,
    /// The task of the last session of this run that did not start (see
    /// [`crate::run::classify::did_not_start`]), while no session since has started.
    pub(super) unstarted: Mutex<Option<crate::names::TaskId>>,
    pub(super) last_start: Mutex<Option<Instant>>,
    /// When this run began: what a clone holds from before is an earlier
    /// run's (see [`crate::run::asking::kept_in`]).
    pub(super) began: SystemTime,
    pub(super) started: AtomicUsize,
    /// How long the project's suite took when this run last ran it, in
    /// milliseconds (0: not yet): whether a merge queue elsewhere pays.
    pub(super) suite_ms: AtomicU64,
    /// This farm's changes in the line of a hub of this machine.
    pub(super) mates: crate::run::mates::Mates,
    wake: Arc<Wake>,
    /// Whether a file watcher wakes idle loops (else they poll faster).
    pub(super) watched: AtomicBool,
    /// Tells a person what needs them (`[notify]`), of every event the
    /// journal records and of what others send it.
    pub notifier: Arc<crate::run::notify::Notifier>,
}

/// What idle loops wait on: bumped by the hub watcher and by loops that
/// finished something, so that waiting loops look at the hub again.
#[derive(Default)]
struct Wake {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Wake {
    pub(super) fn bump(&self) {
        *self.generation.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.changed.notify_all();
    }
}

/// What one loop did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub sessions: usize,
    pub done: usize,
    pub failed: usize,
    pub rescued: usize,
}

impl Summary {
    /// Add what `other` counted.
    pub fn add(&mut self, other: &Summary) {
        self.sessions += other.sessions;
        self.done += other.done;
        self.failed += other.failed;
        self.rescued += other.rescued;
    }
}

/// How long an idle loop waits before looking again anyway.
const IDLE_MAX: Duration = Duration::from_secs(2);
/// The same for a hub elsewhere (with jitter), which is polled: each look
/// is two fetches.
const IDLE_REMOTE: Duration = Duration::from_secs(3);
/// How soon an idle loop on a hub elsewhere first asks whether its tips
/// moved (`git ls-remote`, no objects fetched), each wait after twice as
/// long, up to [`IDLE_LOOK_MAX`]: a change made just as the wait began is
/// seen at once, a quiet hub asked a few times a wait. (With only the look
/// after `IDLE_REMOTE`, a farm whose agents were idle ended up to 4.5 s
/// after the other's last landing, of a 25 s `daemon` bench.)
const IDLE_FIRST_LOOK: Duration = Duration::from_millis(250);
/// The longest an idle loop on a hub elsewhere goes between two looks at
/// its tips. (Doubling on, the last look of a wait came 1.75 s in, and a
/// move after it was seen only when the wait ended, up to `IDLE_REMOTE`
/// and its jitter later.)
const IDLE_LOOK_MAX: Duration = Duration::from_secs(1);

impl Run {
    /// A run of `config` on `hub`: its configuration, and fresh run state.
    pub fn new(
        hub: Hub,
        store: Box<dyn ClaimStore>,
        config: RunConfig,
        state: PathBuf,
        out: Out,
    ) -> Run {
        let journal = Journal::open(&state);
        let about = serde_json::Map::from_iter([
            ("hub".to_owned(), serde_json::json!(hub.url.as_str())),
            (
                "host".to_owned(),
                serde_json::json!(crate::claims::host::Here::current().host),
            ),
        ]);
        let notifier = Arc::new(crate::run::notify::Notifier::start(
            config.notify.clone(),
            &state.join("notify"),
            out,
            about,
        ));
        if notifier.on() {
            let told = Arc::clone(&notifier);
            let _ = journal.observe(Box::new(move |agent, event| told.observe(agent, event)));
        }
        Run {
            config,
            store,
            hub,
            grace: Duration::from_secs(10),
            state,
            stop: Stop::default(),
            stopped: Mutex::default(),
            out,
            sandbox: None,
            limits: Limits::default(),
            journal,
            spent: Mutex::default(),
            tripped: AtomicUsize::new(0),
            unstarted: Mutex::default(),
            last_start: Mutex::new(None),
            began: SystemTime::now(),
            started: AtomicUsize::new(0),
            suite_ms: AtomicU64::new(0),
            mates: Default::default(),
            wake: Arc::default(),
            watched: AtomicBool::new(false),
            notifier,
        }
    }

    /// The role of the agent `name`, if it has one.
    pub fn role_of(&self, name: &str) -> Option<&str> {
        self.config.roles.get(name).map(|r| r.name.as_str())
    }

    /// Drain the agent `name` alone; whether it was not draining already.
    pub fn stop_agent(&self, name: &str) -> bool {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned())
    }

    /// Is the agent `name` to claim nothing new and end: the run drains,
    /// or a stop was asked of it alone?
    pub(super) fn draining(&self, name: &str) -> bool {
        self.stop.draining()
            || self
                .stopped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(name)
    }

    /// The `farm pause` that holds the agent `name`, if one does, as the
    /// hub has it (`fresh`), or as the store last saw it.
    pub(super) fn pause_of(
        &self,
        name: &str,
        fresh: bool,
    ) -> Result<Option<Notice>, crate::error::Error> {
        let notices = self.store.notices(fresh)?;
        Ok(notice::pause_of(&notices, name, self.role_of(name)).cloned())
    }

    /// A line of `agent`'s.
    pub(super) fn say(&self, agent: &str, what: &str) {
        self.say_tone(agent, None, what);
    }

    /// A line of `agent`'s in `tone`: a task done, a failure, or something
    /// to keep an eye on (see [`Event::tone`]).
    pub(super) fn say_tone(&self, agent: &str, tone: impl Into<Option<Style>>, what: &str) {
        self.out
            .note_styled(tone.into(), &format!("{agent}: {what}"));
    }

    /// Journal `event` of `agent` ("" for the run itself), and say its line
    /// in its tone, if it has one; the run itself speaks as `farm run`.
    pub fn tell(&self, agent: &str, event: &Event<'_>) {
        self.journal.record(agent, event);
        if let Some(line) = event.line() {
            let who = if agent.is_empty() { "farm run" } else { agent };
            self.say_tone(who, event.tone(), &line);
        }
    }

    /// A line for `-v` only: the steps between the ones a run always says
    /// (the session's command, why an agent waits, what it rebased onto,
    /// how long a push took).
    pub(super) fn detail(&self, agent: &str, what: &str) {
        self.out.debug(&format!("{agent}: {what}"));
    }

    /// A session on `id` did not start: what that means, given the last
    /// session of the run that did not start either. Two different tasks in
    /// a row is an agent that cannot start (a setup error, not a
    /// failed task); the same task again is that task's failure.
    pub(super) fn not_started(&self, id: &crate::names::TaskId) -> Unstarted {
        let mut last = self.unstarted.lock().unwrap_or_else(|e| e.into_inner());
        match last.replace(id.clone()) {
            None => Unstarted::First,
            Some(before) if before == *id => Unstarted::Again,
            Some(before) => Unstarted::Elsewhere(before),
        }
    }

    /// A session started: the agent can start.
    pub(super) fn started(&self) {
        *self.unstarted.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Add a session's cost to the run's.
    pub(super) fn spend(&self, u: &Usage) {
        let mut total = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        let add_f = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        total.cost_usd = add_f(total.cost_usd, u.cost_usd);
        total.input_tokens = add(total.input_tokens, u.input_tokens);
        total.output_tokens = add(total.output_tokens, u.output_tokens);
    }

    /// What the run's sessions cost so far, as reported.
    /// The cost reported so far and the budget, once the budget is spent.
    pub(super) fn over_budget(&self) -> Option<(f64, f64)> {
        let max = self.config.max_cost?;
        let spent = self.spent().cost_usd?;
        (spent >= max).then_some((spent, max))
    }

    pub fn spent(&self) -> Usage {
        *self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for this session's turn to start: `stagger` after the last one,
    /// so that CLIs which rewrite a shared config file at start-up are not
    /// launched in the same instant.
    pub(super) fn stagger_start(&self) {
        let mut last = self.last_start.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = *last {
            let next = at + self.config.stagger;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
        *last = Some(Instant::now());
    }

    /// Sleep up to `d`, waking early when a stop is asked.
    pub(super) fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stop.draining() {
            let now = Instant::now();
            if now >= until {
                return;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(200)));
        }
    }

    /// A new session's log and prompt file: `logs/<agent>/<label>-<time>.log`
    /// and `prompts/<agent>/<label>-<time>.md` under the state directory.
    pub(super) fn session_files(&self, agent: &str, label: &str) -> (PathBuf, PathBuf) {
        let stamp: String = timestamp(SystemTime::now())
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        (
            self.state
                .join("logs")
                .join(agent)
                .join(format!("{label}-{stamp}.log")),
            self.state
                .join("prompts")
                .join(agent)
                .join(format!("{label}-{stamp}.md")),
        )
    }

    /// Take one of `--max-sessions`, if any are left.
    pub(super) fn reserve_session(&self) -> bool {
        let max = self.config.max_sessions.unwrap_or(usize::MAX);
        self.started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    pub(super) fn unreserve_session(&self) {
        self.started.fetch_sub(1, Ordering::SeqCst);
    }

    pub(super) fn sessions_left(&self) -> bool {
        self.config
            .max_sessions
            .is_none_or(|max| self.started.load(Ordering::SeqCst) < max)
    }

    /// Tell idle loops of this process to look again.
    pub fn wake_all(&self) {
        self.wake.bump();
    }

    /// Watch the hub's refs and claims, waking idle loops on any change.
    /// Keep the returned watcher alive for the run; `None` when the OS
    /// refuses (inotify limits), and idle loops then poll.
    pub fn watch_hub(&self) -> Option<notify::RecommendedWatcher> {
        use notify::{RecursiveMode, Watcher};
        let local = self.hub.local.as_ref()?;
        let wake = Arc::clone(&self.wake);
        let mut watcher =
            notify::recommended_watcher(move |_: notify::Result<notify::Event>| wake.bump())
                .ok()?;
        let claims = local.dir.join(crate::names::CLAIMS_DIR);
        let _ = std::fs::create_dir(&claims);
        let watched = [
            (local.git_dir.join("refs/heads"), RecursiveMode::Recursive),
            (local.git_dir.clone(), RecursiveMode::NonRecursive),
            (claims, RecursiveMode::NonRecursive),
        ]
        .into_iter()
        .all(|(path, mode)| watcher.watch(&path, mode).is_ok());
        self.watched.store(watched, Ordering::SeqCst);
        watched.then_some(watcher)
    }

    /// Wait until the hub's branch or its claims change (as the fingerprint
    /// sees it), a stop is asked, or `IDLE_MAX` passes. Watcher events and
    /// other loops only wake the wait; it ends on a real change, so idle
    /// agents do not rescan for every heartbeat or lock file the hub sees.
    /// A hub elsewhere cannot be watched: the wait ends when another loop of
    /// this process finished something, its branch or claims moved (asked
    /// after `IDLE_FIRST_LOOK`, then less and less often), or after
    /// `IDLE_REMOTE`. Moved since `tips`: the tips a wait before saw, the
    /// board read since — else those as this wait begins, which may come
    /// after a landing the board was read before (an idle farm then ended
    /// up to 4 s after the other's last landing, in `daemon` bench rounds
    /// of 15 s). `tips` is left with the tips this wait saw last.
    pub(super) fn wait_for_change(&self, since: &[Option<SystemTime>], tips: &mut Option<String>) {
        let poll = if self.watched.load(Ordering::SeqCst) {
            Duration::from_millis(500)
        } else {
            Duration::from_millis(50)
        };
        let remote = self.hub.local.is_none();
        let until = Instant::now()
            + if remote {
                crate::git::retry::jitter(IDLE_REMOTE)
            } else {
                IDLE_MAX
            };
        let lock = || {
            self.wake
                .generation
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        let generation = *lock();
        if remote && tips.is_none() {
            *tips = self.hub.remote_tips();
        }
        let mut guard = lock();
        let mut every = IDLE_FIRST_LOOK;
        let mut look = Instant::now() + every;
        while Instant::now() < until && !self.stop.draining() {
            if self.hub.fingerprint() != since || (remote && *guard != generation) {
                return;
            }
            if remote && Instant::now() >= look {
                // (Not holding the lock others wake this wait through.)
                drop(guard);
                let now = self.hub.remote_tips();
                if tips.is_some() && now.is_some() && *tips != now {
                    *tips = now;
                    return;
                }
                if tips.is_none() {
                    *tips = now;
                }
                every = (every * 2).min(IDLE_LOOK_MAX);
                look = Instant::now() + every;
                guard = lock();
                continue;
            }
            guard = self
                .wake
                .changed
                .wait_timeout(guard, poll)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// What a session that did not start means (see [`Run::not_started`]).
pub(super) enum Unstarted {
    /// The first in a row.
    First,
    /// The last one was on this task too.
    Again,
    /// The last one was on this other task.
    Elsewhere(crate::names::TaskId),
}
