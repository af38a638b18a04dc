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
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::{Value, json};

use crate::claims::record::timestamp;
pub use crate::run::event::Event;

pub const FILE: &str = "journal.jsonl";

/// One journal line, newline included: at, pid, agent (none for the run
/// itself), and the event's own fields under its `event`, keys in
/// alphabetical order as farm has always written them.
pub fn line(at: SystemTime, pid: u32, agent: &str, event: &Event<'_>) -> String {
    let mut line = match serde_json::to_value(event) {
        Ok(Value::Object(fields)) => fields,
        // An event is a struct variant, always an object.
        _ => serde_json::Map::new(),
    };
    line.insert("at".into(), json!(timestamp(at)));
    line.insert("pid".into(), json!(pid));
    if !agent.is_empty() {
        line.insert("agent".into(), json!(agent));
    }
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    text
}

/// What is told of every event a journal records (the run's notifier).
pub type Observer = Box<dyn Fn(&str, &Event<'_>) + Send + Sync>;

/// An open journal.
pub struct Journal {
    path: PathBuf,
    file: Mutex<Option<File>>,
    observer: std::sync::OnceLock<Observer>,
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
            observer: std::sync::OnceLock::new(),
        }
    }

    /// Tell `observer` of every event recorded from now on (once: a
    /// second observer is refused, and returned).
    pub fn observe(&self, observer: Observer) -> Result<(), Observer> {
        self.observer.set(observer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `event` of `agent` ("" for the run itself).
    pub fn record(&self, agent: &str, event: &Event<'_>) {
        let text = line(SystemTime::now(), std::process::id(), agent, event);
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
        drop(file);
        if let Some(observer) = self.observer.get() {
            observer(agent, event);
        }
    }
}

/// One journal line as `farm status` and `farm report` read it: when, which
/// run, which agent (none for the run itself), and what happened. Its text
/// borrows from the journal's (see [`read`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<'a> {
    pub at: Cow<'a, str>,
    pub pid: u32,
    pub agent: Option<Cow<'a, str>>,
    pub event: Event<'a>,
}

/// A line is read in one pass: its `at`, `pid` and `agent` are taken aside
/// as they come, and every other key goes on to [`Event`]'s own reader.
/// (`#[serde(flatten)]` would do the same, but it buffers the line twice:
/// it made reading a 30,000-line journal a third slower.)
impl<'de: 'a, 'a> Deserialize<'de> for Entry<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry<'a>, D::Error> {
        d.deserialize_map(EntryVisitor(PhantomData))
    }
}

/// A string that borrows from the journal's text when it can.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Default)]
struct Head<'a> {
    at: Option<Cow<'a, str>>,
    pid: u32,
    agent: Option<Cow<'a, str>>,
}

struct EntryVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for EntryVisitor<'a> {
    type Value = Entry<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a journal line")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Entry<'a>, A::Error> {
        let mut head = Head::default();
        let event = Event::deserialize(Rest {
            map,
            head: &mut head,
        })?;
        Ok(Entry {
            at: head.at.ok_or_else(|| de::Error::missing_field("at"))?,
            pid: head.pid,
            agent: head.agent,
            event,
        })
    }
}

/// A line's map without its `at`, `pid` and `agent`, which go to `head`.
struct Rest<'h, 'a, A> {
    map: A,
    head: &'h mut Head<'a>,
}

