//! The changes of this farm waiting in a line of this machine, as its
//! other loops may land them.
//!
//! A change first in line lands the passed changes just behind it with its
//! own push (see [`speculate`](super::speculate)'s `gather`). Through a hub
//! elsewhere the claims branch fences that push for every claim it lands.
//! On a hub of this machine a push is fenced by the processes that push:
//! they keep the claim's locked file open (see "Fencing" in
//! `claims/fs.rs`), so that no reaper can take the claim while anything
//! that could still land its work is alive. A farm can hand those files to
//! a push only for the claims it holds itself: so here the change ahead
//! lands only the changes of its own farm, each registered here by the
//! loop that holds its claim, with a copy of that claim's locked file.
//!
//! A change taken for a push is the pushing loop's until it settles it:
//! landed (its loop then releases its claim, as after its own push) or not
//! (it rides on). Its own loop waits meanwhile, and does not leave the line
//! before it is settled.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::claims::Held;
use crate::names::TaskId;

/// The changes of this farm in the line of a hub of this machine, by place.
#[derive(Default)]
pub struct Mates {
    line: Mutex<BTreeMap<u64, Mate>>,
    settled: Condvar,
}

struct Mate {
    task: TaskId,
    /// The claim's locked file (another descriptor of it: the lock is the
    /// open file's, and held for as long as either is open).
    claim: Option<std::fs::File>,
    /// Taken by the loop of the change ahead for its push.
    taken: bool,
    /// Landed by it, as this commit.
    landed: Option<String>,
}

/// A change taken for a push: its task and its claim's locked file.
pub struct Taken {
    pub place: u64,
    pub task: TaskId,
    pub claim: std::fs::File,
}

impl Mates {
    fn line(&self) -> MutexGuard<'_, BTreeMap<u64, Mate>> {
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The change at `place` is this farm's, under claim `held`.
    pub fn enter(&self, place: u64, held: &Held) {
        let claim = held.lock_file().and_then(|f| f.try_clone().ok());
        self.line().insert(
            place,
            Mate {
                task: held.claim().task.clone(),
                claim,
                taken: false,
                landed: None,
            },
        );
    }

    /// The change at `place` leaves the line, once no push has it.
    pub fn leave(&self, place: u64) {
        let mut line = self.line();
        while line.get(&place).is_some_and(|m| m.taken) {
            line = self.settled.wait(line).unwrap_or_else(|e| e.into_inner());
        }
        line.remove(&place);
    }

    /// Take the change at `place` for a push that lands it: `None` when it
    /// is not this farm's, its claim has no locked file, or it is taken or
    /// landed already.
    pub fn take(&self, place: u64) -> Option<Taken> {
        let mut line = self.line();
        let mate = line.get_mut(&place)?;
        if mate.taken || mate.landed.is_some() {
            return None;
        }
        let claim = mate.claim.as_ref()?.try_clone().ok()?;
        mate.taken = true;
        Some(Taken {
            place,
            task: mate.task.clone(),
            claim,
        })
    }

    /// The push that took the change at `place` is over: it `landed` it as
    /// that commit, or not.
    pub fn settle(&self, place: u64, landed: Option<String>) {
        if let Some(mate) = self.line().get_mut(&place) {
            mate.taken = false;
            mate.landed = landed;
        }
        self.settled.notify_all();
    }

    /// Whether the change at `place` is this farm's, and could be taken
    /// for a push (its claim has a locked file).
    pub fn has(&self, place: u64) -> bool {
        self.line()
            .get(&place)
            .is_some_and(|m| m.claim.is_some() && m.landed.is_none())
    }

    /// Whether a push has the change at `place` now.
    pub fn taken(&self, place: u64) -> bool {
        self.line().get(&place).is_some_and(|m| m.taken)
    }

    /// The commit the change at `place` landed as, by the change ahead.
    pub fn landed(&self, place: u64) -> Option<String> {
        self.line().get(&place).and_then(|m| m.landed.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_taken_is_nobody_else_s_until_settled_and_leaves_after() {
        let mates = std::sync::Arc::new(Mates::default());
        let task = TaskId::parse("t1").unwrap();
        let file = tempfile::tempfile().unwrap();
        mates.line().insert(
            7,
            Mate {
                task,
                claim: Some(file),
                taken: false,
                landed: None,
            },
        );
        assert!(mates.take(8).is_none(), "not this farm's");
        let taken = mates.take(7).expect("this farm's");
        assert_eq!(taken.task.as_str(), "t1");
        assert!(mates.taken(7));
        assert!(mates.take(7).is_none(), "taken once");
        // Its loop waits to leave until the push settles it.
        let leaving = {
            let mates = mates.clone();
            std::thread::spawn(move || mates.leave(7))
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!leaving.is_finished());
        mates.settle(7, Some("abc".into()));
        leaving.join().unwrap();
        assert_eq!(mates.landed(7), None, "gone with it");
    }

    #[test]
    fn a_landed_change_says_so_and_is_not_taken_again() {
        let mates = Mates::default();
        mates.line().insert(
            3,
            Mate {
                task: TaskId::parse("t3").unwrap(),
                claim: Some(tempfile::tempfile().unwrap()),
                taken: false,
                landed: None,
            },
        );
        let _taken = mates.take(3).unwrap();
        mates.settle(3, None);
        assert_eq!(mates.landed(3), None);
        let _again = mates.take(3).expect("not landed: taken again");
        mates.settle(3, Some("c0ffee".into()));
        assert_eq!(mates.landed(3).as_deref(), Some("c0ffee"));
        assert!(mates.take(3).is_none());
    }
}
