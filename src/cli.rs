//! The command line, as clap parses it: global flags and the subcommands.
//! No logic here; each subcommand's arguments live beside its code in
//! `commands/`.

use clap::{Parser, Subcommand};

use crate::commands::{
    agents, answer, approve, ask, claim, completions, demo, demo_agent, doctor, fire, init, locks,
    logs, loop_script, messages, pause, reap, reject, release, report, rescue, resume, run, say,
    schedule, schedules, status, stop, task, tasks, tests,
};
use crate::config::GlobalArgs;

const EXAMPLES: &str = "\
Examples:
  farm claim parse-if                    win a task, or learn who holds it (exit 3)
  farm claim parse-if -- make test       hold the claim while a command runs
  farm locks                             who holds what, and are they alive
  farm reap --older-than 2h              take back dead and stale claims
  farm release parse-if                  give your claim back
  farm run --agent claude -j 4           four agents on the board until it is done
  farm status                            what the run is doing (or did)
  farm report --open                     the night as a page: lanes, waits, cost
  farm rescue list                       work kept on rescue branches, and why
  farm stop                              every run on the hub drains
  farm pause --agent box-2               box-2 claims nothing new until farm resume
  farm say --to box-2 'skip the parser'  a word in box-2's next prompt
  farm answer parse-if 'yes'             answer the question a task waits on
  farm approve parse-if                  land the change a task waits with
  farm doctor --agent claude             is everything in place for a night
  farm demo                              the whole cycle on a scratch hub

Exit codes: 0 ok, 1 failure, 2 bad usage, 3 held by someone else, 4 not claimed,
130 interrupted; farm run: 5 settled with failed/stuck/invalid tasks, 6 ended with work left.";

/// farm: run many headless coding agents on one repository, safely.
///
/// Every task is claimed by exactly one agent at a time: a claim is a lock
/// file `current_tasks/<task>.txt` in the hub, created atomically, saying who
/// holds it and since when. Claims whose holder died are taken back.
#[derive(Debug, Parser)]
#[command(name = "farm", version, after_help = EXAMPLES, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Run(run::Args),
    Init(init::Args),
    Task(task::Args),
    Tasks(tasks::Args),
    Schedule(schedule::Args),
    Schedules(schedules::Args),
    Tests(tests::Args),
    Fire(fire::Args),
    Claim(claim::Args),
    Release(release::Args),
    Locks(locks::Args),
    Reap(reap::Args),
    Status(status::Args),
    Report(report::Args),
    Rescue(rescue::Args),
    Logs(logs::Args),
    Doctor(doctor::Args),
    Stop(stop::Args),
    Pause(pause::Args),
    Resume(resume::Args),
    Say(say::Args),
    Messages(messages::Args),
    Answer(answer::Args),
    Ask(ask::Args),
    Approve(approve::Args),
    Reject(reject::Args),
    Agents(agents::Args),
    LoopScript(loop_script::Args),
    Completions(completions::Args),
    Man(completions::ManArgs),
    Demo(demo::Args),
    #[command(hide = true)]
    DemoAgent(demo_agent::Args),
}
