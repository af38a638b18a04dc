//! `farm pause`: no new claims — by every agent on the hub, one agent, or
//! a role's agents — until `farm resume`, through a notice beside the
//! claims.

use super::fleet::{self, Running, Whom};
use crate::claims::notice::{self, Kind, Notice, Target};
use crate::config::Ctx;
use crate::error::Error;

/// Stop new claims until `farm resume`: of every agent on the hub, or only
/// of the agent `--agent`, or of the agents of `--role`. Sessions running
/// finish and are integrated; a paused agent waits (its run does not end
/// while the board has work).
///
/// Once this returns, no agent on this machine's hub starts a session on a
/// task it had not claimed already; agents on other machines (a hub by URL)
/// see the pause at their next look at the hub, within seconds. The pause
/// lives on the hub (`current_tasks/.pause*.txt`, or the `farm/claims`
/// branch): it holds across a farm killed and started again, and for runs
/// that start later, until `farm resume` takes it away.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm pause                   no agent claims anything new
  farm pause --agent box-2     only box-2 holds; the others go on
  farm pause --role docs       the docs role's agents hold
  farm resume --role docs      they claim again
  farm status                  who is paused, by whom, since when")]
pub struct Args {
    #[command(flatten)]
    whom: Whom,

    /// Print the pause as JSON: {posted, notice: {kind, target, name, by,
    /// at}} (`posted` is false when it was already paused).
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let store = ctx.store_for(&spec)?;
    let target = args.whom.target();
    let name = notice::name_of(Kind::Pause, &target);
    // Pausing again keeps the first pause: its time is when the hold began.
    if let Some(already) = store.notices(true)?.into_iter().find(|n| n.name() == name) {
        if args.json {
            ctx.out.data(&format!(
                "{:#}\n",
                serde_json::json!({"posted": false, "notice": fleet::notice_json(&already)})
            ))?;
        } else {
            ctx.out.say(&format!(
                "{target} is already paused on {} ({})",
                store.location(),
                fleet::asked(&already)
            ))?;
        }
        return Ok(());
    }
    let notice = Notice::new(Kind::Pause, target.clone(), &fleet::asker(), false);
    store.post_notice(&notice)?;
    if args.json {
        ctx.out.data(&format!(
            "{:#}\n",
            serde_json::json!({"posted": true, "notice": fleet::notice_json(&notice)})
        ))?;
    } else {
        ctx.out.say(&format!(
            "paused {target} on {}: no new claims until farm resume{}; running sessions finish",
            store.location(),
            fleet::flags(&target)
        ))?;
    }
    // A name that reaches no agent running here is kept all the same: the
    // agent may run on another machine, or start later.
    if target != Target::All {
        let running = Running::in_journal(&ctx.state_dir(&spec));
        if !running.reached(&target) {
            ctx.out.note(&format!(
                "note: {}; the pause holds such an agent when one runs",
                running.none_reached(&target)
            ));
        }
    }
    Ok(())
}
