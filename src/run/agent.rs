//! One agent's loop: the protocol of the design notes, read top to bottom.
//!
//! # Theory of operation
//!
//! Each agent has a name and two private clones under the state directory,
//! reused across sessions (see step 5). One turn of its loop:
//!
//! 1. reap dead claims (and claims stale past `--stale-after`);
//! 2. read the board — from the hub's own work tree when it has the branch
//!    checked out (no git process), else from the clone reset to the branch
//!    — and pick the best ready, unclaimed task; claim it (fs store, with this
//!    process as holder). A lost race is not a wait: scan again at once.
//!    Nothing ready: wait for the hub to change, or end when the board is
//!    settled (confirmed on the branch itself);
//! 3. reset the clone to the branch — every session starts clean — and read
//!    the task there: if it was finished meanwhile, or waits for a task not
//!    done on the branch yet, release and scan again;
//! 4. render the prompt and run one fresh session in the clone, heartbeating
//!    the claim while it runs;
//! 5. integrate: commit what the agent left together with the move to
//!    `tasks/done/`, rebase onto the hub's branch (merge on conflict, with a
//!    merge session for the conflicted files), push under the hub's push
//!    lock — a rejected push means catch up and push again. Before each push
//!    the claim must still be ours. After a successful session this goes on
//!    beside the loop, in the clone the session used, while the loop takes
//!    the next task in the agent's other clone (see [`turns`]);
//! 6. on failure, the work goes to `farm/rescue/<task>/<nonce>` on the hub
//!    and the attempt is recorded in the task file (to `tasks/failed/` when
//!    attempts run out);
//! 7. release the claim.
//!
//! Nothing an agent committed is lost: it lands on the branch or on a rescue
//! branch, and no push is ever forced.
//!
//! Every path makes progress or counts (MUST 13): a session ends in work
//! landed, an attempt counted, a wait that lifts (a usage limit, the
//! breaker, a hub work tree with changes of its own), or the run stopped.
//! What could otherwise spin for ever:
//! - a claim gone with nobody holding the task after (removed — by the
//!   session itself, through `FARM_CLAIM`, as often as not) is a failed
//!   attempt, counted under the claim taken again ([`retake`]); a claim
//!   taken over by another holder counts nothing, but the same agent losing
//!   one task that way twice leaves it to the others;
//! - a session that did not start counts nothing, and a second one in a
//!   row, on another task, stops the run as a setup error;
//! - a session that rewrote the history it started on is a failed attempt:
//!   its work is rescued, never rebased into the branch;
//! - a task already out of attempts goes to `tasks/failed/` unrun.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::board::{self, Task};
use serde_json::json;

use crate::claims::host::{self, Here};
use crate::claims::liveness::Judge;
use crate::claims::record::{Claim, Holder, Nonce, timestamp};
use crate::claims::{Attempt, ClaimStore, Held, Listed, Published, Reap, StoreError};
use crate::error::Error;
use crate::git::hub::Hub;
use crate::output::Out;
use crate::run::classify::{self, Class};
use crate::run::clone::{PrivateClone, ensure_newline, io_error};
use crate::run::journal::Journal;
use crate::run::limits::Limits;
use crate::run::prompt;
use crate::run::session::{self, Outcome, PromptVia, Tick};
use crate::run::usage::{self, Usage};

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

/// What every loop of one `farm run` shares.
pub struct Run {
    pub hub: Hub,
    pub store: Box<dyn ClaimStore>,
    pub argv: Vec<String>,
    pub via: PromptVia,
    pub timeout: Duration,
    pub grace: Duration,
    pub stale_after: Duration,
    pub heartbeat: Duration,
    pub state: PathBuf,
    pub max_sessions: Option<usize>,
    pub once: bool,
    pub watch: bool,
    pub stop: Stop,
    pub out: Out,
    /// Usage limits and API errors of the agent CLI: when every loop waits.
    limits: Limits,
    /// Every session and notable event, for `farm status`.
    pub journal: Journal,
    /// What the sessions cost, as far as the CLI reported it.
    spent: Mutex<Usage>,
    /// `--wrap`: the words every session runs inside; empty for none.
    pub wrap: Vec<String>,
    /// `--until`: no new claims after this.
    pub until: Option<SystemTime>,
    /// The circuit breaker: failed sessions in a row (0: never) before an
    /// agent pauses, and its first pause (doubling on each trip).
    pub trip_after: u32,
    pub trip_pause: Duration,
    /// At least this long between two session starts of this run.
    pub stagger: Duration,
    /// A config directory of its own for each agent (`--config-per-agent`).
    pub agent_config: Option<AgentConfig>,
    /// The agent CLI's own words for limits and errors (its preset's).
    pub patterns: classify::Patterns,
    /// How many loops the run has, and how many the breaker has paused.
    pub loops: usize,
    tripped: AtomicUsize,
    /// The task of the last session of this run that did not start (see
    /// [`classify::did_not_start`]), while no session since has started.
    unstarted: Mutex<Option<crate::names::TaskId>>,
    last_start: Mutex<Option<Instant>>,
    started: AtomicUsize,
    wake: Arc<Wake>,
    /// Whether a file watcher wakes idle loops (else they poll faster).
    watched: std::sync::atomic::AtomicBool,
}

/// `--config-per-agent`: each agent's CLI gets a config directory of its
/// own through `var` (`CLAUDE_CONFIG_DIR`, say), made on first use under the
/// state directory (`config/<agent>/`) and seeded with copies of the user's
/// own config files (`seed`), so that parallel starts never rewrite one
/// shared file.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub var: &'static str,
    pub seed: Vec<PathBuf>,
}

