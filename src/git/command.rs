//! The hub and the clones, through the `git` command.
//!
//! Every push and fetch shells out (design note 7), as does whatever a
//! clone's in-process work ([`super::workdir`], git2) leaves to the CLI: the
//! CLI brings the user's ssh config and credential helpers and runs hooks, and
//! libgit2's local transport lost concurrent pushes where the CLI did not. A
//! push is judged ref by ref from `git push --porcelain`, never by its exit
//! code alone, and no refspec is ever forced.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::git::maintain;

/// How long a push that ended without a full report may take to settle:
/// its receive-pack and hooks, left running, may still update the hub's
/// refs until they exit.
const PUSH_SETTLES: Duration = Duration::from_secs(600);

/// The receive-pack of a push to a hub on this machine: one that runs no
/// automatic gc after it. git's (`receive.autogc`) detaches, keeping the
/// push's open files — the hub's push lock among them, which every push
/// inherits (see [`Repo::push_refs_holding`]) — so every farm push on this
/// host waited for the hub's gc to end. farm looks after the hub itself,
/// after the push and with the lock let go (see `git/maintain.rs`).
const LOCAL_RECEIVE_PACK: &str = "--receive-pack=git -c receive.autogc=false receive-pack";

/// [`LOCAL_RECEIVE_PACK`], storing the objects it writes loose
/// uncompressed (see [`maintain::store_pushed_loose`]).
const LOCAL_RECEIVE_PACK_STORED: &str =
    "--receive-pack=git -c receive.autogc=false -c core.looseCompression=0 receive-pack";

/// The receive-pack of a push to the hub on this machine at `remote` (a
/// path, or a `file://` URL): its config is read once a process.
fn local_receive_pack(remote: &str) -> &'static str {
    static STORED: std::sync::Mutex<BTreeMap<String, bool>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut known = STORED.lock().unwrap_or_else(|e| e.into_inner());
    let stored = *known.entry(remote.to_owned()).or_insert_with(|| {
        let dir = remote.strip_prefix("file://").unwrap_or(remote);
        Repo::new(Path::new(dir))
            .config_matching(maintain::SETTINGS)
            .is_ok_and(|settings| maintain::store_pushed_loose(&settings))
    });
    if stored {
        LOCAL_RECEIVE_PACK_STORED
    } else {
        LOCAL_RECEIVE_PACK
    }
}

/// The variables by which git names a repository, its index and work tree
/// (`git rev-parse --local-env-vars`, less the configuration ones). farm run
/// from a git hook, `git rebase -x` or `git bisect run` inherits them naming
/// the user's repository: farm's git commands, and its agents', must work
/// where farm says instead. Configuration given in the environment
/// (`GIT_CONFIG_COUNT`, `GIT_CONFIG_PARAMETERS`) is the user's and is kept:
/// dropping it silently lost a `core.hooksPath` set that way.
const REPOSITORY_ENV: [&str; 12] = [
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
];

/// Keep `cmd` from inheriting [`REPOSITORY_ENV`].
pub fn unset_repository_env(cmd: &mut Command) -> &mut Command {
    for var in REPOSITORY_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// A failed git command: what was run, and what git said.
#[derive(Debug, thiserror::Error)]
#[error("`git {args}` failed in `{}`: {said}", dir.display())]
pub struct GitError {
    pub args: String,
    pub dir: PathBuf,
    pub said: String,
    /// The failure looks like the network or the remote's server, not the
    /// repository: trying again later may succeed.
    pub transient: bool,
    /// git was killed by this signal: it failed for nothing the repository
    /// would do again.
    pub signal: Option<i32>,
}

/// git's arguments as text (lossily: they are shown, or matched against
/// farm's own).
fn strings<I, S>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    args.into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// Whether git `args` only reads (the repository, or a remote's refs):
/// such a git, killed, is safe to run again. The subcommands farm runs
/// that way; `config` and `symbolic-ref` in their reading forms.
fn reads<I, S>(args: I) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    match args.first().map(String::as_str) {
        Some(
            "cat-file" | "cherry" | "diff" | "for-each-ref" | "log" | "ls-files" | "ls-remote"
            | "ls-tree" | "merge-base" | "rev-list" | "rev-parse" | "show" | "show-ref",
        ) => true,
        Some("config") => args.iter().any(|a| a.starts_with("--get")),
        Some("symbolic-ref") => {
            args.len() <= 4
                && args.iter().any(|a| a == "HEAD")
                && args
                    .iter()
                    .skip(1)
                    .all(|a| a.starts_with('-') || a == "HEAD")
        }
        _ => false,
    }
}

impl GitError {
    /// A git killed by a signal (the OOM killer, a user, a chaos test)
    /// failed for nothing the repository would do again: transient.
    fn killed(mut self, status: &std::process::ExitStatus) -> GitError {
        if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(status) {
            self.transient = true;
            self.signal = Some(signal);
            if self.said.is_empty() {
                self.said = format!("git was killed by signal {signal}");
            }
        }
        self
    }
}

/// What git prints when it could not talk to a remote, or lost it halfway.
const TRANSIENT: [&str; 21] = [
    "Operation too slow",
    "Could not read from remote repository",
    "expected flush after",
    "protocol error",
    "bad pack header",
    "unexpected disconnect",
    "RPC failed",
    "unable to read from",
    "unable to connect",
    "Connection refused",
    "Connection reset",
    "Connection timed out",
    "timed out",
    "early EOF",
    "remote end hung up",
    "unable to access",
    "Could not resolve host",
    "Network is unreachable",
    "Broken pipe",
    "The requested URL returned error: 5",
    "index-pack failed",
];

/// The longest [`GitError::said`] kept, in characters: a message is one
/// line of an error, not a log.
const MAX_SAID: usize = 2000;

