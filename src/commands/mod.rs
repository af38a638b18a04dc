//! One file per subcommand, each thin: turn its arguments into calls on a
//! store and print the outcome. Shared presentation helpers live here.

pub mod agents;
pub mod answer;
pub mod approve;
pub mod ask;
pub mod branch;
pub mod claim;
pub mod completions;
pub mod demo;
pub mod demo_agent;
pub mod doctor;
pub mod fire;
pub mod fleet;
pub mod init;
pub mod locks;
pub mod logs;
pub mod loop_script;
pub mod messages;
pub mod needs;
pub mod pause;
pub mod reap;
pub mod recipients;
pub mod reject;
pub mod release;
pub mod report;
pub mod rescue;
pub mod resume;
pub mod run;
pub mod say;
pub mod schedule;
pub mod schedules;
pub mod status;
pub mod stop;
pub mod task;
pub mod tasks;
pub mod tests;

use std::time::{Duration, SystemTime};

use crate::age::Age;
use crate::claims::Listed;
use crate::claims::host::{self, Here};
use crate::claims::liveness::Judge;
use crate::cli::Command;
use crate::config::Ctx;
use crate::error::Error;

pub fn dispatch(ctx: &Ctx, command: &Command) -> Result<(), Error> {
    match command {
        Command::Agents(args) => agents::run(ctx, args),
        Command::Claim(args) => claim::run(ctx, args),
        Command::Completions(args) => completions::run(ctx, args),
        Command::Man(args) => completions::man(ctx, args),
        Command::Release(args) => release::run(ctx, args),
        Command::Report(args) => report::run(ctx, args),
        Command::Rescue(args) => rescue::run(ctx, args),
        Command::Locks(args) => locks::run(ctx, args),
        Command::Logs(args) => logs::run(ctx, args),
        Command::LoopScript(args) => loop_script::run(ctx, args),
        Command::Reap(args) => reap::run(ctx, args),
        Command::Demo(args) => demo::run(ctx, args),
        Command::Doctor(args) => doctor::run(ctx, args),
        Command::Fire(args) => fire::run(ctx, args),
        Command::Schedule(args) => schedule::run(ctx, args),
        Command::Schedules(args) => schedules::run(ctx, args),
        Command::Tests(args) => tests::run(ctx, args),
        Command::DemoAgent(args) => demo_agent::run(ctx, args),
        Command::Init(args) => init::run(ctx, args),
        Command::Run(args) => run::run(ctx, args),
        Command::Stop(args) => stop::run(ctx, args),
        Command::Pause(args) => pause::run(ctx, args),
        Command::Resume(args) => resume::run(ctx, args),
        Command::Say(args) => say::run(ctx, args),
        Command::Messages(args) => messages::run(ctx, args),
        Command::Answer(args) => answer::run(ctx, args),
        Command::Approve(args) => approve::run(ctx, args),
        Command::Reject(args) => reject::run(ctx, args),
        Command::Ask(args) => ask::run(ctx, args),
        Command::Status(args) => status::run(ctx, args),
        Command::Task(args) => task::run(ctx, args),
        Command::Tasks(args) => tasks::run(ctx, args),
    }
}

/// A judge on this host, now, with real process probes.
fn judge_now(stale_after: Option<Duration>) -> Judge<'static> {
    Judge {
        here: Here::current(),
        now: SystemTime::now(),
        stale_after,
        probe: &host::process_start,
    }
}

/// "alice@box1 (pid 4121) for 12m": who holds a listed claim, for messages.
fn held_by(entry: &Listed, now: SystemTime) -> String {
    match &entry.record {
        Ok(c) => {
            let pid = match c.holder {
                Some(h) => format!("pid {}", h.pid),
                None => "no holder process".to_owned(),
            };
            let age = now.duration_since(c.claimed_at).unwrap_or_default();
            format!("{} ({pid}) for {}", c.who(), Age(age))
        }
        Err(why) => format!("a corrupt claim file ({why})"),
    }
}

/// The default agent name for commands run by hand: `$FARM_AGENT` (via clap),
/// else the user's name.
pub(crate) fn default_agent() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| crate::claims::record::check_agent_name(u).is_ok())
        .unwrap_or_else(|| "farm".to_owned())
}

fn parse_agent(s: &str) -> Result<String, String> {
    crate::claims::record::check_agent_name(s).map(|()| s.to_owned())
}
