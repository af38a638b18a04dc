//! `farm fire`: fire the schedules once — the occurrences due now become
//! tasks on the board (one commit) — and exit. For system cron or a CI job;
//! `farm run` fires by itself at start-up and at every minute boundary.

use serde_json::json;

use crate::board::edit::{self, Edit, Tx};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::output::Out;
use crate::run::event::Event;
use crate::run::journal::Journal;
use crate::schedule::{
    self,
    fire::{Fired, Loader},
};

/// Fire the schedules once: make the tasks of the occurrences due now.
///
/// An occurrence is a task `<schedule>-<YYYYMMDDTHHMMZ>` (its UTC minute);
/// one already on the board (pending, done or failed) is not made again, so
/// any number of farms may fire at once and each occurrence is made once.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm fire
  farm fire --json | jq -r '.created[]'
  */5 * * * *  cd /srv/repo && farm fire     (a crontab line)")]
pub struct Args {
    /// Print JSON: {created, skipped: [{id, pending}], retired, invalid: [{path, why}]}.
    #[arg(long)]
    json: bool,

    /// The branch whose schedules to fire (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let hub = Hub::open(&spec, args.branch.as_deref())?;
    let fired = fire(&hub, &ctx.state_dir(&spec), &mut Loader::default())?;
    if !fired.skipped.is_empty() {
        let state = ctx.state_dir(&spec);
        // Best effort, as every journal write: a record, never a failure.
        let _ = std::fs::create_dir_all(&state);
        journal_skips(&Journal::open(&state), &fired);
    }
    if args.json {
        let doc = json!({
            "created": fired.created.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
            "skipped": fired.skipped.iter().map(|(id, p)| json!({"id": id.as_str(), "pending": p.as_str()})).collect::<Vec<_>>(),
            "retired": fired.retired.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
            "invalid": fired.invalid.iter().map(|i| json!({"path": i.path, "why": i.why})).collect::<Vec<_>>(),
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    say(&ctx.out, &fired)?;
    if fired.created.is_empty() && fired.retired.is_empty() {
        ctx.out.note("farm fire: no occurrence due");
    }
    Ok(())
}

/// Fire the schedules on `hub`'s branch now: one transaction, again from
/// the new tip when another push won. `state`: where a URL hub's tip is
/// fetched to see whether it has schedules.
pub fn fire(hub: &Hub, state: &std::path::Path, loader: &mut Loader) -> Result<Fired, Error> {
    let now = schedule::now().map_err(Error::usage)?;
    if !has_schedules(hub, state) {
        return Ok(Fired::default());
    }
    let created = std::time::SystemTime::from(now);
    let mut branch = HubBranch::new(hub, "the schedules' occurrences".into());
    let mut report = Fired::default();
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let (message, fired) =
            schedule::fire::apply(loader, dir, now, created).map_err(Error::failure)?;
        report = fired;
        Ok(match message {
            Some(message) => Edit::Commit { message, value: () },
            None => Edit::Gone,
        })
    })?;
    match tx {
        Tx::Pushed(()) | Tx::Gone => Ok(report),
        Tx::Busy | Tx::Lost(()) => Err(Error::failure(format!(
            "could not fire the schedules: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

/// Whether the branch holds schedules, asked before a scratch clone is made
/// (so that a run with none costs no clone a minute): one `ls-tree` for a
/// hub on this machine; for a URL, the tip fetched `--depth 1` into a
/// scratch repository, as `farm.toml` is read. When it cannot be told: yes.
fn has_schedules(hub: &Hub, state: &std::path::Path) -> bool {
    let rev = format!("refs/heads/{}", hub.branch);
    let scratch;
    let (repo, rev) = match hub.git_dir() {
        Some(git_dir) => (crate::git::command::Repo::new(git_dir), rev),
        None => match crate::git::scratch::ScratchRepo::tip(state, &hub.url, &hub.branch) {
            Ok((made, Some(tip))) => {
                scratch = made;
                (scratch.repo(), tip)
            }
            Ok((_, None)) => return false,
            Err(_) => return true,
        },
    };
    match repo.run([
        "ls-tree",
        "--name-only",
        &rev,
        "--",
        crate::schedule::file::DIR,
    ]) {
        Ok(listing) => !listing.trim().is_empty(),
        Err(_) => true,
    }
}

/// Each skipped occurrence, in the journal (`schedule_skip`).
pub fn journal_skips(journal: &Journal, fired: &Fired) {
    for (id, pending) in &fired.skipped {
        journal.record(
            "",
            &Event::ScheduleSkip {
                task: id.as_str().into(),
                pending: pending.as_str().into(),
            },
        );
    }
}

/// One line per task made, schedule retired, occurrence skipped and invalid
/// schedule file.
pub fn say(out: &Out, fired: &Fired) -> Result<(), Error> {
    for id in &fired.created {
        out.say(&format!("made `{id}`"))?;
    }
    for id in &fired.retired {
        out.say(&format!(
            "retired one-shot schedule `{id}` (its task is made)"
        ))?;
    }
    for (id, pending) in &fired.skipped {
        out.note(&format!(
            "skipped `{id}`: `{pending}` is still on the board (overlap = \"skip\")"
        ));
    }
    for invalid in &fired.invalid {
        out.note(&format!(
            "warning: {} is not a valid schedule, skipped: {}",
            invalid.path, invalid.why
        ));
    }
    Ok(())
}
