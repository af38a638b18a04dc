//! This host's identity and its processes, as liveness needs them.
//!
//! A holder is named by (host, boot id, pid, process start time). The boot id
//! tells a claim from before a reboot; the start time (field 22 of
//! `/proc/<pid>/stat`, clock ticks since boot) tells a reused pid from the
//! process that made the claim. Both are read from `/proc`, so liveness by
//! process is Linux-only; elsewhere claims fall back to heartbeat age.

use std::sync::OnceLock;

/// Who "here" is: the host name and this boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Here {
    pub host: String,
    pub boot_id: String,
}

/// Overrides the host name farm writes in claims and judges "this host" by:
/// for containers that share a kernel and a host name, and for tests that
/// play several machines on one.
pub const HOST_ENV: &str = "FARM_HOST";

impl Here {
    /// The current host, read once per process.
    pub fn current() -> &'static Here {
        static HERE: OnceLock<Here> = OnceLock::new();
        HERE.get_or_init(|| {
            let host = std::env::var(HOST_ENV)
                .ok()
                .filter(|h| !h.trim().is_empty())
                .unwrap_or_else(hostname);
            Here {
                host,
                boot_id: boot_id(),
            }
        })
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // within it or truncates, and we stop at the first NUL either way.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The start time of a running process, or `None` when no process has this
/// pid or it has already exited (a zombie waiting for its parent: it has
/// dropped its locks and will run no more).
///
/// The value is only compared with itself, never converted to a wall time.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = crate::procs::read_proc(&format!("/proc/{pid}/stat"))?;
    parse_start_time(std::str::from_utf8(&stat).ok()?)
}

/// This process's own start time.
pub fn own_start() -> Option<u64> {
    static OWN: OnceLock<Option<u64>> = OnceLock::new();
    *OWN.get_or_init(|| process_start(std::process::id()))
}

/// Field 22 of `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may itself contain spaces and parentheses, so fields are counted from
/// the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // After the comm come field 3 (state) onwards; start time is field 22.
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(22 - 4)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_skips_tricky_comm() {
        let stat =
            "4121 (a) b (c) S 1 4121 4121 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_start_time("1 (x) S 1 2"), None);
        let zombie = stat.replace(") S ", ") Z ");
        assert_eq!(parse_start_time(&zombie), None, "a zombie has exited");
    }

    #[test]
    fn own_process_is_visible() {
        let own = own_start().expect("/proc is readable on Linux");
        assert_eq!(process_start(std::process::id()), Some(own));
        assert!(!Here::current().host.is_empty());
    }
}
