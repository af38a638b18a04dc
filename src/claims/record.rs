//! The claim record: what `current_tasks/<task>.txt` holds, written and read.
//!
//! A claim says who holds a task and since when, in human-readable TOML (the
//! format is documented in `current_tasks/README.md`). Parsing is strict and
//! total: anything that is not a complete, well-formed record — empty,
//! truncated, oversized, not UTF-8, missing or ill-typed fields — is a
//! [`Corrupt`] with the reason, never a panic. Unknown extra fields are
//! tolerated so that an older farm does not call a newer farm's claims corrupt.

use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::claims::host::Here;
use crate::names::TaskId;

/// Claim files larger than this are corrupt without being read further.
pub const MAX_CLAIM_BYTES: u64 = 4096;

const HEADER: &str =
    "# farm claim: this task is being worked on. Format: current_tasks/README.md\n";

/// A random value that names one claim: who holds a task is decided by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Nonce(String);

impl Nonce {
    pub fn random() -> Nonce {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the OS random number generator is available");
        Nonce(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn parse(s: &str) -> Result<Nonce, String> {
        if s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Nonce(s.to_owned()))
        } else {
            Err(format!(
                "nonce `{}` is not 32 lowercase hex digits",
                s.escape_debug()
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 digits, enough to tell claims apart in a listing.
    pub fn short(&self) -> &str {
        &self.0[..8]
    }
}

impl fmt::Display for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The process that holds a claim and keeps its OS lock, when there is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Start time of `pid` in clock ticks since boot, so a reused pid is told apart.
    pub start: u64,
}

/// One claim record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub task: TaskId,
    pub agent: String,
    pub host: String,
    pub boot_id: String,
    /// `None` for a claim made with no holder process (`farm claim TASK`):
    /// it lives until released or until its heartbeat goes stale.
    pub holder: Option<Holder>,
    pub nonce: Nonce,
    pub claimed_at: SystemTime,
    pub heartbeat_at: SystemTime,
    pub attempt: u32,
}

/// Why a claim file is not a valid record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Corrupt(pub String);

/// The record as it is spelled in the file.
#[derive(Serialize, Deserialize, Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Raw {
    task: String,
    agent: String,
    host: String,
    boot_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid_start: Option<u64>,
    nonce: String,
    claimed_at: String,
    heartbeat_at: String,
    attempt: u32,
}

impl Claim {
    /// A new claim on `task` by `agent` on this host, at `now`.
    pub fn new(
        task: TaskId,
        agent: &str,
        holder: Option<Holder>,
        attempt: u32,
        now: SystemTime,
    ) -> Claim {
        let here = Here::current();
        Claim {
            task,
            agent: agent.to_owned(),
            host: here.host.clone(),
            boot_id: here.boot_id.clone(),
            holder,
            nonce: Nonce::random(),
            claimed_at: now,
            heartbeat_at: now,
            attempt,
        }
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        let raw = Raw {
            task: self.task.to_string(),
            agent: self.agent.clone(),
            host: self.host.clone(),
            boot_id: self.boot_id.clone(),
            pid: self.holder.map(|h| h.pid),
            pid_start: self.holder.map(|h| h.start),
            nonce: self.nonce.to_string(),
            claimed_at: timestamp(self.claimed_at),
            heartbeat_at: timestamp(self.heartbeat_at),
            attempt: self.attempt,
        };
        let body = toml::to_string(&raw).expect("a claim record always serializes");
        format!("{HEADER}{body}")
    }

