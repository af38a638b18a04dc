//! Helpers the board's tests share.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::graph::{Status, statuses};
use super::load::Snapshot;
use super::task::{DEFAULT_MAX_ATTEMPTS, Task};
use crate::names::TaskId;

pub(super) fn id(s: &str) -> TaskId {
    TaskId::parse(s).unwrap()
}

pub(super) fn ids(v: &[&str]) -> Vec<TaskId> {
    v.iter().map(|s| id(s)).collect()
}

pub(super) fn minimal(name: &str) -> Task {
    Task {
        id: id(name),
        title: format!("Do {name}"),
        after: Vec::new(),
        labels: Vec::new(),
        priority: 0,
        max_attempts: DEFAULT_MAX_ATTEMPTS,
        timeout: None,
        attempts: 0,
        created: None,
        asked: None,
        review: false,
        change: None,
        approved: None,
        body: String::new(),
    }
}

pub(super) fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

pub(super) fn status_of(s: &Snapshot, name: &str) -> Status {
    statuses(s)
        .into_iter()
        .find(|(i, _)| i.as_str() == name)
        .unwrap_or_else(|| panic!("no status for {name}"))
        .1
}

pub(super) fn blocked(on: &[&str]) -> Status {
    Status::Blocked { on: ids(on) }
}

pub(super) fn stuck(why: &str) -> Status {
    Status::Stuck { why: why.into() }
}
