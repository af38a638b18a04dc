//! Firing: the occurrences due now become tasks, in one commit on the
//! branch, so that every farm that fires the same occurrence makes the same
//! task id and only the first push of it lands — the board is the record,
//! there is no "last fired" state.
//!
//! Which occurrences are due (`catchup`):
//!
//! - `none`: the latest one, if it is at most [`ON_TIME`] old (a farm
//!   evaluates at every minute boundary, so anything older was missed while
//!   no farm ran);
//! - `latest`: the latest one within `catchup_window`;
//! - `all`: every one within `catchup_window`, oldest first.
//!
//! None before the schedule's `created` time. A due occurrence whose id is
//! on the board — pending, done or failed — is not made again. With
//! `overlap = "skip"`, no occurrence is made while an earlier one of the
//! same schedule is still pending (claimed or not); the skip is reported.
//! A one-shot schedule (`at`) is removed in the commit that makes its task,
//! or by the first firing that finds its task made.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::{SignedDuration, Timestamp};

use super::file::{self, Catchup, Overlap, Schedule};
use crate::board::Task;
use crate::board::edit::{self, AddError};
use crate::board::paths;
use crate::names::TaskId;

/// How late an occurrence may be made and still count as on time.
pub const ON_TIME: Duration = Duration::from_secs(5 * 60);

/// What one firing does to the board.
#[derive(Debug, Default)]
pub struct Plan {
    /// Tasks to put on the board, oldest occurrence first.
    pub create: Vec<Task>,
    /// Occurrences not made because an earlier one is pending: (id, that one).
    pub skipped: Vec<(TaskId, TaskId)>,
    /// One-shot schedules whose task exists (or is made now): their files go.
    pub retire: Vec<TaskId>,
    /// Recurring schedules with nothing to do (every due occurrence was on
    /// the board already, or none is due), and their next occurrence: until
    /// then a firing changes nothing for them (see [`Loader::settle`]).
    pub settled: Vec<(TaskId, Option<Timestamp>)>,
}

impl Plan {
    pub fn changes_nothing(&self) -> bool {
        self.create.is_empty() && self.retire.is_empty()
    }
}

/// The occurrences of `s` due at `now`, by its catch-up rule.
pub fn due(s: &Schedule, now: Timestamp) -> Vec<Timestamp> {
    let reach = match s.catchup {
        Catchup::None => ON_TIME,
        Catchup::Latest | Catchup::All => s.catchup_window,
    };
    let mut from = now - SignedDuration::try_from(reach).unwrap_or(SignedDuration::MAX);
    if let Some(created) = s.created {
        from = from.max(created);
    }
    match s.catchup {
        Catchup::All => s.when.between(from, now),
        Catchup::None | Catchup::Latest => s
            .when
            .last_until(now)
            .filter(|at| *at > from)
            .into_iter()
            .collect(),
    }
}

/// What firing `schedules` at `now` does to a board on which `exists` says
/// whether a task id has a file (pending, done or failed) and `pending`
/// lists the pending ids. `created` is the new tasks' creation time.
pub fn plan<S: Borrow<Schedule>>(
    schedules: &[S],
    now: Timestamp,
    created: SystemTime,
    exists: impl Fn(&TaskId) -> bool,
    pending: &BTreeSet<TaskId>,
) -> Plan {
    let mut plan = Plan::default();
    // Each schedule's latest pending occurrence, by the schedule id its
    // task id starts with: one pass over the board, not one per schedule.
    let mut latest_pending: HashMap<&str, &TaskId> = HashMap::new();
    for id in pending {
        if let Some(schedule) = file::schedule_of(id.as_str()) {
            latest_pending.insert(schedule, id);
        }
    }
    for s in schedules {
        let s = s.borrow();
        let mut made = false;
        let mut open: Option<TaskId> = latest_pending.get(s.id.as_str()).map(|id| (*id).clone());
        let due = due(s, now);
        let mut untouched = true;
        for &at in &due {
            let id = s.occurrence_id(at);
            if exists(&id) {
                made = true;
                continue;
            }
            untouched = false;
            if s.overlap == Overlap::Skip
                && let Some(earlier) = &open
            {
                plan.skipped.push((id, earlier.clone()));
                continue;
            }
            plan.create.push(s.task_at(at, created));
            open = Some(id);
            made = true;
        }
        if untouched && !s.when.is_once() {
            plan.settled.push((s.id.clone(), s.when.next_after(now)));
        }
        if s.when.is_once() && !made {
            // Its one occurrence may have been made by an earlier firing,
            // out of the window now.
            made = s
                .when
                .next_after(Timestamp::MIN)
                .is_some_and(|at| exists(&s.occurrence_id(at)));
        }
        if s.when.is_once() && made {
            plan.retire.push(s.id.clone());
        }
    }
    plan
}