/// What git wrote to stderr, as one line for a message: every line kept
/// (the last one alone was often the tail of a sentence, and the file
/// named before it lost), lines wrapped within one message joined with a
/// space, messages with `; `. Each `fatal:`, `error:` or `warning:` line
/// starts a message, untagged lines after it continue it; a run of `hint:`
/// or `remote:` lines is one wrapped text. `error:` and `fatal:` are
/// dropped (the message says it failed); the others are kept, once a run.
fn said(stderr: &str) -> String {
    const TAGS: [&str; 5] = ["fatal:", "error:", "warning:", "hint:", "remote:"];
    let mut out = String::new();
    let mut tag: Option<&str> = None;
    let mut open = false;
    for raw in stderr.lines() {
        // Progress rewrites its line with `\r`: only the last state counts.
        let line = raw.rsplit('\r').next().unwrap_or_default().trim();
        let (t, text) = match TAGS.iter().find_map(|t| Some((*t, line.strip_prefix(t)?))) {
            Some((t, rest)) => (Some(t), rest.trim()),
            None => (None, line),
        };
        if text.is_empty() {
            open = false; // a blank line (or a bare `hint:`) ends a message
            continue;
        }
        let wraps = t.is_none() || (t == tag && matches!(t, Some("hint:" | "remote:")));
        if open && wraps {
            out.push(' ');
            out.push_str(text);
            continue;
        }
        if !out.is_empty() {
            let sentence_ended = out.ends_with(['.', '!', '?', ':']);
            out.push_str(if sentence_ended { " " } else { "; " });
        }
        if let Some(t) = t.filter(|t| Some(*t) != tag && !matches!(*t, "fatal:" | "error:")) {
            out.push_str(t);
            out.push(' ');
        }
        out.push_str(text);
        tag = t;
        open = true;
    }
    if out.chars().count() > MAX_SAID {
        out = out.chars().take(MAX_SAID).collect();
        out.push_str("...");
    }
    out
}

/// How long a git talking to a remote over the network may move no byte
/// before it is stopped (see [`super::watchdog`]), unless `farm run` was
/// told otherwise (`--net-timeout`, farm.toml's `net_timeout`).
pub const NET_TIMEOUT: Duration = Duration::from_secs(120);

/// [`NET_TIMEOUT`] as this process was told, in milliseconds. One setting
/// for the process, not a field of each [`Repo`]: the remote is reached
/// from the hub, the claim stores and every clone alike, and what a
/// silent remote is does not depend on which of them talks to it.
static NET_TIMEOUT_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(NET_TIMEOUT.as_millis() as u64);

/// Set how long a network git may stay silent (see [`NET_TIMEOUT`]).
pub fn set_net_timeout(quiet: Duration) {
    let ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX).max(1);
    NET_TIMEOUT_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

fn net_timeout() -> Duration {
    Duration::from_millis(NET_TIMEOUT_MS.load(std::sync::atomic::Ordering::Relaxed))
}

/// The remote a git talking to one names (`clone`, `fetch`, `push`,
/// `ls-remote`, after any `-c <key>=<value>`: the first word that is not
/// an option), if any.
fn remote_of(mut args: &[String]) -> Option<&str> {
    while let [c, _, rest @ ..] = args
        && c == "-c"
    {
        args = rest;
    }
    let (sub, rest) = args.split_first()?;
    if !matches!(sub.as_str(), "clone" | "fetch" | "push" | "ls-remote") {
        return None;
    }
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            return words.next().map(String::as_str);
        }
        if word.starts_with('-') {
            // The options farm gives with their value as the next word.
            if matches!(
                word.as_str(),
                "--branch" | "-b" | "--depth" | "--config" | "-c" | "-o" | "--origin"
            ) {
                words.next();
            }
            continue;
        }
        return Some(word);
    }
    None
}

/// The host (with its port, if any) of `remote` when it is reached over
/// the network: `scheme://[user@]host[:port]/…` (not `file://`) or git's
/// scp-like `[user@]host:path` (a colon before any slash). `None` for a
/// path on this machine, which needs no watchdog.
pub fn network_host(remote: &str) -> Option<String> {
    let authority = match remote.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("file") => return None,
        Some((_, rest)) => rest.split('/').next().unwrap_or(rest),
        None => {
            let (before, _) = remote.split_once(':')?;
            if before.contains('/') {
                return None;
            }
            before
        }
    };
    let host = authority.rsplit('@').next().unwrap_or(authority);
    (!host.is_empty()).then(|| host.to_owned())
}

/// Whether the user's own configuration — system, global, or given in the
/// environment, not a repository's — names a hooks directory by an
/// absolute path: its hooks are the user's, and run in the clones as in any
/// repository. Asked once per process.
fn users_hooks() -> bool {
    static USERS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USERS.get_or_init(|| {
        let mut cmd = Command::new("git");
        unset_repository_env(&mut cmd);
        let out = cmd
            .args(["config", "--show-scope", "--get-all", "core.hooksPath"])
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let Ok(out) = out else { return false };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .rfind(|(scope, _)| !matches!(*scope, "local" | "worktree"))
            .is_some_and(|(_, path)| Path::new(path).is_absolute())
    })
}

/// One repository (a clone or the hub) that git commands run in.
#[derive(Debug, Clone)]
pub struct Repo {
    dir: PathBuf,
    /// An agent works in this repository: its hooks are not farm's to run.
    agents: bool,
}

/// One ref of a push, as `git push --porcelain` reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// ` ` fast-forward, `*` new ref, `-` deleted, `=` already there,
    /// `!` rejected (`+`, a forced update, farm never asks for).
    pub flag: char,
    /// The remote ref (`refs/heads/main`).
    pub to: String,
    /// What git said (`1a2b..3c4d`, `[rejected] (fetch first)`).
    pub summary: String,
}

impl RefUpdate {
    pub fn rejected(&self) -> bool {
        self.flag == '!'
    }

    /// Rejected because the remote ref moved on, or was being moved by
    /// another push at the same moment: fetch and try again.
    pub fn moved(&self) -> bool {
        self.rejected() && (moved_on(&self.summary) || self.raced())
    }

    /// Rejected by the remote's own compare-and-swap: another push updated
    /// a ref of this push in the same instant. An atomic push says so for
    /// all of its refs, whichever of them it was.
    pub fn raced(&self) -> bool {
        self.rejected() && raced(&self.summary)
    }

