//! The schedule file, `schedules/<id>.toml` on the hub's branch: when it
//! fires, in which zone, how it catches up, and the task each occurrence is.
//!
//! ```toml
//! cron = "0 9 * * 1-5"          # or: at = "2026-12-02T06:00:00+01:00"
//! timezone = "Europe/Berlin"     # IANA name; default UTC
//! title = "Bump the dependencies"
//! description = "Run cargo update; fix what breaks."
//! priority = 1                   # any task field: after, priority, max_attempts, timeout
//! catchup = "latest"             # none | latest | all (default latest)
//! catchup_window = "24h"         # default 24h
//! overlap = "skip"               # skip | allow (default skip)
//! created = "2026-12-01T06:00:00Z"  # written by `farm schedule add`
//! ```

use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::when::When;
use crate::board::{self, Task};
use crate::names::TaskId;

/// Where schedule files live on the branch.
pub const DIR: &str = "schedules";

/// An occurrence's id is `<schedule>-<YYYYMMDDTHHMMZ>`: 15 characters after
/// the schedule's id, which therefore has at most this many.
pub const MAX_ID_LEN: usize = 100 - 15;

/// The path of schedule `id`'s file on the branch.
pub fn path(id: &TaskId) -> String {
    format!("{DIR}/{id}.toml")
}

/// Which missed occurrences a farm makes up for when it comes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Catchup {
    /// None: only an occurrence on time (see [`super::fire::ON_TIME`]).
    None,
    /// The latest occurrence within the window.
    #[default]
    Latest,
    /// Every occurrence within the window.
    All,
}

/// Whether an occurrence is made while an earlier one is still on the board.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// No new occurrence while an earlier one is pending (or claimed).
    #[default]
    Skip,
    Allow,
}

/// The file as written.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    pub title: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catchup: Option<Catchup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catchup_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A valid schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub id: TaskId,
    pub when: When,
    /// The cron expression or the time, as written.
    pub rule: String,
    /// The zone's name as written (`UTC` when none was).
    pub timezone: String,
    /// The task every occurrence is, but for its id and creation time.
    pub task: Task,
    pub catchup: Catchup,
    pub catchup_window: Duration,
    pub overlap: Overlap,
    /// Occurrences before this are never made (written by `schedule add`).
    pub created: Option<Timestamp>,
}

/// The default catch-up window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

impl Schedule {
    /// Read `schedules/<id>.toml`'s `text`. The error names the field.
    pub fn parse(id: &str, text: &str) -> Result<Schedule, String> {
        let id = TaskId::parse(id).map_err(|e| e.to_string())?;
        if id.as_str().len() > MAX_ID_LEN {
            return Err(format!(
                "schedule id `{id}` is longer than {MAX_ID_LEN} characters (an occurrence adds 15)"
            ));
        }
        let raw: Raw = toml::from_str(text).map_err(|e| crate::error::toml_message(text, &e))?;
        Schedule::from_raw(id, raw)
    }

