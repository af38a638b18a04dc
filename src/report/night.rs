//! The night as the journal tells it: which runs it covers, one lane per
//! agent with its sessions and its waits, the tasks done over time, and what
//! the sessions cost. Everything [`html`](super::html) and
//! [`trace`](super::trace) draw comes from here; nothing here draws.
//!
//! Times are seconds since the Unix epoch (f64): the journal's are RFC 3339
//! with milliseconds, and a chart needs arithmetic on them, not calendars.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::run::event::Limited;
use crate::run::journal::{Entry, Event, given};

/// How a session ended, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Done,
    Failed,
    TimedOut,
    UsageLimit,
    ApiError,
    Merge,
    Rescued,
    /// Interrupted, taken over, did not start, or not settled in the journal.
    Other,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Done,
        Kind::Failed,
        Kind::TimedOut,
        Kind::UsageLimit,
        Kind::ApiError,
        Kind::Merge,
        Kind::Rescued,
        Kind::Other,
    ];

    /// A word for the legend, the tooltips and the trace.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Done => "done",
            Kind::Failed => "failed",
            Kind::TimedOut => "timed out",
            Kind::UsageLimit => "usage limit",
            Kind::ApiError => "API error",
            Kind::Merge => "merge session",
            Kind::Rescued => "rescued",
            Kind::Other => "other",
        }
    }

    /// The CSS class of its bars.
    pub fn class(self) -> &'static str {
        match self {
            Kind::Done => "done",
            Kind::Failed => "failed",
            Kind::TimedOut => "timeout",
            Kind::UsageLimit => "limit",
            Kind::ApiError => "api",
            Kind::Merge => "merge",
            Kind::Rescued => "rescued",
            Kind::Other => "other",
        }
    }
}

/// One session: a bar in its agent's lane.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    /// The lane's index in [`Night::lanes`].
    pub lane: usize,
    pub task: String,
    pub attempt: Option<u32>,
    pub start: f64,
    pub secs: f64,
    pub kind: Kind,
    /// The session's own end: "success", "failed with exit code 1"…, and
    /// for a merge session what became of the merge.
    pub outcome: String,
    pub log: Option<String>,
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// Why an agent waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    UsageLimit,
    ApiError,
    Breaker,
}

impl Why {
    pub fn label(self) -> &'static str {
        match self {
            Why::UsageLimit => "waiting for a usage limit",
            Why::ApiError => "backing off an API error",
            Why::Breaker => "circuit breaker pause",
        }
    }
}

/// A wait in an agent's lane: a usage limit, an API error's back-off, or
/// the circuit breaker's pause.
#[derive(Debug, Clone, Serialize)]
pub struct Wait {
    pub lane: usize,
    pub start: f64,
    pub end: f64,
    pub why: Why,
}

/// An agent's waits for one reason that overlap, as one: the agent whose
/// session hit a limit journals the limit and then its own wait for it, and
/// a wait that grows is journaled again.
fn merged(mut waits: Vec<Wait>) -> Vec<Wait> {
    waits.sort_by(|a, b| {
        (a.lane, a.start)
            .partial_cmp(&(b.lane, b.start))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut out: Vec<Wait> = Vec::with_capacity(waits.len());
    for w in waits {
        match out.last_mut() {
            Some(last) if last.lane == w.lane && last.why == w.why && w.start <= last.end => {
                last.end = last.end.max(w.end);
            }
            _ => out.push(w),
        }
    }
    out
}

/// A run of `farm run` in the night.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpan {
    pub pid: u32,
    pub host: Option<String>,
    pub start: f64,
    /// Its `run_end`, or its last line (a run killed says nothing more).
    pub end: f64,
    pub ended: bool,
}

/// What a group of sessions cost, as the CLIs said.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spent {
    pub sessions: usize,
    pub secs: f64,
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

impl Spent {
    pub fn add(&mut self, s: &Session) {
        self.count(s.secs, s.cost_usd, s.input_tokens, s.output_tokens);
    }

    /// Count one session of `secs` that cost what its CLI said.
    fn count(&mut self, secs: f64, usd: Option<f64>, input: Option<u64>, output: Option<u64>) {
        self.sessions += 1;
        self.secs += secs;
        if let Some(usd) = usd {
            *self.cost_usd.get_or_insert(0.0) += usd;
        }
        if let Some(n) = input {
            *self.input_tokens.get_or_insert(0) += n;
        }
        if let Some(n) = output {
            *self.output_tokens.get_or_insert(0) += n;
        }
    }
}

/// What the sessions of some journal lines cost: in all, and by agent, task
/// and agent CLI (the program of `--agent`, for runs that said it).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Rollup {
    pub total: Spent,
    pub by_agent: BTreeMap<String, Spent>,
    pub by_task: BTreeMap<String, Spent>,
    pub by_cli: BTreeMap<String, Spent>,
}

