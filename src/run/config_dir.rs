//! `--config-per-agent`: a config directory of its own for each agent's CLI.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// `--config-per-agent`: each agent's CLI gets a config directory of its
/// own through `var` (`CLAUDE_CONFIG_DIR`, say), made on first use under the
/// state directory (`config/<agent>/`) and seeded with copies of the user's
/// own config files (`seed`), so that parallel starts never rewrite one
/// shared file.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub var: String,
    pub seed: Vec<PathBuf>,
}

impl AgentConfig {
    /// `agent`'s directory, made and seeded the first time.
    pub(super) fn dir_for(&self, state: &Path, agent: &str) -> Result<PathBuf, Error> {
        let dir = state.join("config").join(agent);
        if dir.is_dir() {
            return Ok(dir);
        }
        let fail =
            |e: std::io::Error| Error::failure(format!("cannot make `{}`: {e}", dir.display()));
        let tmp = state.join("config").join(format!(".{agent}.tmp"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(fail)?;
        for file in &self.seed {
            if let (true, Some(name)) = (file.is_file(), file.file_name()) {
                std::fs::copy(file, tmp.join(name)).map_err(fail)?;
            }
        }
        // Whole or not at all: a crash mid-seed leaves only the temp dir.
        std::fs::rename(&tmp, &dir).map_err(fail)?;
        Ok(dir)
    }
}
