//! A night's journal, generated: `agents` agents running `sessions`
//! sessions between them, as `farm run` journals them — claims, session
//! ends, merge sessions, done/failed/rescue lines, usage-limit and API-error
//! waits, circuit-breaker pauses, costs and tokens. Deterministic (no
//! randomness: the mix follows the session's number), so that what a report
//! must show can be counted from the same numbers. Shared by the report's
//! browser test (`tests/it/report.rs`) and its benchmark
//! (`benches/report.rs`), each of which includes it with `#[path]`.

#![allow(dead_code)]

use std::time::{Duration, SystemTime};

/// The journal and what it holds.
pub struct Made {
    pub journal: String,
    /// session_end and merge_end lines.
    pub sessions: usize,
    /// `done` lines.
    pub done: usize,
    /// The sum of the sessions' costs, in cents (exact).
    pub cost_cents: u64,
    pub waits: usize,
}

fn at(t: f64) -> String {
    humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(t))
        .to_string()
}

/// The journal of one run of `agents` agents and `sessions` sessions,
/// starting at `start` (seconds since the epoch), with process id `pid`.
pub fn night(agents: usize, sessions: usize, start: f64, pid: u32) -> Made {
    let names: Vec<String> = (1..=agents).map(|i| format!("agent-{i}")).collect();
    let mut out = String::new();
    let mut line = |t: f64, agent: Option<&str>, event: &str, rest: &str| {
        let agent = agent.map_or(String::new(), |a| format!(",\"agent\":\"{a}\""));
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!(",{rest}")
        };
        out.push_str(&format!(
            "{{\"at\":\"{}\",\"pid\":{pid}{agent},\"event\":\"{event}\"{rest}}}\n",
            at(t)
        ));
    };
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    line(
        start,
        None,
        "run_start",
        &format!(
            "\"agents\":[{}],\"cli\":\"claude\",\"host\":\"vm\"",
            list.join(",")
        ),
    );
    // Each agent's clock: staggered starts.
    let mut clock: Vec<f64> = (0..agents).map(|a| start + 2.0 + a as f64 * 3.0).collect();
    let (mut made, mut done, mut cents, mut waits) = (0, 0, 0u64, 0);
    let mut i = 0usize;
    while made < sessions {
        let a = i % agents;
        let agent = names[a].as_str();
        let task = format!("task-{i:05}");
        let secs = 60.0 + ((i * 7919) % 540) as f64 + 0.25;
        let cost = 5 + (i % 11) as u64; // cents
        let t = clock[a];
        line(
            t,
            Some(agent),
            "claim",
            &format!("\"task\":\"{task}\",\"attempt\":1"),
        );
        let kind = i % 20;
        let (outcome, class) = match kind {
            15 => ("timed out", "task failed"),
            16 => ("failed with exit code 1", "usage limit"),
            17 => ("failed with exit code 1", "api error"),
            14 => ("failed with exit code 1", "task failed"),
            _ => ("success", "success"),
        };
        let end = t + secs;
        line(
            end,
            Some(agent),
            "session_end",
            &format!(
                "\"task\":\"{task}\",\"attempt\":1,\"outcome\":\"{outcome}\",\"class\":\"{class}\",\
                 \"secs\":{secs},\"log\":\"/state/logs/{agent}/{task}.log\",\"cost_usd\":{},\
                 \"input_tokens\":{},\"output_tokens\":{}",
                cost as f64 / 100.0,
                1000 + i,
                100 + i % 50
            ),
        );
        made += 1;
        cents += cost;
        let mut next = end + 1.5;
        match kind {
            14 | 15 => {
                line(
                    end + 0.5,
                    Some(agent),
                    "rescue",
                    &format!("\"task\":\"{task}\""),
                );
                line(
                    end + 0.6,
                    Some(agent),
                    "failed",
                    &format!("\"task\":\"{task}\",\"attempt\":1,\"gave_up\":false"),
                );
                if kind == 15 {
                    line(
                        end + 0.7,
                        Some(agent),
                        "trip",
                        &format!(
                            "\"until\":\"{}\",\"why\":\"2 failed sessions in a row\"",
                            at(end + 60.7)
                        ),
                    );
                    waits += 1;
                    next = end + 61.0;
                }
            }
            16 | 17 => {
                let (why, wait) = if kind == 16 {
                    ("usage limit", 300.0)
                } else {
                    ("api error", 30.0)
                };
                line(
                    end + 0.5,
                    Some(agent),
                    "limit",
                    &format!(
                        "\"task\":\"{task}\",\"until\":\"{}\",\"why\":\"{why}\"",
                        at(end + 0.5 + wait)
                    ),
                );
                waits += 1;
                next = end + 1.0 + wait;
            }
            19 => {
                line(
                    end + 0.5,
                    Some(agent),
                    "rescue",
                    &format!("\"task\":\"{task}\""),
                );
            }
            18 if made < sessions => {
                let m = 20.0 + (i % 40) as f64;
                line(
                    end + m,
                    Some(agent),
                    "merge_end",
                    &format!(
                        "\"task\":\"{task}\",\"outcome\":\"success\",\"result\":\"resolved\",\
                         \"secs\":{m},\"cost_usd\":0.05"
                    ),
                );
                made += 1;
                cents += 5;
                line(
                    end + m + 1.0,
                    Some(agent),
                    "done",
                    &format!("\"task\":\"{task}\""),
                );
                done += 1;
                next = end + m + 2.0;
            }
            _ => {
                line(
                    end + 1.0,
                    Some(agent),
                    "done",
                    &format!("\"task\":\"{task}\""),
                );
                done += 1;
            }
        }
        clock[a] = next;
        i += 1;
    }
    let last = clock.iter().copied().fold(start, f64::max);
    line(
        last + 1.0,
        None,
        "run_end",
        &format!("\"sessions\":{made},\"done\":{done}"),
    );
    Made {
        journal: out,
        sessions: made,
        done,
        cost_cents: cents,
        waits,
    }
}
