//! `farm status`: what the run is doing, or did — from its journal, the
//! board and the claims.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::age::Age;
use crate::board;
use crate::claims::notice::{self, Kind, Notice};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::output::{Style, table};
use crate::report::needs::NeedsYou;
use crate::report::night::{self, Spent};
use crate::run::journal::{self, Entry, Event, given};
use crate::run::queue::{InLine, Queue};

/// Show the run: its agents (working on what since when, idle, waiting for
/// a usage limit to lift, paused by the circuit breaker), the board's
/// counts, the claims with their ages, the last sessions and the totals.
///
/// Reads the journal in the state directory (`.farm/journal.jsonl`), during
/// a run or after it.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm status
  farm status --watch
  farm status --json | jq '.totals'")]
pub struct Args {
    /// Print JSON: {runs, agents, board, claims, sessions, queue, totals,
    /// needs_you}.
    #[arg(long)]
    json: bool,

    /// Redraw every 2 seconds, saying when it last did, until interrupted
    /// or until the run being watched ends.
    #[arg(long, conflicts_with = "json")]
    watch: bool,

    /// How many of the last sessions to show.
    #[arg(long, default_value_t = 8, value_name = "N")]
    last: usize,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    // Whether this watch has seen a run running: once none is, nothing
    // more will change, and the watch says so and ends.
    let mut saw_running = false;
    loop {
        let mut journal = String::new();
        let report = gather(ctx, args.last, &mut journal)?;
        if args.json {
            ctx.out.data(&format!("{:#}\n", report.json()))?;
            return Ok(());
        }
        let text = report.text();
        if args.watch {
            let running = report.runs.iter().any(|(_, alive, _)| *alive);
            let clock = humantime::format_rfc3339_seconds(report.now).to_string();
            let clock = clock.get(11..19).unwrap_or(&clock);
            let head = if running {
                format!("updated {clock} UTC, every 2s (Ctrl-C to stop)")
            } else if saw_running {
                format!("updated {clock} UTC: the run ended; nothing more will change")
            } else {
                format!("updated {clock} UTC, every 2s: no run is running (Ctrl-C to stop)")
            };
            ctx.out.data(&format!("\x1b[H\x1b[2J{head}\n{text}"))?;
            if saw_running && !running {
                return Ok(());
            }
            saw_running |= running;
            std::thread::sleep(Duration::from_secs(2));
        } else {
            ctx.out.data(&text)?;
            return Ok(());
        }
    }
}

/// What an agent is doing, as its journal says.
#[derive(Debug, Clone)]
enum Doing {
    Working {
        task: String,
        since: SystemTime,
    },
    /// In a merge session for `task`.
    Merging {
        task: String,
        since: SystemTime,
    },
    Waiting {
        until: SystemTime,
        why: String,
    },
    Idle {
        since: SystemTime,
        /// What it waits for, when nothing is ready: claims held elsewhere,
        /// or its fellow agents' tasks that the blocked ones come after.
        waiting_for: Option<String>,
    },
    /// A holder of a claim on the hub that is not one of this run's agents:
    /// another machine's, another run's, or a claim made by hand.
    Elsewhere {
        task: String,
        since: SystemTime,
        state: &'static str,
    },
    /// Its run is over (ended, or its process is gone): what it did last.
    Ended {
        last: Option<String>,
        at: SystemTime,
    },
}

impl Doing {
    /// Is the agent busy with something other than `task` (working or
    /// merging on another task, or waiting)? `None`: no task at all.
    fn on_other_than(&self, task: Option<&str>) -> bool {
        match self {
            Doing::Working { task: on, .. } | Doing::Merging { task: on, .. } => {
                Some(on.as_str()) != task
            }
            Doing::Waiting { .. } => true,
            Doing::Idle { .. } | Doing::Elsewhere { .. } | Doing::Ended { .. } => false,
        }
    }
}

/// What `farm status` says; its sessions borrow from the journal's text.
struct Report<'j> {
    journal: String,
    /// Runs in the journal's scope: (pid, running, started).
    runs: Vec<(u32, bool, SystemTime)>,
    agents: BTreeMap<String, Doing>,
    /// Each agent's role, for those that have one.
    roles: BTreeMap<String, String>,
    board: Option<board::Counts>,
    /// The tasks waiting for an answer, with their questions.
    waiting: Vec<(String, String)>,
    /// The tasks whose change waits for review, with its branch.
    review: Vec<(String, String)>,
    /// Task, holder (`agent@host`), state, age.
    claims: Vec<(String, String, &'static str, Duration)>,
    /// Hosts whose clocks seem off this one's, by seconds (ahead positive).
    clocks_off: BTreeMap<String, i64>,
    sessions: Vec<Entry<'j>>,
    /// The merge queue, first in line first.
    queue: Vec<InLine>,
    totals: BTreeMap<&'static str, usize>,
    /// What the sessions cost, where the CLI said: in all, and by agent,
    /// task and agent CLI.
    spent: Spent,
    by_agent: BTreeMap<String, Spent>,
    by_task: BTreeMap<String, Spent>,
    by_cli: BTreeMap<String, Spent>,
    /// `farm pause`s on the hub, and the `farm stop`s posted since a run
    /// in scope that is still running began (see [`crate::claims::notice`]).
    paused: Vec<Notice>,
    stopping: Vec<Notice>,
    /// What needs a person: failed and stuck tasks, rescued work, what is
    /// left, the cost.
    needs: NeedsYou,
    now: SystemTime,
}

