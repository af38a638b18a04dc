//! A session's log read while it grows, for what cannot wait for its end:
//! the agent CLI retrying its API. Real CLIs retry on their own, for
//! minutes — Claude Code 2.1.332 prints an `api_retry` event per attempt,
//! ten attempts over about three minutes, on a 429, a 529 and even a 401 —
//! so a session that fails on its API looks busy until it gives up.
//!
//! While a CLI retries a limit or an overload, the run starts no new
//! session on it (the agents share its account: `limits.rs`); a 401 or 403
//! is a setup error no retry mends, and the session is stopped at once.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The CLI retrying its API, on what HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub status: u16,
    pub attempt: u32,
}

impl Retry {
    /// A status no retry mends: the credentials are refused.
    pub fn refused(self) -> bool {
        matches!(self.status, 401 | 403)
    }
}

/// A retry event of the CLI's JSON output, if `line` is one:
/// - Claude Code: `{"type":"system","subtype":"api_retry","attempt":N,"error_status":429,…}`;
/// - Codex: `{"type":"error","message":"Reconnecting... 2/5 (unexpected status 401 Unauthorized: …)"}`;
/// - Gemini CLI, which does not retry a 401 but lingers seconds after
///   saying so: `{"type":"result","status":"error","error":{"message":"[API Error: {…\"code\":401…}]"}}`;
/// - Qwen Code, likewise: a `result` with `"error":{"message":"[API Error: 401 …]"}`;
/// - opencode, likewise: `{"type":"error","error":{"name":"APIError","data":{"statusCode":401,…}}}`;
///   its retries of a limit or an overload show only in its log lines
///   (`--print-logs`, see [`opencode_retry`]).
pub fn retry_of(line: &str) -> Option<Retry> {
    let line = line.trim();
    if line.starts_with("timestamp=") {
        return opencode_retry(line);
    }
    if !line.starts_with('{')
        || !(line.contains("api_retry")
            || line.contains("Reconnecting")
            || line.contains("API Error")
            || line.contains("APIError"))
    {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if let Some(status) = v
        .pointer("/error/data/statusCode")
        .and_then(serde_json::Value::as_u64)
    {
        let status = u16::try_from(status).ok()?;
        return Some(Retry { status, attempt: 1 }).filter(|r| r.refused());
    }
    if v.get("type")?.as_str()? == "result" {
        // Gemini CLI quotes the API's JSON (`"code":401`); Qwen Code says
        // `[API Error: 401 invalid x-api-key]`.
        let message = v.pointer("/error/message")?.as_str()?;
        let status = ["\"code\":", "API Error: "].iter().find_map(|at| {
            message
                .split_once(at)
                .and_then(|(_, s)| s.get(..3))
                .and_then(|s| s.parse().ok())
        })?;
        return Some(Retry { status, attempt: 1 }).filter(|r| r.refused());
    }
    if let Some(message) = v.get("message").and_then(serde_json::Value::as_str)
        && v.get("type")?.as_str()? == "error"
    {
        return codex_retry(message);
    }
    if v.get("subtype")?.as_str()? != "api_retry" {
        return None;
    }
    Some(Retry {
        status: u16::try_from(v.get("error_status")?.as_u64()?).ok()?,
        attempt: v
            .get("attempt")
            .and_then(serde_json::Value::as_u64)
            .and_then(|a| u32::try_from(a).ok())
            .unwrap_or(0),
    })
}

/// Codex's "Reconnecting... 2/5 (unexpected status 401 Unauthorized: …)":
/// the attempt and the HTTP status, when it names one.
fn codex_retry(message: &str) -> Option<Retry> {
    let rest = message.strip_prefix("Reconnecting... ")?;
    let attempt = rest.split('/').next()?.parse().ok()?;
    let status = rest
        .split_once("status ")
        .and_then(|(_, s)| s.get(..3))
        .and_then(|s| s.parse().ok())?;
    Some(Retry { status, attempt })
}

/// opencode's log line for a failed request of the session's own model
/// (not of its side requests, `small=true`), which it then retries with no
/// event of its JSON output:
/// `timestamp=… level=ERROR … message="stream error" … small=false … error.error="AI_APICallError: Number of requests has exceeded your rate limit"`.
/// The line names no HTTP status, only the API's message: a rate limit is
/// a 429, an overload a 529; other errors are not read as retries.
fn opencode_retry(line: &str) -> Option<Retry> {
    if !line.contains("message=\"stream error\"") || !line.contains(" small=false ") {
        return None;
    }
    let error = line.split_once(" error.error=")?.1.to_lowercase();
    let status = if error.contains("rate limit") || error.contains("rate_limit") {
        429
    } else if error.contains("overloaded") {
        529
    } else {
        return None;
    };
    Some(Retry { status, attempt: 0 })
}

/// How often the log is read: often enough to stop a refused session in
/// well under a second, rarely enough to cost nothing.
const EVERY: Duration = Duration::from_millis(250);

/// A log being read as it grows.
pub struct LogWatch {
    path: PathBuf,
    offset: u64,
    partial: String,
    last: Option<Instant>,
    /// The CLI's retry in progress: its last JSON line was a retry.
    pub retrying: Option<Retry>,
}

impl LogWatch {
    pub fn new(path: &Path) -> LogWatch {
        LogWatch {
            path: path.to_owned(),
            offset: 0,
            partial: String::new(),
            last: None,
            retrying: None,
        }
    }

    /// Read what was appended since the last look (at most every
    /// [`EVERY`]); whether the retry state changed.
    pub fn poll(&mut self) -> bool {
        if self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return false;
        }
        self.read(false)
    }

    /// Read the rest of the log now, the session being over: a CLI that
    /// got through its retries just before it exited is not retrying.
    pub fn finish(&mut self) {
        self.read(true);
    }

    /// Read what is new; `all`: take a last line without its newline too.
    fn read(&mut self, all: bool) -> bool {
        self.last = Some(Instant::now());
        if let Ok(mut file) = std::fs::File::open(&self.path)
            && file.seek(SeekFrom::Start(self.offset)).is_ok()
        {
            let mut new = Vec::new();
            if let Ok(n) = file.read_to_end(&mut new) {
                self.offset += n as u64;
                self.partial.push_str(&String::from_utf8_lossy(&new));
            }
        }
        let before = self.retrying;
        let end = if all {
            self.partial.len()
        } else {
            self.partial.rfind('\n').map_or(0, |i| i + 1)
        };
        for line in self.partial[..end].lines() {
            if let Some(r) = retry_of(line) {
                self.retrying = Some(r);
            } else if line.trim_start().starts_with('{') {
                // Any other event of the CLI: the retry is over.
                self.retrying = None;
            }
        }
        self.partial.drain(..end);
        before != self.retrying
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn claude_retries_are_read_from_its_real_output() {
        let real =
            include_str!("../../tests/fixtures/claude-2.1.332/retried-429-then-success.jsonl");
        let retries: Vec<Retry> = real.lines().filter_map(retry_of).collect();
        assert_eq!(
            retries,
            [
                Retry {
                    status: 429,
                    attempt: 1
                },
                Retry {
                    status: 429,
                    attempt: 2
                }
            ]
        );
        assert!(!retries[0].refused());
        assert!(
            Retry {
                status: 401,
                attempt: 1
            }
            .refused()
        );
        assert_eq!(retry_of("api_retry but not JSON"), None);
    }

    /// Gemini CLI, Qwen Code and opencode say a 401 once, at once, and
    /// retry a 429 silently: one refusal read, nothing from the retries.
    #[test]
    fn refusals_said_once_are_read_from_real_output() {
        let cases = [
            (
                include_str!("../../tests/fixtures/gemini-cli-0.61.0/401-refused.jsonl"),
                include_str!(
                    "../../tests/fixtures/gemini-cli-0.61.0/429-twice-retried-silently.jsonl"
                ),
            ),
            (
                include_str!("../../tests/fixtures/qwen-code-0.24.4/401-refused.jsonl"),
                include_str!(
                    "../../tests/fixtures/qwen-code-0.24.4/429-twice-retried-silently.jsonl"
                ),
            ),
            (
                include_str!("../../tests/fixtures/opencode-1.18.33/401-refused.jsonl"),
                include_str!(
                    "../../tests/fixtures/opencode-1.18.33/429-twice-retried-silently.jsonl"
                ),
            ),
        ];
        for (refused, retried) in cases {
            let seen: Vec<Retry> = refused.lines().filter_map(retry_of).collect();
            assert_eq!(
                seen,
                [Retry {
                    status: 401,
                    attempt: 1
                }],
                "{refused}"
            );
            assert!(retried.lines().all(|l| retry_of(l).is_none()), "{retried}");
        }
    }

    /// opencode retries a 429 with no JSON event, but its log lines say
    /// so: a retry per 429, over at the model's first answer.
    #[test]
    fn opencodes_retries_are_read_from_its_log_lines() {
        let real =
            include_str!("../../tests/fixtures/opencode-1.18.33/429-twice-retried-logged.log");
        let retries: Vec<Retry> = real.lines().filter_map(retry_of).collect();
        assert_eq!(
            retries,
            [Retry {
                status: 429,
                attempt: 0
            }; 2]
        );
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.log");
        let upto = |needle: &str| {
            let i = real.find(needle).unwrap();
            real[..i].rfind('\n').map_or("", |n| &real[..=n]).to_owned()
        };
        let mut w = LogWatch::new(&path);
        // After the second 429, before the answer: retrying.
        let second = real
            .match_indices("message=\"stream error\"")
            .nth(1)
            .unwrap()
            .0;
        let line_end = second + real[second..].find('\n').unwrap() + 1;
        std::fs::write(&path, &real[..line_end]).unwrap();
        w.poll();
        assert_eq!(w.retrying.map(|r| r.status), Some(429));
        // At the model's first answer (`step_start`): over.
        std::fs::write(&path, upto("\"type\":\"tool_use\"")).unwrap();
        w.finish();
        assert_eq!(w.retrying, None);
        // A failed side request (titles: `small=true`), or an error that
        // is neither a limit nor an overload, is no retry of the model's.
        let side = real
            .lines()
            .find(|l| l.contains("message=\"stream error\""))
            .unwrap()
            .replace(" small=false ", " small=true ");
        assert_eq!(retry_of(&side), None);
        assert_eq!(
            retry_of(
                r#"timestamp=X level=ERROR message="stream error" small=false agent=build error.error="AI_APICallError: Overloaded""#
            )
            .map(|r| r.status),
            Some(529)
        );
        assert_eq!(
            retry_of(
                r#"timestamp=X level=ERROR message="stream error" small=false agent=build error.error="AI_APICallError: stalled""#
            ),
            None
        );
    }

    #[test]
    fn codex_reconnects_are_read_from_its_real_output() {
        let real = include_str!("../../tests/fixtures/codex-0.171.0/401-retried-gave-up.jsonl");
        let retries: Vec<Retry> = real.lines().filter_map(retry_of).collect();
        assert_eq!(retries.len(), 5);
        assert_eq!(
            retries[0],
            Retry {
                status: 401,
                attempt: 1
            }
        );
        assert!(retries.iter().all(|r| r.refused()));
        // A reconnect that names no status (the network) is no API verdict.
        assert_eq!(
            retry_of(
                r#"{"type":"error","message":"Reconnecting... 2/5 (stream disconnected before completion: error sending request)"}"#
            ),
            None
        );
    }

    #[test]
    fn a_growing_log_says_when_a_retry_starts_and_ends() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.log");
        let mut f = std::fs::File::create(&path).unwrap();
        let mut w = LogWatch::new(&path);
        w.last = None;
        writeln!(f, "[farm] session: header").unwrap();
        write!(
            f,
            "{{\"type\":\"system\",\"subtype\":\"api_retry\",\"attempt\":1,"
        )
        .unwrap();
        assert!(!w.poll());
        writeln!(f, "\"error_status\":529}}").unwrap();
        w.last = None;
        assert!(w.poll());
        assert_eq!(w.retrying.map(|r| r.status), Some(529));
        writeln!(f, "{{\"type\":\"assistant\"}}").unwrap();
        w.last = None;
        assert!(w.poll());
        assert_eq!(w.retrying, None);
        // Not read again before EVERY has passed...
        writeln!(
            f,
            "{{\"type\":\"system\",\"subtype\":\"api_retry\",\"error_status\":429}}"
        )
        .unwrap();
        assert!(!w.poll());
        // ... but at the session's end the rest is read at once, even a
        // last line with no newline: the retry is over.
        write!(f, "{{\"type\":\"result\"}}").unwrap();
        w.finish();
        assert_eq!(w.retrying, None);
    }
}
