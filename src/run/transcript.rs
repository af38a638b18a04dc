//! A session log read as turns, for `farm logs --pretty`: the JSON lines of
//! Claude Code and Qwen Code (`--output-format stream-json`), Codex (`exec
//! --json`), Gemini CLI (`--output-format stream-json`) and opencode (`run
//! --format json`) become what the agent said,
//! one line per tool call and per tool result, retries and the result;
//! opencode's log lines (its preset's `--print-logs`) only where they warn
//! or err; every other line (farm's `[farm]` header and footer, plain
//! text) is kept as it is.
//!
//! The dialects are told apart by their event types, which do not
//! overlap (Qwen Code's is Claude's): Claude's `assistant`/`user`/`result`/`system`, Codex's dotted
//! `thread.*`/`turn.*`/`item.*`, Gemini's `init`/`message`/`tool_use`/
//! `tool_result` (Gemini's `result` carries `stats`, Claude's does not);
//! opencode's events carry a `part` (or a `sessionID`).

use serde_json::Value;

/// Tool calls, results and retries are cut to this many characters.
const LINE: usize = 160;

/// Turns read so far; feed it a log line by line (so that `-f` can render
/// as the log grows).
#[derive(Default)]
pub struct Transcript {
    /// Gemini streams an answer as `delta` messages: held until it ends.
    pending: String,
}

/// The whole of `log`, rendered.
pub fn pretty(log: &str) -> String {
    let mut t = Transcript::default();
    let mut out: Vec<String> = log.lines().flat_map(|l| t.line(l)).collect();
    out.extend(t.finish());
    let mut text = out.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

fn cut(s: &str, n: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= n {
        one
    } else {
        let mut c: String = one.chars().take(n - 1).collect();
        c.push('…');
        c
    }
}

/// A tool's input on one line: its most telling field, else its JSON.
fn args(input: &Value) -> String {
    const TELLING: [&str; 9] = [
        "command",
        "cmd",
        "file_path",
        "absolute_path",
        "path",
        "pattern",
        "url",
        "query",
        "description",
    ];
    for key in TELLING {
        match input.get(key) {
            Some(Value::String(s)) => return cut(s, LINE),
            Some(Value::Array(words)) => {
                let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
                if !words.is_empty() {
                    return cut(&words.join(" "), LINE);
                }
            }
            _ => {}
        }
    }
    match input {
        Value::Null => String::new(),
        v => cut(&v.to_string(), LINE),
    }
}

/// What a tool returned, on one line: its first line and how many more.
fn result(text: &str) -> String {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("(no output)");
    let more = lines.count();
    let more = match more {
        0 => String::new(),
        1 => " (+1 line)".to_owned(),
        n => format!(" (+{n} lines)"),
    };
    format!("{}{more}", cut(first, LINE))
}

/// Text the agent said, indented under its speaker.
fn said(who: &str, text: &str) -> Vec<String> {
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if i == 0 {
            out.push(format!("{who}: {l}"));
        } else {
            out.push(format!("{}{l}", " ".repeat(who.len() + 2)));
        }
    }
    out
}

