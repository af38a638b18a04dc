//! One agent session: a fresh agent CLI process for one task, supervised.
//!
//! The argv comes from `--agent` split into words (never a shell); the
//! prompt goes as the last argument, on stdin, or in a file whose path
//! replaces `{prompt_file}`. stdout and stderr go to one log file. The
//! session is a process tree ([`crate::procs`]): tagged, in a process group
//! led by a keeper, with the parent-death signal, so it dies with farm; on
//! every way out — exit, timeout, interruption — the whole tree is killed,
//! what left the group (`setsid`, a double fork) too, before farm looks at
//! the clone: no stray child keeps editing a clone that the next session
//! will reuse, or writes into it after the session's end. The supervisor is
//! called back every tick to heartbeat the claim and to say whether to stop.

use std::fs::File;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::procs::Tree;

/// How the prompt reaches the agent.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PromptVia {
    /// As the last argument.
    Arg,
    /// On standard input.
    Stdin,
    /// In a file; its path replaces `{prompt_file}` in the agent's words, or
    /// is appended when no word has the placeholder.
    File,
}

impl PromptVia {
    /// Its name, as `--prompt-via` and farm.toml spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptVia::Arg => "arg",
            PromptVia::Stdin => "stdin",
            PromptVia::File => "file",
        }
    }
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failed {
        code: i32,
    },
    TimedOut,
    Killed {
        signal: i32,
    },
    /// Stopped by farm (a second SIGINT/SIGTERM, or the claim was lost).
    Interrupted,
}

impl From<ExitStatus> for Outcome {
    fn from(status: ExitStatus) -> Outcome {
        match (status.code(), status.signal()) {
            (Some(0), _) => Outcome::Success,
            (Some(code), _) => Outcome::Failed { code },
            (None, Some(signal)) => Outcome::Killed { signal },
            (None, None) => Outcome::Failed { code: -1 },
        }
    }
}

impl Outcome {
    /// The outcome of a session bwrap led: bwrap reports the agent's death
    /// by signal N as its own exit with 128 + N (its pid 1 reaped the
    /// agent), which read as a plain failure made a killed agent look like
    /// one that never started, and two in a row stopped the run (the
    /// chaos suite's kills, sandboxed). An agent that exits 129–192 itself
    /// reads as killed too, as a shell reports it.
    pub fn of_sandboxed(status: ExitStatus) -> Outcome {
        match Outcome::from(status) {
            Outcome::Failed { code } if (129..=128 + 64).contains(&code) => {
                Outcome::Killed { signal: code - 128 }
            }
            other => other,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Success => write!(f, "success"),
            Outcome::Failed { code } => write!(f, "failed with exit code {code}"),
            Outcome::TimedOut => write!(f, "timed out"),
            Outcome::Killed { signal } if *signal == libc::SIGXCPU => write!(
                f,
                "killed by signal {signal} (SIGXCPU: past its CPU time limit, --session-cpu)"
            ),
            Outcome::Killed { signal } => write!(f, "killed by signal {signal}"),
            Outcome::Interrupted => write!(f, "interrupted by farm"),
        }
    }
}

/// What the supervisor says at each tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    Continue,
    Stop,
}

/// Everything one session needs.
pub struct Spec<'a> {
    pub argv: &'a [String],
    /// Words the session runs inside (`--wrap`: bwrap, systemd-run, docker
    /// run …), with `{clone}` and `{prompt_file}` replaced; empty for none.
    pub wrap: &'a [String],
    pub prompt: &'a str,
    pub via: PromptVia,
    pub prompt_file: &'a Path,
    pub cwd: &'a Path,
    pub env: &'a [(String, String)],
    /// Whether the session is sandboxed: `env` is then its whole
    /// environment, not what is added to farm's own, and `wrap` starts
    /// with bwrap.
    pub sandboxed: bool,
    pub log: &'a Path,
    pub timeout: Duration,
    /// Between SIGTERM and SIGKILL when stopping.
    pub grace: Duration,
    /// What each of its processes may use.
    pub quota: crate::run::quota::Quota,
    /// Where to note the session's process group and tag while it runs, so
    /// that a farm restarted after SIGKILL can end what the parent-death
    /// signal and the keeper did not reach. See [`kill_leftover`].
    pub record: &'a Path,
}

const POLL: Duration = Duration::from_millis(20);

/// What begins farm's own lines in a session log (its header and footer):
/// never the agent's output, which is what is classified and quoted.
pub const MARK: &str = "[farm] ";

