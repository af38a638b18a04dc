//! The sandbox a session runs in: bubblewrap (`bwrap`), so that an agent
//! that turns hostile can touch its clone and nothing else of yours.
//!
//! What a sandboxed session sees (the profile, in the order bwrap mounts it;
//! a later mount hides what is under it):
//!
//! - the system read-only: `/usr`, `/etc`, `/opt`, the `/bin` and `/lib`
//!   links or directories, and what `/etc/resolv.conf` points to — not
//!   `/home`, `/root`, `/srv`, `/mnt`, `/var` or anything else at the top;
//! - a fresh `/dev` and `/proc`, a private `/tmp` of at most [`TMP_BYTES`];
//! - an empty private `HOME` at the path of yours, into which only the agent
//!   CLI's own config is bound back, read-write (the preset's
//!   `sandbox_home`: `~/.claude`, `~/.codex` …, and the directory its config
//!   variable names): its login survives the night, your `~/.ssh`, git
//!   credentials and cloud tokens are not there;
//! - the agent program's install tree, read-only ([`install_tree`]);
//! - its own clone, read-write; the hub's object store read-only when the
//!   clone borrows it — never the hub's refs, claims, config or hooks, other
//!   clones, or the rest of the state directory;
//! - the paths `--sandbox-bind` adds (read-only unless `:rw`);
//! - a process namespace of its own (it cannot see or signal farm or other
//!   sessions; everything it starts dies with it), no controlling terminal
//!   (a session cannot type into yours), no capabilities;
//! - the network, unless `sandbox_network = false`;
//! - an environment of [`KEPT`], the preset's variables, `--sandbox-env` and
//!   farm's own `FARM_*` — never `SSH_AUTH_SOCK`, git credential helpers or
//!   cloud credentials — and a git identity for its commits.
//!
//! Pushes, fetches and claims stay farm's, outside. Why bwrap: it is small,
//! unprivileged where user namespaces are on, packaged everywhere, and what
//! Flatpak builds on; a container runtime needs a daemon or an image.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::Error;

/// The cap on a session's private `/tmp`.
pub const TMP_BYTES: u64 = 1 << 30;

/// The top-level directories that are "the system", shown read-only.
const SYSTEM: [&str; 11] = [
    "/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/nix", "/snap",
];

/// The variables every sandboxed session keeps (with `LC_*`): what a
/// program needs to find itself, speak the user's language and reach the
/// network through a proxy.
pub const KEPT: [&str; 17] = [
    "PATH",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "NO_COLOR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
];

/// Whether sessions run sandboxed: `--sandbox`/`--no-sandbox`,
/// `FARM_SANDBOX`, farm.toml's `sandbox`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Where bwrap works; else said at start-up, and off.
    Auto,
    /// Always: a run refuses to start where bwrap cannot.
    On,
    /// Never: sessions run as you, with your files.
    Off,
}

/// A path bound into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
}

impl Bind {
    /// `PATH` or `PATH:rw` (`~/` allowed), as `--sandbox-bind` takes it.
    pub fn parse(text: &str) -> Result<Bind, String> {
        let (path, writable) = match text.rsplit_once(':') {
            Some((p, "rw")) => (p, true),
            Some((p, "ro")) => (p, false),
            _ => (text, false),
        };
        let path = crate::run::presets::expand_home(path.trim());
        if !path.is_absolute() {
            return Err(format!(
                "`{text}`: give an absolute path (or ~/…), optionally ending in :rw"
            ));
        }
        Ok(Bind { path, writable })
    }
}

/// What the sandbox is to be, from the flags, farm.toml and the preset;
/// whether it can be is for start-up ([`prepare`]).
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: Mode,
    /// Why that mode (`--no-sandbox`, `farm.toml`, `--wrap` …), for the
    /// start-up line.
    pub why: &'static str,
    pub binds: Vec<Bind>,
    pub network: bool,
    /// The variables kept: the preset's and `--sandbox-env`/`sandbox_env`.
    pub env: Vec<String>,
    /// The agent CLI's own config under the home (the preset's), `~/` expanded.
    pub home: Vec<PathBuf>,
}

