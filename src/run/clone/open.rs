//! Opening an agent's clone: made on first use; on every later opening,
//! what a killed farm left is cleared before anything runs git there, and a
//! clone deleted or broken is set aside and made again (its readable
//! commits salvaged from the copy set aside, see [`super::rescue`]).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::config::own_config;
use super::git_procs::wait_for_git_left_in;
use super::lock::lock_clone;
use super::stale_locks::remove_stale_locks;
use super::{PrivateClone, session_record_of};
use crate::error::Error;
use crate::git::command::Repo;
use crate::git::hub::Hub;
use crate::git::retry::patiently;
use crate::git::workdir::{GIT_ONLY, Workdir, git_true};
use crate::output::Out;
use crate::run::session;

/// The clone's own settings: background gc in a clone only competes with
/// the agents for CPU.
const SETTINGS: [(&str, &str); 2] = [("maintenance.auto", "false"), ("gc.auto", "0")];

impl PrivateClone {
    /// The clone for agent `name` under `state`, made on first use; what an
    /// earlier run killed mid-session left in it is recovered first.
    pub fn prepare(
        state: &Path,
        hub: &Hub,
        name: &str,
        dir_name: &str,
        out: Out,
    ) -> Result<PrivateClone, Error> {
        let dir = state.join("clones").join(dir_name);
        // One loop per clone: two farm runs on this host with the same agent
        // names would otherwise reset each other's work away.
        let lock = lock_clone(&dir, name)?;
        let say = |l: &str| out.note(&format!("{name}: {l}"));
        let broken = clear_what_was_left(&dir, hub, &say)?;
        let repo = open_or_clone(&dir, hub, &say)?;
        if let Some(local) = &hub.local {
            borrow_objects(&dir, &local.git_dir)?;
        }
        own_config(&dir, hub, &SETTINGS)?;
        let mut work = Workdir::open(&dir).map_err(|e| {
            Error::failure(format!("cannot open the clone `{}`: {e}", dir.display()))
        })?;
        if identify(&repo, name)? {
            work = None;
        }
        let config = std::fs::read(dir.join(".git/config")).map_err(|e| {
            Error::failure(format!(
                "cannot read `{}`: {e}",
                dir.join(".git/config").display()
            ))
        })?;
        let mut clone = PrivateClone {
            raw: repo,
            config,
            hub_url: hub.url.clone(),
            work,
            clean: Cell::new(false),
            behind: Cell::new(false),
            tracked: Cell::new(false),
            swept: Cell::new(false),
            _lock: lock,
            name: name.to_owned(),
            out,
            rescued: Vec::new(),
        };
        clone.rescued = clone.recover(hub)?;
        if let Some(aside) = broken {
            let more = clone.salvage(hub, &aside)?;
            clone.rescued.extend(more);
        }
        Ok(clone)
    }
}