/// A session log's text without farm's own lines: the agent's output.
pub fn agent_output(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    for line in log.split_inclusive('\n') {
        if !line.starts_with(MARK) {
            out.push_str(line);
        }
    }
    out
}

/// Run one session to its end. Its log begins with a header (task,
/// attempt, agent, start, the command) and ends with a footer (how it
/// ended, after how long), each line beginning with [`MARK`].
pub fn run(spec: &Spec<'_>, tick: impl FnMut() -> Tick) -> std::io::Result<Outcome> {
    let started = Instant::now();
    let outcome = run_logged(spec, tick)?;
    let footer = format!(
        "{MARK}ended: {outcome} after {:.1}s\n",
        started.elapsed().as_secs_f64()
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(spec.log)
        .and_then(|mut f| f.write_all(footer.as_bytes()))?;
    Ok(outcome)
}

/// The header of a session's log: who runs what, since when.
fn header(spec: &Spec<'_>, argv: &[String]) -> String {
    let var = |k: &str| {
        spec.env
            .iter()
            .find(|(name, _)| name == k)
            .map_or("-", |(_, v)| v.as_str())
    };
    // The prompt is in its own file; here only how long it is.
    let shown: Vec<String> = argv
        .iter()
        .map(|w| {
            if w == spec.prompt && spec.via == PromptVia::Arg {
                format!("<the prompt, {} bytes>", w.len())
            } else {
                w.clone()
            }
        })
        .collect();
    let via = match spec.via {
        PromptVia::Arg => "as its last argument".to_owned(),
        PromptVia::Stdin => "on stdin".to_owned(),
        PromptVia::File => format!("in {}", spec.prompt_file.display()),
    };
    let limits = spec.quota.amounts().map_or(String::new(), |a| {
        format!("{MARK}limits: {a} for each process\n")
    });
    format!(
        "{MARK}session: task {}, attempt {}, agent {}, started {}\n{MARK}command: {} (the prompt, {} bytes, {via})\n{limits}",
        var("FARM_TASK"),
        var("FARM_ATTEMPT"),
        var("FARM_AGENT"),
        crate::claims::record::timestamp(std::time::SystemTime::now()),
        shell_words::join(&shown),
        spec.prompt.len(),
    )
}

fn run_logged(spec: &Spec<'_>, mut tick: impl FnMut() -> Tick) -> std::io::Result<Outcome> {
    if let Some(dir) = spec.log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut log = File::create(spec.log)?;
    let mut argv: Vec<String> = spec.argv.to_vec();
    match spec.via {
        PromptVia::Arg => argv.push(spec.prompt.to_owned()),
        PromptVia::Stdin => {}
        PromptVia::File => {
            std::fs::write(spec.prompt_file, spec.prompt)?;
            let path = spec.prompt_file.display().to_string();
            if argv.iter().any(|w| w.contains("{prompt_file}")) {
                for w in &mut argv {
                    *w = w.replace("{prompt_file}", &path);
                }
            } else {
                argv.push(path);
            }
        }
    }
    if !spec.wrap.is_empty() {
        let path = spec.prompt_file.display().to_string();
        if spec.wrap.iter().any(|w| w.contains("{prompt_file}")) && spec.via != PromptVia::File {
            std::fs::write(spec.prompt_file, spec.prompt)?;
        }
        let clone = spec.cwd.display().to_string();
        let mut wrapped: Vec<String> = spec
            .wrap
            .iter()
            .map(|w| w.replace("{clone}", &clone).replace("{prompt_file}", &path))
            .collect();
        wrapped.append(&mut argv);
        argv = wrapped;
    }
    log.write_all(header(spec, &argv).as_bytes())?;
    let mut cmd = Command::new(&argv[0]);
    if spec.sandboxed {
        cmd.env_clear();
    }
    // The agent's git works in its clone, not in a repository farm's own
    // environment names.
    crate::git::command::unset_repository_env(&mut cmd)
        .args(&argv[1..])
        .current_dir(spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(if spec.via == PromptVia::Stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    // The keeper first, leading the session's process group, so that not
    // one instruction of the agent runs unguarded.
    let mut tree = Tree::new(spec.cwd);
    tree.root(&mut cmd);
    spec.quota.apply(&mut cmd);
    let child = cmd.spawn()?;
    let pgid = tree.spawned(&child);
    let start = crate::claims::host::process_start(pgid).unwrap_or(0);
    let _ = std::fs::write(spec.record, format!("{pgid} {start} {}\n", tree.tag()));
    let mut group = Group {
        child,
        sandboxed: spec.sandboxed,
        done: false,
        record: spec.record.to_path_buf(),
        tree,
    };
    if spec.via == PromptVia::Stdin
        && let Some(mut stdin) = group.child.stdin.take()
    {
        let prompt = spec.prompt.to_owned();
        // A thread, so an agent that never reads cannot block the supervisor.
        std::thread::spawn(move || {
            let _ = stdin.write_all(prompt.as_bytes());
        });
    }
    let deadline = Instant::now() + spec.timeout;
    let exited = ExitWatch::new(group.child.id());
    loop {
        if let Some(status) = group.child.try_wait()? {
            group.done = true;
            return Ok(if spec.sandboxed {
                Outcome::of_sandboxed(status)
            } else {
                status.into()
            });
        }
        if Instant::now() >= deadline {
            group.stop(spec.grace)?;
            return Ok(Outcome::TimedOut);
        }
        if tick() == Tick::Stop {
            group.stop(spec.grace)?;
            return Ok(Outcome::Interrupted);
        }
        exited.wait(POLL);
    }
}

/// Waiting for a process to exit, at most a while: on a pidfd where Linux
/// has them, so a session's end is seen at once (polling every 20 ms cost
/// a short session ~10 ms on average); else a plain sleep.
struct ExitWatch(Option<std::os::fd::OwnedFd>);

impl ExitWatch {
    fn new(pid: u32) -> ExitWatch {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::FromRawFd;
            // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            if fd >= 0 {
                // SAFETY: the fd was just opened and is owned by nobody else.
                return ExitWatch(Some(unsafe {
                    std::os::fd::OwnedFd::from_raw_fd(fd as i32)
                }));
            }
        }
        let _ = pid;
        ExitWatch(None)
    }

    /// Return when the process has exited or `at_most` has passed.
    fn wait(&self, at_most: Duration) {
        match &self.0 {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut p, 1, at_most.as_millis() as i32) };
            }
            None => std::thread::sleep(at_most),
        }
    }
}

