//! An agent's slots: one session at a time (the [`Slot`] its loop and the
//! integration beside it take turns at), and two clones ([`Clones`]).

use std::sync::Mutex;
use std::time::Duration;

use crate::run::clone::PrivateClone;
use crate::run::interrupt::{Heartbeat, Interrupt};

/// An agent runs one session at a time. Its loop holds the slot for each
/// task's session; an integration going on beside it (see [`agent`](crate::run::agent))
/// waits for the slot before a merge session, heartbeating its claim.
#[derive(Default)]
pub(super) struct Slot(Mutex<()>);

impl Slot {
    pub(super) fn take(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for the slot while keeping a claim alive with `beat`; why not,
    /// when the claim is lost or the run is killed meanwhile.
    pub(super) fn wait(
        &self,
        beat: &mut Heartbeat<'_>,
    ) -> Result<std::sync::MutexGuard<'_, ()>, Interrupt> {
        loop {
            match self.0.try_lock() {
                Ok(turn) => return Ok(turn),
                Err(std::sync::TryLockError::Poisoned(e)) => return Ok(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            beat.check()?;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An agent's clones: the one its loop uses, and the other — not made yet,
/// busy with an integration beside the loop (see
/// [`agent`](crate::run::agent)), or free. A session that did its task hands
/// its clone over to the integration, and the other becomes the one in use.
pub(super) struct Clones<C = PrivateClone> {
    in_use: Option<C>,
    free: Option<C>,
}

impl<C> Clones<C> {
    /// The first clone in use; the second if it is made already.
    pub(super) fn new(first: C, second: Option<C>) -> Self {
        Clones {
            in_use: Some(first),
            free: second,
        }
    }

    /// The clones the loop holds now (none that is busy beside it).
    pub(super) fn all(&self) -> impl Iterator<Item = &C> {
        self.in_use.iter().chain(self.free.iter())
    }

    /// The clone the loop's next session runs in.
    pub(super) fn in_use(&self) -> &C {
        self.in_use
            .as_ref()
            .expect("a clone is in use between hand_over and make_ready")
    }

    /// The clone the loop's next session runs in, to change.
    pub(super) fn in_use_mut(&mut self) -> &mut C {
        self.in_use
            .as_mut()
            .expect("a clone is in use between hand_over and make_ready")
    }

    /// Hand the clone in use over to an integration beside the loop; the
    /// free one, if any, is in use now (else [`Clones::give_back`] or
    /// [`Clones::make_ready`] provides one).
    pub(super) fn hand_over(&mut self) -> C {
        let mine = self.in_use.take().expect("the clone in use is there");
        self.in_use = self.free.take();
        mine
    }

    /// A clone back from an integration: in use if none is, else free.
    pub(super) fn give_back(&mut self, clone: C) {
        if self.in_use.is_none() {
            self.in_use = Some(clone);
        } else {
            self.free = Some(clone);
        }
    }

    /// Make sure a clone is in use, opening one with `open` if need be.
    pub(super) fn make_ready<E>(&mut self, open: impl FnOnce() -> Result<C, E>) -> Result<(), E> {
        if self.in_use.is_none() {
            self.in_use = Some(open()?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(c: &mut Clones<&'static str>, name: &'static str) {
        c.make_ready(|| Ok::<_, ()>(name)).unwrap();
    }

    #[test]
    fn handing_over_switches_to_the_other_clone_made_when_first_needed() {
        let mut c = Clones::new("a", None);
        assert_eq!(c.hand_over(), "a");
        ready(&mut c, "b");
        assert_eq!(*c.in_use(), "b");
        // "a" back from its integration while "b" is in use: free.
        c.give_back("a");
        assert_eq!(c.all().copied().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(c.hand_over(), "b");
        ready(&mut c, "never");
        assert_eq!(*c.in_use(), "a");
    }

    #[test]
    fn a_clone_back_while_none_is_in_use_is_the_one_in_use() {
        let mut c = Clones::new("a", None);
        assert_eq!(c.hand_over(), "a");
        c.give_back("a");
        ready(&mut c, "never");
        assert_eq!(*c.in_use(), "a");
        assert_eq!(c.all().count(), 1);
    }
}
