//! The `fs` claim store: `<hub>/current_tasks/<task>.txt` on this machine.
//!
//! # Theory of operation
//!
//! **Claim.** A claimer first looks: if the name exists, it has lost and
//! reads the holder. Otherwise the record is written whole to a private temp file
//! (`.<task>.<nonce>.tmp`, created with O_EXCL), locked with `flock` when a
//! holder process keeps it, then published with `link(2)` to `<task>.txt`.
//! `link` fails if the name exists — a symlink included — so exactly one of
//! any number of claimers wins, and a reader never sees a half-written
//! claim: the name appears only once the bytes are all there. Scratch names
//! left by a crash between these steps are removed by `tidy` (run by reap).
//!
//! **Liveness.** A holder keeps an exclusive `flock` on its claim's inode for
//! as long as it lives; the kernel drops it when the process dies, SIGKILL
//! included. Heartbeats set the inode's mtime through the holder's own file
//! descriptor: atomic for readers, and unable to resurrect a claim that was
//! taken away (it touches the holder's inode, not whatever the name now is).
//!
//! **Take-back.** Nothing ever unlinks a claim by name. A reaper opens the
//! file (never following a symlink), takes its `flock` — failing that, a live
//! process holds it and it is not touched — checks that the name still points
//! at that inode, judges it again, and only then renames it into `.reaped/`,
//! where it stays as a tombstone with the reason appended. While the reaper
//! holds the lock no other farm process can release or reap that inode, and
//! claimers cannot create the name while it exists, so of several concurrent
//! reapers exactly one renames it; the others find it gone. A holder releases
//! by renaming its claim aside, checking the inode is its own, and deleting
//! it; if it is not (someone forced it away and the task was claimed again),
//! the newcomer's file is linked back.
//!
//! **Fencing.** A holder whose claim was taken must not publish as if it
//! still held the task — nor may a push it started before. A holder
//! publishes its work only after checking, under its lock, that the claim
//! is still its own inode; no other farm process can take a locked claim
//! (reapers need the lock; only `release --force` does not, by the user's
//! explicit choice). What remains is the push in flight: `git push`, and on
//! this machine the hub's `receive-pack` and hooks it starts, may outlive a
//! holder killed with SIGKILL and still update the branch afterwards —
//! while the claim, its holder dead, would read as reapable, and a second
//! agent would do the task again. So the claim's locked file is inherited
//! by every process of the push (`Repo::push_refs_holding`): `flock`
//! belongs to the open file, not the process, and stays held until the last
//! process that has it open exits. A reaper therefore cannot take a claim
//! while any process that could still land its holder's push is alive; once
//! they are all gone, the branch shows whatever landed, and a later claimer
//! reads the task from it (done, or still pending). The same holds while
//! the holder lives but its `git push` was killed: the push is repeated
//! only after all its processes are gone, and a push that had landed then
//! reports the ref as up to date. (A hook that leaves a daemon holding open
//! the files it inherited keeps a dead holder's claim alive until that
//! daemon exits: safe, not quick.)
//!
//! `release --force` needs no lock, so the claim's lock alone does not
//! fence it: past the holder's check, a push in flight would land after
//! the claim was taken, and a second agent would do the task again. So a
//! push also holds the task's **push fence**, `.<task>.push`, a file whose
//! `flock` the holder takes before its check and every process of the
//! push inherits, as it does the claim's. A forced release takes the fence
//! too (saying that it waits, when it must) before it takes the claim: a
//! push past its check lands first; a holder that checks after finds its
//! claim gone. The fence is per task, not per claim, so a push left by an
//! earlier holder of the task is waited for as well. Whoever holds it may
//! remove it (after a release, a reap, or by `tidy`); a locker whose file
//! lost its name meanwhile takes the name's file again.
//!
//! **Not a claim.** Anything in the directory that is not a readable claim
//! file — a symlink, a directory, a fifo, a socket, a file farm cannot open
//! or read — is listed as corrupt with why, never an error that would hide
//! or block the claims beside it. It is taken back by age like any corrupt
//! claim (or by `release --force`): renamed into `.reaped/` by its name
//! alone, since no holder ever locks such a thing; its note goes beside it.
//!
//! Claims are coordination, not data, and are not fsynced: after a crash of
//! the machine every claim is from an earlier boot, hence dead.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::{
    Attempt, ClaimStore, Guard, Held, Listed, Published, Reap, Release, Released, SCRATCH_MAX_AGE,
    StoreError,
};
use crate::claims::liveness::{Judge, State};
use crate::claims::notice::{self, Kind, Notice, Target};
use crate::claims::protocol;
use crate::claims::read_cache::{self, Key, ReadCache};
use crate::claims::record::{Claim, Corrupt, MAX_CLAIM_BYTES, Nonce, timestamp};
use crate::git::command::Repo;
use crate::names::{CLAIMS_DIR, TaskId};

const TOMBSTONES: &str = ".reaped";
/// How often a claimer looks again when the holder it lost to is gone
/// before it could be read; past that the task is too busy to call.
const CLAIM_ROUNDS: usize = 16;
/// How long a holder waits for its task's push fence before it pushes
/// without it. Only processes of an earlier push of the task (which `git
/// push` gave up waiting for) hold it that long, and a forced release
/// waits for those too.
const FENCE_PATIENCE: Duration = Duration::from_secs(60);

/// The fs store of one hub.
#[derive(Debug, Clone)]
pub struct FsStore {
    dir: PathBuf,
}

