//! `farm approve`: approve the change a task waits with (`review = true`),
//! making it ready to be landed; the next agent of a running farm that
//! claims it lands the change without a session, onto the branch as it is
//! then, through the test gate like any change.

use std::time::SystemTime;

use crate::board::edit::{self, Edit, Tx};
use crate::board::review::{self, NotReviewing};
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::names::TaskId;

/// Approve the change a task with `review = true` waits with: the task
/// file on the hub's branch says so, and the task is ready again — the
/// next agent of a farm that claims it lands the change (kept on the hub's
/// branch `farm/review/TASK/NONCE`) without a session: rebased onto the
/// branch as it is then, moved to done, through the test gate and the
/// merge queue like any change. `farm tasks` and `farm status` list the
/// changes that wait (status `review`).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm tasks                             changes waiting show `review`
  git log -p main..farm/review/parse-if/NONCE   read the change (on the hub)
  farm approve parse-if                  it lands at the next turn of a farm
  farm reject parse-if -m 'no globals'   or send it back, with why")]
pub struct Args {
    /// The task whose change waits for review.
    #[arg(value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::review_ids))]
    task: TaskId,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let hub = Hub::open(&ctx.hub_spec()?, args.branch.as_deref())?;
    let id = &args.task;
    let who = super::fleet::asker();
    let mut branch = HubBranch::new(&hub, format!("`{id}`"));
    let tx = edit::transact(&mut branch, branch::ROUNDS, |dir| {
        let now = SystemTime::now();
        let note = format!(
            "\n### Approved — by {who} at {}\n",
            crate::claims::record::timestamp(now)
        );
        match review::approve(dir, id, now, &note).map_err(|e| Error::failure(e.to_string()))? {
            Ok(task) => Ok(Edit::Commit {
                message: format!("farm: approve `{id}`"),
                value: task,
            }),
            Err(why) => Err(not_reviewing(dir, id, &why, "approved")),
        }
    })?;
    match tx {
        Tx::Pushed(task) => {
            ctx.out.say(&format!(
                "approved `{id}` on `{}`: the next agent that claims it lands its change \
                 from `{}`, through the test gate, without a session",
                hub.branch,
                task.change.as_deref().unwrap_or_default()
            ))?;
            ctx.out
                .note("no farm running? start one: it lands the change first (farm run)");
            Ok(())
        }
        Tx::Busy | Tx::Gone | Tx::Lost(_) => Err(Error::failure(format!(
            "could not approve `{id}`: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

/// Why `id` cannot be `verb` (approved, rejected), in words with the fix.
pub(super) fn not_reviewing(
    dir: &std::path::Path,
    id: &TaskId,
    why: &NotReviewing,
    verb: &str,
) -> Error {
    use crate::board::paths::Place;
    match why {
        NotReviewing::NoChange => Error::usage(format!(
            "`{id}` is not waiting for review: no change of its waits to be {verb}"
        ))
        .hint("farm tasks lists the changes that wait (status `review`)"),
        NotReviewing::Approved => Error::usage(format!(
            "`{id}` is approved already: the next agent that claims it lands its change"
        ))
        .hint("farm status shows whether a farm runs to land it; else: farm run"),
        NotReviewing::NotPending => match crate::board::paths::find(dir, id) {
            Some(Place::Done) => Error::usage(format!("`{id}` is done, not waiting for review"))
                .hint(format!("its change landed already: farm task show {id}")),
            Some(Place::Failed) => Error::usage(format!("`{id}` failed, not waiting for review"))
                .hint(format!("put it back first: farm task retry {id}")),
            Some(Place::Pending) => Error::failure(format!(
                "{} is not a valid task: fix it by hand",
                Place::Pending.file(id)
            )),
            None => {
                Error::usage(format!("no task `{id}` on the board")).hint("list them: farm tasks")
            }
        },
    }
}