/// The session's process tree; killed whole when dropped.
struct Group {
    child: Child,
    /// Run in the sandbox: bwrap leads it.
    sandboxed: bool,
    done: bool,
    record: PathBuf,
    tree: Tree,
}

impl Group {
    /// SIGTERM to the group, then SIGKILL after `grace` if the leader lives.
    fn stop(&mut self, grace: Duration) -> std::io::Result<()> {
        if self.sandboxed {
            // bwrap would die of it and SIGKILL the agent unwarned: the
            // agent is told itself, as it would be outside.
            self.tree.signal_tagged(libc::SIGTERM, "bwrap");
        } else {
            self.tree.signal(libc::SIGTERM);
        }
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if self.child.try_wait()?.is_some() {
                break;
            }
            std::thread::sleep(POLL);
        }
        self.tree.kill();
        self.child.wait()?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Whatever happened, nothing of the session outlives it: children
        // the agent left in its group, then whatever left the group —
        // before farm commits what the session left.
        if !self.done {
            self.tree.kill();
            let _ = self.child.wait();
        }
        self.tree.end();
        // Emptied, not removed: a file deleted and made again each session
        // is an inode freed and allocated (see workdir.rs on why that costs).
        let _ = std::fs::write(&self.record, "");
    }
}

/// Kill what is left of a session an earlier farm was running in the clone
/// at `dir` (it was SIGKILLed, so nothing of its own clean-up ran, and its
/// keeper may have been killed too): the process group named by the
/// leader's pid and start time in `record` (a reused pid is left alone),
/// then every process carrying the tag `record` names and every one still
/// working in the clone (see [`crate::procs::sweep`]). Returns whether
/// anything was found and killed.
pub fn kill_leftover(record: &Path, dir: &Path) -> bool {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    if !text.is_empty() {
        let _ = std::fs::write(record, "");
    }
    let mut words = text.split_whitespace();
    let group = match (
        words.next().map(str::parse::<u32>),
        words.next().map(str::parse::<u64>),
    ) {
        // The leader may be gone while its children live on in the group,
        // so the group is killed whenever the leader is gone or is still
        // the same process; only a pid now used by another process is
        // spared.
        // 0 and 1 are no group of a session's: kill(-0) is farm's own
        // group, kill(-1) every process it may signal.
        (Some(Ok(pid)), _) if pid <= 1 => false,
        (Some(Ok(pid)), Some(Ok(start))) => match crate::claims::host::process_start(pid) {
            Some(now) if now != start => false,
            // SAFETY: kill(2) on a process group id; ESRCH when it is empty.
            _ => unsafe { libc::kill(-(pid as i32), libc::SIGKILL) == 0 },
        },
        _ => false,
    };
    // Also with no record (an older farm's, or none): what still works in
    // a clone whose lock this farm now holds is a leftover.
    let swept = crate::procs::sweep(words.next(), Some(dir));
    group || swept > 0
}

