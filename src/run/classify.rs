//! What a finished session means, from its exit *and* its output — never
//! one alone: a success, a failure of the task, a usage limit of the agent
//! CLI (until when, when it says), a transient API error, or a setup error
//! that no task can get past (a bad API key, a missing model, a bad flag).
//!
//! Misreadings cost a night, so the rules are narrow:
//! - only a session that failed (non-zero exit) or whose JSON result says
//!   `"is_error": true` can be a limit, an API error or a setup error; a
//!   session that exited 0 with a clean result is a success whatever it
//!   printed (an agent may well print a file that mentions rate limits);
//! - a session farm stopped (timed out, killed, interrupted) is what it is:
//!   a timeout is not a usage limit;
//! - only the last lines of the log are read ([`TAIL_LINES`]): CLIs report
//!   why they stopped at the end, while the body holds the agent's work;
//! - a setup error is one the CLI stops on at once ([`SETUP_WITHIN`]): after
//!   minutes of work, "unexpected argument" is the task's own test output;
//! - a session that did not start at all ([`did_not_start`]) is told apart
//!   from a failed one, so that the loop can stop on an agent that cannot
//!   start instead of burning every task's attempts on it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::run::session::Outcome;

/// How many of a log's last lines are read.
pub const TAIL_LINES: usize = 30;
/// A session that ran longer than this did not fail on its setup.
pub const SETUP_WITHIN: Duration = Duration::from_secs(60);

/// A session that failed this soon and wrote nothing did not get going.
pub const SILENT_WITHIN: Duration = Duration::from_secs(1);

/// Whether a session that ended with `outcome` after `ran`, having written
/// `log`, never really started: the shell's "cannot execute" (126) or "not
/// found" (127) soon after the start — an interpreter that is missing, a
/// file that is not executable — or any failure within [`SILENT_WITHIN`]
/// with no output at all. One such session may be the task's (a prompt too
/// long for an argument); the loop decides what two in a row mean.
pub fn did_not_start(outcome: &Outcome, ran: Duration, log: &str) -> bool {
    match outcome {
        Outcome::Failed { code: 126 | 127 } => ran < SETUP_WITHIN,
        Outcome::Failed { .. } => ran < SILENT_WITHIN && log.trim().is_empty(),
        _ => false,
    }
}

/// What a session's end means for the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    Success,
    /// The task's own failure: counts as an attempt.
    TaskFailed,
    /// The agent CLI's usage or rate limit: no attempt counted; agents wait,
    /// until `reset` when the CLI said when.
    Limited {
        reset: Option<SystemTime>,
    },
    /// Overloaded, a 5xx, the network: no attempt counted; retried soon.
    Transient,
    /// Nothing will work until a human acts (why): the run stops.
    Fatal(String),
}

impl Class {
    /// A word for the journal and `farm status`.
    pub fn label(&self) -> &'static str {
        match self {
            Class::Success => "success",
            Class::TaskFailed => "task failed",
            Class::Limited { .. } => "usage limit",
            Class::Transient => "api error",
            Class::Fatal(_) => "setup error",
        }
    }
}

/// A CLI's own words for its limits, API errors and setup errors, on top of
/// the common ones below (from its preset; lower case).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patterns {
    #[serde(default)]
    pub limited: Vec<String>,
    #[serde(default)]
    pub transient: Vec<String>,
    #[serde(default)]
    pub fatal: Vec<String>,
}

