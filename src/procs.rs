//! The process trees farm starts for others — an agent's session, the
//! project's test command — and how none of them outlives its end or farm.
//!
//! Theory of operation. A tree is the command farm spawns and everything
//! it starts, in the background too. Three things hold it together:
//!
//! - **A tag.** Every process of the tree carries `FARM_PROCESS_TAG=<random>`
//!   in its environment, inherited down the tree. A child that leaves the
//!   process group (`setsid`, a daemon's double fork) keeps it, and so does
//!   an orphan re-parented to init.
//! - **A keeper** leads the tree's process group: a small `sh` started
//!   before the command, blocked reading a pipe whose only writer is farm.
//!   The kernel closes the pipe when farm dies, SIGKILL included; the keeper
//!   then SIGKILLs every tagged process it finds in `/proc`, then its own
//!   group (itself last). The root also gets the parent-death signal.
//! - **A sweep** when the tree ends, on every way out (its `Drop`): every
//!   member of the group but the keeper, every process carrying the tag,
//!   every descendant of one, and every process (farm's own children, git
//!   and what has a terminal aside) whose working directory is inside the
//!   tree's directory — rescanned until none is left alive, so the
//!   directory then holds what the tree left at its end and nothing written
//!   after. The keeper goes only then: a farm killed halfway through a
//!   tree's end leaves it to finish the job. The next farm sweeps a clone
//!   again, with the tag its session record names, before it reuses it.
//!
//! Why a tag and not the alternatives:
//! - `PR_SET_CHILD_SUBREAPER` on farm would re-parent orphans to farm, which
//!   says they are farm's but not whose: the orphans of eight sessions and
//!   of git's detached gc all get one parent, so a tag is needed anyway.
//!   Farm would also have to reap them, and a `waitpid(-1)` in a process
//!   whose `std::process` children are each waited for by pid steals their
//!   statuses (their `wait` fails); orphans that exit by themselves would
//!   pile up as zombies. And the subreaper dies with farm: after a SIGKILL
//!   its orphans go to init — the very case that matters most.
//! - A PID namespace ends everything in it with its init, but needs
//!   unprivileged user namespaces, which many distributions and container
//!   runtimes turn off, and the agent would run as uid 0 of its namespace
//!   with a /proc of its own. Where it works, `--wrap "bwrap --unshare-pid
//!   --die-with-parent …"` gives it.
//! - A cgroup (`cgroup.kill`) needs a delegated, writable cgroup, which a
//!   login shell or a container seldom has.
//!
//! The tag works for any unprivileged process on Linux, survives
//! re-parenting, and is found the same way while farm runs, by the keeper
//! as farm dies, and by the next farm. What it misses is a process that
//! clears its environment *and* leaves the directory (`env -i`, `cd /`):
//! that is hostile, not careless, and the sandbox's business.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The variable that tags every process of a tree.
pub const TAG_VAR: &str = "FARM_PROCESS_TAG";

/// How long a sweep goes on killing before it gives up on a process that
/// will not die (one in uninterruptible sleep on a dead NFS server, say).
const SWEEP_FOR: Duration = Duration::from_secs(5);

