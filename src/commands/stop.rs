//! `farm stop`: make every `farm run` on the hub drain, on this machine and
//! on others, through a notice beside the claims.

use crate::claims::StopNotice;
use crate::claims::host::Here;
use crate::config::Ctx;
use crate::error::Error;

/// Ask every `farm run` on the hub to drain: no new claims; running
/// sessions finish and are integrated, then each run exits 0.
///
/// The notice goes where the claims are (`current_tasks/.stop.txt`, or the
/// `farm/claims` branch), so runs on other machines see it too, within
/// seconds (fs) or ten seconds (git). Runs started after it ignore it.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm stop                 drain every run on this hub
  farm stop --now           stop sessions now, their work to rescue branches
  farm --hub ssh://host/srv/repo.git stop")]
pub struct Args {
    /// Stop running sessions too (their work goes to rescue branches, their
    /// tasks back on the board), as a second Ctrl-C does.
    #[arg(long)]
    now: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let store = ctx.store()?;
    let here = Here::current();
    let by = format!("{}@{} (pid {})", whoami(), here.host, std::process::id());
    store.post_stop(&StopNotice::new(&by, args.now))?;
    let what = if args.now {
        "stop now (sessions killed, their work rescued)"
    } else {
        "drain (no new claims; running sessions finish)"
    };
    ctx.out.say(&format!(
        "asked every farm run on {} to {what}",
        store.location()
    ))?;
    Ok(())
}

fn whoami() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "someone".to_owned())
}