    /// The hub's lock file that kept this ref from moving (`…/main.lock`),
    /// when git named one: a push still running, or one cut by a kill that
    /// left its lock behind — which then refuses every push of the ref.
    pub fn lock_file(&self) -> Option<&str> {
        if !self.rejected() {
            return None;
        }
        let (_, rest) = self.summary.split_once("Unable to create '")?;
        let (path, _) = rest.split_once("': File exists")?;
        Some(path)
    }
}

/// Give the rejected refs of `updates` the reasons that git said only on
/// stderr, in `remote:` lines the porcelain report lacks: a ref lock
/// (`cannot lock ref '<ref>': Unable to create '<path>': File exists`, where
/// the report says "atomic transaction failed"), so that
/// [`RefUpdate::lock_file`] sees it; and why the hub could not unpack the
/// push (the report says only "unpacker error"; a full disk says "No space
/// left on device" there).
fn explain_rejections(updates: &mut [RefUpdate], stderr: &str) {
    let unpack: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("remote: "))
        .filter_map(|l| {
            l.strip_prefix("fatal: ")
                .or_else(|| l.strip_prefix("error: "))
        })
        .map(str::trim_end)
        .collect();
    if !unpack.is_empty() {
        for u in updates
            .iter_mut()
            .filter(|u| u.rejected() && u.summary.contains("unpacker error"))
        {
            u.summary = format!("[remote rejected] (unpacker error: {})", unpack.join("; "));
        }
    }
    for line in stderr.lines() {
        let Some((_, rest)) = line.split_once("cannot lock ref '") else {
            continue;
        };
        let Some((name, why)) = rest.split_once("': ") else {
            continue;
        };
        for u in updates.iter_mut().filter(|u| u.rejected() && u.to == name) {
            u.summary = format!("[remote rejected] (cannot lock ref: {})", why.trim_end());
        }
    }
}

/// How a push went, ref by ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Every ref was updated (or already up to date).
    Ok,
    /// At least one ref was rejected; `(ref, reason)` for each.
    Rejected(Vec<(String, String)>),
}

impl Pushed {
    pub fn from_updates(updates: &[RefUpdate]) -> Pushed {
        let rejected: Vec<(String, String)> = updates
            .iter()
            .filter(|u| u.rejected())
            .map(|u| (u.to.clone(), u.summary.clone()))
            .collect();
        if rejected.is_empty() {
            Pushed::Ok
        } else {
            Pushed::Rejected(rejected)
        }
    }

    /// True when every rejection only means the remote moved on (fetch,
    /// integrate again); false for refusals that retrying cannot fix.
    pub fn only_moved(&self) -> bool {
        match self {
            Pushed::Ok => true,
            Pushed::Rejected(refs) => refs.iter().all(|(_, why)| moved_on(why) || raced(why)),
        }
    }
}

impl Repo {
    pub fn new(dir: impl Into<PathBuf>) -> Repo {
        Repo {
            dir: dir.into(),
            agents: false,
        }
    }

    /// A repository an agent works in (its private clone): farm's git
    /// commands there run no hook the agent could have planted — in
    /// `.git/hooks`, or wherever the clone's own config points
    /// `core.hooksPath` (see [`users_hooks`] for the user's own). A failing
    /// `pre-push` hook so planted made every push fail, the recovery's
    /// rescue push too, at every restart. `-c` reaches this git and what it
    /// runs in this repository only: a hub on this machine is reached by a
    /// `receive-pack` started with git's repository variables cleared, so
    /// the hub's own hooks still run.
    pub fn of_agent(dir: impl Into<PathBuf>) -> Repo {
        Repo {
            dir: dir.into(),
            agents: true,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("git");
        unset_repository_env(&mut cmd);
        cmd.arg("-C").arg(&self.dir);
        if self.agents && !users_hooks() {
            cmd.args(["-c", "core.hooksPath=/dev/null"]);
        }
        cmd.args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        // An https remote that stalls (under 1 KB/s for a minute) is given
        // up on, and then tried again as a remote that did not answer; the
        // user's own settings win. (ssh: ServerAliveInterval in ~/.ssh/config.)
        for (key, value) in [
            ("GIT_HTTP_LOW_SPEED_LIMIT", "1000"),
            ("GIT_HTTP_LOW_SPEED_TIME", "60"),
        ] {
            if std::env::var_os(key).is_none() {
                cmd.env(key, value);
            }
        }
        cmd
    }

    /// Run git; a git that only reads (see [`reads`]) and was killed by a
    /// signal is run again, at most [`READ_AGAIN`](crate::git::killed::READ_AGAIN) times: its answer was
    /// lost, not refused. The answer of a git still killed then carries
    /// the signal (callers judging exit codes must check it).
    fn output<I, S>(&self, args: I) -> Result<Output, GitError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let once = || {
            let (out, stalled) = self.exec(&mut self.command(args.clone()), args.clone())?;
            match stalled {
                Some(host) => Err(self.stalled(args.clone(), &host, &out)),
                None => Ok(out),
            }
        };
        let mut out = once()?;
        if reads(args.clone()) {
            for _ in 0..crate::git::killed::READ_AGAIN {
                if std::os::unix::process::ExitStatusExt::signal(&out.status).is_none() {
                    break;
                }
                out = once()?;
            }
        }
        Ok(out)
    }

