//! A hub on "another machine": `git daemon` serving bare repositories on
//! 127.0.0.1. Shared by the benches that reach a hub by URL (`#[path =
//! "common/daemon.rs"] mod daemon;`, with `common/process.rs` as `process`).

#![allow(dead_code)]

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::process::{Res, command, output};

/// `git daemon` serving `base`, in a process group of its own; killed with
/// all its per-connection children when dropped.
pub struct Daemon {
    child: Child,
    pub port: u16,
}

impl Daemon {
    pub fn start(base: &Path) -> Res<Daemon> {
        // A free port can be taken between the probe and the daemon's bind:
        // try a few.
        let mut why = String::new();
        for _ in 0..10 {
            let port = free_port()?;
            match Daemon::try_start(base, port) {
                Ok(daemon) => return Ok(daemon),
                Err(e) => why = e,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = fs::read_to_string(base.join("daemon.log")).unwrap_or_default();
        Err(format!("git daemon would not start: {why}\n{log}"))
    }

    fn try_start(base: &Path, port: u16) -> Res<Daemon> {
        let log = fs::File::options()
            .create(true)
            .append(true)
            .open(base.join("daemon.log"))
            .map_err(|e| format!("daemon log: {e}"))?;
        // `git-daemon` itself, not `git daemon`, which would run it as a
        // child: the parent-death signal must reach the daemon, so that it
        // dies with the bench even when the bench is killed and cannot drop
        // this (in a group of its own, a Ctrl-C does not reach it).
        let mut cmd = command(daemon_program()?);
        farm::procs::die_with_parent(&mut cmd);
        let child = cmd
            .arg("--reuseaddr")
            .arg("--enable=receive-pack")
            .arg("--export-all")
            .arg(format!("--base-path={}", base.display()))
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(base)
            .current_dir(base)
            .stdout(Stdio::null())
            .stderr(log)
            // Its own group, so that the per-connection children
            // (upload-pack, receive-pack) die with it.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot spawn git daemon: {e}"))?;
        // From here on, a failure kills it.
        let mut daemon = Daemon { child, port };
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("git daemon on port {port} exited: {status}"));
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(daemon);
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "git daemon on port {port} never accepted a connection"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self, hub: &str) -> String {
        format!("git://127.0.0.1:{}/{hub}.git", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this bench created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// `$(git --exec-path)/git-daemon`.
fn daemon_program() -> Res<PathBuf> {
    let exec_path = output(command("git").arg("--exec-path"), "git --exec-path")?;
    let program = Path::new(exec_path.trim()).join("git-daemon");
    if program.is_file() {
        Ok(program)
    } else {
        Err(format!("no git daemon at {}", program.display()))
    }
}

/// A port nobody listens on right now.
fn free_port() -> Res<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
