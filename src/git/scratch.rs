//! A scratch repository: a bare repository in the state dir that one farm
//! process fetches into and removes when done, to read a file of a remote
//! branch without a clone (a URL hub's `farm.toml`).
//!
//! Why one per process and not one shared cache: a fetch with `--depth`
//! rewrites the repository's `shallow` file under `shallow.lock`. Two farms
//! starting at once on one machine collided there ("shallow file has changed
//! since we read it", "Unable to create 'shallow.lock'"), and so did a farm
//! restarted while its SIGKILLed predecessor's fetch still ran (farm's git
//! children outlive it by design); a git killed by SIGKILL leaves its lock
//! behind, which would have stopped every later farm. A repository nobody
//! else uses has none of this, and costs one `git init` (a few
//! milliseconds) next to a fetch across the network.
//!
//! A farm killed before it removed its repository leaves it behind: any
//! scratch repository older than [`LEFT_AFTER`] is removed by the next one
//! made. No fetch of one file's tip takes that long.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::git::command::Repo;
use crate::git::killed::READ_AGAIN;

/// The name every scratch repository starts with; `hub-tip.git` (one shared
/// cache, before) matches too and is swept the same way.
const PREFIX: &str = "hub-tip";

/// Age after which a scratch repository is one a killed farm left.
const LEFT_AFTER: Duration = Duration::from_secs(3600);

/// A bare repository removed when dropped.
pub struct ScratchRepo {
    dir: tempfile::TempDir,
}

impl ScratchRepo {
    /// A new empty bare repository in `state` (made if missing).
    pub fn new(state: &Path) -> Result<ScratchRepo, Error> {
        let cannot = |e: std::io::Error| {
            Error::failure(format!(
                "cannot make a scratch repository in `{}`: {e}",
                state.display()
            ))
        };
        std::fs::create_dir_all(state).map_err(cannot)?;
        sweep_left(state, |name| {
            name.starts_with(PREFIX) && name.ends_with(".git")
        });
        let dir = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}-"))
            .suffix(".git")
            .tempdir_in(state)
            .map_err(cannot)?;
        Repo::new(dir.path())
            .run(["init", "--quiet", "--bare"])
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
        Ok(ScratchRepo { dir })
    }

    pub fn repo(&self) -> Repo {
        Repo::new(self.dir.path())
    }

    /// The tip of `url`'s `branch`, fetched `--depth 1` into a new scratch
    /// repository in `state`; `None` when there is no such branch. A fetch
    /// killed by a signal is tried again (at most [`READ_AGAIN`] times), each
    /// time in a new repository: a fetch killed half-way leaves its
    /// `shallow.lock` in the one it used.
    pub fn tip(
        state: &Path,
        url: &str,
        branch: &str,
    ) -> Result<(ScratchRepo, Option<String>), Error> {
        let rev = format!("refs/heads/{branch}");
        let mut killed = 0;
        loop {
            let made = ScratchRepo::new(state)?;
            // A remote that did not answer: again, in the same repository,
            // for a few seconds (git removes its `shallow.lock` when the
            // network fails it). A killed fetch: again in a new one.
            let fetched =
                crate::git::retry::briefly(|| match made.repo().fetch_tip_shallow(url, &rev) {
                    Err(killed) if killed.signal.is_some() => Ok(Err(killed)),
                    other => other.map(Ok),
                });
            match fetched {
                Ok(Ok(tip)) => return Ok((made, tip)),
                Ok(Err(_)) if killed < READ_AGAIN => killed += 1,
                Ok(Err(e)) | Err(e) => return Err(crate::git::hub::unreachable(url, e)),
            }
        }
    }
}

/// Remove what killed farms left in `dir` (scratch repositories, a claim
/// store's cache made halfway): the entries whose names `left` picks, once
/// older than [`LEFT_AFTER`] (a younger one may be another farm's, at
/// work). Best effort: one that cannot be removed now is tried again next
/// time.
pub(crate) fn sweep_left(dir: &Path, left: impl Fn(&str) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        if !left(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > LEFT_AFTER));
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