/// The keeper: wait for farm's end (its pipe closes), then kill what
/// carries the tag (`$1`, as `KEY=value`), three rounds for what was being
/// forked meanwhile, then the group. It ignores the SIGTERM a timeout sends
/// the group: it must live until the group's SIGKILL. `grep -z` reads the
/// NUL-separated environ; a grep without it only leaves the group kill.
const KEEPER: &str = r#"trap '' TERM INT HUP
read -r _
for round in 1 2 3; do
  for f in $(grep -l -s -z -x -F "$1" /proc/[0-9]*/environ); do
    p=${f#/proc/}
    kill -KILL "${p%/environ}" 2>/dev/null
  done
done
kill -KILL 0"#;

/// A random tag for a new tree.
pub fn new_tag() -> String {
    let mut bytes = [0u8; 12];
    // Without randomness (no getrandom), the pid and the time still tell
    // this farm's trees from each other and from other farms'.
    if getrandom::fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        return format!("{}-{t}", std::process::id());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One tree: its tag, its directory, its keeper and its group. Dropped,
/// it ends the tree (see [`Tree::end`]).
pub struct Tree {
    tag: String,
    dir: PathBuf,
    keeper: Option<Keeper>,
    /// The group's id, once the root is spawned.
    pgid: Option<u32>,
    ended: bool,
}

impl Tree {
    /// A tree that will work in `dir`, its keeper started (without one —
    /// no `sh` — the root leads a group of its own).
    pub fn new(dir: &Path) -> Tree {
        let tag = new_tag();
        let keeper = Keeper::start(&tag);
        Tree {
            tag,
            dir: dir.to_path_buf(),
            keeper,
            pgid: None,
            ended: false,
        }
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Make `cmd` the tree's root: tagged, in the keeper's group, with the
    /// parent-death signal.
    pub fn root<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        let leader = self.keeper.as_ref().map_or(0, |k| k.process.id() as i32);
        cmd.env(TAG_VAR, &self.tag).process_group(leader);
        die_with_parent(cmd);
        cmd
    }

    /// Note the spawned root; the group's id (the keeper's pid, or the
    /// root's without a keeper).
    pub fn spawned(&mut self, root: &Child) -> u32 {
        let pgid = self.keeper.as_ref().map_or(root.id(), |k| k.process.id());
        self.pgid = Some(pgid);
        pgid
    }

    /// Send `sig` to the tree's process group, the keeper included (it
    /// ignores SIGTERM; SIGKILL it cannot: see [`Tree::kill`]).
    pub fn signal(&self, sig: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: kill(2) on the tree's own group; its id stays reserved
            // while the keeper (or the unreaped root) lives.
            unsafe { libc::kill(-(pgid as i32), sig) };
        }
    }

    /// Send `sig` to every live process carrying the tree's tag but those
    /// named `spare` (their `comm`): a way past a process that would die of
    /// the signal at once and take the others down with SIGKILL, unwarned
    /// (bwrap, which passes no signal on to the sandbox it keeps).
    pub fn signal_tagged(&self, sig: i32, spare: &str) {
        let entry = format!("{TAG_VAR}={}", self.tag).into_bytes();
        for p in processes() {
            let name = read_proc(&format!("/proc/{}/comm", p.pid)).unwrap_or_default();
            if name.trim_ascii_end() != spare.as_bytes() && carries(p.pid, &entry) {
                // SAFETY: kill(2) with a pid just read; at worst it names a
                // process that has exited, and the call fails.
                unsafe { libc::kill(p.pid as i32, sig) };
            }
        }
    }

    /// The group whose members a sweep kills one by one, sparing its
    /// leader: the keeper's, while it lives.
    fn kept_group(&self) -> Option<u32> {
        self.keeper.as_ref().and(self.pgid)
    }

    /// SIGKILL the tree's group — but its keeper, which must outlive the
    /// rest: should farm die before the tree's end is done (its sweep of
    /// what left the group), the keeper is what finishes it. A SIGKILL to
    /// the whole group took the keeper too, and a `setsid` escapee ran on
    /// after a farm killed in that window.
    pub fn kill(&self) {
        match self.kept_group() {
            Some(group) => {
                let began = self.keeper.as_ref().and_then(|k| k.began);
                sweep_group(None, None, Some(group), None, began);
            }
            None => self.signal(libc::SIGKILL),
        }
    }

    /// End the tree: SIGKILL its group but the keeper, then sweep (see
    /// [`sweep`]); the keeper goes last. Call it once the root has been
    /// waited for (else its zombie is what remains of it). Returns how many
    /// processes the sweep killed.
    pub fn end(&mut self) -> usize {
        if self.ended {
            return 0;
        }
        self.ended = true;
        let group = self.kept_group();
        if group.is_none() {
            self.signal(libc::SIGKILL);
        }
        // Every process given the tag started after the keeper.
        let since = self
            .keeper
            .as_ref()
            .and_then(|k| live(k.process.id()))
            .map(|k| k.start);
        let began = self.keeper.as_ref().and_then(|k| k.began);
        let killed = sweep_group(Some(&self.tag), Some(&self.dir), group, since, began);
        // Now the keeper, and with it whatever joined the group since.
        self.signal(libc::SIGKILL);
        drop(self.keeper.take());
        killed
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.end();
    }
}

/// The keeper of a tree (see the module's doc).
struct Keeper {
    process: Child,
    /// Where the pid counter stood as it started.
    began: Option<Began>,
    /// Held, never written: its closing is the signal.
    _farm_alive: Option<std::io::PipeWriter>,
}

impl Keeper {
    fn start(tag: &str) -> Option<Keeper> {
        let (read, write) = std::io::pipe().ok()?;
        let process = Command::new("/bin/sh")
            .args(["-c", KEEPER, "farm-keeper", &format!("{TAG_VAR}={tag}")])
            .env_remove(TAG_VAR)
            // Not in the tree's directory: a sweep by directory must not
            // find it there, and it must not keep the directory busy.
            .current_dir("/")
            .stdin(read)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok()?;
        let began = Began::at(process.id());
        Some(Keeper {
            process,
            began,
            _farm_alive: Some(write),
        })
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // Also when the root could not be started: no keeper outlives its
        // tree.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Make `command`'s process die when this one does (Linux: the parent-death
/// signal, SIGKILL), so that a farm killed with SIGKILL leaves nothing it
/// started running (a session, a test command, `farm claim`'s command under
/// a claim that now reads as dead). Linux sends it when the spawning *thread* ends: spawn
/// from a thread that outlives the child.
pub fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between
    // fork and exec.
    unsafe {
        command.pre_exec(move || {
            #[cfg(target_os = "linux")]
            {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The parent may have died before prctl took effect.
                if libc::getppid() as u32 != parent {
                    libc::_exit(137);
                }
            }
            Ok(())
        });
    }
}

/// A live process as a sweep sees it.
struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    /// It has a controlling terminal: a person's shell or editor, say.
    tty: bool,
    /// One of the kernel's own threads: no environment, no directory.
    kernel: bool,
    /// When it started, in clock ticks since boot (field 22 of its stat).
    start: u64,
}

/// The flag of a kernel thread in field 9 of a process's stat.
const PF_KTHREAD: u32 = 0x0020_0000;

/// State and parent of `pid`, from `/proc/<pid>/stat`; `None` when it is
/// gone or has exited (a zombie writes nothing more).
fn live(pid: u32) -> Option<Proc> {
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    let stat = std::str::from_utf8(&stat).ok()?;
    // The command name may hold spaces and parentheses: count from the last `)`.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // After the group: the session, the terminal.
    let tty = fields.nth(1)?.parse::<i64>().ok()? != 0;
    // Then the terminal's group, the flags, fields 10 to 21, the start time.
    let flags: u32 = fields.nth(1)?.parse().ok()?;
    let start = fields.nth(22 - 10)?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgrp,
        tty,
        kernel: flags & PF_KTHREAD != 0,
        start,
    })
}

