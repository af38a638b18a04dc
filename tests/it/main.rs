//! Integration tests: the real `farm` binary and the library's stores.

mod ask;
mod blackhole;
mod board_guard;
mod chaos;
mod cli;
mod common;
mod completion;
mod contract;
mod daemon;
mod death;
mod everyday;
mod faults;
mod fencing;
mod follow;
mod hold;
mod hostile;
mod input;
mod needs;
mod notify;
mod packed;
mod pause;
mod queue;
mod quota;
mod race;
mod reap;
mod recovery;
mod remote;
mod report;
mod rescue;
mod review;
mod run;
mod sandbox;
mod say;
mod schedules;
mod servers;
mod settings;
mod steer;
// The generated night the report's browser test loads (shared with
// `benches/report.rs`).
#[path = "../../benches/common/night.rs"]
mod night;
mod stop;