/// One run's sandbox: everything but the clone, which each session names.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// The bwrap program.
    pub bwrap: PathBuf,
    /// Whether sessions reach the network.
    pub network: bool,
    /// The user's home: replaced by an empty one.
    pub home: PathBuf,
    /// The agent CLI's own config under it, bound back read-write.
    pub home_binds: Vec<PathBuf>,
    /// What the agent program needs, read-only.
    pub install: Vec<PathBuf>,
    /// `--sandbox-bind`.
    pub binds: Vec<Bind>,
    /// The variables kept besides [`KEPT`] (the preset's, `--sandbox-env`).
    pub env: Vec<String>,
    /// The git identity of the session's commits (name, email).
    pub identity: (String, String),
    /// What no session may see (the hub, the state directory), hidden
    /// again where it lies under a system directory.
    pub private: Vec<PathBuf>,
}

impl Sandbox {
    /// bwrap's words, up to and including `--`, for a session in `clone`
    /// that may also read `read` (its prompt file, the hub's objects) and
    /// write `write` (its own config directory).
    pub fn words(&self, clone: &Path, read: &[PathBuf], write: &[PathBuf]) -> Vec<String> {
        let mut w = Words(vec![self.bwrap.display().to_string()]);
        for dir in SYSTEM {
            let path = Path::new(dir);
            match std::fs::read_link(path) {
                // `/bin` → `usr/bin` on a merged-/usr system: the same link.
                Ok(target) => w.push(&["--symlink"]).path(&target).path(path),
                Err(_) if path.is_dir() => w.push(&["--ro-bind"]).path(path).path(path),
                Err(_) => &mut w,
            };
        }
        for path in &self.private {
            if SYSTEM.iter().any(|s| path.starts_with(s)) {
                w.push(&["--tmpfs"]).path(path);
            }
        }
        // resolv.conf may point into /run (systemd-resolved): DNS needs it.
        if let Ok(target) = std::fs::canonicalize("/etc/resolv.conf")
            && !SYSTEM.iter().any(|s| target.starts_with(s))
        {
            w.push(&["--ro-bind"]).path(&target).path(&target);
        }
        w.push(&["--dev", "/dev", "--proc", "/proc"]);
        w.push(&["--size", &TMP_BYTES.to_string(), "--tmpfs", "/tmp"]);
        w.push(&["--dir", "/var/tmp"]);
        w.push(&["--tmpfs"]).path(&self.home);
        for path in &self.home_binds {
            w.push(&["--bind-try"]).path(path).path(path);
        }
        for path in self.install.iter().chain(read) {
            w.push(&["--ro-bind-try"]).path(path).path(path);
        }
        for bind in &self.binds {
            let how = if bind.writable { "--bind" } else { "--ro-bind" };
            w.push(&[how]).path(&bind.path).path(&bind.path);
        }
        for path in write.iter().chain([&clone.to_path_buf()]) {
            w.push(&["--bind"]).path(path).path(path);
        }
        w.push(&["--chdir"]).path(clone);
        w.push(&["--unshare-all"]);
        if self.network {
            w.push(&["--share-net"]);
        }
        w.push(&[
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--",
        ]);
        w.0
    }

    /// What a command in `dir` runs inside: bwrap's words (see
    /// [`Sandbox::words`]) and its whole environment, from farm's own.
    pub fn confine(
        &self,
        dir: &Path,
        read: &[PathBuf],
        write: &[PathBuf],
    ) -> (Vec<String>, Vec<(String, String)>) {
        (
            self.words(dir, read, write),
            self.environment(std::env::vars_os()),
        )
    }