/// Classify a session that ended with `outcome` after running for `ran`
/// and wrote `log`, at `now`, by the common patterns and the CLI's own
/// `extra` ones.
pub fn classify(
    extra: &Patterns,
    outcome: &Outcome,
    ran: Duration,
    log: &str,
    now: SystemTime,
) -> Class {
    let tail = tail(log, TAIL_LINES);
    let json_error = json_is_error(&tail);
    match outcome {
        Outcome::Success if json_error != Some(true) => return Class::Success,
        Outcome::Success | Outcome::Failed { .. } => {}
        // Its CLI started but the model never said a word: the API hung,
        // not the task (a stalled API outlasted a short --timeout).
        Outcome::TimedOut if never_answered(log) => return Class::Transient,
        Outcome::TimedOut | Outcome::Killed { .. } | Outcome::Interrupted => {
            return Class::TaskFailed;
        }
    }
    // The CLI's own verdict on its API, where its result states one
    // (Claude Code: `api_error_status` once it gave up retrying): a 401
    // after minutes of retries is still a setup error.
    if let Some(status) = json_api_status(&tail) {
        return match status {
            401 | 403 => Class::Fatal(format!(
                "its API refuses its credentials (HTTP {status}): check its API key or log in again{}",
                json_result(&tail).map_or(String::new(), |r| format!("; it said {r}"))
            )),
            429 => Class::Limited {
                reset: reset_time(&tail, now),
            },
            _ => Class::Transient,
        };
    }
    let lower = tail.to_lowercase();
    let has = |common: &[&str], own: &[String]| {
        common.iter().any(|p| lower.contains(p)) || own.iter().any(|p| lower.contains(p.as_str()))
    };
    if ran < SETUP_WITHIN {
        if let Some(line) = fatal_line(&tail, &lower) {
            return Class::Fatal(line);
        }
        if let Some(p) = extra.fatal.iter().find(|p| lower.contains(p.as_str())) {
            return Class::Fatal(format!("the agent CLI reported a setup error: {p}"));
        }
    }
    if has(&LIMITED, &extra.limited) {
        return Class::Limited {
            reset: reset_time(&tail, now),
        };
    }
    if has(&TRANSIENT, &extra.transient) {
        return Class::Transient;
    }
    Class::TaskFailed
}

/// Whether the CLI's JSON output shows it started a conversation and got
/// no answer at all: Claude Code's `init` event and no `assistant` event;
/// Codex's `turn.started` and no item but errors; Gemini CLI's `init` and
/// no `tool_use` nor assistant `message`; opencode's log line for its
/// model's request (`message=stream … small=false`, with `--print-logs`)
/// and no `step_start`, which it prints as the model begins to answer.
fn never_answered(log: &str) -> bool {
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect();
    let field = |e: &serde_json::Value, path: &str| {
        e.pointer(path)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let started = events.iter().any(|e| {
        (field(e, "/type") == "system" && field(e, "/subtype") == "init")
            || field(e, "/type") == "turn.started"
            || field(e, "/type") == "init"
    }) || log.lines().any(|l| {
        l.starts_with("timestamp=") && l.contains(" message=stream ") && l.contains(" small=false ")
    });
    let answered = events.iter().any(|e| {
        let kind = field(e, "/type");
        kind == "assistant"
            || kind == "tool_use"
            || kind == "step_start"
            || kind == "text"
            || (kind == "message" && field(e, "/role") == "assistant")
            || (kind.starts_with("item.") && field(e, "/item/type") != "error")
    });
    started && !answered
}

/// What a session means that ended while its CLI retried its API (it ran
/// out of time, or was stopped for refused credentials), whatever its exit:
/// the API's trouble, not the task's.
pub fn retrying(r: crate::run::watch::Retry, log: &str) -> Class {
    match r.status {
        401 | 403 => {
            // The CLI's own word for it, from its last retry event.
            let said = log
                .lines()
                .rev()
                .filter(|l| crate::run::watch::retry_of(l).is_some())
                .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
                .and_then(|v| v.get("error")?.as_str().map(str::to_owned))
                .map_or(String::new(), |e| format!(", `{e}`"));
            Class::Fatal(format!(
                "its API refuses its credentials (HTTP {}{said}; the CLI would retry it for \
                 minutes): check its API key or log in again",
                r.status
            ))
        }
        429 => Class::Limited { reset: None },
        _ => Class::Transient,
    }
}

/// Usage and rate limits as the CLIs word them (lower case).
const LIMITED: [&str; 9] = [
    "usage limit",
    "rate limit",
    "rate_limit",
    "quota exceeded",
    "resource_exhausted",
    "resource exhausted",
    "too many requests",
    "status 429",
    "error 429",
];

/// Passing API trouble (lower case).
const TRANSIENT: [&str; 11] = [
    "overloaded",
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
    "api error: 5",
    "econnreset",
    "etimedout",
    "socket hang up",
    "network error",
    "fetch failed",
];

/// Setup errors: (pattern in lower case, what to tell the user).
const FATAL: [(&str, &str); 14] = [
    ("invalid api key", "the agent CLI's API key is invalid"),
    ("api key not valid", "the agent CLI's API key is invalid"),
    ("please run /login", "the agent CLI is not logged in"),
    ("not logged in", "the agent CLI is not logged in"),
    ("authentication_error", "the agent CLI cannot authenticate"),
    (
        "401 unauthorized",
        "the agent CLI's API refuses its credentials (401)",
    ),
    (
        "unauthenticated",
        "the agent CLI's API refuses its credentials",
    ),
    (
        "api error: 401",
        "the agent CLI's API refuses its credentials (401)",
    ),
    (
        "\"statuscode\":401",
        "the agent CLI's API refuses its credentials (401)",
    ),
    ("model not found", "the agent CLI's model does not exist"),
    ("unknown model", "the agent CLI's model does not exist"),
    ("unknown option", "the agent CLI rejects its arguments"),
    ("unexpected argument", "the agent CLI rejects its arguments"),
    (
        "unrecognized arguments",
        "the agent CLI rejects its arguments",
    ),
];

/// The setup error in the tail, as one line: what it means, and the CLI's
/// own words.
fn fatal_line(tail: &str, lower: &str) -> Option<String> {
    let (pattern, meaning) = FATAL.iter().find(|(p, _)| lower.contains(p))?;
    let said = tail
        .lines()
        .find(|l| l.to_lowercase().contains(pattern))
        .unwrap_or_default()
        .trim();
    let said: String = said.chars().take(200).collect();
    Some(format!("{meaning}: {said}"))
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The HTTP status of the API error a failed result states (Claude Code's
/// `"is_error": true, "api_error_status": 429`).
fn json_api_status(tail: &str) -> Option<u16> {
    tail.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
        if v.get("is_error")?.as_bool()? {
            u16::try_from(v.get("api_error_status")?.as_u64()?).ok()
        } else {
            None
        }
    })
}

/// The `result` text of the tail's last JSON result, on one line.
fn json_result(tail: &str) -> Option<String> {
    tail.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
        let r = v.get("result")?.as_str()?;
        Some(r.chars().take(200).collect())
    })
}