/// What an fs holder keeps: its claim's inode, and the open file carrying
/// the OS lock when a holder process keeps one.
#[derive(Debug)]
pub(crate) struct FsGuard {
    ino: u64,
    file: Option<File>,
}

impl FsGuard {
    pub(crate) fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }
}

impl FsStore {
    /// The store of the hub at `hub` (its `current_tasks/` need not exist yet).
    pub fn new(hub: &Path) -> FsStore {
        FsStore {
            dir: hub.join(CLAIMS_DIR),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The claim file of `task`.
    pub fn path_of(&self, task: &str) -> PathBuf {
        self.dir.join(format!("{task}.txt"))
    }

    /// The push fence of `task` (see "Fencing" above).
    fn fence_path(&self, task: &str) -> PathBuf {
        self.dir.join(format!(".{task}.push"))
    }

    /// Lock `task`'s push fence, creating it; `None` when it is still held
    /// after `patience` (never given up without one). `waiting` is called
    /// once, when the fence is held and it starts to wait.
    fn lock_fence(
        &self,
        task: &str,
        patience: Option<Duration>,
        waiting: &dyn Fn(),
    ) -> Result<Option<File>, StoreError> {
        let path = self.fence_path(task);
        let since = Instant::now();
        let mut said = false;
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(&path)
                .map_err(StoreError::io("open", &path))?;
            // Patience counts from the first look, across files replaced.
            let left = patience.map(|p| p.saturating_sub(since.elapsed()));
            let mut once = || {
                if !std::mem::replace(&mut said, true) {
                    waiting();
                }
            };
            let every = Duration::from_millis(20);
            if !crate::flock::lock_waiting(&file, left, every, &mut once)
                .map_err(StoreError::io("lock", &path))?
            {
                return Ok(None);
            }
            // Removed by whoever held it before us: the fence is the file
            // its name has now.
            let meta = file.metadata().map_err(StoreError::io("read", &path))?;
            if meta.nlink() > 0 && same_file(&path, meta.ino()) {
                return Ok(Some(file));
            }
        }
    }

    /// Remove `task`'s push fence if nothing holds it (best effort: what is
    /// left is removed by `tidy`).
    fn drop_fence(&self, task: &str) {
        let path = self.fence_path(task);
        if let Ok(file) = open_nofollow(&path)
            && file.try_lock().is_ok()
            && file.metadata().is_ok_and(|m| same_file(&path, m.ino()))
        {
            let _ = fs::remove_file(&path);
        }
    }

    /// Check the claims directory, creating it when `create` is set.
    /// Returns false when it does not exist (and was not to be created).
    fn check_dir(&self, create: bool) -> Result<bool, StoreError> {
        match fs::symlink_metadata(&self.dir) {
            Ok(m) if m.file_type().is_symlink() => Err(StoreError::BadDir {
                path: self.dir.clone(),
                why: "is a symlink; farm never follows links for claims",
            }),
            Ok(m) if !m.is_dir() => Err(StoreError::BadDir {
                path: self.dir.clone(),
                why: "is not a directory",
            }),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                match fs::create_dir(&self.dir) {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.check_dir(false),
                    Err(e) => Err(StoreError::io("create", &self.dir)(e)),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::io("read", &self.dir)(e)),
        }
    }

    /// Read one claim file, never following a symlink. `None` when it is gone.
    /// Total for anything that is there: what is not a readable claim file (a
    /// symlink, a directory, a fifo, a socket, a file that cannot be opened
    /// or read) is listed as corrupt with why, so that one such entry never
    /// hides or blocks the others.
    fn read_entry(&self, name: &str, path: &Path) -> Result<Option<Listed>, StoreError> {
        Ok(self
            .read_entry_in(None, name, path)?
            .map(|(listed, _)| listed))
    }

    /// [`FsStore::read_entry`], opening `path` by its name in `dir` (the
    /// claims directory, open) when given: the kernel then looks up one
    /// name, not every directory of the path again. With the entry, what
    /// was read of a regular file, for the listing's cache.
    fn read_entry_in(
        &self,
        dir: Option<&File>,
        name: &str,
        path: &Path,
    ) -> Result<Option<(Listed, Option<ReadBytes>)>, StoreError> {
        // Open first (never following a link, never blocking on a FIFO),
        // then look at what was opened: four system calls a claim.
        let opened = match dir {
            Some(dir) => open_nofollow_in(dir, path),
            None => open_nofollow(path),
        };
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                let why = "a symlink, which farm never follows; remove it";
                return Ok(unreadable(name, path, why.into()).map(|l| (l, None)));
            }
            Err(e) => {
                let why = format!("cannot be opened: {e}");
                return Ok(unreadable(name, path, why).map(|l| (l, None)));
            }
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => {
                let why = format!("cannot be read: {e}");
                return Ok(unreadable(name, path, why).map(|l| (l, None)));
            }
        };
        if !meta.is_file() {
            return Ok(Some((corrupt_entry(name, not_a_file(&meta), &meta), None)));
        }
        Ok(Some(match read_sized(&mut file, &meta) {
            Ok(bytes) => {
                let key = Key {
                    ino: meta.ino(),
                    size: meta.len(),
                    ctime: (meta.ctime(), meta.ctime_nsec()),
                };
                (
                    listed(name, &bytes, mtime(&meta), meta.ino()),
                    Some((key, bytes)),
                )
            }
            Err(e) => (
                corrupt_entry(name, format!("cannot be read: {e}"), &meta),
                None,
            ),
        }))
    }

    /// Take back what is not a claim file (see [`FsStore::read_entry`]) by
    /// the name alone: there is no inode a holder could lock, and renaming
    /// the name never touches what a symlink points to or a directory holds.
    fn reap_not_a_file(
        &self,
        entry: &Listed,
        judge: &Judge<'_>,
        path: &Path,
    ) -> Result<Reap, StoreError> {
        let verdict = entry.judge(judge);
        if !verdict.reapable || entry.record.is_ok() || !same_file(path, entry.identity) {
            return Ok(Reap::Skipped("changed since it was listed".into()));
        }
        Ok(match self.entomb(&entry.name, path, &verdict.reason)? {
            Some(tombstone) => Reap::Reaped {
                tombstone: tombstone.display().to_string(),
                verdict,
            },
            None => Reap::Skipped("already gone".into()),
        })
    }

    /// Release what is not a claim file: nobody's own claim, so only force
    /// moves it, aside into `.reaped/` like any other.
    fn release_not_a_file(
        &self,
        task: &TaskId,
        how: Release<'_>,
        path: &Path,
        what: &str,
    ) -> Result<Released, StoreError> {
        match how {
            Release::Own(_) => Err(StoreError::Changed { task: task.clone() }),
            Release::Force { by } => self
                .entomb(
                    task.as_str(),
                    path,
                    &format!("{what} removed by force by {by}"),
                )?
                .map(|t| Released::Tombstoned(t.display().to_string()))
                .ok_or_else(|| StoreError::NotFound { task: task.clone() }),
        }
    }

    fn tombstone_path(&self, name: &str, now: SystemTime) -> Result<PathBuf, StoreError> {
        let dir = self.dir.join(TOMBSTONES);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let m = fs::symlink_metadata(&dir).map_err(StoreError::io("read", &dir))?;
                if !m.is_dir() {
                    return Err(StoreError::BadDir {
                        path: dir,
                        why: "is not a directory (it should hold reaped claims)",
                    });
                }
            }
            Err(e) => return Err(StoreError::io("create", &dir)(e)),
        }
        let stamp: String = timestamp(now)
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let unique = Nonce::random();
        Ok(dir.join(format!("{name}.{stamp}.{}.txt", unique.short())))
    }

    /// Rename `path` into `.reaped/` and append why. The caller has made sure
    /// the file is the one it means to take.
    fn entomb(&self, name: &str, path: &Path, why: &str) -> Result<Option<PathBuf>, StoreError> {
        let now = SystemTime::now();
        let tomb = self.tombstone_path(name, now)?;
        match fs::rename(path, &tomb) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("move aside", path)(e)),
        }
        // The tombstone is ours now. Best effort: the rename is what frees the
        // task. A tombstone that is not a regular file (a planted link, a
        // directory, a fifo) gets its note beside it, `<tombstone>.why`; it
        // is never opened, so a fifo cannot block the reaper.
        let note = format!(
            "\n[reaped]\nat = \"{}\"\nby = \"farm pid {} on {}\"\nreason = {}\n",
            timestamp(now),
            std::process::id(),
            crate::claims::host::Here::current().host,
            toml_string(why),
        );
        let regular = fs::symlink_metadata(&tomb).is_ok_and(|m| m.is_file());
        let mut options = OpenOptions::new();
        let note_at = if regular {
            options.append(true);
            tomb.clone()
        } else {
            options.write(true).create_new(true).mode(0o644);
            let mut beside = tomb.clone().into_os_string();
            beside.push(".why");
            PathBuf::from(beside)
        };
        if let Ok(mut f) = options
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&note_at)
        {
            let _ = f.write_all(note.as_bytes());
        }
        Ok(Some(tomb))
    }

    /// Write `claim` to a private temp file and `link` it to `path`. Won: the
    /// held claim. Someone else's name already there: the claim back.
    fn publish(
        &self,
        claim: Claim,
        hold: bool,
        path: &Path,
    ) -> Result<Result<Held, Claim>, StoreError> {
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", claim.task, claim.nonce));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(StoreError::io("create a claim in", &self.dir))?;
        let linked = (|| {
            file.write_all(claim.to_toml().as_bytes())?;
            if hold {
                // Locked before it is published, so no reaper ever sees a
                // held claim unlocked.
                file.lock()?;
            }
            let ino = file.metadata()?.ino();
            match fs::hard_link(&tmp, path) {
                Ok(()) => Ok(Some(ino)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(e),
            }
        })();
        let _ = fs::remove_file(&tmp);
        Ok(
            match linked.map_err(StoreError::io("publish the claim", path))? {
                Some(ino) => Ok(Held {
                    claim,
                    guard: Guard::Fs(FsGuard {
                        ino,
                        file: hold.then_some(file),
                    }),
                }),
                None => Err(claim),
            },
        )
    }

    /// Remove a file this process has proved is its own claim (by inode):
    /// rename it aside, check, delete — or put it back if it was not ours.
    fn remove_own(&self, task: &TaskId, nonce: &Nonce, ino: u64) -> Result<(), StoreError> {
        let path = self.path_of(task.as_str());
        let aside = self.dir.join(format!(".{task}.{nonce}.released"));
        match fs::rename(&path, &aside) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::Lost {
                    task: task.clone(),
                    why: "it was taken away (reaped or force-released)".into(),
                });
            }
            Err(e) => return Err(StoreError::io("move aside", &path)(e)),
        }
        let moved = fs::symlink_metadata(&aside).map_err(StoreError::io("read", &aside))?;
        if moved.ino() == ino {
            return fs::remove_file(&aside).map_err(StoreError::io("remove", &aside));
        }
        // Not ours: our claim was forced away and the task claimed again
        // before our rename. Give the newcomer its name back.
        let restored = fs::hard_link(&aside, &path);
        let _ = fs::remove_file(&aside);
        restored.map_err(StoreError::io("restore", &path))?;
        Err(StoreError::Lost {
            task: task.clone(),
            why: "it was taken away and claimed again".into(),
        })
    }
}