/// The whole of a file under `/proc`, read as such files are best read: no
/// size asked first (they all say 0) and one read of a page where the
/// contents fit, not a probe of 32 bytes doubling up (a sweep reads
/// hundreds of them). `None` when it cannot be read.
///
/// Not `File::read_to_end`, which asks for the size anyway (`statx` and
/// `lseek`) and reads again until it reads nothing: six calls a file where
/// three do. A read that returns less than it was given room for is the
/// end: the files read here (`stat`, `comm`, `environ`) are written out
/// whole by the kernel, as far as the room goes.
pub fn read_proc(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    Some(buf)
}

fn processes() -> Vec<Proc> {
    processes_above(None)
}

/// The live processes whose pid is above `floor` (all with `None`).
fn processes_above(floor: Option<u32>) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| floor.is_none_or(|f| pid > f))
        .filter_map(live)
        .collect()
}

/// Where the kernel's pid counter stood as a tree began, so that a sweep
/// at its end can read the state of the processes made since alone, not
/// of every process on the machine: ~10 µs each, 1.3 ms a session with
/// the 70 processes of this project's VM (`benches/against_old.sh`), more
/// on a busy server.
///
/// Linux hands out pids in turn, upwards from the last one, skipping those
/// in use, back to the bottom past `pid_max`. Every process of a tree is
/// made after its keeper; until the counter comes round to the keeper's
/// pid again, each has a pid above the keeper's. It cannot have come round
/// while the last pid handed out is above the keeper's and fewer processes
/// were made since (`processes` in `/proc/stat`, which counts every one
/// made on the machine) than half the pids there are; else every process
/// is read, as without a keeper. (A fork that fails after its pid was
/// taken — a cgroup's `pids.max` — moves the counter uncounted: an agent
/// would have to fail half a range of forks and then hide, which is the
/// sandbox's business, as the module's doc says of hostile agents.)
#[derive(Clone, Copy, Debug)]
struct Began {
    /// The keeper's pid.
    pid: u32,
    /// Processes made on the machine until then.
    forks: u64,
}