    /// The session's environment, from farm's own (`vars`): only what the
    /// sandbox keeps, `HOME`, `TMPDIR` and the git identity.
    pub fn environment(
        &self,
        vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = vars
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| {
                KEPT.contains(&k.as_str()) || k.starts_with("LC_") || self.env.contains(k)
            })
            .collect();
        env.push(("HOME".to_owned(), self.home.display().to_string()));
        env.push(("TMPDIR".to_owned(), "/tmp".to_owned()));
        let (name, email) = &self.identity;
        for who in ["AUTHOR", "COMMITTER"] {
            env.push((format!("GIT_{who}_NAME"), name.clone()));
            env.push((format!("GIT_{who}_EMAIL"), email.clone()));
        }
        env
    }

    /// The paths this sandbox would show that hold one of `private` (the
    /// hub, the state directory): an error naming the first, for a bind;
    /// install-tree paths are narrowed to the files they were for
    /// (`files`: the program, the scripts its command names) instead.
    pub fn seal(&mut self, private: &[PathBuf], files: &[PathBuf]) -> Result<(), String> {
        let holds = |path: &Path| private.iter().find(|p| p.starts_with(path));
        if let Some(bind) = self.binds.iter().find(|b| holds(&b.path).is_some()) {
            return Err(format!(
                "--sandbox-bind `{}` holds `{}`, which sessions must not see",
                bind.path.display(),
                holds(&bind.path).unwrap().display()
            ));
        }
        // A directory shown read-write because a kept variable names it
        // (a CLI's config moved there) is held to the same: it must not
        // show the hub or the state directory either.
        if let Some(dir) = self.home_binds.iter().find(|d| holds(d).is_some()) {
            return Err(format!(
                "`{}` holds `{}`, which sessions must not see; a variable the sandbox keeps \
                 (--sandbox-env, sandbox_env) names it",
                dir.display(),
                holds(dir).unwrap().display()
            ));
        }
        // bwrap would refuse it at every session's start: once, now.
        if let Some(bind) = self.binds.iter().find(|b| !b.path.exists()) {
            return Err(format!(
                "--sandbox-bind `{}` does not exist",
                bind.path.display()
            ));
        }
        if self.install.iter().any(|p| holds(p).is_some()) {
            self.install.retain(|p| holds(p).is_none());
            // What lies in a system directory is shown already.
            let outside = files
                .iter()
                .filter(|f| !SYSTEM.iter().any(|s| f.starts_with(s)));
            self.install.extend(outside.cloned());
        }
        self.private = private.to_vec();
        Ok(())
    }

    /// The directories on farm's `PATH` a session cannot see: not system,
    /// not the agent's install tree, not bound.
    fn hidden_path_dirs(&self) -> Vec<PathBuf> {
        let Some(path) = std::env::var_os("PATH") else {
            return Vec::new();
        };
        let mut seen = Vec::new();
        std::env::split_paths(&path)
            .filter(|d| d.is_absolute() && d.is_dir())
            .filter(|d| {
                !seen.contains(d) && {
                    seen.push(d.clone());
                    true
                }
            })
            .filter(|d| {
                !SYSTEM.iter().any(|s| d.starts_with(s))
                    && !self.install.iter().any(|i| d.starts_with(i))
                    && !self.binds.iter().any(|b| d.starts_with(&b.path))
                    && !self.home_binds.iter().any(|b| d.starts_with(b))
            })
            .collect()
    }
}