/// The value at JSON pointer `at` of `v` as text, `?` when it is missing.
fn shown(v: &Value, at: &str) -> String {
    v.pointer(at).map_or("?".into(), Value::to_string)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

impl Transcript {
    /// The rendered lines for one line of the log.
    pub fn line(&mut self, line: &str) -> Vec<String> {
        let parsed = line
            .trim()
            .starts_with('{')
            .then(|| serde_json::from_str::<Value>(line.trim()).ok())
            .flatten();
        let Some(v) = parsed else {
            let mut out = self.finish();
            match opencode_log(line) {
                Some(shown) => out.extend(shown),
                None => out.push(line.to_owned()),
            }
            return out;
        };
        let kind = str_of(&v, "type");
        // Gemini's streamed answer goes on until another event comes.
        if kind == "message" && str_of(&v, "role") == "assistant" {
            self.pending.push_str(str_of(&v, "content"));
            if v.get("delta").and_then(Value::as_bool) == Some(true) {
                return Vec::new();
            }
            return self.finish();
        }
        let mut out = self.finish();
        out.extend(match kind {
            _ if v.get("part").is_some() || v.get("sessionID").is_some() => opencode(&v),
            // Qwen Code's partial-message events: the whole message follows.
            "stream_event" => Vec::new(),
            "system" | "assistant" | "user" => claude(&v),
            "result" if v.get("stats").is_some() => gemini(&v),
            "result" => claude(&v),
            k if k.contains('.') || k == "error" && v.get("message").is_some() => codex(&v),
            "init" | "message" | "tool_use" | "tool_result" | "error" => gemini(&v),
            _ => vec![line.to_owned()],
        });
        out
    }

    /// What is still held (a Gemini answer cut off by the log's end).
    pub fn finish(&mut self) -> Vec<String> {
        let text = std::mem::take(&mut self.pending);
        said("agent", &text)
    }
}

fn claude(v: &Value) -> Vec<String> {
    match (str_of(v, "type"), str_of(v, "subtype")) {
        ("system", "init") => vec![format!(
            "── session: {} ({} tools)",
            str_of(v, "model"),
            v.get("tools").and_then(Value::as_array).map_or(0, Vec::len)
        )],
        ("system", "api_retry") => vec![format!(
            "⟳ API retry {} of {}: {} {}",
            shown(v, "/attempt"),
            shown(v, "/max_retries"),
            v.get("error_status")
                .map_or(String::new(), Value::to_string),
            str_of(v, "error")
        )],
        ("system", sub) => vec![format!("── {sub}")],
        ("assistant" | "user", _) => {
            let who = if str_of(v, "type") == "assistant" {
                "agent"
            } else {
                "user"
            };
            let content = v.pointer("/message/content");
            let parts: Vec<Value> = match content {
                Some(Value::Array(parts)) => parts.clone(),
                Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
                _ => Vec::new(),
            };
            parts
                .iter()
                .flat_map(|p| match str_of(p, "type") {
                    "text" => said(who, str_of(p, "text")),
                    "thinking" => vec![format!("(thinking) {}", cut(str_of(p, "thinking"), LINE))],
                    "tool_use" => vec![format!(
                        "→ {} {}",
                        str_of(p, "name"),
                        args(p.get("input").unwrap_or(&Value::Null))
                    )],
                    "tool_result" => {
                        let text = match p.get("content") {
                            Some(Value::String(s)) => s.clone(),
                            Some(Value::Array(items)) => items
                                .iter()
                                .map(|i| str_of(i, "text"))
                                .collect::<Vec<_>>()
                                .join("\n"),
                            _ => String::new(),
                        };
                        let err = p.get("is_error").and_then(Value::as_bool) == Some(true);
                        vec![format!(
                            "← {}{}",
                            if err { "error: " } else { "" },
                            result(&text)
                        )]
                    }
                    _ => Vec::new(),
                })
                .collect()
        }
        ("result", _) => {
            let mut head = format!(
                "── result: {}{}",
                str_of(v, "subtype"),
                if v.get("is_error").and_then(Value::as_bool) == Some(true) {
                    " (error)"
                } else {
                    ""
                }
            );
            if let Some(n) = v.get("num_turns").and_then(Value::as_u64) {
                head.push_str(&format!(", {n} turns"));
            }
            if let Some(ms) = v.get("duration_ms").and_then(Value::as_f64) {
                head.push_str(&format!(", {:.1}s", ms / 1000.0));
            }
            if let Some(usd) = v.get("total_cost_usd").and_then(Value::as_f64) {
                head.push_str(&format!(", ${usd:.2}"));
            }
            let mut out = vec![head];
            out.extend(said("agent", str_of(v, "result")));
            out
        }
        _ => Vec::new(),
    }
}

fn codex(v: &Value) -> Vec<String> {
    let item = v.get("item").unwrap_or(&Value::Null);
    match (str_of(v, "type"), str_of(item, "type")) {
        ("thread.started", _) => vec![format!("── thread {}", str_of(v, "thread_id"))],
        ("turn.started", _) => Vec::new(),
        ("turn.completed", _) => vec![format!(
            "── turn: {} tokens in, {} out",
            shown(v, "/usage/input_tokens"),
            shown(v, "/usage/output_tokens")
        )],
        ("turn.failed", _) => vec![format!(
            "!! turn failed: {}",
            cut(str_of(&v["error"], "message"), LINE)
        )],
        ("error", _) => vec![format!("!! {}", cut(str_of(v, "message"), LINE))],
        ("item.started", "command_execution") => {
            vec![format!("→ $ {}", cut(str_of(item, "command"), LINE))]
        }
        ("item.started" | "item.updated", _) => Vec::new(),
        ("item.completed", "agent_message") => said("agent", str_of(item, "text")),
        ("item.completed", "reasoning") => {
            vec![format!("(thinking) {}", cut(str_of(item, "text"), LINE))]
        }
        ("item.completed", "command_execution") => vec![format!(
            "← exit {}: {}",
            shown(item, "/exit_code"),
            result(str_of(item, "aggregated_output"))
        )],
        ("item.completed", "file_change") => {
            let changes: Vec<String> = item
                .get("changes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| format!("{} ({})", str_of(c, "path"), str_of(c, "kind")))
                .collect();
            vec![format!("→ edit {}", cut(&changes.join(", "), LINE))]
        }
        ("item.completed", "mcp_tool_call") => vec![format!(
            "→ {}.{} {}",
            str_of(item, "server"),
            str_of(item, "tool"),
            args(item.get("arguments").unwrap_or(&Value::Null))
        )],
        ("item.completed", "web_search") => vec![format!("→ search {}", str_of(item, "query"))],
        ("item.completed", "error") => vec![format!("!! {}", cut(str_of(item, "message"), LINE))],
        ("item.completed", other) => vec![format!("── {other}")],
        (other, _) => vec![format!("── {other}")],
    }
}

/// opencode's log lines (`timestamp=… level=INFO … message=…`, its
/// preset's `--print-logs`), if `line` is one: its warnings and errors on
/// one line each, with their error; the INFO lines, forty a session, left
/// out.
fn opencode_log(line: &str) -> Option<Vec<String>> {
    if !line.starts_with("timestamp=") {
        return None;
    }
    let fields = logfmt(line);
    let field = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    };
    let level = field("level")?;
    if level == "INFO" || level == "DEBUG" {
        return Some(Vec::new());
    }
    let mut said = format!("!! {}", field("message").unwrap_or_default());
    if let Some(why) = field("error.error")
        .or_else(|| field("error"))
        .or_else(|| field("cause"))
    {
        said.push_str(": ");
        said.push_str(why);
    }
    Some(vec![cut(&said, LINE)])
}

/// The `key=value` and `key="quoted \"value\""` pairs of a logfmt line.
fn logfmt(line: &str) -> Vec<(&str, String)> {
    let mut pairs = Vec::new();
    let mut rest = line.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next().map(|(_, c)| c)),
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        pairs.push((key, value));
        rest = next.trim_start();
    }
    pairs
}