/// A schedule file that could not be read: its path and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub path: String,
    pub why: String,
}

/// The schedules in `worktree`'s `schedules/`, and the files that are not
/// valid schedules (skipped, never fatal).
pub fn load(worktree: &Path) -> (Vec<Arc<Schedule>>, Vec<Invalid>) {
    Loader::default().load(worktree)
}

/// Reads schedule files, each text parsed once: a run fires every minute,
/// and parsing (the cron expression above all) was most of a firing's time.
#[derive(Debug, Default)]
pub struct Loader {
    parsed: HashMap<String, (String, Result<Arc<Schedule>, String>)>,
    /// Schedule id → its next occurrence, when a firing found nothing to do
    /// for it: until then, firing it again changes nothing.
    settled: HashMap<TaskId, Option<Timestamp>>,
}

impl Loader {
    /// See [`load`].
    pub fn load(&mut self, worktree: &Path) -> (Vec<Arc<Schedule>>, Vec<Invalid>) {
        let mut schedules = Vec::new();
        let mut invalid = Vec::new();
        let Ok(entries) = fs::read_dir(worktree.join(file::DIR)) else {
            return (schedules, invalid);
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        names.sort();
        for name in names {
            let id = name.trim_end_matches(".toml");
            let path = format!("{}/{name}", file::DIR);
            let read = match fs::read_to_string(worktree.join(&path)) {
                Ok(text) => match self.parsed.get(&name) {
                    Some((seen, parsed)) if *seen == text => parsed.clone(),
                    _ => {
                        if let Ok(id) = TaskId::parse(id) {
                            self.settled.remove(&id);
                        }
                        let parsed = Schedule::parse(id, &text).map(Arc::new);
                        self.parsed.insert(name.clone(), (text, parsed.clone()));
                        parsed
                    }
                },
                Err(e) => Err(format!("cannot be read: {e}")),
            };
            match read {
                Ok(s) => schedules.push(s),
                Err(why) => invalid.push(Invalid { path, why }),
            }
        }
        (schedules, invalid)
    }

    /// Of `schedules`, those a firing at `now` must look at: not one whose
    /// latest occurrence an earlier firing found on the board while the one
    /// after it is still to come (an occurrence removed from the board by
    /// hand meanwhile is not made again).
    pub fn unsettled(&self, schedules: Vec<Arc<Schedule>>, now: Timestamp) -> Vec<Arc<Schedule>> {
        schedules
            .into_iter()
            .filter(|s| match self.settled.get(&s.id) {
                Some(next) => next.is_none_or(|next| next <= now),
                None => true,
            })
            .collect()
    }

    /// Remember what `plan` found settled (see [`Plan::settled`]). Only
    /// what was on the board counts, never what a firing made: its push may
    /// not land.
    pub fn settle(&mut self, plan: &Plan) {
        for (id, next) in &plan.settled {
            self.settled.insert(id.clone(), *next);
        }
    }
}

/// The pending task ids on the board in `worktree`.
pub fn pending(worktree: &Path) -> BTreeSet<TaskId> {
    let Ok(entries) = fs::read_dir(worktree.join(paths::TASKS)) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| TaskId::parse(n.strip_suffix(".md")?).ok())
        .collect()
}

/// What a firing did, for the caller to print and journal.
#[derive(Debug, Default)]
pub struct Fired {
    pub created: Vec<TaskId>,
    pub skipped: Vec<(TaskId, TaskId)>,
    pub retired: Vec<TaskId>,
    pub invalid: Vec<Invalid>,
}

