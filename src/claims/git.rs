//! The `git` claim store: the same `current_tasks/<task>.txt` files, kept on
//! the branch `farm/claims` of a git remote — for hubs on other machines,
//! where no shared filesystem can decide who wins.
//!
//! # Theory of operation
//!
//! **Every change is a compare-and-swap push.** A claim, heartbeat, release
//! or reap is one commit on top of the claims tip it was decided on, pushed
//! as a plain fast-forward (never forced). The remote takes it only if its
//! branch is still at that tip; otherwise the push is rejected, the store
//! fetches the new tip and decides again. A claim is a commit adding the file
//! on a tip in which it is absent, so of any number of claimers exactly one
//! push lands.
//!
//! **Who won is decided by the commit, not the file.** Every commit carries
//! a random operation id, so no two claimers ever push the same commit even
//! when their records are byte-identical. A claim is won when the push
//! report says the branch moved to *this* commit (`old..new`), or, after a
//! connection broke mid-push, when the fetched tip descends from this commit
//! and still holds this record. A byte-identical record found on the tip is
//! not proof: its twin may have put it there.
//!
//! **No tip is trusted for a loss.** The store keeps the last tip it saw (its
//! own pushes included), so an uncontended claim costs one push. A task that
//! looks held on that cached tip is looked up again on a fresh fetch before
//! the claimer is told it lost.
//!
//! **Age is judged on the judge's clock.** Hosts' clocks disagree, so the
//! store notes when it first saw each record (by blob id) unchanged, on its
//! own clock, and keeps these notes in the cache. [`crate::claims::liveness`] judges
//! a claim from another host by that age, or by the record's own heartbeat
//! stamp less an allowance for clock skew, whichever is older.
//!
//! **Fencing.** Completion publishes the work and the release in one `git
//! push --atomic` (see [`GitStore::publish`]), built on a claims tip that
//! still holds the holder's record: a holder whose claim was taken away
//! cannot land its work on the branch.
//!
//! The store works in a bare cache repository of its own (`claims.git` under
//! the state directory); objects are created there with plumbing commands and
//! pushed from there. It keeps no refs: tips are learnt from `git fetch
//! --porcelain`, so processes sharing a cache never race on a ref.
//!
//! **A fetch shows what it brought all at once.** A fetch of fewer than a
//! hundred objects would write them one by one, newest first: for a moment
//! the hub's new tip would be in the cache and its parent not. A push made
//! then (from the cache, or from a clone that reads it as an alternate)
//! finds the hub's tip there, walks its history to see that it pushes a
//! fast forward, meets the hole and fails ("Could not read <oid>; could not
//! parse commit <oid>"). So a fetch keeps what it brought as one pack,
//! which shows when its index is moved into place (see
//! [`Repo::fetch_tip`]), and fetches and pushes of one farm, and of farms
//! sharing a state dir, go on side by side. (They once took turns: a fetch
//! waited for every push under way, and the loops of one farm for each
//! other's fetches — 12.5 s summed over the threads of a 17.5 s `daemon`
//! bench round, in 132 waits.) Only the packing of the cache
//! (`run/upkeep.rs`) holds the lock of its `farm-objects.lock` alone;
//! fetches, pushes and commits share it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    Attempt, ClaimStore, Guard, Held, Listed, Published, Reap, Release, Released, StoreError,
    record_of,
};
use crate::claims::host::{self, Here};
use crate::claims::line::{self, Landing, LineStore, Snapshot};
use crate::claims::liveness::{Judge, Sighting};
use crate::claims::notice::{self, Kind, Notice, Target};
use crate::claims::protocol;
use crate::claims::record::{Claim, Corrupt, Nonce};
use crate::git::command::{GitError, Repo};
use crate::git::retry::{jitter, patiently};
use crate::names::TaskId;

/// The branch of the hub that holds the claims.
pub const BRANCH: &str = "farm/claims";
/// Its full ref name.
pub const REF: &str = "refs/heads/farm/claims";
const DIR: &str = crate::names::CLAIMS_DIR;
/// Compare-and-swap rounds before a task is called too busy.
/// Generous: every agent on every machine moves the one claims branch, and
/// a holder that gives up on its own release or publish ends its loop.
/// With [`back_off`] growing to ~0.5 s, this is a minute or two of trying.
const ROUNDS: u32 = 256;
/// Where first sightings are kept between processes, inside the cache.
const SEEN_FILE: &str = "farm-seen";
/// The file, inside the cache, whose lock keeps the packing of the cache
/// (`run/upkeep.rs`, which takes it in the hub too) apart from its
/// fetches, pushes and commits (see the module's doc).
pub const OBJECTS_LOCK: &str = "farm-objects.lock";

/// The git store of one remote.
pub struct GitStore {
    remote: String,
    cache: Repo,
    state: Mutex<State>,
    say: Arc<dyn Fn(&str) + Send + Sync>,
}

impl std::fmt::Debug for GitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitStore")
            .field("remote", &self.remote)
            .field("cache", &self.cache.dir())
            .finish()
    }
}

#[derive(Default)]
struct State {
    /// The latest tip this store fetched or pushed: a hint, never proof.
    tip: Option<Tip>,
    /// Blob contents by id (a blob never changes).
    blobs: HashMap<String, Vec<u8>>,
    /// When this host first saw each record, by blob id.
    seen: HashMap<String, Sighting>,
    /// When this host last listed the claims, if ever (so a record first
    /// seen later is one it saw appear).
    looked: Option<SystemTime>,
    /// Line files to take out with the publish of a task's work (task →
    /// name, text, and the changes behind that land with it), and those a
    /// publish took out.
    leaving: HashMap<String, (String, Vec<u8>, Vec<Landing>)>,
    left: std::collections::HashSet<String>,
}

/// One commit of the claims branch: its claim files by task name.
#[derive(Clone, Debug, Default)]
struct Tip {
    /// `None` while the branch does not exist.
    commit: Option<String>,
    files: BTreeMap<String, String>,
}

/// What a holder keeps: the blob of its record as last pushed, and whether
/// the claim was already given back by a [`GitStore::publish`].
#[derive(Debug)]
pub(crate) struct GitGuard {
    blob: Mutex<String>,
    released: AtomicBool,
}

#[derive(Clone, Copy)]
enum Change<'a> {
    Put(&'a str, &'a [u8]),
    Remove(&'a str),
    /// Several changes in one commit.
    Many(&'a [Change<'a>]),
}

/// The outcome of one compare-and-swap push.
enum Wrote {
    /// The branch moved to our commit; the new tip.
    Landed(Tip),
    /// The branch had moved on: fetch and decide again. The tip that
    /// was tried.
    Moved(Tip),
}

