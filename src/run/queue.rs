//! The merge queue's line, on a hub of this machine: the gated changes
//! waiting to land, in the order they came, each with the commit it would
//! land as (its candidate) and whether that commit passed the gate.
//!
//! One file a change in the hub's `current_tasks/.queue/`, named by its
//! place in line. The farm that queued it holds an OS lock on its file for
//! as long as it waits, so a farm killed anywhere in the queue leaves a file
//! whose lock the kernel dropped: the next reader removes it, and nothing
//! waits on a dead change. Every read and write of the line is made under
//! the directory's own lock (`.lock`): a file is never read half written,
//! and two changes never take the same place.
//!
//! A candidate's commits are pushed to the hub under
//! `refs/farm/queue/<place>-<agent>-<build>` so that the changes behind it
//! can build on it (a clone reads a local hub's objects where they are).
//! Nothing can be lost by removing one: it holds only the work of a change
//! still in its owner's clone, which lands on the branch, or goes to a
//! rescue branch, from there.

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// What a change in line says of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub task: String,
    pub agent: String,
    /// The commit it would land as, once built.
    #[serde(default)]
    pub candidate: Option<String>,
    /// The hub refs it may have pushed (named here before each push, so
    /// that a farm killed mid-push leaves none that nobody knows of).
    #[serde(default)]
    pub refs: Vec<String>,
    /// The candidate passed the gate: its results are known.
    #[serde(default)]
    pub green: bool,
    /// When it joined the line (seconds since the epoch).
    #[serde(default)]
    pub since: u64,
}

/// A change in line, as another reads it: its place and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InLine {
    pub place: u64,
    pub record: Record,
}

/// The live changes in line by place, and the candidate refs of the dead
/// ones removed.
type Read = (Vec<(u64, Record)>, Vec<String>);

/// The line of a local hub.
pub struct Queue {
    dir: PathBuf,
}

/// This farm's own change in line: its file, locked while it waits.
/// Dropped, it leaves the line.
pub struct Entry {
    queue: PathBuf,
    path: PathBuf,
    file: File,
    pub place: u64,
    pub record: Record,
}

/// The line as one change sees it: the change just ahead of it (if any),
/// how many wait ahead, and the hub refs of the dead changes removed from
/// it meanwhile (for the caller to delete).
#[derive(Debug, Default)]
pub struct View {
    pub ahead: Option<InLine>,
    pub waiting_ahead: usize,
    pub dead_refs: Vec<String>,
}

impl Queue {
    /// The line of the hub whose claims directory is `claims_dir`.
    pub fn of(claims_dir: &Path) -> Queue {
        Queue {
            dir: claims_dir.join(".queue"),
        }
    }

    /// Take the last place in line for `record`; also the candidate refs
    /// of the dead changes removed on the way (for the caller to delete).
    pub fn join(&self, record: Record) -> Result<(Entry, Vec<String>), Error> {
        let _line = self.lock()?;
        let (places, dead) = self.read_all(true)?;
        let place = places.last().map_or(1, |(p, _)| p + 1);
        let path = self.dir.join(format!("{place:012}-{}.toml", record.agent));
        // Locked before it has its name, so that no reader ever sees it
        // unlocked (and takes it for dead).
        let tmp = self.dir.join(format!(".{place:012}-{}.tmp", record.agent));
        let file = open(&tmp, true)?;
        file.try_lock()
            .map_err(|e| failure(&tmp, "lock", &std::io::Error::other(e.to_string())))?;
        let mut entry = Entry {
            queue: self.dir.clone(),
            path: tmp.clone(),
            file,
            place,
            record,
        };
        entry.write()?;
        std::fs::rename(&tmp, &path).map_err(|e| failure(&path, "create", &e))?;
        entry.path = path;
        Ok((entry, dead))
    }

    /// The line as `entry` sees it now; dead changes are removed on the
    /// way.
    pub fn view(&self, entry: &Entry) -> Result<View, Error> {
        let _line = self.lock()?;
        let (places, dead) = self.read_all(true)?;
        let ahead: Vec<InLine> = places
            .into_iter()
            .filter(|(p, _)| *p < entry.place)
            .map(|(place, record)| InLine { place, record })
            .collect();
        Ok(View {
            waiting_ahead: ahead.len(),
            ahead: ahead.into_iter().last(),
            dead_refs: dead,
        })
    }

    /// Every live change in line, in order (for `farm status`: a reader
    /// that removes nothing).
    pub fn list(&self) -> Result<Vec<InLine>, Error> {
        if !self.dir.is_dir() {
            return Ok(Vec::new());
        }
        let _line = self.lock()?;
        let (places, _) = self.read_all(false)?;
        Ok(places
            .into_iter()
            .map(|(place, record)| InLine { place, record })
            .collect())
    }