    /// Parse a claim file's bytes. Total: every input gives a claim or a reason.
    pub fn parse(bytes: &[u8]) -> Result<Claim, Corrupt> {
        let bad = |s: String| Err(Corrupt(s));
        if bytes.is_empty() {
            return bad("empty file".into());
        }
        if bytes.len() as u64 > MAX_CLAIM_BYTES {
            return bad(format!("larger than {MAX_CLAIM_BYTES} bytes"));
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return bad("not UTF-8 text".into());
        };
        let raw: Raw = match Raw::as_farm_writes_it(text).map_or_else(|| toml::from_str(text), Ok) {
            Ok(raw) => raw,
            Err(e) => return bad(format!("not a claim record: {}", one_line(e.message()))),
        };
        let task = TaskId::parse(&raw.task).map_err(|e| Corrupt(e.to_string()))?;
        crate::names::check_agent_name(&raw.agent).map_err(|e| Corrupt(e.to_string()))?;
        check_name("host", &raw.host)?;
        if raw.boot_id.len() > 64 || raw.boot_id.chars().any(char::is_control) {
            return bad("boot_id is not a boot id".into());
        }
        let holder = match (raw.pid, raw.pid_start) {
            (None, None) => None,
            (Some(pid), Some(start)) if pid > 0 => Some(Holder { pid, start }),
            (Some(0), _) => return bad("pid is 0".into()),
            _ => return bad("pid and pid_start must be given together".into()),
        };
        let nonce = Nonce::parse(&raw.nonce).map_err(Corrupt)?;
        let claimed_at = parse_time("claimed_at", &raw.claimed_at)?;
        let heartbeat_at = parse_time("heartbeat_at", &raw.heartbeat_at)?;
        if raw.attempt == 0 {
            return bad("attempt is 0; attempts count from 1".into());
        }
        Ok(Claim {
            task,
            agent: raw.agent,
            host: raw.host,
            boot_id: raw.boot_id,
            holder,
            nonce,
            claimed_at,
            heartbeat_at,
            attempt: raw.attempt,
        })
    }

    /// `agent@host`, as claims are named in messages.
    pub fn who(&self) -> String {
        format!("{}@{}", self.agent, self.host)
    }
}

/// Agent names: what `--agent` accepts and what a claim may carry — the
/// task-id rule, since an agent name becomes a directory name.
pub fn check_agent_name(name: &str) -> Result<(), String> {
    crate::names::check_agent_name(name).map_err(|e| e.to_string())
}

fn check_name(field: &str, value: &str) -> Result<(), Corrupt> {
    if value.is_empty() {
        Err(Corrupt(format!("{field} is empty")))
    } else if value.chars().count() > 100 {
        Err(Corrupt(format!("{field} is longer than 100 characters")))
    } else if value
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '@')
    {
        Err(Corrupt(format!(
            "{field} `{}` contains whitespace, `@` or a control character",
            value.escape_debug()
        )))
    } else {
        Ok(())
    }
}

/// RFC 3339 in UTC with milliseconds: fixed width, sorts as text.
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn parse_time(field: &str, s: &str) -> Result<SystemTime, Corrupt> {
    humantime::parse_rfc3339(s).map_err(|e| {
        Corrupt(format!(
            "{field} `{}` is not an RFC 3339 time: {e}",
            s.escape_debug()
        ))
    })
}

/// [`Raw`]'s keys, in the order they are written.
const KEYS: [&str; 10] = [
    "task",
    "agent",
    "host",
    "boot_id",
    "pid",
    "pid_start",
    "nonce",
    "claimed_at",
    "heartbeat_at",
    "attempt",
];