    pub fn from_raw(id: TaskId, raw: Raw) -> Result<Schedule, String> {
        let timezone = raw.timezone.clone().unwrap_or_else(|| "UTC".to_owned());
        let (when, rule) = match (&raw.cron, &raw.at) {
            (Some(cron), None) => (When::cron(cron, &timezone)?, cron.clone()),
            (None, Some(at)) => (When::at(at, &timezone)?, at.clone()),
            (Some(_), Some(_)) => return Err("give `cron` or `at`, not both".into()),
            (None, None) => {
                return Err("no `cron` (a recurring rule) or `at` (one time)".into());
            }
        };
        let duration = |field: &str, s: &str| {
            crate::age::parse_duration(s).map_err(|e| format!("`{field}`: {e}"))
        };
        let catchup_window = match &raw.catchup_window {
            Some(w) => duration("catchup_window", w)?,
            None => DEFAULT_WINDOW,
        };
        let created = match &raw.created {
            Some(c) => Some(
                c.parse::<Timestamp>()
                    .map_err(|e| format!("`created` `{c}` is not an RFC 3339 time: {e}"))?,
            ),
            None => None,
        };
        let after = raw
            .after
            .iter()
            .map(|a| TaskId::parse(a).map_err(|e| format!("`after`: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut task = board::new_task(
            id.clone(),
            &raw.title,
            &raw.description,
            after,
            raw.priority,
            SystemTime::UNIX_EPOCH,
        );
        task.created = None;
        task.max_attempts = raw.max_attempts.unwrap_or(task.max_attempts);
        task.timeout = match &raw.timeout {
            Some(t) => Some(duration("timeout", t)?),
            None => None,
        };
        // The task must read back as itself: the board's rules are the rules.
        board::parse(id.clone(), &task.render()).map_err(|e| format!("as a task: {e}"))?;
        Ok(Schedule {
            id,
            when,
            rule,
            timezone,
            task,
            catchup: raw.catchup.unwrap_or_default(),
            catchup_window,
            overlap: raw.overlap.unwrap_or_default(),
            created,
        })
    }

    /// The id of the occurrence at `at`: `<schedule>-<YYYYMMDDTHHMMZ>`.
    pub fn occurrence_id(&self, at: Timestamp) -> TaskId {
        occurrence_id(&self.id, at)
    }

    /// Whether task `id` is an occurrence of this schedule.
    pub fn owns(&self, id: &str) -> bool {
        schedule_of(id) == Some(self.id.as_str())
    }

    /// The task of the occurrence at `at`, created `now`.
    pub fn task_at(&self, at: Timestamp, now: SystemTime) -> Task {
        let mut task = self.task.clone();
        task.id = self.occurrence_id(at);
        task.created = Some(now);
        task
    }
}

/// `<schedule>-<YYYYMMDDTHHMMZ>`, the UTC minute of `at`.
pub fn occurrence_id(schedule: &TaskId, at: Timestamp) -> TaskId {
    let stamp = at.strftime("%Y%m%dT%H%MZ");
    TaskId::parse(&format!("{schedule}-{stamp}"))
        .expect("a schedule id of at most 85 characters and a stamp make a task id")
}

/// The schedule whose occurrence task `id` would be: `id` less its
/// `-YYYYMMDDTHHMMZ` suffix; `None` when it has none.
pub fn schedule_of(id: &str) -> Option<&str> {
    let (schedule, stamp) = id.rsplit_once('-')?;
    (!schedule.is_empty() && is_stamp(stamp)).then_some(schedule)
}

/// `YYYYMMDDTHHMMZ`.
fn is_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 14
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..13].iter().all(u8::is_ascii_digit)
        && b[13] == b'Z'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_reads_and_its_occurrences_are_tasks() {
        let s = Schedule::parse(
            "deps",
            r#"cron = "0 9 * * 1-5"
timezone = "Europe/Berlin"
title = "Bump the dependencies"
description = "Run cargo update."
after = ["setup"]
priority = 2
max_attempts = 5
timeout = "30m"
catchup = "all"
catchup_window = "3h"
overlap = "allow"
created = "2026-12-01T06:00:00Z"
"#,
        )
        .unwrap();
        assert_eq!(s.catchup, Catchup::All);
        assert_eq!(s.overlap, Overlap::Allow);
        assert_eq!(s.catchup_window, Duration::from_secs(3 * 3600));
        let at: Timestamp = "2026-12-02T08:00:00Z".parse().unwrap();
        let task = s.task_at(at, SystemTime::UNIX_EPOCH);
        assert_eq!(task.id.as_str(), "deps-20261202T0800Z");
        assert!(s.owns("deps-20261202T0800Z"));
        assert!(!s.owns("deps-x-20261202T0800Z") && !s.owns("deps-2026"));
        assert_eq!(task.title, "Bump the dependencies");
        assert_eq!((task.priority, task.max_attempts), (2, 5));
        assert_eq!(task.timeout, Some(Duration::from_secs(1800)));
        assert_eq!(task.after[0].as_str(), "setup");
        assert_eq!(task.body, "Run cargo update.\n");
    }

    #[test]
    fn defaults_are_utc_latest_a_day_and_skip() {
        let s = Schedule::parse("a", "cron = \"0 * * * *\"\ntitle = \"A\"\n").unwrap();
        assert_eq!(s.timezone, "UTC");
        assert_eq!((s.catchup, s.overlap), (Catchup::Latest, Overlap::Skip));
        assert_eq!(s.catchup_window, DEFAULT_WINDOW);
    }

    #[test]
    fn bad_files_name_the_field() {
        for (text, want) in [
            ("title = \"A\"\n", "no `cron`"),
            (
                "cron = \"0 * * * *\"\nat = \"2026-12-01T00:00:00Z\"\ntitle = \"A\"\n",
                "not both",
            ),
            ("cron = \"0 * * *\"\ntitle = \"A\"\n", "4 field(s)"),
            (
                "cron = \"0 * * * *\"\ntimezone = \"Nowhere\"\ntitle = \"A\"\n",
                "IANA",
            ),
            (
                "cron = \"0 * * * *\"\ntitle = \"A\"\ncatchup = \"some\"\n",
                "catchup",
            ),
            (
                "cron = \"0 * * * *\"\ntitle = \"A\"\ncatchup_window = \"soon\"\n",
                "catchup_window",
            ),
            (
                "cron = \"0 * * * *\"\ntitle = \"A\"\ntimeout = \"0s\"\n",
                "timeout",
            ),
            (
                "cron = \"0 * * * *\"\ntitle = \"A\"\nmax_attempts = 0\n",
                "max_attempts",
            ),
            (
                "cron = \"0 * * * *\"\ntitle = \"A\"\nafter = [\"../x\"]\n",
                "after",
            ),
            ("cron = \"0 * * * *\"\ntitle = \"\"\n", "title"),
            (
                "cron = \"0 * * * *\"\ntitle = \"A\"\ncron_typo = 1\n",
                "cron_typo",
            ),
        ] {
            let e = Schedule::parse("a", text).unwrap_err();
            assert!(e.contains(want), "{text:?}: want {want:?} in {e:?}");
        }
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert!(
            Schedule::parse(&long, "cron = \"0 * * * *\"\ntitle = \"A\"\n")
                .unwrap_err()
                .contains("longer")
        );
    }
}
