//! Flags and environment, turned into what commands act on: the hub, its
//! claim store, the state directory and the output settings. The hub is
//! resolved (and checked) only by commands that need one, before they touch
//! anything.

use std::path::{Path, PathBuf};

use crate::claims::ClaimStore;
use crate::claims::ClaimsKind;
use crate::claims::fs::FsStore;
use crate::claims::git::GitStore;
use crate::error::Error;
use crate::git::hub::HubSpec;
use crate::output::{ColorWhen, Out};
use crate::settings::Settings;

/// The flags every command takes, as clap parses them (flattened into
/// [`crate::cli::Cli`]); each command's help lists them apart from its own.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// The hub: the shared repository, a local path or a git URL
    /// (ssh://, git://, https://, file://, user@host:path). Default: the
    /// repository around the current directory.
    #[arg(long, global = true, env = "FARM_HUB", value_name = "PATH|URL")]
    pub hub: Option<String>,

    /// Where claims live: fs (`current_tasks/` in a hub on this machine) or
    /// git (branch `farm/claims` of the hub, for any machine). Default: fs
    /// for a path, git for a URL.
    #[arg(
        long,
        global = true,
        env = "FARM_CLAIMS",
        value_enum,
        value_name = "STORE"
    )]
    pub claims: Option<ClaimsKind>,

    /// Where farm keeps clones, logs and its cache of a remote's claims.
    /// Default: HUB/.farm for a local hub, ~/.cache/farm/<url> for a URL.
    #[arg(long, global = true, env = "FARM_STATE_DIR", value_name = "PATH")]
    pub state_dir: Option<PathBuf>,

    /// Print only what was asked for, and errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Say more about what farm is doing (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// When to use colour; `NO_COLOR` set means never for `auto`.
    #[arg(long, global = true, value_enum, default_value_t = ColorWhen::Auto, value_name = "WHEN")]
    pub color: ColorWhen,
}

/// What every command gets.
#[derive(Clone, Debug)]
pub struct Ctx {
    hub_arg: Option<String>,
    claims: Option<ClaimsKind>,
    state_dir: Option<PathBuf>,
    pub out: Out,
}

impl Ctx {
    /// The same, writing through `out`.
    pub fn with_out(&self, out: Out) -> Ctx {
        Ctx {
            out,
            ..self.clone()
        }
    }
}

/// Whether `hub` is a git URL rather than a path: `scheme://…`, or
/// `[user@]host:path` with no slash before the colon (git's own rule).
pub fn is_url(hub: &str) -> bool {
    if let Some((scheme, _)) = hub.split_once("://") {
        return !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    }
    match hub.split_once(':') {
        Some((host, _)) => !host.is_empty() && !host.contains('/'),
        None => false,
    }
}