/// `Some(true)` when a JSON line of the tail says `"is_error": true`.
fn json_is_error(tail: &str) -> Option<bool> {
    tail.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
        v.get("is_error")?.as_bool()
    })
}

/// When the limit lifts, if the tail says: Claude's `…limit reached|EPOCH`,
/// a JSON `resetsAt` (epoch seconds or RFC 3339), "try again in 4 days 6
/// hours", "resets 1pm" / "try again at 3:51 PM" / "resets 3:51pm
/// (Europe/Paris)" (the next such time from `now`, in the zone named, else in
/// this host's).
pub fn reset_time(tail: &str, now: SystemTime) -> Option<SystemTime> {
    let lower = tail.to_lowercase();
    if let Some(t) = epoch_after_bar(tail) {
        return Some(t);
    }
    if let Some(t) = json_resets_at(tail) {
        return Some(t);
    }
    if let Some(rest) = after(&lower, "try again in ")
        && let Some(d) = spelled_duration(rest)
    {
        return Some(now + d);
    }
    for key in ["try again at ", "resets at ", "resets ", "reset at "] {
        if let Some(rest) = after(&lower, key)
            && let Some(t) = clock_time(rest, now)
        {
            return Some(t);
        }
    }
    None
}

fn after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.rfind(key).map(|i| &text[i + key.len()..])
}

/// `Claude AI usage limit reached|1764511200`.
fn epoch_after_bar(tail: &str) -> Option<SystemTime> {
    tail.lines().rev().find_map(|l| {
        let (text, epoch) = l.trim().rsplit_once('|')?;
        if !text.to_lowercase().contains("limit") {
            return None;
        }
        let secs: u64 = epoch.trim().parse().ok()?;
        Some(UNIX_EPOCH + Duration::from_secs(secs))
    })
}

