//! What cuts a claimed task's work short, whatever step it is at: the claim
//! taken away, or the run killed. Every step that can be cut short — a
//! merge session waiting for the agent's slot, the test gate, the rounds
//! of pushes — says so with one type, [`Halt`], passed up with `?` to
//! settling, which decides what it means (rescue the work; count an
//! attempt or not). A session cut short is different: what it left is
//! settled like any other session's end (see `turn`).
//!
//! The claim is kept alive on the way by one [`Heartbeat`].

use std::time::{Instant, SystemTime};

use crate::claims::{Held, StoreError};
use crate::error::Error;
use crate::run::state::Run;

/// Why a step of a turn stopped before it ended on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupt {
    /// The claim was taken away (reaped, released by hand, taken over):
    /// why, as the store said it.
    Lost(String),
    /// The run was killed (`farm stop --now`, a second Ctrl-C).
    Stopped,
}

/// How a step of a turn ends when it does not end with its result:
/// interrupted, or failed with an error.
#[derive(Debug)]
pub enum Halt {
    Interrupted(Interrupt),
    Failed(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Halt {
        Halt::Failed(e)
    }
}

impl From<Interrupt> for Halt {
    fn from(i: Interrupt) -> Halt {
        Halt::Interrupted(i)
    }
}

impl From<StoreError> for Halt {
    fn from(e: StoreError) -> Halt {
        Halt::Failed(e.into())
    }
}

/// A claim kept alive while its holder works: a beat at most every
/// `--heartbeat` (the store's record says when it was last seen).
pub struct Heartbeat<'a> {
    run: &'a Run,
    held: &'a Held,
    last: Instant,
}

impl<'a> Heartbeat<'a> {
    /// A heartbeat of `held`, whose last beat was now.
    pub fn new(run: &'a Run, held: &'a Held) -> Self {
        Heartbeat {
            run,
            held,
            last: Instant::now(),
        }
    }

    /// Beat if one is due.
    pub fn due(&mut self) -> Result<(), Interrupt> {
        if self.last.elapsed() < self.run.config.heartbeat {
            return Ok(());
        }
        self.now()
    }

    /// Beat now.
    pub fn now(&mut self) -> Result<(), Interrupt> {
        self.last = Instant::now();
        match self.run.store.heartbeat(self.held, SystemTime::now()) {
            Err(StoreError::Lost { why, .. }) => Err(Interrupt::Lost(why)),
            // Anything else (a hub out of reach a moment) is tried again at
            // the next beat: the threshold is many beats long.
            _ => Ok(()),
        }
    }

    /// The run killed, or a beat due that finds the claim gone.
    pub fn check(&mut self) -> Result<(), Interrupt> {
        if self.run.stop.killing() {
            return Err(Interrupt::Stopped);
        }
        self.due()
    }
}
