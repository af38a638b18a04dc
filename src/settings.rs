//! `farm.toml`: a repository's settings for `farm run`, read from the tip
//! of the hub's branch — not from a work tree — so that a bare hub and a
//! hub reached by URL have settings too. Flags override them; unknown keys
//! are an error, so a typo does not silently fall back to a default.
//!
//! Which branch: `--branch` when given, else the hub's HEAD branch. (A
//! `branch` key in that file then names the branch agents integrate into;
//! it is not followed to read another farm.toml.)
//!
//! A non-bare hub whose work tree holds a `farm.toml` that differs from the
//! branch's (not committed yet): the branch wins, as it does for every
//! clone of the hub; `farm doctor` says so.

use std::path::Path;

use serde::Deserialize;

use crate::error::Error;
use crate::git::command::Repo;
use crate::git::hub::HubSpec;
use crate::git::scratch::ScratchRepo;
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
    /// How long a network git may stay silent (see `farm run --net-timeout`).
    pub net_timeout: Option<String>,
    pub branch: Option<String>,
    /// The claim store: "fs" or "git" (default: by the hub, see `--claims`).
    pub claims: Option<crate::claims::ClaimsKind>,
    /// The project's test suite (see [`crate::suite`]).
    pub tests: Option<crate::suite::Raw>,
    /// A cost budget in US dollars (see `farm run --max-cost`).
    pub max_cost: Option<f64>,
    /// The progress document (see [`crate::run::progress`]).
    pub progress: Option<String>,
    /// Whether sessions run sandboxed: true, false, "auto", "on" or "off"
    /// (see `farm run --sandbox`).
    pub sandbox: Option<SandboxSetting>,
    /// Paths sandboxed sessions may see, `PATH` or `PATH:rw`.
    #[serde(default)]
    pub sandbox_bind: Vec<String>,
    /// Whether sandboxed sessions reach the network (default true).
    pub sandbox_network: Option<bool>,
    /// Variables of farm's environment sandboxed sessions keep.
    #[serde(default)]
    pub sandbox_env: Vec<String>,
    /// The most memory each process of a session may map (see `farm run
    /// --session-memory`).
    pub session_memory: Option<String>,
    /// The most CPU time each process of a session may use (see `farm run
    /// --session-cpu`).
    pub session_cpu: Option<String>,
    /// Agents with a speciality, by role name (see [`crate::run::roles`]).
    #[serde(default)]
    pub roles: std::collections::BTreeMap<String, crate::run::roles::Raw>,
    /// The command told of what needs a person (see [`crate::run::notify`]).
    pub notify: Option<crate::run::notify::Raw>,
}

/// farm.toml's `sandbox`: a yes or no, or a mode by name.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum SandboxSetting {
    Bool(bool),
    Mode(crate::run::sandbox::Mode),
}

impl SandboxSetting {
    pub fn mode(self) -> crate::run::sandbox::Mode {
        use crate::run::sandbox::Mode;
        match self {
            SandboxSetting::Bool(true) => Mode::On,
            SandboxSetting::Bool(false) => Mode::Off,
            SandboxSetting::Mode(m) => m,
        }
    }
}

/// A `farm.toml` as read from a branch: its text, and where it was read,
/// for messages (`farm.toml on branch `main` of /srv/hub`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnBranch {
    pub text: Option<String>,
    pub branch: String,
    pub what: String,
    /// Whether the tip read holds schedules, when it was fetched from a hub
    /// elsewhere (`None`: not asked): `farm run` then fires none at its
    /// start without fetching the tip again, ~0.1 s through a `git daemon`
    /// hub.
    pub schedules: Option<bool>,
}

