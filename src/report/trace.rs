//! The night as Chrome trace JSON (the Trace Event Format), for Perfetto or
//! `chrome://tracing`: one thread per agent, each session a complete event
//! (`"ph": "X"`) named after its task, each wait one too, and the tasks done
//! as a counter. Times are microseconds from the night's start.

use serde_json::{Value, json};

use super::night::Night;

/// The trace of `night`.
pub fn trace(night: &Night) -> Value {
    let us = |t: f64| ((t - night.start) * 1e6).round().max(0.0);
    let mut events = vec![json!({
        "ph": "M", "pid": 1, "name": "process_name", "args": {"name": "farm"},
    })];
    for (i, lane) in night.lanes.iter().enumerate() {
        events.push(json!({
            "ph": "M", "pid": 1, "tid": i + 1, "name": "thread_name", "args": {"name": lane},
        }));
    }
    for s in &night.sessions {
        events.push(json!({
            "ph": "X", "pid": 1, "tid": s.lane + 1,
            "name": s.task, "cat": s.kind.label(),
            "ts": us(s.start), "dur": (s.secs * 1e6).round(),
            "args": {
                "attempt": s.attempt, "outcome": s.outcome, "log": s.log,
                "cost_usd": s.cost_usd, "input_tokens": s.input_tokens,
                "output_tokens": s.output_tokens,
            },
        }));
    }
    for w in &night.waits {
        events.push(json!({
            "ph": "X", "pid": 1, "tid": w.lane + 1,
            "name": w.why.label(), "cat": "wait",
            "ts": us(w.start), "dur": ((w.end - w.start) * 1e6).round(),
        }));
    }
    for (n, (at, _)) in night.done.iter().enumerate() {
        events.push(json!({
            "ph": "C", "pid": 1, "name": "tasks done", "ts": us(*at), "args": {"done": n + 1},
        }));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::night::{Kind, Session, Wait, Why};

    #[test]
    fn sessions_waits_and_the_done_counter_are_events_on_their_lanes() {
        let night = Night {
            start: 100.0,
            end: 200.0,
            lanes: vec!["a".into(), "b".into()],
            sessions: vec![Session {
                lane: 1,
                task: "t1".into(),
                attempt: Some(2),
                start: 110.0,
                secs: 5.5,
                kind: Kind::Done,
                outcome: "success".into(),
                log: Some("/l".into()),
                cost_usd: None,
                input_tokens: None,
                output_tokens: None,
            }],
            waits: vec![Wait {
                lane: 0,
                start: 120.0,
                end: 130.0,
                why: Why::Breaker,
            }],
            done: vec![(116.0, "t1".into())],
            ..Night::default()
        };
        let t = trace(&night);
        let events = t["traceEvents"].as_array().unwrap();
        let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 2);
        assert_eq!(x[0]["name"], "t1");
        assert_eq!(x[0]["tid"], 2);
        assert_eq!(x[0]["ts"], 10_000_000.0);
        assert_eq!(x[0]["dur"], 5_500_000.0);
        assert_eq!(x[0]["args"]["attempt"], 2);
        assert_eq!(x[1]["cat"], "wait");
        assert_eq!(x[1]["name"], "circuit breaker pause");
        let names: Vec<&Value> = events
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| &e["args"]["name"])
            .collect();
        assert_eq!(names, [&json!("a"), &json!("b")]);
        let c: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
        assert_eq!(c[0]["args"]["done"], 1);
        assert_eq!(c[0]["ts"], 16_000_000.0);
    }
}
