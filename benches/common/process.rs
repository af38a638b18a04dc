//! Running git and farm from the benches: a hermetic environment, and
//! commands whose failure says what failed. Shared by the benches that
//! build hubs (`#[path = "common/process.rs"] mod process;`).

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

pub type Res<T> = Result<T, String>;

/// Every process a bench starts gets these: no user or system git config,
/// and an identity for commits.
pub const GIT_ENV: [(&str, &str); 7] = [
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_AUTHOR_NAME", "Farm Bench"),
    ("GIT_AUTHOR_EMAIL", "bench@farm.invalid"),
    ("GIT_COMMITTER_NAME", "Farm Bench"),
    ("GIT_COMMITTER_EMAIL", "bench@farm.invalid"),
    ("LC_ALL", "C"),
];

/// farm's own settings, which must not leak in from the caller.
pub const FARM_ENV: [&str; 8] = [
    "FARM_HUB",
    "FARM_CLAIMS",
    "FARM_STATE_DIR",
    "FARM_AGENT",
    "FARM_TASK",
    "FARM_HOST",
    "FARM_CLAIM",
    "FARM_ATTEMPT",
];

/// `program` with the bench's environment and no stdin.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.envs(GIT_ENV).env("NO_COLOR", "1").stdin(Stdio::null());
    for key in FARM_ENV {
        cmd.env_remove(key);
    }
    cmd
}

/// Run `cmd` to its end; its stdout if it succeeded.
pub fn output(cmd: &mut Command, what: &str) -> Res<String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `git -C dir ARGS…`; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> Res<String> {
    output(
        command("git").arg("-C").arg(dir).args(args),
        &format!("git {} in {}", args.join(" "), dir.display()),
    )
}