/// `"resetsAt": 1764511200` or `"resetsAt": "2026-11-30T13:00:00Z"`,
/// anywhere in a JSON line.
fn json_resets_at(tail: &str) -> Option<SystemTime> {
    fn find(v: &serde_json::Value) -> Option<SystemTime> {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    if k.eq_ignore_ascii_case("resetsat") || k.eq_ignore_ascii_case("resets_at") {
                        if let Some(secs) = v.as_u64() {
                            // Milliseconds past 2100 in seconds are surely milliseconds.
                            let secs = if secs > 4_102_444_800 {
                                secs / 1000
                            } else {
                                secs
                            };
                            return Some(UNIX_EPOCH + Duration::from_secs(secs));
                        }
                        if let Some(s) = v.as_str() {
                            return humantime::parse_rfc3339_weak(s).ok();
                        }
                    }
                    if let Some(t) = find(v) {
                        return Some(t);
                    }
                }
                None
            }
            serde_json::Value::Array(items) => items.iter().find_map(find),
            _ => None,
        }
    }
    tail.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
        find(&v)
    })
}

/// "4 days 6 hours", "5 minutes", "30s", "1h 20m" (up to the first word
/// that is neither a number nor a unit).
fn spelled_duration(text: &str) -> Option<Duration> {
    let mut total = 0u64;
    let mut number: Option<u64> = None;
    let mut seen = false;
    for word in text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
    {
        let digits: String = word.chars().take_while(char::is_ascii_digit).collect();
        let unit = word[digits.len()..].trim_end_matches(['.', ')']);
        if !digits.is_empty() {
            number = digits.parse().ok();
        }
        if unit.is_empty() {
            if digits.is_empty() && word != "and" {
                break;
            }
            continue;
        }
        let secs = match unit {
            "d" | "day" | "days" => 86_400,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            _ => break,
        };
        total += number.take()? * secs;
        seen = true;
    }
    seen.then(|| Duration::from_secs(total))
}