    fn lock(&self) -> Result<File, Error> {
        std::fs::create_dir_all(&self.dir).map_err(|e| failure(&self.dir, "create", &e))?;
        let path = self.dir.join(".lock");
        let file = open(&path, false)?;
        file.lock().map_err(|e| failure(&path, "lock", &e))?;
        Ok(file)
    }

    /// The live changes in line, by place; the dead ones removed (when
    /// `remove`), their candidate refs returned. The caller holds the
    /// line's lock.
    fn read_all(&self, remove: bool) -> Result<Read, Error> {
        let mut live = Vec::new();
        let mut dead = Vec::new();
        let read = std::fs::read_dir(&self.dir).map_err(|e| failure(&self.dir, "read", &e))?;
        for item in read.flatten() {
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".toml") {
                continue;
            }
            let Some(place) = name.split('-').next().and_then(|p| p.parse::<u64>().ok()) else {
                continue;
            };
            let path = item.path();
            let Ok(file) = open(&path, false) else {
                continue;
            };
            let record: Record = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| toml::from_str(&t).ok())
                .unwrap_or_default();
            // Its owner holds the lock while it waits: a lock to be had is
            // a change whose farm is gone.
            if file.try_lock_shared().is_ok() {
                if remove {
                    let _ = std::fs::remove_file(&path);
                    dead.extend(record.refs);
                }
                continue;
            }
            live.push((place, record));
        }
        live.sort_by_key(|(p, _)| *p);
        Ok((live, dead))
    }
}

impl Entry {
    /// Say what this change is now (its candidate, its verdict).
    pub fn update(&mut self, record: Record) -> Result<(), Error> {
        let _line = Queue {
            dir: self.queue.clone(),
        }
        .lock()?;
        self.record = record;
        self.write()
    }

    fn write(&mut self) -> Result<(), Error> {
        let text = toml::to_string(&self.record)
            .map_err(|e| Error::failure(format!("cannot write a queue entry: {e}")))?;
        self.file
            .set_len(0)
            .and_then(|()| self.file.rewind())
            .and_then(|()| self.file.write_all(text.as_bytes()))
            .map_err(|e| failure(&self.path, "write", &e))
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let line = Queue {
            dir: self.queue.clone(),
        };
        let _line = line.lock();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn open(path: &Path, create: bool) -> Result<File, Error> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(create)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| failure(path, "open", &e))
}

fn failure(path: &Path, what: &str, e: &std::io::Error) -> Error {
    Error::failure(format!("cannot {what} `{}`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(agent: &str) -> Record {
        Record {
            task: format!("t-{agent}"),
            agent: agent.into(),
            ..Record::default()
        }
    }

    #[test]
    fn changes_line_up_in_the_order_they_came_and_leave_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let q = Queue::of(tmp.path());
        let (a, _) = q.join(record("a")).unwrap();
        let (mut b, _) = q.join(record("b")).unwrap();
        let (c, _) = q.join(record("c")).unwrap();
        assert!(q.view(&a).unwrap().ahead.is_none());
        let seen = q.view(&c).unwrap();
        assert_eq!(seen.ahead.unwrap().record.agent, "b");
        assert_eq!(seen.waiting_ahead, 2);
        b.update(Record {
            candidate: Some("abc".into()),
            green: true,
            ..b.record.clone()
        })
        .unwrap();
        let ahead = q.view(&c).unwrap().ahead.unwrap().record;
        assert_eq!(
            (ahead.candidate.as_deref(), ahead.green),
            (Some("abc"), true)
        );
        drop(b);
        assert_eq!(q.view(&c).unwrap().ahead.unwrap().record.agent, "a");
        drop(a);
        assert!(q.view(&c).unwrap().ahead.is_none());
        // A newcomer goes behind the last one still in line.
        let (d, _) = q.join(record("d")).unwrap();
        assert_eq!(q.view(&d).unwrap().ahead.unwrap().record.agent, "c");
    }

    #[test]
    fn a_change_whose_farm_is_gone_is_removed_with_its_ref_named() {
        let tmp = tempfile::tempdir().unwrap();
        let q = Queue::of(tmp.path());
        let (a, _) = q
            .join(Record {
                refs: vec!["refs/farm/queue/1-a-1".into()],
                ..record("a")
            })
            .unwrap();
        let (b, _) = q.join(record("b")).unwrap();
        // A killed farm: its file stays, its lock is gone.
        let path = a.path.clone();
        let kept = std::fs::read(&path).unwrap();
        drop(a);
        std::fs::write(&path, kept).unwrap();
        let seen = q.view(&b).unwrap();
        assert!(seen.ahead.is_none());
        assert_eq!(seen.dead_refs, ["refs/farm/queue/1-a-1"]);
        assert!(!path.exists());
    }
}
