//! The test harness: the real `farm` binary, run in a temp dir with a
//! cleared, hermetic environment, and helpers to plant claim files by hand.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use farm::claims::record::{Claim, Holder, Nonce};
use farm::names::TaskId;

pub const FARM: &str = env!("CARGO_BIN_EXE_farm");

/// A scratch hub: an empty git repository (farm refuses a hub that is not
/// one; the fs store needs nothing more).
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub hub: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let env = Env::plain();
        env.git(["init", "-q", "-b", "main"]);
        env
    }

    /// A scratch hub that is a plain directory, not yet a repository.
    fn plain() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path().join("hub");
        std::fs::create_dir(&hub).unwrap();
        Env { tmp, hub }
    }

    pub fn claims(&self) -> PathBuf {
        self.hub.join("current_tasks")
    }

    pub fn claim_path(&self, task: &str) -> PathBuf {
        self.claims().join(format!("{task}.txt"))
    }

    /// `farm ARGS...` with `--hub` given through the environment.
    pub fn farm<I, S>(&self, args: I) -> Farm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut farm = Farm::hermetic(self.tmp.path(), args);
        farm.cmd
            .env("FARM_HUB", &self.hub)
            .current_dir(self.tmp.path());
        farm
    }

    /// Write a claim file by hand, as another host or an old claim would look.
    pub fn plant(&self, claim: &Claim, mtime: SystemTime) {
        std::fs::create_dir_all(self.claims()).unwrap();
        let path = self.claim_path(claim.task.as_str());
        std::fs::write(&path, claim.to_toml()).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(mtime).unwrap();
    }

    /// Every tombstone's text.
    pub fn tombstones(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.claims().join(".reaped")) else {
            return Vec::new();
        };
        dir.map(|e| {
            String::from_utf8_lossy(&std::fs::read(e.unwrap().path()).unwrap()).into_owned()
        })
        .collect()
    }

    /// Replace what varies between runs with stable placeholders.
    pub fn normalize(&self, text: &str) -> String {
        let text = text
            .replace(&self.hub.display().to_string(), "[HUB]")
            .replace(&self.tmp.path().display().to_string(), "[TMP]");
        mask_hex32(&text)
    }
}

/// A claim record as another agent would have written it.
pub fn record(
    task: &str,
    agent: &str,
    host: &str,
    claimed_ago: Duration,
    beat_ago: Duration,
) -> Claim {
    let now = SystemTime::now();
    Claim {
        task: TaskId::parse(task).unwrap(),
        agent: agent.into(),
        host: host.into(),
        boot_id: farm::claims::host::Here::current().boot_id.clone(),
        holder: None,
        nonce: Nonce::random(),
        claimed_at: now - claimed_ago,
        heartbeat_at: now - beat_ago,
        attempt: 1,
    }
}

/// A claim by a process on this host that has exited.
pub fn dead_local_record(task: &str) -> Claim {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let mut c = record(
        task,
        "ghost",
        &farm::claims::host::Here::current().host,
        Duration::ZERO,
        Duration::ZERO,
    );
    c.holder = Some(Holder { pid, start: 1 });
    c
}

