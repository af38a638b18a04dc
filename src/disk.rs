//! Free space where farm writes: `farm doctor` checks it, `farm run` waits
//! for it before it starts.

use std::path::Path;
use std::time::Duration;

/// Below this much free space in the state dir a run does not start: a
/// clone, a session log and the journal need room, and a run that starts
/// anyway fails at its first write (and `loop.sh` would respawn it into
/// the same failure all night).
pub const RUN_NEEDS: u64 = 32 << 20;

/// How often a run waiting for space looks again.
pub const LOOK_EVERY: Duration = Duration::from_secs(5);

/// Bytes free to an unprivileged writer on the filesystem of `path` (or of
/// its nearest existing ancestor); `None` when it cannot be read.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = path.ancestors().find(|p| p.exists())?;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `st` is a plain C struct, valid zeroed; statvfs only writes it.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_bavail * st.f_frsize)
    }
}

/// `bytes` for a person: `12 MiB`, `3.4 GiB`.
pub fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{} MiB", bytes >> 20)
    }
}