/// Turn the run's plan into its sandbox, or say why there is none: the
/// start-up line, and the sandbox when on. `argv` is the command that runs
/// inside (the agent's, the tests'): its program's install is shown, and so
/// is the directory of each file its arguments name by absolute path (`sh
/// /opt/agents/run.sh`); `private` is what no session may see (the hub, the
/// state directory); `hub_url` the hub's address, for a word on what the
/// network reaches. An error only when the sandbox was asked for and
/// cannot be.
pub fn prepare(
    plan: &Plan,
    argv: &[String],
    private: &[PathBuf],
    hub_url: &str,
    which: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<(Option<Sandbox>, String), Error> {
    let off = |why: String| {
        Ok((
            None,
            format!("sandbox: off ({why}): sessions run as you, with all your files"),
        ))
    };
    if plan.mode == Mode::Off {
        return off(plan.why.to_owned());
    }
    let bwrap = match which("bwrap") {
        Some(b) => b,
        None if plan.mode == Mode::On => {
            return Err(Error::usage(format!(
                "the sandbox ({}) needs bwrap, which is not installed",
                plan.why
            ))
            .hint(
                "install the package `bubblewrap` (apt, dnf, pacman), or run with --no-sandbox",
            ));
        }
        None => {
            return off(
                "bwrap is not installed: install the package `bubblewrap`, or say --no-sandbox"
                    .to_owned(),
            );
        }
    };
    if let Err(said) = probe(&bwrap) {
        if plan.mode == Mode::On {
            return Err(Error::usage(format!(
                "the sandbox ({}) cannot start here: bwrap says: {said}",
                plan.why
            ))
            .hint("user namespaces may be off (sysctl kernel.unprivileged_userns_clone, or an AppArmor policy); or run with --no-sandbox"));
        }
        return off(format!("bwrap cannot start here: {said}"));
    }
    let program = argv.first().map_or("", String::as_str);
    let found = which(program).unwrap_or_else(|| PathBuf::from(program));
    let mut files = vec![found.clone()];
    let mut install = install_tree(&found, which);
    for arg in argv.iter().skip(1) {
        let path = Path::new(arg);
        if path.is_absolute() && path.is_file() {
            files.push(path.to_path_buf());
            if let Some(dir) = path
                .parent()
                .filter(|d| !install.iter().any(|i| d.starts_with(i)))
            {
                install.push(dir.to_path_buf());
            }
        }
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.parent().is_some())
        .unwrap_or_else(|| PathBuf::from("/nonexistent"));
    let mut home_binds = plan.home.clone();
    // A config directory moved by the CLI's variable is its own config too.
    for var in &plan.env {
        if let Some(dir) = std::env::var_os(var).map(PathBuf::from)
            && dir.is_absolute()
            && dir.is_dir()
        {
            home_binds.push(dir);
        }
    }
    let mut sandbox = Sandbox {
        bwrap,
        network: plan.network,
        home,
        home_binds,
        install,
        binds: plan.binds.clone(),
        env: plan.env.clone(),
        identity: identity(),
        private: Vec::new(),
    };
    sandbox.seal(private, &files).map_err(|e| {
        Error::usage(e).hint("bind a narrower path, or one outside the hub and the state directory")
    })?;
    let mut line = format!(
        "sandbox: on: each session sees its clone, the system read-only, a private home and /tmp{}",
        if plan.network { "" } else { ", no network" }
    );
    let hidden = sandbox.hidden_path_dirs();
    if !hidden.is_empty() {
        line.push_str(&format!(
            "; hidden from it on PATH: {} (--sandbox-bind to show)",
            hidden
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if plan.network && hub_url.starts_with("git://") {
        line.push_str(&format!(
            "; the network reaches {hub_url}: a git daemon that takes unauthenticated pushes takes a session's too"
        ));
    }
    Ok((Some(sandbox), line))
}

/// bwrap's argument list being built.
struct Words(Vec<String>);

impl Words {
    fn push(&mut self, words: &[&str]) -> &mut Words {
        self.0.extend(words.iter().map(|w| (*w).to_owned()));
        self
    }

    fn path(&mut self, path: &Path) -> &mut Words {
        self.0.push(path.display().to_string());
        self
    }
}

/// What the agent program `found` (its path after the `PATH` lookup) needs
/// to run, outside the system directories: the directory it was found in,
/// the install root of what it links to (an npm prefix for a CLI installed
/// with npm, else the real file's directory), and the same for the
/// interpreter its `#!` line names (`node` under nvm, say).
pub fn install_tree(found: &Path, which: impl Fn(&str) -> Option<PathBuf>) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut add = |p: PathBuf| {
        if !SYSTEM.iter().any(|s| p.starts_with(s)) && !paths.contains(&p) {
            paths.push(p);
        }
    };
    if let Some(dir) = found.parent() {
        add(dir.to_path_buf());
    }
    let real = std::fs::canonicalize(found).unwrap_or_else(|_| found.to_path_buf());
    add(install_root(&real));
    if let Some(interpreter) = interpreter(&real).and_then(|i| which(&i)) {
        if let Some(dir) = interpreter.parent() {
            add(dir.to_path_buf());
        }
        let real = std::fs::canonicalize(&interpreter).unwrap_or(interpreter);
        add(install_root(&real));
    }
    paths
}

/// Where the file `real` was installed: the prefix of the outermost
/// `node_modules` above it (`P/lib/node_modules/…` → `P`,
/// `P/node_modules/…` → `P`), else its directory.
fn install_root(real: &Path) -> PathBuf {
    let outermost = real
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last();
    match outermost.and_then(Path::parent) {
        Some(p) if p.file_name().is_some_and(|n| n == "lib") => {
            p.parent().unwrap_or(p).to_path_buf()
        }
        Some(p) => p.to_path_buf(),
        None => real.parent().unwrap_or(real).to_path_buf(),
    }
}

/// The program a script's `#!` line runs: `node` of `#!/usr/bin/env node`,
/// the path of `#!/opt/x/bin/python`.
fn interpreter(script: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?.strip_prefix("#!")?;
    let line = line.lines().next()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if first.ends_with("/env") {
        words.find(|w| !w.starts_with('-')).map(str::to_owned)
    } else {
        Some(first.to_owned())
    }
}

/// Whether bwrap can make the sandbox's namespaces here: `Err` with
/// bwrap's own words when it cannot.
pub fn probe(bwrap: &Path) -> Result<(), String> {
    // In the environment bwrap gets at a session's start (see
    // `Sandbox::environment`), not farm's whole one: a library farm runs
    // under (libfaketime in `LD_PRELOAD`, whose start needs a writable
    // /dev/shm) would fail the probe and never a session.
    let out = Command::new(bwrap)
        .env_clear()
        .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-all",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            "--",
            "true",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", bwrap.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Err(if said.is_empty() {
            format!("`{}` failed ({})", bwrap.display(), out.status)
        } else {
            said
        })
    }
}