/// Clear what a killed farm left in the clone at `dir`, its flock held,
/// before anything runs git there (setting the clone's config takes
/// `config.lock`): rules 1 and 2 of [`PrivateClone::recover`], then the
/// config put back as farm keeps it. A clone the agent deleted or broke is
/// moved aside; where it went (`None`: nothing was).
fn clear_what_was_left(
    dir: &Path,
    hub: &Hub,
    say: &dyn Fn(&str),
) -> Result<Option<PathBuf>, Error> {
    if session::kill_leftover(&session_record_of(dir), dir) {
        say("killed what was left of a session an earlier farm was running here");
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_git_left_in(dir, say);
    remove_stale_locks(dir, say);
    // A clone the agent deleted or broke is moved aside and made again;
    // its readable commits are rescued from there once the new clone
    // can push them (see [`PrivateClone::salvage`]).
    // (A clone's borrowed objects are pointed at first: a clone whose
    // pointer was lost is not broken.)
    if let Some(local) = &hub.local
        && dir.join(".git/objects").is_dir()
    {
        let _ = borrow_objects(dir, &local.git_dir);
    }
    // The config first: git2 and git both read it, and what an agent
    // left there must neither redirect nor run anything from here on.
    if dir.join(".git/config").is_file() {
        own_config(dir, hub, &SETTINGS)?;
    }
    match usable(dir) {
        Ok(()) => Ok(None),
        Err(why) => Ok(Some(set_aside(dir, &why, say)?)),
    }
}

/// The clone at `dir`, cloned from the hub when there is none there.
fn open_or_clone(dir: &Path, hub: &Hub, say: &dyn Fn(&str)) -> Result<Repo, Error> {
    if dir.join(".git").is_dir() {
        return Ok(Repo::of_agent(dir));
    }
    std::fs::create_dir_all(dir.parent().unwrap_or(dir))
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    let settings = SETTINGS.map(|(k, v)| format!("{k}={v}"));
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    // A hub on this machine is cloned `--shared`: its objects are
    // borrowed (see [`borrow_objects`]), not copied — copying them
    // while a push is being received failed on the push's
    // quarantine directory vanishing mid-copy.
    let shared = hub.local.is_some();
    patiently("cloning the hub", say, || {
        let _ = std::fs::remove_dir_all(dir);
        Repo::clone_from(&hub.url, dir, &hub.branch, shared, &settings)
    })
    .map(|made| Repo::of_agent(made.dir()))
    .map_err(Error::from)
}

/// Give farm's own commits in `repo` an identity where none is configured
/// (asked of git itself: the user's files and environment count), as agent
/// `name`. Whether a setting leaves the clone to the git command: the same
/// process tells what git2 cannot see, such a setting given in the
/// environment (GIT_CONFIG_COUNT, say) or a file git2 does not read.
fn identify(repo: &Repo, name: &str) -> Result<bool, Error> {
    let known = repo.config_matching(
        r"^(user\.(name|email)|commit\.gpgsign|core\.(splitindex|sparsecheckout))$",
    )?;
    let git_only = |key: &str| known.iter().rfind(|(k, _)| k == key);
    let leaves_to_git = GIT_ONLY
        .iter()
        .any(|key| git_only(key).is_some_and(|(_, v)| git_true(v)));
    for (key, value) in [
        ("user.email", format!("{name}@farm.invalid")),
        ("user.name", format!("farm agent {name}")),
    ] {
        if !known.iter().any(|(k, _)| k == key) {
            repo.run(["config", key, &value])?;
        }
    }
    Ok(leaves_to_git)
}

/// Whether `dir` holds a clone farm can work in (or nothing at all); why
/// not, when it does not: a directory that is not a repository, a `.git`
/// git cannot open, a HEAD that names no readable commit. (Opened by git2
/// at `dir` itself: a broken `.git` must not make git look further up,
/// where a hub's own repository may be.)
fn usable(dir: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err("it is not a directory".to_owned());
    }
    let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
    if empty {
        return Ok(());
    }
    if !std::fs::symlink_metadata(dir.join(".git")).is_ok_and(|m| m.is_dir()) {
        return Err("it is not a clone: no `.git` directory".to_owned());
    }
    let repo =
        git2::Repository::open(dir).map_err(|e| format!("git cannot open it: {}", e.message()))?;
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|e| format!("its HEAD names no commit: {}", e.message()))?;
    commit
        .tree()
        .map_err(|e| format!("its HEAD's files cannot be read: {}", e.message()))?;
    // The index is a cache of HEAD and the files: one git cannot read is
    // made again from them (what differs from HEAD is then still seen).
    if repo.index().is_err() {
        let _ = std::fs::remove_file(dir.join(".git/index"));
    }
    Ok(())
}

/// Move a broken clone at `dir` aside, next to it, for its commits to be
/// salvaged from there; where it went.
fn set_aside(dir: &Path, why: &str, say: &dyn Fn(&str)) -> Result<PathBuf, Error> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(format!(".broken-{stamp}"));
    let aside = dir.with_file_name(name);
    std::fs::rename(dir, &aside).map_err(|e| {
        Error::failure(format!(
            "cannot move the broken clone `{}` aside: {e}",
            dir.display()
        ))
        .hint("move it away; farm makes its clones itself")
    })?;
    say(&format!(
        "`{}` was no usable clone ({why}); moved it to `{}` and cloning again",
        dir.display(),
        aside.display()
    ));
    Ok(aside)
}

/// Let the clone read the hub's objects where they are (git's alternates),
/// so fetching from a hub on this machine copies no object: with 8 agents
/// every task's objects were otherwise written once more into each clone.
/// Safe because the clone only ever fetches the hub's branch, which never
/// loses a commit (farm never forces a push). Written on every start, so a
/// hub that moved is followed.
fn borrow_objects(clone: &Path, hub_git_dir: &Path) -> Result<(), Error> {
    let info = clone.join(".git/objects/info");
    let objects = hub_git_dir.join("objects");
    std::fs::create_dir_all(&info)
        .and_then(|()| std::fs::write(info.join("alternates"), format!("{}\n", objects.display())))
        .map_err(|e| {
            Error::failure(format!(
                "cannot point `{}` at the hub's objects: {e}",
                clone.display()
            ))
        })
}
