//! Schedules: recurring and one-shot work whose firings become ordinary
//! tasks on the board (`schedules/<id>.toml` on the hub's branch).

pub mod file;
pub mod fire;
pub mod when;