impl<'de: 'a, 'a, A: MapAccess<'de>> Deserializer<'de> for Rest<'_, 'a, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de: 'a, 'a, A: MapAccess<'de>> MapAccess<'de> for Rest<'_, 'a, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(Text(key)) = self.map.next_key::<Text<'de>>()? {
            match &*key {
                "at" => self.head.at = Some(self.map.next_value::<Text<'de>>()?.0),
                "pid" => self.head.pid = self.map.next_value()?,
                "agent" => {
                    self.head.agent = self.map.next_value::<Option<Text<'de>>>()?.map(|t| t.0);
                }
                _ => {
                    return match key {
                        Cow::Borrowed(k) => {
                            seed.deserialize(de::value::BorrowedStrDeserializer::new(k))
                        }
                        Cow::Owned(k) => seed.deserialize(de::value::StringDeserializer::new(k)),
                    }
                    .map(Some);
                }
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A text field of a line that may lack it (an older farm's, a hand-made
/// one), which reads as "": `None` then.
pub fn given(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
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
        match e.event {
            Event::RunStart { .. } => {
                open.insert(e.pid);
            }
            Event::RunEnd { .. } => {
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::run::event::Limited;
    use crate::suite::report::Counts;

    /// One of each kind of event, every field set.
    fn every_kind() -> Vec<Event<'static>> {
        let counts = Counts {
            passed: 3,
            failed: 1,
            skipped: 0,
            total: 4,
        };
        vec![
            Event::RunStart {
                agents: vec!["a-1".into(), "a-2".into()],
                cli: Some("claude".into()),
                roles: [("a-1".to_owned(), "tester".to_owned())].into(),
                hub: "/srv/hub".into(),
                store: "fs".into(),
                host: "box1".into(),
            },
            Event::RunEnd {
                sessions: 3,
                done: 1,
                failed: 1,
                rescued: 1,
                cost_usd: Some(0.75),
                input_tokens: Some(1200),
                output_tokens: None,
            },
            Event::Claim {
                task: "t1".into(),
                attempt: 1,
                role: Some("tester".into()),
            },
            Event::SessionEnd {
                task: "t1".into(),
                attempt: 1,
                outcome: "failed with exit code 1".into(),
                class: "task failed".into(),
                secs: 9.25,
                log: "/state/logs/a-1/t1.log".into(),
                cost_usd: Some(0.5),
                input_tokens: Some(10),
                output_tokens: Some(2),
            },
            Event::MergeStart {
                task: "t1".into(),
                conflicts: 2,
            },
            Event::MergeEnd {
                task: "t1".into(),
                outcome: "success".into(),
                result: "resolved".into(),
                secs: 4.5,
                log: "/state/logs/a-1/t1-merge.log".into(),
                cost_usd: None,
                input_tokens: None,
                output_tokens: None,
            },
            Event::Done { task: "t1".into() },
            Event::Failed {
                task: "t2".into(),
                attempt: Some(2),
                attempts: None,
                why: "timed out".into(),
                gave_up: true,
            },
            Event::Rescue {
                task: Some("t2".into()),
                branch: "farm/rescue/t2/n1".into(),
                why: "the tests turned red".into(),
            },
            Event::RescueSkipped {
                task: "t2".into(),
                why: "the run was stopped".into(),
                because: "its commits are on the branch".into(),
            },
            Event::Unstarted {
                task: "t3".into(),
                outcome: "failed with exit code 127".into(),
            },
            Event::Elsewhere {
                task: "t3".into(),
                file: "tasks/done/t3.md".into(),
            },
            Event::Conflict {
                task: "t4".into(),
                files: vec!["a.txt".into(), "b.txt".into()],
            },
            Event::LostRace { task: "t4".into() },
            Event::Reap {
                task: "t5".into(),
                why: "dead: its process is gone".into(),
            },
            Event::Skip {
                task: "t5".into(),
                why: "claim taken over again".into(),
            },
            Event::Limit {
                task: "t6".into(),
                until: "2026-12-01T01:00:00.000Z".into(),
                why: Limited::ApiError,
            },
            Event::Wait {
                until: "2026-12-01T01:00:00.000Z".into(),
                why: Limited::UsageLimit,
                by: "a-2".into(),
                task: "t6".into(),
            },
            Event::Trip {
                until: "2026-12-01T01:00:00.000Z".into(),
                why: "3 failed sessions in a row".into(),
            },
            Event::Message {
                id: "3f9a21c0".into(),
                by: "al@box (pid 4)".into(),
            },
            Event::Asked {
                task: "t7".into(),
                question: "Tabs or spaces?".into(),
                work: Some("farm/rescue/t7/n1".into()),
            },
            Event::Review {
                task: "t8".into(),
                change: "farm/review/t8/n2".into(),
            },
            Event::Standing {
                task: "lint-1".into(),
                role: "linter".into(),
            },
            Event::Budget {
                spent_usd: 1.25,
                max_usd: 1.0,
            },
            Event::GitKilled {
                error: "`git fetch` failed in `/c`: git was killed by signal 9".into(),
            },
            Event::Flaky {
                task: "t7".into(),
                tests: vec!["a::b".into()],
            },
            Event::Tests {
                task: "t7".into(),
                kind: "gate".into(),
                secs: 1.5,
                counts: Some(counts),
                error: Some("no report".into()),
            },
            Event::Steer {
                commit: "0123abcd".into(),
                counts,
                ran: true,
                added: vec!["test-a".into()],
                closed: vec![],
            },
            Event::SteerError {
                error: "cannot run the tests".into(),
            },
            Event::ScheduleFire {
                tasks: vec!["nightly-20261201T0000Z".into()],
            },
            Event::ScheduleError {
                error: "cannot read the schedules".into(),
            },
            Event::ScheduleSkip {
                task: "nightly-20261201T0100Z".into(),
                pending: "nightly-20261201T0000Z".into(),
            },
            Event::Queued {
                task: "t1".into(),
                ahead: 2,
            },
            Event::Unqueued {
                task: "t1".into(),
                secs: 3.5,
                builds: 2,
                tested: 1,
            },
            Event::Batch {
                task: "t1".into(),
                with: vec!["t2".into(), "t3".into()],
            },
            Event::Unknown,
        ]
    }

    /// Which kind `event` is; no wildcard, so that a new kind cannot be
    /// added without a sample in [`every_kind`].
    fn kind(event: &Event<'_>) -> usize {
        match event {
            Event::RunStart { .. } => 0,
            Event::RunEnd { .. } => 1,
            Event::Claim { .. } => 2,
            Event::SessionEnd { .. } => 3,
            Event::MergeStart { .. } => 4,
            Event::MergeEnd { .. } => 5,
            Event::Done { .. } => 6,
            Event::Failed { .. } => 7,
            Event::Rescue { .. } => 8,
            Event::RescueSkipped { .. } => 9,
            Event::Unstarted { .. } => 10,
            Event::Elsewhere { .. } => 11,
            Event::Conflict { .. } => 12,
            Event::LostRace { .. } => 13,
            Event::Reap { .. } => 14,
            Event::Skip { .. } => 15,
            Event::Limit { .. } => 16,
            Event::Trip { .. } => 17,
            Event::Standing { .. } => 18,
            Event::Budget { .. } => 19,
            Event::GitKilled { .. } => 20,
            Event::Flaky { .. } => 21,
            Event::Tests { .. } => 22,
            Event::Steer { .. } => 23,
            Event::SteerError { .. } => 24,
            Event::ScheduleFire { .. } => 25,
            Event::ScheduleError { .. } => 26,
            Event::ScheduleSkip { .. } => 27,
            Event::Queued { .. } => 29,
            Event::Unqueued { .. } => 30,
            Event::Wait { .. } => 31,
            Event::Message { .. } => 32,
            Event::Asked { .. } => 33,
            Event::Review { .. } => 34,
            Event::Batch { .. } => 35,
            Event::Unknown => 28,
        }
    }

    #[test]
    fn every_kind_of_event_reads_back_as_it_was_recorded() {
        let events = every_kind();
        let kinds: std::collections::BTreeSet<usize> = events.iter().map(kind).collect();
        assert_eq!(kinds, (0..=35).collect(), "a kind without a sample");
        let tmp = tempfile::tempdir().unwrap();
        let j = Journal::open(tmp.path());
        for (i, e) in events.iter().enumerate() {
            j.record(if i % 2 == 0 { "a-1" } else { "" }, e);
        }
        let text = read(tmp.path()).unwrap();
        let read: Vec<Entry<'_>> = entries(&text);
        assert_eq!(read.len(), events.len(), "{text}");
        for (i, (e, r)) in events.iter().zip(&read).enumerate() {
            assert_eq!(&r.event, e, "{}", text.lines().nth(i).unwrap());
            assert_eq!(r.pid, std::process::id());
            assert_eq!(r.agent.as_deref(), (i % 2 == 0).then_some("a-1"));
        }
    }

    /// The lines are the ones farm wrote before events were typed, key for
    /// key and byte for byte: keys in alphabetical order, `null` where the
    /// CLI said no cost, no `role` for an agent without one.
    #[test]
    fn lines_are_written_as_they_always_were() {
        let at = humantime::parse_rfc3339("2026-12-01T00:00:10.250Z").unwrap();
        let claim = Event::Claim {
            task: "t1".into(),
            attempt: 2,
            role: None,
        };
        assert_eq!(
            line(at, 7, "a-1", &claim),
            "{\"agent\":\"a-1\",\"at\":\"2026-12-01T00:00:10.250Z\",\"attempt\":2,\
             \"event\":\"claim\",\"pid\":7,\"task\":\"t1\"}\n"
        );
        let end = Event::SessionEnd {
            task: "t1".into(),
            attempt: 2,
            outcome: "success".into(),
            class: "success".into(),
            secs: 9.0,
            log: "/s/t1.log".into(),
            cost_usd: None,
            input_tokens: Some(10),
            output_tokens: None,
        };
        assert_eq!(
            line(at, 7, "a-1", &end),
            "{\"agent\":\"a-1\",\"at\":\"2026-12-01T00:00:10.250Z\",\"attempt\":2,\
             \"class\":\"success\",\"cost_usd\":null,\"event\":\"session_end\",\
             \"input_tokens\":10,\"log\":\"/s/t1.log\",\"outcome\":\"success\",\
             \"output_tokens\":null,\"pid\":7,\"secs\":9.0,\"task\":\"t1\"}\n"
        );
        let fire = Event::ScheduleFire {
            tasks: vec!["n-1".into()],
        };
        assert_eq!(
            line(at, 7, "", &fire),
            "{\"at\":\"2026-12-01T00:00:10.250Z\",\"event\":\"schedule_fire\",\"pid\":7,\
             \"tasks\":[\"n-1\"]}\n"
        );
    }

    /// Lines as older farms and hand-made journals have them: fields
    /// missing, keys in any order, a kind this farm does not know.
    #[test]
    fn old_lines_read_into_their_kinds() {
        let text = concat!(
            r#"{"at":"2026-12-01T00:00:00.000Z","pid":7,"event":"run_start","agents":["b","a"]}"#,
            "\n",
            r#"{"agent":"a","at":"2026-12-01T00:00:09.000Z","attempt":1,"class":"success","event":"session_end","log":"/s/t1.log","outcome":"success","pid":7,"secs":9,"task":"t1"}"#,
            "\n",
            r#"{"at":"2026-12-01T00:00:10.000Z","pid":7,"agent":"b","event":"rescue","task":"t2"}"#,
            "\n",
            r#"{"agent":"a","at":"2026-12-01T00:00:11.000Z","attempts":3,"event":"failed","gave_up":true,"pid":7,"task":"t3","why":"out of attempts"}"#,
            "\n",
            r#"{"agent":"b","at":"2026-12-01T00:00:12.000Z","event":"limit","pid":7,"task":"t4","until":"2026-12-01T01:00:00.000Z","why":"usage limit"}"#,
            "\n",
            r#"{"agent":"b","at":"2026-12-01T00:00:13.000Z","event":"a_kind_of_tomorrow","pid":7,"n":1}"#,
            "\n",
            r#"{"at":"2026-12-01T00:00:14.000Z","event":"run_end","pid":7,"sessions":1,"done":0}"#,
            "\n",
        );
        let read = entries(text);
        let events: Vec<&Event<'_>> = read.iter().map(|e| &e.event).collect();
        assert_eq!(
            events,
            [
                &Event::RunStart {
                    agents: vec!["b".into(), "a".into()],
                    cli: None,
                    roles: BTreeMap::new(),
                    hub: "".into(),
                    store: "".into(),
                    host: "".into(),
                },
                &Event::SessionEnd {
                    task: "t1".into(),
                    attempt: 1,
                    outcome: "success".into(),
                    class: "success".into(),
                    secs: 9.0,
                    log: "/s/t1.log".into(),
                    cost_usd: None,
                    input_tokens: None,
                    output_tokens: None,
                },
                &Event::Rescue {
                    task: Some("t2".into()),
                    branch: "".into(),
                    why: "".into(),
                },
                &Event::Failed {
                    task: "t3".into(),
                    attempt: None,
                    attempts: Some(3),
                    why: "out of attempts".into(),
                    gave_up: true,
                },
                &Event::Limit {
                    task: "t4".into(),
                    until: "2026-12-01T01:00:00.000Z".into(),
                    why: Limited::UsageLimit,
                },
                &Event::Unknown,
                &Event::RunEnd {
                    sessions: 1,
                    done: 0,
                    failed: 0,
                    rescued: 0,
                    cost_usd: None,
                    input_tokens: None,
                    output_tokens: None,
                },
            ]
        );
        assert_eq!(read[2].agent.as_deref(), Some("b"));
        assert_eq!(read[0].agent, None);
        assert!(read.iter().all(|e| e.pid == 7));
        // Read without copying: the text is the journal's own.
        let Event::SessionEnd { log, .. } = &read[1].event else {
            unreachable!()
        };
        assert!(matches!(log, Cow::Borrowed(_)));
        assert!(matches!(read[1].at, Cow::Borrowed(_)));
    }

    #[test]
    fn a_cut_line_is_skipped_and_escaped_text_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let j = Journal::open(tmp.path());
        j.record(
            "a-1",
            &Event::Claim {
                task: "t1".into(),
                attempt: 1,
                role: None,
            },
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(j.path())
            .unwrap()
            .write_all(b"{\"at\": \"cut")
            .unwrap();
        let text = read(tmp.path()).unwrap();
        let read_back = entries(&text);
        assert_eq!(read_back.len(), 1);
        assert!(read(&tmp.path().join("none")).unwrap().is_empty());
        // Escaped text is read too (owned, not borrowed).
        let escaped = entries(
            "{\"at\":\"x\",\"event\":\"reap\",\"task\":\"t\",\"why\":\"a \\\"quote\\\"\"}\n",
        );
        assert_eq!(
            escaped[0].event,
            Event::Reap {
                task: "t".into(),
                why: "a \"quote\"".into()
            }
        );
        // A line of a known kind without its fields is still that kind.
        assert_eq!(
            entries("{\"at\":\"x\",\"event\":\"done\"}\n")[0].event,
            Event::Done { task: "".into() }
        );
        // A line without its time or its kind is no line.
        assert!(
            entries("{\"event\":\"done\",\"task\":\"t\"}\n{\"at\":\"x\",\"task\":\"t\"}\n")
                .is_empty()
        );
    }
}
