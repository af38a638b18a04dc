//! The line of a hub of this machine: one file a change in the hub's
//! `current_tasks/.queue/`, named by its place in line. The farm that
//! queued it holds an OS lock on its file for as long as it waits, so a
//! farm killed anywhere in the queue leaves a file whose lock the kernel
//! dropped: the next reader removes it, and nothing waits on a dead change.
//! Every read and write of the line is made under the directory's own lock
//! (`.lock`): a file is never read half written, and two changes never
//! take the same place.

use std::io::{Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{InLine, parse};
use crate::error::Error;

/// The live changes in line by place, and the candidate refs of the dead
/// ones removed.
type Read = (Vec<InLine>, Vec<String>);

/// The line's directory.
pub struct Dir {
    dir: PathBuf,
}

/// A change's file, locked while it waits; dropped, it leaves the line.
pub struct File {
    dir: PathBuf,
    pub(super) path: PathBuf,
    file: std::fs::File,
}

impl Dir {
    /// The line of the hub whose claims directory is `claims_dir`.
    pub fn of(claims_dir: &Path) -> Dir {
        Dir {
            dir: claims_dir.join(".queue"),
        }
    }

    /// Take the last place in line for `agent`'s change, written as
    /// `text`: its file, its place, and the candidate refs of the dead
    /// changes removed on the way.
    pub(super) fn join(&self, agent: &str, text: &[u8]) -> Result<(File, u64, Vec<String>), Error> {
        let _line = self.lock()?;
        let (live, dead) = self.read_locked(true)?;
        let place = live.last().map_or(1, |c| c.place + 1);
        let path = self.dir.join(format!("{place:012}-{agent}.toml"));
        // Locked before it has its name, so that no reader ever sees it
        // unlocked (and takes it for dead).
        let tmp = self.dir.join(format!(".{place:012}-{agent}.tmp"));
        let file = open(&tmp, true)?;
        file.try_lock()
            .map_err(|e| failure(&tmp, "lock", &std::io::Error::other(e.to_string())))?;
        let mut file = File {
            dir: self.dir.clone(),
            path: tmp.clone(),
            file,
        };
        file.write_unlocked(text)?;
        std::fs::rename(&tmp, &path).map_err(|e| failure(&path, "create", &e))?;
        file.path = path;
        Ok((file, place, dead))
    }

    /// The live changes in line, in order, and the candidate refs of the
    /// dead ones (removed when `remove`).
    pub(super) fn read(&self, remove: bool) -> Result<Read, Error> {
        let _line = self.lock()?;
        self.read_locked(remove)
    }

    /// Every live change in line (a reader that removes nothing, and
    /// makes no directory).
    pub(super) fn list(&self) -> Result<Vec<InLine>, Error> {
        if !self.dir.is_dir() {
            return Ok(Vec::new());
        }
        Ok(self.read(false)?.0)
    }

    fn lock(&self) -> Result<std::fs::File, Error> {
        lock(&self.dir)
    }

    /// [`Dir::read`], the caller holding the line's lock.
    fn read_locked(&self, remove: bool) -> Result<Read, Error> {
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
            let text = std::fs::read(&path).unwrap_or_default();
            let record = parse(&text);
            // Its owner holds the lock while it waits: a lock to be had is
            // a change whose farm is gone.
            if file.try_lock_shared().is_ok() {
                if remove {
                    let _ = std::fs::remove_file(&path);
                    dead.extend(record.refs);
                }
                continue;
            }
            live.push(InLine {
                place,
                record,
                text,
            });
        }
        live.sort_by_key(|c| c.place);
        Ok((live, dead))
    }
}

impl File {
    /// Write `text` over the change's file.
    pub(super) fn write(&mut self, text: &[u8]) -> Result<(), Error> {
        let _line = lock(&self.dir)?;
        self.write_unlocked(text)
    }

    fn write_unlocked(&mut self, text: &[u8]) -> Result<(), Error> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.rewind())
            .and_then(|()| self.file.write_all(text))
            .map_err(|e| failure(&self.path, "write", &e))
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _line = lock(&self.dir);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The line's own lock, taken for every read and write of it.
fn lock(dir: &Path) -> Result<std::fs::File, Error> {
    std::fs::create_dir_all(dir).map_err(|e| failure(dir, "create", &e))?;
    let path = dir.join(".lock");
    let file = open(&path, false)?;
    file.lock().map_err(|e| failure(&path, "lock", &e))?;
    Ok(file)
}

fn open(path: &Path, create: bool) -> Result<std::fs::File, Error> {
    std::fs::OpenOptions::new()
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