fn opencode(v: &Value) -> Vec<String> {
    let part = v.get("part").unwrap_or(&Value::Null);
    match str_of(v, "type") {
        "text" => said("agent", str_of(part, "text")),
        "tool_use" => {
            let state = part.get("state").unwrap_or(&Value::Null);
            let mut out = vec![format!(
                "→ {} {}",
                str_of(part, "tool"),
                args(state.get("input").unwrap_or(&Value::Null))
            )];
            match str_of(state, "status") {
                "completed" => out.push(format!("← {}", result(str_of(state, "output")))),
                "error" => out.push(format!("← error: {}", result(str_of(state, "error")))),
                _ => {}
            }
            out
        }
        "step_finish" => vec![format!(
            "── step: {}, {} tokens in, {} out",
            str_of(part, "reason"),
            shown(part, "/tokens/input"),
            shown(part, "/tokens/output")
        )],
        "error" => vec![format!(
            "!! {}: {}",
            v.pointer("/error/name")
                .and_then(Value::as_str)
                .unwrap_or("error"),
            cut(
                v.pointer("/error/data/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                LINE
            )
        )],
        _ => Vec::new(),
    }
}

fn gemini(v: &Value) -> Vec<String> {
    match str_of(v, "type") {
        "init" => vec![format!("── session: {}", str_of(v, "model"))],
        "message" => {
            let text = str_of(v, "content");
            vec![format!("user: ({} characters)", text.chars().count())]
        }
        "tool_use" => vec![format!(
            "→ {} {}",
            str_of(v, "tool_name"),
            args(v.get("parameters").unwrap_or(&Value::Null))
        )],
        "tool_result" => {
            let err = str_of(v, "status") == "error";
            let text = match v.get("output") {
                Some(Value::String(s)) => s.clone(),
                _ => v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            };
            vec![format!(
                "← {}{}",
                if err { "error: " } else { "" },
                result(&text)
            )]
        }
        "error" => vec![format!(
            "!! {}",
            cut(
                v.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or(&v.to_string()),
                LINE
            )
        )],
        "result" => vec![format!(
            "── result: {}, {} tokens in, {} out, {} tool calls",
            str_of(v, "status"),
            shown(v, "/stats/input_tokens"),
            shown(v, "/stats/output_tokens"),
            shown(v, "/stats/tool_calls")
        )],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_stream_json_reads_as_turns() {
        let log = r#"[farm] session: task t1, attempt 1, agent a-1, started 2026-12-01T00:00:00Z
{"type":"system","subtype":"init","model":"claude-x","tools":["Bash","Edit"]}
{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"error_status":429,"error":"rate_limit"}
{"type":"assistant","message":{"content":[{"type":"text","text":"I will list.\nThen edit."},{"type":"tool_use","id":"u1","name":"Bash","input":{"command":"ls -la\n  src"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"u1","content":"a.rs\nb.rs\nc.rs"}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"u2","is_error":true,"content":[{"type":"text","text":"no such file"}]}]}}
{"type":"result","subtype":"success","is_error":false,"num_turns":3,"duration_ms":4200,"total_cost_usd":0.125,"result":"Done."}
[farm] ended: success after 4.3s"#;
        assert_eq!(
            pretty(log),
            "[farm] session: task t1, attempt 1, agent a-1, started 2026-12-01T00:00:00Z
── session: claude-x (2 tools)
⟳ API retry 2 of 10: 429 rate_limit
agent: I will list.
       Then edit.
→ Bash ls -la src
← a.rs (+2 lines)
← error: no such file
── result: success, 3 turns, 4.2s, $0.12
agent: Done.
[farm] ended: success after 4.3s
"
        );
    }

    #[test]
    fn codex_json_reads_as_turns() {
        let log = r#"{"type":"thread.started","thread_id":"th1"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"i0","type":"reasoning","text":"Look first."}}
{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"bash -lc ls","status":"in_progress"}}
{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"bash -lc ls","aggregated_output":"x\ny\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"i2","type":"file_change","changes":[{"path":"src/a.rs","kind":"update"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"i3","type":"agent_message","text":"Edited a.rs."}}
{"type":"turn.completed","usage":{"input_tokens":120,"cached_input_tokens":0,"output_tokens":30}}
{"type":"turn.failed","error":{"message":"stream disconnected"}}"#;
        assert_eq!(
            pretty(log),
            "── thread th1
(thinking) Look first.
→ $ bash -lc ls
← exit 0: x (+1 line)
→ edit src/a.rs (update)
agent: Edited a.rs.
── turn: 120 tokens in, 30 out
!! turn failed: stream disconnected
"
        );
    }

    #[test]
    fn gemini_stream_json_reads_as_turns_with_deltas_joined() {
        let log = r#"{"type":"init","timestamp":"t","session_id":"s","model":"gemini-x"}
{"type":"message","role":"user","content":"Do the task"}
{"type":"message","role":"assistant","content":"Reading ","delta":true}
{"type":"message","role":"assistant","content":"the file.","delta":true}
{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{"absolute_path":"/w/a.txt"}}
{"type":"tool_result","tool_id":"t1","status":"error","output":"not found"}
{"type":"message","role":"assistant","content":"Gave up","delta":true}
{"type":"result","status":"success","stats":{"total_tokens":9,"input_tokens":7,"output_tokens":2,"duration_ms":10,"tool_calls":1}}"#;
        assert_eq!(
            pretty(log),
            "── session: gemini-x
user: (11 characters)
agent: Reading the file.
→ read_file /w/a.txt
← error: not found
agent: Gave up
── result: success, 7 tokens in, 2 out, 1 tool calls
"
        );
    }

    #[test]
    fn opencode_json_reads_as_turns() {
        let log = concat!(
            r#"{"type":"step_start","timestamp":1,"sessionID":"s","part":{"type":"step-start"}}"#,
            "\n",
            r#"{"type":"tool_use","timestamp":2,"sessionID":"s","part":{"type":"tool","tool":"bash","state":{"status":"completed","input":{"command":"ls"},"output":"a\nb\n"}}}"#,
            "\n",
            r#"{"type":"text","timestamp":3,"sessionID":"s","part":{"type":"text","text":"Listed."}}"#,
            "\n",
            r#"{"type":"step_finish","timestamp":4,"sessionID":"s","part":{"reason":"stop","tokens":{"input":100,"output":20}}}"#,
            "\n",
        );
        assert_eq!(
            pretty(log),
            "→ bash ls\n← a (+1 line)\nagent: Listed.\n── step: stop, 100 tokens in, 20 out\n"
        );
        let refused = include_str!("../../tests/fixtures/opencode-1.18.33/401-refused.jsonl");
        assert_eq!(pretty(refused), "!! APIError: invalid x-api-key\n");
    }

    /// The preset's log lines: INFO left out, errors one line each.
    #[test]
    fn opencodes_log_lines_show_only_its_errors() {
        let real =
            include_str!("../../tests/fixtures/opencode-1.18.33/429-twice-retried-logged.log");
        let text = pretty(real);
        assert!(!text.contains("level=INFO"), "{text}");
        assert_eq!(
            text.matches(
                "!! stream error: AI_APICallError: Number of requests has exceeded your rate limit"
            )
            .count(),
            2,
            "{text}"
        );
        assert!(
            text.contains("!! Failed to fetch models.dev: Cause("),
            "{text}"
        );
        assert!(text.contains("→ bash echo hi > a.txt"), "{text}");
        assert_eq!(
            logfmt(r#"a=1 b="x \"y\" z" c="" d=e=f"#),
            [
                ("a", "1".to_owned()),
                ("b", "x \"y\" z".to_owned()),
                ("c", String::new()),
                ("d", "e=f".to_owned())
            ]
        );
    }

    /// Each CLI's real successful session reads as its shell call, its
    /// result and its answer (stderr's warnings kept as they are).
    #[test]
    fn real_tool_call_sessions_read_as_turns() {
        for (log, call) in [
            (
                include_str!("../../tests/fixtures/gemini-cli-0.61.0/shell-tool-call-success.log"),
                "→ run_shell_command echo hi > a.txt && git add -A && git commit -qm a",
            ),
            (
                include_str!("../../tests/fixtures/qwen-code-0.24.4/shell-tool-call-success.log"),
                "→ run_shell_command echo hi > a.txt && git add -A && git commit -qm a",
            ),
            (
                include_str!("../../tests/fixtures/opencode-1.18.33/shell-tool-call-success.log"),
                "→ bash echo hi > a.txt && git add -A && git commit -qm a",
            ),
        ] {
            let text = pretty(log);
            let lines: Vec<&str> = text.lines().collect();
            let at = lines.iter().position(|l| *l == call);
            assert!(at.is_some(), "{call} not in:\n{text}");
            assert!(lines[at.unwrap() + 1].starts_with("← "), "{text}");
            assert!(text.contains("agent: Done."), "{text}");
        }
    }

    #[test]
    fn qwen_codes_stream_events_are_left_out() {
        let real =
            include_str!("../../tests/fixtures/qwen-code-0.24.4/429-twice-retried-silently.jsonl");
        let text = pretty(real);
        assert!(!text.contains("stream_event"), "{text}");
        assert!(text.contains("agent: Done after retries."), "{text}");
        assert!(text.starts_with("── session: qwen-scripted"), "{text}");
    }

    #[test]
    fn plain_text_and_broken_json_pass_through() {
        let log = "hello\n{\"type\": \"cut\n{\"unknown\":1}\n";
        assert_eq!(pretty(log), "hello\n{\"type\": \"cut\n{\"unknown\":1}\n");
    }
}
