//! The hub as `farm run` needs it: checked once, read without a work tree,
//! and watched for change — or, for a hub reached by URL, checked once and
//! then only fetched from and pushed to.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::Error;
use crate::git::command::Repo;
use crate::output::Out;

/// Where the hub is: a directory on this machine, or a git URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubSpec {
    Local(PathBuf),
    Remote(String),
}

impl HubSpec {
    /// What `git` is given to reach the hub.
    pub fn url(&self) -> String {
        match self {
            HubSpec::Local(dir) => dir.display().to_string(),
            HubSpec::Remote(url) => url.clone(),
        }
    }

    /// The hub's directory, when it is on this machine.
    pub fn local(&self) -> Option<&Path> {
        match self {
            HubSpec::Local(dir) => Some(dir),
            HubSpec::Remote(_) => None,
        }
    }
}

/// The branch the HEAD of the hub at `url` names (`main` when it names
/// none).
pub fn remote_head(url: &str) -> Result<String, Error> {
    // A killed ls-remote is run again by `Repo` (it only reads); a remote
    // that did not answer, for a few seconds.
    let repo = Repo::new(std::env::temp_dir());
    Ok(
        crate::git::retry::briefly(|| repo.run(["ls-remote", "--symref", url, "HEAD"]))
            .map_err(|e| unreachable(url, e))?
            .lines()
            .find_map(|l| l.strip_prefix("ref: refs/heads/")?.split('\t').next())
            .unwrap_or("main")
            .to_owned(),
    )
}

/// The branch the HEAD of the hub `repo` on this machine names (`main`
/// when it names none).
pub fn local_head(repo: &Repo) -> Result<String, Error> {
    Ok(repo
        .head_branch()
        .map_err(|e| Error::failure(e.to_string()).caused_by(e))?
        .unwrap_or_else(|| "main".to_owned()))
}

/// The file `path` at the tip of `branch` (default: the branch HEAD names,
/// `main` when it names none) of the hub repository at `dir` on this
/// machine, read in-process (libgit2): the branch, and the file's text
/// (`None`: no such branch, or no such file on it). `None` when libgit2
/// cannot say (the caller asks the git CLI): a command that only needs
/// `farm.toml` (`farm locks`, `farm claim`) then starts no git process,
/// which cost it 5 ms next to its 2 ms.
pub fn local_file(
    dir: &Path,
    branch: Option<&str>,
    path: &str,
) -> Option<(String, Option<String>)> {
    let repo = git2::Repository::open_ext(
        dir,
        git2::RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&std::ffi::OsStr>(),
    )
    .ok()?;
    let branch = match branch {
        Some(b) => b.to_owned(),
        None => {
            let head = repo.find_reference("HEAD").ok()?;
            match head.symbolic_target().ok()? {
                Some(target) => target.strip_prefix("refs/heads/")?.to_owned(),
                // A detached HEAD names no branch.
                None => "main".to_owned(),
            }
        }
    };
    let tip = match repo.find_reference(&format!("refs/heads/{branch}")) {
        Ok(r) => r,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Some((branch, None)),
        Err(_) => return None,
    };
    let tree = tip.peel_to_tree().ok()?;
    let entry = match tree.get_path(Path::new(path)) {
        Ok(entry) => entry,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Some((branch, None)),
        Err(_) => return None,
    };
    if entry.kind() != Some(git2::ObjectType::Blob) {
        return Some((branch, None));
    }
    let blob = entry.to_object(&repo).ok()?.peel_to_blob().ok()?;
    let text = String::from_utf8(blob.content().to_vec()).ok()?;
    Some((branch, Some(text)))
}

/// A hub at `url` that git could not reach: what it said, and how to check.
pub fn unreachable(url: &str, e: crate::git::command::GitError) -> Error {
    Error::usage(format!("cannot reach hub `{url}`: {}", e.said)).hint(format!(
        "check the URL and your access: git ls-remote {url}"
    ))
}

/// How long to wait for the hub's push lock before pushing without it.
const PUSH_LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// A checked hub: a git repository with the branch agents integrate into,
/// that accepts pushes to it — on this machine, or reached by URL.
#[derive(Debug, Clone)]
pub struct Hub {
    /// What git is given to reach the hub: its path, or its URL.
    pub url: String,
    /// The hub's files, when it is on this machine.
    pub local: Option<Local>,
    pub branch: String,
}

/// A hub on this machine.
#[derive(Debug, Clone)]
pub struct Local {
    pub dir: PathBuf,
    pub git_dir: PathBuf,
    pub bare: bool,
    /// The branch is checked out in the hub's own work tree (a non-bare hub
    /// with `updateInstead`), so its files there are the branch as pushed.
    pub checked_out: bool,
}

impl Hub {
    /// Check that the hub is usable for `branch` (default: its HEAD's).
    pub fn open(spec: &HubSpec, branch: Option<&str>) -> Result<Hub, Error> {
        match spec {
            HubSpec::Local(dir) => Hub::open_local(dir, branch),
            HubSpec::Remote(url) => Hub::open_remote(url, branch),
        }
    }

