//! A git talking to a remote over the network that has gone silent is
//! stopped: git's own transports have no timeout for `git://` and ssh (only
//! `GIT_HTTP_LOW_SPEED_*` for https), and a peer that accepts a connection
//! and then sends nothing held one agent in `git clone` for minutes, and
//! would hold it for ever.
//!
//! "Silent" is measured from outside, without touching git's pipes: the
//! bytes read and written (`rchar` + `wchar` of `/proc/<pid>/io`) and the
//! CPU time (`utime` + `stime` of `/proc/<pid>/stat`) of every process in
//! the git's process group — git starts children (`ssh`, `pack-objects`,
//! `index-pack`, a remote helper) that do the talking — sampled about once a
//! second. Any change is progress. Counting CPU as well keeps a push whose
//! `pack-objects` is compressing deltas over mmapped packs (which `rchar`
//! does not see) from being taken for a stalled one; a git blocked on a
//! silent socket neither reads, writes nor runs. When nothing changed for
//! the whole quiet time, the process group is killed (SIGKILL: a git
//! waiting on a dead peer would not act on TERM any sooner).
//!
//! The git is started in a process group of its own so that its children
//! die with it; it is not reaped until the watch has ended (`waitid` with
//! `WNOWAIT`), so the group's id cannot be reused by another process before
//! the watch stops looking at it.
//!
//! The first look is one period after the start, not at it: a look reads
//! two files of every process on the machine (about 200 opens with 80
//! processes), and most gits (a claim's fetch or push) are over within the
//! period, so they cost no look at all. Silence is then counted from that
//! first look, so a git silent from its start is stopped up to one period
//! later than `quiet`.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Run `cmd` to its end, as `Command::output` does, killing its process
/// group when its processes have moved no byte and used no CPU for `quiet`.
/// The output, and whether it was so killed.
pub fn output(cmd: &mut Command, quiet: Duration) -> std::io::Result<(Output, bool)> {
    let (out, watched) = output_watched(cmd, quiet)?;
    Ok((out, watched.stalled))
}

/// What the watch of one git did.
#[derive(Debug, Default, Clone, Copy)]
struct Watched {
    /// It killed the git's group for silence.
    stalled: bool,
    /// How often it read the processes' counters.
    looks: usize,
}

/// [`output`], with what the watch did.
fn output_watched(cmd: &mut Command, quiet: Duration) -> std::io::Result<(Output, Watched)> {
    cmd.process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let (done, ended) = mpsc::channel::<()>();
    let watch = std::thread::spawn(move || watch(pid, quiet, &ended));
    wait_unreaped(pid);
    let _ = done.send(());
    let watched = watch.join().unwrap_or_default();
    let status = child.wait()?;
    Ok((
        Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        },
        watched,
    ))
}

/// Sample the activity of process group `pgid` until `ended` says its
/// leader exited, the first time a period after the start (see the
/// module's doc); kill the group and say it stalled when the activity
/// stayed the same for `quiet`.
fn watch(pgid: u32, quiet: Duration, ended: &mpsc::Receiver<()>) -> Watched {
    let period = (quiet / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut watched = Watched::default();
    // No look yet: the first one counts as a change, and silence is
    // counted from it.
    let mut last: Option<Option<u64>> = None;
    let mut since = Instant::now();
    loop {
        match ended.recv_timeout(period) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return watched,
        }
        let now = activity(pgid);
        watched.looks += 1;
        // Nothing to measure (no /proc): never taken for silence.
        if now.is_none() || last != Some(now) {
            last = Some(now);
            since = Instant::now();
            continue;
        }
        if since.elapsed() >= quiet {
            let pgid = i32::try_from(pgid).unwrap_or(i32::MAX);
            // SAFETY: a plain syscall; the group's leader is not reaped yet,
            // so `pgid` still names this git's group.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            watched.stalled = true;
            return watched;
        }
    }
}

/// Wait until process `pid` (a child of ours) has exited, without reaping it.
fn wait_unreaped(pid: u32) {
    loop {
        // SAFETY: waitid fills the zeroed siginfo it is given.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The bytes moved and CPU ticks used by the processes of group `pgid`,
/// summed; `None` when not even its leader can be read (no `/proc`).
fn activity(pgid: u32) -> Option<u64> {
    let leader = counters(pgid)?;
    let mut sum = leader.1;
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for entry in procs.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == pgid {
                continue;
            }
            if let Some((group, n)) = counters(pid)
                && group == pgid
            {
                sum = sum.wrapping_add(n);
            }
        }
    }
    Some(sum)
}

/// Process `pid`'s group, and its `rchar + wchar + utime + stime`.
fn counters(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`: comm may hold spaces and parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let group: u32 = fields.get(2)?.parse().ok()?;
    let cpu = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut n = cpu(11).wrapping_add(cpu(12));
    // Another user's process (a setuid helper) hides its io: CPU alone then.
    if let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) {
        for line in io.lines() {
            if let Some(v) = line
                .strip_prefix("rchar: ")
                .or_else(|| line.strip_prefix("wchar: "))
            {
                n = n.wrapping_add(v.trim().parse().unwrap_or(0));
            }
        }
    }
    Some((group, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that writes for a while and then goes silent (its child
    /// too: the group is killed, not only the leader) is killed about
    /// `quiet` after it went silent, not before.
    #[test]
    fn a_process_that_goes_silent_is_killed_and_one_that_talks_is_not() {
        let quiet = Duration::from_millis(1500);
        let started = Instant::now();
        // Talks every 0.3 s for 2.4 s (longer than `quiet`), then sleeps,
        // with a sleeping child holding its stdout.
        let (out, stalled) = output(
            Command::new("sh").args([
                "-c",
                "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.3; done; sleep 60 & sleep 60",
            ]),
            quiet,
        )
        .unwrap();
        let took = started.elapsed();
        assert!(stalled, "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 8);
        assert!(took >= Duration::from_millis(2400) + quiet, "{took:?}");
        assert!(took < Duration::from_secs(20), "{took:?}");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&out.status),
            Some(libc::SIGKILL)
        );

        let (out, stalled) =
            output(Command::new("sh").args(["-c", "echo done; exit 3"]), quiet).unwrap();
        assert!(!stalled);
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"done\n");
    }

    /// A git over within the first period costs no look at the machine's
    /// processes: every claim's fetch and push is such a git. A look at
    /// its start read two files of every process (about 200 opens a git),
    /// and took `farm claim` through a `git://` hub from 50 to 61 ms of CPU.
    #[test]
    fn a_process_over_within_the_first_period_is_never_looked_at() {
        let quiet = Duration::from_secs(8);
        let (out, watched) =
            output_watched(Command::new("sh").args(["-c", "exit 0"]), quiet).unwrap();
        assert!(out.status.success());
        assert!(!watched.stalled);
        assert_eq!(watched.looks, 0);
        // One that outlives a period is looked at.
        let (_, watched) =
            output_watched(Command::new("sh").args(["-c", "sleep 1.3"]), quiet).unwrap();
        assert!(watched.looks >= 1, "{watched:?}");
        assert!(!watched.stalled);
    }

    /// Work that only burns CPU (a delta compression) is progress.
    #[test]
    fn cpu_work_is_progress() {
        let (out, stalled) = output(
            Command::new("sh").args([
                "-c",
                "end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do :; done",
            ]),
            Duration::from_millis(700),
        )
        .unwrap();
        assert!(!stalled, "{out:?}");
        assert!(out.status.success());
    }
}