impl Raw {
    /// The record in `text` if it is spelled exactly as [`Claim::to_toml`]
    /// writes one — comment lines, then `key = "text"` or `key = 123` lines of
    /// known keys, each once, strings without escapes — else `None`, and the
    /// toml crate reads it. Every claim farm writes takes this path: listing
    /// ten thousand claims spent a fifth of its time in the general parser.
    /// Whatever it accepts, the toml crate reads the same way (a property
    /// test holds the two together).
    fn as_farm_writes_it(text: &str) -> Option<Raw> {
        let mut raw = Raw::default();
        let mut seen = 0u16;
        for line in text.split_inclusive('\n') {
            let line = line.strip_suffix('\n')?;
            if line.starts_with('#') {
                if line.chars().any(|c| c.is_control() && c != '\t') {
                    return None;
                }
                continue;
            }
            let (key, value) = line.split_once(" = ")?;
            let text = || {
                let s = value.strip_prefix('"')?.strip_suffix('"')?;
                let plain = s.chars().all(|c| c != '"' && c != '\\' && !c.is_control());
                plain.then(|| s.to_owned())
            };
            // TOML integers: no sign, no `_`, no leading zero.
            let number = || {
                let plain = value.bytes().all(|b| b.is_ascii_digit())
                    && (value == "0" || !value.starts_with('0'));
                plain.then(|| value.parse::<i64>().ok()).flatten()
            };
            let bit = KEYS.iter().position(|k| *k == key)?;
            if seen & (1 << bit) != 0 {
                return None;
            }
            match key {
                "task" => raw.task = text()?,
                "agent" => raw.agent = text()?,
                "host" => raw.host = text()?,
                "boot_id" => raw.boot_id = text()?,
                "pid" => raw.pid = Some(number()?.try_into().ok()?),
                "pid_start" => raw.pid_start = Some(number()?.try_into().ok()?),
                "nonce" => raw.nonce = text()?,
                "claimed_at" => raw.claimed_at = text()?,
                "heartbeat_at" => raw.heartbeat_at = text()?,
                "attempt" => raw.attempt = number()?.try_into().ok()?,
                _ => return None,
            }
            seen |= 1 << bit;
        }
        let optional = ["pid", "pid_start"];
        let complete = KEYS
            .iter()
            .enumerate()
            .all(|(bit, k)| seen & (1 << bit) != 0 || optional.contains(k));
        complete.then_some(raw)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn sample() -> Claim {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        Claim {
            task: TaskId::parse("parse-if").unwrap(),
            agent: "alice".into(),
            host: "box1".into(),
            boot_id: "0b6e3f6c-1d2a-4b8e-9f00-123456789abc".into(),
            holder: Some(Holder {
                pid: 4121,
                start: 987_654,
            }),
            nonce: Nonce::parse("00112233445566778899aabbccddeeff").unwrap(),
            claimed_at: at,
            heartbeat_at: at + Duration::from_secs(30),
            attempt: 2,
        }
    }

    #[test]
    fn round_trips() {
        let c = sample();
        assert_eq!(Claim::parse(c.to_toml().as_bytes()).unwrap(), c);
        let no_holder = Claim { holder: None, ..c };
        assert_eq!(
            Claim::parse(no_holder.to_toml().as_bytes()).unwrap(),
            no_holder
        );
    }

    #[test]
    fn file_is_readable_toml() {
        insta::assert_snapshot!(sample().to_toml(), @r#"
        # farm claim: this task is being worked on. Format: current_tasks/README.md
        task = "parse-if"
        agent = "alice"
        host = "box1"
        boot_id = "0b6e3f6c-1d2a-4b8e-9f00-123456789abc"
        pid = 4121
        pid_start = 987654
        nonce = "00112233445566778899aabbccddeeff"
        claimed_at = "2026-11-30T00:53:20.123Z"
        heartbeat_at = "2026-11-30T00:53:50.123Z"
        attempt = 2
        "#);
    }

    #[test]
    fn corrupt_inputs_say_why() {
        let good = sample().to_toml();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "empty file"),
            (vec![b'#'; 5000], "larger than"),
            (vec![0xff, 0xfe, b'a'], "not UTF-8"),
            (
                good.as_bytes()[..good.len() / 2].to_vec(),
                "not a claim record",
            ),
            (
                good.replace("attempt = 2", "attempt = 0").into_bytes(),
                "attempt is 0",
            ),
            (
                good.replace("parse-if", "../etc").into_bytes(),
                "invalid task id",
            ),
            (good.replace("pid = 4121\n", "").into_bytes(), "together"),
            (good.replace("0011", "zz11").into_bytes(), "nonce"),
            (
                good.replace("2026-11-30T00:53:20.123Z", "yesterday")
                    .into_bytes(),
                "claimed_at",
            ),
            (
                good.replace("\"alice\"", "\"al ice\"").into_bytes(),
                "agent",
            ),
            (
                good.replace("attempt = 2", "attempt = \"2\"").into_bytes(),
                "not a claim record",
            ),
        ];
        for (bytes, want) in cases {
            let why = Claim::parse(&bytes).unwrap_err().0;
            assert!(why.contains(want), "want {want:?} in {why:?}");
            assert!(!why.contains('\n'), "one line: {why:?}");
        }
    }

    #[test]
    fn unknown_fields_are_tolerated() {
        let text = format!("{}future = true\n", sample().to_toml());
        assert_eq!(Claim::parse(text.as_bytes()).unwrap(), sample());
    }

    #[test]
    fn nonces_are_random_and_valid() {
        let a = Nonce::random();
        assert_ne!(a, Nonce::random());
        assert_eq!(Nonce::parse(a.as_str()).unwrap(), a);
    }