/// "1pm", "3:51 PM", "13:00", "3:51pm (Europe/Paris)": the next such
/// moment after `now`, on the clock of the zone named in parentheses after
/// it, else of this host's.
fn clock_time(text: &str, now: SystemTime) -> Option<SystemTime> {
    let word: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ':')
        .collect();
    if word.is_empty() {
        return None;
    }
    let rest = text.trim_start()[word.len()..].trim_start();
    let (h, m) = match word.split_once(':') {
        Some((h, m)) => (h.parse::<u32>().ok()?, m.parse::<u32>().ok()?),
        None => (word.parse::<u32>().ok()?, 0),
    };
    let h = if rest.starts_with("pm") && h < 12 {
        h + 12
    } else if rest.starts_with("am") && h == 12 {
        0
    } else {
        h
    };
    if h > 23 || m > 59 {
        return None;
    }
    let after_time = rest
        .strip_prefix("pm")
        .or_else(|| rest.strip_prefix("am"))
        .unwrap_or(rest);
    let zone = after_time
        .trim_start()
        .strip_prefix('(')
        .and_then(|z| z.split_once(')'))
        .and_then(|(z, _)| jiff::tz::TimeZone::get(z.trim()).ok());
    match zone {
        Some(tz) => crate::age::next_local_in(now, h, m, &tz),
        None => crate::age::next_local(now, h, m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILED: Outcome = Outcome::Failed { code: 1 };

    /// With the common patterns only.
    fn classify(outcome: &Outcome, ran: Duration, log: &str, now: SystemTime) -> Class {
        super::classify(&Patterns::default(), outcome, ran, log, now)
    }
    const SHORT: Duration = Duration::from_secs(3);

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_764_500_000)
    }

    #[test]
    fn a_clean_exit_is_a_success_whatever_it_printed() {
        let log = "Reading docs/limits.md\nThe API has a rate limit of 50/min\nDone.\n";
        assert_eq!(
            classify(&Outcome::Success, SHORT, log, now()),
            Class::Success
        );
        // The same words with a failure: the task failed, no limit, since
        // they are not the CLI's last words … unless they are.
        let log = "The API has a rate limit of 50/min\n".to_owned() + &"work\n".repeat(40);
        assert_eq!(classify(&FAILED, SHORT, &log, now()), Class::TaskFailed);
    }

    #[test]
    fn a_timeout_is_not_a_usage_limit() {
        let log = "Claude AI usage limit reached|1764511200\n";
        assert_eq!(
            classify(&Outcome::TimedOut, SHORT, log, now()),
            Class::TaskFailed
        );
        assert_eq!(
            classify(&Outcome::Killed { signal: 9 }, SHORT, log, now()),
            Class::TaskFailed
        );
    }

    #[test]
    fn usage_limits_with_their_reset_times() {
        let epoch = UNIX_EPOCH + Duration::from_secs(1_764_511_200);
        let cases: [(&str, Option<SystemTime>); 5] = [
            ("Claude AI usage limit reached|1764511200", Some(epoch)),
            (
                "Error: You've hit your usage limit. Try again in 4 days 6 hours.",
                Some(now() + Duration::from_secs(4 * 86_400 + 6 * 3600)),
            ),
            (
                r#"{"type":"error","error":{"type":"rate_limit_error","resetsAt":1764511200}}"#,
                Some(epoch),
            ),
            (
                r#"{"error":"quota exceeded","resets_at":"2025-11-30T14:00:00Z"}"#,
                Some(epoch),
            ),
            ("429 Too Many Requests", None),
        ];
        for (log, reset) in cases {
            assert_eq!(
                classify(&FAILED, SHORT, log, now()),
                Class::Limited { reset },
                "{log}"
            );
        }
    }

    #[test]
    fn clock_times_are_the_next_such_local_time() {
        for text in ["5-hour limit reached ∙ resets 1pm", "try again at 3:51 PM"] {
            let Class::Limited { reset: Some(at) } =
                classify(&FAILED, SHORT, &format!("usage limit\n{text}"), now())
            else {
                panic!("{text}: no reset time");
            };
            let ahead = at.duration_since(now()).unwrap();
            assert!(
                ahead > Duration::ZERO && ahead <= Duration::from_secs(86_400),
                "{text}: {ahead:?}"
            );
        }
    }

    /// A time that names its zone is that zone's clock, not this host's:
    /// Claude says "resets 3:51pm (Europe/Paris)".
    #[test]
    fn a_clock_time_with_a_zone_is_read_in_that_zone() {
        for (zone, text) in [
            ("Europe/Paris", "resets 3:51pm (Europe/Paris)"),
            (
                "America/New_York",
                "Limit reached, resets 3:51pm (America/New_York)",
            ),
            ("Asia/Tokyo", "try again at 15:51 (Asia/Tokyo)"),
        ] {
            let Class::Limited { reset: Some(at) } =
                classify(&FAILED, SHORT, &format!("usage limit\n{text}"), now())
            else {
                panic!("{text}: no reset time");
            };
            let there = jiff::Timestamp::try_from(at)
                .unwrap()
                .to_zoned(jiff::tz::TimeZone::get(zone).unwrap());
            assert_eq!((there.hour(), there.minute()), (15, 51), "{text}: {there}");
            let ahead = at.duration_since(now()).unwrap();
            assert!(ahead <= Duration::from_secs(86_400), "{text}: {ahead:?}");
        }
        // A zone farm does not know: this host's clock, as before.
        assert_eq!(
            reset_time("resets 3:51pm (Mars/Olympus)", now()),
            crate::age::next_local(now(), 15, 51)
        );
    }

    #[test]
    fn json_is_error_is_not_a_success_whatever_the_exit() {
        let log = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 529 Overloaded"}"#;
        assert_eq!(
            classify(&Outcome::Success, SHORT, log, now()),
            Class::Transient
        );
        let ok = r#"{"type":"result","is_error":false,"result":"done"}"#;
        assert_eq!(
            classify(&Outcome::Success, SHORT, ok, now()),
            Class::Success
        );
    }

    #[test]
    fn setup_errors_stop_everything_and_say_why() {
        let Class::Fatal(why) = classify(
            &FAILED,
            SHORT,
            "Invalid API key · Please run /login\n",
            now(),
        ) else {
            panic!("not fatal");
        };
        assert!(
            why.contains("API key") && why.contains("Please run /login"),
            "{why}"
        );
        let bad_flag = "error: unexpected argument '--bogus' found\n";
        assert!(matches!(
            classify(&FAILED, SHORT, bad_flag, now()),
            Class::Fatal(_)
        ));
        // After ten minutes of work it is the task's own test output.
        let ran = Duration::from_secs(600);
        assert_eq!(classify(&FAILED, ran, bad_flag, now()), Class::TaskFailed);
    }

    #[test]
    fn api_trouble_is_transient() {
        for log in [
            "API Error: 500 Internal Server Error",
            "Error: 529 {\"type\":\"overloaded_error\"}",
            "TypeError: fetch failed",
        ] {
            assert_eq!(
                classify(&FAILED, SHORT, log, now()),
                Class::Transient,
                "{log}"
            );
        }
        assert_eq!(
            classify(&FAILED, SHORT, "test failed: 3 of 10\n", now()),
            Class::TaskFailed
        );
    }

    #[test]
    fn a_presets_own_words_count_too() {
        let own = Patterns {
            limited: vec!["credit balance is too low".into()],
            transient: vec![],
            fatal: vec!["workspace not trusted".into()],
        };
        let log = "Error: Credit balance is too low\n";
        assert_eq!(classify(&FAILED, SHORT, log, now()), Class::TaskFailed);
        assert_eq!(
            super::classify(&own, &FAILED, SHORT, log, now()),
            Class::Limited { reset: None }
        );
        assert!(matches!(
            super::classify(&own, &FAILED, SHORT, "Workspace not trusted\n", now()),
            Class::Fatal(_)
        ));
    }

    #[test]
    fn sessions_that_never_started() {
        let quick = Duration::from_millis(30);
        let env_says = "env: 'nosuch-node': No such file or directory\n";
        assert!(did_not_start(
            &Outcome::Failed { code: 127 },
            quick,
            env_says
        ));
        assert!(did_not_start(&Outcome::Failed { code: 126 }, quick, ""));
        assert!(did_not_start(&FAILED, quick, " \n"));
        // It said something, or took its time, or succeeded: it ran.
        assert!(!did_not_start(&FAILED, quick, "tests failed\n"));
        assert!(!did_not_start(&FAILED, Duration::from_secs(5), ""));
        assert!(!did_not_start(&Outcome::Success, quick, ""));
        assert!(!did_not_start(&Outcome::TimedOut, quick, ""));
        // After minutes of work, 127 is a command the task's tests lacked.
        let long = Duration::from_secs(600);
        assert!(!did_not_start(
            &Outcome::Failed { code: 127 },
            long,
            env_says
        ));
    }

    #[test]
    fn spelled_durations() {
        assert_eq!(
            spelled_duration("5 minutes."),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            spelled_duration("1h 20m or so"),
            Some(Duration::from_secs(4800))
        );
        assert_eq!(spelled_duration("a while"), None);
    }

    /// What five real CLIs printed before a stalled API's model said
    /// anything, killed by a timeout: the API's trouble, not the task's.
    #[test]
    fn real_clis_killed_before_the_first_answer_are_an_api_error() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let stalled = [
            include_str!("../../tests/fixtures/claude-2.1.332/stalled-killed-at-8s.jsonl"),
            include_str!("../../tests/fixtures/codex-0.171.0/stalled-killed-at-8s.jsonl"),
            include_str!("../../tests/fixtures/gemini-cli-0.61.0/stalled-killed-at-8s.jsonl"),
            include_str!("../../tests/fixtures/qwen-code-0.24.4/stalled-killed-at-8s.jsonl"),
            include_str!("../../tests/fixtures/opencode-1.18.33/stalled-killed-at-40s.log"),
        ];
        for log in stalled {
            assert_eq!(
                super::classify(&p, &Outcome::TimedOut, Duration::from_secs(8), log, now),
                Class::Transient,
                "{log}"
            );
        }
        // Once the model answered, a timeout is the task's.
        let answered =
            include_str!("../../tests/fixtures/codex-0.171.0/shell-tool-call-success.jsonl");
        assert_eq!(
            super::classify(
                &p,
                &Outcome::TimedOut,
                Duration::from_secs(8),
                answered,
                now
            ),
            Class::TaskFailed
        );
        assert_eq!(
            super::classify(&p, &Outcome::Success, Duration::from_secs(2), answered, now),
            Class::Success
        );
    }

    /// Gemini CLI 0.61.0's real output (tests/fixtures/gemini-cli-0.61.0).
    #[test]
    fn gemini_clis_real_output_is_classified() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let refused = include_str!("../../tests/fixtures/gemini-cli-0.61.0/401-refused.jsonl");
        let retried =
            include_str!("../../tests/fixtures/gemini-cli-0.61.0/429-twice-retried-silently.jsonl");
        let failed = Outcome::Failed { code: 1 };
        assert!(matches!(
            super::classify(&p, &failed, Duration::from_secs(17), refused, now),
            Class::Fatal(_)
        ));
        assert_eq!(
            super::classify(&p, &Outcome::Success, Duration::from_secs(17), retried, now),
            Class::Success
        );
        // Killed before the model said anything: the API, not the task.
        let started: String = retried.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(
            super::classify(
                &p,
                &Outcome::TimedOut,
                Duration::from_secs(9),
                &started,
                now
            ),
            Class::Transient
        );
        assert_eq!(
            super::classify(&p, &Outcome::TimedOut, Duration::from_secs(9), retried, now),
            Class::TaskFailed
        );
    }

    /// opencode 1.18.33's real output with its log lines (what the preset
    /// prints since `--print-logs`): a session that timed out is the API's
    /// only when opencode sent its model's request and had no answer.
    #[test]
    fn opencodes_logged_output_is_classified() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let success =
            include_str!("../../tests/fixtures/opencode-1.18.33/shell-tool-call-success.log");
        let retried =
            include_str!("../../tests/fixtures/opencode-1.18.33/429-twice-retried-logged.log");
        let stalled =
            include_str!("../../tests/fixtures/opencode-1.18.33/stalled-killed-at-40s.log");
        let timed_out =
            |log: &str| super::classify(&p, &Outcome::TimedOut, Duration::from_secs(40), log, now);
        assert_eq!(
            super::classify(&p, &Outcome::Success, Duration::from_secs(9), success, now),
            Class::Success
        );
        assert_eq!(
            super::classify(&p, &Outcome::Success, Duration::from_secs(16), retried, now),
            Class::Success
        );
        assert_eq!(timed_out(stalled), Class::Transient);
        // Answered, then out of time: the task's (as is the 429 run, once
        // answered).
        assert_eq!(timed_out(retried), Class::TaskFailed);
        assert_eq!(timed_out(success), Class::TaskFailed);
        // Started up but never sent its model's request (the side request
        // for a title is not it): nothing says the API is to blame.
        let before: String = stalled
            .lines()
            .take_while(|l| !l.contains("small=false"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(before.contains("small=true"), "{before}");
        assert_eq!(timed_out(&before), Class::TaskFailed);
    }

    /// The real successful sessions of each CLI (a shell tool call that
    /// commits, then an answer; stderr's warnings in the same log): a
    /// success, and once the model answered, a timeout is the task's.
    #[test]
    fn real_tool_call_sessions_are_a_success_and_a_timeout_after_them_the_tasks() {
        let p = Patterns::default();
        let now = SystemTime::now();
        for log in [
            include_str!("../../tests/fixtures/claude-2.1.332/bash-tool-call-success.jsonl"),
            include_str!("../../tests/fixtures/codex-0.171.0/shell-tool-call-success.jsonl"),
            include_str!("../../tests/fixtures/gemini-cli-0.61.0/shell-tool-call-success.log"),
            include_str!("../../tests/fixtures/qwen-code-0.24.4/shell-tool-call-success.log"),
            include_str!("../../tests/fixtures/opencode-1.18.33/shell-tool-call-success.log"),
        ] {
            let took = Duration::from_secs(5);
            assert_eq!(
                super::classify(&p, &Outcome::Success, took, log, now),
                Class::Success,
                "{log}"
            );
            assert_eq!(
                super::classify(&p, &Outcome::TimedOut, took, log, now),
                Class::TaskFailed,
                "{log}"
            );
        }
    }

    /// Qwen Code 0.24.4's real output (tests/fixtures/qwen-code-0.24.4).
    #[test]
    fn qwen_codes_real_output_is_classified() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let refused = include_str!("../../tests/fixtures/qwen-code-0.24.4/401-refused.jsonl");
        let retried =
            include_str!("../../tests/fixtures/qwen-code-0.24.4/429-twice-retried-silently.jsonl");
        let failed = Outcome::Failed { code: 1 };
        assert!(matches!(
            super::classify(&p, &failed, Duration::from_secs(8), refused, now),
            Class::Fatal(_)
        ));
        assert_eq!(
            super::classify(&p, &Outcome::Success, Duration::from_secs(9), retried, now),
            Class::Success
        );
    }

    /// opencode 1.18.33's real output (tests/fixtures/opencode-1.18.33).
    #[test]
    fn opencodes_real_output_is_classified() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let refused = include_str!("../../tests/fixtures/opencode-1.18.33/401-refused.jsonl");
        let retried =
            include_str!("../../tests/fixtures/opencode-1.18.33/429-twice-retried-silently.jsonl");
        let failed = Outcome::Failed { code: 1 };
        assert!(matches!(
            super::classify(&p, &failed, Duration::from_secs(15), refused, now),
            Class::Fatal(_)
        ));
        assert_eq!(
            super::classify(&p, &Outcome::Success, Duration::from_secs(21), retried, now),
            Class::Success
        );
    }

    /// Codex 0.171.0's real output (tests/fixtures/codex-0.171.0).
    #[test]
    fn codexs_real_api_failures_are_classified() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let failed = Outcome::Failed { code: 1 };
        let gave_up_429 = include_str!("../../tests/fixtures/codex-0.171.0/429-gave-up.jsonl");
        let gave_up_401 =
            include_str!("../../tests/fixtures/codex-0.171.0/401-retried-gave-up.jsonl");
        assert_eq!(
            super::classify(&p, &failed, Duration::from_secs(1), gave_up_429, now),
            Class::Limited { reset: None }
        );
        match super::classify(&p, &failed, Duration::from_secs(8), gave_up_401, now) {
            Class::Fatal(why) => assert!(why.contains("401 Unauthorized"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// Claude Code 2.1.332's real output (tests/fixtures/claude-2.1.332).
    #[test]
    fn claude_codes_real_api_failures_are_classified() {
        let p = Patterns::default();
        let now = SystemTime::now();
        let gave_up_429 =
            include_str!("../../tests/fixtures/claude-2.1.332/retried-429-gave-up.jsonl");
        let gave_up_401 =
            include_str!("../../tests/fixtures/claude-2.1.332/retried-401-gave-up.jsonl");
        let retried =
            include_str!("../../tests/fixtures/claude-2.1.332/retried-429-then-success.jsonl");
        let success =
            include_str!("../../tests/fixtures/claude-2.1.332/bash-tool-call-success.jsonl");
        let failed = Outcome::Failed { code: 1 };
        let long = Duration::from_secs(185);
        assert_eq!(
            super::classify(&p, &failed, long, gave_up_429, now),
            Class::Limited { reset: None }
        );
        match super::classify(&p, &failed, long, gave_up_401, now) {
            Class::Fatal(why) => {
                assert!(why.contains("HTTP 401"), "{why}");
                assert!(why.contains("Invalid API key"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        let short = Duration::from_secs(4);
        assert_eq!(
            super::classify(&p, &Outcome::Success, short, retried, now),
            Class::Success
        );
        assert_eq!(
            super::classify(&p, &Outcome::Success, short, success, now),
            Class::Success
        );
        // Killed by the timeout while retrying: the watch's verdict.
        let last = gave_up_429
            .lines()
            .rev()
            .find_map(crate::run::watch::retry_of)
            .unwrap();
        assert_eq!(retrying(last, gave_up_429), Class::Limited { reset: None });
        let last = gave_up_401
            .lines()
            .rev()
            .find_map(crate::run::watch::retry_of)
            .unwrap();
        assert!(matches!(retrying(last, gave_up_401), Class::Fatal(_)));
        // Killed by the timeout before the model said anything: the API.
        let init = gave_up_429.lines().next().unwrap();
        assert_eq!(
            super::classify(&p, &Outcome::TimedOut, long, init, now),
            Class::Transient
        );
        assert_eq!(
            super::classify(&p, &Outcome::TimedOut, long, success, now),
            Class::TaskFailed
        );
    }
}