/// Roll up the sessions (`session_end`, `merge_end`) of `lines`, oldest
/// first; a run's `run_start` names its CLI. Nothing else of the night is
/// built: `farm status` on 10,000 sessions spent 40 of its 110 ms building
/// the whole night for these sums.
pub fn rollup(lines: &[&Entry]) -> Rollup {
    /// One session's seconds, cost and tokens.
    type Cost = (f64, Option<f64>, Option<u64>, Option<u64>);
    fn spend(spent: &mut Spent, (secs, usd, input, output): Cost) {
        spent.count(secs, usd, input, output);
    }
    fn count(map: &mut BTreeMap<String, Spent>, key: &str, cost: Cost) {
        // Look up before inserting: most keys (agents, CLIs) repeat, and an
        // owned key for each lookup was the cost.
        let spent = match map.get_mut(key) {
            Some(s) => s,
            None => map.entry(key.to_owned()).or_default(),
        };
        spend(spent, cost);
    }
    let mut r = Rollup::default();
    let mut cli_of: BTreeMap<u32, &str> = BTreeMap::new();
    for e in lines {
        match &e.event {
            Event::RunStart { cli: Some(cli), .. } => {
                cli_of.insert(e.pid, cli);
            }
            Event::SessionEnd {
                task,
                secs,
                cost_usd,
                input_tokens,
                output_tokens,
                ..
            }
            | Event::MergeEnd {
                task,
                secs,
                cost_usd,
                input_tokens,
                output_tokens,
                ..
            } => {
                let Some(agent) = e.agent.as_deref() else {
                    continue;
                };
                let cost = (secs.max(0.0), *cost_usd, *input_tokens, *output_tokens);
                spend(&mut r.total, cost);
                count(&mut r.by_agent, agent, cost);
                count(&mut r.by_task, task, cost);
                count(
                    &mut r.by_cli,
                    cli_of.get(&e.pid).copied().unwrap_or("unknown"),
                    cost,
                );
            }
            _ => {}
        }
    }
    r
}

/// The night.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Night {
    pub start: f64,
    pub end: f64,
    pub runs: Vec<RunSpan>,
    /// Agent names, in the order their runs listed them.
    pub lanes: Vec<String>,
    pub sessions: Vec<Session>,
    pub waits: Vec<Wait>,
    /// When each task was done, in time order.
    pub done: Vec<(f64, String)>,
    /// How long each change waited in the merge queue, in seconds, in the
    /// order they left it.
    pub queued: Vec<f64>,
    /// Sessions per kind.
    pub counts: BTreeMap<Kind, usize>,
    pub total: Spent,
    pub by_agent: BTreeMap<String, Spent>,
    pub by_task: BTreeMap<String, Spent>,
    /// By agent CLI (the program of `--agent`), for runs that said it.
    pub by_cli: BTreeMap<String, Spent>,
}

/// An RFC 3339 time in seconds since the epoch (0 for a bad one).
pub fn secs(at: &str) -> f64 {
    humantime::parse_rfc3339_weak(at)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Which runs of the journal a report covers.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// The latest run, and the runs before it each of which ended less than
    /// [`NIGHT_GAP`] before the next began: a night under `loop.sh` is many
    /// runs.
    LastNight,
    /// The run of this process id.
    Run(u32),
    /// Every line in this time range (seconds since the epoch).
    Range { from: f64, to: f64 },
}

/// Runs further apart than this are not the same night.
pub const NIGHT_GAP: f64 = 30.0 * 60.0;

/// The runs of `entries`, in the order they started.
pub fn runs(entries: &[Entry]) -> Vec<RunSpan> {
    let mut runs: Vec<RunSpan> = Vec::new();
    let mut open: BTreeMap<u32, usize> = BTreeMap::new();
    for e in entries {
        let at = secs(&e.at);
        match &e.event {
            Event::RunStart { host, .. } => {
                open.insert(e.pid, runs.len());
                runs.push(RunSpan {
                    pid: e.pid,
                    host: given(host).map(str::to_owned),
                    start: at,
                    end: at,
                    ended: false,
                });
            }
            event => {
                if let Some(&i) = open.get(&e.pid) {
                    runs[i].end = runs[i].end.max(at);
                    if matches!(event, Event::RunEnd { .. }) {
                        runs[i].ended = true;
                        open.remove(&e.pid);
                    }
                }
            }
        }
    }
    runs
}

