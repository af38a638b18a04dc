//! `farm run`: the agent loop and what it drives — the private clone and its
//! recovery, one session at a time, the classification of how a session
//! ended, usage limits and cost, the prompt, and the journal of the night;
//! and its configuration, resolved once ([`config`]).
//!
//! Inside, imports point one way, from the loop down:
//!
//! - [`agent`], [`step`]: the loop as a state machine, and its pure
//!   decisions;
//! - [`tally`], [`standing`]: counting what a task came to (the breaker),
//!   and a role's standing task;
//! - [`settle`], [`attempts`], [`asking`], [`review`]: what a session's end
//!   means, decided then done; a failed attempt noted on the board; a
//!   question asked, the task waiting for its answer; a change waiting for
//!   review, and landed once approved ([`rejected`]: a rejected one offered
//!   to the next session);
//! - [`integrate`], [`speculate`], [`gate`], [`landing`], [`progress`]:
//!   bringing the work onto the branch, tested (in the merge queue),
//!   within what a session may change;
//! - [`land`]: a rescue branch landed by hand, through that integration;
//! - [`queue`]: the merge queue's line on the hub: one locked file a change
//!   on a hub of this machine, one file beside the claims elsewhere;
//!   [`mates`]: this farm's changes in a line of this machine, which the
//!   change ahead may land with its own push;
//! - [`turn`], [`slot`], [`interrupt`]: one claimed task's session, the
//!   agent's one-session-at-a-time slot, and what cuts a turn short (the
//!   claim lost, the run killed) with the heartbeat that keeps it alive;
//! - [`inbox`]: the messages of `farm say` an agent takes before it scans
//!   the board, held for its next session's prompt;
//! - [`clone`], [`session`], [`sandbox`], [`watch`], [`classify`],
//!   [`limits`], [`usage`], [`prompt`], [`question_file`], [`journal`],
//!   [`event`]: the private clone, one process of the agent CLI and the
//!   sandbox it runs in, reading its log, what it cost, the question it
//!   may leave, and the journal of what happened, one typed event a line;
//! - [`notify`]: telling a person what needs them (`[notify]`), off the
//!   loops' threads;
//! - [`upkeep`]: keeping the hub, the clones and the claims cache packed,
//!   after an integration;
//! - [`state`]: what every loop of a run shares, resolved from [`config`]
//!   ([`presets`], [`roles`], [`config_dir`]).

pub mod agent;
pub mod asking;
pub mod attempts;
pub mod breaker;
pub mod classify;
pub mod clone;
pub mod config;
pub mod config_dir;
pub mod event;
pub mod gate;
pub mod inbox;
pub mod integrate;
pub mod interrupt;
pub mod journal;
pub mod land;
pub mod landing;
pub mod limits;
pub mod mates;
pub mod notify;
pub mod presets;
pub mod progress;
pub mod prompt;
pub mod question_file;
pub mod queue;
pub mod quota;
pub mod rejected;
pub mod review;
pub mod roles;
pub mod sandbox;
pub mod session;
pub mod settle;
pub mod slot;
pub mod speculate;
pub mod standing;
pub mod state;
pub mod step;
pub mod tally;
pub mod transcript;
pub mod turn;
pub mod upkeep;
pub mod usage;
pub mod watch;