/// Fire the schedules on the branch checked out in `worktree` at `now`:
/// write the due tasks and remove the spent one-shot schedules. `None` when
/// nothing is to change (no commit); else the commit message and the report.
pub fn apply(
    loader: &mut Loader,
    worktree: &Path,
    now: Timestamp,
    created: SystemTime,
) -> Result<(Option<String>, Fired), String> {
    let (schedules, invalid) = loader.load(worktree);
    let schedules = loader.unsettled(schedules, now);
    let pending = pending(worktree);
    let plan = plan(
        &schedules,
        now,
        created,
        |id| paths::find(worktree, id).is_some(),
        &pending,
    );
    loader.settle(&plan);
    let mut fired = Fired {
        skipped: plan.skipped.clone(),
        invalid,
        ..Fired::default()
    };
    if plan.changes_nothing() {
        return Ok((None, fired));
    }
    for task in &plan.create {
        match edit::add(worktree, task) {
            Ok(()) => fired.created.push(task.id.clone()),
            // Made meanwhile by this very plan (two schedules, one id): fine.
            Err(AddError::Exists { .. }) => {}
            Err(e @ AddError::Io { .. }) => return Err(e.to_string()),
        }
    }
    for id in &plan.retire {
        let path = file::path(id);
        match fs::remove_file(worktree.join(&path)) {
            Ok(()) => fired.retired.push(id.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove `{path}`: {e}")),
        }
    }
    let message = match (fired.created.as_slice(), fired.retired.len()) {
        ([one], _) => format!("farm: fire `{one}`"),
        (many, 0) => format!("farm: fire {} occurrence(s)", many.len()),
        (many, r) => format!(
            "farm: fire {} occurrence(s), retire {r} one-shot schedule(s)",
            many.len()
        ),
    };
    Ok((Some(message), fired))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// An hourly schedule.
    fn hourly(catchup: &str, extra: &str) -> Schedule {
        Schedule::parse(
            "h",
            &format!("cron = \"0 * * * *\"\ntitle = \"H\"\ncatchup = \"{catchup}\"\n{extra}"),
        )
        .unwrap()
    }

    fn set(ids: &[&str]) -> BTreeSet<TaskId> {
        ids.iter().map(|id| TaskId::parse(id).unwrap()).collect()
    }

    /// Fire `s` at `now` on a board where `done` are done and `pending` pending.
    fn fire_on(s: &Schedule, now: &str, done: &[&str], pending: &[&str]) -> Plan {
        let (done, pending) = (set(done), set(pending));
        plan(
            std::slice::from_ref(s),
            t(now),
            SystemTime::UNIX_EPOCH,
            |id| done.contains(id) || pending.contains(id),
            &pending,
        )
    }

    fn fire(s: &Schedule, now: &str, done: &[&str]) -> Plan {
        fire_on(s, now, done, &[])
    }

    fn ids(plan: &Plan) -> Vec<&str> {
        plan.create.iter().map(|t| t.id.as_str()).collect()
    }

    /// Down from 09:30 to 12:30 across hourly occurrences (10:00, 11:00,
    /// 12:00), with the 09:00 one done and the earlier ones (in the window
    /// of 24 hours) done too.
    #[test]
    fn three_hours_down_make_none_one_or_all_three() {
        let earlier: Vec<String> = (0..=24)
            .map(|h| {
                format!(
                    "h-{}",
                    (t("2026-11-30T09:00:00Z") + jiff::SignedDuration::from_hours(h))
                        .strftime("%Y%m%dT%H%MZ")
                )
            })
            .collect();
        let done: Vec<&str> = earlier.iter().map(String::as_str).collect();
        let now = "2026-12-01T12:30:00Z";
        assert!(ids(&fire(&hourly("none", ""), now, &done)).is_empty());
        let latest = fire(&hourly("latest", ""), now, &done);
        assert_eq!(ids(&latest), ["h-20261201T1200Z"]);
        let all = fire(&hourly("all", "overlap = \"allow\"\n"), now, &done);
        assert_eq!(
            ids(&all),
            ["h-20261201T1000Z", "h-20261201T1100Z", "h-20261201T1200Z"]
        );
    }

    #[test]
    fn on_time_is_made_even_with_no_catchup_and_only_once() {
        let s = hourly("none", "");
        assert_eq!(
            ids(&fire(&s, "2026-12-01T12:00:00Z", &[])),
            ["h-20261201T1200Z"]
        );
        assert_eq!(
            ids(&fire(&s, "2026-12-01T12:04:59Z", &[])),
            ["h-20261201T1200Z"]
        );
        assert!(
            ids(&fire(&s, "2026-12-01T12:05:01Z", &[])).is_empty(),
            "late"
        );
        let made = ["h-20261201T1200Z"];
        assert!(ids(&fire_on(&s, "2026-12-01T12:00:30Z", &[], &made)).is_empty());
    }

    #[test]
    fn nothing_older_than_the_window_or_the_schedule_is_made() {
        let s = hourly("all", "catchup_window = \"100m\"\noverlap = \"allow\"\n");
        assert_eq!(
            ids(&fire(&s, "2026-12-01T12:30:00Z", &[])),
            ["h-20261201T1100Z", "h-20261201T1200Z"]
        );
        let new = hourly(
            "all",
            "created = \"2026-12-01T11:30:00Z\"\noverlap = \"allow\"\n",
        );
        assert_eq!(
            ids(&fire(&new, "2026-12-01T12:30:00Z", &[])),
            ["h-20261201T1200Z"]
        );
    }

    #[test]
    fn overlap_skip_waits_for_the_pending_occurrence() {
        let daily = |overlap: &str| {
            Schedule::parse(
                "d",
                &format!("cron = \"0 9 * * *\"\ntitle = \"D\"\noverlap = \"{overlap}\"\n"),
            )
            .unwrap()
        };
        let now = "2026-12-02T09:00:00Z";
        let yesterday = ["d-20261201T0900Z"];
        let skipped = fire_on(&daily("skip"), now, &[], &yesterday);
        assert!(skipped.create.is_empty());
        assert_eq!(skipped.skipped.len(), 1);
        assert_eq!(skipped.skipped[0].0.as_str(), "d-20261202T0900Z");
        assert_eq!(skipped.skipped[0].1.as_str(), "d-20261201T0900Z");
        assert_eq!(
            ids(&fire_on(&daily("allow"), now, &[], &yesterday)),
            ["d-20261202T0900Z"]
        );
        // `all` with skip: the first missed one is made, the rest wait.
        let all = fire(
            &hourly("all", "catchup_window = \"3h\"\n"),
            "2026-12-01T12:30:00Z",
            &["h-20261201T0900Z"],
        );
        assert_eq!(ids(&all), ["h-20261201T1000Z"]);
        assert_eq!(all.skipped.len(), 2);
    }

    #[test]
    fn a_one_shot_is_made_once_then_retired() {
        let s = Schedule::parse("once", "at = \"2026-12-02T06:00:00Z\"\ntitle = \"O\"\n").unwrap();
        let before = fire(&s, "2026-12-02T05:59:00Z", &[]);
        assert!(before.changes_nothing());
        let due = fire(&s, "2026-12-02T06:00:10Z", &[]);
        assert_eq!(ids(&due), ["once-20261202T0600Z"]);
        assert_eq!(due.retire.len(), 1, "retired in the same commit");
        // Another farm's firing made it, long ago: retire, make nothing.
        let later = fire(&s, "2026-12-09T00:00:00Z", &["once-20261202T0600Z"]);
        assert!(later.create.is_empty());
        assert_eq!(later.retire.len(), 1);
    }

    /// A schedule whose due occurrence was on the board is not looked at
    /// again until its next occurrence; one whose occurrence a firing made
    /// is (the push may not land); a changed file is read afresh.
    #[test]
    fn the_loader_looks_again_only_when_something_can_be_due() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            fs::create_dir_all(dir.path().join("schedules")).unwrap();
            fs::write(dir.path().join("schedules/h.toml"), text).unwrap();
        };
        write("cron = \"0 * * * *\"\ntitle = \"H\"\n");
        let mut loader = Loader::default();
        let mut fire_at = |now: &str, board: &[&str]| {
            let board = set(board);
            let (all, _) = loader.load(dir.path());
            let looked = loader.unsettled(all, t(now));
            let p = plan(
                &looked,
                t(now),
                SystemTime::UNIX_EPOCH,
                |id| board.contains(id),
                &BTreeSet::new(),
            );
            loader.settle(&p);
            (looked.len(), ids(&p).len())
        };
        assert_eq!(
            fire_at("2026-12-01T12:00:10Z", &[]),
            (1, 1),
            "made, not settled"
        );
        assert_eq!(
            fire_at("2026-12-01T12:01:00Z", &["h-20261201T1200Z"]),
            (1, 0),
            "found: settled"
        );
        assert_eq!(
            fire_at("2026-12-01T12:30:00Z", &["h-20261201T1200Z"]),
            (0, 0)
        );
        assert_eq!(
            fire_at("2026-12-01T13:00:00Z", &["h-20261201T1200Z"]),
            (1, 1),
            "its next one"
        );
        write("cron = \"30 * * * *\"\ntitle = \"H\"\n");
        assert_eq!(
            fire_at(
                "2026-12-01T13:00:30Z",
                &["h-20261201T1200Z", "h-20261201T1300Z"]
            ),
            (1, 1),
            "changed: 12:30 is due"
        );
    }
}