/// The lines of `entries` that `scope` covers, and its runs.
pub fn select<'a, 'j>(
    entries: &'a [Entry<'j>],
    scope: &Scope,
) -> (Vec<&'a Entry<'j>>, Vec<RunSpan>) {
    let all = runs(entries);
    let chosen: Vec<RunSpan> = match scope {
        Scope::Run(pid) => all.into_iter().filter(|r| r.pid == *pid).collect(),
        Scope::Range { from, to } => all
            .into_iter()
            .filter(|r| r.end >= *from && r.start <= *to)
            .collect(),
        Scope::LastNight => {
            let mut night: Vec<RunSpan> = Vec::new();
            let mut from = f64::INFINITY;
            for r in all.into_iter().rev() {
                if night.is_empty() || r.end + NIGHT_GAP >= from {
                    from = from.min(r.start);
                    night.push(r);
                }
            }
            night.reverse();
            night
        }
    };
    let lines = entries
        .iter()
        .filter(|e| match scope {
            Scope::Range { from, to } => (*from..=*to).contains(&secs(&e.at)),
            _ => chosen
                .iter()
                .any(|r| r.pid == e.pid && (r.start..=r.end).contains(&secs(&e.at))),
        })
        .collect();
    (lines, chosen)
}

impl Night {
    /// The night of `lines` (one scope's, oldest first) and its `runs`.
    /// `cli` names the agent CLI of a run's pid, where its `run_start` said.
    pub fn new(lines: &[&Entry], runs: Vec<RunSpan>) -> Night {
        let mut night = Night {
            start: runs.iter().map(|r| r.start).fold(f64::INFINITY, f64::min),
            end: runs.iter().map(|r| r.end).fold(f64::NEG_INFINITY, f64::max),
            runs,
            ..Night::default()
        };
        let mut lane_of: BTreeMap<String, usize> = BTreeMap::new();
        // Each agent's latest session of each task not settled yet: a later
        // settle line says how it ended. Not only the agent's last session:
        // an integration beside the loop settles its task after the agent
        // claimed the next one.
        let mut open: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut lane = |night: &mut Night, agent: &str| -> usize {
            *lane_of.entry(agent.to_owned()).or_insert_with(|| {
                night.lanes.push(agent.to_owned());
                night.lanes.len() - 1
            })
        };
        for e in lines {
            let at = secs(&e.at);
            night.start = night.start.min(at);
            night.end = night.end.max(at);
            if let Event::RunStart { agents, .. } = &e.event {
                for a in agents {
                    lane(&mut night, a);
                }
                continue;
            }
            let Some(agent) = e.agent.as_deref() else {
                continue;
            };
            let l = lane(&mut night, agent);
            match &e.event {
                Event::SessionEnd {
                    task,
                    attempt,
                    outcome,
                    class,
                    secs,
                    log,
                    cost_usd,
                    input_tokens,
                    output_tokens,
                } => {
                    let secs = secs.max(0.0);
                    let kind = match class.as_ref() {
                        "usage limit" => Kind::UsageLimit,
                        "api error" => Kind::ApiError,
                        _ => Kind::Other,
                    };
                    open.insert((agent.to_owned(), task.to_string()), night.sessions.len());
                    night.sessions.push(Session {
                        lane: l,
                        task: task.to_string(),
                        attempt: Some(*attempt).filter(|a| *a > 0),
                        start: at - secs,
                        secs,
                        kind,
                        outcome: outcome.to_string(),
                        log: given(log).map(str::to_owned),
                        cost_usd: *cost_usd,
                        input_tokens: *input_tokens,
                        output_tokens: *output_tokens,
                    });
                }
                Event::MergeEnd {
                    task,
                    outcome,
                    result,
                    secs,
                    log,
                    cost_usd,
                    input_tokens,
                    output_tokens,
                } => {
                    let secs = secs.max(0.0);
                    let outcome = match (given(result), given(outcome)) {
                        (Some(r), Some(o)) => format!("merge {r} ({o})"),
                        (None, Some(o)) => o.to_owned(),
                        (Some(r), None) => format!("merge {r}"),
                        (None, None) => String::new(),
                    };
                    night.sessions.push(Session {
                        lane: l,
                        task: task.to_string(),
                        attempt: None,
                        start: at - secs,
                        secs,
                        kind: Kind::Merge,
                        outcome,
                        log: given(log).map(str::to_owned),
                        cost_usd: *cost_usd,
                        input_tokens: *input_tokens,
                        output_tokens: *output_tokens,
                    });
                }
                Event::Done { task }
                | Event::Failed { task, .. }
                | Event::Rescue {
                    task: Some(task), ..
                } => {
                    let event = &e.event;
                    if let Event::Done { .. } = event {
                        night.done.push((at, task.to_string()));
                    }
                    let key = (agent.to_owned(), task.to_string());
                    let Some(&i) = open.get(&key) else { continue };
                    if !matches!(event, Event::Rescue { .. }) {
                        open.remove(&key);
                    }
                    let s = &mut night.sessions[i];
                    if matches!(s.kind, Kind::UsageLimit | Kind::ApiError) {
                        continue;
                    }
                    s.kind = match (event, s.kind) {
                        (Event::Done { .. }, _) => Kind::Done,
                        (Event::Failed { .. }, _) if s.outcome == "timed out" => Kind::TimedOut,
                        (Event::Failed { .. }, _) => Kind::Failed,
                        // A rescue then a failure is a failure; a rescue
                        // alone is work kept aside.
                        (_, Kind::Other) => Kind::Rescued,
                        (_, k) => k,
                    };
                }
                Event::Limit { until, why, .. } | Event::Wait { until, why, .. } => {
                    night.waits.push(Wait {
                        lane: l,
                        start: at,
                        end: given(until).map_or(at, secs),
                        why: match why {
                            Limited::ApiError => Why::ApiError,
                            Limited::UsageLimit => Why::UsageLimit,
                        },
                    })
                }
                Event::Unqueued { secs, .. } => night.queued.push(*secs),
                Event::Trip { until, .. } => night.waits.push(Wait {
                    lane: l,
                    start: at,
                    end: given(until).map_or(at, secs),
                    why: Why::Breaker,
                }),
                _ => {}
            }
        }
        let Rollup {
            total,
            by_agent,
            by_task,
            by_cli,
        } = rollup(lines);
        (night.total, night.by_agent, night.by_task, night.by_cli) =
            (total, by_agent, by_task, by_cli);
        // A wait is cut where its run ended: an agent waits no more once
        // its run is over.
        let end = night.end;
        for w in &mut night.waits {
            w.end = w.end.min(end).max(w.start);
        }
        night.waits = merged(std::mem::take(&mut night.waits));
        for s in &night.sessions {
            *night.counts.entry(s.kind).or_default() += 1;
        }
        if !night.start.is_finite() {
            (night.start, night.end) = (0.0, 0.0);
        }
        night
    }

