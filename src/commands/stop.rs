//! `farm stop`: make every `farm run` on the hub drain — or some of their
//! agents, by name or by role — on this machine and on others, through a
//! notice beside the claims.

use super::fleet::{self, Running, Whom};
use crate::claims::liveness::State;
use crate::claims::notice::{Kind, Notice, Target};
use crate::config::Ctx;
use crate::error::Error;
use crate::run::journal;

/// Ask every `farm run` on the hub to drain — or only the agent `--agent`,
/// or the agents of `--role`, while the others go on: no new claims;
/// running sessions finish and are integrated, then each drained agent's
/// loop ends (a run whose agents all drained exits 6, work left).
///
/// The notice goes where the claims are (`current_tasks/.stop.txt`,
/// `.stop.agent.NAME.txt`, `.stop.role.ROLE.txt`, or the same on the
/// `farm/claims` branch), so runs on other machines see it too, within
/// seconds (fs) or ten seconds (git). Runs started after it ignore it. To
/// hold agents for a while rather than end them: farm pause.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm stop                 drain every run on this hub
  farm stop --agent box-2   drain box-2 alone; the other agents go on
  farm stop --role docs     drain the docs role's agents
  farm stop --now           stop sessions now, their work to rescue branches
  farm stop --force         post the notice though no run is seen here
  farm --hub ssh://host/srv/repo.git stop")]
pub struct Args {
    #[command(flatten)]
    whom: Whom,

    /// Stop running sessions too (their work goes to rescue branches, their
    /// tasks back on the board), as a second Ctrl-C does. Of every run only.
    #[arg(long, conflicts_with_all = ["agent", "role"])]
    now: bool,

    /// Print what was posted as JSON: {posted, notice: {kind, target, name,
    /// by, at, now}}.
    #[arg(long)]
    json: bool,

    /// Post the notice even when no run (or no such agent) is seen: for a
    /// hub path, farm looks for a live run in the state dir's journal and
    /// for a claim held by a live process; a run with a state dir of its
    /// own is not seen.
    #[arg(long)]
    force: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let store = ctx.store_for(&spec)?;
    let target = args.whom.target();
    // With a hub by path, every run on it is on this machine (or shares
    // its file system) and leaves signs; with a URL, runs elsewhere leave
    // none here: the notice is posted for them.
    let remote = matches!(spec, crate::git::hub::HubSpec::Remote(_));
    let state = ctx.state_dir(&spec);
    if !remote && !args.force && target != Target::All {
        let running = Running::in_journal(&state);
        if !running.reached(&target) {
            return Err(Error::usage(format!(
                "cannot stop {target}: {}; no notice left",
                running.none_reached(&target)
            ))
            .hint(format!(
                "farm status names the agents; for a run with a state dir of its own: \
                 farm stop{} --force",
                fleet::flags(&target)
            )));
        }
    }
    if !remote && !args.force && target == Target::All {
        let runs = journal::read(&state)
            .map(|text| journal::running(&journal::entries(&text)))
            .unwrap_or_default();
        let judge = super::judge_now(None);
        let working = store
            .list()?
            .iter()
            .any(|l| l.judge(&judge).state == State::Alive);
        if runs.is_empty() && !working {
            if args.json {
                ctx.out.data(&format!(
                    "{:#}\n",
                    serde_json::json!({"posted": false, "notice": null})
                ))?;
            }
            ctx.out.say(&format!(
                "no farm run is running on {}: nothing to stop, no notice left \
                 (no live run in {}, no claim held by a live process)",
                store.location(),
                state.join(journal::FILE).display()
            ))?;
            ctx.out.note(
                "hint: a run with a state dir of its own: farm stop --state-dir DIR, or farm stop --force",
            );
            return Ok(());
        }
    }
    let notice = Notice::new(Kind::Stop, target.clone(), &fleet::asker(), args.now);
    store.post_notice(&notice)?;
    if args.json {
        ctx.out.data(&format!(
            "{:#}\n",
            serde_json::json!({"posted": true, "notice": fleet::notice_json(&notice)})
        ))?;
        return Ok(());
    }
    let what = if args.now {
        "stop now (sessions killed, their work rescued)"
    } else {
        "drain (no new claims; running sessions finish)"
    };
    match &target {
        Target::All => ctx.out.say(&format!(
            "asked every farm run on {} to {what}",
            store.location()
        ))?,
        t => ctx.out.say(&format!(
            "asked {t} to {what}, on {}; the other agents go on",
            store.location()
        ))?,
    }
    Ok(())
}
