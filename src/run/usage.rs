//! What a session cost, where the agent CLI reports it in its JSON output:
//! dollars and tokens, read from the log's JSON lines.
//!
//! CLIs report differently: Claude Code's final `result` event carries
//! `total_cost_usd` and a `usage` object; Codex's `turn.completed` events
//! each carry a `usage` of that turn; others put token counts under `usage`
//! or `stats`. The rule: the *last* event that states a cost is the
//! session's cost (Claude's result is cumulative); token counts are summed
//! over the events that carry them, unless a cumulative `result` event
//! states them, which then wins.

use serde_json::Value;

/// A session's cost, as far as its CLI said.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

impl Usage {
    pub fn is_empty(&self) -> bool {
        self.cost_usd.is_none() && self.input_tokens.is_none() && self.output_tokens.is_none()
    }
}

/// Read what `log` says a session cost.
pub fn read(log: &str) -> Usage {
    let mut usage = Usage::default();
    let (mut summed_in, mut summed_out) = (None::<u64>, None::<u64>);
    let mut result_tokens: Option<(Option<u64>, Option<u64>)> = None;
    for line in log.lines() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(cost) = ["total_cost_usd", "cost_usd"]
            .iter()
            .find_map(|k| v.get(*k).and_then(Value::as_f64))
        {
            usage.cost_usd = Some(cost);
        }
        let counts = v
            .get("usage")
            .or_else(|| v.get("stats"))
            .map(|u| (tokens(u, INPUT), tokens(u, OUTPUT)));
        let Some((input, output)) = counts else {
            continue;
        };
        if v.get("type").and_then(Value::as_str) == Some("result") {
            result_tokens = Some((input, output));
        } else {
            if let Some(n) = input {
                *summed_in.get_or_insert(0) += n;
            }
            if let Some(n) = output {
                *summed_out.get_or_insert(0) += n;
            }
        }
    }
    let (input, output) = result_tokens.unwrap_or((summed_in, summed_out));
    usage.input_tokens = input;
    usage.output_tokens = output;
    usage
}

const INPUT: [&str; 3] = ["input_tokens", "prompt_tokens", "input"];
const OUTPUT: [&str; 3] = ["output_tokens", "completion_tokens", "output"];

fn tokens(usage: &Value, keys: [&str; 3]) -> Option<u64> {
    keys.iter()
        .find_map(|k| usage.get(*k).and_then(Value::as_u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claudes_result_event_gives_cost_and_tokens() {
        let log = r#"{"type":"system","subtype":"init"}
{"type":"assistant","message":{"usage":{"input_tokens":5,"output_tokens":7}}}
{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.0421,"usage":{"input_tokens":1200,"output_tokens":340}}
"#;
        assert_eq!(
            read(log),
            Usage {
                cost_usd: Some(0.0421),
                input_tokens: Some(1200),
                output_tokens: Some(340),
            }
        );
    }

    #[test]
    fn codex_turns_are_summed() {
        let log = r#"{"type":"thread.started"}
{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":50,"output_tokens":20}}
{"type":"turn.completed","usage":{"input_tokens":30,"output_tokens":5}}
"#;
        let u = read(log);
        assert_eq!((u.input_tokens, u.output_tokens), (Some(130), Some(25)));
        assert_eq!(u.cost_usd, None);
    }

    #[test]
    fn plain_text_costs_nothing_known() {
        assert!(read("working\n{not json\ndone\n").is_empty());
    }
}