/// `farm.toml`'s text at commit `tip` of `repo`, and whether `tip` holds
/// schedules: one listing for both.
fn text_and_schedules(
    repo: &Repo,
    tip: &str,
) -> Result<(Option<String>, bool), crate::git::command::GitError> {
    let listing = repo.run(["ls-tree", tip, "--", FILE, crate::schedule::file::DIR])?;
    let mut blob = None;
    let mut schedules = false;
    // `<mode> <type> <oid>\t<path>`
    for line in listing.lines() {
        let Some((meta, path)) = line.split_once('\t') else {
            continue;
        };
        let mut f = meta.split(' ');
        let (Some(_mode), Some(kind), Some(oid)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        match (path, kind) {
            (FILE, "blob") => blob = Some(oid.to_owned()),
            (crate::schedule::file::DIR, "tree") => schedules = true,
            _ => {}
        }
    }
    let text = blob
        .map(|oid| repo.run(["cat-file", "blob", &oid]))
        .transpose()?;
    Ok((text, schedules))
}

impl Settings {
    /// The settings in `farm.toml` at the tip of the hub's `branch` (default:
    /// its HEAD branch); the defaults when the branch has none.
    ///
    /// A hub given by URL is fetched from: only the branch's tip, with
    /// `--depth 1`, into a scratch repository in `state` of this process's
    /// own (see [`ScratchRepo`]). The settings are needed before any clone
    /// exists (they say how many agents run, and which claim store), so the
    /// agents' clones cannot serve; a shallow fetch costs one round trip and
    /// the tip's tree.
    pub fn of_hub(hub: &HubSpec, branch: Option<&str>, state: &Path) -> Result<Settings, Error> {
        Settings::parse(&Settings::read(hub, branch, state)?)
    }

    /// The text of `farm.toml` at the tip of the hub's branch (see
    /// [`Settings::of_hub`]), unparsed.
    pub fn read(hub: &HubSpec, branch: Option<&str>, state: &Path) -> Result<OnBranch, Error> {
        let what = |branch: &str| format!("{FILE} on branch `{branch}` of {}", hub.url());
        let failed = |e: crate::git::command::GitError| Error::failure(e.to_string()).caused_by(e);
        match hub {
            HubSpec::Local(dir) => {
                if let Some((branch, text)) = crate::git::hub::local_file(dir, branch, FILE) {
                    return Ok(OnBranch {
                        text,
                        what: what(&branch),
                        branch,
                        schedules: None,
                    });
                }
                let repo = Repo::new(dir);
                let branch = match branch {
                    Some(b) => b.to_owned(),
                    None => crate::git::hub::local_head(&repo)?,
                };
                let text = repo
                    .file_at(&format!("refs/heads/{branch}"), FILE)
                    .map_err(failed)?;
                Ok(OnBranch {
                    text,
                    what: what(&branch),
                    branch,
                    schedules: None,
                })
            }
            HubSpec::Remote(url) => {
                let branch = match branch {
                    Some(b) => b.to_owned(),
                    None => crate::git::hub::remote_head(url)?,
                };
                let (made, tip) = ScratchRepo::tip(state, url, &branch)?;
                // `None`: no branch yet, so no settings; opening the hub says so.
                let (text, schedules) = match tip {
                    Some(tip) => text_and_schedules(&made.repo(), &tip).map_err(failed)?,
                    None => (None, false),
                };
                Ok(OnBranch {
                    text,
                    what: what(&branch),
                    branch,
                    schedules: Some(schedules),
                })
            }
        }
    }

    /// The settings `file` holds, or the defaults when there is none.
    pub fn parse(file: &OnBranch) -> Result<Settings, Error> {
        let Some(text) = &file.text else {
            return Ok(Settings::default());
        };
        let settings: Settings = toml::from_str(text).map_err(|e| {
            Error::usage(format!(
                "invalid {}: {}",
                file.what,
                crate::error::toml_message(text, &e)
            ))
            .hint("keys: agent, jobs, timeout, prompt_via, stale_after, net_timeout, branch, claims, [tests], [notify]")
        })?;
        settings
            .check()
            .map_err(|e| e.hint(format!("it is in {}", file.what)))?;
        Ok(settings)
    }

    /// The values a key's type lets through but farm cannot use, each
    /// named by its key: found when the file is read, so that `farm run`
    /// and `farm doctor` say the same of it (a bad value was otherwise
    /// named as the flag it stands in for, or not at all).
    fn check(&self) -> Result<(), Error> {
        if let Some(jobs) = self.jobs
            && !(1..=256).contains(&jobs)
        {
            return Err(Error::usage(format!(
                "farm.toml `jobs` = {jobs}: run between 1 and 256 agents"
            ))
            .hint("jobs = 4, say"));
        }
        if let Some(usd) = self.max_cost
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(Error::usage(format!(
                "farm.toml `max_cost` = {usd}: a budget is an amount of dollars above 0"
            ))
            .hint("max_cost = 20, say, or no `max_cost` for no budget"));
        }
        for (key, value) in [
            ("timeout", &self.timeout),
            ("stale_after", &self.stale_after),
            ("net_timeout", &self.net_timeout),
        ] {
            let Some(text) = value else { continue };
            let why = match crate::age::parse_duration(text) {
                Err(e) => e,
                Ok(d) if d.is_zero() => "it must be longer than 0s".to_owned(),
                Ok(_) => continue,
            };
            return Err(Error::usage(format!("farm.toml `{key}` = {text:?}: {why}"))
                .hint("a duration: 90s, 10m, 2h, 1d"));
        }
        if let Some(notify) = &self.notify {
            notify.check()?;
        }
        Ok(())
    }
}