    /// Run `cmd` (git `args`) to its end; a git talking to a remote over
    /// the network under the watchdog (see [`super::watchdog`]): its output,
    /// and the remote's host when the watchdog stopped it.
    fn exec<I, S>(&self, cmd: &mut Command, args: I) -> Result<(Output, Option<String>), GitError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let host = remote_of(&strings(args.clone())).and_then(network_host);
        let Some(host) = host else {
            let out = cmd.output().map_err(|e| self.error(args, e.to_string()))?;
            return Ok((out, None));
        };
        let (out, stalled) = super::watchdog::output(cmd, net_timeout())
            .map_err(|e| self.error(args, e.to_string()))?;
        Ok((out, stalled.then_some(host)))
    }

    /// The error of a git the watchdog stopped: it failed for the network,
    /// and is tried again as a remote that did not answer.
    fn stalled<I, S>(&self, args: I, host: &str, out: &Output) -> GitError
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let quiet = net_timeout();
        let mut e = self.error(args, String::from_utf8_lossy(&out.stderr).into_owned());
        let stopped = format!(
            "no byte came from or went to `{host}` for {}, so git was stopped (--net-timeout)",
            crate::age::Age(quiet)
        );
        e.said = if e.said.is_empty() {
            stopped
        } else {
            format!("{stopped}; {}", e.said)
        };
        e.transient = true;
        e
    }

    /// Like [`Repo::output`], for a git whose exit code is its answer: a
    /// git killed before it could answer is an error, not a "no".
    fn answer<I, S>(&self, args: I) -> Result<Output, GitError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let out = self.output(args.clone())?;
        if std::os::unix::process::ExitStatusExt::signal(&out.status).is_some() {
            return Err(self.failed(args, &out));
        }
        Ok(out)
    }

    /// The error of a git that ran and failed: what it said, and whether
    /// it was killed (see [`GitError::killed`]).
    fn failed<I, S>(&self, args: I, out: &Output) -> GitError
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        self.error(args, said).killed(&out.status)
    }

    fn error<I, S>(&self, args: I, said: String) -> GitError
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        GitError {
            args: strings(args).join(" "),
            dir: self.dir.clone(),
            transient: TRANSIENT.iter().any(|t| said.contains(t)),
            said: self::said(&said),
            signal: None,
        }
    }

    /// Run git; its stdout (trimmed) on success.
    pub fn run<I, S>(&self, args: I) -> Result<String, GitError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let out = self.output(args.clone())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
        } else {
            Err(self.failed(args, &out))
        }
    }

    /// Run git with `input` on its stdin and `env` set; its stdout, untrimmed.
    pub fn run_input<I, S>(
        &self,
        args: I,
        env: &[(&str, &str)],
        input: &[u8],
    ) -> Result<Vec<u8>, GitError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        use std::io::Write;
        let mut cmd = self.command(args.clone());
        cmd.envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| self.error(args.clone(), e.to_string()))?;
        let mut stdin = child.stdin.take().expect("piped");
        // Written from a thread: git may fill its stdout before reading all
        // of its stdin (cat-file --batch does).
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child
            .wait_with_output()
            .map_err(|e| self.error(args.clone(), e.to_string()))?;
        let _ = writer.join();
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(self.failed(args, &out))
        }
    }

    /// Run git; whether it succeeded (for commands whose failure is an answer).
    pub fn check<I, S>(&self, args: I) -> Result<bool, GitError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        Ok(self.answer(args)?.status.success())
    }

    /// Clone branch `branch` of `hub` (a path or a URL) into `dest` (which
    /// must not exist), with `config` (`key=value`) set in the new
    /// repository; `shared`: a local hub's objects are read where they are
    /// (`--shared`). Only that branch is fetched, then and later: a
    /// borrowed object that the hub prunes (a rescue branch deleted) must
    /// not be named by any ref of the clone.
    pub fn clone_from(
        hub: impl AsRef<OsStr>,
        dest: &Path,
        branch: &str,
        shared: bool,
        config: &[&str],
    ) -> Result<Repo, GitError> {
        let parent = Repo::new(dest.parent().unwrap_or(Path::new(".")));
        let mut args = vec![
            OsStr::new("clone"),
            OsStr::new("--quiet"),
            OsStr::new("--single-branch"),
            OsStr::new("--no-tags"),
            OsStr::new("--branch"),
            OsStr::new(branch),
        ];
        if shared {
            args.push(OsStr::new("--shared"));
        }
        for setting in config {
            args.extend([OsStr::new("--config"), OsStr::new(setting)]);
        }
        args.extend([hub.as_ref(), dest.as_os_str()]);
        parent.run(args)?;
        Ok(Repo::new(dest))
    }

    /// Clone `url`'s `branch`, one commit deep, to `dest` (git run in this
    /// repository's directory): to read or edit the tip, not its history.
    pub fn clone_tip(&self, url: &str, branch: &str, dest: &Path) -> Result<(), GitError> {
        self.run([
            OsStr::new("clone"),
            OsStr::new("--quiet"),
            OsStr::new("--depth"),
            OsStr::new("1"),
            OsStr::new("--branch"),
            OsStr::new(branch),
            OsStr::new(url),
            dest.as_os_str(),
        ])
        .map(drop)
    }

    /// Fetch `remote_ref` from `remote` into no local ref at all; the commit
    /// it names, or `None` when the remote has no such ref. Concurrent
    /// fetches into one repository do not disturb each other: the answer is
    /// read from `--porcelain` output, not from `FETCH_HEAD`.
    ///
    /// What it brings lands as one pack (`fetch.unpackLimit=1`), which
    /// shows all at once when its index is moved into place: git writes a
    /// small fetch's objects one by one otherwise, newest first, and for a
    /// moment the tip is there and its parent is not — a push made then,
    /// which walks the tip's history, fails (see [`crate::claims::git`]).
    ///
    /// `known`: a commit of the ref's history this repository has (the
    /// tip it fetched last). With no local ref, git would otherwise tell
    /// the remote it has nothing, and get the whole history again as a new
    /// pack, kept: on a claims branch of 3,000 commits, 240 ms and ~0.5 MB
    /// of disk for each fetch, against 52 ms with it.
    pub fn fetch_tip(
        &self,
        remote: &str,
        remote_ref: &str,
        known: Option<&str>,
    ) -> Result<Option<String>, GitError> {
        let Some(tip) = known.filter(|k| valid_oid(k)) else {
            return self.fetch_tip_with(&[], remote, remote_ref);
        };
        match self.fetch_tip_with(&[&format!("--negotiation-tip={tip}")], remote, remote_ref) {
            // The commit is not here after all (the cache was swept, say):
            // git refuses the option; fetch as if nothing were known.
            Err(e) if !e.transient && e.said.contains(tip) => {
                self.fetch_tip_with(&[], remote, remote_ref)
            }
            fetched => fetched,
        }
    }

    /// [`Repo::fetch_tip`], with only the tip's commit and tree (`--depth
    /// 1`): to read a file of the tip, not to build on it.
    pub fn fetch_tip_shallow(
        &self,
        remote: &str,
        remote_ref: &str,
    ) -> Result<Option<String>, GitError> {
        self.fetch_tip_with(&["--depth=1"], remote, remote_ref)
    }

    fn fetch_tip_with(
        &self,
        extra: &[&str],
        remote: &str,
        remote_ref: &str,
    ) -> Result<Option<String>, GitError> {
        let mut args = vec![
            "-c",
            "fetch.unpackLimit=1",
            "fetch",
            "--porcelain",
            "--no-tags",
            "--no-auto-gc",
        ];
        args.extend(extra);
        args.extend([remote, remote_ref]);
        let args = &args;
        let out = self.output(args)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if stderr.contains("couldn't find remote ref") {
                return Ok(None);
            }
            return Err(self.failed(args, &out));
        }
        // `<flag> <old> <new> <local ref>`
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .find_map(|l| {
                let mut f = l.get(2..)?.split(' ');
                let (_old, new) = (f.next()?, f.next()?);
                valid_oid(new).then(|| new.to_owned())
            })
            .map(Some)
            .ok_or_else(|| self.error(args, format!("no tip in `git fetch` output: {stdout}")))
    }

    /// The text of the file `path` in the commit `rev`; `None` when there
    /// is no such commit, or no such file in it (a directory is none).
    pub fn file_at(&self, rev: &str, path: &str) -> Result<Option<String>, GitError> {
        let Some(commit) = self.rev(rev)? else {
            return Ok(None);
        };
        let listing = self.run(["ls-tree", &commit, "--", path])?;
        // `<mode> <type> <oid>\t<path>`
        let blob = listing.lines().find_map(|l| {
            let mut f = l.split_once('\t')?.0.split(' ');
            let (_mode, kind, oid) = (f.next()?, f.next()?, f.next()?);
            (kind == "blob").then(|| oid.to_owned())
        });
        blob.map(|oid| self.run(["cat-file", "blob", &oid]))
            .transpose()
    }

    pub fn is_bare(&self) -> Result<bool, GitError> {
        Ok(self.run(["rev-parse", "--is-bare-repository"])? == "true")
    }

    /// The branch HEAD points at (`main`), if any.
    pub fn head_branch(&self) -> Result<Option<String>, GitError> {
        let out = self.answer(["symbolic-ref", "--quiet", "--short", "HEAD"])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()))
    }

    pub fn rev(&self, rev: &str) -> Result<Option<String>, GitError> {
        let out = self.answer([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()))
    }

    /// The settings whose names match `regex`, as git sees them (the
    /// user's files and environment included): `(name, value)` pairs.
    pub fn config_matching(&self, regex: &str) -> Result<Vec<(String, String)>, GitError> {
        let out = self.output(["config", "--get-regexp", regex])?;
        // Exit 1: nothing matched.
        if !out.status.success() && out.status.code() != Some(1) {
            return Err(self.failed(["config", "--get-regexp", regex], &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            // A key with no value at all (`[core] splitIndex`) prints alone.
            .map(|l| l.split_once(' ').unwrap_or((l, "")))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    pub fn config_get(&self, key: &str) -> Result<Option<String>, GitError> {
        let out = self.output(["config", "--get", key])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()))
    }

    /// Stage everything and commit it, if there is anything. Returns whether
    /// a commit was made.
    pub fn commit_all(&self, message: &str) -> Result<bool, GitError> {
        self.run(["add", "--all"])?;
        if self.check(["diff", "--cached", "--quiet"])? {
            return Ok(false);
        }
        self.run(["commit", "--quiet", "--no-verify", "-m", message])?;
        Ok(true)
    }

    /// Paths with unresolved merge conflicts.
    pub fn conflicted(&self) -> Result<Vec<String>, GitError> {
        let out = self.run(["diff", "--name-only", "--diff-filter=U"])?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// Push `refspecs` to `remote` and judge every ref from the porcelain
    /// output. Refspecs must not start with `+`: farm never forces.
    pub fn push(&self, remote: &str, refspecs: &[String]) -> Result<Pushed, GitError> {
        Ok(Pushed::from_updates(
            &self.push_refs(remote, refspecs, false)?,
        ))
    }

    /// Push `refspecs`, all or none of them when `atomic`; each ref's report.
    pub fn push_refs(
        &self,
        remote: &str,
        refspecs: &[String],
        atomic: bool,
    ) -> Result<Vec<RefUpdate>, GitError> {
        self.push_refs_holding(remote, refspecs, atomic, &[])
    }

    /// [`Repo::push_refs`], with `hold` — open files carrying OS locks —
    /// kept open by every process of the push: `git push` itself and, on a
    /// hub on this machine, the `receive-pack` and hooks it starts. A lock
    /// so held outlives this process for exactly as long as the push can
    /// still land (see the fs store's fencing). When the push ends without a
    /// report (killed, or the hub hung up), this returns only once every
    /// process of it is gone (or after `PUSH_SETTLES`): what landed is then final, and pushing
    /// again tells (a ref already there reports `=`).
    pub fn push_refs_holding(
        &self,
        remote: &str,
        refspecs: &[String],
        atomic: bool,
        hold: &[BorrowedFd<'_>],
    ) -> Result<Vec<RefUpdate>, GitError> {
        assert!(
            refspecs.iter().all(|r| !r.starts_with('+')),
            "farm never force-pushes"
        );
        let mut args = vec!["push".to_owned(), "--porcelain".to_owned()];
        if atomic {
            args.push("--atomic".to_owned());
        }
        if network_host(remote).is_none() {
            args.push(local_receive_pack(remote).to_owned());
        }
        args.push(remote.to_owned());
        args.extend(refspecs.iter().cloned());
        // The write end of `alive` goes to the push's processes only; it
        // reads end-of-file once the last of them has exited.
        let (alive, alive_w) = std::io::pipe().map_err(|e| self.error(&args, e.to_string()))?;
        let mut inherit: Vec<RawFd> = hold.iter().map(AsRawFd::as_raw_fd).collect();
        inherit.push(alive_w.as_raw_fd());
        let mut cmd = self.command(&args);
        // SAFETY: only fcntl(2), async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &inherit {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let out = self.exec(&mut cmd, &args);
        drop(alive_w);
        let (out, stalled) = out?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut report = parse_porcelain(&stdout);
        if let Some(updates) = &mut report {
            explain_rejections(updates, &stderr);
        }
        // A report comes once the hub has updated (or refused) every ref;
        // without one, what lands is known only when the push has settled.
        if report.is_none() {
            wait_for_eof(alive, PUSH_SETTLES);
        }
        match report {
            // Stopped by the watchdog: judged as a push that lost its
            // remote — a report with a rejection is an answer; anything
            // else may or may not have landed, and pushing again tells.
            Some(updates) if stalled.is_some() && updates.iter().any(RefUpdate::rejected) => {
                Ok(updates)
            }
            _ if let Some(host) = &stalled => Err(self.stalled(&args, host, &out)),
            // Every ref reported pushed, yet git failed talking to the remote:
            // what landed is unknown, so it counts as a failure to talk to
            // it. (A report with rejections is an answer, even though git
            // then hangs up on the remote: it does so for an atomic push.)
            Some(updates)
                if !out.status.success()
                    && updates.iter().all(|u| !u.rejected())
                    && TRANSIENT.iter().any(|t| stderr.contains(t)) =>
            {
                Err(self.error(&args, stderr.into_owned()))
            }
            Some(updates) => Ok(updates),
            // No ref lines at all: git failed before talking to the remote,
            // or was killed (then, settled above, trying again tells).
            None => Err(self.error(&args, stderr.into_owned()).killed(&out.status)),
        }
    }
}

/// Wait until `pipe` reads end-of-file — every holder of its write end has
/// exited — or `at_most` has passed.
fn wait_for_eof(mut pipe: std::io::PipeReader, at_most: Duration) {
    use std::io::Read;
    let until = Instant::now() + at_most;
    let mut buf = [0u8; 64];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut p = libc::pollfd {
            fd: pipe.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut p, 1, ms) };
        if ready > 0 && !matches!(pipe.read(&mut buf), Ok(n) if n > 0) {
            return; // end of file (or an error: nothing more to learn)
        }
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The commit a ref names, read from the repository's files — no process.
/// Loose refs first, then `packed-refs`; `None` when absent or unreadable
/// (callers then ask git itself).
pub fn read_ref(git_dir: &Path, name: &str) -> Option<String> {
    let valid = valid_oid;
    if let Ok(text) = std::fs::read_to_string(git_dir.join(name)) {
        let text = text.trim();
        return valid(text).then(|| text.to_owned());
    }
    let packed = std::fs::read_to_string(git_dir.join("packed-refs")).ok()?;
    packed.lines().find_map(|line| {
        let (sha, refname) = line.split_once(' ')?;
        (refname == name && valid(sha)).then(|| sha.to_owned())
    })
}

/// A rejection because the remote ref is not where the pusher thought.
fn moved_on(why: &str) -> bool {
    why.contains("fetch first") || why.contains("non-fast-forward") || why.contains("stale info")
}

/// A rejection by the remote's ref lock or its old-value check.
fn raced(why: &str) -> bool {
    why.contains("failed to update ref")
        || why.contains("atomic transaction failed")
        || why.contains("cannot lock ref")
        || why.contains("failed to lock")
}

/// A full object id, SHA-1 or SHA-256.
fn valid_oid(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Read `git push --porcelain` output, ref by ref. `None` when it holds no
/// ref lines.
///
/// Ref lines are `<flag>\t<from>:<to>\t<summary>`; flag `!` is a rejection,
/// ` ` `+` `-` `*` `=` are successes (farm never asks for `+`).
pub fn parse_porcelain(out: &str) -> Option<Vec<RefUpdate>> {
    let updates: Vec<RefUpdate> = out
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, '\t');
            let (flag, refs, summary) = (parts.next()?, parts.next()?, parts.next()?);
            let mut chars = flag.chars();
            let (Some(flag), None) = (chars.next(), chars.next()) else {
                return None;
            };
            Some(RefUpdate {
                flag,
                to: refs.rsplit(':').next().unwrap_or(refs).to_owned(),
                summary: summary.to_owned(),
            })
        })
        .collect();
    (!updates.is_empty()).then_some(updates)
}

impl From<GitError> for Error {
    fn from(e: GitError) -> Error {
        let mut err = Error::failure(e.to_string());
        if let Some(signal) = e.signal {
            err = err.hint(format!(
                "git was killed by signal {signal} (out of memory, or by hand?); \
                 the next run recovers the clone"
            ));
        } else if e.transient {
            err = err.hint("the hub did not answer; check that it is reachable (git ls-remote HUB), then run again");
        }
        err.caused_by(e)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_reads_are_run_again_when_killed() {
        for read in [
            &["ls-remote", "--symref", "url", "HEAD"][..],
            &["ls-tree", "abc", "--", "farm.toml"],
            &["cat-file", "blob", "abc"],
            &["rev-parse", "--verify", "--quiet", "x^{commit}"],
            &["symbolic-ref", "--quiet", "--short", "HEAD"],
            &["config", "--get-regexp", "user"],
        ] {
            assert!(reads(read), "{read:?}");
        }
        for write in [
            &["push", "origin", "HEAD"][..],
            &["commit", "-m", "x"],
            &["config", "user.name", "x"],
            &["symbolic-ref", "HEAD", "refs/heads/x"],
            &["update-ref", "refs/heads/x", "abc"],
            &["fetch", "origin", "main"],
            &[],
        ] {
            assert!(!reads(write), "{write:?}");
        }
    }

    use super::*;

    #[test]
    fn only_a_remote_over_the_network_is_watched_and_named_by_its_host() {
        let host = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            remote_of(&args).and_then(network_host)
        };
        let h = |s: &str| Some(s.to_owned());
        assert_eq!(
            host(&[
                "ls-remote",
                "--symref",
                "git://127.0.0.1:9418/hub.git",
                "HEAD"
            ]),
            h("127.0.0.1:9418")
        );
        assert_eq!(
            host(&[
                "push",
                "--porcelain",
                "--atomic",
                "ssh://me@box:22/srv/hub",
                "HEAD:refs/heads/main"
            ]),
            h("box:22")
        );
        assert_eq!(
            host(&[
                "fetch",
                "--porcelain",
                "git@github.com:o/r.git",
                "refs/heads/main"
            ]),
            h("github.com")
        );
        assert_eq!(
            host(&[
                "-c",
                "fetch.unpackLimit=1",
                "fetch",
                "--porcelain",
                "git://h:9418/r",
                "refs/heads/main"
            ]),
            h("h:9418")
        );
        assert_eq!(
            host(&[
                "clone",
                "--quiet",
                "--branch",
                "main",
                "--config",
                "gc.auto=0",
                "https://h/r",
                "/d"
            ]),
            h("h")
        );
        for local in [
            &["push", "/srv/hub", "HEAD:refs/heads/main"][..],
            &["fetch", "file:///srv/hub", "main"],
            &["clone", "--branch", "main", "./a/b:c", "/d"],
            &["push", "origin", "HEAD:refs/heads/main"],
            &["commit", "-m", "git://x/y"],
            &["rev-parse", "HEAD"],
        ] {
            assert_eq!(host(local), None, "{local:?}");
        }
    }

    #[test]
    fn porcelain_is_judged_ref_by_ref() {
        let judge = |out: &str| parse_porcelain(out).map(|u| Pushed::from_updates(&u));
        let ok = "To /hub\n \trefs/heads/work:refs/heads/main\t1a2b..3c4d\nDone\n";
        assert_eq!(judge(ok), Some(Pushed::Ok));
        let new = "To /hub\n*\tHEAD:refs/heads/farm/rescue/t/ab\t[new branch]\nDone\n";
        assert_eq!(judge(new), Some(Pushed::Ok));
        let same = "To /hub\n=\tHEAD:refs/heads/main\t[up to date]\nDone\n";
        assert_eq!(parse_porcelain(same).unwrap()[0].flag, '=');
        let mixed = "To /hub\n \tHEAD:refs/heads/a\t1..2\n!\tHEAD:refs/heads/main\t[rejected] (fetch first)\nDone\n";
        assert!(parse_porcelain(mixed).unwrap()[1].moved());
        assert_eq!(
            judge(mixed),
            Some(Pushed::Rejected(vec![(
                "refs/heads/main".to_owned(),
                "[rejected] (fetch first)".to_owned()
            )]))
        );
        assert_eq!(judge("fatal: not a git repository\n"), None);
        assert_eq!(judge(""), None);
    }

    #[test]
    fn refs_are_read_loose_or_packed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        std::fs::create_dir_all(d.join("refs/heads")).unwrap();
        std::fs::write(d.join("refs/heads/main"), format!("{a}\n")).unwrap();
        std::fs::write(
            d.join("packed-refs"),
            format!("# pack-refs with: peeled\n{b} refs/heads/old\n"),
        )
        .unwrap();
        assert_eq!(read_ref(d, "refs/heads/main"), Some(a));
        assert_eq!(read_ref(d, "refs/heads/old"), Some(b));
        assert_eq!(read_ref(d, "refs/heads/none"), None);
        std::fs::write(d.join("refs/heads/bad"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(read_ref(d, "refs/heads/bad"), None);
    }

    #[test]
    fn push_judges_a_real_rejection() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path().join("hub.git");
        let root = Repo::new(tmp.path());
        root.run([
            "init",
            "--quiet",
            "--bare",
            "-b",
            "main",
            hub.to_str().unwrap(),
        ])
        .unwrap();
        let clone = |name: &str| {
            let dest = tmp.path().join(name);
            root.run([
                OsStr::new("clone"),
                OsStr::new("--quiet"),
                hub.as_os_str(),
                dest.as_os_str(),
            ])
            .unwrap();
            let r = Repo::new(dest);
            r.run(["config", "user.email", "t@example.com"]).unwrap();
            r.run(["config", "user.name", "t"]).unwrap();
            r.run(["checkout", "--quiet", "-B", "main"]).unwrap();
            r
        };
        let a = clone("a");
        let b = clone("b");
        std::fs::write(a.dir().join("f"), "a").unwrap();
        assert!(a.commit_all("a").unwrap());
        assert!(!a.commit_all("nothing").unwrap(), "nothing to commit");
        assert_eq!(
            a.push("origin", &["HEAD:refs/heads/main".into()]).unwrap(),
            Pushed::Ok
        );
        std::fs::write(b.dir().join("f"), "b").unwrap();
        b.commit_all("b").unwrap();
        let Pushed::Rejected(refs) = b.push("origin", &["HEAD:refs/heads/main".into()]).unwrap()
        else {
            panic!("a non-fast-forward push was not rejected");
        };
        assert_eq!(refs[0].0, "refs/heads/main");
    }

    /// A ref lock left on the hub refuses an atomic push of every ref with
    /// "atomic transaction failed" in the report; the lock is named only on
    /// stderr, and must reach the ref's reason.
    #[test]
    fn a_stale_ref_lock_is_named_in_the_rejection() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path().join("hub.git");
        let work = Repo::new(tmp.path().join("w"));
        Repo::new(tmp.path())
            .run([
                "init",
                "--quiet",
                "--bare",
                "-b",
                "main",
                hub.to_str().unwrap(),
            ])
            .unwrap();
        std::fs::create_dir_all(work.dir()).unwrap();
        work.run(["init", "--quiet", "-b", "main"]).unwrap();
        work.run(["config", "user.email", "t@example.com"]).unwrap();
        work.run(["config", "user.name", "t"]).unwrap();
        std::fs::write(work.dir().join("f"), "a").unwrap();
        assert!(work.commit_all("a").unwrap());
        std::fs::write(hub.join("refs/heads/main.lock"), "").unwrap();
        let specs = [
            "HEAD:refs/heads/main".into(),
            "HEAD:refs/heads/other".into(),
        ];
        let updates = work.push_refs(hub.to_str().unwrap(), &specs, true).unwrap();
        let main = updates.iter().find(|u| u.to == "refs/heads/main").unwrap();
        let lock = main.lock_file().expect("the lock is named");
        assert!(lock.ends_with("main.lock"), "{lock}");
        assert!(main.raced(), "still a ref lock: {main:?}");
        let other = updates.iter().find(|u| u.to == "refs/heads/other").unwrap();
        assert_eq!(other.lock_file(), None);
    }

    /// A ref-less repository (the claims store's cache) that names the tip
    /// it has gets only what is new; naming none, it gets the whole history
    /// again (each fetch, all night long). Each fetch's objects are kept as
    /// one pack, which shows all at once (see [`Repo::fetch_tip`]).
    #[test]
    fn a_fetch_that_names_what_it_has_gets_only_what_is_new() {
        let tmp = tempfile::tempdir().unwrap();
        let work = Repo::new(tmp.path().join("work"));
        std::fs::create_dir_all(work.dir()).unwrap();
        work.run(["init", "--quiet", "-b", "main"]).unwrap();
        work.run(["config", "user.email", "t@example.com"]).unwrap();
        work.run(["config", "user.name", "t"]).unwrap();
        let commit = |i: usize| {
            std::fs::write(work.dir().join(format!("t{}.txt", i % 7)), i.to_string()).unwrap();
            assert!(work.commit_all(&format!("c{i}")).unwrap());
        };
        for i in 0..40 {
            commit(i);
        }
        let url = format!("file://{}", work.dir().display());
        let cache = Repo::new(tmp.path().join("cache.git"));
        std::fs::create_dir_all(cache.dir()).unwrap();
        cache.run(["init", "--quiet", "--bare"]).unwrap();
        // The objects of each pack, in the order the packs came; and the
        // loose objects.
        let seen = std::cell::RefCell::new(Vec::<std::path::PathBuf>::new());
        let new_pack = || {
            let mut idx: Vec<_> = std::fs::read_dir(cache.dir().join("objects/pack"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension() == Some(OsStr::new("idx")))
                .filter(|p| !seen.borrow().contains(p))
                .collect();
            assert_eq!(idx.len(), 1, "one new pack: {idx:?}");
            let idx = idx.remove(0);
            let bytes = std::fs::read(&idx).unwrap();
            seen.borrow_mut().push(idx);
            let listed = cache.run_input(["show-index"], &[], &bytes).unwrap();
            listed.iter().filter(|b| **b == b'\n').count()
        };
        let loose = || cache.run(["count-objects"]).unwrap();
        let first = cache
            .fetch_tip(&url, "refs/heads/main", None)
            .unwrap()
            .unwrap();
        assert!(new_pack() >= 120, "the whole history");
        commit(40);
        let second = cache
            .fetch_tip(&url, "refs/heads/main", Some(&first))
            .unwrap()
            .unwrap();
        // (Its commit, tree and blob, and the base a delta of them was
        // made against, which git adds to make the pack whole.)
        let new = new_pack();
        assert!(
            (3..=4).contains(&new),
            "only the new commit's objects: {new}"
        );
        assert!(loose().starts_with("0 objects"), "{}", loose());
        commit(41);
        let third = cache
            .fetch_tip(&url, "refs/heads/main", None)
            .unwrap()
            .unwrap();
        assert!(new_pack() >= 120, "the whole history again");
        assert_ne!(second, third);
        // A known commit that is not here: fetched as if none were known.
        commit(42);
        let fourth = cache
            .fetch_tip(&url, "refs/heads/main", Some(&"ab".repeat(20)))
            .unwrap();
        assert_eq!(fourth, work.run(["rev-parse", "HEAD"]).ok());
    }

    /// Regression: git's error lines were cut to the last line,
    /// mid-sentence ("remove the file manually to continue."), losing the
    /// very file that was in the way.
    #[test]
    fn a_real_git_failure_is_said_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repo::new(tmp.path());
        repo.run(["init", "--quiet", "-b", "main"]).unwrap();
        std::fs::write(tmp.path().join("f"), "x").unwrap();
        std::fs::write(tmp.path().join(".git/index.lock"), "").unwrap();
        let e = repo.run(["add", "f"]).unwrap_err();
        assert!(e.said.contains("index.lock': File exists."), "{}", e.said);
        assert!(e.said.contains("Another git process"), "{}", e.said);
        assert!(
            e.said.contains("remove the file manually to continue."),
            "{}",
            e.said
        );
        assert!(!e.said.contains('\n'), "one line: {}", e.said);
        assert!(!e.said.contains("fatal:"), "{}", e.said);
    }

    #[test]
    fn said_joins_wrapped_lines_and_keeps_each_message() {
        let stderr = "To /srv/hub\n ! [remote rejected] main -> main (Working directory has unstaged changes)\n\
            error: failed to push some refs to '/srv/hub'\n\
            hint: Updates were rejected because the remote contains work that you do\n\
            hint: not have locally.\n\
            hint:\n\
            hint: See the note.\n";
        assert_eq!(
            said(stderr),
            "To /srv/hub ! [remote rejected] main -> main (Working directory has unstaged changes); \
             failed to push some refs to '/srv/hub'; \
             hint: Updates were rejected because the remote contains work that you do not have locally. \
             See the note."
        );
        assert_eq!(
            said(
                "send-pack: unexpected disconnect while reading sideband packet\n\
                 error: error in sideband demultiplexer\n\
                 error: failed to push some refs to 'git://h/hub.git'\n"
            ),
            "send-pack: unexpected disconnect while reading sideband packet; \
             error in sideband demultiplexer; failed to push some refs to 'git://h/hub.git'"
        );
        assert_eq!(said("  \n\n"), "");
        assert_eq!(said("fatal: one\n"), "one");
        let long = format!("fatal: {}\n", "x".repeat(5000));
        assert!(said(&long).chars().count() <= MAX_SAID + 3);
    }
}
