//! farm: the harness that runs many headless coding agents on one repository
//! without doing a task twice, losing work, or leaving orphan locks.
//!
//! Layers point one way: `cli` → `commands` → (`hold`, `store`) → (`liveness`,
//! `claim`, `task`, `host`). No store knows the commands.

pub mod age;
pub mod board;
pub mod claims;
pub mod cli;
pub mod commands;
pub mod config;
pub mod error;
pub mod git;
pub mod names;
pub mod output;
pub mod run;
pub mod settings;

use std::process::ExitCode;

/// Run a parsed command line.
pub fn run(cli: &cli::Cli) -> Result<ExitCode, error::Error> {
    let ctx = config::Ctx::new(&cli.global);
    commands::dispatch(&ctx, &cli.command)
}
