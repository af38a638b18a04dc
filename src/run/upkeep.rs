//! When farm keeps its repositories packed (how is [`crate::git::maintain`]'s):
//! right after an integration ended. By then the hub's push lock is let go,
//! and the clone the integration used is free: the loop runs its next
//! session in the agent's other clone.
//!
//! 1. the hub, when it is on this machine: every agent's pushes fill it;
//! 2. the claims cache, with the git store;
//!
//! on a thread of their own, which no loop waits for (on the integration's
//! thread, their packing held up the agent's next session but one); then
//!
//! 3. the clone, on the integration's thread: the loop takes it back only
//!    once that thread returns.
//!
//! One loop at a time looks after the hub and the cache; the others go on.
//! Between processes, an upkeep holds the repository's `farm-objects.lock`
//! (in its git dir) alone, taken without waiting for the hub and within a
//! second for the cache: where another still holds it, this upkeep is
//! skipped and tried after the next integration. In the
//! claims cache that lock is the one its fetches, pushes and commits
//! share, so the cache is packed at a moment when none of them runs; in the
//! hub only upkeeps take it — two farms on one hub never pack it at once,
//! and no push ever waits for an upkeep. Never under the hub's push lock:
//! a packing that held it would hold every agent's push. Each
//! repository's git config is read once a run, and what its last upkeep left
//! is kept, so the check after a task is a look at its object directories
//! (a `stat` each, a listing of those that changed) and no process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::claims::git::OBJECTS_LOCK;
use crate::git::command::Repo;
use crate::git::maintain::{self, Count, Listed, Owner, Thresholds};
use crate::run::clone::PrivateClone;
use crate::run::state::Run;

/// Keep the hub and the claims cache packed, as far as each is due, after
/// an integration of agent `name` ended. Failures are said at `-v` only: a
/// repository left unpacked costs disk, not work.
pub fn shared(run: &Run, name: &str) {
    if let Some(local) = &run.hub.local {
        keep(
            run,
            name,
            &Kept {
                what: "the hub",
                repo: Repo::new(&local.dir),
                objects: local.git_dir.join("objects"),
                owner: Owner::User,
                alone: false,
                lock: Some(local.git_dir.join(OBJECTS_LOCK)),
                // Only upkeeps take it: one under way is enough.
                patience: Duration::ZERO,
            },
        );
    }
    let cache = run.state.join("claims.git");
    if run.store.kind() == "git" && cache.is_dir() {
        keep(
            run,
            name,
            &Kept {
                what: "the claims cache",
                repo: Repo::new(&cache),
                objects: cache.join("objects"),
                owner: Owner::Farm,
                // Every loop of this run, and other farms, claim through it.
                alone: false,
                lock: Some(cache.join(OBJECTS_LOCK)),
                // Its pushes and fetches hold the lock for a moment each,
                // and with changes landing one after another through the
                // merge queue one is nearly always under way: an upkeep
                // that never waited found it held at every try (0 or 1
                // packings in a 30-task run) and the cache was left to
                // grow.
                patience: CACHE_PATIENCE,
            },
        );
    }
}

/// Keep `clone` — agent `name`'s, whose integration has just ended —
/// packed, as far as it is due (failures as in [`shared`]).
pub fn clone(run: &Run, name: &str, clone: &PrivateClone) {
    keep(
        run,
        name,
        &Kept {
            what: "its clone",
            repo: Repo::of_agent(clone.dir()),
            objects: clone.dir().join(".git").join("objects"),
            owner: Owner::Farm,
            // Nothing works in it until this thread hands it back.
            alone: true,
            // (Its loop's lock on the clone keeps other farms out.)
            lock: None,
            patience: Duration::ZERO,
        },
    );
}

/// A repository to keep packed.
struct Kept {
    /// What it is, for messages.
    what: &'static str,
    repo: Repo,
    objects: PathBuf,
    owner: Owner,
    /// No other process reads or writes it meanwhile (see [`maintain::pack`]).
    alone: bool,
    /// The file whose lock an upkeep holds alone (see the module's doc).
    lock: Option<PathBuf>,
    /// How long an upkeep waits for that lock before it gives up until the
    /// next integration.
    patience: Duration,
}