impl AgentConfig {
    /// `agent`'s directory, made and seeded the first time.
    fn dir_for(&self, state: &Path, agent: &str) -> Result<PathBuf, Error> {
        let dir = state.join("config").join(agent);
        if dir.is_dir() {
            return Ok(dir);
        }
        let fail =
            |e: std::io::Error| Error::failure(format!("cannot make `{}`: {e}", dir.display()));
        let tmp = state.join("config").join(format!(".{agent}.tmp"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(fail)?;
        for file in &self.seed {
            if let (true, Some(name)) = (file.is_file(), file.file_name()) {
                std::fs::copy(file, tmp.join(name)).map_err(fail)?;
            }
        }
        // Whole or not at all: a crash mid-seed leaves only the temp dir.
        std::fs::rename(&tmp, &dir).map_err(fail)?;
        Ok(dir)
    }
}

/// What idle loops wait on: bumped by the hub watcher and by loops that
/// finished something, so that waiting loops look at the hub again.
#[derive(Default)]
struct Wake {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Wake {
    fn bump(&self) {
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

/// The circuit breaker's longest pause.
const TRIP_LONGEST: Duration = Duration::from_secs(30 * 60);

/// How long an idle loop waits before looking again anyway.
const IDLE_MAX: Duration = Duration::from_secs(2);
/// The same for a hub elsewhere (with jitter), which is polled: each look
/// is two fetches.
const IDLE_REMOTE: Duration = Duration::from_secs(3);
/// Fetch–integrate–push rounds before giving the work to a rescue branch.
/// A hub elsewhere gets more: it has no push lock to take turns at, so
/// agents take turns by backing off (see [`after_rejection`]).
const PUSH_ROUNDS: usize = 20;
const PUSH_ROUNDS_REMOTE: usize = 60;

fn push_rounds(run: &Run) -> usize {
    if run.hub.local.is_some() {
        PUSH_ROUNDS
    } else {
        PUSH_ROUNDS_REMOTE
    }
}

/// After a push lost to another: wait a random while, longer each round, so
/// that agents pushing to a hub elsewhere (which has no push lock) spread
/// out instead of colliding again.
fn after_rejection(run: &Run, round: usize) {
    if run.hub.local.is_none() {
        let wait = Duration::from_millis(50 << round.min(5));
        std::thread::sleep(crate::git::retry::jitter(wait));
    }
}

impl Run {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        hub: Hub,
        store: Box<dyn ClaimStore>,
        argv: Vec<String>,
        via: PromptVia,
        timeout: Duration,
        stale_after: Duration,
        heartbeat: Duration,
        state: PathBuf,
        max_sessions: Option<usize>,
        once: bool,
        watch: bool,
        out: Out,
    ) -> Run {
        let journal = Journal::open(&state);
        Run {
            store,
            hub,
            argv,
            via,
            timeout,
            grace: Duration::from_secs(10),
            heartbeat,
            stale_after,
            state,
            max_sessions,
            once,
            watch,
            stop: Stop::default(),
            out,
            limits: Limits::default(),
            journal,
            spent: Mutex::default(),
            wrap: Vec::new(),
            until: None,
            trip_after: 0,
            trip_pause: Duration::from_secs(60),
            stagger: Duration::ZERO,
            agent_config: None,
            patterns: classify::Patterns::default(),
            loops: 1,
            tripped: AtomicUsize::new(0),
            unstarted: Mutex::default(),
            last_start: Mutex::new(None),
            started: AtomicUsize::new(0),
            wake: Arc::default(),
            watched: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn say(&self, agent: &str, what: &str) {
        self.out.note(&format!("{agent}: {what}"));
    }

    /// A session on `id` did not start: what that means, given the last
    /// session of the run that did not start either. Two different tasks in
    /// a row is an agent that cannot start (MUST 13: a setup error, not a
    /// failed task); the same task again is that task's failure.
    fn not_started(&self, id: &crate::names::TaskId) -> Unstarted {
        let mut last = self.unstarted.lock().unwrap_or_else(|e| e.into_inner());
        match last.replace(id.clone()) {
            None => Unstarted::First,
            Some(before) if before == *id => Unstarted::Again,
            Some(before) => Unstarted::Elsewhere(before),
        }
    }

    /// A session started: the agent can start.
    fn started(&self) {
        *self.unstarted.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Add a session's cost to the run's.
    fn spend(&self, u: &Usage) {
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
    pub fn spent(&self) -> Usage {
        *self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for this session's turn to start: `stagger` after the last one,
    /// so that CLIs which rewrite a shared config file at start-up are not
    /// launched in the same instant.
    fn stagger_start(&self) {
        let mut last = self.last_start.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = *last {
            let next = at + self.stagger;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
        *last = Some(Instant::now());
    }

    /// Sleep up to `d`, waking early when a stop is asked.
    fn pause(&self, d: Duration) {
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
    fn session_files(&self, agent: &str, label: &str) -> (PathBuf, PathBuf) {
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
    fn reserve_session(&self) -> bool {
        let max = self.max_sessions.unwrap_or(usize::MAX);
        self.started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn unreserve_session(&self) {
        self.started.fetch_sub(1, Ordering::SeqCst);
    }

    fn sessions_left(&self) -> bool {
        self.max_sessions
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
    /// this process finished something, or after `IDLE_REMOTE`.
    fn wait_for_change(&self, since: &[Option<SystemTime>]) {
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
        let mut guard = self
            .wake
            .generation
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let generation = *guard;
        while Instant::now() < until && !self.stop.draining() {
            if self.hub.fingerprint() != since || (remote && *guard != generation) {
                return;
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

/// Run one agent's loop until the board is settled, a stop is asked, or
/// `--once`/`--max-sessions` says so, counting what it did in `summary`.
pub fn run_loop(run: &Run, name: &str, summary: &mut Summary) -> Result<(), Error> {
    // One of farm's git commands killed by a signal (the OOM killer, a
    // user) ends the turns, every claim released and the work rescued, but
    // not the run: the turns start again, reopening the clones, whose
    // recovery makes good what the command left. A few times at most: a git
    // that is killed again and again is for the user to see.
    let mut restarts = 0;
    loop {
        match turns_settled(run, name, summary) {
            Err(e) if e.git_killed && restarts < GIT_KILLED_RESTARTS && !run.stop.draining() => {
                restarts += 1;
                run.say(name, &format!("{e}; reopening its clone and going on"));
                run.journal
                    .log(name, "git_killed", json!({"error": e.message}));
            }
            other => return other,
        }
    }
}

/// How often one agent's loop starts again after a git of farm's was killed.
const GIT_KILLED_RESTARTS: u32 = 3;

/// The turns, and the integration left beside them when they ended.
fn turns_settled(run: &Run, name: &str, summary: &mut Summary) -> Result<(), Error> {
    let slot = Slot::default();
    std::thread::scope(|scope| {
        let mut beside = None;
        let result = turns(run, name, summary, &slot, scope, &mut beside);
        // Whatever ended the loop, the integration beside it is finished
        // and counted (it released its claim itself).
        let rest = match beside {
            // Counted by a tally of its own: the loop has ended, so nothing
            // is picked, and no breaker pause is waited out.
            Some(b) => join(b)
                .and_then(|(_, id, end)| Tally::default().count(run, name, &id, end, summary)),
            None => Ok(()),
        };
        result.and(rest)
    })
}

/// An integration going on beside the loop: its clone, task and end.
type Beside<'scope> =
    std::thread::ScopedJoinHandle<'scope, (PrivateClone, crate::names::TaskId, Result<End, Error>)>;

fn join(b: Beside<'_>) -> Result<(PrivateClone, crate::names::TaskId, End), Error> {
    let (clone, id, end) = b.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
    end.map(|end| (clone, id, end))
}

/// The turns of one agent's loop. A session that did its task leaves its
/// integration (rebase, push, release — merge sessions too, taking turns
/// with the loop's sessions for the agent's [`Slot`]) to a thread beside the
/// loop, in the clone the session used, while the loop claims the next
/// task and runs it in a second clone: the agent waits for no push. At most
/// one integration goes on beside the loop; it is joined before the next.
fn turns<'scope, 'env: 'scope>(
    run: &'env Run,
    name: &'env str,
    summary: &mut Summary,
    slot: &'env Slot,
    scope: &'scope std::thread::Scope<'scope, 'env>,
    beside: &mut Option<Beside<'scope>>,
) -> Result<(), Error> {
    // The agent's clones: the one in use, and the other — made when first
    // needed, then busy with an integration, or free. One that exists is
    // opened now: an earlier farm killed mid-integration left its work
    // there, and opening a clone rescues that.
    let second = format!("{name}@2");
    let open = |dir: &str| PrivateClone::prepare(&run.state, &run.hub, name, dir, run.out);
    let mut clones = [
        Some(open(name)?),
        match run.state.join("clones").join(&second).is_dir() {
            true => Some(open(&second)?),
            false => None,
        },
    ];
    // What an earlier run left in them and opening them rescued counts.
    for branch in clones.iter().flatten().flat_map(PrivateClone::rescued) {
        summary.rescued += 1;
        let why = "an earlier run left commits in this clone";
        run.journal
            .log(name, "rescue", json!({"branch": branch, "why": why}));
    }
    let mut at = 0;
    let mut tally = Tally::default();
    // The task of the integration beside the loop, while there is one.
    let mut beside_task: Option<crate::names::TaskId> = None;
    // The hub's work tree said a task was ready that the branch does not
    // have pending (an uncommitted draft, say): read the board from the
    // branch until the hub changes, instead of claiming it again and again.
    // Keyed by the branch's commit: only a push can make the work tree and
    // the branch agree again (claims coming and going do not).
    let mut distrust_worktree: Option<Option<String>> = None;
    let mut board_cache = board::Cache::default();
    while !run.stop.draining() && run.sessions_left() {
        // The agent CLI hit its limit: nobody claims until it lifts.
        run.limits
            .wait(&|l| run.say(name, l), &|| !run.stop.draining());
        if run.stop.draining() {
            break;
        }
        if run.until.is_some_and(|u| SystemTime::now() >= u) {
            run.say(name, "past --until: no new claims");
            break;
        }
        // An integration beside that has ended is counted now: until then
        // its task is not picked again (its claim may be gone while the
        // integration goes on — removed by its session, say).
        if beside.as_ref().is_some_and(|b| b.is_finished()) {
            let (free, id, end) = join(beside.take().expect("it is there"))?;
            clones[1 - at] = Some(free);
            tally.count(run, name, &id, end, summary)?;
        }
        let in_flight = beside.as_ref().and(beside_task.as_ref());
        let clone = clones[at].as_ref().expect("the clone in use is there");
        let claims = reap(run, name)?;
        let seen = run.hub.fingerprint();
        if distrust_worktree
            .as_ref()
            .is_some_and(|at| *at != run.hub.branch_rev())
        {
            distrust_worktree = None;
        }
        // Choosing needs only a recent board. A hub whose work tree has the
        // branch checked out holds it as pushed, readable with no git
        // process at all; otherwise the clone is reset to the branch. The
        // choice is checked against the branch itself after claiming.
        // Read from the commit's tree, through the cache: a turn costs what
        // changed on the board, not its size (issue 11).
        let (board_dir, rev) = if let Some(dir) = run
            .hub
            .checked_out()
            .filter(|_| distrust_worktree.is_none())
        {
            (dir.to_path_buf(), run.hub.branch_rev())
        } else {
            let rev = clone.sync(&run.hub)?;
            (clone.dir().to_path_buf(), Some(rev))
        };
        let cannot = |e: &dyn std::fmt::Display| {
            Error::failure(format!(
                "cannot read the board in `{}`: {e}",
                board_dir.display()
            ))
        };
        let mut snapshot = match &rev {
            Some(rev) => board_cache.read(&board_dir, rev).map_err(|e| cannot(&e))?,
            None => board::load(&board_dir).map_err(|e| cannot(&e))?,
        };
        snapshot.claimed = crate::claims::holders(&claims);
        let Some(task) = tally.pick(&snapshot, in_flight) else {
            let not_in_flight = in_flight.into_iter().cloned().collect();
            if let Some(left) = board::next(&snapshot, &not_in_flight) {
                // Only tasks this agent lost to others again and again are
                // ready: waiting for them would be waiting for ever.
                run.say(
                    name,
                    &format!(
                        "`{}`: its claim was taken over twice; leaving it to the others",
                        left.id
                    ),
                );
                break;
            }
            if board::settled(&snapshot) && !run.watch {
                // Ending is final: confirm on the branch itself, not on a
                // work tree that a push may be rewriting this very moment.
                if board_dir == clone.dir() {
                    break;
                }
                clone.sync(&run.hub)?;
                let mut confirmed =
                    board::load(clone.dir()).map_err(|e| Error::failure(e.to_string()))?;
                confirmed.claimed = std::mem::take(&mut snapshot.claimed);
                if board::settled(&confirmed) {
                    break;
                }
                continue;
            }
            run.wait_for_change(&seen);
            continue;
        };
        // The breaker pauses before the next claim, not after the failure
        // that tripped it: a run whose last task just failed ends at once.
        if tally.pause_if_due(run, name) {
            continue; // the board moved on meanwhile
        }
        if !run.reserve_session() {
            break;
        }
        let holder = host::own_start().map(|start| Holder {
            pid: std::process::id(),
            start,
        });
        let claim = Claim::new(
            task.id.clone(),
            name,
            holder,
            task.attempts + 1,
            SystemTime::now(),
        );
        let held = match run.store.try_claim(claim, true) {
            Ok(Attempt::Won(held)) => held,
            // A task whose claim kept changing under us (other agents
            // claiming around it) is a lost race too.
            Ok(Attempt::Lost(_)) | Err(StoreError::Busy { .. }) => {
                run.unreserve_session();
                run.journal
                    .log(name, "lost_race", json!({"task": task.id.as_str()}));
                run.say(
                    name,
                    &format!("lost the race for `{}`; looking again", task.id),
                );
                continue;
            }
            Err(e) => {
                run.unreserve_session();
                return Err(e.into());
            }
        };
        // The board was read before the claim was won, and the task may have
        // been finished in between (pushed to done, then released). Holders
        // push before they release, so a fetch now shows it: look again.
        let fresh = match clone.fresh_task(&run.hub, &task.id) {
            Ok(fresh) => fresh,
            Err(e) => {
                // Never leave a claim behind on the way out: this process
                // lives on (other loops), so the claim would read as alive.
                let _ = run.store.release_held(held);
                return Err(e);
            }
        };
        let Some(task) = fresh else {
            run.store.release_held(held)?;
            run.unreserve_session();
            run.say(
                name,
                &format!("`{}` is not ready on the branch; looking again", task.id),
            );
            distrust_worktree = Some(run.hub.branch_rev());
            continue;
        };
        // Out of attempts already (its front matter edited by hand, say):
        // no session is an "attempt 6 of 3"; the task goes to tasks/failed/.
        if task.attempts >= task.max_attempts {
            run.unreserve_session();
            let retired = retire(run, clone, name, &task, &held);
            match run.store.release_held(held) {
                Ok(()) | Err(StoreError::Lost { .. }) => {}
                Err(e) => {
                    retired?;
                    return Err(e.into());
                }
            }
            retired?;
            run.wake_all();
            continue;
        }
        summary.sessions += 1;
        let ran = {
            let _turn = slot.take();
            session(run, clone, name, &task, &held)
        };
        if ran.as_ref().is_ok_and(Ran::succeeded) {
            run.limits.ok();
            // This integration starts before the one beside is joined: an
            // error there must not leave this claim unsettled.
            let before = beside.take();
            let mine = clones[at].take().expect("the clone in use is there");
            beside_task = Some(task.id.clone());
            *beside = Some(scope.spawn(move || {
                let end = work(run, &mine, name, &task, held, slot, ran);
                run.wake_all();
                (mine, task.id, end)
            }));
            at = 1 - at;
            if let Some(before) = before {
                let (free, id, end) = join(before)?;
                clones[at] = Some(free);
                tally.count(run, name, &id, end, summary)?;
            }
            if clones[at].is_none() {
                clones[at] = Some(open(&second)?);
            }
        } else {
            let end = work(run, clone, name, &task, held, slot, ran);
            run.wake_all();
            let end = end?;
            if !matches!(end, End::Limited { .. }) {
                run.limits.ok();
            }
            tally.count(run, name, &task.id, end, summary)?;
        }
        if run.once {
            break;
        }
    }
    Ok(())
}

/// What the loop keeps of the tasks it settled: the circuit breaker's
/// count of failed sessions in a row, how often it tripped and whether a
/// pause is due; the tasks it lost its claim on, and which to leave alone.
#[derive(Default)]
struct Tally {
    fails: u32,
    trips: u32,
    /// The breaker tripped: pause before the next claim.
    pause_due: bool,
    /// Claims on a task taken over by another holder while this agent
    /// worked on it, per task.
    lost: HashMap<crate::names::TaskId, u32>,
    /// Tasks this agent claims no more in this run: taken over again and
    /// again, it would otherwise run sessions on them that count nothing.
    skip: HashSet<crate::names::TaskId>,
    /// A task whose session did not start: the next pick tries another one
    /// first, so that an agent that cannot start shows on two tasks.
    skip_once: Option<crate::names::TaskId>,
}

impl Tally {
    /// The next task for this agent, if any: not one it leaves alone, nor
    /// the one that just did not start while another is ready.
    /// (Nor `in_flight`, the task of the integration beside the loop.)
    fn pick(
        &mut self,
        snapshot: &board::Snapshot,
        in_flight: Option<&crate::names::TaskId>,
    ) -> Option<Task> {
        let mut skip = self.skip.clone();
        skip.extend(in_flight.cloned());
        let mut first = skip.clone();
        first.extend(self.skip_once.iter().cloned());
        let task = board::next(snapshot, &first)
            .or_else(|| board::next(snapshot, &skip))
            .cloned();
        if task.is_some() {
            self.skip_once = None;
        }
        task
    }

    /// Count how task `id` ended in `summary`; arm the breaker, wait out a
    /// usage limit, or stop the run, as the end says.
    fn count(
        &mut self,
        run: &Run,
        name: &str,
        id: &crate::names::TaskId,
        end: End,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        match end {
            End::Done => {
                summary.done += 1;
                (self.fails, self.trips, self.pause_due) = (0, 0, false);
            }
            End::Failed { rescued } => {
                summary.failed += 1;
                summary.rescued += usize::from(rescued);
                self.fails += 1;
                if run.trip_after > 0 && self.fails >= run.trip_after {
                    self.pause_due = true;
                }
            }
            End::Rescued { rescued } => summary.rescued += usize::from(rescued),
            End::Lost { rescued } => {
                summary.rescued += usize::from(rescued);
                // Taken over once is the protocol at work (a reaper judged
                // this agent dead); twice by the same agent is a loop that
                // would spin without counting anything.
                let times = self.lost.entry(id.clone()).or_default();
                *times += 1;
                if *times >= 2 && self.skip.insert(id.clone()) {
                    run.say(
                        name,
                        &format!(
                            "`{id}`: its claim was taken over {times} times; this agent claims it no more"
                        ),
                    );
                    run.journal.log(
                        name,
                        "skip",
                        json!({"task": id.as_str(), "why": "claim taken over again"}),
                    );
                }
            }
            End::Unstarted { rescued } => {
                summary.rescued += usize::from(rescued);
                self.skip_once = Some(id.clone());
            }
            End::Limited {
                reset,
                transient,
                rescued,
            } => {
                summary.rescued += usize::from(rescued);
                // Not an attempt, and not one of --max-sessions either.
                run.unreserve_session();
                let now = SystemTime::now();
                let until = run.limits.hit(reset, transient, now);
                let what = if transient {
                    "the agent CLI's API failed"
                } else {
                    "the agent CLI hit its usage limit"
                };
                let when = if reset.is_some() {
                    "as it said"
                } else {
                    "backing off"
                };
                run.journal.log(
                    name,
                    "limit",
                    json!({
                        "task": id.as_str(),
                        "until": timestamp(until),
                        "why": if transient { "api error" } else { "usage limit" },
                    }),
                );
                run.say(
                    name,
                    &format!(
                        "`{}`: {what}; no attempt counted; all agents wait {} ({when})",
                        id,
                        crate::age::Age(until.duration_since(now).unwrap_or_default())
                    ),
                );
            }
            End::Fatal { why, rescued } => {
                summary.rescued += usize::from(rescued);
                run.stop.drain();
                run.wake_all();
                return Err(
                    Error::usage(format!("`{}` cannot work: {why}", run.argv[0])).hint(format!(
                        "run it by hand once to fix its setup (`{}`), then farm run again",
                        run.argv.join(" ")
                    )),
                );
            }
        }
        Ok(())
    }

    /// Pause if the breaker tripped; whether it paused. Half open after the
    /// pause: one more failure trips it again, for twice as long.
    fn pause_if_due(&mut self, run: &Run, name: &str) -> bool {
        if !std::mem::take(&mut self.pause_due) {
            return false;
        }
        let pause = crate::git::retry::jitter(
            run.trip_pause
                .saturating_mul(1 << self.trips.min(10))
                .min(TRIP_LONGEST),
        );
        run.say(
            name,
            &format!(
                "{} failed sessions in a row and nothing done; pausing {} (circuit breaker)",
                self.fails,
                crate::age::Age(pause)
            ),
        );
        run.journal.log(
            name,
            "trip",
            json!({
                "until": timestamp(SystemTime::now() + pause),
                "why": format!("{} failed sessions in a row", self.fails),
            }),
        );
        if run.tripped.fetch_add(1, Ordering::SeqCst) + 1 == run.loops {
            run.out.note(&format!(
                "farm run: all {} agents tripped the circuit breaker: the run pauses",
                run.loops
            ));
        }
        run.pause(pause);
        run.tripped.fetch_sub(1, Ordering::SeqCst);
        self.fails = run.trip_after - 1;
        self.trips += 1;
        true
    }
}

/// Take back dead claims, and claims stale past the run's threshold; the
/// claims that remain, for choosing the next task (one listing, not two).
fn reap(run: &Run, name: &str) -> Result<Vec<Listed>, Error> {
    let judge = Judge {
        here: Here::current(),
        now: SystemTime::now(),
        stale_after: Some(run.stale_after),
        probe: &host::process_start,
    };
    let mut kept = Vec::new();
    for entry in run.store.list()? {
        let judged = entry.judge(&judge);
        if judged.reapable
            && let Ok(Reap::Reaped { verdict, .. }) = run.store.reap(&entry, &judge)
        {
            run.say(
                name,
                &format!(
                    "reaped `{}`: {}: {}",
                    entry.name, verdict.state, verdict.reason
                ),
            );
            run.journal.log(
                name,
                "reap",
                json!({"task": entry.name, "why": format!("{}: {}", verdict.state, verdict.reason)}),
            );
        } else {
            say_corrupt_once(run, name, &entry, &judged);
            kept.push(entry);
        }
    }
    Ok(kept)
}

/// Say once per run (per file) that a task waits on a corrupt claim, which
/// would otherwise keep it waiting in silence until the claim is old enough
/// to reap (issue 10, item 6).
fn say_corrupt_once(
    run: &Run,
    name: &str,
    entry: &Listed,
    verdict: &crate::claims::liveness::Verdict,
) {
    static SAID: Mutex<std::collections::BTreeSet<(String, u64)>> =
        Mutex::new(std::collections::BTreeSet::new());
    let Some(note) = crate::claims::liveness::waiting_on(&entry.name, verdict, run.stale_after)
    else {
        return;
    };
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.insert((entry.name.clone(), entry.identity)) {
        run.say(name, &note);
    }
}

/// What a session that did not start means (see [`Run::not_started`]).
enum Unstarted {
    /// The first in a row.
    First,
    /// The last one was on this task too.
    Again,
    /// The last one was on this other task.
    Elsewhere(crate::names::TaskId),
}

/// How one claimed task ended.
enum End {
    Done,
    Failed {
        rescued: bool,
    },
    /// The run was killed: work rescued (if any), no attempt counted.
    Rescued {
        rescued: bool,
    },
    /// The claim was taken over by another holder: work rescued (if any),
    /// no attempt counted, not released. (A claim removed with nobody
    /// holding the task after is a failed attempt: see [`retake`].)
    Lost {
        rescued: bool,
    },
    /// The session did not start, for the first time in a row: no attempt
    /// counted (see [`Run::not_started`]).
    Unstarted {
        rescued: bool,
    },
    /// The agent CLI hit a usage limit or an API error: work rescued, no
    /// attempt counted; agents wait (until `reset`, when it is known).
    Limited {
        reset: Option<SystemTime>,
        transient: bool,
        rescued: bool,
    },
    /// The agent CLI cannot work at all (why): the run stops.
    Fatal {
        why: String,
        rescued: bool,
    },
}

/// Settle what the session for `task` left (`ran`), then release the claim
/// (unless it was lost). If settling fails half-way (git or disk errors),
/// the clone's commits still go to a rescue branch, best effort, and the
/// claim is still released: an error must not leave a live-looking claim.
fn work(
    run: &Run,
    clone: &PrivateClone,
    name: &str,
    task: &Task,
    held: Held,
    slot: &Slot,
    ran: Result<Ran, Error>,
) -> Result<End, Error> {
    let result = ran.and_then(|ran| finish(run, clone, name, task, &held, slot, ran));
    if result.is_err() {
        let branch = format!("farm/rescue/{}/{}", task.id, held.claim().nonce);
        let upstream = format!("origin/{}", run.hub.branch);
        let _ = clone.fetch_if_moved(&run.hub);
        if clone.count_since(&upstream).unwrap_or(0) > 0
            && clone
                .head()
                .and_then(|tip| clone.has_own_commits(&upstream, &tip))
                .unwrap_or(true)
            && clone.push_ref("HEAD", &branch).is_ok()
        {
            run.say(
                name,
                &format!("`{}`: its commits are on `{branch}`", task.id),
            );
        }
    }
    if !matches!(result, Ok(End::Lost { .. })) {
        match run.store.release_held(held) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) if result.is_ok() => return Err(e.into()),
            Err(_) => {}
        }
    }
    result
}

/// What a session left to settle.
struct Ran {
    attempt: u32,
    /// The commit the session started from.
    base: String,
    log: PathBuf,
    outcome: Outcome,
    class: Class,
    /// The claim was taken away while it ran.
    lost: bool,
    /// It did not start at all (see [`classify::did_not_start`]).
    unstarted: bool,
}

impl Ran {
    /// The session did its task: what is left is integration alone, which
    /// needs the agent no more (it can go on to its next session).
    fn succeeded(&self) -> bool {
        !self.lost && matches!(self.outcome, Outcome::Success) && self.class == Class::Success
    }
}

/// Announce the claim, render the prompt and run the session in `clone`;
/// what it left, classified.
fn session(
    run: &Run,
    clone: &PrivateClone,
    name: &str,
    task: &Task,
    held: &Held,
) -> Result<Ran, Error> {
    // From the task file as it is now; the claim's record may be one behind
    // if an attempt was recorded between reading the board and claiming.
    let attempt = task.attempts + 1;
    let id = task.id.as_str();
    let base = clone.head()?;
    let (log, prompt_file) = run.session_files(name, id);
    run.say(
        name,
        &format!(
            "claimed `{id}` (attempt {attempt} of {})",
            task.max_attempts
        ),
    );
    run.journal
        .log(name, "claim", json!({"task": id, "attempt": attempt}));

    let (description, notes) = prompt::split_notes(&task.body);
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("\n# Notes from earlier attempts\n\n{notes}\n")
    };
    let text = prompt::render(
        &prompt::template(clone.dir(), "prompt.md", prompt::PROMPT),
        &[
            ("task", id),
            ("title", &task.title),
            ("description", description.trim()),
            ("attempt", &attempt.to_string()),
            ("max_attempts", &task.max_attempts.to_string()),
            ("notes", &notes),
            ("branch", &run.hub.branch),
        ],
    );
    let timeout = task.timeout.unwrap_or(run.timeout);
    let started = Instant::now();
    clone.dirty();
    let (outcome, lost) = supervise(run, clone, held, name, &text, &log, &prompt_file, timeout)?;
    run.say(
        name,
        &format!(
            "`{id}`: session {outcome} after {:.1}s",
            started.elapsed().as_secs_f64()
        ),
    );

    // What the session's end means, from its exit and its log's last lines.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let class = classify::classify(
        &run.patterns,
        &outcome,
        started.elapsed(),
        &text,
        SystemTime::now(),
    );
    let unstarted = classify::did_not_start(&outcome, started.elapsed(), &text);
    let spent = usage::read(&text);
    run.spend(&spent);
    run.journal.log(
        name,
        "session_end",
        json!({
            "task": id,
            "attempt": attempt,
            "outcome": outcome.to_string(),
            "class": class.label(),
            "secs": started.elapsed().as_secs_f64(),
            "log": log.display().to_string(),
            "cost_usd": spent.cost_usd,
            "input_tokens": spent.input_tokens,
            "output_tokens": spent.output_tokens,
        }),
    );
    Ok(Ran {
        attempt,
        base,
        log,
        outcome,
        class,
        lost,
        unstarted,
    })
}

/// Settle what a session left in `clone`: commit it, then integrate it
/// (success) or rescue it and note the failed attempt.
fn finish(
    run: &Run,
    clone: &PrivateClone,
    name: &str,
    task: &Task,
    held: &Held,
    slot: &Slot,
    ran: Ran,
) -> Result<End, Error> {
    let Ran {
        attempt,
        base,
        log,
        outcome,
        class,
        lost,
        unstarted,
    } = ran;
    let id = task.id.as_str();
    let nonce = held.claim().nonce.clone();
    // A session must build on the commit it started from: history rewritten
    // under it (a reset to the root, say) would rebase into a board holding
    // the task twice, or be rejected push after push.
    let descends =
        base == clone.head()? || clone.check(["merge-base", "--is-ancestor", &base, "HEAD"])?;
    // What the agent left uncommitted is committed: with the move to done
    // when it succeeded (one commit), on its own otherwise (to be rescued).
    if class == Class::Success && !lost && descends {
        clone.mark_done(task, name, attempt, &log)?;
    } else {
        clone.commit_leftovers(name, id)?;
    }
    clone.undo_claim_tampering(&base, name)?;
    let work_tip = clone.head()?;
    // The rescue takes HEAD as it is when needed: after integration began it
    // holds the work rebased or merged (with a merge session's commits);
    // a merge in progress is aborted first, back to the work itself.
    let rescue = |why: &str| -> Result<bool, Error> {
        if clone.dir().join(".git/MERGE_HEAD").exists() {
            clone.check(["merge", "--abort"])?;
        }
        let tip = clone.head()?;
        if work_tip == base && tip == base {
            return Ok(false);
        }
        // A push whose answer was lost (the hub cut off mid-reply) may have
        // landed: what the branch has already, by ancestry or patch, needs
        // no rescue branch.
        let upstream = format!("origin/{}", run.hub.branch);
        if clone.fetch_if_moved(&run.hub).is_ok() && !clone.has_own_commits(&upstream, &tip)? {
            run.journal.log(
                name,
                "rescue_skipped",
                json!({"task": id, "why": why, "because": "its commits are on the branch"}),
            );
            return Ok(false);
        }
        let branch = format!("farm/rescue/{id}/{nonce}");
        clone.push_ref(&tip, &branch)?;
        run.journal.log(
            name,
            "rescue",
            json!({"task": id, "branch": branch, "why": why}),
        );
        run.say(
            name,
            &format!("`{id}`: {why}; its commits are on `{branch}`"),
        );
        Ok(true)
    };

    // The attempt noted on the board under `held`.
    let note = |held: &Held, why: &str, rescued: bool| -> Result<Recorded, Error> {
        record_attempt(
            run,
            clone,
            held,
            name,
            task,
            attempt,
            why,
            &log,
            rescued.then_some(&nonce),
        )
    };
    // The claim is gone. Taken over by another holder, the task is theirs:
    // nothing to count here. Gone with nobody holding the task, it was
    // removed, not passed on — by the session itself, as often as not, and
    // farm cannot tell that from a reaper that left the task free: the
    // session failed, and the attempt is counted under the claim taken
    // again (else such a session runs again and again, counting nothing).
    let lost_claim = |why: &str, rescued: bool| -> Result<End, Error> {
        let Some(again) = retake(run, name, task, attempt)? else {
            return Ok(End::Lost { rescued });
        };
        let why = format!("{why}, and nobody held it after: the claim was removed");
        let noted = note(&again, &why, rescued);
        match run.store.release_held(again) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) if noted.is_ok() => return Err(e.into()),
            Err(_) => {}
        }
        // Not pending any more: finished by whoever took the task over.
        Ok(match noted? {
            Recorded::Pushed => End::Failed { rescued },
            Recorded::Gone | Recorded::Lost => End::Lost { rescued },
        })
    };
    // A failed attempt: its work rescued, the attempt noted on the board.
    let fail = |rescue_why: &str, why: &str| -> Result<End, Error> {
        let rescued = rescue(rescue_why)?;
        if note(held, why, rescued)? != Recorded::Lost {
            return Ok(End::Failed { rescued });
        }
        lost_claim(&format!("{why}; the claim was gone"), rescued)
    };

    if lost {
        let why = "the claim was taken away while the session ran";
        let rescued = rescue(why)?;
        return lost_claim(why, rescued);
    }
    if unstarted && !matches!(outcome, Outcome::Interrupted) {
        let said = last_line(&log).map_or(String::new(), |l| format!(", saying {l}"));
        match run.not_started(&task.id) {
            // Maybe this task's own doing (a prompt too long for an
            // argument): try another task before judging the agent.
            Unstarted::First => {
                let rescued = rescue("the session did not start")?;
                run.say(
                    name,
                    &format!(
                        "`{id}`: the agent did not start ({outcome}{said}); no attempt counted"
                    ),
                );
                run.journal.log(
                    name,
                    "unstarted",
                    json!({"task": id, "outcome": outcome.to_string()}),
                );
                return Ok(End::Unstarted { rescued });
            }
            Unstarted::Elsewhere(other) => {
                return Ok(End::Fatal {
                    rescued: rescue("the session did not start")?,
                    why: format!(
                        "it does not start: {outcome} at once on `{other}`, then on `{id}`{said}"
                    ),
                });
            }
            // The same task again (no other is ready): this task's failure.
            Unstarted::Again => {}
        }
    } else {
        run.started();
    }
    if !descends {
        return fail(
            "its history does not descend from where it started",
            &format!(
                "the session rewrote the history it started on: its HEAD does not descend from {}",
                &base[..base.len().min(12)]
            ),
        );
    }
    let end = match (outcome, class) {
        (Outcome::Interrupted, _) => End::Rescued {
            rescued: rescue("the run was stopped")?,
        },
        (_, Class::Limited { reset }) => End::Limited {
            reset,
            transient: false,
            rescued: rescue("the agent CLI hit its usage limit")?,
        },
        (_, Class::Transient) => End::Limited {
            reset: None,
            transient: true,
            rescued: rescue("the agent CLI's API failed")?,
        },
        (_, Class::Fatal(why)) => End::Fatal {
            why,
            rescued: rescue("the agent CLI cannot work")?,
        },
        (Outcome::Success, Class::Success) => {
            match integrate(run, clone, name, task, held, slot, &base)? {
                Integrated::Pushed => {
                    run.say(
                        name,
                        &format!("`{id}` done: integrated into `{}`", run.hub.branch),
                    );
                    run.journal.log(name, "done", json!({"task": id}));
                    End::Done
                }
                Integrated::Lost => {
                    let why = "the claim was taken away before the push";
                    let rescued = rescue(why)?;
                    return lost_claim(why, rescued);
                }
                Integrated::Interrupted => End::Rescued {
                    rescued: rescue("the run was stopped during a merge session")?,
                },
                Integrated::Busy => fail(
                    "could not push: the branch kept moving",
                    &format!(
                        "could not push after {} rounds: `{}` kept moving",
                        push_rounds(run),
                        run.hub.branch
                    ),
                )?,
                Integrated::Conflict(files) => fail(
                    &format!("could not merge ({})", files.join(", ")),
                    &format!(
                        "its work conflicts with `{}` in {}",
                        run.hub.branch,
                        files.join(", ")
                    ),
                )?,
            }
        }
        (Outcome::Success, _) => fail(
            "the session reported an error",
            "the session exited 0 but its result says it failed",
        )?,
        (failed, _) => fail(&format!("session {failed}"), &failed.to_string())?,
    };
    Ok(end)
}

/// Run one session, heartbeating the claim. Returns the outcome and whether
/// the claim was lost while it ran (the session is then stopped).
#[allow(clippy::too_many_arguments)]
fn supervise(
    run: &Run,
    clone: &PrivateClone,
    held: &Held,
    name: &str,
    prompt: &str,
    log: &Path,
    prompt_file: &Path,
    timeout: Duration,
) -> Result<(Outcome, bool), Error> {
    if let Some(dir) = prompt_file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    }
    let mut env = vec![
        ("FARM_TASK", held.claim().task.to_string()),
        ("FARM_AGENT", name.to_owned()),
        ("FARM_HUB", run.hub.url.clone()),
        ("FARM_CLAIM", run.store.claim_location(&held.claim().task)),
        ("FARM_ATTEMPT", held.claim().attempt.to_string()),
    ];
    if let Some(config) = &run.agent_config {
        env.push((
            config.var,
            config.dir_for(&run.state, name)?.display().to_string(),
        ));
    }
    run.stagger_start();
    let spec = session::Spec {
        argv: &run.argv,
        wrap: &run.wrap,
        prompt,
        via: run.via,
        prompt_file,
        cwd: clone.dir(),
        env: &env,
        log,
        timeout,
        grace: run.grace,
        record: &clone.session_record(),
    };
    let mut lost = false;
    let mut last_beat = Instant::now();
    let outcome = session::run(&spec, || {
        if run.stop.killing() {
            return Tick::Stop;
        }
        if last_beat.elapsed() >= run.heartbeat {
            last_beat = Instant::now();
            if let Err(StoreError::Lost { .. }) = run.store.heartbeat(held, SystemTime::now()) {
                lost = true;
                return Tick::Stop;
            }
        }
        Tick::Continue
    });
    let outcome = match outcome {
        Ok(outcome) => outcome,
        // The agent could not be started for this task (its prompt too long
        // for an argument, say): a failed attempt like any other, noted in
        // the log — not an error that would stop the loop and, under
        // loop.sh, bring it back to the same task for ever.
        Err(e) => {
            let _ = std::fs::write(log, format!("farm: cannot start `{}`: {e}\n", run.argv[0]));
            Outcome::Failed { code: 127 }
        }
    };
    Ok((outcome, lost))
}

enum Integrated {
    Pushed,
    Lost,
    Conflict(Vec<String>),
    /// The branch kept moving for [`push_rounds`] rounds.
    Busy,
    /// The run was killed during a merge session.
    Interrupted,
}

/// Bring the work (already committed, task moved to done) onto the hub's
/// branch and push it. `base` is the commit the session started from.
#[allow(clippy::too_many_arguments)]
fn integrate(
    run: &Run,
    clone: &PrivateClone,
    name: &str,
    task: &Task,
    held: &Held,
    slot: &Slot,
    base: &str,
) -> Result<Integrated, Error> {
    let id = task.id.as_str();
    let branch = &run.hub.branch;
    let upstream = format!("origin/{branch}");
    // The upstream commit the work last sat on; when the branch has not
    // moved past it there is nothing to rebase or merge.
    let mut onto = base.to_owned();
    // Once merged, stay merged: rebasing again would replay the conflict.
    let mut merged = false;
    // Bring the work onto the branch as it is now: fetch (when it moved),
    // rebase, or merge once rebasing conflicted. `Some(files)` on conflict.
    let catch_up = |onto: &mut String, merged: &mut bool| -> Result<Option<Vec<String>>, Error> {
        let now = clone.fetch_if_moved(&run.hub)?;
        if now == *onto {
            return Ok(None);
        }
        let clean = if *merged {
            clone.merge(&upstream, branch, id)?
        } else if clone.rebase(&upstream)? {
            true
        } else {
            *merged = true;
            clone.merge(&upstream, branch, id)?
        };
        *onto = now;
        Ok(if clean {
            None
        } else {
            Some(clone.repo.conflicted()?)
        })
    };
    // Rounds of rejected pushes can outlast the heartbeat interval on a
    // busy hub (a claim went stale after 30 rounds in 2 minutes under load
    // and was taken over): beat between rounds, as the session did.
    let mut last_beat = Instant::now();
    for round in 0..push_rounds(run) {
        if last_beat.elapsed() >= run.heartbeat {
            last_beat = Instant::now();
            if let Err(StoreError::Lost { .. }) = run.store.heartbeat(held, SystemTime::now()) {
                return Ok(Integrated::Lost);
            }
        }
        // Catch up without the lock first, then take the hub's push lock and
        // catch up again only if the branch moved meanwhile: the agents of
        // this host take turns at the push (an agent whose work conflicted
        // once lost 20 rounds running) while holding the lock for little
        // more than the push itself. (A hub elsewhere has no lock, and no
        // branch to read without a fetch: its push just gets rejected.)
        let mut conflict = catch_up(&mut onto, &mut merged)?;
        let mut lock = None;
        if conflict.is_none() {
            lock = run.hub.push_lock()?;
            if lock.is_some() && run.hub.branch_rev().as_deref() != Some(onto.as_str()) {
                conflict = catch_up(&mut onto, &mut merged)?;
            }
        }
        if let Some(files) = conflict {
            // A merge session takes minutes: let the others push meanwhile.
            drop(lock);
            run.say(
                name,
                &format!(
                    "`{id}`: conflict with `{branch}` in {}; merge session",
                    files.join(", ")
                ),
            );
            run.journal
                .log(name, "conflict", json!({"task": id, "files": files}));
            match merge_session(run, clone, held, slot, name, task, &files)? {
                Merge::Resolved => continue, // catch up with what moved meanwhile, then push
                Merge::Lost => return Ok(Integrated::Lost),
                Merge::Interrupted => return Ok(Integrated::Interrupted),
                Merge::Unresolved => {
                    clone.check(["merge", "--abort"])?;
                    return Ok(Integrated::Conflict(files));
                }
            }
        }
        // Fencing: the store publishes only while the claim is still ours.
        match publish_branch(run, clone, held, lock.as_ref())? {
            Published::Pushed => {
                clone.pushed();
                return Ok(Integrated::Pushed);
            }
            Published::Lost(why) => {
                run.say(name, &format!("`{id}`: not published: {why}"));
                return Ok(Integrated::Lost);
            }
            Published::Rejected(_) => {
                drop(lock);
                run.say(
                    name,
                    &format!("`{id}`: push rejected ({branch} moved); integrating again"),
                );
                after_rejection(run, round);
            }
        }
    }
    Ok(Integrated::Busy)
}

/// One fresh session with the merge prompt in the conflicted clone. True
/// when it left no conflict behind (the merge is then committed).
fn merge_session(
    run: &Run,
    clone: &PrivateClone,
    held: &Held,
    slot: &Slot,
    name: &str,
    task: &Task,
    files: &[String],
) -> Result<Merge, Error> {
    let list: String = files.iter().map(|f| format!("- `{f}`\n")).collect();
    let text = prompt::render(
        &prompt::template(clone.dir(), "merge.md", prompt::MERGE),
        &[
            ("task", task.id.as_str()),
            ("title", &task.title),
            ("branch", &run.hub.branch),
            ("conflicts", &list),
        ],
    );
    let (log, prompt_file) = run.session_files(name, &format!("{}-merge", task.id));
    let _turn = match slot.wait(run, held) {
        Ok(turn) => turn,
        Err(merge) => return Ok(merge),
    };
    let (outcome, lost) = supervise(
        run,
        clone,
        held,
        name,
        &text,
        &log,
        &prompt_file,
        run.timeout,
    )?;
    if lost {
        return Ok(Merge::Lost);
    }
    match outcome {
        Outcome::Success => {}
        Outcome::Interrupted => return Ok(Merge::Interrupted),
        _ => return Ok(Merge::Unresolved),
    }
    if !clone.repo.conflicted()?.is_empty() || clone.has_markers(files) {
        return Ok(Merge::Unresolved);
    }
    clone.git(["add", "--all"])?;
    if clone.dir().join(".git/MERGE_HEAD").exists() {
        clone.git(["commit", "--quiet", "--no-verify", "--no-edit"])?;
    }
    // An agent may also have aborted the merge and exited 0: only a HEAD
    // that now contains the branch counts as merged.
    let upstream = format!("origin/{}", run.hub.branch);
    if !clone.check(["merge-base", "--is-ancestor", &upstream, "HEAD"])? {
        return Ok(Merge::Unresolved);
    }
    Ok(Merge::Resolved)
}

/// An agent runs one session at a time. Its loop holds the slot for each
/// task's session; an integration going on beside it (see [`turns`])
/// waits for the slot before a merge session, heartbeating its claim.
#[derive(Default)]
struct Slot(Mutex<()>);

impl Slot {
    fn take(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for the slot while keeping `held` alive; how the merge ends
    /// instead when the claim is lost or the run is killed meanwhile.
    fn wait(&self, run: &Run, held: &Held) -> Result<std::sync::MutexGuard<'_, ()>, Merge> {
        let mut last_beat = Instant::now();
        loop {
            match self.0.try_lock() {
                Ok(turn) => return Ok(turn),
                Err(std::sync::TryLockError::Poisoned(e)) => return Ok(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if run.stop.killing() {
                return Err(Merge::Interrupted);
            }
            if last_beat.elapsed() >= run.heartbeat {
                last_beat = Instant::now();
                if let Err(StoreError::Lost { .. }) = run.store.heartbeat(held, SystemTime::now()) {
                    return Err(Merge::Lost);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// How a merge session ended.
enum Merge {
    Resolved,
    Unresolved,
    /// The run was killed meanwhile.
    Interrupted,
    /// The claim was taken away meanwhile.
    Lost,
}

/// Claim `task` again after its claim was lost, if nobody holds it now:
/// the claim was removed rather than taken over, and counting the attempt
/// needs a claim to publish under. `None` when another holder has it.
fn retake(run: &Run, name: &str, task: &Task, attempt: u32) -> Result<Option<Held>, Error> {
    let holder = host::own_start().map(|start| Holder {
        pid: std::process::id(),
        start,
    });
    let claim = Claim::new(task.id.clone(), name, holder, attempt, SystemTime::now());
    match run.store.try_claim(claim, true) {
        Ok(Attempt::Won(held)) => Ok(Some(held)),
        Ok(Attempt::Lost(_)) | Err(StoreError::Busy { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What became of an edit of a task file on the hub's branch.
#[derive(Debug, PartialEq, Eq)]
enum Recorded {
    Pushed,
    /// The file is not pending there any more (moved by hand, or edited
    /// into something invalid, which the board reports): nothing to edit.
    Gone,
    /// The claim was taken away: nothing published.
    Lost,
}

/// Edit task `id`'s pending file on the hub's branch under `held`: `edit`
/// changes the task and says whether it gave up (then the file moves to
/// `tasks/failed/`) and the commit message.
fn edit_task(
    run: &Run,
    clone: &PrivateClone,
    held: &Held,
    id: &crate::names::TaskId,
    edit: &dyn Fn(&mut Task) -> (bool, String),
) -> Result<(Recorded, bool), Error> {
    for round in 0..push_rounds(run) {
        if round > 0 {
            after_rejection(run, round);
        }
        let lock = run.hub.push_lock()?;
        clone.sync(&run.hub)?;
        let pending = clone.dir().join("tasks").join(format!("{id}.md"));
        let Ok(text) = std::fs::read_to_string(&pending) else {
            return Ok((Recorded::Gone, false));
        };
        let Ok(mut t) = board::parse(id.clone(), &text) else {
            return Ok((Recorded::Gone, false));
        };
        let (gave_up, message) = edit(&mut t);
        if gave_up {
            let failed = clone.dir().join("tasks/failed");
            std::fs::create_dir_all(&failed).map_err(io_error)?;
            std::fs::write(failed.join(format!("{id}.md")), t.render()).map_err(io_error)?;
            std::fs::remove_file(&pending).map_err(io_error)?;
        } else {
            std::fs::write(&pending, t.render()).map_err(io_error)?;
        }
        clone.commit_all(&message)?;
        // Fencing, as for the work: a holder whose claim was taken away
        // leaves the task file to its new holder.
        match publish_branch(run, clone, held, lock.as_ref())? {
            Published::Pushed => return Ok((Recorded::Pushed, gave_up)),
            Published::Lost(_) => return Ok((Recorded::Lost, gave_up)),
            Published::Rejected(_) => {}
        }
    }
    Err(Error::failure(format!(
        "`{id}`: could not edit its task file; the hub is too busy"
    )))
}

/// A task out of attempts before any session (`attempts >= max_attempts`
/// in its front matter): to `tasks/failed/` with a note, no attempt added.
fn retire(
    run: &Run,
    clone: &PrivateClone,
    name: &str,
    task: &Task,
    held: &Held,
) -> Result<Recorded, Error> {
    let id = task.id.as_str();
    let (recorded, _) = edit_task(run, clone, held, &task.id, &|t| {
        let note = format!(
            "\n## Out of attempts\n\n- {} of {} attempts used before it was claimed: \
             moved to tasks/failed/ without a session\n- agent: {name}@{}\n- at: {}\n",
            t.attempts,
            t.max_attempts,
            Here::current().host,
            timestamp(SystemTime::now()),
        );
        t.body = format!("{}{note}", ensure_newline(&t.body));
        (
            t.attempts >= t.max_attempts,
            format!(
                "farm: `{id}` is out of attempts ({} of {})",
                t.attempts, t.max_attempts
            ),
        )
    })?;
    if recorded == Recorded::Pushed {
        run.journal.log(
            name,
            "failed",
            json!({"task": id, "attempts": task.attempts, "why": "out of attempts", "gave_up": true}),
        );
        run.say(
            name,
            &format!(
                "`{id}`: out of attempts ({} of {}); moved to tasks/failed/ without a session",
                task.attempts, task.max_attempts
            ),
        );
    }
    Ok(recorded)
}

/// Count a failed attempt in the task file on the hub's branch, with a note;
/// move it to `tasks/failed/` when its attempts are used up.
#[allow(clippy::too_many_arguments)]
fn record_attempt(
    run: &Run,
    clone: &PrivateClone,
    held: &Held,
    name: &str,
    task: &Task,
    attempt: u32,
    why: &str,
    log: &Path,
    rescue: Option<&Nonce>,
) -> Result<Recorded, Error> {
    let id = task.id.as_str();
    let (recorded, gave_up) = edit_task(run, clone, held, &task.id, &|t| {
        t.attempts = t.attempts.max(attempt);
        let mut note = format!(
            "\n## Attempt {attempt} — {why}\n\n- agent: {name}@{}\n- at: {}\n- log: {}\n",
            Here::current().host,
            timestamp(SystemTime::now()),
            log.display()
        );
        if let Some(nonce) = rescue {
            note.push_str(&format!("- work: branch `farm/rescue/{id}/{nonce}`\n"));
        }
        if let Some(tail) = last_line(log) {
            note.push_str(&format!("- last output: {tail}\n"));
        }
        t.body = format!("{}{note}", ensure_newline(&t.body));
        let gave_up = t.attempts >= t.max_attempts;
        let message = if gave_up {
            format!("farm: `{id}` failed after {} attempts", t.attempts)
        } else {
            format!("farm: attempt {attempt} of `{id}` failed")
        };
        (gave_up, message)
    })?;
    if recorded == Recorded::Pushed {
        run.journal.log(
            name,
            "failed",
            json!({"task": id, "attempt": attempt, "why": why, "gave_up": gave_up}),
        );
        let what = if gave_up {
            "moved to tasks/failed/"
        } else {
            "back on the board"
        };
        run.say(
            name,
            &format!("`{id}`: attempt {attempt} failed ({why}); {what}"),
        );
    }
    Ok(recorded)
}

/// Push the clone's HEAD to the hub's branch while `held` is still ours (the
/// git store releases it in the same push); the caller holds the hub's push
/// lock if it has one, and `lock` is it: the push's processes keep it until
/// they exit, so a push left by a killed farm still excludes the others.
/// `Rejected` only when the branch moved on; any other
/// refusal is an error — but for a hub whose work tree has changes of its
/// own (a user editing a tracked file), which refuses every push until they
/// are gone: that is waited out, said once, heartbeating the claim.
fn publish_branch(
    run: &Run,
    clone: &PrivateClone,
    held: &Held,
    lock: Option<&std::fs::File>,
) -> Result<Published, Error> {
    use std::os::fd::AsFd;
    let spec = [format!("HEAD:refs/heads/{}", run.hub.branch)];
    let hold: Vec<_> = lock.map(AsFd::as_fd).into_iter().collect();
    let look = || match &run.hub.local {
        Some(local) => format!("git -C {} status", local.dir.display()),
        None => format!("git ls-remote {}", run.hub.url),
    };
    let mut said = false;
    let mut wait = Duration::from_millis(100);
    loop {
        let why = match run.store.publish(held, &clone.repo, "origin", &spec, &hold) {
            Err(StoreError::Refused(why)) => why,
            other => return other.map_err(Error::from),
        };
        if !work_tree_busy(&why) || run.stop.killing() {
            return Err(Error::failure(format!("the hub refused the push: {why}"))
                .hint(format!("look at the hub: {}", look())));
        }
        if !said {
            said = true;
            run.say(
                &held.claim().agent,
                &format!(
                    "`{}`: waiting for the hub's work tree to be clean to push ({why}; look: {})",
                    held.claim().task,
                    look()
                ),
            );
        }
        let until = Instant::now() + wait;
        while Instant::now() < until && !run.stop.killing() {
            std::thread::sleep(Duration::from_millis(50));
        }
        wait = (wait * 2).min(Duration::from_secs(2));
        if let Err(StoreError::Lost { why, .. }) = run.store.heartbeat(held, SystemTime::now()) {
            return Ok(Published::Lost(why));
        }
    }
}

/// Whether a refused push says the hub's work tree is not clean (git's
/// `receive.denyCurrentBranch=updateInstead`): a state a user makes and
/// undoes, not a refusal for good.
fn work_tree_busy(why: &str) -> bool {
    let why = why.to_lowercase();
    [
        "working directory has",
        "unstaged changes",
        "staged changes",
    ]
    .iter()
    .any(|p| why.contains(p))
}

/// The last non-empty line of a session log, shortened, for attempt notes.
fn last_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let cut: String = line.chars().take(200).collect();
    Some(format!("`{}`", cut.replace('`', "'")))
}