    fn arb_claim() -> impl Strategy<Value = Claim> {
        (
            "[A-Za-z0-9][A-Za-z0-9_-]{0,30}",
            "[a-z][a-z0-9_-]{0,20}",
            "[a-z][a-z0-9.-]{0,20}",
            proptest::option::of((1u32.., 0..i64::MAX as u64)),
            0u64..4_000_000_000_000,
            1u32..,
        )
            .prop_map(|(task, agent, host, holder, ms, attempt)| Claim {
                task: TaskId::parse(&task).unwrap(),
                agent,
                host,
                boot_id: "b".into(),
                holder: holder.map(|(pid, start)| Holder { pid, start }),
                nonce: Nonce::random(),
                claimed_at: UNIX_EPOCH + Duration::from_millis(ms),
                heartbeat_at: UNIX_EPOCH + Duration::from_millis(ms + 1),
                attempt,
            })
    }

    /// A value as TOML spells one, or near it: strings with quotes,
    /// escapes, tabs, controls and other scripts; numbers with signs,
    /// leading zeros, `_` or out of range.
    fn near_value() -> impl Strategy<Value = String> {
        prop_oneof![
            "\"[a-z0-9 é-]{0,12}\"",
            "\"[a-z]{0,4}(\\\\|\\\\[nt\"]|\\\\u0041|\"|\t|\u{85}|\r)[a-z]{0,4}\"",
            "'[a-z0-9]{0,6}'",
            "[+-]?[0-9_]{1,21}",
            "0[0-9]{0,2}",
            Just("true".to_owned()),
        ]
    }

    /// A line of a claim file, or one near it: known and unknown keys, odd
    /// spacing, comments, blanks.
    fn near_line() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            proptest::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
            "[a-z_\" ]{1,8}",
        ];
        prop_oneof![
            6 => (key, " ?= ?", near_value()).prop_map(|(k, eq, v)| format!("{k}{eq}{v}")),
            1 => "#[a-z \t\r\u{7f}]{0,10}",
            1 => "[ \t]{0,2}",
        ]
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Claim::parse(&bytes);
        }

        #[test]
        fn parse_never_panics_on_near_records(cut in 0usize..400, junk in "\\PC{0,20}") {
            let text = sample().to_toml();
            let cut = cut.min(text.len());
            let mut bytes = text.as_bytes()[..cut].to_vec();
            bytes.extend_from_slice(junk.as_bytes());
            if let Ok(c) = Claim::parse(&bytes) {
                // Only a cut that keeps every field can still parse, and then it is the record.
                prop_assert_eq!(c.task.as_str(), "parse-if");
            }
        }

        #[test]
        fn every_valid_claim_round_trips(c in arb_claim()) {
            prop_assert_eq!(Claim::parse(c.to_toml().as_bytes()).unwrap(), c);
        }

        /// What farm writes takes the fast path; whatever the fast path
        /// reads, the toml crate reads the same.
        #[test]
        fn the_fast_path_reads_what_farm_writes(c in arb_claim()) {
            prop_assert!(Raw::as_farm_writes_it(&c.to_toml()).is_some());
        }
    }

    proptest! {
        // Records the fast path takes are a few in a hundred: many cases.
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// A record with some values changed and some lines swapped for, or
        /// followed by, lines near them: often one the fast path still
        /// takes, often not.
        #[test]
        fn the_fast_path_agrees_with_the_toml_crate(
            edits in proptest::collection::vec((0usize..24, near_line(), near_value()), 11),
            end in "\n?",
        ) {
            let good = sample().to_toml();
            let mut lines = Vec::new();
            for (line, (edit, near, value)) in good.lines().zip(edits) {
                match (edit, line.split_once(" = ")) {
                    (0..=2, Some((key, _))) => lines.push(format!("{key} = {value}")),
                    (3, _) => lines.push(near),
                    (4, _) => lines.extend([line.to_owned(), near]),
                    _ => lines.push(line.to_owned()),
                }
            }
            let text = lines.join("\n") + &end;
            if let Some(fast) = Raw::as_farm_writes_it(&text) {
                let slow: Result<Raw, _> = toml::from_str(&text);
                prop_assert_eq!(Ok(fast), slow.map_err(|e| e.to_string()), "{:?}", text);
            }
        }
    }
}
