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

/// `program` with the bench's environment and no stdin. Sessions run
/// unsandboxed (`FARM_SANDBOX=off`): the benches' agents are scripts in
/// their temp dirs, which the sandbox hides, and what the sandbox costs is
/// `benches/sandbox.rs`'s to measure (it asks for it by flag).
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.envs(GIT_ENV)
        .env("NO_COLOR", "1")
        .env("FARM_SANDBOX", "off")
        .stdin(Stdio::null());
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

pub fn write_file(path: &Path, text: &str) -> Res<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

pub fn write_executable(path: &Path, text: &str) -> Res<()> {
    use std::os::unix::fs::PermissionsExt;
    write_file(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

/// The last `n` lines of a log, for failure messages.
pub fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    format!(
        "--- {} (last {n} lines)\n{}",
        log.display(),
        lines[from..].join("\n")
    )
}

/// A hub: `git init -b main`, an empty commit, `farm init` (by the `farm`
/// binary given), then `files` (path, text) in one commit.
pub fn make_hub(farm: &str, dir: &Path, files: &[(String, String)]) -> Res<()> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    git(dir, &["init", "-q", "-b", "main"])?;
    git(dir, &["commit", "-q", "--allow-empty", "-m", "root"])?;
    output(
        command(farm).args(["-q", "init", "--hub"]).arg(dir),
        "farm init",
    )?;
    for (rel, text) in files {
        write_file(&dir.join(rel), text)?;
    }
    git(dir, &["add", "--all"])?;
    git(dir, &["commit", "-q", "--allow-empty", "-m", "the board"])?;
    Ok(())
}

/// Child processes killed (and reaped) when the bench lets go of them,
/// on failure too.
pub struct Workers(pub Vec<std::process::Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
