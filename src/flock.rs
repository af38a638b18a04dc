//! Advisory file locks (`flock`), taken with patience. A lock can outlive
//! its holder's close by a moment — a child forked by any thread of the
//! holder shares its open files until it execs, and a process that is
//! exiting lets go last — so a busy lock is tried again for a while before
//! it counts as held. Every patient lock of farm's goes through
//! [`lock_within`]; what a lock still held means (another run, a push left
//! by a killed farm) is for its caller to say.

use std::fs::{File, TryLockError};
use std::io;
use std::time::{Duration, Instant};

/// The first nap of a patient lock (see [`lock_within`]).
const FIRST_NAP: Duration = Duration::from_millis(1);

/// The naps between a patient lock's tries: [`FIRST_NAP`], then twice as
/// long each time, up to `every` (see [`lock_within`]).
fn naps(every: Duration) -> impl Iterator<Item = Duration> {
    std::iter::successors(Some(FIRST_NAP.min(every)), move |nap| {
        Some((*nap * 2).min(every))
    })
}

/// Take `file`'s lock, trying every `every` for up to `patience`: whether it
/// was taken (false: still held by another when patience ran out). The
/// first tries come sooner (1 ms after the first, then twice as long each
/// time up to `every`): a lock is mostly held for the milliseconds of a
/// push, and a whole `every` slept each time cost a `-j 1` run of 40
/// trivial tasks ~2.5 ms a task (its integrations waited 20 ms for a push
/// lock let go a few ms into the nap; `benches/against_old.sh`).
pub fn lock_within(file: &File, patience: Duration, every: Duration) -> io::Result<bool> {
    lock_waiting(file, Some(patience), every, &mut || {})
}

/// [`lock_within`], for ever when `patience` is `None`, calling `waiting`
/// once when the lock is first found held (to say what it waits for).
pub fn lock_waiting(
    file: &File,
    patience: Option<Duration>,
    every: Duration,
    waiting: &mut dyn FnMut(),
) -> io::Result<bool> {
    let since = Instant::now();
    let mut said = false;
    let mut naps = naps(every);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if patience.is_some_and(|p| since.elapsed() >= p) => {
                return Ok(false);
            }
            Err(TryLockError::WouldBlock) => {
                if !std::mem::replace(&mut said, true) {
                    waiting();
                }
                std::thread::sleep(naps.next().unwrap_or(every));
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_lock_is_tried_again_soon_first_then_every_while() {
        let ms = Duration::from_millis;
        let first: Vec<Duration> = naps(ms(20)).take(7).collect();
        assert_eq!(first, [ms(1), ms(2), ms(4), ms(8), ms(16), ms(20), ms(20)]);
        // Never longer than asked, however short.
        assert!(
            naps(Duration::from_micros(300))
                .take(3)
                .all(|n| n == Duration::from_micros(300))
        );
    }

    fn open(path: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_free_lock_is_taken_and_a_held_one_is_not_within_patience() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let (a, b) = (open(&path), open(&path));
        assert!(lock_within(&a, Duration::ZERO, Duration::from_millis(1)).unwrap());
        let took = Instant::now();
        let short = Duration::from_millis(30);
        assert!(!lock_within(&b, short, Duration::from_millis(5)).unwrap());
        assert!(took.elapsed() >= short, "it waited its patience out");
    }

    #[test]
    fn a_lock_let_go_within_patience_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let (a, b) = (open(&path), open(&path));
        a.lock().unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(a);
        });
        assert!(lock_within(&b, Duration::from_secs(5), Duration::from_millis(5)).unwrap());
        holder.join().unwrap();
    }
}