/// The pids Linux never hands out on wrapping round (`RESERVED_PIDS`).
const RESERVED_PIDS: u64 = 300;

impl Began {
    fn at(pid: u32) -> Option<Began> {
        Some(Began {
            pid,
            forks: forks_made()?,
        })
    }

    /// The pid every process of the tree is above now, if that is sure.
    fn floor(self) -> Option<u32> {
        let made = forks_made()?.checked_sub(self.forks)?;
        let room = pid_max()?.saturating_sub(RESERVED_PIDS) / 2;
        (last_pid()? >= self.pid && made < room).then_some(self.pid)
    }
}

/// How many processes (and threads) the machine has made since it booted.
fn forks_made() -> Option<u64> {
    let stat = read_proc("/proc/stat")?;
    let stat = std::str::from_utf8(&stat).ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("processes "))?
        .trim()
        .parse()
        .ok()
}

/// The last pid handed out in this process's pid namespace (the last field
/// of `/proc/loadavg`).
fn last_pid() -> Option<u32> {
    let load = read_proc("/proc/loadavg")?;
    std::str::from_utf8(&load)
        .ok()?
        .split_whitespace()
        .nth(4)?
        .parse()
        .ok()
}

/// The highest pid plus one (read once).
fn pid_max() -> Option<u64> {
    static MAX: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        let max = read_proc("/proc/sys/kernel/pid_max")?;
        std::str::from_utf8(&max).ok()?.trim().parse().ok()
    })
}

fn carries(pid: u32, entry: &[u8]) -> bool {
    read_proc(&format!("/proc/{pid}/environ"))
        .is_some_and(|env| env.split(|b| *b == 0).any(|e| e == entry))
}

fn works_in(pid: u32, dir: &Path) -> bool {
    std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
}

fn is_git(pid: u32) -> bool {
    read_proc(&format!("/proc/{pid}/comm")).is_some_and(|c| {
        let c = c.trim_ascii_end();
        c == b"git" || c.starts_with(b"git-")
    })
}

/// This process and its ancestors: never a sweep's (farm run from inside a
/// session of another farm carries that farm's tag).
fn own_line() -> BTreeSet<u32> {
    let mut line = BTreeSet::new();
    let mut pid = std::process::id();
    while pid > 1 && line.insert(pid) {
        match live(pid) {
            Some(p) => pid = p.ppid,
            None => break,
        }
    }
    line
}

/// Kill every live process carrying `tag`, every descendant of one, and
/// (with `dir`) every process working inside `dir` — but farm's own
/// children, git, what runs git and what git started (a push's shell or
/// `ssh`: the clone's recovery waits for a push rather than cuts it short)
/// and what has a controlling terminal (a person looking
/// into a clone; an escapee that called `setsid` has none) — rescanning
/// until none is left alive (or [`SWEEP_FOR`] has passed). Returns how
/// many were killed.
pub fn sweep(tag: Option<&str>, dir: Option<&Path>) -> usize {
    sweep_group(tag, dir, None, None, None)
}

