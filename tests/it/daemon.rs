//! A hub on "another machine": a bare repository served by `git daemon` on
//! 127.0.0.1 (or, [`Daemon::over`], by `sshd` or git's smart-HTTP backend:
//! servers.rs), which the tests can stop and start again to play a network
//! outage; and [`Machine`]s, each a host name, a state dir and a working
//! directory of its own, which share nothing with each other but the URL.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{Farm, GIT_ENV, Output};
pub use crate::servers::Transport;
use crate::servers::{self, client_env};

/// A base directory holding `hub.git` (once made), served by `git daemon`
/// or another [`Transport`]'s server.
pub struct Daemon {
    pub base: tempfile::TempDir,
    transport: Transport,
    port: Option<u16>,
    child: Option<Child>,
    /// Ref updates a stop cut in half (see [`Daemon::torn`]).
    torn: std::cell::Cell<usize>,
}

impl Daemon {
    /// A base directory, no hub, no daemon yet.
    pub fn new() -> Daemon {
        Daemon::over(Transport::Git).unwrap()
    }

    /// The same, to be served over `transport`; None (the reason printed)
    /// if its server cannot run here, which fails the test instead where
    /// `FARM_REQUIRE_SERVERS=1`.
    pub fn over(transport: Transport) -> Option<Daemon> {
        if !servers::available(transport) {
            return None;
        }
        Some(Daemon {
            base: tempfile::tempdir().unwrap(),
            transport,
            port: None,
            child: None,
            torn: std::cell::Cell::new(0),
        })
    }

    /// A served hub whose `main` holds one commit with `files` (path, text).
    pub fn with_hub(files: &[(&str, &str)]) -> Daemon {
        let mut daemon = Daemon::new();
        daemon.make_hub(files);
        daemon.start();
        daemon
    }

    /// The bare hub's directory (the daemon's `/hub.git`).
    pub fn hub_dir(&self) -> PathBuf {
        self.base.path().join("hub.git")
    }

    /// The bare hub itself, for reading what the remote really holds.
    pub fn hub(&self) -> Repo {
        Repo {
            dir: self.hub_dir(),
            home: self.base.path().to_owned(),
        }
    }

    /// `git init --bare -b main hub.git`: an empty hub.
    pub fn init_hub(&self) {
        let base = Repo {
            dir: self.base.path().to_owned(),
            home: self.base.path().to_owned(),
        };
        base.git([
            "init".as_ref(),
            "-q".as_ref(),
            "--bare".as_ref(),
            "-b".as_ref(),
            "main".as_ref(),
            self.hub_dir().as_os_str(),
        ]);
    }

    /// [`Daemon::init_hub`], and a first commit on `main` with `files`,
    /// pushed from a scratch repository that is then removed.
    pub fn make_hub(&self, files: &[(&str, &str)]) {
        let hub = self.hub_dir();
        let scratch = self.base.path().join("scratch");
        let base = Repo {
            dir: self.base.path().to_owned(),
            home: self.base.path().to_owned(),
        };
        self.init_hub();
        base.git([
            "init".as_ref(),
            "-q".as_ref(),
            "-b".as_ref(),
            "main".as_ref(),
            scratch.as_os_str(),
        ]);
        for (path, text) in files {
            let path = scratch.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let scratch_repo = Repo {
            dir: scratch.clone(),
            home: self.base.path().to_owned(),
        };
        scratch_repo.git(["add", "-A"]);
        scratch_repo.git(["commit", "-q", "--allow-empty", "-m", "initial"]);
        scratch_repo.git([
            "push".as_ref(),
            "-q".as_ref(),
            hub.as_os_str(),
            "main".as_ref(),
        ]);
        std::fs::remove_dir_all(&scratch).unwrap();
    }

    pub fn port(&self) -> u16 {
        self.port.expect("the daemon was started")
    }

    /// `git://127.0.0.1:PORT/hub.git`, or the `ssh://` or `http://` URL.
    pub fn url(&self) -> String {
        match self.transport {
            Transport::Git => format!("git://127.0.0.1:{}/hub.git", self.port()),
            Transport::Ssh => servers::ssh_url(self.base.path(), self.port()),
            Transport::Http => servers::http_url(self.port()),
        }
    }

    /// What a client needs in its environment to reach the hub besides
    /// the hermetic one (ssh: `GIT_SSH_COMMAND`).
    pub fn client_env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        client_env(self.transport, self.base.path())
    }