/// How long an upkeep waits for the claims cache's objects lock (see
/// [`Kept::patience`]): on a thread of its own, which no loop waits for.
const CACHE_PATIENCE: Duration = Duration::from_secs(1);

/// What this process knows of a repository it keeps packed.
#[derive(Clone)]
struct Known {
    /// `None`: no upkeep there (turned off, or this git cannot).
    thresholds: Option<Thresholds>,
    /// What its last upkeep left.
    left: Count,
    /// What its last count found in each directory of loose objects.
    listed: Listed,
    /// A loop is looking after it now.
    busy: bool,
}

/// Every repository looked after so far, by its object directory.
static KNOWN: Mutex<BTreeMap<PathBuf, Known>> = Mutex::new(BTreeMap::new());

fn known() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Known>> {
    KNOWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Look after `kept`, unless another loop is.
fn keep(run: &Run, name: &str, kept: &Kept) {
    let key = kept.objects.clone();
    let seen = {
        let mut all = known();
        match all.get_mut(&key) {
            Some(k) if k.busy => return,
            Some(k) => {
                k.busy = true;
                Some((k.thresholds, k.left, std::mem::take(&mut k.listed)))
            }
            None => {
                all.insert(
                    key.clone(),
                    Known {
                        thresholds: None,
                        left: Count::default(),
                        listed: Listed::default(),
                        busy: true,
                    },
                );
                None
            }
        }
    };
    let (thresholds, left, mut listed) = match seen {
        Some(seen) => seen,
        None => match kept.repo.config_matching(maintain::SETTINGS) {
            Ok(settings) => (
                Thresholds::from_config(kept.owner, &settings),
                Count::default(),
                Listed::default(),
            ),
            Err(e) => {
                let what = kept.what;
                run.detail(name, &format!("cannot read the git config of {what}: {e}"));
                (None, Count::default(), Listed::default())
            }
        },
    };
    let (thresholds, left) = match thresholds {
        Some(t) => pack(run, name, kept, t, left, &mut listed),
        None => (None, left),
    };
    known().insert(
        key,
        Known {
            thresholds,
            left,
            listed,
            busy: false,
        },
    );
}

/// Pack `kept` if it is due at `t`, its last upkeep having left `left`
/// and its last count found `listed`: the thresholds from then on, and
/// what it left this time.
fn pack(
    run: &Run,
    name: &str,
    kept: &Kept,
    t: Thresholds,
    left: Count,
    listed: &mut Listed,
) -> (Option<Thresholds>, Count) {
    let now = maintain::count_since(&kept.objects, maintain::enough(t, left), listed);
    let due = maintain::due(t, now, left);
    if !due.any() {
        return (Some(t), left);
    }
    let what = kept.what;
    let _held = match kept.lock.as_deref().map(|l| take_alone(l, kept.patience)) {
        None => None,
        Some(Some(file)) => Some(file),
        Some(None) => {
            run.detail(
                name,
                &format!("not packing {what} now: it is being fetched, pushed or packed"),
            );
            return (Some(t), left);
        }
    };
    let started = Instant::now();
    match maintain::pack(&kept.repo, &kept.objects, due, kept.alone) {
        Ok(after) => {
            run.detail(
                name,
                &format!(
                    "packed {what} in {:.2}s: {} loose objects and {} packs outside its multi-pack-index left",
                    started.elapsed().as_secs_f64(),
                    after.loose,
                    after.packs
                ),
            );
            (Some(t), maintain::left_after(due, left, after))
        }
        // Tried again once as much again has come.
        Err(e) => {
            run.detail(name, &format!("cannot pack {what}: {e}"));
            (Some(t), maintain::left_after(due, left, now))
        }
    }
}

/// The lock of the file at `path`, taken alone if no one holds it now or
/// within `patience` (new shared holders are not held back meanwhile: no
/// push waits for an upkeep that waits); `None` when someone still does,
/// or the file cannot be opened (no upkeep then: unguarded, it could run
/// beside one of another farm).
fn take_alone(path: &Path, patience: Duration) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    crate::flock::lock_within(&file, patience, Duration::from_millis(5))
        .ok()
        .filter(|&taken| taken)?;
    Some(file)
}