impl GitStore {
    /// The store of the hub at `remote` (a URL or a path), with its cache
    /// repository at `cache` (created if need be).
    pub fn open(remote: &str, cache: &Path) -> Result<GitStore, StoreError> {
        if !cache.join("HEAD").is_file() {
            make_cache(cache)?;
        }
        let (seen, looked) = load_seen(&cache.join(SEEN_FILE));
        Ok(GitStore {
            remote: remote.to_owned(),
            cache: Repo::new(cache),
            state: Mutex::new(State {
                seen,
                looked,
                ..State::default()
            }),
            say: Arc::new(|_| {}),
        })
    }

    /// Where retries are told about (the remote not answering).
    pub fn on_retry(mut self, say: impl Fn(&str) + Send + Sync + 'static) -> GitStore {
        self.say = Arc::new(say);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The claims tip: fetched when `fresh` or when none is known yet.
    fn tip(&self, fresh: bool) -> Result<Tip, StoreError> {
        if !fresh && let Some(tip) = self.state().tip.clone() {
            return Ok(tip);
        }
        let say = |l: &str| (self.say)(l);
        let known = self.state().tip.as_ref().and_then(|t| t.commit.clone());
        let commit = patiently("fetching the claims", &say, || {
            let _objects = self.hold_objects();
            self.cache.fetch_tip(&self.remote, REF, known.as_deref())
        })?;
        let tip = self.read_tip(commit)?;
        self.state().tip = Some(tip.clone());
        Ok(tip)
    }

    fn read_tip(&self, commit: Option<String>) -> Result<Tip, StoreError> {
        let Some(commit) = commit else {
            return Ok(Tip::default());
        };
        let out = self
            .cache
            .run(["ls-tree", "-z", &commit, "--", &format!("{DIR}/")])?;
        let mut files = BTreeMap::new();
        for entry in out.split('\0').filter(|e| !e.is_empty()) {
            // `<mode> blob <oid>\t<path>`
            let Some((meta, path)) = entry.split_once('\t') else {
                continue;
            };
            let mut meta = meta.split(' ');
            let (Some(_mode), Some("blob"), Some(oid)) = (meta.next(), meta.next(), meta.next())
            else {
                continue;
            };
            if let Some(name) = path
                .strip_prefix(&format!("{DIR}/"))
                .and_then(|f| f.strip_suffix(".txt"))
                .filter(|n| !n.contains('/'))
            {
                files.insert(name.to_owned(), oid.to_owned());
            }
        }
        Ok(Tip {
            commit: Some(commit),
            files,
        })
    }

    /// The contents of these blobs, read once each.
    fn contents(&self, oids: &[&String]) -> Result<HashMap<String, Vec<u8>>, StoreError> {
        let missing: Vec<&String> = {
            let state = self.state();
            oids.iter()
                .filter(|o| !state.blobs.contains_key(o.as_str()))
                .copied()
                .collect()
        };
        if !missing.is_empty() {
            let input: String = missing.iter().map(|o| format!("{o}\n")).collect();
            let out = self
                .cache
                .run_input(["cat-file", "--batch"], &[], input.as_bytes())?;
            let read = parse_batch(&out);
            self.state().blobs.extend(read);
        }
        let state = self.state();
        Ok(oids
            .iter()
            .filter_map(|o| Some(((*o).clone(), state.blobs.get(o.as_str())?.clone())))
            .collect())
    }

    /// The listing of one claim file of `tip`.
    fn listed(&self, name: &str, oid: &String) -> Result<Listed, StoreError> {
        Ok(self.listed_all(&[(name, oid)])?.remove(0))
    }

    /// Listings of claim files, with when this host first saw each record.
    fn listed_all(&self, files: &[(&str, &String)]) -> Result<Vec<Listed>, StoreError> {
        let oids: Vec<&String> = files.iter().map(|(_, o)| *o).collect();
        let contents = self.contents(&oids)?;
        let now = SystemTime::now();
        let mut added = false;
        let mut state = self.state();
        let out = files
            .iter()
            .map(|(name, oid)| {
                let after = state.looked;
                let seen = *state.seen.entry((*oid).clone()).or_insert_with(|| {
                    added = true;
                    Sighting { at: now, after }
                });
                let record = match contents.get(*oid) {
                    Some(bytes) => record_of(name, bytes),
                    None => Err(Corrupt(format!("blob {oid} is missing"))),
                };
                Listed {
                    name: (*name).to_owned(),
                    heartbeat: record.as_ref().map_or(seen.at, |c| c.heartbeat_at),
                    record,
                    modified: seen.at,
                    seen: Some(seen),
                    identity: identity(oid),
                }
            })
            .collect();
        if added {
            save_seen(&self.cache.dir().join(SEEN_FILE), &state);
        }
        drop(state);
        Ok(out)
    }

    /// A commit of `change` on top of `base`, in the cache; its id and the
    /// new tip it makes.
    fn commit(&self, base: &Tip, change: Change<'_>, message: &str) -> Result<Tip, StoreError> {
        // Shared, as a push holds it: an upkeep packing the cache's loose
        // objects (and deleting them) between `hash-object` and `mktree`
        // left mktree without the blob it names ("object … is
        // unavailable": a git process does not look for packs made after
        // it started).
        let _objects = self.hold_objects();
        let mut files = base.files.clone();
        self.apply(&mut files, change)?;
        let mktree = |listing: String| -> Result<String, StoreError> {
            let out = self
                .cache
                .run_input(["mktree", "-z"], &[], listing.as_bytes())?;
            Ok(String::from_utf8_lossy(&out).trim().to_owned())
        };
        let root = if files.is_empty() {
            mktree(String::new())?
        } else {
            let sub = mktree(
                files
                    .iter()
                    .map(|(name, oid)| format!("100644 blob {oid}\t{name}.txt\0"))
                    .collect(),
            )?;
            mktree(format!("040000 tree {sub}\t{DIR}\0"))?
        };
        // A random operation id: no two pushes are ever the same commit.
        let message = format!("{message}\n\nfarm-op: {}\n", Nonce::random());
        let mut args = vec!["commit-tree".to_owned(), root];
        if let Some(parent) = &base.commit {
            args.extend(["-p".to_owned(), parent.clone()]);
        }
        let who = format!("farm@{}", Here::current().host);
        let env = [
            ("GIT_AUTHOR_NAME", "farm"),
            ("GIT_AUTHOR_EMAIL", who.as_str()),
            ("GIT_COMMITTER_NAME", "farm"),
            ("GIT_COMMITTER_EMAIL", who.as_str()),
        ];
        args.extend(["-F".to_owned(), "-".to_owned()]);
        let out = self.cache.run_input(&args, &env, message.as_bytes())?;
        Ok(Tip {
            commit: Some(String::from_utf8_lossy(&out).trim().to_owned()),
            files,
        })
    }

    /// Make `change` to `files` (name → blob id), writing its blobs.
    fn apply(
        &self,
        files: &mut BTreeMap<String, String>,
        change: Change<'_>,
    ) -> Result<(), StoreError> {
        match change {
            Change::Put(name, bytes) => {
                let oid = self
                    .cache
                    .run_input(["hash-object", "-w", "--stdin"], &[], bytes)?;
                let oid = String::from_utf8_lossy(&oid).trim().to_owned();
                self.state().blobs.insert(oid.clone(), bytes.to_vec());
                files.insert(name.to_owned(), oid);
            }
            Change::Remove(name) => {
                files.remove(name);
            }
            Change::Many(changes) => {
                for c in changes {
                    self.apply(files, *c)?;
                }
            }
        }
        Ok(())
    }

    /// Commit `change` on `base` and push it as a fast-forward.
    fn write(&self, base: &Tip, change: Change<'_>, message: &str) -> Result<Wrote, StoreError> {
        let new = self.commit(base, change, message)?;
        let commit = new.commit.clone().expect("a commit was made");
        let spec = [format!("{commit}:{REF}")];
        let say = |l: &str| (self.say)(l);
        let updates = match patiently("pushing a claim", &say, || {
            let _objects = self.hold_objects();
            self.cache.push_refs(&self.remote, &spec, false)
        }) {
            Ok(updates) => updates,
            // The cache lacked a commit of the claims' history as the push
            // walked it ("Could not read <oid>; could not parse commit
            // <oid>"): a fetch was filling the cache as the push walked it
            // (see the module's doc); a fetch of this farm now shows what it
            // brought all at once, but not an older farm's on the same
            // state dir. Forget the tip, so that
            // the next fetch names nothing it has and brings the history
            // whole, and build on that, as for a branch that moved.
            Err(e)
                if e.said.contains("Could not read")
                    || e.said.contains("could not parse commit") =>
            {
                say(&format!(
                    "pushing a claim: the claims cache lacks an object ({}); fetching the claims whole",
                    e.said
                ));
                self.state().tip = None;
                return Ok(Wrote::Moved(new));
            }
            Err(e) => return Err(e.into()),
        };
        let Some(update) = updates.first() else {
            return Err(StoreError::Refused(
                "no report for the claims branch".into(),
            ));
        };
        if !update.rejected() {
            // Moved to our commit, or (after a retried push) already there:
            // the commit is ours alone either way.
            self.state().tip = Some(new.clone());
            return Ok(Wrote::Landed(new));
        }
        if update.moved() {
            return Ok(Wrote::Moved(new));
        }
        Err(StoreError::Refused(update.summary.clone()))
    }

    /// Did a push of `commit` land after all (its connection broke)? True
    /// when `tip` descends from it.
    fn landed(&self, commit: &str, tip: &Tip) -> Result<bool, StoreError> {
        let Some(tip) = &tip.commit else {
            return Ok(false);
        };
        Ok(self
            .cache
            .check(["merge-base", "--is-ancestor", commit, tip])?)
    }

    /// Did `mine`, a commit of ours reported rejected, land after all,
    /// with `task`'s record as it left it still on the (fresh) tip?
    fn holds_landed(&self, mine: &Tip, task: &str) -> Result<bool, StoreError> {
        let tip = self.tip(false)?;
        Ok(mine.files.get(task) == tip.files.get(task)
            && self.landed(mine.commit.as_deref().unwrap_or_default(), &tip)?)
    }

    fn guard(held: &Held) -> Result<&GitGuard, StoreError> {
        match &held.guard {
            Guard::Git(g) => Ok(g),
            Guard::Fs(_) => Err(StoreError::Refused(
                "a claim of the fs store given to the git store".into(),
            )),
        }
    }

    /// The tip, checked to still hold `held`'s record; `Lost` otherwise.
    fn own_tip(&self, held: &Held, fresh: &mut bool) -> Result<Option<Tip>, StoreError> {
        let guard = Self::guard(held)?;
        let task = &held.claim.task;
        if guard.released.load(Ordering::SeqCst) {
            return Err(lost(task, "it was already released"));
        }
        let tip = self.tip(*fresh)?;
        let ours = guard.blob.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if tip.files.get(task.as_str()) == Some(&ours) {
            return Ok(Some(tip));
        }
        if !*fresh {
            *fresh = true;
            return Ok(None);
        }
        Err(lost(task, "it was released, reaped or taken over"))
    }

    /// Make `change` to `held`'s own record by compare-and-swap, for as long
    /// as the tip still holds that record; the tip it made.
    fn change_own(
        &self,
        held: &Held,
        change: Change<'_>,
        message: &str,
    ) -> Result<Tip, StoreError> {
        let mut fresh = false;
        // Our last commit pushed and reported rejected: a retried push whose
        // first try landed unseen reads as rejected once others built on it
        // (as in `try_claim`), and the tip then holds our new record.
        let mut tried: Option<Tip> = None;
        for round in 0..ROUNDS {
            let tip = match self.own_tip(held, &mut fresh) {
                Ok(Some(tip)) => tip,
                Ok(None) => continue,
                Err(lost) => match tried {
                    Some(mine) if self.holds_landed(&mine, held.claim.task.as_str())? => {
                        return Ok(mine);
                    }
                    _ => return Err(lost),
                },
            };
            match self.write(&tip, change, message)? {
                Wrote::Landed(new) => return Ok(new),
                Wrote::Moved(attempt) => {
                    tried = Some(attempt);
                    fresh = true;
                    back_off(round);
                }
            }
        }
        Err(StoreError::Busy {
            task: held.claim.task.clone(),
        })
    }

    /// The lock on the cache's objects, shared (see the module's doc),
    /// until the file is dropped: no upkeep packs the cache meanwhile.
    /// Best effort: without the file (a state dir farm cannot write), git
    /// goes on unguarded.
    fn hold_objects(&self) -> Option<std::fs::File> {
        let path = self.cache.dir().join(OBJECTS_LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .ok()?;
        file.lock_shared().is_ok().then_some(file)
    }

    /// Give the objects of the cache to `repo`, which pushes commits made here.
    fn share_objects(&self, repo: &Repo) -> Result<(), StoreError> {
        let git_dir = PathBuf::from(repo.run(["rev-parse", "--absolute-git-dir"])?);
        let file = git_dir.join("objects/info/alternates");
        let ours = std::fs::canonicalize(self.cache.dir().join("objects"))
            .map_err(StoreError::io("read", self.cache.dir()))?;
        let listed = std::fs::read_to_string(&file).unwrap_or_default();
        if listed.lines().any(|l| Path::new(l) == ours) {
            return Ok(());
        }
        let text = format!("{listed}{}\n", ours.display());
        std::fs::create_dir_all(git_dir.join("objects/info"))
            .and_then(|()| std::fs::write(&file, text))
            .map_err(StoreError::io("write", &file))
    }
}

fn lost(task: &TaskId, why: &str) -> StoreError {
    StoreError::Lost {
        task: task.clone(),
        why: why.to_owned(),
    }
}

/// A short pause after a lost compare-and-swap, growing with the rounds.
fn back_off(round: u32) {
    std::thread::sleep(jitter(Duration::from_millis(2 << round.min(8))));
}

/// What a compare-and-swap of the line decides on a tip.
enum Swap<'a> {
    Write(Change<'a>),
    /// Nothing to write: the answer.
    Done(bool),
}

impl GitStore {
    /// Change the line by compare-and-swap, as `decide` says on each tip
    /// (a fresh one after the first).
    fn swap<'a>(
        &self,
        message: &str,
        decide: impl Fn(&Tip) -> Result<Swap<'a>, StoreError>,
    ) -> Result<bool, StoreError> {
        // With no tip seen yet, the first look fetches one: it answers.
        // (A tip another thread keeps meanwhile was fetched since, too.)
        let mut fresh = self.state().tip.is_none();
        for round in 0..ROUNDS {
            let tip = self.tip(fresh)?;
            let change = match decide(&tip)? {
                Swap::Write(change) => change,
                // (Only a fresh tip answers: the last one seen may be old.)
                Swap::Done(answer) if fresh => return Ok(answer),
                Swap::Done(_) => {
                    fresh = true;
                    continue;
                }
            };
            match self.write(&tip, change, message)? {
                Wrote::Landed(_) => return Ok(true),
                Wrote::Moved(_) => {
                    fresh = true;
                    back_off(round);
                }
            }
        }
        Err(StoreError::Refused(
            "the claims branch kept moving; try again".into(),
        ))
    }

    /// Does `tip` hold `name` with exactly `text` (a write of ours that
    /// landed although its push was reported rejected)?
    fn holds(&self, tip: &Tip, name: &str, text: &[u8]) -> Result<bool, StoreError> {
        let Some(oid) = tip.files.get(name) else {
            return Ok(false);
        };
        Ok(self.contents(&[oid])?.get(oid).map(Vec::as_slice) == Some(text))
    }

    /// Whether each change in `with` is on `tip` as it was read: its file
    /// as seen, and its claim held with the nonce it names.
    fn still_there(&self, tip: &Tip, with: &[Landing]) -> Result<bool, StoreError> {
        for l in with {
            if !self.holds(tip, &l.name, &l.seen)? {
                return Ok(false);
            }
            let Some(oid) = tip.files.get(&l.task) else {
                return Ok(false);
            };
            let held = self.contents(&[oid])?.get(oid).is_some_and(|text| {
                record_of(&l.task, text).is_ok_and(|c| c.nonce.to_string() == l.claim)
            });
            if !held {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Whether `tip` holds a file of the line at a place after `name`'s. (Two
/// farms once each took the first place: one chose it, read an empty line,
/// and wrote its file after the other's, of a later place, came in.)
fn behind_another(tip: &Tip, name: &str) -> bool {
    let Some(mine) = line::place(name) else {
        return false;
    };
    tip.files
        .keys()
        .filter_map(|n| line::place(n))
        .any(|there| there > mine)
}

impl LineStore for GitStore {
    fn read_line(&self, fresh: bool) -> Result<Snapshot, StoreError> {
        let tip = self.tip(fresh)?;
        let named: Vec<(&String, &String)> = tip
            .files
            .iter()
            .filter(|(n, _)| line::is_line_file(n) || !n.starts_with('.'))
            .collect();
        let oids: Vec<&String> = named.iter().map(|(_, o)| *o).collect();
        let contents = self.contents(&oids)?;
        let mut snapshot = Snapshot::default();
        for (name, oid) in named {
            let Some(text) = contents.get(oid) else {
                continue;
            };
            if line::is_line_file(name) {
                snapshot.files.push((name.clone(), text.clone()));
            } else if let Ok(claim) = record_of(name, text) {
                snapshot
                    .holders
                    .insert(name.clone(), claim.nonce.to_string());
            }
        }
        Ok(snapshot)
    }

    fn read_line_at(&self, tip: &str) -> Result<Snapshot, StoreError> {
        // The same commit holds the same files: one fetch for the farm's
        // changes in line that each saw the claims move (and none after a
        // write of this farm's own).
        let known = self.state().tip.as_ref().and_then(|t| t.commit.clone());
        self.read_line(known.as_deref() != Some(tip))
    }

    fn add_to_line(&self, name: &str, text: &[u8]) -> Result<bool, StoreError> {
        let message = format!("farm: queue {name}");
        self.swap(&message, |tip| {
            Ok(if self.holds(tip, name, text)? {
                Swap::Done(true)
            } else if tip.files.contains_key(name) || behind_another(tip, name) {
                Swap::Done(false)
            } else {
                Swap::Write(Change::Put(name, text))
            })
        })
    }

    fn update_in_line(&self, name: &str, seen: &[u8], text: &[u8]) -> Result<bool, StoreError> {
        let message = format!("farm: update {name}");
        self.swap(&message, |tip| {
            Ok(if self.holds(tip, name, text)? {
                Swap::Done(true)
            } else if self.holds(tip, name, seen)? {
                Swap::Write(Change::Put(name, text))
            } else {
                Swap::Done(false)
            })
        })
    }

    fn leave_on_publish(&self, task: &str, name: &str, seen: &[u8], with: Vec<Landing>) {
        self.state()
            .leaving
            .insert(task.to_owned(), (name.to_owned(), seen.to_vec(), with));
    }

    fn left_on_publish(&self, name: &str) -> bool {
        self.state().left.remove(name)
    }

    fn remove_from_line(&self, name: &str, seen: &[u8]) -> Result<bool, StoreError> {
        let message = format!("farm: unqueue {name}");
        self.swap(&message, |tip| {
            Ok(if self.holds(tip, name, seen)? {
                Swap::Write(Change::Remove(name))
            } else {
                Swap::Done(!tip.files.contains_key(name))
            })
        })
    }
}

impl ClaimStore for GitStore {
    fn kind(&self) -> &'static str {
        "git"
    }

    fn location(&self) -> String {
        format!("{} (branch {BRANCH})", self.remote)
    }

    fn claim_location(&self, task: &TaskId) -> String {
        format!("{}:{BRANCH}:{DIR}/{task}.txt", self.remote)
    }

    fn line(&self) -> Option<&dyn LineStore> {
        Some(self)
    }

    fn notices(&self, fresh: bool) -> Result<Vec<Notice>, StoreError> {
        let tip = self.tip(fresh)?;
        let named: Vec<(&String, &String)> = tip
            .files
            .iter()
            .filter(|(n, _)| notice::is_notice(n))
            .collect();
        if named.is_empty() {
            return Ok(Vec::new());
        }
        let oids: Vec<&String> = named.iter().map(|(_, o)| *o).collect();
        let contents = self.contents(&oids)?;
        Ok(named
            .into_iter()
            .filter_map(|(n, o)| Notice::parse(n, contents.get(o)?))
            .collect())
    }

    fn post_notice(&self, notice: &Notice) -> Result<(), StoreError> {
        let bytes = notice.to_toml().into_bytes();
        let name = notice.name();
        let message = format!(
            "farm: {} {}, asked by {}",
            notice.kind.as_str(),
            notice.target,
            notice.by
        );
        for round in 0..ROUNDS {
            let tip = self.tip(round > 0)?;
            match self.write(&tip, Change::Put(&name, &bytes), &message)? {
                Wrote::Landed(_) => return Ok(()),
                Wrote::Moved(_) => back_off(round),
            }
        }
        Err(StoreError::Refused(format!(
            "the claims branch kept moving; try farm {} again",
            notice.kind.as_str()
        )))
    }

    fn withdraw_notice(&self, kind: Kind, target: &Target) -> Result<Option<Notice>, StoreError> {
        let name = notice::name_of(kind, target);
        let message = format!("farm: {} of {target} taken away", kind.as_str());
        for round in 0..ROUNDS {
            let tip = self.tip(true)?;
            let Some(oid) = tip.files.get(&name) else {
                return Ok(None);
            };
            let was = self
                .contents(&[oid])?
                .get(oid)
                .and_then(|b| Notice::parse(&name, b));
            match self.write(&tip, Change::Remove(&name), &message)? {
                Wrote::Landed(_) => {
                    return Ok(Some(was.unwrap_or_else(|| Notice {
                        by: "someone".into(),
                        at: SystemTime::UNIX_EPOCH,
                        ..Notice::new(kind, target.clone(), "", false)
                    })));
                }
                Wrote::Moved(_) => back_off(round),
            }
        }
        Err(StoreError::Refused(
            "the claims branch kept moving; try farm resume again".into(),
        ))
    }

    fn protocol(&self) -> Result<Option<u32>, StoreError> {
        let tip = self.tip(true)?;
        let Some(oid) = tip.files.get(protocol::NAME) else {
            return Ok(None);
        };
        Ok(self
            .contents(&[oid])?
            .get(oid)
            .and_then(|b| protocol::parse(b)))
    }

    fn raise_protocol(&self, version: u32) -> Result<u32, StoreError> {
        let text = protocol::text(version, &protocol::writer()).into_bytes();
        let message = format!("farm: protocol {version}");
        let now = std::cell::Cell::new(version);
        self.swap(&message, |tip| {
            let there = match tip.files.get(protocol::NAME) {
                Some(oid) => self
                    .contents(&[oid])?
                    .get(oid)
                    .and_then(|b| protocol::parse(b)),
                None => None,
            };
            Ok(match there {
                Some(v) if v >= version => {
                    now.set(v);
                    Swap::Done(true)
                }
                _ => Swap::Write(Change::Put(protocol::NAME, &text)),
            })
        })?;
        Ok(now.get())
    }

    fn side_files(&self, prefix: &str, fresh: bool) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        debug_assert!(prefix.starts_with('.'), "side files are dot names");
        let tip = self.tip(fresh)?;
        let named: Vec<(&String, &String)> = tip
            .files
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .collect();
        if named.is_empty() {
            return Ok(Vec::new());
        }
        let oids: Vec<&String> = named.iter().map(|(_, o)| *o).collect();
        let contents = self.contents(&oids)?;
        Ok(named
            .into_iter()
            .filter_map(|(n, o)| Some((n.clone(), contents.get(o)?.clone())))
            .filter(|(_, b)| b.len() as u64 <= super::MAX_SIDE_BYTES)
            .collect())
    }

    /// One commit adding the files absent from the tip it is built on: a
    /// compare-and-swap push, as for a claim, so exactly one creator of a
    /// name wins.
    fn create_side(
        &self,
        files: &[(String, Vec<u8>)],
        why: &str,
    ) -> Result<Vec<String>, StoreError> {
        for round in 0..ROUNDS {
            let tip = self.tip(round > 0)?;
            let absent: Vec<&(String, Vec<u8>)> = files
                .iter()
                .filter(|(n, _)| !tip.files.contains_key(n))
                .collect();
            if absent.is_empty() {
                return Ok(Vec::new());
            }
            let changes: Vec<Change<'_>> = absent
                .iter()
                .map(|(n, b)| Change::Put(n.as_str(), b.as_slice()))
                .collect();
            match self.write(&tip, Change::Many(&changes), &format!("farm: {why}"))? {
                Wrote::Landed(_) => {
                    return Ok(absent.into_iter().map(|(n, _)| n.clone()).collect());
                }
                Wrote::Moved(_) => back_off(round),
            }
        }
        Err(StoreError::Refused(format!(
            "the claims branch kept moving; {why} not written, try again"
        )))
    }

    fn remove_side(&self, names: &[String], why: &str) -> Result<usize, StoreError> {
        for round in 0..ROUNDS {
            let tip = self.tip(true)?;
            let there: Vec<Change<'_>> = names
                .iter()
                .filter(|n| tip.files.contains_key(*n))
                .map(|n| Change::Remove(n.as_str()))
                .collect();
            if there.is_empty() {
                return Ok(0);
            }
            match self.write(&tip, Change::Many(&there), &format!("farm: {why}"))? {
                Wrote::Landed(_) => return Ok(there.len()),
                Wrote::Moved(_) => back_off(round),
            }
        }
        Err(StoreError::Refused(format!(
            "the claims branch kept moving; {why} not done, try again"
        )))
    }

    fn try_claim(&self, claim: Claim, _hold: bool) -> Result<Attempt, StoreError> {
        let name = claim.task.as_str().to_owned();
        let bytes = claim.to_toml().into_bytes();
        let message = format!("farm: claim `{name}` for {}", claim.who());
        let mut fresh = false;
        // Our last commit pushed and reported rejected: a retried push whose
        // first try landed unseen reads as rejected once others built on it.
        let mut tried: Option<Tip> = None;
        for round in 0..ROUNDS {
            let tip = self.tip(fresh)?;
            if let Some(oid) = tip.files.get(&name) {
                if !fresh {
                    fresh = true;
                    continue;
                }
                if let Some(mine) = &tried
                    && mine.files.get(&name) == Some(oid)
                    && self.landed(mine.commit.as_deref().unwrap_or_default(), &tip)?
                {
                    return Ok(Attempt::Won(held(claim, oid)));
                }
                return Ok(Attempt::Lost(Box::new(self.listed(&name, oid)?)));
            }
            match self.write(&tip, Change::Put(&name, &bytes), &message)? {
                Wrote::Landed(new) => {
                    let oid = new.files[&name].clone();
                    return Ok(Attempt::Won(held(claim, &oid)));
                }
                Wrote::Moved(attempt) => {
                    tried = Some(attempt);
                    fresh = true;
                    back_off(round);
                }
            }
        }
        Err(StoreError::Busy { task: claim.task })
    }

    fn heartbeat(&self, held: &Held, now: SystemTime) -> Result<(), StoreError> {
        let mut claim = held.claim.clone();
        claim.heartbeat_at = now;
        let bytes = claim.to_toml().into_bytes();
        let task = held.claim.task.as_str();
        let message = format!("farm: heartbeat `{task}` of {}", claim.who());
        let new = self.change_own(held, Change::Put(task, &bytes), &message)?;
        *Self::guard(held)?
            .blob
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = new.files[task].clone();
        Ok(())
    }

    fn release_held(&self, held: Held) -> Result<(), StoreError> {
        if Self::guard(&held)?.released.load(Ordering::SeqCst) {
            return Ok(());
        }
        let task = held.claim.task.as_str();
        let message = format!("farm: release `{task}` by {}", held.claim.who());
        self.change_own(&held, Change::Remove(task), &message)?;
        Self::guard(&held)?.released.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn release(&self, task: &TaskId, how: Release<'_>) -> Result<Released, StoreError> {
        let changed = || StoreError::Changed { task: task.clone() };
        let mut first: Option<String> = None;
        for round in 0..ROUNDS {
            let tip = self.tip(true)?;
            let Some(oid) = tip.files.get(task.as_str()) else {
                return Err(StoreError::NotFound { task: task.clone() });
            };
            let message = match how {
                Release::Own(nonce) => {
                    // Only the record that was checked is released.
                    if first.get_or_insert_with(|| oid.clone()) != oid {
                        return Err(changed());
                    }
                    let claim = self
                        .listed(task.as_str(), oid)?
                        .record
                        .map_err(|_| changed())?;
                    if &claim.nonce != nonce {
                        return Err(changed());
                    }
                    if let Some(pid) = live_local_holder(&claim) {
                        return Err(StoreError::LiveHolder {
                            task: task.clone(),
                            pid,
                        });
                    }
                    format!("farm: release `{task}` by {}", claim.who())
                }
                Release::Force { by } => format!("farm: release `{task}` by force by {by}"),
            };
            match self.write(&tip, Change::Remove(task.as_str()), &message)? {
                Wrote::Landed(new) => {
                    return Ok(match how {
                        Release::Own(_) => Released::Removed,
                        Release::Force { .. } => Released::Tombstoned(tombstone(&new)),
                    });
                }
                Wrote::Moved(_) => back_off(round),
            }
        }
        Err(StoreError::Busy { task: task.clone() })
    }

    fn read(&self, task: &TaskId) -> Result<Option<Listed>, StoreError> {
        let tip = self.tip(true)?;
        tip.files
            .get(task.as_str())
            .map(|oid| self.listed(task.as_str(), oid))
            .transpose()
    }

    fn list(&self) -> Result<Vec<Listed>, StoreError> {
        let tip = self.tip(true)?;
        // Dot names are farm's own notices (`.stop`, `.pause`), not claims.
        let files: Vec<(&str, &String)> = tip
            .files
            .iter()
            .filter(|(n, _)| !n.starts_with('.'))
            .map(|(n, o)| (n.as_str(), o))
            .collect();
        let listed = self.listed_all(&files)?;
        // Forget sightings of records that are gone. The time of this look
        // is kept on disk only with a change of sightings (or the first
        // time): a later one would only narrow the span in which a record
        // is known to have appeared.
        let mut state = self.state();
        let before = state.seen.len();
        state
            .seen
            .retain(|oid, _| tip.files.values().any(|o| o == oid));
        let first = state.looked.is_none();
        state.looked = Some(SystemTime::now());
        if state.seen.len() != before || first {
            save_seen(&self.cache.dir().join(SEEN_FILE), &state);
        }
        Ok(listed)
    }

    fn reap(&self, entry: &Listed, judge: &Judge<'_>) -> Result<Reap, StoreError> {
        // The store's own proof of life: a holder on this host is checked
        // by its process, whatever probe the caller judged with.
        let own = Judge {
            here: judge.here,
            now: judge.now,
            stale_after: judge.stale_after,
            probe: &host::process_start,
        };
        for round in 0..ROUNDS {
            let tip = self.tip(true)?;
            let Some(oid) = tip.files.get(&entry.name) else {
                return Ok(Reap::Skipped("already gone".into()));
            };
            if identity(oid) != entry.identity {
                return Ok(Reap::Skipped("replaced since it was listed".into()));
            }
            let now = self.listed(&entry.name, oid)?;
            let verdict = now.judge(&own);
            if !verdict.reapable {
                return Ok(Reap::Skipped(verdict.reason));
            }
            let message = format!(
                "farm: reap `{}`: {}: {}\n\nby farm pid {} on {}",
                entry.name,
                verdict.state,
                verdict.reason,
                std::process::id(),
                Here::current().host
            );
            match self.write(&tip, Change::Remove(&entry.name), &message)? {
                Wrote::Landed(new) => {
                    return Ok(Reap::Reaped {
                        tombstone: tombstone(&new),
                        verdict,
                    });
                }
                Wrote::Moved(_) => back_off(round),
            }
        }
        Err(StoreError::Busy {
            task: TaskId::parse(&entry.name)
                .map_err(|_| StoreError::Refused(format!("`{}` is too busy", entry.name)))?,
        })
    }

    /// Push `refspecs` and the release of `held` in one atomic push, built on
    /// a claims tip that still holds `held`'s record: all of it lands, or
    /// none. A claims branch that moved meanwhile (other agents' claims) is
    /// fetched and the release rebuilt; the work's own branch having moved is
    /// the caller's to integrate.
    fn publish(
        &self,
        held: &Held,
        repo: &Repo,
        remote: &str,
        refspecs: &[String],
        hold: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<Published, StoreError> {
        self.share_objects(repo)?;
        let task = held.claim.task.as_str();
        let message = format!(
            "farm: release `{task}` by {}, work published",
            held.claim.who()
        );
        let mut fresh = false;
        // A line file that goes with the release (see `leave_on_publish`).
        let leaving = self.state().leaving.remove(task);
        // Our last release pushed and reported rejected (see `change_own`):
        // it may have landed unseen, and the work with it — or not: the hub
        // commits the refs of an atomic push one after another, so a
        // receive-pack killed between them lands the release alone.
        let mut tried: Option<Tip> = None;
        // Since when a ref lock on the hub has refused every round.
        let mut locked: Option<std::time::Instant> = None;
        for round in 0..ROUNDS {
            let tip = match self.own_tip(held, &mut fresh) {
                Ok(Some(tip)) => tip,
                Ok(None) => continue,
                Err(StoreError::Lost { why, .. }) => {
                    if let Some(mine) = tried.take()
                        && self.holds_landed(&mine, task)?
                    {
                        Self::guard(held)?.released.store(true, Ordering::SeqCst);
                        return Ok(match work_missing(repo, remote, refspecs)? {
                            None => Published::Pushed,
                            Some(missing) => Published::Lost(format!(
                                "its release landed on the hub but {missing} did not take \
                                 the work: the push was cut between its refs"
                            )),
                        });
                    }
                    return Ok(Published::Lost(why));
                }
                Err(e) => return Err(e),
            };
            let leave = match &leaving {
                Some((name, text, _)) if self.holds(&tip, name, text)? => Some(name.as_str()),
                _ => None,
            };
            let with = leaving
                .as_ref()
                .map_or(&[][..], |(_, _, with)| with.as_slice());
            if !self.still_there(&tip, with)? {
                // A change to land with this one moved, left or lost its
                // claim since it was read: not this push (the caller builds
                // again from what is there now).
                return Ok(Published::Rejected(Vec::new()));
            }
            let mut changes = vec![Change::Remove(task), Change::Remove(leave.unwrap_or(task))];
            changes.extend(
                with.iter()
                    .map(|l| Change::Put(l.name.as_str(), l.text.as_slice())),
            );
            let release = self.commit(&tip, Change::Many(&changes), &message)?;
            let mut specs = refspecs.to_vec();
            specs.push(format!(
                "{}:{REF}",
                release.commit.as_deref().expect("a commit was made")
            ));
            let say = |l: &str| (self.say)(l);
            let updates = match patiently("publishing work", &say, || {
                let _objects = self.hold_objects();
                repo.push_refs_holding(remote, &specs, true, hold)
            }) {
                Ok(updates) => updates,
                // Seen once after the hub came back from an outage ("could
                // not parse commit" for a claims commit: see `write`): try
                // again on a freshly fetched tip before calling it an error.
                Err(e) if !e.transient && round + 1 < 3 => {
                    say(&format!(
                        "publishing work failed ({}); fetching the claims and trying again",
                        e.said
                    ));
                    fresh = true;
                    back_off(round);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if updates.iter().all(|u| !u.rejected()) {
                Self::guard(held)?.released.store(true, Ordering::SeqCst);
                let mut state = self.state();
                state.tip = Some(release);
                state.left.extend(leave.map(str::to_owned));
                return Ok(Published::Pushed);
            }
            // The work's branch moved: the caller integrates again. The
            // claims branch moved, or the remote's compare-and-swap failed
            // without saying for which ref: fetch the claims and push again
            // (if it was the work's branch, the next push says so).
            let work_moved: Vec<_> = updates
                .iter()
                .filter(|u| u.to != REF && u.moved() && !u.raced())
                .cloned()
                .collect();
            if !work_moved.is_empty() {
                return Ok(Published::Rejected(work_moved));
            }
            match updates.iter().find_map(|u| u.lock_file().map(|f| (u, f))) {
                Some((u, file)) => {
                    if locked.get_or_insert_with(std::time::Instant::now).elapsed() >= STALE_LOCK {
                        return Err(stale_lock(&u.to, file));
                    }
                }
                None => locked = None,
            }
            if !updates.iter().any(|u| u.moved()) {
                let why: Vec<String> = updates
                    .iter()
                    .filter(|u| u.rejected())
                    .map(|u| format!("{}: {}", u.to, u.summary))
                    .collect();
                return Err(StoreError::Refused(why.join("; ")));
            }
            tried = Some(release);
            fresh = true;
            back_off(round);
        }
        Err(StoreError::Busy {
            task: held.claim.task.clone(),
        })
    }
}

/// How long a ref lock on the hub must refuse every push of ours before it
/// is called stale: a live push holds one for milliseconds and git waits
/// 100 ms for it, but on a busy claims branch some live push holds it at
/// many a moment — 2 s of refusals in a row was seen under load (chaos,
/// over ssh) with no lock left behind.
pub(crate) const STALE_LOCK: Duration = Duration::from_secs(10);

/// A ref lock that stays on the hub refuses every push of its ref; a push
/// cut by a kill leaves one (git never removes another's lock).
pub(crate) fn stale_lock(name: &str, file: &str) -> StoreError {
    StoreError::Refused(format!(
        "`{name}` is locked on the hub by `{file}`, left by a push that was cut off \
         (or one still running); if no git is running on the hub, remove it: rm '{file}'"
    ))
}

/// The first ref of `refspecs` (`src:dst`) that `remote` does not hold the
/// work of — its `dst` neither `src` nor a descendant — said with the
/// commits compared, or `None` when all of them landed.
fn work_missing(
    repo: &Repo,
    remote: &str,
    refspecs: &[String],
) -> Result<Option<String>, StoreError> {
    let short = |c: &str| c[..12.min(c.len())].to_owned();
    for spec in refspecs {
        let Some((src, dst)) = spec.split_once(':') else {
            continue;
        };
        let Some(work) = repo.rev(src)? else {
            continue;
        };
        let listed = repo.run(["ls-remote", remote, dst])?;
        let Some(there) = listed.split_whitespace().next() else {
            return Ok(Some(format!("`{dst}`, which the hub does not list,")));
        };
        if there == work {
            continue;
        }
        if !repo.check(["cat-file", "-e", &format!("{there}^{{commit}}")])? {
            repo.run(["fetch", "--quiet", "--no-tags", remote, dst])?;
        }
        if !repo.check(["merge-base", "--is-ancestor", &work, there])? {
            // (The commits are named for the post-mortem of a cut that
            // looks wrong: a redone task in `runs_ride_out_a_hub_outage`.)
            return Ok(Some(format!(
                "`{dst}` (at {}, without {} of {src})",
                short(there),
                short(&work)
            )));
        }
    }
    Ok(None)
}

fn held(claim: Claim, oid: &str) -> Held {
    Held {
        claim,
        guard: Guard::Git(Box::new(GitGuard {
            blob: Mutex::new(oid.to_owned()),
            released: AtomicBool::new(false),
        })),
    }
}

/// The pid of the live process on this host that holds `claim`, if any.
fn live_local_holder(claim: &Claim) -> Option<u32> {
    let here = Here::current();
    let holder = claim.holder?;
    (claim.host == here.host
        && claim.boot_id == here.boot_id
        && host::process_start(holder.pid) == Some(holder.start))
    .then_some(holder.pid)
}

/// Where a taken claim can still be read: the commit that removed it.
fn tombstone(tip: &Tip) -> String {
    let commit = tip.commit.as_deref().unwrap_or_default();
    format!("{BRANCH}@{}", &commit[..12.min(commit.len())])
}

/// A record's identity: the leading bits of its blob id.
fn identity(oid: &str) -> u64 {
    u64::from_str_radix(&oid[..16.min(oid.len())], 16).unwrap_or(0)
}

/// Read `git cat-file --batch` output: `<oid> blob <size>\n<bytes>\n` each.
fn parse_batch(out: &[u8]) -> HashMap<String, Vec<u8>> {
    let mut blobs = HashMap::new();
    let mut rest = out;
    while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        rest = &rest[nl + 1..];
        let mut f = header.split(' ');
        let (Some(oid), Some(kind), Some(size)) = (f.next(), f.next(), f.next()) else {
            continue; // `<oid> missing`
        };
        let Ok(size) = size.parse::<usize>() else {
            break;
        };
        if rest.len() < size {
            break;
        }
        if kind == "blob" {
            blobs.insert(oid.to_owned(), rest[..size].to_vec());
        }
        rest = rest.get(size + 1..).unwrap_or_default();
    }
    blobs
}

/// The sightings kept in `path` — a line `<blob> <secs> [<after secs>]` a
/// record, and `looked <secs>` — and the last look; nothing when absent.
fn load_seen(path: &Path) -> (HashMap<String, Sighting>, Option<SystemTime>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let time = |s: &str| Some(UNIX_EPOCH + Duration::from_secs(s.parse().ok()?));
    let mut looked = None;
    let mut seen = HashMap::new();
    for line in text.lines() {
        let mut words = line.split(' ');
        let (Some(first), Some(at)) = (words.next(), words.next().and_then(time)) else {
            continue;
        };
        if first == "looked" {
            looked = Some(at);
            continue;
        }
        let after = words.next().and_then(time);
        seen.insert(first.to_owned(), Sighting { at, after });
    }
    (seen, looked)
}

/// Best effort, replaced whole: a lost note only makes a claim look younger.
/// Make the cache repository at `cache`: in a directory of its own beside it,
/// renamed into place once whole. Farms that start at once on a fresh state
/// dir each make one and the first rename wins (two `git init`s in one
/// directory collide on its `config.lock` and template files); a farm killed
/// halfway leaves no half-made repository where the next one looks.
fn make_cache(cache: &Path) -> Result<(), StoreError> {
    let parent = cache.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(StoreError::io("create", parent))?;
    const NEW: &str = ".claims.git.new-";
    crate::git::scratch::sweep_left(parent, |name| name.starts_with(NEW));
    let new = tempfile::Builder::new()
        .prefix(NEW)
        .tempdir_in(parent)
        .map_err(StoreError::io("create", parent))?;
    Repo::new(new.path()).run(["init", "--quiet", "--bare"])?;
    // A directory renames over an empty one, not over a whole repository:
    // that is another farm's, made meanwhile, and as good as this one.
    match std::fs::rename(new.path(), cache) {
        Ok(()) => Ok(()),
        Err(_) if cache.join("HEAD").is_file() => Ok(()),
        Err(e) => Err(StoreError::io("create", cache)(e)),
    }
}

fn save_seen(path: &Path, state: &State) {
    let secs = |at: &SystemTime| at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let mut text: String = state
        .seen
        .iter()
        .map(|(oid, seen)| match &seen.after {
            Some(after) => format!("{oid} {} {}\n", secs(&seen.at), secs(after)),
            None => format!("{oid} {}\n", secs(&seen.at)),
        })
        .collect();
    if let Some(looked) = &state.looked {
        text.push_str(&format!("looked {}\n", secs(looked)));
    }
    let tmp = path.with_extension(format!("{}.tmp", Nonce::random().short()));
    if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

impl From<GitError> for StoreError {
    fn from(e: GitError) -> StoreError {
        StoreError::Git(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_output_is_split_by_sizes() {
        let out = b"aaa blob 3\nx\ny\nbbb blob 0\n\nccc missing\nddd blob 2\nok\n";
        let blobs = parse_batch(out);
        assert_eq!(blobs["aaa"], b"x\ny");
        assert_eq!(blobs["bbb"], b"");
        assert_eq!(blobs["ddd"], b"ok");
        assert!(!blobs.contains_key("ccc"));
    }

    /// A farm killed inside `git init` of the store's cache leaves its
    /// half-made directory beside it: the next one made sweeps those older
    /// than an hour (a younger one may be another farm's, at work).
    #[test]
    fn a_cache_left_half_made_by_a_killed_farm_is_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let (old, young) = (
            tmp.path().join(".claims.git.new-old"),
            tmp.path().join(".claims.git.new-young"),
        );
        for dir in [&old, &young] {
            std::fs::create_dir_all(dir.join("objects")).unwrap();
        }
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(2 * 3600))
            .unwrap();
        make_cache(&tmp.path().join("claims.git")).unwrap();
        assert!(tmp.path().join("claims.git/HEAD").is_file());
        assert!(!old.exists(), "left by a killed farm: swept");
        assert!(young.exists(), "maybe another farm's at work: kept");
    }

    #[test]
    fn sightings_survive_a_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(SEEN_FILE);
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let after = Some(at - Duration::from_secs(5));
        let state = State {
            seen: HashMap::from([
                ("ab".repeat(20), Sighting { at, after: None }),
                ("cd".repeat(20), Sighting { at, after }),
            ]),
            looked: Some(at),
            ..State::default()
        };
        save_seen(&path, &state);
        assert_eq!(load_seen(&path), (state.seen, state.looked));
        assert_eq!(load_seen(&tmp.path().join("none")), (HashMap::new(), None));
    }
}
