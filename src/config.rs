//! Flags and environment, turned into what commands act on: the hub and the
//! output settings. The hub is resolved (and checked) only by commands that
//! need one, before they touch anything.

use std::path::{Path, PathBuf};

use crate::cli::GlobalArgs;
use crate::error::Error;
use crate::output::Out;
use crate::store::fs::FsStore;

/// What every command gets.
#[derive(Debug)]
pub struct Ctx {
    hub_arg: Option<PathBuf>,
    pub out: Out,
}

impl Ctx {
    pub fn new(global: &GlobalArgs) -> Ctx {
        Ctx {
            hub_arg: global.hub.clone(),
            out: Out::new(global.color, global.quiet, global.verbose),
        }
    }

    /// The hub's directory: `--hub`/`FARM_HUB`, or the repository around the
    /// current directory.
    pub fn hub(&self) -> Result<PathBuf, Error> {
        let hub = match &self.hub_arg {
            Some(path) => check_hub(path)?,
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

    pub fn store(&self) -> Result<FsStore, Error> {
        Ok(FsStore::new(&self.hub()?))
    }
}

fn check_hub(path: &Path) -> Result<PathBuf, Error> {
    match std::fs::metadata(path) {
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
    start.ancestors().find_map(|dir| {
        let bare =
            dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir();
        (dir.join(".git").exists() || bare).then(|| dir.to_path_buf())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