impl FsStore {
    /// The notice named `name` (without `.txt`), if it is a whole one; a
    /// symlink in its place is nobody's notice.
    fn read_notice(&self, name: &str) -> Result<Option<Notice>, StoreError> {
        let path = self.path_of(name);
        match open_nofollow(&path) {
            Ok(mut f) => {
                let (bytes, _) = read_capped(&mut f).map_err(StoreError::io("read", &path))?;
                Ok(Notice::parse(name, &bytes))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Ok(None),
            Err(e) => Err(StoreError::io("open", &path)(e)),
        }
    }
}

impl ClaimStore for FsStore {
    fn kind(&self) -> &'static str {
        "fs"
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn claim_location(&self, task: &TaskId) -> String {
        self.path_of(task.as_str()).display().to_string()
    }

    fn notices(&self, _fresh: bool) -> Result<Vec<Notice>, StoreError> {
        if !self.check_dir(false)? {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(StoreError::io("read", &self.dir))? {
            let Ok(entry) = entry else { continue };
            let file_name = entry.file_name();
            let Some(name) = file_name
                .to_str()
                .and_then(|f| f.strip_suffix(".txt"))
                .filter(|n| notice::is_notice(n))
            else {
                continue;
            };
            if let Some(n) = self.read_notice(name)? {
                out.push(n);
            }
        }
        out.sort_by_key(Notice::name);
        Ok(out)
    }

    /// Written whole to a temp file and renamed over the notice: a reader
    /// sees the old notice or the new one.
    fn post_notice(&self, notice: &Notice) -> Result<(), StoreError> {
        self.check_dir(true)?;
        let name = notice.name();
        let path = self.path_of(&name);
        let tmp = self
            .dir
            .join(format!("{name}.{}.tmp", notice.nonce.short()));
        fs::write(&tmp, notice.to_toml()).map_err(StoreError::io("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(StoreError::io("rename", &path))
    }

    /// Renamed aside under a name of its own, then read and removed: what
    /// is returned is exactly what was taken away, even when the same
    /// notice is posted again meanwhile.
    fn withdraw_notice(&self, kind: Kind, target: &Target) -> Result<Option<Notice>, StoreError> {
        if !self.check_dir(false)? {
            return Ok(None);
        }
        let name = notice::name_of(kind, target);
        let path = self.path_of(&name);
        let aside = format!("{name}.{}.released", Nonce::random().short());
        match fs::rename(&path, self.dir.join(&aside)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("rename", &path)(e)),
        }
        let bytes = fs::read(self.dir.join(&aside)).unwrap_or_default();
        let _ = fs::remove_file(self.dir.join(&aside));
        Ok(Some(Notice::parse(&name, &bytes).unwrap_or_else(|| {
            // Not a whole notice: taken away all the same.
            Notice {
                by: "someone".into(),
                at: SystemTime::UNIX_EPOCH,
                ..Notice::new(kind, target.clone(), "", false)
            }
        })))
    }

    fn protocol(&self) -> Result<Option<u32>, StoreError> {
        let path = self.path_of(protocol::NAME);
        match open_nofollow(&path) {
            Ok(mut f) => {
                let (bytes, _) = read_capped(&mut f).map_err(StoreError::io("read", &path))?;
                Ok(protocol::parse(&bytes))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io("open", &path)(e)),
        }
    }

    /// Written whole and renamed into place, under the directory's own
    /// lock so that two farms raising it at once keep the higher.
    fn raise_protocol(&self, version: u32) -> Result<u32, StoreError> {
        // Mostly it says so already: nothing to write, no lock to take.
        if let Some(now) = self.protocol()?
            && now >= version
        {
            return Ok(now);
        }
        self.check_dir(true)?;
        let lock_path = self.dir.join(".protocol.lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(StoreError::io("open", &lock_path))?;
        lock.lock().map_err(StoreError::io("lock", &lock_path))?;
        let now = self.protocol()?;
        if now.is_some_and(|v| v >= version) {
            return Ok(now.unwrap_or(version));
        }
        let path = self.path_of(protocol::NAME);
        let tmp = self
            .dir
            .join(format!(".protocol.{}.tmp", Nonce::random().short()));
        fs::write(&tmp, protocol::text(version, &protocol::writer()))
            .map_err(StoreError::io("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(StoreError::io("rename", &path))?;
        Ok(version)
    }

    fn side_files(&self, prefix: &str, _fresh: bool) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        debug_assert!(prefix.starts_with('.'), "side files are dot names");
        if !self.check_dir(false)? {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(StoreError::io("read", &self.dir))? {
            let Ok(entry) = entry else { continue };
            let file_name = entry.file_name();
            let Some(name) = file_name
                .to_str()
                .and_then(|f| f.strip_suffix(".txt"))
                .filter(|n| n.starts_with(prefix))
            else {
                continue;
            };
            let path = self.path_of(name);
            let bytes = match open_nofollow(&path) {
                Ok(mut f) => {
                    let mut bytes = Vec::new();
                    (&mut f)
                        .take(super::MAX_SIDE_BYTES + 1)
                        .read_to_end(&mut bytes)
                        .map_err(StoreError::io("read", &path))?;
                    bytes
                }
                // Gone meanwhile (withdrawn), or a symlink: nobody's.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => continue,
                Err(e) => return Err(StoreError::io("open", &path)(e)),
            };
            if bytes.len() as u64 <= super::MAX_SIDE_BYTES {
                out.push((name.to_owned(), bytes));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Each written whole to a temp file, then published with `link(2)`,
    /// which fails when the name exists: exactly one creator wins a name,
    /// and a reader never sees a file half written.
    fn create_side(
        &self,
        files: &[(String, Vec<u8>)],
        _why: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.check_dir(true)?;
        let mut created = Vec::new();
        for (name, bytes) in files {
            debug_assert!(name.starts_with('.'), "side files are dot names");
            let path = self.path_of(name);
            let tmp = self
                .dir
                .join(format!("{name}.{}.tmp", Nonce::random().short()));
            fs::write(&tmp, bytes).map_err(StoreError::io("write", &tmp))?;
            let linked = fs::hard_link(&tmp, &path);
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => created.push(name.clone()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(StoreError::io("link", &path)(e)),
            }
        }
        Ok(created)
    }

    /// Each renamed aside under a name of its own, then removed.
    fn remove_side(&self, names: &[String], _why: &str) -> Result<usize, StoreError> {
        if !self.check_dir(false)? {
            return Ok(0);
        }
        let mut removed = 0;
        for name in names {
            debug_assert!(name.starts_with('.'), "side files are dot names");
            let path = self.path_of(name);
            let aside = self
                .dir
                .join(format!("{name}.{}.released", Nonce::random().short()));
            match fs::rename(&path, &aside) {
                Ok(()) => {
                    removed += 1;
                    let _ = fs::remove_file(&aside);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("rename", &path)(e)),
            }
        }
        Ok(removed)
    }

    fn try_claim(&self, claim: Claim, hold: bool) -> Result<Attempt, StoreError> {
        self.check_dir(true)?;
        let name = claim.task.as_str().to_owned();
        let path = self.path_of(&name);
        let mut claim = claim;
        for _ in 0..CLAIM_ROUNDS {
            // Look before publishing: on a busy task most attempts lose, and a
            // loser that made a temp file first paid for an inode it threw
            // away — under 16-way contention on ext4 that churn cost ~10x in
            // throughput (benches/claim.rs). `link` alone decides the winner.
            if let Some(holder) = self.read_entry(&name, &path)? {
                return Ok(Attempt::Lost(Box::new(holder)));
            }
            match self.publish(claim, hold, &path)? {
                Ok(held) => return Ok(Attempt::Won(held)),
                // Lost the link race: read the winner on the next round. If it
                // is already gone again, the race is open again.
                Err(lost) => claim = lost,
            }
        }
        Err(StoreError::Changed { task: claim.task })
    }

    fn heartbeat(&self, held: &Held, now: SystemTime) -> Result<(), StoreError> {
        let guard = fs_guard(held)?;
        let task = &held.claim.task;
        let path = self.path_of(task.as_str());
        let lost = |why: &str| StoreError::Lost {
            task: task.clone(),
            why: why.to_owned(),
        };
        match fs::symlink_metadata(&path) {
            Ok(m) if m.ino() == guard.ino && !m.file_type().is_symlink() => {}
            Ok(_) => return Err(lost("the claim file was replaced")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(lost("the claim file is gone (reaped or force-released)"));
            }
            Err(e) => return Err(StoreError::io("read", &path)(e)),
        }
        match &guard.file {
            Some(f) => f.set_modified(now),
            None => open_nofollow(&path).and_then(|f| f.set_modified(now)),
        }
        .map_err(StoreError::io("heartbeat", &path))
    }

    fn release_held(&self, held: Held) -> Result<(), StoreError> {
        let guard = fs_guard(&held)?;
        // The lock (if any) is dropped with `held`, after the file is gone.
        self.remove_own(&held.claim.task, &held.claim.nonce, guard.ino)?;
        self.drop_fence(held.claim.task.as_str());
        Ok(())
    }

    /// Under the task's push fence, which the push's processes keep (see
    /// "Fencing" above); the check and the push are the common ones.
    fn publish(
        &self,
        held: &Held,
        repo: &Repo,
        remote: &str,
        refspecs: &[String],
        hold: &[BorrowedFd<'_>],
    ) -> Result<Published, StoreError> {
        let task = held.claim.task.as_str();
        let fence = self.lock_fence(task, Some(FENCE_PATIENCE), &|| {})?;
        if fence.is_none() {
            eprintln!(
                "farm: `{}` has been held for {} (by a process left from a push?); pushing without it",
                self.fence_path(task).display(),
                crate::age::Age(FENCE_PATIENCE)
            );
        }
        let hold: Vec<BorrowedFd<'_>> = fence
            .as_ref()
            .map(AsFd::as_fd)
            .into_iter()
            .chain(hold.iter().copied())
            .collect();
        super::publish_checked(self, held, repo, remote, refspecs, &hold)
    }

    fn fence_for(&self, task: &TaskId, claim: &File) -> Result<Option<File>, StoreError> {
        let Some(fence) = self.lock_fence(task.as_str(), Some(Duration::ZERO), &|| {})? else {
            return Ok(None);
        };
        // Under the fence no forced release can take it; and no reaper can
        // while its lock is held (by `claim`).
        let path = self.path_of(task.as_str());
        let ino = claim
            .metadata()
            .map_err(StoreError::io("read", &path))?
            .ino();
        Ok(same_file(&path, ino).then_some(fence))
    }

    fn release(&self, task: &TaskId, how: Release<'_>) -> Result<Released, StoreError> {
        self.release_waiting(task, how, &|_| {})
    }

    fn release_waiting(
        &self,
        task: &TaskId,
        how: Release<'_>,
        waiting: &dyn Fn(&str),
    ) -> Result<Released, StoreError> {
        if !self.check_dir(false)? {
            return Err(StoreError::NotFound { task: task.clone() });
        }
        let path = self.path_of(task.as_str());
        let not_found = || StoreError::NotFound { task: task.clone() };
        let mut file = match open_nofollow(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_found()),
            // A planted symlink, a socket, a file farm may not open: nobody's claim.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return self.release_not_a_file(task, how, &path, "symlink");
            }
            Err(e) => {
                let what = format!("entry that cannot be opened ({e})");
                return self.release_not_a_file(task, how, &path, &what);
            }
        };
        let meta = file.metadata().map_err(StoreError::io("read", &path))?;
        if !meta.is_file() {
            return self.release_not_a_file(task, how, &path, &not_a_file(&meta));
        }
        let locked = try_lock_patiently(&file).map_err(StoreError::io("lock", &path))?;
        if !same_file(&path, meta.ino()) {
            return Err(StoreError::Changed { task: task.clone() });
        }
        // A file that cannot be read is corrupt: force still takes it.
        let record = match read_sized(&mut file, &meta) {
            Ok(bytes) => Claim::parse(&bytes),
            Err(e) => Err(Corrupt(format!("cannot be read: {e}"))),
        };
        match how {
            Release::Own(nonce) => {
                let claim = record.map_err(|_| StoreError::Changed { task: task.clone() })?;
                if &claim.nonce != nonce {
                    return Err(StoreError::Changed { task: task.clone() });
                }
                if !locked {
                    let pid = claim.holder.map_or(0, |h| h.pid);
                    return Err(StoreError::LiveHolder {
                        task: task.clone(),
                        pid,
                    });
                }
                self.remove_own(task, nonce, meta.ino())?;
                Ok(Released::Removed)
            }
            Release::Force { by } => {
                // A push in flight under the claim lands before the claim
                // goes (see "Fencing" above).
                let fence_path = self.fence_path(task.as_str());
                let holder = match &record {
                    Ok(claim) => format!(" by {}@{}", claim.agent, claim.host),
                    Err(_) => String::new(),
                };
                let _fence = self.lock_fence(task.as_str(), None, &|| {
                    waiting(&format!(
                        "the push of `{task}`{holder} in flight to end (its processes hold `{}`)",
                        fence_path.display()
                    ));
                })?;
                // Released by its holder once its push ended (and maybe
                // claimed again since, from a board read before the push
                // landed): the claim that was to go is gone, and a new one
                // is not what was judged.
                if !same_file(&path, meta.ino()) {
                    return Ok(Released::Gone);
                }
                let why = format!("released by force by {by}");
                // Gone between that look and the rename: its holder gave
                // it up as its push ended (the same as above, a moment
                // later), not a claim that never was.
                let released = self
                    .entomb(task.as_str(), &path, &why)?
                    .map_or(Released::Gone, |t| {
                        Released::Tombstoned(t.display().to_string())
                    });
                let _ = fs::remove_file(&fence_path);
                Ok(released)
            }
        }
    }

    fn read(&self, task: &TaskId) -> Result<Option<Listed>, StoreError> {
        if !self.check_dir(false)? {
            return Ok(None);
        }
        self.read_entry(task.as_str(), &self.path_of(task.as_str()))
    }

    fn list(&self) -> Result<Vec<Listed>, StoreError> {
        if !self.check_dir(false)? {
            return Ok(Vec::new());
        }
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(StoreError::io("read", &self.dir))? {
            let entry = entry.map_err(StoreError::io("read", &self.dir))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue; // not UTF-8, so not a task id's file: not a claim
            };
            // Dot files are farm's own (temp files, tombstones); README.md
            // and .gitignore document the directory.
            let Some(name) = file_name.strip_suffix(".txt") else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            names.push(name.to_owned());
        }
        // Reading and parsing is most of a long listing's time: with
        // thousands of claims, spread it over the cores.
        let threads = if names.len() < 512 {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
        };
        let chunk = names.len().div_ceil(threads).max(1);
        let dir = File::open(&self.dir).map_err(StoreError::io("read", &self.dir))?;
        // A long listing takes what did not change from the last one's
        // reads (see read_cache.rs).
        let now = SystemTime::now();
        let cache = (names.len() >= read_cache::FROM).then(|| ReadCache::load(&self.dir));
        let read = |part: &[String]| -> Result<Part, StoreError> {
            let mut out = Part::default();
            for name in part {
                if let Some(cache) = &cache
                    && let Some((key, modified)) = stat_in(&dir, name)
                    && let Some(bytes) = cache.get(name, &key)
                {
                    out.listed.push(listed(name, bytes, modified, key.ino));
                    out.hits.push(name.clone());
                    continue;
                }
                let Some((entry, read)) =
                    self.read_entry_in(Some(&dir), name, &self.path_of(name))?
                else {
                    continue;
                };
                out.listed.push(entry);
                if let Some((key, bytes)) = read
                    && cache.is_some()
                {
                    out.fresh.push((name.clone(), key, bytes));
                }
            }
            Ok(out)
        };
        let parts: Vec<Result<Part, StoreError>> = if threads == 1 {
            vec![read(&names)]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = names
                    .chunks(chunk)
                    .map(|part| s.spawn(move || read(part)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Ok(Part::default())))
                    .collect()
            })
        };
        let mut out = Vec::with_capacity(names.len());
        let (mut hits, mut fresh) = (Vec::new(), Vec::new());
        for part in parts {
            let part = part?;
            out.extend(part.listed);
            hits.extend(part.hits);
            fresh.extend(part.fresh);
        }
        if let Some(cache) = &cache {
            cache.save(&hits, &fresh, now);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn tidy(&self, now: SystemTime) -> Result<usize, StoreError> {
        if !self.check_dir(false)? {
            return Ok(0);
        }
        let mut removed = 0;
        for entry in fs::read_dir(&self.dir).map_err(StoreError::io("read", &self.dir))? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let fence = name.starts_with('.') && name.ends_with(".push");
            let scratch = fence
                || name.starts_with('.') && (name.ends_with(".tmp") || name.ends_with(".released"));
            let old = fs::symlink_metadata(entry.path()).is_ok_and(|m| {
                m.is_file()
                    && now
                        .duration_since(mtime(&m))
                        .is_ok_and(|age| age > SCRATCH_MAX_AGE)
            });
            if !(scratch && old) {
                continue;
            }
            // A push fence goes only when nothing holds it, and under its lock.
            let gone = if fence {
                open_nofollow(&entry.path())
                    .is_ok_and(|f| f.try_lock().is_ok() && fs::remove_file(entry.path()).is_ok())
            } else {
                fs::remove_file(entry.path()).is_ok()
            };
            if gone {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn reap(&self, entry: &Listed, judge: &Judge<'_>) -> Result<Reap, StoreError> {
        let path = self.path_of(&entry.name);
        let skipped = |why: &str| Ok(Reap::Skipped(why.to_owned()));
        let mut file = match open_nofollow(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return skipped("already gone"),
            // A symlink, a socket, a file farm may not open: not a claim file.
            Err(_) => return self.reap_not_a_file(entry, judge, &path),
        };
        let meta = file.metadata().map_err(StoreError::io("read", &path))?;
        if !meta.is_file() {
            return self.reap_not_a_file(entry, judge, &path);
        }
        if !try_lock_patiently(&file).map_err(StoreError::io("lock", &path))? {
            return skipped("a live process holds its lock");
        }
        // Under the lock: is the name still this inode, and the inode still
        // the claim that was judged, and is it still reapable?
        if meta.ino() != entry.identity || !same_file(&path, meta.ino()) {
            return skipped("replaced since it was listed");
        }
        let now = match read_sized(&mut file, &meta) {
            Ok(bytes) => listed(&entry.name, &bytes, mtime(&meta), meta.ino()),
            Err(e) => corrupt_entry(&entry.name, format!("cannot be read: {e}"), &meta),
        };
        let same_claim = match (&now.record, &entry.record) {
            (Ok(a), Ok(b)) => a.nonce == b.nonce,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        if !same_claim {
            return skipped("replaced since it was listed");
        }
        let verdict = now.judge(judge);
        if !verdict.reapable {
            return skipped(&format!("no longer reapable: {}", verdict.reason));
        }
        debug_assert!(verdict.state != State::Alive);
        let entombed = self.entomb(&entry.name, &path, &verdict.reason)?;
        // Nothing of a push holds the fence: its processes would hold the
        // claim's lock, which is ours.
        self.drop_fence(&entry.name);
        Ok(match entombed {
            Some(tombstone) => Reap::Reaped {
                tombstone: tombstone.display().to_string(),
                verdict,
            },
            None => Reap::Skipped("already gone".into()),
        })
    }
}

fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// [`open_nofollow`] of `path`'s file name in the open directory `dir`.
fn open_nofollow_in(dir: &File, path: &Path) -> io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let name = path.file_name().unwrap_or_default();
    let name = std::ffi::CString::new(name.as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: `name` is a valid C string; the descriptor returned is new
    // and owned by the `File` made of it.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Read at most one byte past the size limit, so an oversized file is
/// recognised without reading it whole.
fn read_capped(file: &mut File) -> io::Result<(Vec<u8>, fs::Metadata)> {
    let meta = file.metadata()?;
    let bytes = read_sized(file, &meta)?;
    Ok((bytes, meta))
}

/// The file's bytes, at most one past the size limit, read by its size: a
/// claim is written whole before its name appears and never rewritten, so
/// one read usually takes it all (a file that shrank reads short; one that
/// grew is read to its size when opened).
fn read_sized(file: &mut File, meta: &fs::Metadata) -> io::Result<Vec<u8>> {
    let want = usize::try_from(meta.len().min(MAX_CLAIM_BYTES + 1)).unwrap_or(0);
    let mut bytes = vec![0; want];
    let mut got = 0;
    while got < want {
        match file.read(&mut bytes[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(got);
    Ok(bytes)
}

/// The bytes read of a regular file, and the version of it they are.
type ReadBytes = (Key, Vec<u8>);

/// What one thread of a listing found: the entries, the names whose read
/// the cache kept, and the reads it made.
#[derive(Default)]
struct Part {
    listed: Vec<Listed>,
    hits: Vec<String>,
    fresh: Vec<(String, Key, Vec<u8>)>,
}

/// The cache key and the mtime of regular file `name` in the open directory
/// `dir` (one `fstatat`, never following a link); `None` for anything else.
fn stat_in(dir: &File, name: &str) -> Option<(Key, SystemTime)> {
    use std::os::fd::AsRawFd;
    let file = std::ffi::CString::new(format!("{name}.txt")).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `file` is a valid C string and `st` is written by the call
    // before it is read (only when it succeeded).
    let st = unsafe {
        if libc::fstatat(
            dir.as_raw_fd(),
            file.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return None;
        }
        st.assume_init()
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let key = Key {
        ino: st.st_ino,
        size: u64::try_from(st.st_size).ok()?,
        ctime: (st.st_ctime, st.st_ctime_nsec),
    };
    let modified = u64::try_from(st.st_mtime)
        .ok()
        .map_or(SystemTime::UNIX_EPOCH, |s| {
            SystemTime::UNIX_EPOCH
                + std::time::Duration::new(s, u32::try_from(st.st_mtime_nsec).unwrap_or(0))
        });
    Some((key, modified))
}

fn listed(name: &str, bytes: &[u8], modified: SystemTime, ino: u64) -> Listed {
    let record = super::record_of(name, bytes);
    let heartbeat = match &record {
        Ok(c) => c.heartbeat_at.max(modified),
        Err(_) => modified,
    };
    Listed {
        name: name.to_owned(),
        record,
        heartbeat,
        modified,
        seen: None,
        identity: ino,
    }
}

/// A listed entry that is not a valid record, judged by `meta`'s mtime.
fn corrupt_entry(name: &str, why: String, meta: &fs::Metadata) -> Listed {
    Listed {
        name: name.to_owned(),
        record: Err(Corrupt(why)),
        heartbeat: mtime(meta),
        modified: mtime(meta),
        seen: None,
        identity: meta.ino(),
    }
}

/// The entry at `path` that could not be opened or read (`why`), as a
/// corrupt one; `None` if it is gone. One that cannot even be looked at is
/// listed as modified now, so that it is reported and never reaped blind.
fn unreadable(name: &str, path: &Path, why: String) -> Option<Listed> {
    match fs::symlink_metadata(path) {
        Ok(m) => Some(corrupt_entry(name, why, &m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            let now = SystemTime::now();
            Some(Listed {
                name: name.to_owned(),
                record: Err(Corrupt(format!("{why}; cannot look at it: {e}"))),
                heartbeat: now,
                modified: now,
                seen: None,
                identity: 0,
            })
        }
    }
}

/// What a non-regular entry is, as a corrupt claim's reason.
fn not_a_file(meta: &fs::Metadata) -> String {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a fifo"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a special file"
    };
    format!("{what}, not a claim file")
}

/// Take `file`'s lock, or learn that a live process holds it: a busy lock
/// is tried again for up to 100 ms before it counts as held (see
/// [`crate::flock`]).
fn try_lock_patiently(file: &File) -> io::Result<bool> {
    crate::flock::lock_within(
        file,
        std::time::Duration::from_millis(100),
        std::time::Duration::from_millis(5),
    )
}

fn fs_guard(held: &Held) -> Result<&FsGuard, StoreError> {
    match &held.guard {
        Guard::Fs(g) => Ok(g),
        Guard::Git(_) => Err(StoreError::Refused(
            "a claim of the git store given to the fs store".into(),
        )),
    }
}

fn same_file(path: &Path, ino: u64) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.ino() == ino)
}

fn mtime(meta: &fs::Metadata) -> SystemTime {
    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A forced release while a push holds the task's fence waits for it,
    /// saying so, and takes the claim only once the fence is free; the
    /// holder then finds its claim gone (its next push is not made).
    #[test]
    fn a_forced_release_waits_for_the_push_holding_the_fence() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FsStore::new(tmp.path());
        let task = TaskId::parse("t1").unwrap();
        let claim = Claim::new(task.clone(), "a", None, 1, SystemTime::now());
        let Attempt::Won(held) = store.try_claim(claim, true).unwrap() else {
            panic!("t1 was free");
        };
        // What the processes of a push in flight keep: the fence, locked.
        let fence = store.lock_fence("t1", Some(Duration::ZERO), &|| {});
        let fence = fence.unwrap().expect("the fence was free");
        let said = AtomicBool::new(false);
        std::thread::scope(|s| {
            let release = s.spawn(|| {
                let waiting = |what: &str| {
                    assert!(what.contains("the push of `t1` by a@"), "{what}");
                    said.store(true, Ordering::SeqCst);
                };
                store.release_waiting(&task, Release::Force { by: "ops" }, &waiting)
            });
            let start = Instant::now();
            while !said.load(Ordering::SeqCst) {
                assert!(start.elapsed() < Duration::from_secs(10), "never waited");
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                store.path_of("t1").exists(),
                "the claim was taken while its push was in flight"
            );
            drop(fence);
            let released = release.join().unwrap().unwrap();
            assert!(matches!(released, Released::Tombstoned(_)), "{released:?}");
        });
        assert!(matches!(
            store.heartbeat(&held, SystemTime::now()),
            Err(StoreError::Lost { .. })
        ));
        assert!(!store.fence_path("t1").exists(), "the fence is left behind");
    }

    /// A fence removed by its last holder while another waited for it is
    /// not the fence any more: the waiter takes the one the name has.
    #[test]
    fn a_fence_removed_under_a_waiter_is_taken_again_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FsStore::new(tmp.path());
        fs::create_dir(store.dir()).unwrap();
        let first = store.lock_fence("t1", None, &|| {}).unwrap().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| store.lock_fence("t1", None, &|| {}).unwrap().unwrap());
            std::thread::sleep(Duration::from_millis(50));
            fs::remove_file(store.fence_path("t1")).unwrap();
            drop(first);
            let second = waiter.join().unwrap();
            let ino = second.metadata().unwrap().ino();
            assert!(same_file(&store.fence_path("t1"), ino));
        });
    }
}
