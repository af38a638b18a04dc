//! What each process of a session may use: memory and CPU time
//! (`--session-memory`, `--session-cpu`, farm.toml `session_memory`,
//! `session_cpu`). A runaway session — a build that eats the machine's
//! memory, a loop that spins for hours — fails its attempt instead of
//! starving the other agents.
//!
//! The limits are the kernel's per-process resource limits (`setrlimit`,
//! as `prlimit` sets them), set in the session's first process and
//! inherited by everything it starts: each process gets the whole amount,
//! not the session as a sum. A cgroup would bound the session's sum; this
//! needs no privilege and no cgroup v2 delegation, which the machines farm
//! runs on often lack — the start-up line says which kind is in force.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::error::Error;

/// Between the CPU limit's warning (SIGXCPU, which ends a process that
/// does not handle it) and the kernel's SIGKILL.
const CPU_GRACE: Duration = Duration::from_secs(5);

/// A session's limits; none by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Bytes of address space a process may map (RLIMIT_AS).
    pub memory: Option<u64>,
    /// CPU time a process may use (RLIMIT_CPU), whole seconds.
    pub cpu: Option<Duration>,
}

impl Quota {
    /// From the flags (or their variables) over farm.toml's settings;
    /// `whose` names each source for an error.
    pub fn resolve(
        memory: [(Option<&str>, &str); 2],
        cpu: [(Option<&str>, &str); 2],
    ) -> Result<Quota, Error> {
        let memory = match memory.into_iter().find_map(|(v, w)| Some((v?, w))) {
            None => None,
            Some((text, whose)) => Some(parse_size(text).map_err(|e| {
                Error::usage(format!("{whose} `{text}`: {e}"))
                    .hint("give a size in bytes with K, M, G or T after it: 4G, 512M")
            })?),
        };
        let cpu = match cpu.into_iter().find_map(|(v, w)| Some((v?, w))) {
            None => None,
            Some((text, whose)) => {
                let d = humantime::parse_duration(text).map_err(|e| {
                    Error::usage(format!("{whose} `{text}`: {e}"))
                        .hint("give a duration: 30m, 2h, 90s")
                })?;
                if d < Duration::from_secs(1) {
                    return Err(Error::usage(format!(
                        "{whose} `{text}`: give at least 1s of CPU time"
                    )));
                }
                Some(d)
            }
        };
        Ok(Quota { memory, cpu })
    }

    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.cpu.is_none()
    }

    /// The start-up line's words, `None` when there are no limits.
    pub fn describe(&self) -> Option<String> {
        Some(format!(
            "session limits: {} for each process of a session (setrlimit; the session's \
             processes are not bounded as a sum)",
            self.amounts()?
        ))
    }

    /// What the limits allow: `4 GiB of memory and 30m of CPU time`.
    pub fn amounts(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if let Some(bytes) = self.memory {
            parts.push(format!("{} of memory", show_size(bytes)));
        }
        if let Some(cpu) = self.cpu {
            parts.push(format!(
                "{} of CPU time",
                humantime::format_duration(Duration::from_secs(cpu.as_secs()))
            ));
        }
        Some(parts.join(" and "))
    }

    /// Make `command`'s process (and all it starts) live within the limits.
    pub fn apply(&self, command: &mut Command) {
        if self.is_empty() {
            return;
        }
        let limits = *self;
        // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if let Some(bytes) = limits.memory {
                    set(libc::RLIMIT_AS, bytes, bytes)?;
                }
                if let Some(cpu) = limits.cpu {
                    let soft = cpu.as_secs();
                    set(libc::RLIMIT_CPU, soft, soft + CPU_GRACE.as_secs())?;
                }
                Ok(())
            });
        }
    }
}

/// Lower a limit (never raise one already lower: a hard limit farm itself
/// runs under stays).
fn set(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> std::io::Result<()> {
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain syscall on a local struct.
    if unsafe { libc::getrlimit(resource, &mut now) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let max = now.rlim_max;
    let limit = libc::rlimit {
        rlim_cur: soft.min(max),
        rlim_max: hard.min(max),
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `4G`, `512M`, `1.5G`, `300000K`, `1073741824`: bytes, binary units (`K`
/// is 1024), an optional `B` or `iB` after the unit.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((at, _)) => t.split_at(at),
        None => (t, ""),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a size"))?;
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("`{unit}` is not a unit (K, M, G or T)")),
    };
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < (16 << 20) as f64 {
        return Err("give at least 16M: no agent CLI starts in less".into());
    }
    Ok(bytes.min(u64::MAX as f64) as u64)
}

/// Bytes as a person reads them: `4 GiB`, `512 MiB`.
fn show_size(bytes: u64) -> String {
    let units = [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)];
    for (name, size) in units {
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if v.fract() == 0.0 {
                format!("{v:.0} {name}")
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_in_binary_units_and_nonsense_is_refused() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("lots").unwrap_err(), "`lots` is not a size");
        assert!(parse_size("4Q").unwrap_err().contains("not a unit"));
        assert!(parse_size("1K").unwrap_err().contains("at least 16M"));
        assert_eq!(show_size(4 << 30), "4 GiB");
        assert_eq!(show_size(3 << 29), "1.5 GiB");
    }

    #[test]
    fn a_flag_wins_over_farm_toml_and_each_error_names_its_source() {
        let q = Quota::resolve(
            [(Some("1G"), "--session-memory"), (Some("2G"), "farm.toml")],
            [(None, "--session-cpu"), (Some("10m"), "farm.toml")],
        )
        .unwrap();
        assert_eq!(q.memory, Some(1 << 30));
        assert_eq!(q.cpu, Some(Duration::from_secs(600)));
        let e = Quota::resolve(
            [
                (None, "--session-memory"),
                (Some("x"), "farm.toml `session_memory`"),
            ],
            [(None, "--session-cpu"), (None, "farm.toml")],
        )
        .unwrap_err();
        assert!(
            e.message.contains("farm.toml `session_memory` `x`"),
            "{e:?}"
        );
        let e = Quota::resolve(
            [(None, "--session-memory"), (None, "farm.toml")],
            [(Some("0s"), "--session-cpu"), (None, "farm.toml")],
        )
        .unwrap_err();
        assert!(e.message.contains("at least 1s"), "{e:?}");
        assert_eq!(Quota::default().describe(), None);
    }

    #[test]
    fn a_process_over_its_cpu_time_is_stopped_by_the_kernel() {
        let quota = Quota {
            memory: Some(256 << 20),
            cpu: Some(Duration::from_secs(1)),
        };
        let mut spin = Command::new("sh");
        spin.args(["-c", "while :; do :; done"]);
        quota.apply(&mut spin);
        let status = spin.status().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGXCPU), "{status:?}");
        let mut limits = Command::new("sh");
        limits.args(["-c", "ulimit -v; ulimit -t"]);
        quota.apply(&mut limits);
        let out = limits.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "262144\n1\n");
    }
}
