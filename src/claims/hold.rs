//! Holding a claim while a command runs — `farm claim TASK -- COMMAND`, in
//! the manner of `flock(1)`.
//!
//! This farm process is the claim's holder: it keeps the claim's OS lock,
//! heartbeats it, and releases it when the command exits. The command runs
//! with its argv as given (no shell) and dies with farm: on Linux it gets
//! the parent-death signal, so a farm killed with SIGKILL leaves no command
//! running under a claim that now reads as dead. SIGTERM and SIGHUP sent to
//! farm are passed on to the command; SIGINT from a terminal already reaches
//! both (same process group), so farm only waits for the command to finish.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::claims::{ClaimStore, Held, StoreError};
use crate::error::{Code, Error};
use crate::output::Out;

/// Run `argv` while holding `held`; release it afterwards. Returns the
/// command's exit status as an exit code (128 + N when killed by signal N);
/// a command that cannot be started is an error of kind
/// [`Code::Status`] 127 (not found), 126 (not executable) or 1.
pub fn run(
    store: &dyn ClaimStore,
    held: Held,
    argv: &[OsString],
    every: Duration,
    out: &Out,
) -> Result<u8, Error> {
    let task = held.claim().task.clone();
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env("FARM_TASK", task.as_str())
        .env("FARM_AGENT", &held.claim().agent)
        .env("FARM_NONCE", held.claim().nonce.as_str())
        .env("FARM_CLAIM", store.claim_location(&task));
    crate::procs::die_with_parent(&mut command);
    // Register before spawning so that a signal in between is not lost.
    let mut signals = Signals::new([SIGTERM, SIGHUP, SIGINT])
        .map_err(|e| Error::failure(format!("cannot install signal handlers: {e}")).caused_by(e))?;
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let name = argv[0].to_string_lossy();
            let release = store.release_held(held);
            let (code, hint) = match e.kind() {
                std::io::ErrorKind::NotFound => {
                    (127, format!("is `{name}` installed and on PATH?"))
                }
                std::io::ErrorKind::PermissionDenied => (126, format!("is `{name}` executable?")),
                _ => (1, "check the command".to_owned()),
            };
            let cannot = Error::new(Code::Status(code), format!("cannot run `{name}`: {e}"))
                .hint(hint)
                .caused_by(e);
            return Err(match release {
                Ok(()) => cannot,
                // Both are told, the release's failure deciding the exit.
                Err(r) => {
                    let mut r = Error::from(r);
                    r.also.push(cannot);
                    r
                }
            });
        }
    };
    let pid = child.id() as libc::pid_t;
    out.debug(&format!("holding `{task}` while process {pid} runs"));

    let (stop, stopped) = mpsc::channel::<()>();
    let held_ref = &held;
    let handle = signals.handle();
    let status = std::thread::scope(|s| {
        s.spawn(|| {
            for sig in signals.forever() {
                if sig != SIGINT {
                    // SAFETY: plain kill(2) on our own child's pid, which
                    // stays reserved for it until we reap it below.
                    unsafe { libc::kill(pid, sig) };
                }
            }
        });
        s.spawn(move || heartbeat(store, held_ref, every, &stopped, out));
        let status = child.wait();
        handle.close();
        let _ = stop.send(());
        status
    });
    let status = status
        .map_err(|e| Error::failure(format!("cannot wait for the command: {e}")).caused_by(e))?;
    match store.release_held(held) {
        Ok(()) => out.debug(&format!("released `{task}`")),
        Err(e @ StoreError::Lost { .. }) => {
            return Err(
                Error::failure(format!("{e}; the command ran without it at the end"))
                    .hint("`farm locks` shows who holds it now"),
            );
        }
        Err(e) => return Err(e.into()),
    }
    Ok(exit_code(status))
}

fn heartbeat(
    store: &dyn ClaimStore,
    held: &Held,
    every: Duration,
    stop: &mpsc::Receiver<()>,
    out: &Out,
) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(every) {
        if let Err(e) = store.heartbeat(held, SystemTime::now()) {
            out.note(&format!("warning: {e}; no more heartbeats"));
            return;
        }
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        (None, None) => 1,
    }
}