    /// The night's length in seconds.
    pub fn span(&self) -> f64 {
        (self.end - self.start).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> Entry<'_> {
        serde_json::from_str(line).unwrap()
    }

    fn journal<'j>(lines: &[&'j str]) -> Vec<Entry<'j>> {
        lines.iter().map(|l| entry(l)).collect()
    }

    const T0: &str = "2026-12-01T00:00:00.000Z";

    fn at(secs: u32) -> String {
        format!("2026-12-01T00:{:02}:{:02}.000Z", secs / 60, secs % 60)
    }

    #[test]
    fn sessions_take_the_colour_of_how_their_task_settled() {
        let l = |s: u32, rest: &str| format!(r#"{{"at":"{}","pid":7,{rest}}}"#, at(s));
        let lines = [
            format!(
                r#"{{"at":"{T0}","pid":7,"event":"run_start","agents":["b","a"],"cli":"claude"}}"#
            ),
            l(1, r#""agent":"a","event":"claim","task":"t1","attempt":1"#),
            l(
                10,
                r#""agent":"a","event":"session_end","task":"t1","attempt":1,"outcome":"success","class":"success","secs":9.0,"cost_usd":0.5,"input_tokens":10,"output_tokens":2"#,
            ),
            // t1 is integrated beside the loop: done after the next claim.
            l(11, r#""agent":"a","event":"claim","task":"t4","attempt":1"#),
            l(11, r#""agent":"a","event":"done","task":"t1""#),
            l(12, r#""agent":"b","event":"claim","task":"t2","attempt":1"#),
            l(
                20,
                r#""agent":"b","event":"session_end","task":"t2","attempt":1,"outcome":"timed out","class":"task failed","secs":8.0"#,
            ),
            l(21, r#""agent":"b","event":"rescue","task":"t2""#),
            l(
                21,
                r#""agent":"b","event":"failed","task":"t2","attempt":1"#,
            ),
            l(22, r#""agent":"b","event":"claim","task":"t3","attempt":1"#),
            l(
                30,
                r#""agent":"b","event":"session_end","task":"t3","attempt":1,"outcome":"failed with exit code 1","class":"usage limit","secs":8.0,"cost_usd":0.25"#,
            ),
            l(
                30,
                r#""agent":"b","event":"limit","task":"t3","until":"2026-12-01T01:00:00.000Z","why":"usage limit""#,
            ),
            // b's loop then waits for its own limit (one wait in its lane);
            // a's loop, once its session ends, for b's.
            l(
                31,
                r#""agent":"b","event":"wait","until":"2026-12-01T01:00:00.000Z","why":"usage limit","by":"b","task":"t3""#,
            ),
            l(
                47,
                r#""agent":"a","event":"wait","until":"2026-12-01T01:00:00.000Z","why":"usage limit","by":"b","task":"t3""#,
            ),
            l(
                40,
                r#""agent":"a","event":"session_end","task":"t4","attempt":1,"outcome":"success","class":"success","secs":9.0"#,
            ),
            l(
                45,
                r#""agent":"a","event":"merge_end","task":"t4","outcome":"success","result":"unresolved","secs":4.0"#,
            ),
            l(46, r#""agent":"a","event":"rescue","task":"t4""#),
            l(50, r#""event":"run_end""#),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let entries = journal(&lines);
        let (scoped, runs) = select(&entries, &Scope::LastNight);
        let night = Night::new(&scoped, runs);
        assert_eq!(night.lanes, ["b", "a"]);
        let kinds: Vec<(&str, Kind)> = night
            .sessions
            .iter()
            .map(|s| (s.task.as_str(), s.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("t1", Kind::Done),
                ("t2", Kind::TimedOut),
                ("t3", Kind::UsageLimit),
                ("t4", Kind::Rescued),
                ("t4", Kind::Merge),
            ]
        );
        assert_eq!(night.sessions[0].start, secs(&at(1)));
        assert_eq!(night.sessions[4].outcome, "merge unresolved (success)");
        // The limit's wait is cut at the run's end; each agent that waited
        // has its wait, b's limit and its own wait for it being one.
        assert_eq!(night.waits.len(), 2, "{:?}", night.waits);
        assert!(night.waits.iter().all(|w| w.why == Why::UsageLimit));
        assert!(night.waits.iter().all(|w| w.end == secs(&at(50))));
        let starts: Vec<(usize, f64)> = night.waits.iter().map(|w| (w.lane, w.start)).collect();
        assert_eq!(starts, [(0, secs(&at(30))), (1, secs(&at(47)))]);
        assert_eq!(night.done, [(secs(&at(11)), "t1".to_owned())]);
        assert_eq!(night.total.sessions, 5);
        assert_eq!(night.total.cost_usd, Some(0.75));
        assert_eq!(night.by_agent["a"].sessions, 3);
        assert_eq!(night.by_task["t4"].secs, 13.0);
        assert_eq!(night.by_cli["claude"].sessions, 5);
        assert_eq!(night.counts[&Kind::Done], 1);
        assert_eq!(night.span(), 50.0);
    }

    #[test]
    fn the_last_night_joins_runs_closer_than_the_gap() {
        let run = |pid: u32, from: u32, to: u32| {
            [
                format!(r#"{{"at":"{}","pid":{pid},"event":"run_start"}}"#, at(from)),
                format!(r#"{{"at":"{}","pid":{pid},"event":"run_end"}}"#, at(to)),
            ]
        };
        // Minutes: 0–1 (pid 1), then 40–41 (2) and 50–51 (3), 9 minutes apart.
        let mut lines = Vec::new();
        lines.extend(run(1, 0, 60));
        lines.extend(run(2, 2400, 2460));
        lines.extend(run(3, 3000, 3060));
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let entries = journal(&lines);
        let pids = |scope: Scope| -> Vec<u32> {
            select(&entries, &scope).1.iter().map(|r| r.pid).collect()
        };
        assert_eq!(pids(Scope::LastNight), [2, 3]);
        assert_eq!(pids(Scope::Run(1)), [1]);
        let (from, to) = (secs(&at(0)), secs(&at(2450)));
        assert_eq!(pids(Scope::Range { from, to }), [1, 2]);
        assert_eq!(select(&entries, &Scope::Range { from, to }).0.len(), 3);
    }
}