fn time(at: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(at).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The report, from the hub, the claims and the journal (read into
/// `text`, which its sessions borrow).
fn gather<'j>(ctx: &Ctx, last: usize, text: &'j mut String) -> Result<Report<'j>, Error> {
    let spec = ctx.hub_spec()?;
    let state = ctx.state_dir(&spec);
    *text = journal::read(&state).map_err(|e| {
        Error::failure(format!(
            "cannot read the journal in `{}`: {e}",
            state.display()
        ))
    })?;
    let entries = journal::entries(text);
    let now = SystemTime::now();
    // Runs that started and did not end; of those whose process is gone
    // (killed), the journal says nothing more. None running: the last run.
    let mut runs: BTreeMap<u32, (bool, SystemTime)> = BTreeMap::new();
    for e in &entries {
        match e.event {
            Event::RunStart { .. } => {
                let alive = crate::claims::host::process_start(e.pid).is_some();
                runs.insert(e.pid, (alive, time(&e.at)));
            }
            Event::RunEnd { .. } => {
                if let Some(r) = runs.get_mut(&e.pid) {
                    r.0 = false;
                }
            }
            _ => {}
        }
    }
    let running: Vec<u32> = runs.iter().filter(|(_, r)| r.0).map(|(p, _)| *p).collect();
    let scope: Vec<u32> = if running.is_empty() {
        runs.iter()
            .max_by_key(|(_, r)| r.1)
            .map(|(p, _)| *p)
            .into_iter()
            .collect()
    } else {
        running
    };
    let in_scope: Vec<&Entry> = entries.iter().filter(|e| scope.contains(&e.pid)).collect();

    let mut agents: BTreeMap<String, Doing> = BTreeMap::new();
    let roles: BTreeMap<String, String> = in_scope
        .iter()
        .filter_map(|e| match &e.event {
            Event::RunStart { roles, .. } => Some(roles.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let mut totals: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut sessions: Vec<&Entry> = Vec::new();
    // Cost and tokens rolled up as the report rolls them up.
    let rolled = night::rollup(&in_scope);
    // The last task each agent claimed, for an agent whose run is over.
    let mut last_task: BTreeMap<String, String> = BTreeMap::new();
    // When each agent claimed each task, for the integration a merge
    // session returns to.
    let mut claimed_at: BTreeMap<(String, String), SystemTime> = BTreeMap::new();
    // The task each agent's loop holds and has not yet seen the end of.
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    for e in &in_scope {
        // The task whose end (for now) this line tells, if it tells one;
        // `Some(None)`: work of no task.
        let ended: Option<Option<&str>> = match &e.event {
            Event::SessionEnd { task, .. }
            | Event::Done { task }
            | Event::Failed { task, .. }
            | Event::LostRace { task } => Some(Some(task)),
            Event::Rescue { task, .. } => Some(task.as_deref()),
            _ => None,
        };
        if let Some(agent) = &e.agent {
            if let Event::Claim { task, .. } = &e.event {
                last_task.insert(agent.to_string(), task.to_string());
                held.insert(agent.to_string(), task.to_string());
                claimed_at.insert((agent.to_string(), task.to_string()), time(&e.at));
            }
            if let Some(Some(task)) = ended
                && held.get(&**agent).is_some_and(|t| t == task)
            {
                held.remove(&**agent);
            }
        }
        let at = time(&e.at);
        let key = match e.event {
            Event::SessionEnd { .. } => {
                sessions.push(e);
                Some("sessions")
            }
            Event::MergeEnd { .. } => {
                sessions.push(e);
                Some("merge sessions")
            }
            Event::Done { .. } => Some("done"),
            Event::Failed { .. } => Some("failed attempts"),
            Event::Limit { .. } => Some("limit waits"),
            Event::Rescue { .. } => Some("rescued"),
            Event::Reap { .. } => Some("reaped"),
            Event::Trip { .. } => Some("breaker trips"),
            _ => None,
        };
        if let Some(k) = key {
            *totals.entry(k).or_default() += 1;
        }
        // Every agent of a run is listed from its start, even one that
        // never claimed anything.
        if let Event::RunStart { agents: names, .. } = &e.event {
            for name in names {
                agents.insert(
                    name.clone(),
                    Doing::Idle {
                        since: at,
                        waiting_for: None,
                    },
                );
            }
        }
        let Some(agent) = &e.agent else { continue };
        // The end of one task idles an agent only if that task is what it
        // is on: a successful session's integration goes on beside the
        // loop, which claims the next task at once, so the first task's
        // `done` (or `failed`, `rescue`) comes while the agent already runs
        // the next session; nor does it end a wait.
        if let Some(task) = ended {
            if !agents.get(&**agent).is_some_and(|d| d.on_other_than(task)) {
                agents.insert(
                    agent.to_string(),
                    Doing::Idle {
                        since: at,
                        waiting_for: None,
                    },
                );
            }
            continue;
        }
        let doing = match &e.event {
            Event::Claim { task, .. } => Doing::Working {
                task: task.to_string(),
                since: at,
            },
            Event::MergeStart { task, .. } => Doing::Merging {
                task: task.to_string(),
                since: at,
            },
            // Back to the task the loop claimed meanwhile, if it did, else
            // to the integration the merge was for.
            Event::MergeEnd { task, .. } => {
                let now_on = held.get(&**agent).map_or(&**task, String::as_str);
                Doing::Working {
                    task: now_on.to_owned(),
                    since: claimed_at
                        .get(&(agent.to_string(), now_on.to_owned()))
                        .copied()
                        .unwrap_or(at),
                }
            }
            Event::Limit { until, why, .. } => Doing::Waiting {
                until: given(until).map_or(at, time),
                why: why.label().to_owned(),
            },
            // Waiting for a limit another agent's session hit says whose.
            Event::Wait {
                until,
                why,
                by,
                task,
            } => Doing::Waiting {
                until: given(until).map_or(at, time),
                why: match given(by).filter(|by| by != agent) {
                    Some(by) => format!("{}, hit by {by} on `{task}`", why.label()),
                    None => why.label().to_owned(),
                },
            },
            Event::Trip { until, why } => Doing::Waiting {
                until: given(until).map_or(at, time),
                why: match given(why) {
                    Some(why) => format!("circuit breaker ({why})"),
                    None => "circuit breaker".to_owned(),
                },
            },
            _ => continue,
        };
        agents.insert(agent.to_string(), doing);
    }
    // An agent of a run that is over is doing nothing at all, whatever its
    // last line said (it showed "idle for 16m" or "waiting (circuit
    // breaker)" long after its run ended).
    let live = runs.iter().any(|(p, r)| scope.contains(p) && r.0);
    if !live {
        let ended = runs
            .iter()
            .filter(|(p, _)| scope.contains(p))
            .filter_map(|(p, _)| {
                in_scope
                    .iter()
                    .rev()
                    .find(|e| e.pid == *p)
                    .map(|e| time(&e.at))
            })
            .max()
            .unwrap_or(now);
        for (name, doing) in agents.iter_mut() {
            *doing = Doing::Ended {
                last: last_task.get(name).cloned(),
                at: ended,
            };
        }
    }
    // A wait that is over is idleness.
    for doing in agents.values_mut() {
        if let Doing::Waiting { until, .. } = doing
            && *until <= now
        {
            *doing = Doing::Idle {
                since: *until,
                waiting_for: None,
            };
        }
    }
    // Only the last are kept, out of the journal's text.
    let sessions: Vec<Entry<'j>> = sessions[sessions.len().saturating_sub(last)..]
        .iter()
        .map(|e| (*e).clone())
        .collect();

    let store = ctx.store_for(&spec)?;
    // Claims judged by the threshold runs reap by, as `farm locks` judges
    // them: a holder silent past it is stale here too, and what needs you
    // says so.
    let stale_after = crate::settings::Settings::of_hub(&spec, None, &state)
        .and_then(|s| crate::run::config::stale_after(&s))
        .unwrap_or(Duration::from_secs(30 * 60));
    let judge = super::judge_now(Some(stale_after));
    // One listing for the claims table and the board (with the git store,
    // each listing is a fetch).
    let listed = store.list()?;
    let holders = crate::claims::holders(&listed);
    let clocks_off = crate::claims::clocks_off(&listed);
    let claims: Vec<(String, String, &'static str, Duration)> = listed
        .iter()
        .map(|l| {
            let age = l.record.as_ref().map_or(Duration::ZERO, |c| {
                now.duration_since(c.claimed_at).unwrap_or_default()
            });
            let v = l.judge(&judge);
            (l.name.clone(), l.who(), v.state.as_str(), age)
        })
        .collect();
    // The listing just read the hub: the store knows its notices.
    let notices = store.notices(false)?;
    let began = runs
        .iter()
        .filter(|(p, r)| scope.contains(p) && r.0)
        .map(|(_, r)| r.1)
        .min();
    let (paused, stopping): (Vec<Notice>, Vec<Notice>) = notices
        .into_iter()
        .filter(|n| n.kind == Kind::Pause || began.is_some_and(|b| n.at >= b))
        .partition(|n| n.kind == Kind::Pause);
    let opened = Hub::open(&spec, None).map_err(|e| format!("cannot open the hub: {}", e.message));
    // The board, read once for what needs you and for the counts.
    let snapshot = opened.as_ref().map_err(Clone::clone).and_then(|hub| {
        let mut snapshot = super::tasks::read_board(hub).map_err(|e| e.message)?;
        snapshot.claimed = holders;
        Ok(snapshot)
    });
    let needs = super::needs::gather(
        opened.as_ref().map_err(Clone::clone),
        snapshot.as_ref().map_err(Clone::clone),
        &listed,
        stale_after,
        &super::needs::rescues_of(&in_scope),
        rolled.total.cost_usd,
    );
    let hub = opened.ok();
    let mut waiting = Vec::new();
    let mut review = Vec::new();
    let board = snapshot.ok().map(|snapshot| {
        for (id, status) in board::statuses(&snapshot) {
            match status {
                board::Status::Waiting { question } => waiting.push((id.to_string(), question)),
                board::Status::Review { change } => review.push((id.to_string(), change)),
                _ => {}
            }
        }
        board::counts(&snapshot)
    });
    // The merge queue: in a directory of a hub on this machine, else
    // beside the claims that were just read.
    let line = match hub.as_ref().and_then(|hub| hub.local.as_ref()) {
        Some(local) => Some(Queue::local(&local.dir.join(crate::names::CLAIMS_DIR))),
        None => store.line().map(Queue::remote),
    };
    let queue = line.and_then(|q| q.list().ok()).unwrap_or_default();
    // The fleet: holders of claims that are not this run's agents (with a
    // URL hub, the claims branch holds every machine's).
    let host = in_scope
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::RunStart { host, .. } => Some(host),
            _ => None,
        })
        .and_then(|host| given(host).map(str::to_owned))
        .unwrap_or_else(|| crate::claims::host::Here::current().host.clone());
    let ours = |who: &str| {
        who.strip_suffix(&format!("@{host}"))
            .is_some_and(|name| agents.contains_key(name))
    };
    let elsewhere: Vec<&(String, String, &'static str, Duration)> = claims
        .iter()
        .filter(|c| !ours(&c.1) && c.2 != "dead")
        .collect();
    if live {
        // An idle agent with nothing ready waits for someone: say whom.
        let waiting_for = board.as_ref().filter(|c| c.ready == 0).and_then(|c| {
            let held: Vec<String> = elsewhere
                .iter()
                .map(|(task, who, ..)| format!("`{task}` (held by {who})"))
                .collect();
            let mine: Vec<String> = claims
                .iter()
                .filter(|c| ours(&c.1))
                .map(|(task, ..)| format!("`{task}`"))
                .collect();
            if !held.is_empty() {
                Some(listing(&held))
            } else if c.blocked > 0 && !mine.is_empty() {
                Some(format!("{} (blocked tasks come after)", listing(&mine)))
            } else {
                None
            }
        });
        for doing in agents.values_mut() {
            if let Doing::Idle { waiting_for: w, .. } = doing {
                w.clone_from(&waiting_for);
            }
        }
    }
    for (task, who, state, age) in &elsewhere {
        agents.insert(
            who.clone(),
            Doing::Elsewhere {
                task: task.clone(),
                since: now.checked_sub(*age).unwrap_or(now),
                state,
            },
        );
    }
    Ok(Report {
        journal: state.join(journal::FILE).display().to_string(),
        runs: runs
            .into_iter()
            .filter(|(p, _)| scope.contains(p))
            .map(|(p, (alive, at))| (p, alive, at))
            .collect(),
        agents,
        roles,
        board,
        waiting,
        review,
        claims,
        clocks_off,
        sessions,
        queue,
        totals,
        spent: rolled.total,
        by_agent: rolled.by_agent,
        by_task: rolled.by_task,
        by_cli: rolled.by_cli,
        paused,
        stopping,
        needs,
        now,
    })
}

/// Where a change in the merge queue is: being built on the one ahead (or
/// waiting for it, its work in conflict), under test (alone, or by the
/// changes behind it), passed (waiting for those ahead to land), or landed
/// by the change ahead with its own (its farm yet to release its claim).
fn queue_state(c: &InLine) -> &'static str {
    if c.record.landed.is_some() {
        return "landed with the change ahead";
    }
    match (&c.record.candidate, c.record.green) {
        (None, _) if c.record.blocked => "waiting for the change ahead to land",
        (None, _) => "building",
        (Some(_), false) if c.record.defer => "tested with the changes behind",
        (Some(_), false) if c.record.red => "red, the change ahead testing alone",
        (Some(_), false) => "testing",
        (Some(_), true) => "passed, landing in turn",
    }
}

fn queue_since(c: &InLine) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(c.record.since)
}

/// A terminal's width: `farm status` keeps every line within it.
const COLUMNS: usize = 80;

/// `s` cut to `width` characters, an ellipsis marking the cut.
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Every line of `text` cut to [`COLUMNS`].
fn fitted(text: &str) -> String {
    text.lines()
        .map(|l| fit(l.trim_end(), COLUMNS) + "\n")
        .collect()
}

/// `text` wrapped at spaces into lines of at most `width` characters, the
/// ones after the first two shorter (they are indented by two); a word
/// longer than a line is cut.
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let room = if lines.is_empty() { width } else { width - 2 };
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > room {
            lines.push(line);
            line = String::new();
        }
        let room = if lines.is_empty() { width } else { width - 2 };
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&fit(word, room));
    }
    lines.push(line);
    lines
}