impl Ctx {
    pub fn new(global: &GlobalArgs) -> Ctx {
        Ctx {
            hub_arg: global.hub.clone(),
            claims: global.claims,
            // Taken from the directory farm started in: farm's git runs
            // elsewhere (in a clone, in the hub), where a relative path
            // names another place.
            state_dir: global
                .state_dir
                .as_ref()
                .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone())),
            out: Out::new(global.color, global.quiet, global.verbose),
        }
    }

    /// The hub: `--hub`/`FARM_HUB` (a path or a URL), or the repository
    /// around the current directory.
    pub fn hub_spec(&self) -> Result<HubSpec, Error> {
        match &self.hub_arg {
            Some(url) if is_url(url) => {
                self.out.debug(&format!("hub: {url}"));
                Ok(HubSpec::Remote(url.clone()))
            }
            _ => self.hub().map(HubSpec::Local),
        }
    }

    /// The hub's directory, for commands that need the hub on this machine.
    pub fn hub(&self) -> Result<PathBuf, Error> {
        let hub = match &self.hub_arg {
            Some(url) if is_url(url) => {
                return Err(Error::usage(format!(
                    "this command needs the hub on this machine, not `{url}`"
                ))
                .hint("run it in a clone of the hub, or pass --hub PATH"));
            }
            Some(path) => check_hub(Path::new(path))?,
            None => {
                let cwd = std::env::current_dir().map_err(|e| {
                    Error::failure(format!("cannot read the current directory: {e}"))
                })?;
                discover(&cwd).ok_or_else(|| {
                    Error::usage(format!(
                        "no hub: `{}` is not inside a git repository",
                        cwd.display()
                    ))
                    .hint("run farm inside the repository, or pass --hub PATH (or set FARM_HUB)")
                })?
            }
        };
        self.out.debug(&format!("hub: {}", hub.display()));
        Ok(hub)
    }

    /// Where farm keeps its own files for this hub: `--state-dir`/
    /// `FARM_STATE_DIR`; else `.farm/` in a local hub; else a directory
    /// named after the URL under the user's cache (`$XDG_CACHE_HOME/farm/`).
    pub fn state_dir(&self, hub: &HubSpec) -> PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.clone();
        }
        match hub {
            HubSpec::Local(dir) => dir.join(".farm"),
            HubSpec::Remote(url) => {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                    .unwrap_or_else(std::env::temp_dir);
                let slug: String = url
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                cache.join("farm").join(slug)
            }
        }
    }

    /// Which claim store `hub` has: `--claims`/`FARM_CLAIMS`, else `claims`
    /// in farm.toml, else `fs` for a hub on this machine and `git` for a URL.
    pub fn claims_kind(&self, hub: &HubSpec, settings: &Settings) -> ClaimsKind {
        self.claims.or(settings.claims).unwrap_or(match hub {
            HubSpec::Local(_) => ClaimsKind::Fs,
            HubSpec::Remote(_) => ClaimsKind::Git,
        })
    }

    /// The claim store of `hub` (see [`Ctx::claims_kind`]).
    pub fn store_of(
        &self,
        hub: &HubSpec,
        settings: &Settings,
    ) -> Result<Box<dyn ClaimStore>, Error> {
        match (self.claims_kind(hub, settings), hub) {
            (ClaimsKind::Fs, HubSpec::Local(dir)) => Ok(Box::new(FsStore::new(dir))),
            (ClaimsKind::Fs, HubSpec::Remote(url)) => Err(Error::usage(format!(
                "the fs claim store needs the hub on this machine, not `{url}`"
            ))
            .hint("use --claims git for a hub reached by URL")),
            (ClaimsKind::Git, hub) => {
                let cache = self.state_dir(hub).join("claims.git");
                let out = self.out;
                let store = GitStore::open(&hub.url(), &cache)?.on_retry(move |l| out.note(l));
                Ok(Box::new(store))
            }
        }
    }

    /// The claim store of the hub these flags name.
    pub fn store(&self) -> Result<Box<dyn ClaimStore>, Error> {
        self.store_for(&self.hub_spec()?)
    }

    /// The claim store of `hub`, with the settings on its HEAD branch. A
    /// hub given by URL is not fetched from for them: the git store is the
    /// only one it can have.
    pub fn store_for(&self, hub: &HubSpec) -> Result<Box<dyn ClaimStore>, Error> {
        let settings = match hub {
            HubSpec::Local(_) => Settings::of_hub(hub, None, &self.state_dir(hub))?,
            HubSpec::Remote(_) => Settings::default(),
        };
        self.store_of(hub, &settings)
    }
}

/// A hub given by path: an existing directory that is a git repository's
/// top: farm writes `current_tasks/` and `.farm/` into it, so a stray
/// `--hub /` or a subdirectory is refused before anything is written.
fn check_hub(path: &Path) -> Result<PathBuf, Error> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() && !is_repository(path) => Err(Error::usage(format!(
            "hub `{}` is not a git repository",
            path.display()
        ))
        .hint(format!(
            "pass --hub the top directory of the shared repository (the one holding .git), or make one: git init -b main {}",
            path.display()
        ))),
        // Absolute from here on: clones and git commands run elsewhere.
        Ok(m) if m.is_dir() => {
            Ok(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
        }
        Ok(_) => Err(
            Error::usage(format!("hub `{}` is not a directory", path.display()))
                .hint("pass --hub with the path of the shared repository"),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::usage(format!(
            "hub `{}` does not exist",
            path.display()
        ))
        .hint(format!(
            "check the path given with --hub or FARM_HUB, or create a hub: git init --bare {}",
            path.display()
        ))),
        Err(e) => Err(Error::failure(format!(
            "cannot read hub `{}`: {e}",
            path.display()
        ))),
    }
}

/// The nearest enclosing repository: a directory with `.git`, or a bare one.
fn discover(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| is_repository(dir))
        .map(Path::to_path_buf)
}

/// Whether `dir` is the top of a git repository: it holds `.git` (a
/// directory, or the file of a linked work tree), or it is a bare one.
/// Judged by its files, as git itself first does, with no process spawned.
fn is_repository(dir: &Path) -> bool {
    let bare =
        dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir();
    dir.join(".git").exists() || bare
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths_as_git_does() {
        for url in [
            "git://127.0.0.1:9418/hub.git",
            "ssh://git@example.com/team/repo.git",
            "https://github.com/team/repo",
            "file:///srv/hub.git",
            "git@github.com:team/repo.git",
            "host:repo",
        ] {
            assert!(is_url(url), "{url}");
        }
        for path in ["/srv/hub", "hub", "./a:b", "../hub.git", "dir/x:y", ""] {
            assert!(!is_url(path), "{path}");
        }
    }

    #[test]
    fn discovers_work_tree_and_bare_repositories() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        assert_eq!(discover(&repo.join("src/deep")), Some(repo.clone()));

        let bare = tmp.path().join("hub.git");
        for d in ["objects", "refs"] {
            std::fs::create_dir_all(bare.join(d)).unwrap();
        }
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(discover(&bare.join("refs")), Some(bare));
    }
}