    /// What git runs as ssh, for a repository's `core.sshCommand` (a
    /// client in this process, which cannot set its own environment).
    pub fn ssh_command(&self) -> Option<String> {
        (self.transport == Transport::Ssh).then(|| servers::ssh_command(self.base.path()))
    }

    /// Start the daemon: on a free port the first time, on the same port
    /// after [`Daemon::stop`] (the URL the machines hold must stay valid).
    /// Returns once the port accepts connections.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        if self.port.is_some() {
            self.clear_stale_ref_locks();
        }
        // A free port can be taken between our probe and the daemon's bind,
        // and a port just freed by a killed daemon can take a moment to be
        // bindable again: try a few times.
        let mut why = String::new();
        for _ in 0..10 {
            let port = self.port.unwrap_or_else(free_port);
            match self.try_start(port) {
                Ok(child) => {
                    self.port = Some(port);
                    self.child = Some(child);
                    return;
                }
                Err(e) => {
                    why = e;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        panic!(
            "the {:?} server would not start: {why}\n{}",
            self.transport,
            self.log()
        );
    }

    fn try_start(&self, port: u16) -> Result<Child, String> {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.base.path().join("daemon.log"))
            .unwrap();
        let mut cmd = match self.transport {
            Transport::Git => {
                let mut cmd = crate::common::git_command();
                cmd.arg("daemon")
                    .arg("--reuseaddr")
                    .arg("--enable=receive-pack")
                    .arg("--export-all")
                    .arg("--informative-errors")
                    // The default limit (32) is enforced by killing live
                    // connections from an address that already has one —
                    // every client here is 127.0.0.1 — which would inject
                    // faults no test asked for.
                    .arg("--max-connections=0")
                    .arg(format!("--base-path={}", self.base.path().display()))
                    .arg("--listen=127.0.0.1")
                    .arg(format!("--port={port}"))
                    .arg(self.base.path());
                cmd
            }
            Transport::Ssh => servers::sshd_command(self.base.path(), port),
            Transport::Http => servers::http_command(self.base.path(), port),
        };
        let what = format!("{:?} server", self.transport);
        let mut child = cmd
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.base.path())
            .envs(GIT_ENV)
            .current_dir(self.base.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // Its own group, so that stop() takes the per-connection
            // children (upload-pack, receive-pack) down with it.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot spawn the {what}: {e}"))?;
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!("the {what} on port {port} exited: {status}"));
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(child);
            }
            if start.elapsed() > Duration::from_secs(10) {
                kill_server(&mut child);
                return Err(format!(
                    "the {what} on port {port} never accepted a connection"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL the daemon and every connection it is serving, as a machine
    /// falling off the network would; returns once none of them is left.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_server(&mut child);
        }
    }

    /// The daemon's stderr so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.path().join("daemon.log")).unwrap_or_default()
    }

    /// A receive-pack killed in the middle of a ref update leaves its
    /// `.lock` file behind, and git refuses every later update of that ref
    /// until someone removes it — on a real server, the admin after a crash.
    /// That is the server's wound, not farm's to heal: clear it before the
    /// restart (nothing else is running on the hub at this point).
    fn clear_stale_ref_locks(&self) {
        fn walk(dir: &Path, torn: &std::cell::Cell<usize>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries {
                let path = e.unwrap().path();
                if path.is_dir() {
                    walk(&path, torn);
                } else if path.extension().is_some_and(|x| x == "lock") {
                    eprintln!("daemon: removing stale {}", path.display());
                    std::fs::remove_file(&path).unwrap();
                    torn.set(torn.get() + 1);
                }
            }
        }
        walk(&self.hub_dir().join("refs"), &self.torn);
        for name in ["packed-refs.lock", "HEAD.lock", "shallow.lock"] {
            let _ = std::fs::remove_file(self.hub_dir().join(name));
        }
    }

    /// How many ref updates a stop cut in half: a receive-pack killed while
    /// committing a ref transaction leaves the refs it had not yet renamed
    /// into place as `.lock` files. git's files backend is atomic only
    /// while its process lives: an `--atomic` push of `main` and the claims
    /// branch so torn may have released the claim without landing the work.
    /// That is a server crash, and the work is then rescued and done again
    /// (once on main) — which tests of outages must allow, but only then.
    pub fn torn(&self) -> usize {
        self.torn.get()
    }

    /// A new machine that reaches this hub by URL only.
    pub fn machine(&self, host: &str) -> Machine {
        let mut machine = Machine::new(host, &self.url());
        machine.env = self.client_env();
        machine
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// SIGKILL `child`'s process group (it leads one) and wait until the group
/// is empty, so that nothing of it still holds a file or a port.
fn kill_group(child: &mut Child) {
    let pgid = child.id() as i32;
    // SAFETY: kill(2) on a process group this test created.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
    let start = Instant::now();
    while group_alive(pgid) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "process group {pgid} outlived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILL a server (which leads its process group) and everything it
/// started, in its group or not: sshd runs each session in a session of
/// its own (setsid), out of the group's reach. Everything is stopped first
/// (SIGSTOP), until no new process appears, so that none forks or is
/// orphaned away from the tree while it is being killed; then killed.
fn kill_server(child: &mut Child) {
    let root = child.id();
    let pgid = root as i32;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let fresh: Vec<u32> = tree_of(root, pgid)
            .into_iter()
            .filter(|p| seen.insert(*p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            // SAFETY: kill(2) on a process this test's server started.
            unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        }
    }
    for pid in &seen {
        // SAFETY: as above.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    kill_group(child);
    let start = Instant::now();
    while seen.iter().any(|p| running(*p)) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a process of the server {root} outlived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `root`, its descendants and the members of group `pgid`, alive.
fn tree_of(root: u32, pgid: i32) -> Vec<u32> {
    let procs: Vec<(u32, u32, i32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                    let (state, ppid, pgrp) = stat_of(pid)?;
                    (state != "Z" && state != "X").then_some((pid, ppid, pgrp))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for (pid, ppid, _) in &procs {
            if *ppid == parent && !tree.contains(pid) {
                tree.push(*pid);
            }
        }
        i += 1;
    }
    for (pid, _, pgrp) in &procs {
        if *pgrp == pgid && !tree.contains(pid) {
            tree.push(*pid);
        }
    }
    tree.retain(|p| running(*p));
    tree
}

/// The state, parent and process group of `pid`, from `/proc/PID/stat`.
fn stat_of(pid: u32) -> Option<(String, u32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parens.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.to_owned();
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Is `pid` a process that is not a zombie?
fn running(pid: u32) -> bool {
    stat_of(pid).is_some_and(|(state, _, _)| state != "Z" && state != "X")
}

/// Does any process of group `pgid` still run? Zombies do not count: the
/// daemon's orphaned children are reparented to PID 1, which in a container
/// may never reap them, so `kill(-pgid, 0)` could answer yes forever.
fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(Result::ok).any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parens.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            return false;
        };
        let mut fields = rest.split(' ');
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

/// A git repository on disk, driven by the git CLI with the hermetic
/// environment of common.rs.
pub struct Repo {
    pub dir: PathBuf,
    pub home: PathBuf,
}

impl Repo {
    /// `git ARGS...` here: status, stdout, stderr.
    pub fn git_output<I, S>(&self, args: I) -> (bool, String, String)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        crate::common::git_in(&self.dir, &self.home, args)
    }

    /// `git ARGS...` here; stdout, trimmed. Fails the test if git fails.
    #[track_caller]
    pub fn git<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let (ok, stdout, stderr) = self.git_output(&args);
        assert!(ok, "git {args:?} in {}: {stderr}", self.dir.display());
        stdout.trim_end().to_owned()
    }

    pub fn git_ok<I, S>(&self, args: I) -> bool
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.git_output(args).0
    }

    /// A mirror of `url` (every ref) in `dir`.
    #[track_caller]
    pub fn mirror(url: &str, dir: &Path) -> Repo {
        let parent = Repo {
            dir: dir.parent().unwrap().to_owned(),
            home: dir.parent().unwrap().to_owned(),
        };
        parent.git(["clone", "-q", "--mirror", url, &dir.display().to_string()]);
        Repo {
            dir: dir.to_owned(),
            home: parent.home,
        }
    }

    /// The task ids with a file directly in `dir` (`tasks`, `tasks/done`,
    /// `tasks/failed`) at `rev`.
    pub fn board(&self, rev: &str, dir: &str) -> std::collections::BTreeSet<String> {
        self.git(["ls-tree", "--name-only", rev, &format!("{dir}/")])
            .lines()
            .filter_map(|p| p.strip_prefix(&format!("{dir}/"))?.strip_suffix(".md"))
            .filter(|n| *n != "README")
            .map(str::to_owned)
            .collect()
    }

    /// Is `commit` an ancestor of (or equal to) `rev`?
    pub fn is_ancestor(&self, commit: &str, rev: &str) -> bool {
        self.git_ok(["merge-base", "--is-ancestor", commit, rev])
    }

    /// A file's text at a revision (`rev:path`), if it is there.
    pub fn show(&self, spec: &str) -> Option<String> {
        let (ok, text, _) = self.git_output(["show", spec]);
        ok.then_some(text)
    }
}

/// One simulated machine: its own host name (FARM_HOST), state dir, working
/// directory and HOME; it knows the hub only by URL.
pub struct Machine {
    pub host: String,
    pub tmp: tempfile::TempDir,
    url: String,
    /// What its git needs to reach the hub (see [`Daemon::client_env`]).
    pub env: Vec<(&'static str, std::ffi::OsString)>,
}

impl Machine {
    pub fn new(host: &str, url: &str) -> Machine {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("work")).unwrap();
        Machine {
            host: host.to_owned(),
            tmp,
            url: url.to_owned(),
            env: Vec::new(),
        }
    }

    /// The working directory farm runs in: not a git repository, so that
    /// nothing can be found there by accident.
    pub fn cwd(&self) -> PathBuf {
        self.tmp.path().join("work")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    /// `farm ARGS...` on this machine.
    pub fn farm<I, S>(&self, args: I) -> Farm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut farm = Farm::hermetic(self.tmp.path(), args);
        farm.cmd
            .env("FARM_HUB", &self.url)
            .env("FARM_STATE_DIR", self.state_dir())
            .env("FARM_HOST", &self.host)
            .envs(GIT_ENV)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.cwd());
        farm
    }

    /// `farm locks --json` on this machine, which must succeed.
    #[track_caller]
    pub fn locks(&self) -> serde_json::Value {
        self.farm(["locks", "--json"]).run().success().json()
    }
}