/// Find `name` as the OS would run it: a path as given, else on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files a test session writes in its directory, owned by the test
    /// (a [`Spec`] borrows its paths).
    struct Files {
        prompt_file: PathBuf,
        log: PathBuf,
        record: PathBuf,
    }

    impl Files {
        fn of(dir: &Path) -> Files {
            Files {
                prompt_file: dir.join("prompt.md"),
                log: dir.join("logs/s.log"),
                record: dir.join("session.pid"),
            }
        }
    }

    fn spec<'a>(
        dir: &'a Path,
        files: &'a Files,
        argv: &'a [String],
        via: PromptVia,
        timeout: Duration,
    ) -> Spec<'a> {
        Spec {
            argv,
            wrap: &[],
            sandboxed: false,
            prompt: "do the thing",
            via,
            prompt_file: &files.prompt_file,
            cwd: dir,
            env: &[],
            log: &files.log,
            timeout,
            grace: Duration::from_millis(200),
            quota: crate::run::quota::Quota::default(),
            record: &files.record,
        }
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into(), "agent".into()]
    }

    /// Every session log has a header (task, attempt, agent, start,
    /// command) and a footer (how it ended, after how long) — also a
    /// session that printed nothing (such logs were 0 bytes).
    #[test]
    fn a_log_has_a_header_and_a_footer_apart_from_the_agents_output() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let files = Files::of(d);
        let env = [
            ("FARM_TASK".to_owned(), "t1".to_owned()),
            ("FARM_ATTEMPT".to_owned(), "2".to_owned()),
            ("FARM_AGENT".to_owned(), "box".to_owned()),
        ];
        for (script, says, ends) in [
            ("echo hello", "hello\n", "[farm] ended: success after "),
            ("exit 3", "", "[farm] ended: failed with exit code 3 after "),
        ] {
            let argv = sh(script);
            let spec = Spec {
                env: &env,
                ..spec(d, &files, &argv, PromptVia::Arg, Duration::from_secs(10))
            };
            run(&spec, || Tick::Continue).unwrap();
            let log = std::fs::read_to_string(&files.log).unwrap();
            let lines: Vec<&str> = log.lines().collect();
            assert!(
                lines[0].starts_with("[farm] session: task t1, attempt 2, agent box, started 20"),
                "{log}"
            );
            assert!(
                lines[1].starts_with("[farm] command: sh -c ")
                    && lines[1].contains("<the prompt, 12 bytes>")
                    && lines[1].ends_with(" (the prompt, 12 bytes, as its last argument)"),
                "{log}"
            );
            assert!(lines.last().unwrap().starts_with(ends), "{log}");
            assert_eq!(agent_output(&log), says);
        }
    }

    #[test]
    fn prompt_reaches_the_agent_each_way() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let t = Duration::from_secs(10);
        let arg = sh(r#"echo "arg: $1""#);
        assert_eq!(
            run(&spec(d, &Files::of(d), &arg, PromptVia::Arg, t), || {
                Tick::Continue
            })
            .unwrap(),
            Outcome::Success
        );
        assert_eq!(
            agent_output(&std::fs::read_to_string(d.join("logs/s.log")).unwrap()),
            "arg: do the thing\n"
        );
        let stdin = sh("echo \"stdin: $(cat)\"");
        run(&spec(d, &Files::of(d), &stdin, PromptVia::Stdin, t), || {
            Tick::Continue
        })
        .unwrap();
        assert_eq!(
            agent_output(&std::fs::read_to_string(d.join("logs/s.log")).unwrap()),
            "stdin: do the thing\n"
        );
        let file = vec![
            "sh".into(),
            "-c".into(),
            "echo \"file: $(cat \"$1\")\"".into(),
            "agent".into(),
            "{prompt_file}".into(),
        ];
        run(&spec(d, &Files::of(d), &file, PromptVia::File, t), || {
            Tick::Continue
        })
        .unwrap();
        assert_eq!(
            agent_output(&std::fs::read_to_string(d.join("logs/s.log")).unwrap()),
            "file: do the thing\n"
        );
    }

    #[test]
    fn exit_codes_and_signals_are_classified() {
        let tmp = tempfile::tempdir().unwrap();
        let t = Duration::from_secs(10);
        let fail = sh("exit 3");
        assert_eq!(
            run(
                &spec(tmp.path(), &Files::of(tmp.path()), &fail, PromptVia::Arg, t),
                || { Tick::Continue }
            )
            .unwrap(),
            Outcome::Failed { code: 3 }
        );
        let killed = sh("kill -9 $$");
        assert_eq!(
            run(
                &spec(
                    tmp.path(),
                    &Files::of(tmp.path()),
                    &killed,
                    PromptVia::Arg,
                    t
                ),
                || { Tick::Continue }
            )
            .unwrap(),
            Outcome::Killed { signal: 9 }
        );
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let tmp = tempfile::tempdir().unwrap();
        let pid_file = tmp.path().join("grandchild.pid");
        // The agent starts a grandchild that ignores SIGTERM, then hangs.
        let script = format!(
            "sh -c 'trap \"\" TERM; echo $$ > {}; sleep 60' & sleep 60",
            pid_file.display()
        );
        let argv = sh(&script);
        let out = run(
            &spec(
                tmp.path(),
                &Files::of(tmp.path()),
                &argv,
                PromptVia::Arg,
                Duration::from_millis(500),
            ),
            || Tick::Continue,
        )
        .unwrap();
        assert_eq!(out, Outcome::TimedOut);
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let start = Instant::now();
        while crate::claims::host::process_start(pid).is_some() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "grandchild {pid} survived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn the_supervisor_can_stop_a_session() {
        let tmp = tempfile::tempdir().unwrap();
        let argv = sh("sleep 60");
        let mut ticks = 0;
        let out = run(
            &spec(
                tmp.path(),
                &Files::of(tmp.path()),
                &argv,
                PromptVia::Arg,
                Duration::from_secs(60),
            ),
            || {
                ticks += 1;
                if ticks > 3 {
                    Tick::Stop
                } else {
                    Tick::Continue
                }
            },
        )
        .unwrap();
        assert_eq!(out, Outcome::Interrupted);
    }

    /// A farm SIGKILLed with its keeper (the whole host's processes killed
    /// but these, say) left a session's `setsid` escapee running, and one
    /// with its environment cleared in the clone: the next farm, from the
    /// clone's record, kills both before it reuses the clone.
    #[test]
    fn the_next_farm_kills_what_a_session_left_from_its_record() {
        let clone = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let tag = crate::procs::new_tag();
        let spawn = |dir: &Path, tagged: bool, file: &str| {
            let pid_file = elsewhere.path().join(file);
            let mut cmd = Command::new("sh");
            cmd.args([
                "-c",
                &format!(
                    "setsid sh -c 'echo $$ > {}; exec sleep 30' &",
                    pid_file.display()
                ),
            ])
            .current_dir(dir)
            .env_remove(crate::procs::TAG_VAR);
            if tagged {
                cmd.env(crate::procs::TAG_VAR, &tag);
            }
            cmd.status().unwrap();
            let start = Instant::now();
            loop {
                if let Some(pid) = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                {
                    return pid;
                }
                assert!(start.elapsed() < Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let tagged = spawn(elsewhere.path(), true, "tagged.pid");
        let in_clone = spawn(clone.path(), false, "in-clone.pid");
        std::thread::sleep(Duration::from_millis(100));
        // The group's leader is long gone (a start time no process has).
        let record = clone.path().join("farm-session");
        std::fs::write(&record, format!("{} 0 {tag}\n", std::process::id())).unwrap();
        assert!(kill_leftover(&record, clone.path()));
        for pid in [tagged, in_clone] {
            let start = Instant::now();
            while crate::claims::host::process_start(pid).is_some() {
                assert!(start.elapsed() < Duration::from_secs(5), "{pid} survived");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert_eq!(std::fs::read_to_string(&record).unwrap(), "");
        assert!(
            !kill_leftover(&record, clone.path()),
            "nothing left the second time"
        );
    }

    /// A record rewritten to name group 0 or 1 (farm's own group, every
    /// process) kills nothing: a session could once aim the next farm's
    /// clean-up at farm itself.
    #[test]
    fn a_record_naming_group_0_or_1_kills_nothing() {
        let clone = tempfile::tempdir().unwrap();
        let record = clone.path().join("farm-session");
        for forged in ["0 0\n", "1 1\n", "0 7 x\n"] {
            std::fs::write(&record, forged).unwrap();
            assert!(!kill_leftover(&record, clone.path()), "{forged}");
        }
    }

    #[test]
    fn which_finds_programs_like_the_os() {
        assert!(which("sh").is_some());
        assert!(which("no-such-agent-cli-xyz").is_none());
        assert!(which("/bin/sh").is_some());
        assert!(which("./no/such/path").is_none());
    }
}
