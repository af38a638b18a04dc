//! The run's journal: one JSON line per session and notable event (claim,
//! lost race, reap, usage-limit wait, conflict, rescue, circuit breaker),
//! appended to `journal.jsonl` in the state directory. `farm status` reads
//! it, during a run or after.
//!
//! Every line is written with one `write` on a file opened for appending,
//! so lines of concurrent runs never interleave (they are far below the
//! size the kernel appends atomically to a local file). A journal that
//! cannot be written is reported once and otherwise ignored: it records the
//! run, it must never stop it.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::claims::record::timestamp;

pub const FILE: &str = "journal.jsonl";

/// One journal line, newline included: at, pid, agent (none for the run
/// itself), event, then `fields` (a JSON object) merged in.
pub fn line(at: SystemTime, pid: u32, agent: &str, event: &str, fields: Value) -> String {
    let mut line = Map::new();
    line.insert("at".into(), json!(timestamp(at)));
    line.insert("pid".into(), json!(pid));
    if !agent.is_empty() {
        line.insert("agent".into(), json!(agent));
    }
    line.insert("event".into(), json!(event));
    if let Value::Object(fields) = fields {
        line.extend(fields);
    }
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    text
}

/// An open journal.
pub struct Journal {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl Journal {
    /// The journal in `state` (created on first write).
    pub fn open(state: &Path) -> Journal {
        let path = state.join(FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| eprintln!("farm: cannot open the journal `{}`: {e}", path.display()))
            .ok();
        Journal {
            path,
            file: Mutex::new(file),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one event of `agent` ("" for the run itself), with `fields`
    /// (a JSON object) merged in.
    pub fn log(&self, agent: &str, event: &str, fields: Value) {
        let text = line(SystemTime::now(), std::process::id(), agent, event, fields);
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = file.as_mut()
            && let Err(e) = f.write_all(text.as_bytes())
        {
            eprintln!(
                "farm: cannot write the journal `{}`: {e}",
                self.path.display()
            );
            *file = None;
        }
    }
}

/// One journal line as `farm status` reads it; fields an event lacks are
/// `None`. Its text borrows from the journal's (see [`read`]): a
/// 10,000-session night is 30,000 lines, and a string allocated for each
/// of their fields was a sixth of `farm status`'s time.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Entry<'a> {
    #[serde(borrow)]
    pub at: Cow<'a, str>,
    #[serde(default)]
    pub pid: u32,
    #[serde(default, borrow)]
    pub agent: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub event: Cow<'a, str>,
    #[serde(default, borrow)]
    pub task: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub outcome: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub class: Option<Cow<'a, str>>,
    /// `merge_end`: what became of the merge (resolved, unresolved...).
    #[serde(default, borrow)]
    pub result: Option<Cow<'a, str>>,
    #[serde(default)]
    pub attempt: Option<u32>,
    /// `session_end`, `merge_end`: the session's log.
    #[serde(default, borrow)]
    pub log: Option<Cow<'a, str>>,
    #[serde(default)]
    pub secs: Option<f64>,
    #[serde(default, borrow)]
    pub until: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub why: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub host: Option<Cow<'a, str>>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// `run_start`: the run's agents, and the program of its agent CLI.
    #[serde(default)]
    pub agents: Option<Vec<String>>,
    #[serde(default, borrow)]
    pub cli: Option<Cow<'a, str>>,
    /// `run_start`: each agent's role, for those that have one.
    #[serde(default)]
    pub roles: Option<std::collections::BTreeMap<String, String>>,
}

/// The text of the journal in `state` ("" when there is none yet), for
/// [`entries`] to read.
pub fn read(state: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(state.join(FILE)) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Every readable line of a journal's `text`, oldest first (lines that do
/// not parse — a line cut by a crash — are skipped).
pub fn entries(text: &str) -> Vec<Entry<'_>> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The process ids of the runs in `entries` that started, did not end, and
/// whose process is alive.
pub fn running(entries: &[Entry<'_>]) -> Vec<u32> {
    let mut open = std::collections::BTreeSet::new();
    for e in entries {
        match &*e.event {
            "run_start" => {
                open.insert(e.pid);
            }
            "run_end" => {
                open.remove(&e.pid);
            }
            _ => {}
        }
    }
    open.into_iter()
        .filter(|pid| crate::claims::host::process_start(*pid).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_cut_line_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let j = Journal::open(tmp.path());
        j.log("a-1", "claim", json!({"task": "t1", "attempt": 1}));
        j.log("", "run_end", json!({"sessions": 1}));
        std::fs::OpenOptions::new()
            .append(true)
            .open(j.path())
            .unwrap()
            .write_all(b"{\"at\": \"cut")
            .unwrap();
        let text = read(tmp.path()).unwrap();
        let entries = super::entries(&text);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].agent.as_deref(), Some("a-1"));
        assert_eq!(entries[0].task.as_deref(), Some("t1"));
        assert_eq!(entries[1].event, "run_end");
        assert_eq!(entries[1].pid, std::process::id());
        assert!(read(&tmp.path().join("none")).unwrap().is_empty());
        // Escaped text is read too (owned, not borrowed).
        let escaped =
            super::entries("{\"at\":\"x\",\"event\":\"e\",\"why\":\"a \\\"quote\\\"\"}\n");
        assert_eq!(escaped[0].why.as_deref(), Some("a \"quote\""));
    }
}