/// `text` wrapped at spaces to `width`, continuation lines indented by two.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    for para in text.split('\n') {
        for (i, line) in wrap_words(para, width).iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A line of what needs you (`  KIND     what: why  (command)`) wrapped
/// within [`COLUMNS`] under its text, not cut: it ends in the command to
/// run.
fn needs_line(line: &str) -> String {
    const KIND: usize = 11;
    if !line.starts_with("  ") || line.chars().count() <= COLUMNS {
        return format!("{line}\n");
    }
    let (kind, text) = line.split_at(KIND.min(line.len()));
    let mut out = String::new();
    for (i, part) in wrap_words(text, COLUMNS - KIND).iter().enumerate() {
        out.push_str(if i == 0 { kind } else { "           " });
        out.push_str(part);
        out.push('\n');
    }
    out
}

/// "`a` (held by x), `b` (held by y) and 3 more": the first two of `items`.
fn listing(items: &[String]) -> String {
    match items.len() {
        0..=2 => items.join(", "),
        n => format!("{} and {} more", items[..2].join(", "), n - 2),
    }
}

/// How a listed session ended: its class (a failure by timeout said as
/// such, as the report does), or for a merge session what became of the
/// merge.
fn outcome(s: &Entry) -> String {
    let (result, class, exit) = match &s.event {
        Event::MergeEnd { result, .. } => (given(result), None, None),
        Event::SessionEnd { class, outcome, .. } => (None, given(class), given(outcome)),
        _ => (None, None, None),
    };
    match (result, class, exit) {
        (Some(result), ..) => format!("merge {result}"),
        (None, Some("task failed"), Some(exit @ "timed out")) => exit.to_owned(),
        (None, Some(class), _) => class.to_owned(),
        (None, None, _) => "-".to_owned(),
    }
}

