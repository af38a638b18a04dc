//! Git processes working in a clone, found in `/proc`: a killed farm's
//! `git push` outlives it and may still land, so until such a process is
//! gone its locks are not stale and the commits it pushes are not to be
//! rescued.

use std::path::Path;
use std::time::Duration;

/// The longest wait for git processes an earlier farm left in a clone.
const GIT_LEFT_SETTLES: Duration = Duration::from_secs(600);

/// Wait (up to [`GIT_LEFT_SETTLES`], saying so once) until no git process
/// works in the clone at `dir`: a killed farm's `git push` outlives it and
/// may still land, so until it is gone its locks are not stale, and the
/// commits it pushes are not to be rescued (the chaos suite saw an orphan
/// rescue of a tip that landed on main just after). Only git processes
/// count (a user's shell may sit in a clone); read from `/proc`, so on a
/// system without it there is nothing to wait for. (The hub's side of such
/// a push, a `receive-pack` on this machine whose pusher was killed too,
/// keeps the hub's push lock, which `recover` waits for.)
pub(super) fn wait_for_git_left_in(dir: &Path, say: &dyn Fn(&str)) {
    let Ok(dir) = dir.canonicalize() else {
        return;
    };
    let start = std::time::Instant::now();
    let mut said = false;
    while let Some(pid) = git_working_in(&dir) {
        if start.elapsed() > GIT_LEFT_SETTLES {
            say(&format!(
                "git (process {pid}) still works in this clone after {}s; going on",
                GIT_LEFT_SETTLES.as_secs()
            ));
            return;
        }
        if !said {
            say(&format!(
                "waiting for git (process {pid}), left working in this clone by an earlier run"
            ));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A git process (other than this one) whose working directory is in `dir`.
pub(super) fn git_working_in(dir: &Path) -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            let comm = comm.trim();
            if pid == me || !(comm == "git" || comm.starts_with("git-")) {
                return None;
            }
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            cwd.starts_with(dir).then_some(pid)
        })
}
