//! `farm run`: the agent loop and what it drives — the private clone and its
//! recovery, one session at a time, the classification of how a session
//! ended, usage limits and cost, the prompt, and the journal of the night;
//! and its configuration, resolved once ([`config`]).

pub mod agent;
pub mod attempts;
pub mod breaker;
pub mod classify;
pub mod clone;
pub mod config;
pub mod config_dir;
pub mod gate;
pub mod integrate;
pub mod interrupt;
pub mod journal;
pub mod landing;
pub mod limits;
pub mod presets;
pub mod progress;
pub mod prompt;
pub mod roles;
pub mod session;
pub mod settle;
pub mod slot;
pub mod standing;
pub mod state;
pub mod step;
pub mod tally;
pub mod transcript;
pub mod turn;
pub mod usage;
pub mod watch;
