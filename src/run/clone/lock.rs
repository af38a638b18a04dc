//! The clone's own lock: a `flock` on `<clone>.lock` next to it, held for
//! the loop's life, so that one loop alone uses a clone — and so that
//! whatever git left in it with no live process behind it is stale.

use std::path::Path;
use std::time::Duration;

use crate::error::Error;

/// How long a clone's lock is tried before it is judged held by another run.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Lock the clone at `dir` for agent `name`: one loop uses a clone.
pub(super) fn lock_clone(dir: &Path, name: &str) -> Result<std::fs::File, Error> {
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", parent.display())))?;
    let mut lock_name = dir.file_name().unwrap_or_default().to_owned();
    lock_name.push(".lock");
    let path = parent.join(lock_name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::failure(format!("cannot open `{}`: {e}", path.display())))?;
    // A lock held a moment longer by a process that is exiting (a chaos
    // round saw the clone reopened after its git was SIGKILLed refused with
    // no holder left in /proc/locks a moment later): try again for a while
    // before calling it another run's.
    match crate::flock::lock_within(&file, LOCK_PATIENCE, Duration::from_millis(20)) {
        Ok(true) => Ok(file),
        Ok(false) => {
            // Who holds it, as the kernel says: another run (its pid), or
            // this very one — a clone not let go, which is farm's bug, said
            // as such (a chaos round once ended an agent's loop so).
            use std::os::unix::fs::MetadataExt;
            let holder = file.metadata().ok().and_then(|m| flock_holder(m.ino()));
            if holder == Some(std::process::id()) {
                return Err(Error::failure(format!(
                    "agent `{name}`: `{}` is still held by this farm run (pid {}): one of its clones was not let go",
                    path.display(),
                    std::process::id()
                )));
            }
            let by = holder.map_or(String::new(), |pid| format!(" (pid {pid})"));
            Err(Error::usage(format!(
                "agent `{name}` is already running in another farm run on this host{by}"
            ))
            .hint("give this run other agent names: farm run --name NAME"))
        }
        Err(e) => Err(Error::failure(format!(
            "cannot lock `{}`: {e}",
            path.display()
        ))),
    }
}

/// The pid that holds a `flock` on the file with inode `ino`, from
/// `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`).
fn flock_holder(ino: u64) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, dev_ino) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let inode: u64 = dev_ino.rsplit(':').next()?.parse().ok()?;
        (*kind == "FLOCK" && inode == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clone's lock held by this very process is named as such (a clone
    /// not let go: farm's bug), not as "another farm run".
    #[test]
    fn a_clone_lock_held_by_this_process_is_said_so() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("clones/a");
        let held = lock_clone(&dir, "a").unwrap();
        let e = lock_clone(&dir, "a").unwrap_err();
        assert!(
            e.message.contains("is still held by this farm run")
                && e.message.contains("one of its clones was not let go"),
            "{e}"
        );
        drop(held);
        assert!(lock_clone(&dir, "a").is_ok());
    }
}
