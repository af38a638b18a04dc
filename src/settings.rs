//! `farm.toml`: a repository's settings for `farm run`, read from the hub's
//! work tree. Flags override them; unknown keys are an error, so a typo does
//! not silently fall back to a default.

use std::path::Path;

use serde::Deserialize;

use crate::error::Error;
use crate::git::hub::HubSpec;
use crate::run::session::PromptVia;

pub const FILE: &str = "farm.toml";

/// What `farm.toml` may say. Every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The agent command, e.g. "claude -p --dangerously-skip-permissions".
    pub agent: Option<String>,
    pub jobs: Option<usize>,
    pub timeout: Option<String>,
    pub prompt_via: Option<PromptVia>,
    pub stale_after: Option<String>,
    pub branch: Option<String>,
    /// The claim store: "fs" or "git" (default: by the hub, see `--claims`).
    pub claims: Option<crate::claims::ClaimsKind>,
}

impl Settings {
    /// The settings in the hub's `farm.toml` (a remote hub's are not read:
    /// flags and the defaults apply).
    pub fn of_hub(hub: &HubSpec) -> Result<Settings, Error> {
        hub.local().map_or(Ok(Settings::default()), Settings::load)
    }

    /// `<dir>/farm.toml`, or the defaults when there is none.
    pub fn load(dir: &Path) -> Result<Settings, Error> {
        let path = dir.join(FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| {
                let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
                Error::usage(format!("invalid `{}`: {msg}", path.display()))
                    .hint("keys: agent, jobs, timeout, prompt_via, stale_after, branch, claims")
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
            Err(e) => Err(Error::failure(format!(
                "cannot read `{}`: {e}",
                path.display()
            ))),
        }
    }
}

/// What `farm init` writes.
pub const TEMPLATE: &str = r#"# farm.toml — how `farm run` works on this repository. Flags override these.

# The agent CLI, split into words (no shell). The prompt is passed as the last
# argument, on stdin, or as a file (prompt_via = "arg" | "stdin" | "file"; with
# "file", `{prompt_file}` in the command is replaced by the file's path).
# agent = "claude -p --dangerously-skip-permissions"
# prompt_via = "arg"

# How many agents run at once, and how long one session may take.
# jobs = 2
# timeout = "60m"

# A claim with no live local holder whose heartbeat is older than this is reaped.
# stale_after = "30m"

# The branch agents integrate into (default: the hub's HEAD).
# branch = "main"

# Where claims live: "fs" (current_tasks/ in the hub, one machine) or "git"
# (branch farm/claims of the hub, any machine). Default: fs for a hub on this
# machine, git for a hub given as a URL.
# claims = "fs"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_and_typos_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(FILE), TEMPLATE).unwrap();
        assert!(Settings::load(tmp.path()).unwrap().agent.is_none());
        std::fs::write(tmp.path().join(FILE), "agnet = \"x\"\n").unwrap();
        let err = Settings::load(tmp.path()).unwrap_err();
        assert!(err.message.contains("agnet"), "{}", err.message);
        std::fs::write(tmp.path().join(FILE), "prompt_via = \"stdin\"\njobs = 3\n").unwrap();
        let s = Settings::load(tmp.path()).unwrap();
        assert_eq!((s.prompt_via, s.jobs), (Some(PromptVia::Stdin), Some(3)));
    }
}