/// [`sweep`], and also every member of process group `group` but its
/// leader. With `since` (a start time, as [`Proc::start`]), the tag is
/// looked for only in processes started since: one that began before the
/// tag was made cannot have been given it. With `began` (the tree's), only
/// the processes made since it began are looked at, where that can be told
/// by their pids (see [`Began`]): everything a sweep is after comes of the
/// tree.
fn sweep_group(
    tag: Option<&str>,
    dir: Option<&Path>,
    group: Option<u32>,
    since: Option<u64>,
    began: Option<Began>,
) -> usize {
    let entry = tag.map(|t| format!("{TAG_VAR}={t}").into_bytes());
    let dir = dir.map(|d| d.canonicalize().unwrap_or_else(|_| d.to_path_buf()));
    let me = std::process::id();
    let spared = own_line();
    let mut killed = BTreeSet::new();
    let until = Instant::now() + SWEEP_FOR;
    loop {
        // Not the kernel's own threads either.
        let all: Vec<Proc> = processes_above(began.and_then(Began::floor))
            .into_iter()
            .filter(|p| !spared.contains(&p.pid) && !p.kernel)
            .collect();
        // git's own helpers run under a shell it started (`sh -c
        // git-receive-pack …` for a push to a path): such a shell, left in a
        // clone by a killed farm's push, is that push landing — what fencing
        // waits for — not a session's leftover.
        let runs_git = |pid: u32| {
            let mut below = vec![pid];
            while let Some(p) = below.pop() {
                if is_git(p) {
                    return true;
                }
                below.extend(all.iter().filter(|c| c.ppid == p).map(|c| c.pid));
            }
            false
        };
        // And what git itself started there: the `ssh` carrying a killed
        // farm's push to its hub (cutting it left the push half-known, and
        // its work rescued though it had landed).
        let under_git = |pid: u32| {
            let mut at = pid;
            for _ in 0..64 {
                let Some(p) = all.iter().find(|p| p.pid == at) else {
                    return false;
                };
                if p.ppid <= 1 {
                    return false;
                }
                if is_git(p.ppid) {
                    return true;
                }
                at = p.ppid;
            }
            false
        };
        let mut hit: BTreeSet<u32> = all
            .iter()
            .filter(|p| {
                group.is_some_and(|g| p.pgrp == g && p.pid != g)
                    || entry
                        .as_deref()
                        .is_some_and(|e| since.is_none_or(|s| p.start >= s) && carries(p.pid, e))
                    || dir.as_deref().is_some_and(|d| {
                        p.ppid != me
                            && !p.tty
                            && works_in(p.pid, d)
                            && !runs_git(p.pid)
                            && !under_git(p.pid)
                    })
            })
            .map(|p| p.pid)
            .collect();
        // What a tagged process started with its environment cleared.
        loop {
            let more: Vec<u32> = all
                .iter()
                .filter(|p| hit.contains(&p.ppid) && !hit.contains(&p.pid))
                .map(|p| p.pid)
                .collect();
            if more.is_empty() {
                break;
            }
            hit.extend(more);
        }
        if hit.is_empty() || Instant::now() >= until {
            return killed.len();
        }
        for &pid in &hit {
            // SAFETY: kill(2) on a process just found to be the tree's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        killed.extend(hit);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone_soon(pid: u32) -> bool {
        let start = Instant::now();
        while live(pid).is_some() {
            if start.elapsed() > Duration::from_secs(5) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// The pid written in `path`, once it is there.
    fn pid_from(path: &Path) -> u32 {
        let start = Instant::now();
        loop {
            if let Some(pid) = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
            {
                return pid;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no pid in {path:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Spawn `script` with `sh`, in `dir`, with the environment `env`
    /// only (`None`: farm's), in a session of its own; its pid.
    fn detached(script: &str, dir: &Path, env: Option<&[(&str, &str)]>) -> u32 {
        let mut cmd = Command::new("setsid");
        cmd.args(["sh", "-c", script]).current_dir(dir);
        if let Some(env) = env {
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .envs(env.iter().copied());
        }
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        // Reaped by a thread, so its zombie does not pass for it alive.
        std::thread::spawn(move || child.wait());
        pid
    }

    /// `environ` past its first page, `stat` whole, in one call each.
    #[test]
    fn a_proc_file_is_read_whole_past_its_first_page() {
        let big = format!("FARM_BIG={}", "x".repeat(10_000));
        let (key, value) = big.split_once('=').unwrap();
        let mut child = Command::new("sleep")
            .arg("10")
            .env(key, value)
            .spawn()
            .unwrap();
        // Until its exec has set its environment up (a spawn returns once
        // the exec has begun).
        let start = Instant::now();
        let environ = loop {
            let environ = read_proc(&format!("/proc/{}/environ", child.id()));
            if environ.as_ref().is_none_or(|e| !e.is_empty())
                || start.elapsed() > Duration::from_secs(5)
            {
                break environ;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let stat = read_proc(&format!("/proc/{}/stat", child.id()));
        let _ = child.kill();
        let _ = child.wait();
        let environ = environ.unwrap();
        assert!(environ.ends_with(b"\0"), "{} bytes", environ.len());
        assert!(environ.split(|b| *b == 0).any(|e| e == big.as_bytes()));
        let stat = String::from_utf8(stat.unwrap()).unwrap();
        assert!(
            stat.starts_with(&format!("{} (sleep) ", child.id())),
            "{stat}"
        );
        assert!(stat.ends_with('\n'), "{stat}");
        assert_eq!(read_proc("/proc/no-such-process/stat"), None);
    }

    /// A tagged process elsewhere, a process in the directory with its
    /// environment cleared, and a child of a tagged one with a cleared
    /// environment are all killed; a process elsewhere without the tag is
    /// not.
    #[test]
    fn a_sweep_kills_the_tagged_their_children_and_what_works_in_the_dir() {
        let tree = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let tag = new_tag();
        let entry = [(TAG_VAR, tag.as_str())];
        let tagged = detached("sleep 30", elsewhere.path(), Some(&entry));
        // An orphan (not farm's child, which a sweep by directory spares).
        let in_dir_file = elsewhere.path().join("in-dir.pid");
        detached(
            &format!("sleep 30 & echo $! > {}", in_dir_file.display()),
            tree.path(),
            Some(&[]),
        );
        let in_dir = pid_from(&in_dir_file);
        let child_file = elsewhere.path().join("child.pid");
        let parent = detached(
            &format!(
                "env -i sh -c 'echo $$ > {}; exec sleep 30' & wait",
                child_file.display()
            ),
            elsewhere.path(),
            Some(&entry),
        );
        let bystander = detached("sleep 30", elsewhere.path(), Some(&[]));
        let child = pid_from(&child_file);
        // Let the exec of each `sleep` settle: the environ read is the new one.
        std::thread::sleep(Duration::from_millis(100));
        let killed = sweep(Some(&tag), Some(tree.path()));
        for (pid, what) in [
            (tagged, "tagged"),
            (in_dir, "in the dir"),
            (parent, "parent"),
            (child, "untagged child of a tagged one"),
        ] {
            assert!(gone_soon(pid), "{what} ({pid}) survived the sweep");
        }
        // (A shell may fork its last command rather than exec it: more.)
        assert!(killed >= 4, "{killed}");
        assert!(live(bystander).is_some(), "a bystander was killed");
        // SAFETY: kill(2) on the process this test started.
        unsafe { libc::kill(bystander as i32, libc::SIGKILL) };
    }

    /// farm SIGKILLed as a tree ends, after the group was killed and before
    /// the sweep found what left it: the keeper, woken by farm's death, ends
    /// the escapee. The group's SIGKILL used to take the keeper with it, so
    /// a session's `setsid` escapee ran on after a farm killed in that
    /// window (the chaos suite saw one still running after farm's respawn).
    #[test]
    fn a_farm_killed_between_the_groups_kill_and_the_sweep_leaves_no_escapee() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("escapee.pid");
        let mut tree = Tree::new(dir.path());
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            &format!(
                "cd / && setsid sh -c 'echo $$ > {}; exec sleep 30' & sleep 30",
                pid_file.display()
            ),
        ]);
        let mut root = tree.root(&mut cmd).spawn().unwrap();
        tree.spawned(&root);
        let escapee = pid_from(&pid_file);
        tree.kill();
        root.wait().unwrap();
        // farm dies here: its end of the keeper's pipe closes, and nothing
        // else of it runs (no sweep, no kill of the keeper).
        let keeper = tree.keeper.as_mut().unwrap();
        keeper._farm_alive = None;
        let gone = gone_soon(escapee);
        // Clean up after the test whatever it found.
        tree.end();
        assert!(
            gone,
            "the escapee ({escapee}) outlived a farm killed mid-end"
        );
    }

    /// A tree's end kills a root's child that left the group with `setsid`.
    #[test]
    fn a_trees_end_kills_what_left_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("escapee.pid");
        let mut tree = Tree::new(dir.path());
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            &format!(
                "cd / && setsid sh -c 'echo $$ > {}; exec sleep 30' &",
                pid_file.display()
            ),
        ]);
        let mut root = tree.root(&mut cmd).spawn().unwrap();
        tree.spawned(&root);
        root.wait().unwrap();
        let escapee = pid_from(&pid_file);
        assert!(live(escapee).is_some());
        assert!(tree.end() >= 1);
        assert!(
            gone_soon(escapee),
            "the escapee ({escapee}) outlived its tree"
        );
    }

    /// What a tree makes after its keeper is above the keeper's pid, and
    /// the floor says so only while the pid counter cannot have come round:
    /// a keeper's pid above the last one handed out (the counter wrapped),
    /// or more processes made since than half the pids, and every process
    /// is read again.
    #[test]
    fn a_sweep_reads_only_what_was_made_since_its_tree_began_while_that_is_sure() {
        let began = Began::at(std::process::id()).expect("/proc/stat and /proc/loadavg");
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Linux's counter, not a namespace's own, may have wrapped since
        // this test's process began; the child is then below it.
        if pid > began.pid {
            assert_eq!(began.floor(), Some(began.pid));
            assert!(
                processes_above(began.floor())
                    .iter()
                    .all(|p| p.pid > began.pid)
            );
        }
        child.wait().unwrap();
        let wrapped = Began {
            pid: last_pid().unwrap() + 1,
            ..began
        };
        assert_eq!(wrapped.floor(), None, "a counter that came round");
        let room = (pid_max().unwrap() - RESERVED_PIDS) / 2;
        let long_ago = Began {
            forks: forks_made().unwrap() - room,
            ..began
        };
        assert_eq!(long_ago.floor(), None, "half the pids made since");
        let me = std::process::id();
        assert!(processes_above(None).iter().any(|p| p.pid == me));
    }

    /// A sweep looks for the tag only in processes started since the
    /// keeper, and passes over the kernel's threads: the start time and the
    /// flags it reads must be the kernel's (fields 22 and 9), or a tagged
    /// escapee would be passed over.
    #[test]
    fn a_process_start_and_kind_are_read_from_its_stat() {
        let me = std::process::id();
        let start = live(me).unwrap().start;
        assert_eq!(Some(start), crate::claims::host::process_start(me));
        assert!(start > 0);
        assert!(!live(me).unwrap().kernel);
        // kthreadd, where this /proc shows the kernel's threads.
        if let Some(p) = live(2).filter(|p| p.ppid == 0) {
            assert!(p.kernel, "pid 2 with no parent is kthreadd");
        }
    }
}