/// A listed session's task and how long it took, whichever kind of
/// session it was.
fn took<'e>(s: &'e Entry<'_>) -> (&'e str, f64) {
    match &s.event {
        Event::SessionEnd { task, secs, .. } | Event::MergeEnd { task, secs, .. } => (task, *secs),
        _ => ("", 0.0),
    }
}

/// A listed session in `--json`: its line's fields, `null` where its kind
/// has none (a merge session's class, a task session's result).
fn session_json(s: &Entry) -> serde_json::Value {
    let mut doc = json!({"at": s.at, "agent": s.agent});
    let fields = match &s.event {
        Event::SessionEnd {
            task,
            outcome,
            class,
            secs,
            cost_usd,
            input_tokens,
            output_tokens,
            ..
        } => json!({
            "task": task, "outcome": given(outcome), "kind": "task", "class": given(class),
            "result": null, "secs": secs, "cost_usd": cost_usd,
            "input_tokens": input_tokens, "output_tokens": output_tokens,
        }),
        Event::MergeEnd {
            task,
            outcome,
            result,
            secs,
            cost_usd,
            input_tokens,
            output_tokens,
            ..
        } => json!({
            "task": task, "outcome": given(outcome), "kind": "merge", "class": null,
            "result": given(result), "secs": secs, "cost_usd": cost_usd,
            "input_tokens": input_tokens, "output_tokens": output_tokens,
        }),
        _ => json!({}),
    };
    if let (Some(doc), serde_json::Value::Object(fields)) = (doc.as_object_mut(), fields) {
        doc.extend(fields);
    }
    doc
}