/// A `farm` process running in the background in a process group of its
/// own, its output collected; killed (the whole group) if dropped unfinished,
/// so that a failed test leaves nothing running.
pub struct Running {
    child: Child,
    done: bool,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

impl Running {
    pub fn spawn(mut farm: Farm) -> Running {
        use std::io::Read;
        let mut child = farm
            .cmd
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("farm starts");
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
        Running {
            child,
            done: false,
            out: Some(out),
            err: Some(err),
        }
    }

    /// farm's pid, which is also its process group's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Has it exited (without reaping its output yet)?
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Wait until `deadline`; past it, kill the group and fail the test.
    #[track_caller]
    pub fn finish_by(mut self, deadline: Instant) -> Output {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                kill_group(&mut self.child);
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.done = true;
        let output = Output {
            code: status.and_then(|s| s.code()),
            stdout: self.out.take().unwrap().join().unwrap(),
            stderr: self.err.take().unwrap().join().unwrap(),
        };
        assert!(
            status.is_some(),
            "farm (pid {}) did not finish in time; killed it: {output:#?}",
            self.child.id()
        );
        output
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done && self.child.try_wait().ok().flatten().is_none() {
            kill_group(&mut self.child);
        }
    }
}

/// Send `sig` to every process of group `pgid`.
pub fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) on a process group this test started.
    let r = unsafe { libc::kill(-pgid, sig) };
    assert_eq!(
        r,
        0,
        "kill(-{pgid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// The process group of `pid`.
pub fn pgid_of(pid: u32) -> i32 {
    // SAFETY: getpgid(2) only reads.
    let g = unsafe { libc::getpgid(pid as i32) };
    assert!(g > 0, "getpgid({pid}): {}", std::io::Error::last_os_error());
    g
}

/// The fixture itself: the hub is served, a stop really cuts it off (so an
/// outage test that passes is not passing by accident), and a restart serves
/// it again at the same URL; over every transport.
fn serves_stops_and_restarts_on_the_same_url(transport: Transport) {
    let Some(mut daemon) = Daemon::over(transport) else {
        return;
    };
    daemon.make_hub(&[("tasks/a.md", "+++\ntitle = \"A\"\n+++\n")]);
    daemon.start();
    let url = daemon.url();
    let here = Repo {
        dir: daemon.base.path().to_owned(),
        home: daemon.base.path().to_owned(),
    };
    // The client's part (ssh: its key and config) as `-c` options.
    let client: Vec<String> = daemon
        .ssh_command()
        .map(|ssh| vec!["-c".to_owned(), format!("core.sshCommand={ssh}")])
        .unwrap_or_default();
    let git = |args: &[&str]| {
        let all: Vec<&str> = client
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        here.git_output(all)
    };
    let main = daemon.hub().git(["rev-parse", "main"]);
    let (ok, ls, err) = git(&["ls-remote", &url, "refs/heads/main"]);
    assert!(ok, "ls-remote {url}: {err}\n{}", daemon.log());
    assert_eq!(ls.split('\t').next(), Some(main.as_str()), "{ls}");

    daemon.stop();
    let (ok, _, err) = git(&["ls-remote", &url]);
    assert!(!ok, "the hub still answers after stop()");
    assert!(!err.is_empty());

    daemon.start();
    assert_eq!(daemon.url(), url);
    let (ok, ls, err) = git(&["ls-remote", &url, "refs/heads/main"]);
    assert!(
        ok,
        "ls-remote {url} after the restart: {err}\n{}",
        daemon.log()
    );
    assert_eq!(ls.split('\t').next(), Some(main.as_str()), "{ls}");

    // Pushes go through too (receive-pack is enabled).
    let clone = daemon.base.path().join("clone");
    let (ok, _, err) = git(&["clone", "-q", &url, &clone.display().to_string()]);
    assert!(ok, "clone {url}: {err}");
    let clone = Repo {
        dir: clone,
        home: daemon.base.path().to_owned(),
    };
    if let Some(ssh) = daemon.ssh_command() {
        clone.git(["config", "core.sshCommand", &ssh]);
    }
    clone.git(["commit", "-q", "--allow-empty", "-m", "pushed"]);
    clone.git(["push", "-q", "origin", "main"]);
    assert_eq!(
        daemon.hub().git(["log", "-1", "--format=%s", "main"]),
        "pushed"
    );
    // And a stop takes the servers' children with it.
    let root = daemon.child.as_ref().unwrap().id();
    daemon.stop();
    assert!(!running(root), "the {transport:?} server survived stop()");
}

#[test]
fn daemon_serves_stops_and_restarts_on_the_same_url() {
    serves_stops_and_restarts_on_the_same_url(Transport::Git);
}

#[test]
fn sshd_serves_stops_and_restarts_on_the_same_url() {
    serves_stops_and_restarts_on_the_same_url(Transport::Ssh);
}

#[test]
fn http_serves_stops_and_restarts_on_the_same_url() {
    serves_stops_and_restarts_on_the_same_url(Transport::Http);
}
