//! `farm stop`: make every `farm run` on the hub drain, on this machine and
//! on others, through a notice beside the claims.

use crate::claims::StopNotice;
use crate::claims::host::Here;
use crate::claims::liveness::State;
use crate::config::Ctx;
use crate::error::Error;
use crate::run::journal;

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
  farm stop --force         post the notice though no run is seen here
  farm --hub ssh://host/srv/repo.git stop")]
pub struct Args {
    /// Stop running sessions too (their work goes to rescue branches, their
    /// tasks back on the board), as a second Ctrl-C does.
    #[arg(long)]
    now: bool,

    /// Post the notice even when no run is seen: for a hub path, farm looks
    /// for a live run in the state dir's journal and for a claim held by a
    /// live process; a run with a state dir of its own is not seen.
    #[arg(long)]
    force: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let store = ctx.store_for(&spec)?;
    // With a hub by path, every run on it is on this machine (or shares
    // its file system) and leaves signs; with a URL, runs elsewhere leave
    // none here: the notice is posted for them.
    let remote = matches!(spec, crate::git::hub::HubSpec::Remote(_));
    if !remote && !args.force {
        let state = ctx.state_dir(&spec);
        let runs = journal::read(&state)
            .map(|text| journal::running(&journal::entries(&text)))
            .unwrap_or_default();
        let judge = super::judge_now(None);
        let working = store
            .list()?
            .iter()
            .any(|l| l.judge(&judge).state == State::Alive);
        if runs.is_empty() && !working {
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