impl Report<'_> {
    /// The pause holding the agent `name`, if one does.
    fn pause_of(&self, name: &str) -> Option<&Notice> {
        notice::pause_of(&self.paused, name, self.roles.get(name).map(String::as_str))
    }

    /// The stop that drains the agent `name` (doing `doing`), if one does.
    fn stop_of(&self, name: &str, doing: &Doing) -> Option<&Notice> {
        if matches!(doing, Doing::Ended { .. } | Doing::Elsewhere { .. }) {
            return None;
        }
        let role = self.roles.get(name).map(String::as_str);
        self.stopping.iter().find(|n| n.target.reaches(name, role))
    }

    /// What an agent is doing, with the pause or stop asked of it.
    fn doing_asked(&self, name: &str, doing: &Doing) -> String {
        let mut line = self.doing(doing);
        if let Some(n) = self.stop_of(name, doing) {
            line.push_str(&format!("; stopping (farm stop {})", self.asked(n)));
        }
        if let Some(n) = self.pause_of(name) {
            line.push_str(&format!("; paused (farm pause {})", self.asked(n)));
        }
        line
    }

    /// "by al@box (pid 4), 3m ago".
    fn asked(&self, n: &Notice) -> String {
        format!("by {}, {} ago", n.by, self.ago(n.at))
    }

    fn ago(&self, t: SystemTime) -> String {
        Age(self.now.duration_since(t).unwrap_or_default()).to_string()
    }

    /// What an agent is doing, in words.
    fn doing(&self, doing: &Doing) -> String {
        match doing {
            Doing::Working { task, since } => {
                format!("working on `{task}` for {}", self.ago(*since))
            }
            Doing::Merging { task, since } => {
                format!("merging `{task}` for {}", self.ago(*since))
            }
            Doing::Waiting { until, why } => format!(
                "waiting {} more: {why} (until {})",
                Age(until.duration_since(self.now).unwrap_or_default()),
                jiff::Timestamp::try_from(*until)
                    .map(|t| t
                        .to_zoned(jiff::tz::TimeZone::system())
                        .strftime("%H:%M")
                        .to_string())
                    .unwrap_or_default()
            ),
            Doing::Idle {
                since,
                waiting_for: Some(what),
            } => format!("waiting {} for {what}", self.ago(*since)),
            Doing::Idle { since, .. } => format!("idle for {}", self.ago(*since)),
            Doing::Ended { last, at } => match last {
                Some(task) => format!("run ended {} ago; last on `{task}`", self.ago(*at)),
                None => format!("run ended {} ago", self.ago(*at)),
            },
            Doing::Elsewhere { task, since, state } => {
                format!(
                    "holds `{task}` for {} ({state}; not this run)",
                    self.ago(*since)
                )
            }
        }
    }

    /// The report for a terminal: every line within [`COLUMNS`], long
    /// names and reasons cut with an ellipsis.
    fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |l: String| {
            out.push_str(&fit(&l, COLUMNS));
            out.push('\n');
        };
        if self.runs.is_empty() {
            line(format!("no run in the journal ({})", self.journal));
        }
        for (pid, alive, at) in &self.runs {
            let state = if *alive { "running" } else { "ended" };
            line(format!(
                "run pid {pid}: {state}, started {} ago",
                self.ago(*at)
            ));
        }
        if let Some(c) = &self.board {
            let waiting = match c.waiting {
                0 => String::new(),
                n => format!(", {n} waiting"),
            };
            line(format!(
                "board: {} ready, {} claimed, {} blocked, {} done, {} failed, {} stuck, {} invalid{waiting}",
                c.ready, c.claimed, c.blocked, c.done, c.failed, c.stuck, c.invalid
            ));
        }
        for (task, question) in &self.waiting {
            line(format!(
                "waiting for an answer: `{task}` asks: {}; farm answer {task} TEXT",
                question.lines().next().unwrap_or_default()
            ));
        }
        for (task, change) in &self.review {
            line(format!(
                "waiting for review: `{task}`'s change on `{change}`; \
                 farm approve {task}, or farm reject {task} -m WHY"
            ));
        }
        for n in &self.paused {
            line(format!(
                "paused: {}, {}: farm resume{}",
                n.target,
                self.asked(n),
                super::fleet::flags(&n.target)
            ));
        }
        for n in &self.stopping {
            line(format!("stopping: {}, {}", n.target, self.asked(n)));
        }
        if !self.queue.is_empty() {
            line(format!(
                "merge queue: {} waiting to land, tested side by side",
                self.queue.len()
            ));
            for (n, c) in self.queue.iter().enumerate() {
                line(format!(
                    "  {}. `{}` ({}): {}, queued {} ago",
                    n + 1,
                    c.record.task,
                    c.record.agent,
                    queue_state(c),
                    self.ago(queue_since(c))
                ));
            }
        }
        if !self.agents.is_empty() {
            // AGENT (and ROLE) columns, then what each does, wrapped under
            // its column rather than cut: the why is the point of the line.
            let roles = !self.roles.is_empty();
            let name_w = self
                .agents
                .keys()
                .map(|n| n.chars().count())
                .max()
                .unwrap_or(0)
                .clamp(5, 24);
            let role_w = self
                .roles
                .values()
                .map(|r| r.chars().count())
                .max()
                .unwrap_or(0)
                .clamp(4, 12);
            let left = name_w + 2 + if roles { role_w + 2 } else { 0 };
            let head = if roles {
                format!("{:<name_w$}  {:<role_w$}  DOING", "AGENT", "ROLE")
            } else {
                format!("{:<name_w$}  DOING", "AGENT")
            };
            out.push('\n');
            out.push_str(&head);
            out.push('\n');
            for (name, doing) in &self.agents {
                let mut first = format!("{:<name_w$}  ", fit(name, name_w));
                if roles {
                    let role = self.roles.get(name).map_or("-", String::as_str);
                    first.push_str(&format!("{:<role_w$}  ", fit(role, role_w)));
                }
                for (i, part) in wrap_words(&self.doing_asked(name, doing), COLUMNS - left)
                    .iter()
                    .enumerate()
                {
                    if i == 0 {
                        out.push_str(&first);
                    } else {
                        out.push_str(&" ".repeat(left + 2));
                    }
                    out.push_str(part);
                    out.push('\n');
                }
            }
        }
        for (host, secs) in &self.clocks_off {
            out.push_str(&wrap(
                &format!("clock: {}", crate::claims::clock_off_line(host, *secs)),
                COLUMNS,
            ));
        }
        if !self.claims.is_empty() {
            let rows: Vec<Vec<(String, Option<Style>)>> = self
                .claims
                .iter()
                .map(|(task, who, state, age)| {
                    vec![
                        (fit(task, 24), None),
                        (fit(who, 30), None),
                        ((*state).to_owned(), None),
                        (Age(*age).to_string(), None),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&fitted(&table(
                &["CLAIM", "HELD BY", "STATE", "AGE"],
                &rows,
                false,
            )));
        }
        if !self.sessions.is_empty() {
            let rows: Vec<Vec<(String, Option<Style>)>> = self
                .sessions
                .iter()
                .map(|s| {
                    let (task, secs) = took(s);
                    vec![
                        (format!("{} ago", self.ago(time(&s.at))), None),
                        (fit(s.agent.as_deref().unwrap_or("-"), 16), None),
                        (fit(given(task).unwrap_or("-"), 22), None),
                        (
                            Age(Duration::from_secs_f64(secs.max(0.0))).to_string(),
                            None,
                        ),
                        (outcome(s), None),
                    ]
                })
                .collect();
            out.push_str("\nLAST SESSIONS\n");
            out.push_str(&fitted(&table(
                &["ENDED", "AGENT", "TASK", "TOOK", "OUTCOME"],
                &rows,
                false,
            )));
        }
        let totals: Vec<String> = self
            .totals
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        if !totals.is_empty() {
            out.push_str(&wrap(&format!("\ntotals: {}", totals.join(", ")), COLUMNS));
        }
        let mut spent = Vec::new();
        if let Some(usd) = self.spent.cost_usd {
            spent.push(format!("cost: ${usd:.2}"));
        }
        if let (Some(i), Some(o)) = (self.spent.input_tokens, self.spent.output_tokens) {
            spent.push(format!("tokens: {i} in, {o} out"));
        }
        if !spent.is_empty() {
            out.push_str(&fit(&spent.join(", "), COLUMNS));
            out.push('\n');
        }
        // What each agent's sessions cost, where the CLI said.
        if self
            .by_agent
            .values()
            .any(|s| s.cost_usd.is_some() || s.input_tokens.is_some())
        {
            let rows: Vec<Vec<(String, Option<Style>)>> = self
                .by_agent
                .iter()
                .map(|(agent, s)| {
                    let n = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
                    vec![
                        (fit(agent, 20), None),
                        (s.sessions.to_string(), None),
                        (
                            s.cost_usd.map_or("-".to_owned(), |c| format!("${c:.2}")),
                            None,
                        ),
                        (n(s.input_tokens), None),
                        (n(s.output_tokens), None),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&fitted(&table(
                &["AGENT", "SESSIONS", "COST", "TOKENS IN", "TOKENS OUT"],
                &rows,
                false,
            )));
        }
        // Last, where the eye lands when the output ends: what needs you.
        // Wrapped, not cut: each line ends in the command to run.
        out.push('\n');
        for l in self.needs.lines() {
            out.push_str(&needs_line(&l));
        }
        out
    }

    /// An agent in `--json`, by what it is doing.
    fn agent_json(&self, name: &str, doing: &Doing, role: Option<&String>) -> serde_json::Value {
        match doing {
            Doing::Working { task, since } => json!({
                "agent": name, "role": role, "state": "working", "task": task,
                "since": crate::claims::record::timestamp(*since),
            }),
            Doing::Merging { task, since } => json!({
                "agent": name, "role": role, "state": "merging", "task": task,
                "since": crate::claims::record::timestamp(*since),
            }),
            Doing::Waiting { until, why } => json!({
                "agent": name, "role": role, "state": "waiting", "why": why,
                "until": crate::claims::record::timestamp(*until),
            }),
            Doing::Idle { since, waiting_for } => json!({
                "agent": name, "role": role, "state": "idle",
                "since": crate::claims::record::timestamp(*since),
                "waiting_for": waiting_for,
            }),
            Doing::Elsewhere { task, since, state } => json!({
                "agent": name, "role": role, "state": "elsewhere", "task": task,
                "claim": state,
                "since": crate::claims::record::timestamp(*since),
            }),
            Doing::Ended { last, at } => json!({
                "agent": name, "role": role, "state": "ended", "last_task": last,
                "since": crate::claims::record::timestamp(*at),
            }),
        }
    }

    fn json(&self) -> serde_json::Value {
        let asked = |n: Option<&Notice>| json!(n.map(super::fleet::notice_json));
        let agents: Vec<_> = self
            .agents
            .iter()
            .map(|(name, doing)| (name, doing, self.roles.get(name)))
            .map(|(name, doing, role)| {
                let mut doc = self.agent_json(name, doing, role);
                doc["paused"] = asked(self.pause_of(name));
                doc["stopping"] = asked(self.stop_of(name, doing));
                doc
            })
            .collect();
        json!({
            "journal": self.journal,
            "runs": self.runs.iter().map(|(pid, alive, at)| json!({
                "pid": pid, "running": alive, "started": crate::claims::record::timestamp(*at),
            })).collect::<Vec<_>>(),
            "agents": agents,
            "paused": self.paused.iter().map(super::fleet::notice_json).collect::<Vec<_>>(),
            "stopping": self.stopping.iter().map(super::fleet::notice_json).collect::<Vec<_>>(),
            "board": self.board.as_ref().map(|c| json!(c)),
            "waiting": self.waiting.iter().map(|(task, question)| json!({
                "task": task, "question": question,
            })).collect::<Vec<_>>(),
            "review": self.review.iter().map(|(task, change)| json!({
                "task": task, "change": change,
                "approve_with": format!("farm approve {task}"),
                "reject_with": format!("farm reject {task} -m WHY"),
            })).collect::<Vec<_>>(),
            "claims": self.claims.iter().map(|(task, who, state, age)| json!({
                "task": task, "held_by": who, "state": state, "age_secs": age.as_secs(),
            })).collect::<Vec<_>>(),
            "clocks_off_secs": self.clocks_off,
            "sessions": self.sessions.iter().map(session_json).collect::<Vec<_>>(),
            "queue": self.queue.iter().map(|c| json!({
                "task": c.record.task, "agent": c.record.agent, "state": queue_state(c),
                "candidate": c.record.candidate,
                "since": crate::claims::record::timestamp(queue_since(c)),
            })).collect::<Vec<_>>(),
            "totals": self.totals,
            "cost_usd": self.spent.cost_usd,
            "input_tokens": self.spent.input_tokens,
            "output_tokens": self.spent.output_tokens,
            "by_agent": self.by_agent,
            "by_task": self.by_task,
            "by_cli": self.by_cli,
            "needs_you": self.needs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_words_are_cut_and_lines_wrap_within_the_width() {
        let lines = wrap_words(
            "waiting 3m for `a-very-long-task-name` (held by bob@box2)",
            20,
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
        assert_eq!(lines[0], "waiting 3m for");
        assert_eq!(lines[1], "`a-very-long-task…");
        assert_eq!(lines.last().unwrap(), "(held by bob@box2)");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
        let text = wrap("totals: 1 done, 2 sessions, 3 merge sessions", 20);
        assert!(text.lines().all(|l| l.chars().count() <= 20), "{text}");
        assert!(text.lines().skip(1).all(|l| l.starts_with("  ")), "{text}");
    }

    #[test]
    fn a_change_in_line_says_where_it_is() {
        use crate::run::queue::Record;
        let at = |candidate: Option<&str>, green, landed: Option<&str>| InLine {
            place: 1,
            record: Record {
                candidate: candidate.map(str::to_owned),
                green,
                landed: landed.map(str::to_owned),
                ..Record::default()
            },
            text: Vec::new(),
        };
        assert_eq!(queue_state(&at(None, false, None)), "building");
        assert_eq!(queue_state(&at(Some("c"), false, None)), "testing");
        assert_eq!(
            queue_state(&at(Some("c"), true, None)),
            "passed, landing in turn"
        );
        assert_eq!(
            queue_state(&at(Some("c"), true, Some("d"))),
            "landed with the change ahead"
        );
    }
}