    /// A hub reached by URL: it answers, and has the branch.
    fn open_remote(url: &str, branch: Option<&str>) -> Result<Hub, Error> {
        let branch = match branch {
            Some(b) => b.to_owned(),
            None => remote_head(url)?,
        };
        let repo = Repo::new(std::env::temp_dir());
        let rev = format!("refs/heads/{branch}");
        let found = crate::git::retry::briefly(|| repo.run(["ls-remote", url, &rev]))
            .map_err(|e| unreachable(url, e))?;
        if found.is_empty() {
            return Err(
                Error::usage(format!("hub `{url}` has no branch `{branch}` yet"))
                    .hint("push a first commit to it (with farm init's files), or pass --branch"),
            );
        }
        Ok(Hub {
            url: url.to_owned(),
            local: None,
            branch,
        })
    }

    fn open_local(dir: &Path, branch: Option<&str>) -> Result<Hub, Error> {
        let repo = Repo::new(dir);
        let git_dir = repo.run(["rev-parse", "--absolute-git-dir"]).map_err(|e| {
            Error::usage(format!(
                "hub `{}` is not a git repository ({})",
                dir.display(),
                e.said
            ))
            .hint(format!("create one: git init -b main {}", dir.display()))
        })?;
        let bare = repo
            .is_bare()
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
        let branch = match branch {
            Some(b) => b.to_owned(),
            None => local_head(&repo)?,
        };
        if repo
            .rev(&format!("refs/heads/{branch}"))
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))?
            .is_none()
        {
            return Err(Error::usage(format!(
                "hub `{}` has no branch `{branch}` yet",
                dir.display()
            ))
            .hint("commit something to it first (farm init does), or pass --branch"));
        }
        if !bare {
            let setting = repo
                .config_get("receive.denyCurrentBranch")
                .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
            let checked_out = repo.head_branch().ok().flatten().as_deref() == Some(branch.as_str());
            if checked_out && setting.as_deref() != Some("updateInstead") {
                return Err(Error::usage(format!(
                    "hub `{}` has `{branch}` checked out and refuses pushes to it",
                    dir.display()
                ))
                .hint(format!(
                    "let farm's pushes update its work tree: git -C {} config receive.denyCurrentBranch updateInstead (farm init does this)",
                    dir.display()
                )));
            }
        }
        let clean = || {
            repo.check(["diff-index", "--quiet", "HEAD", "--"])
                .map_err(|e| Error::failure(e.to_string()).caused_by(e))
        };
        // A push in flight (`updateInstead` writes the files, then moves
        // the ref) makes the work tree differ from HEAD for a moment; the
        // pushes hold the hub's push lock, so the tree is judged again
        // once they let go before it is called dirty.
        let clean_once_pushes_settle = || {
            let _settled = push_lock_of(dir)?;
            clean()
        };
        if !bare && !clean()? && !clean_once_pushes_settle()? {
            return Err(Error::usage(format!(
                "hub `{}` has uncommitted changes to tracked files, so it refuses pushes",
                dir.display()
            ))
            .hint(format!(
                "commit or stash them first: git -C {} status",
                dir.display()
            )));
        }
        let checked_out =
            !bare && repo.head_branch().ok().flatten().as_deref() == Some(branch.as_str());
        Ok(Hub {
            url: dir.display().to_string(),
            local: Some(Local {
                dir: dir.to_path_buf(),
                git_dir: PathBuf::from(git_dir),
                bare,
                checked_out,
            }),
            branch,
        })
    }

    /// The hub's work tree holds the branch as pushed (see [`Local`]).
    /// The git directory of a hub on this machine (`None`: a URL).
    pub fn git_dir(&self) -> Option<&Path> {
        self.local.as_ref().map(|l| l.git_dir.as_path())
    }

    pub fn checked_out(&self) -> Option<&Path> {
        self.local
            .as_ref()
            .filter(|l| l.checked_out)
            .map(|l| l.dir.as_path())
    }

    /// Serialize pushes to this hub among the farm processes of this host.
    ///
    /// A non-bare hub updates its work tree before the ref update commits:
    /// two concurrent pushes there left the work tree at the commit whose
    /// ref update then lost, so every later push was refused ("Working
    /// directory has staged changes"). One push at a time avoids it. Agents
    /// rebase before taking the lock and, under it, only catch up again if
    /// the branch moved meanwhile, so it is held for little more than a push.
    ///
    /// The lock is inherited by the push's own processes (see
    /// `ClaimStore::publish`): a farm killed mid-push leaves its hub-side
    /// receive-pack holding it, so no other push races that one through the
    /// hub's work tree. A lock held longer than `PUSH_LOCK_PATIENCE` (a hook
    /// that left a daemon with the files it inherited) is given up on,
    /// with a line saying so, rather than waited on for ever.
    ///
    /// A hub elsewhere needs no lock (and could not share one): `None`.
    pub fn push_lock(&self, out: Out) -> Result<Option<std::fs::File>, Error> {
        match &self.local {
            Some(local) => {
                let lock = push_lock_of(&local.dir)?;
                if lock.is_none() {
                    out.warn(&format!(
                        "farm: `{}` has been held for {} (by a process left from a push?); pushing without it",
                        local.dir.join(crate::names::CLAIMS_DIR).join(".push.lock").display(),
                        crate::age::Age(PUSH_LOCK_PATIENCE)
                    ));
                }
                Ok(lock)
            }
            None => Ok(None),
        }
    }

    /// The branch's commit now, read from the hub's files; `None` for a hub
    /// elsewhere (ask it with a fetch).
    pub fn branch_rev(&self) -> Option<String> {
        let local = self.local.as_ref()?;
        crate::git::command::read_ref(&local.git_dir, &format!("refs/heads/{}", self.branch))
    }

    /// Something that changes whenever the branch moves or a claim comes or
    /// goes: the mtimes of the branch's ref, packed refs and `current_tasks/`.
    /// Empty for a hub elsewhere: idle agents poll it.
    pub fn fingerprint(&self) -> Vec<Option<SystemTime>> {
        let Some(local) = &self.local else {
            return Vec::new();
        };
        let mtime = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        vec![
            mtime(local.git_dir.join("refs/heads").join(&self.branch)),
            mtime(local.git_dir.join("packed-refs")),
            mtime(local.dir.join(crate::names::CLAIMS_DIR)),
        ]
    }

    /// What the branch and the claims branch of a hub elsewhere point at
    /// now, as `git ls-remote` prints them (one process, no objects
    /// fetched); `None` when it did not answer.
    pub fn remote_tips(&self) -> Option<String> {
        let repo = Repo::new(std::env::temp_dir());
        let branch = format!("refs/heads/{}", self.branch);
        let claims = format!("refs/heads/{}", crate::claims::git::BRANCH);
        repo.run(["ls-remote", self.url.as_str(), &branch, &claims])
            .ok()
    }

    /// The branch's board (`tasks/`, `templates/`) under `scratch`, for
    /// reading; returns the directory to read it from. A local hub's is read
    /// straight from the repository (no work tree or index touched); a hub
    /// elsewhere is cloned, one commit deep.
    pub fn extract_board(&self, scratch: &Path) -> Result<PathBuf, Error> {
        let fail =
            |e: String| Error::failure(format!("cannot read the board from `{}`: {e}", self.url));
        let Some(local) = &self.local else {
            let dest = scratch.join("board");
            // A dropped connection is tried again, as the loops' reads are:
            // a board misread at the end of a run misstates how it ended.
            crate::git::retry::patiently("reading the board", &|_| {}, || {
                // A git killed half-way may leave its destination behind.
                let _ = std::fs::remove_dir_all(&dest);
                Repo::new(scratch).clone_tip(&self.url, &self.branch, &dest)
            })
            .map_err(|e| fail(e.said))?;
            return Ok(dest);
        };
        let dest = scratch.to_path_buf();
        std::fs::create_dir_all(&dest).map_err(|e| fail(e.to_string()))?;
        let repo = Repo::new(&local.dir);
        let has = |p: &str| {
            repo.run(["ls-tree", "--name-only", &self.branch, p])
                .map(|o| !o.is_empty())
        };
        let mut paths = Vec::new();
        for p in ["tasks", "templates"] {
            if has(p).map_err(|e| fail(e.to_string()))? {
                paths.push(p);
            }
        }
        if paths.is_empty() {
            return Ok(dest);
        }
        let mut archive = std::process::Command::new("git");
        crate::git::command::unset_repository_env(&mut archive)
            .arg("-C")
            .arg(&local.dir)
            .args(["archive", "--format=tar", &self.branch])
            .args(&paths)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = archive.spawn().map_err(|e| fail(e.to_string()))?;
        let stdout = child.stdout.take().expect("piped");
        let tar = std::process::Command::new("tar")
            .args(["-x", "-C"])
            .arg(&dest)
            .stdin(stdout)
            .status()
            .map_err(|e| fail(format!("tar: {e}")))?;
        let git = child.wait().map_err(|e| fail(e.to_string()))?;
        if !(tar.success() && git.success()) {
            return Err(fail("git archive | tar failed".into()));
        }
        Ok(dest)
    }
}

/// [`Hub::push_lock`] of the hub whose top directory is `hub_dir`; `None`
/// when it was held past [`PUSH_LOCK_PATIENCE`].
fn push_lock_of(hub_dir: &Path) -> Result<Option<std::fs::File>, Error> {
    let dir = hub_dir.join(crate::names::CLAIMS_DIR);
    let _ = std::fs::create_dir(&dir);
    let path = dir.join(".push.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| {
            Error::failure(format!("cannot open `{}`: {e}", path.display())).caused_by(e)
        })?;
    let every = std::time::Duration::from_millis(20);
    match crate::flock::lock_within(&file, PUSH_LOCK_PATIENCE, every) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Ok(None),
        Err(e) => Err(Error::failure(format!(
            "cannot lock `{}`: {e}",
            path.display()
        ))),
    }
}