/// The git identity farm's own environment or git config gives, else one
/// naming farm.
pub fn identity() -> (String, String) {
    let get = |var: &str, key: &str| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| {
                let out = Command::new("git")
                    .args(["config", "--get", key])
                    .current_dir("/")
                    .output()
                    .ok()?;
                let v = String::from_utf8(out.stdout).ok()?.trim().to_owned();
                (!v.is_empty()).then_some(v)
            })
    };
    (
        get("GIT_AUTHOR_NAME", "user.name").unwrap_or_else(|| "farm agent".to_owned()),
        get("GIT_AUTHOR_EMAIL", "user.email").unwrap_or_else(|| "agent@farm.invalid".to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> Sandbox {
        Sandbox {
            bwrap: "/usr/bin/bwrap".into(),
            network: true,
            home: "/home/u".into(),
            home_binds: vec!["/home/u/.claude".into()],
            install: vec!["/home/u/.nvm/v20".into()],
            binds: vec![Bind::parse("/var:rw").unwrap()],
            env: vec!["ANTHROPIC_API_KEY".into()],
            identity: ("n".into(), "e@x".into()),
            private: Vec::new(),
        }
    }

    /// The index of `words` (consecutive) in `all`.
    fn at(all: &[String], words: &[&str]) -> usize {
        all.windows(words.len())
            .position(|w| w.iter().zip(words).all(|(a, b)| a == b))
            .unwrap_or_else(|| panic!("{words:?} not in {all:?}"))
    }

    #[test]
    fn the_clone_is_writable_over_a_private_home_and_tmp() {
        let w = sandbox().words(Path::new("/s/clones/a"), &["/s/p.md".into()], &[]);
        let home = at(&w, &["--tmpfs", "/home/u"]);
        assert!(home < at(&w, &["--bind-try", "/home/u/.claude", "/home/u/.claude"]));
        assert!(
            home < at(
                &w,
                &["--ro-bind-try", "/home/u/.nvm/v20", "/home/u/.nvm/v20"]
            )
        );
        at(&w, &["--ro-bind-try", "/s/p.md", "/s/p.md"]);
        at(&w, &["--bind", "/var", "/var"]);
        let clone = at(&w, &["--bind", "/s/clones/a", "/s/clones/a"]);
        assert!(at(&w, &["--tmpfs", "/tmp"]) < clone);
        at(&w, &["--chdir", "/s/clones/a"]);
        at(&w, &["--unshare-all", "--share-net"]);
        assert_eq!(w.last().unwrap(), "--");
        // Nothing of / but the system: not the state dir, not the home.
        assert!(!w.windows(2).any(|p| p[0] == "--ro-bind" && p[1] == "/"));
    }

    #[test]
    fn without_the_network_the_namespace_stays_unshared() {
        let mut s = sandbox();
        s.network = false;
        let w = s.words(Path::new("/c"), &[], &[]);
        assert!(!w.contains(&"--share-net".to_owned()));
        at(&w, &["--unshare-all"]);
    }

    #[test]
    fn the_environment_is_filtered() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("ANTHROPIC_API_KEY", "k"),
            ("HOME", "/home/u"),
            ("GIT_ASKPASS", "/bin/pw"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let env = sandbox().environment(vars.into_iter());
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        for kept in [
            "PATH",
            "LC_ALL",
            "ANTHROPIC_API_KEY",
            "HOME",
            "GIT_AUTHOR_NAME",
        ] {
            assert!(names.contains(&kept), "{kept} lost: {names:?}");
        }
        for gone in ["SSH_AUTH_SOCK", "AWS_SECRET_ACCESS_KEY", "GIT_ASKPASS"] {
            assert!(!names.contains(&gone), "{gone} kept: {names:?}");
        }
    }

    #[test]
    fn a_bind_holding_the_hub_is_refused_and_an_install_tree_narrowed() {
        let mut s = sandbox();
        s.binds = vec![Bind::parse("/srv").unwrap()];
        let err = s.seal(&["/srv/hub".into()], &["/x".into()]).unwrap_err();
        assert!(err.contains("`/srv`") && err.contains("/srv/hub"), "{err}");
        let mut s = sandbox();
        s.install = vec!["/tmp/t".into()];
        s.seal(
            &["/tmp/t/state".into()],
            &["/usr/bin/sh".into(), "/tmp/t/agent".into()],
        )
        .unwrap();
        assert_eq!(s.install, [PathBuf::from("/tmp/t/agent")]);
    }

    /// Regression: a directory a kept variable names was bound read-write
    /// unchecked, so one that held the hub or the state directory showed
    /// them to every session, round the refusal of such a bind.
    #[test]
    fn a_kept_variables_directory_holding_the_state_dir_is_refused() {
        let mut s = sandbox();
        s.home_binds.push("/srv/work".into());
        let err = s.seal(&["/srv/work/state".into()], &[]).unwrap_err();
        assert!(
            err.contains("`/srv/work`")
                && err.contains("/srv/work/state")
                && err.contains("--sandbox-env"),
            "{err}"
        );
        let mut s = sandbox();
        s.home_binds.push("/srv/config".into());
        s.seal(&["/srv/work/state".into()], &[]).unwrap();
    }

    #[test]
    fn a_bind_of_nothing_is_refused_at_once() {
        let mut s = sandbox();
        s.binds = vec![Bind::parse("/no/such/dir/for/farm").unwrap()];
        let err = s.seal(&[], &[]).unwrap_err();
        assert!(
            err.contains("`/no/such/dir/for/farm` does not exist"),
            "{err}"
        );
    }

    #[test]
    fn binds_parse_with_their_access() {
        assert_eq!(
            Bind::parse("/a/b:rw").unwrap(),
            Bind {
                path: "/a/b".into(),
                writable: true
            }
        );
        assert!(!Bind::parse("/a").unwrap().writable);
        assert!(Bind::parse("rel/x").unwrap_err().contains("absolute"));
    }

    #[test]
    fn an_npm_install_is_bound_whole() {
        let t = tempfile::tempdir().unwrap();
        let prefix = t.path().join("npm");
        let pkg = prefix.join("lib/node_modules/@x/cli");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::write(pkg.join("cli.js"), "#!/usr/bin/env node\n").unwrap();
        std::os::unix::fs::symlink(pkg.join("cli.js"), prefix.join("bin/cli")).unwrap();
        let node = t.path().join("nvm/bin/node");
        std::fs::create_dir_all(node.parent().unwrap()).unwrap();
        std::fs::write(&node, "").unwrap();
        let paths = install_tree(&prefix.join("bin/cli"), |name| {
            (name == "node").then(|| node.clone())
        });
        let real = |p: PathBuf| std::fs::canonicalize(p).unwrap();
        assert!(paths.contains(&real(prefix.clone())), "{paths:?}");
        assert!(paths.contains(&real(t.path().join("nvm/bin"))), "{paths:?}");
    }
}
