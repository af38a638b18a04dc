//! Where claims live, behind one interface: [`ClaimStore`].
//!
//! A store decides atomically who wins a task, keeps the winner's record,
//! lists every record it holds, and takes records back — by their holder
//! (release) or from a dead or stale holder (reap). It knows nothing of the
//! agent loop. The `fs` store ([`fs::FsStore`]) is the `current_tasks/`
//! directory of a hub on this machine; the `git` store ([`git::GitStore`])
//! keeps the same files on a branch of a remote, for hubs elsewhere. Every
//! store must pass the contract suite in `tests/it/contract.rs`.

pub mod fs;
pub mod git;
pub mod hold;
pub mod host;
pub mod line;
pub mod liveness;
pub mod message;
pub mod notice;
pub mod protocol;
mod read_cache;
pub mod record;

use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::claims::liveness::{Judge, Verdict};
use crate::claims::notice::{Kind, Notice, Target};
use crate::claims::record::{Claim, Corrupt, Nonce};
use crate::error::{Code, Error};
use crate::git::command::{GitError, RefUpdate, Repo};
use crate::names::TaskId;

/// The claim stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimsKind {
    Fs,
    Git,
}

/// A claim store.
pub trait ClaimStore: Send + Sync {
    /// `fs` or `git`, as `farm locks` reports it.
    fn kind(&self) -> &'static str;

    /// Where the claims are, for messages.
    fn location(&self) -> String;

    /// Where the claim of `task` is, for the session's `FARM_CLAIM`.
    fn claim_location(&self, task: &TaskId) -> String;

    /// The notices beside the claims (`farm stop`, `farm pause`; see
    /// [`notice`]), by name (`fresh`: ask the hub now rather than go by
    /// what the store last saw).
    fn notices(&self, fresh: bool) -> Result<Vec<Notice>, StoreError>;

    /// Post `notice`, replacing any earlier one of its kind for its target.
    fn post_notice(&self, notice: &Notice) -> Result<(), StoreError>;

    /// Take away the notice of `kind` for `target` (`farm resume`): what it
    /// was, or `None` when there was none.
    fn withdraw_notice(&self, kind: Kind, target: &Target) -> Result<Option<Notice>, StoreError>;

    /// The line this store keeps beside the claims for the merge queue of
    /// a hub elsewhere (see [`line`]); `None` for a store that keeps none
    /// (a hub of this machine keeps its line in a directory).
    fn line(&self) -> Option<&dyn line::LineStore> {
        None
    }

    /// The protocol version the hub's farms speak (see [`protocol`]);
    /// `None` when no farm wrote one.
    fn protocol(&self) -> Result<Option<u32>, StoreError>;

    /// Raise the hub's protocol version to `version` (never lower it): the
    /// version there now.
    fn raise_protocol(&self, version: u32) -> Result<u32, StoreError>;

    /// farm's own files beside the claims whose names (without `.txt`)
    /// start with `prefix`, a dot name (messages and their receipts; see
    /// [`message`]), with their bytes, sorted by name (`fresh` as for
    /// [`ClaimStore::notices`]). A file that cannot be read whole (a
    /// symlink, one too large) is left out.
    fn side_files(&self, prefix: &str, fresh: bool) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// Create each of `files` (name without `.txt`, bytes) that does not
    /// exist yet, each whole or not at all: the names this call created.
    /// Of any number of processes creating one name, exactly one does.
    /// `why` is said where the store keeps a history (git).
    fn create_side(
        &self,
        files: &[(String, Vec<u8>)],
        why: &str,
    ) -> Result<Vec<String>, StoreError>;

    /// Remove these side files (by name without `.txt`); how many there
    /// were.
    fn remove_side(&self, names: &[String], why: &str) -> Result<usize, StoreError>;

    /// Try to win `claim.task` with this record. When `hold` is true the
    /// store keeps an OS-level proof of life for as long as the returned
    /// [`Held`] lives in this process (the fs store: a lock on the claim file).
    fn try_claim(&self, claim: Claim, hold: bool) -> Result<Attempt, StoreError>;

    /// Refresh the heartbeat of a claim this process holds.
    /// [`StoreError::Lost`] when the claim is no longer this one.
    fn heartbeat(&self, held: &Held, now: SystemTime) -> Result<(), StoreError>;

    /// Give back a claim this process holds.
    fn release_held(&self, held: Held) -> Result<(), StoreError>;

