//! The review gate in the loop (the board's side is
//! [`crate::board::review`]). A task with `review = true` whose session
//! would land its change does not: the change goes to the hub's branch
//! `farm/review/<task>/<nonce>` first — nothing lost, whatever follows —
//! and then the task file says so under the claim ([`record`]); the claim
//! is released and no attempt is counted. `farm approve` marks the change
//! approved on the board, which makes the task ready again, and the next
//! agent to claim it lands the change without a session ([`prepare`]): the
//! change is rebased onto the branch as it is then, moved to done and
//! integrated like any session's work — through the test gate and the
//! merge queue, fenced by the claim. `farm reject` counts a failed attempt
//! with the reviewer's words; the next session's prompt names the branch
//! ([`crate::run::rejected`]).
//!
//! Why the landing is a turn of a running farm and not `farm approve`'s
//! own doing: landing needs what only the loop has — a private clone, the
//! gate and its queue, the push lock, the claim that fences the push — and
//! a turn already does all of it, across a kill (a farm killed mid-landing
//! leaves the task approved and its claim dead: reaped, claimed again and
//! landed once by the next). `farm approve` stays a board edit like
//! `farm answer`, the same on both claim stores, and waits for no test run.
//!
//! Killed between the steps: after the branch was pushed and before the
//! board said so, the task is as it was (ready, no attempt counted) and the
//! change is on its branch and rescued from the clone: nothing lost, nothing
//! landed; after the board said so, it waits for review, its dead claim
//! reaped.

use std::path::Path;
use std::time::SystemTime;

use crate::board::review;
use crate::claims::host::Here;
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::run::attempts::{Attempted, Recorded, edit_task, record_attempt};
use crate::run::classify::Class;
use crate::run::event::Event;
use crate::run::session::Outcome;
use crate::run::turn::{Ran, Turn};

/// Put the change of `turn`'s session, pushed to the hub's branch
/// `change`, on the board: the task waits for review.
pub(super) fn record(turn: Turn<'_>, change: &str, log: &Path) -> Result<Recorded, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        ..
    } = turn;
    let id = task.id.as_str();
    let upstream = format!("origin/{}", run.hub.branch);
    let commits = clone.count_since(&upstream).unwrap_or(0);
    let details = [
        format!("commits not on `{}`: {commits}", run.hub.branch),
        format!("log: {}", log.display()),
        format!("approve: farm approve {id}; reject: farm reject {id} -m WHY"),
        "no attempt counted".to_owned(),
    ];
    let note = review::waiting_note(
        &format!("{name}@{}", Here::current().host),
        &timestamp(SystemTime::now()),
        change,
        &details,
    );
    let (recorded, _) = edit_task(
        turn,
        &|dir| {
            Ok(
                review::wait(dir, &task.id, change, &note)?.map(|t| crate::board::edit::Edited {
                    task: t,
                    failed: false,
                }),
            )
        },
        &|_| format!("farm: `{id}` waits for review"),
    )?;
    if recorded == Recorded::Pushed {
        run.tell(
            name,
            &Event::Review {
                task: id.into(),
                change: change.into(),
            },
        );
    }
    Ok(recorded)
}

/// What landing an approved change begins with.
pub(super) enum Prepared {
    /// The change is on top of the branch in the clone, as a session's work
    /// would be: settle it as one.
    Ran(Ran),
    /// It cannot be (why): a failed attempt.
    Failed {
        why: String,
        log: std::path::PathBuf,
    },
}

/// Bring the approved change of `turn`'s task (its `change` branch) onto
/// the branch in the clone, as it is now: rebased, as a session's work on
/// it would be, for [`settle`](crate::run::settle) to move the task to done
/// and integrate — no session runs.
pub(super) fn prepare(turn: Turn<'_>) -> Result<Prepared, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        ..
    } = turn;
    let id = task.id.as_str();
    let Some(change) = task.change.as_deref() else {
        return Err(Error::failure(format!("`{id}` has no change to land")));
    };
    let attempt = task.attempts + 1;
    let branch = &run.hub.branch;
    let (log, _) = run.session_files(name, id);
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    }
    let said = format!(
        "farm: landing `{id}`'s approved change from `{change}` onto `{branch}`, without a session\n"
    );
    std::fs::write(&log, &said)
        .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", log.display())))?;
    run.say(
        name,
        &format!("claimed `{id}`: landing its approved change from `{change}` (no session)"),
    );
    run.journal.record(
        name,
        &Event::Claim {
            task: id.into(),
            attempt,
            role: run.config.roles.get(name).map(|r| r.name.as_str().into()),
        },
    );
    let base = clone.head()?;
    if let Err(e) = clone.fetch(change) {
        return Ok(Prepared::Failed {
            why: format!(
                "its approved change could not be fetched from the hub's `{change}`: {}",
                e.message
            ),
            log,
        });
    }
    clone.move_head(&format!("origin/{change}"))?;
    if !clone.rebase(&format!("origin/{branch}"))? {
        clone.move_head(&base)?;
        return Ok(Prepared::Failed {
            why: format!(
                "its approved change (branch `{change}`) no longer applies onto `{branch}`: \
                 it conflicts; a new session does the task again"
            ),
            log,
        });
    }
    // The task is moved to done in the files, and the files committed:
    // they must hold the change.
    clone.files_to_head()?;
    Ok(Prepared::Ran(Ran {
        attempt,
        base,
        log,
        outcome: Outcome::Success,
        class: Class::Success,
        lost: false,
        unstarted: false,
    }))
}

/// An approved change that could not be brought onto the branch: a failed
/// attempt, which ends its review (see [`crate::board::edit::record_attempt`]).
pub(super) fn failed(turn: Turn<'_>, why: &str, log: &Path) -> Result<Recorded, Error> {
    turn.run.say_tone(
        turn.name,
        crate::output::Style::Bad,
        &format!("`{}`: {why}", turn.task.id),
    );
    record_attempt(
        turn,
        Attempted {
            attempt: turn.task.attempts + 1,
            why,
            detail: &[],
            log,
            rescue: None,
        },
    )
}