fn mask_hex32(text: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() == 32 {
            out.push_str("[NONCE]");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for ch in text.chars() {
        if matches!(ch, '0'..='9' | 'a'..='f') {
            run.push(ch);
        } else {
            flush(&mut run, &mut out);
            out.push(ch);
        }
    }
    flush(&mut run, &mut out);
    out
}

#[must_use]
pub struct Farm {
    pub cmd: Command,
}

impl Farm {
    /// `farm ARGS...` with nothing of the caller's environment but `PATH`:
    /// `HOME` is `home`, no colour, stdin closed, sessions unsandboxed
    /// (`FARM_SANDBOX=off`: the tests' agents are scripts in the test's
    /// directory, which a sandbox hides; the sandbox has tests of its own).
    pub fn hermetic<I, S>(home: &Path, args: I) -> Farm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(FARM);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("USER", "tester")
            .env("NO_COLOR", "1")
            .env("FARM_SANDBOX", "off")
            .args(args)
            .stdin(Stdio::null());
        Farm { cmd }
    }

    pub fn arg(mut self, a: impl AsRef<std::ffi::OsStr>) -> Farm {
        self.cmd.arg(a);
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Farm {
        self.cmd.env(k, v);
        self
    }

    pub fn run(mut self) -> Output {
        let out = self.cmd.output().expect("farm runs");
        Output {
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    /// Run to the end with `input` on stdin.
    pub fn run_with_stdin(mut self, input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("farm starts");
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_owned();
        let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().expect("farm runs");
        let _ = feeder.join();
        Output {
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    pub fn spawn(mut self) -> Child {
        self.cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("farm starts")
    }
}

#[derive(Debug)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    #[track_caller]
    pub fn code(self, want: i32) -> Output {
        assert_eq!(self.code, Some(want), "exit code; output: {self:#?}");
        self
    }

    #[track_caller]
    pub fn success(self) -> Output {
        self.code(0)
    }

    #[track_caller]
    pub fn stdout_has(self, s: &str) -> Output {
        assert!(self.stdout.contains(s), "stdout lacks {s:?}: {self:#?}");
        self
    }

    #[track_caller]
    pub fn stderr_has(self, s: &str) -> Output {
        assert!(self.stderr.contains(s), "stderr lacks {s:?}: {self:#?}");
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:#?}"))
    }
}

/// Wait (bounded) until `path` exists.
#[track_caller]
pub fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pid a script wrote to `path` with `echo`, once the file holds all of
/// it: a whole number and its newline. Waiting for the file to exist is not
/// enough: the shell creates it before it writes, and a test that read it in
/// between parsed "" (or could have read part of the number).
#[track_caller]
pub fn read_pid(path: &Path, timeout: Duration) -> u32 {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(pid) = text.strip_suffix('\n').and_then(|n| n.parse().ok()) {
            return pid;
        }
        assert!(
            start.elapsed() < timeout,
            "no whole pid in {} after {timeout:?}: {text:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Write `pid` to `path` for a script to read: aside, then renamed into
/// place, so a reader never sees the file created and not yet written.
pub fn write_pid(path: &Path, pid: u32) {
    let tmp = path.with_extension("pid.tmp");
    std::fs::write(&tmp, format!("{pid}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Is a process with this pid still running (a zombie counts as gone)?
pub fn running(pid: u32) -> bool {
    farm::claims::host::process_start(pid).is_some()
}

/// Start every command held at a barrier, then let them all go at once, so
/// that they really race rather than run one after another as they are spawned.
pub fn race(farms: Vec<Farm>) -> Vec<Child> {
    let (reader, mut writer) = std::io::pipe().unwrap();
    let children: Vec<Child> = farms
        .into_iter()
        .map(|farm| {
            let inner = farm.cmd;
            let mut cmd = Command::new("sh");
            // `read` takes one byte at a time from a pipe: one newline, one racer.
            cmd.arg("-c")
                .arg(r#"read _ && exec "$0" "$@" </dev/null"#)
                .arg(inner.get_program())
                .args(inner.get_args())
                .env_clear()
                .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .current_dir(inner.get_current_dir().unwrap())
                .stdin(reader.try_clone().unwrap())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    drop(reader);
    use std::io::Write;
    writer.write_all(&vec![b'\n'; children.len()]).unwrap();
    children
}

// --- git hubs for `farm run` -------------------------------------------------

/// What every git process needs in the hermetic environment: an identity,
/// and no user or system config to depend on.
pub const GIT_ENV: [(&str, &str); 7] = [
    ("GIT_AUTHOR_NAME", "Farm Test"),
    ("GIT_AUTHOR_EMAIL", "test@farm.invalid"),
    ("GIT_COMMITTER_NAME", "Farm Test"),
    ("GIT_COMMITTER_EMAIL", "test@farm.invalid"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("LC_ALL", "C"),
];

impl Env {
    /// A hub that is a git repository: `git init -b main`, one commit holding
    /// `files` (path, text), then `farm init`.
    pub fn git_hub(files: &[(&str, &str)]) -> Env {
        let env = Env::plain();
        env.git(["init", "-q", "-b", "main"]);
        for (path, text) in files {
            let path = env.hub.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        env.git(["add", "-A"]);
        env.git(["commit", "-q", "--allow-empty", "-m", "initial"]);
        env.farm_git(["init"]).run().success();
        env
    }

    /// `farm ARGS...` like [`Env::farm`], with git's identity and isolation.
    pub fn farm_git<I, S>(&self, args: I) -> Farm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut farm = self.farm(args);
        farm.cmd.envs(GIT_ENV);
        farm
    }

    /// `git ARGS...` in the hub, hermetic; its status and stdout, stderr.
    pub fn git_output<I, S>(&self, args: I) -> (bool, String, String)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        git_in(&self.hub, self.tmp.path(), args)
    }

    /// `git ARGS...` in the hub; its stdout, trimmed. Fails the test if git fails.
    #[track_caller]
    pub fn git<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let (ok, stdout, stderr) = self.git_output(&args);
        assert!(ok, "git {args:?} failed: {stderr}");
        stdout.trim_end().to_owned()
    }

    /// Whether `git ARGS...` in the hub succeeds.
    pub fn git_ok<I, S>(&self, args: I) -> bool
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.git_output(args).0
    }

    /// Write a `sh` script into the temp dir; the `--agent` words that run it
    /// (through `sh`, so that the file is never exec'd while a forked test
    /// thread might still hold it open for writing: no ETXTBSY).
    pub fn agent_script(&self, name: &str, body: &str) -> String {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        format!("sh '{}'", path.display())
    }
}

impl Farm {
    /// Run to the end, but kill farm and fail the test if it takes longer
    /// than `limit`: a hung run must not hang the test suite.
    #[track_caller]
    pub fn run_within(self, limit: Duration) -> Output {
        Farm::wait_within(self.spawn(), limit)
    }

    /// Wait for a farm started with [`Farm::spawn`] to finish, at most
    /// `limit` (then kill it and fail the test); its output.
    #[track_caller]
    pub fn wait_within(mut child: Child, limit: Duration) -> Output {
        use std::io::Read;
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            stdout.read_to_string(&mut s).unwrap();
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            stderr.read_to_string(&mut s).unwrap();
            s
        });
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > limit {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = Output {
            code: status.and_then(|s| s.code()),
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        };
        assert!(
            status.is_some(),
            "farm did not finish within {limit:?}; killed it: {output:#?}"
        );
        output
    }
}

/// `git`, deaf to variables that name a repository (`GIT_DIR`, …): the
/// suite run under `git rebase -x` must not work on this project's own.
pub fn git_command() -> Command {
    let mut cmd = Command::new("git");
    farm::git::command::unset_repository_env(&mut cmd);
    cmd
}

/// The patch ids (`git patch-id --stable`) of every non-merge commit of the
/// repository at `dir`, given its `git log --all --no-merges -p`: farm
/// rebases work, so an agent's commit may reach the hub as another commit
/// with the same patch.
pub fn patch_ids(dir: &Path, log: &str) -> std::collections::BTreeSet<String> {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(["patch-id", "--stable"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(GIT_ENV)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let log = format!("{log}\n");
    let feeder = std::thread::spawn(move || stdin.write_all(log.as_bytes()));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// `git -C dir ARGS...`, hermetic (only PATH, HOME and [`GIT_ENV`]): its
/// status, stdout and stderr.
pub fn git_in<I, S>(dir: &Path, home: &Path, args: I) -> (bool, String, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(GIT_ENV)
        .stdin(Stdio::null())
        .output()
        .expect("git runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