/// What `farm init` writes.
pub const TEMPLATE: &str = r#"# farm.toml — how `farm run` works on this repository. Flags override these.
# farm reads this file from the hub's branch, not from a work tree: commit it.

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

# A git talking to a hub over the network (git://, ssh, https) that moves no
# byte for this long is stopped and tried again.
# net_timeout = "2m"

# The branch agents integrate into (default: the hub's HEAD).
# branch = "main"

# Where claims live: "fs" (current_tasks/ in the hub, one machine) or "git"
# (branch farm/claims of the hub, any machine). Default: fs for a hub on this
# machine, git for a hub given as a URL.
# claims = "fs"

# The project's test suite, for `farm tests`: its command (words, no shell),
# the report's format ("junit", "libtest-json", "tap" or "lines"), the file it
# writes (relative to the clone; default: its standard output), a time limit.
# [tests]
# command = "pytest -q --junitxml=report.xml"
# format = "junit"
# report = "report.xml"
# timeout = "30m"

# A command told of what needs you (a task failed for good, the circuit breaker
# tripped, a long usage-limit wait, the budget spent, the run's end): words, no
# shell, one JSON object on its standard input (see docs/notifications.md).
# [notify]
# command = "curl -fsS -H 'Content-Type: application/json' --data-binary @- https://chat.example/hook"
# limit_wait_over = "10m"
# timeout = "30s"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> OnBranch {
        OnBranch {
            text: Some(text.to_owned()),
            branch: "main".into(),
            what: "farm.toml on branch `main` of /hub".into(),
            schedules: None,
        }
    }

    #[test]
    fn template_parses_and_typos_are_named() {
        assert!(Settings::parse(&file(TEMPLATE)).unwrap().agent.is_none());
        let err = Settings::parse(&file("agnet = \"x\"\n")).unwrap_err();
        assert!(err.message.contains("agnet"), "{}", err.message);
        assert!(
            err.message
                .contains("invalid farm.toml on branch `main` of /hub"),
            "{}",
            err.message
        );
        let s = Settings::parse(&file("prompt_via = \"stdin\"\njobs = 3\n")).unwrap();
        assert_eq!((s.prompt_via, s.jobs), (Some(PromptVia::Stdin), Some(3)));
    }

    #[test]
    fn a_wrong_type_is_named_by_its_line() {
        let err = Settings::parse(&file("agent = \"x\"\njobs = \"many\"\n")).unwrap_err();
        assert!(
            err.message.contains("(line 2: `jobs = \"many\"`)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn no_file_is_the_defaults() {
        let none = OnBranch {
            text: None,
            ..file("")
        };
        assert!(Settings::parse(&none).unwrap().agent.is_none());
    }

    /// The file is read from the branch's tip, not the work tree: a bare
    /// hub has one, and an uncommitted edit does not count.
    #[test]
    fn read_from_the_branch_not_the_work_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path();
        let git = |args: &[&str]| {
            let mut cmd = std::process::Command::new("git");
            crate::git::command::unset_repository_env(&mut cmd);
            let ok = cmd
                .arg("-C")
                .arg(hub)
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@t")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@t")
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(hub.join(FILE), "jobs = 3\n").unwrap();
        git(&["add", FILE]);
        git(&["commit", "-q", "-m", "settings"]);
        std::fs::write(hub.join(FILE), "jobs = 7\n").unwrap();
        let spec = HubSpec::Local(hub.to_path_buf());
        let s = Settings::of_hub(&spec, None, hub).unwrap();
        assert_eq!(s.jobs, Some(3));
        // A branch without the file: the defaults.
        git(&["checkout", "-q", "--orphan", "empty"]);
        git(&["rm", "-q", "-f", "--cached", FILE]);
        git(&["commit", "-q", "--allow-empty", "-m", "empty"]);
        let s = Settings::of_hub(&spec, Some("empty"), hub).unwrap();
        assert_eq!(s.jobs, None);
    }
}