    /// Give back a claim held elsewhere: `Own` when the caller is its agent
    /// (proved by the nonce), `Force` to take anyone's, keeping a tombstone.
    fn release(&self, task: &TaskId, how: Release<'_>) -> Result<Released, StoreError>;

    /// The record of one task, if it is claimed.
    fn read(&self, task: &TaskId) -> Result<Option<Listed>, StoreError>;

    /// Every claim, sorted by name.
    fn list(&self) -> Result<Vec<Listed>, StoreError>;

    /// Take back `entry` if, judged again under the store's own guard, it is
    /// still the claim that was listed and still reapable.
    fn reap(&self, entry: &Listed, judge: &Judge<'_>) -> Result<Reap, StoreError>;

    /// Remove the store's own scratch that crashed processes left behind,
    /// if it is older than `SCRATCH_MAX_AGE`. Returns how many were removed.
    fn tidy(&self, _now: SystemTime) -> Result<usize, StoreError> {
        Ok(0)
    }

    /// Push `refspecs` from `repo` to `remote` only while `held` is still
    /// this process's claim (fencing). The fs store checks the claim, then
    /// pushes with the claim's lock held by every process of the push (see
    /// "Fencing" in fs.rs); the git store pushes the work and the claim's
    /// release in one atomic push, after which releasing `held` is a no-op.
    ///
    /// `hold`: open files carrying locks of the caller's (the hub's push
    /// lock) that the push's processes keep open as long as they live.
    fn publish(
        &self,
        held: &Held,
        repo: &Repo,
        remote: &str,
        refspecs: &[String],
        hold: &[BorrowedFd<'_>],
    ) -> Result<Published, StoreError> {
        publish_checked(self, held, repo, remote, refspecs, hold)
    }

    /// For a push of the caller's that lands the work of `task` too, under
    /// a claim this process holds whose locked file is `claim` (another
    /// descriptor of it): the task's push fence, taken at once, once the
    /// claim is checked to be still that file. The push's processes keep
    /// both open, as they keep the caller's own (see "Fencing" in fs.rs).
    /// `None`: not to be landed by another's push now (the fence is held,
    /// the claim is gone, or the store fences pushes otherwise).
    fn fence_for(
        &self,
        task: &TaskId,
        claim: &std::fs::File,
    ) -> Result<Option<std::fs::File>, StoreError> {
        let _ = (task, claim);
        Ok(None)
    }

    /// [`ClaimStore::release`], calling `waiting` (with what it waits for)
    /// before it waits: the fs store's forced release waits for a push in
    /// flight under the claim (see "Fencing" in fs.rs).
    fn release_waiting(
        &self,
        task: &TaskId,
        how: Release<'_>,
        waiting: &dyn Fn(&str),
    ) -> Result<Released, StoreError> {
        let _ = waiting;
        self.release(task, how)
    }
}

/// The default [`ClaimStore::publish`]: check the claim with a heartbeat,
/// then push, with the claim's lock and `hold` kept by the push's processes.
pub(crate) fn publish_checked<S: ClaimStore + ?Sized>(
    store: &S,
    held: &Held,
    repo: &Repo,
    remote: &str,
    refspecs: &[String],
    hold: &[BorrowedFd<'_>],
) -> Result<Published, StoreError> {
    // A push that ended without a report (its git killed, the hub gone
    // mid-way) may still have landed; once its processes are gone the
    // answer is final, and the same push again says what it was.
    const TRIES: usize = 3;
    let mut tries = 0;
    let mut locked: Option<std::time::Instant> = None;
    let updates = loop {
        match store.heartbeat(held, SystemTime::now()) {
            Err(StoreError::Lost { why, .. }) => return Ok(Published::Lost(why)),
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        let hold: Vec<_> = held
            .lock_fd()
            .into_iter()
            .chain(hold.iter().copied())
            .collect();
        match repo.push_refs_holding(remote, refspecs, false, &hold) {
            // A ref lock on the hub: a push of someone else's finishing
            // (git waited 100 ms for it already), or one a kill cut off,
            // whose lock stays until a person removes it.
            Ok(updates) if updates.iter().any(|u| u.lock_file().is_some()) => {
                let (u, file) = updates
                    .iter()
                    .find_map(|u| u.lock_file().map(|f| (u, f)))
                    .expect("found above");
                if locked.get_or_insert_with(std::time::Instant::now).elapsed() >= git::STALE_LOCK {
                    return Err(git::stale_lock(&u.to, file));
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            Ok(updates) => break updates,
            Err(e) if e.transient && tries + 1 < TRIES => tries += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let rejected: Vec<RefUpdate> = updates.into_iter().filter(|u| u.rejected()).collect();
    if rejected.is_empty() {
        Ok(Published::Pushed)
    } else if rejected.iter().all(RefUpdate::moved) {
        Ok(Published::Rejected(rejected))
    } else {
        let why: Vec<String> = rejected
            .iter()
            .map(|u| format!("{}: {}", u.to, u.summary))
            .collect();
        Err(StoreError::Refused(why.join("; ")))
    }
}

/// The outcome of [`ClaimStore::publish`].
#[derive(Debug)]
pub enum Published {
    Pushed,
    /// These refs moved on meanwhile: integrate again and publish again.
    Rejected(Vec<RefUpdate>),
    /// The claim is no longer ours (why): nothing was published.
    Lost(String),
}

/// The largest side file a store reads (a message's text is at most 16 KiB,
/// escaped in TOML).
pub const MAX_SIDE_BYTES: u64 = 64 * 1024;

/// Scratch lives for microseconds; anything this old was left by a crash.
pub const SCRATCH_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// The outcome of [`ClaimStore::try_claim`].
#[derive(Debug)]
pub enum Attempt {
    Won(Held),
    /// Someone else holds the task; their record.
    Lost(Box<Listed>),
}

/// A claim won by this process. Dropping it without
/// [`ClaimStore::release_held`] leaves the claim in place, as a crash would.
#[derive(Debug)]
pub struct Held {
    claim: Claim,
    guard: Guard,
}

impl Held {
    pub fn claim(&self) -> &Claim {
        &self.claim
    }

    /// The open file that carries the claim's OS lock, when one is held
    /// (the fs store's, for a holder process).
    pub(crate) fn lock_file(&self) -> Option<&std::fs::File> {
        match &self.guard {
            Guard::Fs(g) => g.file(),
            Guard::Git(_) => None,
        }
    }

    /// The open file that carries the claim's OS lock, as a descriptor.
    pub(crate) fn lock_fd(&self) -> Option<BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match &self.guard {
            Guard::Fs(g) => g.file().map(AsFd::as_fd),
            Guard::Git(_) => None,
        }
    }
}

/// The store-specific part of a held claim.
#[derive(Debug)]
enum Guard {
    Fs(fs::FsGuard),
    Git(Box<git::GitGuard>),
}

/// How a claim not held by this process is released.
#[derive(Clone, Copy, Debug)]
pub enum Release<'a> {
    /// Only if the record still carries this nonce and no live process holds it.
    Own(&'a Nonce),
    /// Whoever holds it; the record is kept as a tombstone naming `by`.
    Force { by: &'a str },
}

/// What [`ClaimStore::release`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    Removed,
    /// A forced release waited for the holder's push to end, and by then
    /// the claim was gone (its holder released it): nothing taken.
    Gone,
    /// Where the record is kept: a file (fs) or a commit (git).
    Tombstoned(String),
}

/// One claim as listed: its name, its record (or why it is corrupt), and
/// when the store last saw a heartbeat.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The task id the file is named after (not validated for corrupt files).
    pub name: String,
    pub record: Result<Claim, Corrupt>,
    /// The latest heartbeat the store knows of (fs: the later of the
    /// record's `heartbeat_at` and the file's mtime).
    pub heartbeat: SystemTime,
    pub modified: SystemTime,
    /// When this host first saw this very record, on its own clock — for
    /// stores shared across hosts, whose clocks may disagree (git).
    pub seen: Option<liveness::Sighting>,
    /// Identifies this exact file, so a reaper can tell it was not replaced.
    pub(crate) identity: u64,
}

impl Listed {
    /// `agent@host`, or what stands in its place for a corrupt file.
    pub fn who(&self) -> String {
        self.record
            .as_ref()
            .map_or_else(|_| "a corrupt claim".to_owned(), Claim::who)
    }

    pub fn judge(&self, judge: &Judge<'_>) -> Verdict {
        match &self.record {
            Ok(claim) => judge.claim(claim, self.heartbeat, self.seen),
            Err(Corrupt(why)) => judge.corrupt(why, self.modified),
        }
    }
}

/// Who holds each claimed task, for the board (files not named after a
/// valid task id claim nothing).
pub fn holders(entries: &[Listed]) -> std::collections::BTreeMap<TaskId, String> {
    entries
        .iter()
        .filter_map(|e| Some((TaskId::parse(&e.name).ok()?, e.who())))
        .collect()
}

/// The hosts whose clocks seem off this host's, with by how much (seconds,
/// ahead positive; the largest seen of each), from the stamps of records
/// this host saw appear (see [`liveness::clock_off`]).
pub fn clocks_off(entries: &[Listed]) -> std::collections::BTreeMap<String, i64> {
    let mut off = std::collections::BTreeMap::<String, i64>::new();
    for e in entries {
        let (Ok(claim), Some(seen)) = (&e.record, &e.seen) else {
            continue;
        };
        if let Some(secs) = liveness::clock_off(claim, seen) {
            let worst = off.entry(claim.host.clone()).or_insert(secs);
            if secs.abs() > worst.abs() {
                *worst = secs;
            }
        }
    }
    off
}

/// One line naming a host whose clock is `secs` off this one's.
pub fn clock_off_line(host: &str, secs: i64) -> String {
    // To the minute: a stamp's offset is known to a poll interval or so.
    let by = crate::age::Age(std::time::Duration::from_secs(
        (secs.unsigned_abs() + 30) / 60 * 60,
    ));
    let way = if secs < 0 { "behind" } else { "ahead of" };
    format!(
        "the clock of `{host}` runs about {by} {way} this machine's (its claims' stamps \
         against when they appeared here); claims are judged on this machine's clock, \
         but fix the time there (timedatectl, chrony)"
    )
}

/// The outcome of [`ClaimStore::reap`].
#[derive(Debug, PartialEq, Eq)]
pub enum Reap {
    /// Taken; the record is kept at this path with the reason.
    Reaped {
        /// Where the record is kept: a file (fs) or a commit (git).
        tombstone: String,
        verdict: Verdict,
    },
    /// Not taken: released, replaced, refreshed or proved alive meanwhile.
    Skipped(String),
}

/// Store failures a caller can branch on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("`{}` {why}", path.display())]
    BadDir { path: PathBuf, why: &'static str },
    #[error("`{task}` is not claimed")]
    NotFound { task: TaskId },
    #[error("`{task}` is held by a live process (pid {pid})")]
    LiveHolder { task: TaskId, pid: u32 },
    #[error("the claim on `{task}` is no longer ours: {why}")]
    Lost { task: TaskId, why: String },
    #[error("the claim on `{task}` changed while releasing it")]
    Changed { task: TaskId },
    #[error("`{task}` is too busy: its claim kept changing; try again")]
    Busy { task: TaskId },
    #[error("the hub refused the claims update: {0}")]
    Refused(String),
    #[error(transparent)]
    Git(GitError),
}

/// The record in claim file `<name>.txt`, checked to name that task.
pub(crate) fn record_of(name: &str, bytes: &[u8]) -> Result<Claim, Corrupt> {
    Claim::parse(bytes).and_then(|c| {
        if c.task.as_str() == name {
            Ok(c)
        } else {
            Err(Corrupt(format!(
                "names task `{}` but the file is `{name}.txt`",
                c.task
            )))
        }
    })
}

impl StoreError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    }
}

impl From<StoreError> for Error {
    /// The message is the store error's text; the store error is kept as
    /// the cause (a git failure is converted as git's own, keeping it).
    fn from(e: StoreError) -> Error {
        let e = match e {
            StoreError::Git(git) => return git.into(),
            e => e,
        };
        let message = e.to_string();
        let err = match &e {
            StoreError::Io { source, path, .. } => {
                let err = Error::failure(message);
                match source.kind() {
                    io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => err.hint(format!(
                        "farm needs to create and rename files in `{}`; check its owner and mode (ls -ld)",
                        if path.is_dir() { path } else { path.parent().unwrap_or(path) }.display()
                    )),
                    io::ErrorKind::NotADirectory => {
                        err.hint("a path component is a file; pass --hub with the repository's directory")
                    }
                    _ => err,
                }
            }
            StoreError::BadDir { .. } => Error::failure(message)
                .hint("move it out of the way; farm creates `current_tasks/` itself"),
            StoreError::NotFound { .. } => {
                Error::new(Code::NotClaimed, message).hint("`farm locks` lists the claims")
            }
            StoreError::LiveHolder { task, pid } => Error::new(Code::Held, message).hint(format!(
                "stop process {pid} first, or take the claim anyway: farm release {task} --force"
            )),
            StoreError::Lost { .. } => Error::failure(message),
            StoreError::Changed { .. } | StoreError::Busy { .. } => {
                Error::failure(message).hint("look again with `farm locks`, then retry")
            }
            StoreError::Refused(_) => Error::failure(message)
                .hint("the hub may have a hook or a branch protection on farm/claims"),
            StoreError::Git(_) => unreachable!("converted above"),
        };
        err.caused_by(e)
    }
}
