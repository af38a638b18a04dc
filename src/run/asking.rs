//! A session that asks instead of guessing: it writes its question into
//! the file `FARM_ASK` names (in its clone's `.git`, which it may write,
//! and which no commit carries), and ends. Its task then waits on the
//! board (see [`crate::board::question`]) — no attempt counted, the claim
//! released — until `farm answer` makes it ready again.
//!
//! The session's commits go to a rescue branch on the hub, as a stopped
//! session's do, and the question's note names it: the answer may change
//! the approach, the branch moves on meanwhile, and the next session may
//! run on another machine, so the work is kept where every machine sees it
//! rather than carried in this clone. Before the next session of the task
//! farm fetches that branch into its clone (`origin/farm/rescue/…`), and
//! the prompt says where it is: the session merges, picks or drops it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::board::question;
use crate::claims::Held;
use crate::claims::host::Here;
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::names::TaskId;
use crate::run::attempts::{Recorded, edit_task};
use crate::run::clone::PrivateClone;
use crate::run::event::Event;
use crate::run::question_file::{forget, keep_work, keeper, kept_work, leftovers, read};
use crate::run::slot::Slot;
use crate::run::state::Run;
use crate::run::turn::{Turn, claim, reap};

/// Put the question of `turn`'s session on the board (its work kept on
/// `work`, the rescue branch, if there was any): the task waits.
pub(super) fn record(
    turn: Turn<'_>,
    asked: &str,
    work: Option<&str>,
    log: Option<&Path>,
) -> Result<Recorded, Error> {
    let Turn {
        run, name, task, ..
    } = turn;
    let id = task.id.as_str();
    let now = crate::claims::message::to_millis(SystemTime::now());
    let mut details = Vec::new();
    if let Some(branch) = work {
        details.push(format!("work: branch `{branch}`"));
    }
    if let Some(log) = log {
        details.push(format!("log: {}", log.display()));
    }
    details.push("no attempt counted".to_owned());
    let note = question::question_note(
        &format!("{name}@{}", Here::current().host),
        &timestamp(now),
        asked,
        &details,
    );
    let (recorded, _) = edit_task(
        turn,
        &|dir| {
            Ok(
                question::ask(dir, &task.id, now, &note)?.map(|t| crate::board::edit::Edited {
                    task: t,
                    failed: false,
                }),
            )
        },
        &|_| format!("farm: `{id}` asks a question"),
    )?;
    if recorded == Recorded::Pushed {
        forget(turn.clone.dir(), &task.id);
        run.tell(
            name,
            &Event::Asked {
                task: id.into(),
                question: asked.into(),
                work: work.map(Into::into),
            },
        );
    }
    Ok(recorded)
}

/// Put on the board the questions `clone` keeps ([`leftovers`]): a farm
/// killed between its session's question and the board's edit left them,
/// or the claim was gone before the board had one (a publish cut between
/// its refs, the task claimed by another meanwhile). Each task is claimed
/// again (dead claims reaped first) and waits, its work the branch kept
/// beside the question ([`keep_rescued`]), if any. A task held by another
/// keeps its question here, for a later step (or for that agent, if it is
/// one of this farm: [`keeper`]); one no longer pending (done, failed) has
/// no use for it: dropped, said.
pub(super) fn recover(
    run: &Run,
    name: &str,
    clone: &PrivateClone,
    slot: &Slot,
) -> Result<(), Error> {
    for (id, _) in leftovers(clone.dir()) {
        reap(run, name)?;
        let Some(task) = clone.pending_task(&run.hub, &id)? else {
            run.say(
                name,
                &format!(
                    "`{id}`: a question its board never got is dropped: the task is \
                     not pending any more"
                ),
            );
            forget(clone.dir(), &id);
            continue;
        };
        let Some(held) = claim(run, name, &id, task.attempts + 1)? else {
            run.detail(
                name,
                &format!(
                    "`{id}`: its question waits in the clone until the task can be \
                     claimed again (another agent holds it)"
                ),
            );
            continue;
        };
        let turn = Turn {
            run,
            clone,
            name,
            task: &task,
            held: &held,
            slot,
        };
        let put = put(turn, clone.dir());
        release(run, held, put)?;
    }
    Ok(())
}

/// The clone that keeps a question on `id` the board does not have yet,
/// if one does: one of `own` (the agent's clones not busy with an
/// integration), or any clone of this farm whose question an earlier run
/// left (see [`keeper`]).
pub(super) fn kept_in<'c>(
    run: &Run,
    mut own: impl Iterator<Item = &'c PrivateClone>,
    id: &TaskId,
) -> Option<PathBuf> {
    own.find(|c| read(c.dir(), id).is_some())
        .map(|c| c.dir().to_path_buf())
        .or_else(|| keeper(&run.state.join("clones"), id, run.began))
}

/// Put the question `keeper` keeps on `turn`'s task on the board, under
/// `turn`'s claim: the task waits. The file goes once the board has it.
pub(super) fn put(turn: Turn<'_>, keeper: &Path) -> Result<(), Error> {
    let id = &turn.task.id;
    // None: put there meanwhile, by its own agent.
    if let Some(question) = read(keeper, id)
        && record(turn, &question, kept_work(keeper, id).as_deref(), None)? == Recorded::Pushed
    {
        forget(keeper, id);
    }
    Ok(())
}

/// Release `held`, the claim a question was [`put`] on the board under,
/// whatever that did; the first error said.
pub(super) fn release(run: &Run, held: Held, put: Result<(), Error>) -> Result<(), Error> {
    let released = run.store.release_held(held);
    put?;
    match released {
        Ok(()) | Err(crate::claims::StoreError::Lost { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    run.wake_all();
    Ok(())
}

/// Keep beside each question `clone` keeps, with no branch named for its
/// work yet, the first branch opening the clone rescued its commits to: a
/// farm killed after its session asked left that work in the clone. The
/// question then names its work whichever agent of the farm puts it on
/// the board.
pub(super) fn keep_rescued(clone: &PrivateClone) {
    let Some(branch) = clone.rescued().first() else {
        return;
    };
    for (id, _) in leftovers(clone.dir()) {
        if kept_work(clone.dir(), &id).is_none() {
            keep_work(clone.dir(), &id, branch);
        }
    }
}
