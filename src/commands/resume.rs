//! `farm resume`: take away a `farm pause`, so that the agents it held
//! claim again.

use super::fleet::{self, Whom};
use crate::claims::notice::Kind;
use crate::config::Ctx;
use crate::error::Error;

/// Take away the pause of every agent (`farm pause`), or of the agent
/// `--agent`, or of the role `--role`: the agents it held claim again (on
/// this machine at once, elsewhere at their next look at the hub). Each
/// pause is taken away by the same flags that made it; the pauses that
/// still hold are listed.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm resume                  lift `farm pause`
  farm resume --agent box-2    lift `farm pause --agent box-2`
  farm resume --role docs      lift `farm pause --role docs`")]
pub struct Args {
    #[command(flatten)]
    whom: Whom,

    /// Print JSON: {resumed: the pause taken away or null, still_paused:
    /// [pauses]}.
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let store = ctx.store_for(&spec)?;
    let target = args.whom.target();
    let was = store.withdraw_notice(Kind::Pause, &target)?;
    let left: Vec<_> = store
        .notices(false)?
        .into_iter()
        .filter(|n| n.kind == Kind::Pause)
        .collect();
    if args.json {
        ctx.out.data(&format!(
            "{:#}\n",
            serde_json::json!({
                "resumed": was.as_ref().map(fleet::notice_json),
                "still_paused": left.iter().map(fleet::notice_json).collect::<Vec<_>>(),
            })
        ))?;
        return Ok(());
    }
    match &was {
        Some(n) => ctx.out.say(&format!(
            "resumed {target} on {}: paused {}",
            store.location(),
            fleet::asked(n)
        ))?,
        None => ctx.out.say(&format!(
            "{target} was not paused on {}: nothing to resume",
            store.location()
        ))?,
    }
    for n in &left {
        ctx.out.note(&format!(
            "still paused: {} ({}): farm resume{}",
            n.target,
            fleet::asked(n),
            fleet::flags(&n.target)
        ));
    }
    Ok(())
}
