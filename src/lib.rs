//! farm: the harness that runs many headless coding agents on one repository
//! without doing a task twice, losing work, or leaving orphan locks.
//!
//! The map, one folder per layer (each file's `//!` says what it owns;
//! `docs/architecture.md` has the rest):
//!
//! - `main.rs`, [`cli`]: parse the command line (clap), dispatch, print the
//!   error, exit.
//! - [`commands`]: one thin file per subcommand, with its arguments.
//! - [`config`], [`settings`]: the global flags, environment and `farm.toml`,
//!   turned into what commands act on (the hub, its claim store, the state dir).
//! - [`run`](mod@run): `farm run`: the agent loop as a state machine
//!   ([`run::agent`], [`run::step`]), settling a session's end
//!   ([`run::settle`]), the private clone and its recovery ([`run::clone`]),
//!   sessions, outcome classification, usage limits, usage and cost, the test
//!   gate, roles, the progress document, the prompt, the journal (one typed
//!   [`run::event::Event`] a line), agent presets, when the repositories are
//!   packed; its own layers are in its `//!`.
//! - [`schedule`]: schedules (`schedules/<id>.toml`): when they fire (cron or
//!   one time, in a time zone), and which occurrences a firing makes tasks.
//! - [`suite`]: the project's own test suite (`[tests]` in farm.toml): its
//!   command run in a clone, its report (JUnit, libtest JSON, TAP, lines)
//!   read into cases and their aggregate, results kept per tree, failing
//!   tests made tasks.
//! - [`report`]: `farm report`: the night drawn from the run's journal (lanes,
//!   outcomes, waits, the critical path, cost) as one HTML page or a trace.
//! - [`board`]: the task file format, loading a board, the dependency graph,
//!   every task's state and every edit of a task file.
//! - [`claims`]: the claim record, liveness, the [`claims::ClaimStore`] trait
//!   and its `fs` and `git` stores, holding a claim while a command runs;
//!   what people post beside the claims (stop and pause notices, messages
//!   and their receipts).
//! - [`git`]: the `git` command (every push and fetch), the hub, a clone's
//!   in-process work (git2, with a merge of trees by what changed), patience
//!   with a remote, keeping the repositories farm writes packed.
//! - [`names`], [`error`], [`output`], [`age`], [`disk`], [`flock`]: task ids
//!   and agent names, the user-facing error, output, ages and durations, free
//!   space, file locks taken patiently.
//! - [`procs`]: the process trees farm starts for others (sessions, the test
//!   command), and how none outlives its end or farm.
//!
//! Layers point one way: `cli` → `commands` → (`config`, `settings`) → `report`
//! → (`run`, `schedule`) → (`board`, `claims`, `git`, `suite`) → (`names`, `error`, `output`,
//! `age`, `disk`, `flock`, `procs`). Of the middle layer only `claims` uses `git` (the git store), and
//! `suite` uses `board` (failing tests become tasks). No
//! store knows the loop; the board knows nothing of sessions or schedules.
//! The one cycle is `cli` ⇄ `commands`: the command enum names each
//! subcommand's arguments.

pub mod age;
pub mod board;
pub mod claims;
pub mod cli;
pub mod commands;
pub mod config;
pub mod disk;
pub mod error;
pub mod flock;
pub mod git;
pub mod names;
pub mod output;
pub mod procs;
pub mod report;
pub mod run;
pub mod schedule;
pub mod settings;
pub mod suite;

/// Run a parsed command line.
pub fn run(cli: &cli::Cli) -> Result<(), error::Error> {
    let ctx = config::Ctx::new(&cli.global);
    commands::dispatch(&ctx, &cli.command)
}
