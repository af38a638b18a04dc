//! Agent presets: `farm run --agent claude` expands `claude` to that CLI's
//! unattended headless command line and the way it takes its prompt.
//!
//! The built-in presets are the data file `presets/agents.toml`, compiled
//! in. A user's own `agents.toml` (in `$XDG_CONFIG_HOME/farm/`, else
//! `~/.config/farm/`) adds presets, or replaces built-in ones by name. An
//! `--agent` of more than one word, or one that names no preset, is taken as
//! a command line, as before.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::Error;
use crate::run::session::PromptVia;

/// The built-in presets.
pub const BUILT_IN: &str = include_str!("../../presets/agents.toml");

/// One preset, as the data file spells it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The command line, split into words like `--agent`.
    pub command: String,
    pub prompt_via: PromptVia,
    /// The flags in `command` that skip the CLI's permission prompts.
    #[serde(default)]
    pub unattended: String,
    #[serde(default)]
    pub about: String,
    /// Where the flags are documented.
    #[serde(default)]
    pub source: String,
    /// The CLI version farm's CI last ran this preset against, end to end
    /// (tests/clis/); empty: unverified.
    #[serde(default)]
    pub verified: String,
    /// The environment variable that moves the CLI's config directory, for
    /// `farm run --config-per-agent`.
    #[serde(default)]
    pub config_env: String,
    /// The user's config files (`~/` allowed) copied into each agent's own
    /// config directory when it is made.
    #[serde(default)]
    pub config_seed: Vec<String>,
    /// The CLI's own config and login under the home (`~/` allowed), bound
    /// into a sandboxed session's otherwise empty home, read-write.
    #[serde(default)]
    pub sandbox_home: Vec<String>,
    /// The variables a sandboxed session keeps for this CLI: its API keys
    /// and endpoints.
    #[serde(default)]
    pub sandbox_env: Vec<String>,
    /// The CLI's own words for its limits, API errors and setup errors
    /// (`[NAME.patterns]`: `limited`, `transient`, `fatal`, lower case), on
    /// top of the common ones.
    #[serde(default)]
    pub patterns: crate::run::classify::Patterns,
}

/// Where a preset came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    BuiltIn,
    User,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::BuiltIn => "built-in",
            Origin::User => "user",
        }
    }
}

/// The user's presets file, whether or not it exists.
pub fn user_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("farm").join("agents.toml"))
}

fn parse(text: &str, what: &str) -> Result<BTreeMap<String, Preset>, Error> {
    toml::from_str(text).map_err(|e| {
        let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        Error::usage(format!("invalid presets in {what}: {msg}")).hint(
            "each preset is a table: [name] command = \"…\", prompt_via = \"arg\"|\"stdin\"|\"file\"",
        )
    })
}

/// Every preset: the built-in ones, then the user's over them.
pub fn all() -> Result<BTreeMap<String, (Preset, Origin)>, Error> {
    let mut presets: BTreeMap<String, (Preset, Origin)> = parse(BUILT_IN, "farm itself")?
        .into_iter()
        .map(|(k, p)| (k, (p, Origin::BuiltIn)))
        .collect();
    if let Some(path) = user_file() {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for (k, p) in parse(&text, &format!("`{}`", path.display()))? {
                    presets.insert(k, (p, Origin::User));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::failure(format!(
                    "cannot read `{}`: {e}",
                    path.display()
                )));
            }
        }
    }
    Ok(presets)
}

/// The preset `agent` names, if it is one word naming one.
pub fn find(agent: &str) -> Result<Option<Preset>, Error> {
    let name = agent.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Ok(None);
    }
    Ok(all()?.remove(name).map(|(p, _)| p))
}

/// `path` with a leading `~/` replaced by the home directory.
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_presets_parse_and_say_how_they_run_unattended() {
        let presets = parse(BUILT_IN, "farm itself").unwrap();
        for name in [
            "claude", "codex", "gemini", "opencode", "aider", "cursor", "goose", "amp",
        ] {
            let p = presets
                .get(name)
                .unwrap_or_else(|| panic!("no preset {name}"));
            let words = shell_words::split(&p.command).unwrap();
            assert!(!words.is_empty(), "{name}");
            for flag in p.unattended.split_whitespace() {
                assert!(
                    words
                        .iter()
                        .any(|w| w == flag || w.starts_with(&format!("{flag}="))),
                    "{name}: `{flag}` is not in its command"
                );
            }
            if p.prompt_via == PromptVia::File {
                assert!(p.command.contains("{prompt_file}"), "{name}");
            }
        }
    }

    #[test]
    fn a_command_line_is_not_a_preset() {
        assert!(find("claude -p --model x").unwrap().is_none());
        assert!(find("/usr/bin/claude").unwrap().is_none());
        assert!(find("").unwrap().is_none());
    }
}
