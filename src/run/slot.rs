//! An agent runs one session at a time: the slot its loop and the
//! integration beside it take turns at.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::claims::{Held, StoreError};
use crate::run::agent::Run;
use crate::run::integrate::Merge;

/// An agent runs one session at a time. Its loop holds the slot for each
/// task's session; an integration going on beside it (see [`agent`](crate::run::agent))
/// waits for the slot before a merge session, heartbeating its claim.
#[derive(Default)]
pub(super) struct Slot(Mutex<()>);

impl Slot {
    pub(super) fn take(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for the slot while keeping `held` alive; how the merge ends
    /// instead when the claim is lost or the run is killed meanwhile.
    pub(super) fn wait(
        &self,
        run: &Run,
        held: &Held,
    ) -> Result<std::sync::MutexGuard<'_, ()>, Merge> {
        let mut last_beat = Instant::now();
        loop {
            match self.0.try_lock() {
                Ok(turn) => return Ok(turn),
                Err(std::sync::TryLockError::Poisoned(e)) => return Ok(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if run.stop.killing() {
                return Err(Merge::Interrupted);
            }
            if last_beat.elapsed() >= run.heartbeat {
                last_beat = Instant::now();
                if let Err(StoreError::Lost { .. }) = run.store.heartbeat(held, SystemTime::now()) {
                    return Err(Merge::Lost);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
