//! Settling what a session left: commit it, integrate or rescue it, note a
//! failed attempt on the board, and say how the task ended.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::board::edit::{Edit, Edited, Push, Tx};
use crate::board::paths::Place;
use crate::board::{self, Task};
use serde_json::json;

use crate::claims::host::Here;
use crate::claims::record::{Nonce, timestamp};
use crate::claims::{Held, Published, StoreError};
use crate::error::Error;
use crate::run::agent::{Run, Unstarted};
use crate::run::classify::Class;
use crate::run::clone::io_error;
use crate::run::gate::Verdict;
use crate::run::integrate::{Integrated, after_rejection, integrate, publish_branch, push_rounds};
use crate::run::landing;
use crate::run::session::Outcome;
use crate::run::turn::{Turn, retake};

/// How one claimed task ended.
pub(super) enum End {
    Done,
    Failed {
        rescued: bool,
    },
    /// The run was killed, or the task was settled by someone else while
    /// this session worked on it: work rescued (if any), no attempt counted.
    Rescued {
        rescued: bool,
    },
    /// The claim was taken over by another holder: work rescued (if any),
    /// no attempt counted, not released. (A claim removed with nobody
    /// holding the task after is a failed attempt: see [`retake`](crate::run::turn::retake).)
    Lost {
        rescued: bool,
    },
    /// The session did not start, for the first time in a row: no attempt
    /// counted (see [`Run::not_started`]).
    Unstarted {
        rescued: bool,
    },
    /// The agent CLI hit a usage limit or an API error: work rescued, no
    /// attempt counted; agents wait (until `reset`, when it is known).
    Limited {
        reset: Option<SystemTime>,
        transient: bool,
        rescued: bool,
    },
    /// The agent CLI cannot work at all (why): the run stops.
    Fatal {
        why: String,
        rescued: bool,
    },
}

/// Settle what the turn's session left (`ran`); then [`release`] the claim.
/// If settling fails half-way (git or disk errors), the clone's commits
/// still go to a rescue branch, best effort.
pub(super) fn work(turn: Turn<'_>, ran: Result<Ran, Error>) -> Result<End, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        held,
        ..
    } = turn;
    let result = ran.and_then(|ran| finish(turn, ran));
    if result.is_err() {
        let branch = format!("farm/rescue/{}/{}", task.id, held.claim().nonce);
        let upstream = format!("origin/{}", run.hub.branch);
        let _ = clone.fetch_if_moved(&run.hub);
        if clone.count_since(&upstream).unwrap_or(0) > 0
            && clone
                .head()
                .and_then(|tip| clone.has_own_commits(&upstream, &tip))
                .unwrap_or(true)
            && clone.push_ref("HEAD", &branch).is_ok()
        {
            run.say(
                name,
                &format!("`{}`: its commits are on `{branch}`", task.id),
            );
        }
    }
    result
}

/// Release `held` after its turn ended in `result` (unless the claim was
/// lost): also when settling failed, for an error must not leave a
/// live-looking claim.
pub(super) fn release(run: &Run, held: Held, result: Result<End, Error>) -> Result<End, Error> {
    if !matches!(result, Ok(End::Lost { .. })) {
        match run.store.release_held(held) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) if result.is_ok() => return Err(e.into()),
            Err(_) => {}
        }
    }
    result
}

/// What a session left to settle.
pub(super) struct Ran {
    pub(super) attempt: u32,
    /// The commit the session started from.
    pub(super) base: String,
    pub(super) log: PathBuf,
    pub(super) outcome: Outcome,
    pub(super) class: Class,
    /// The claim was taken away while it ran.
    pub(super) lost: bool,
    /// It did not start at all (see [`classify::did_not_start`]).
    pub(super) unstarted: bool,
}

impl Ran {
    /// The session did its task: what is left is integration alone, which
    /// needs the agent no more (it can go on to its next session).
    pub(super) fn succeeded(&self) -> bool {
        !self.lost && matches!(self.outcome, Outcome::Success) && self.class == Class::Success
    }
}

/// Settle what a session left in `clone`: commit it, then integrate it
/// (success) or rescue it and note the failed attempt.
pub(super) fn finish(turn: Turn<'_>, ran: Ran) -> Result<End, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        held,
        ..
    } = turn;
    let Ran {
        attempt,
        base,
        log,
        outcome,
        class,
        lost,
        unstarted,
    } = ran;
    let id = task.id.as_str();
    let nonce = held.claim().nonce.clone();
    // A session must build on the commit it started from: history rewritten
    // under it (a reset to the root, say) would rebase into a board holding
    // the task twice, or be rejected push after push.
    let descends = clone.descends_from(&base)?;
    // What the agent left uncommitted is committed: with the move to done
    // when it succeeded (one commit), on its own otherwise (to be rescued).
    if class == Class::Success && !lost && descends {
        clone.mark_done(task, name, attempt, &log)?;
    } else {
        clone.commit_leftovers(name, id)?;
    }
    clone.undo_claim_tampering(&base, name)?;
    let work_tip = clone.head()?;
    // The rescue takes HEAD as it is when needed: after integration began it
    // holds the work rebased or merged (with a merge session's commits);
    // a merge in progress is aborted first, back to the work itself.
    let rescue = |why: &str| -> Result<bool, Error> {
        clone.abort_merge()?;
        let tip = clone.head()?;
        if work_tip == base && tip == base {
            return Ok(false);
        }
        // A push whose answer was lost (the hub cut off mid-reply) may have
        // landed: what the branch has already, by ancestry or patch, needs
        // no rescue branch.
        let upstream = format!("origin/{}", run.hub.branch);
        if clone.fetch_if_moved(&run.hub).is_ok() && !clone.has_own_commits(&upstream, &tip)? {
            run.journal.log(
                name,
                "rescue_skipped",
                json!({"task": id, "why": why, "because": "its commits are on the branch"}),
            );
            return Ok(false);
        }
        let branch = format!("farm/rescue/{id}/{nonce}");
        clone.push_ref(&tip, &branch)?;
        run.journal.log(
            name,
            "rescue",
            json!({"task": id, "branch": branch, "why": why}),
        );
        run.say(
            name,
            &format!("`{id}`: {why}; its commits are on `{branch}`"),
        );
        Ok(true)
    };

    // The attempt noted on the board under `held` (with `detail` lines:
    // the tests it turned red).
    let note = |held: &Held, why: &str, detail: &[String], rescued: bool| {
        record_attempt(
            Turn { held, ..turn },
            Attempted {
                attempt,
                why,
                detail,
                log: &log,
                rescue: rescued.then_some(&nonce),
            },
        )
    };
    // The claim is gone. Taken over by another holder, the task is theirs:
    // nothing to count here. Gone with nobody holding the task, it was
    // removed, not passed on — by the session itself, as often as not, and
    // farm cannot tell that from a reaper that left the task free: the
    // session failed, and the attempt is counted under the claim taken
    // again (else such a session runs again and again, counting nothing).
    let lost_claim = |why: &str, rescued: bool| -> Result<End, Error> {
        let Some(again) = retake(run, name, task, attempt)? else {
            return Ok(End::Lost { rescued });
        };
        let why = format!("{why}, and nobody held it after: the claim was removed");
        let noted = note(&again, &why, &[], rescued);
        match run.store.release_held(again) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) if noted.is_ok() => return Err(e.into()),
            Err(_) => {}
        }
        // Not pending any more: finished by whoever took the task over.
        Ok(match noted? {
            Recorded::Pushed => End::Failed { rescued },
            Recorded::Gone | Recorded::Lost => End::Lost { rescued },
        })
    };
    // A failed attempt: its work rescued, the attempt noted on the board.
    let fail_with = |rescue_why: &str, why: &str, detail: &[String]| -> Result<End, Error> {
        let rescued = rescue(rescue_why)?;
        if note(held, why, detail, rescued)? != Recorded::Lost {
            return Ok(End::Failed { rescued });
        }
        lost_claim(&format!("{why}; the claim was gone"), rescued)
    };
    let fail = |rescue_why: &str, why: &str| fail_with(rescue_why, why, &[]);

    if lost {
        let why = "the claim was taken away while the session ran";
        let rescued = rescue(why)?;
        return lost_claim(why, rescued);
    }
    if unstarted && !matches!(outcome, Outcome::Interrupted) {
        let said = last_line(&log).map_or(String::new(), |l| format!(", saying {l}"));
        match run.not_started(&task.id) {
            // Maybe this task's own doing (a prompt too long for an
            // argument): try another task before judging the agent.
            Unstarted::First => {
                let rescued = rescue("the session did not start")?;
                run.say(
                    name,
                    &format!(
                        "`{id}`: the agent did not start ({outcome}{said}); no attempt counted"
                    ),
                );
                run.journal.log(
                    name,
                    "unstarted",
                    json!({"task": id, "outcome": outcome.to_string()}),
                );
                return Ok(End::Unstarted { rescued });
            }
            Unstarted::Elsewhere(other) => {
                return Ok(End::Fatal {
                    rescued: rescue("the session did not start")?,
                    why: format!(
                        "it does not start: {outcome} at once on `{other}`, then on `{id}`{said}"
                    ),
                });
            }
            // The same task again (no other is ready): this task's failure.
            Unstarted::Again => {}
        }
    } else {
        run.started();
    }
    if !descends {
        return fail(
            "its history does not descend from where it started",
            &format!(
                "the session rewrote the history it started on: its HEAD does not descend from {}",
                &base[..base.len().min(12)]
            ),
        );
    }
    let end = match next_step(&outcome, class) {
        Step::Stopped => End::Rescued {
            rescued: rescue("the run was stopped")?,
        },
        Step::Limited { reset, transient } => End::Limited {
            reset,
            transient,
            rescued: rescue(if transient {
                "the agent CLI's API failed"
            } else {
                "the agent CLI hit its usage limit"
            })?,
        },
        Step::Fatal(why) => End::Fatal {
            why,
            rescued: rescue("the agent CLI cannot work")?,
        },
        Step::Integrate => match integrate(turn, &base)? {
            Integrated::Pushed => {
                run.say(
                    name,
                    &format!("`{id}` done: integrated into `{}`", run.hub.branch),
                );
                run.journal.log(name, "done", json!({"task": id}));
                End::Done
            }
            Integrated::Lost => {
                let why = "the claim was taken away before the push";
                let rescued = rescue(why)?;
                return lost_claim(why, rescued);
            }
            Integrated::Interrupted => End::Rescued {
                rescued: rescue("the run was stopped during a merge session")?,
            },
            Integrated::Busy => fail(
                "could not push: the branch kept moving",
                &format!(
                    "could not push after {} rounds: `{}` kept moving",
                    push_rounds(run),
                    run.hub.branch
                ),
            )?,
            Integrated::Gated(Verdict::Red { why, errors }) => fail_with(
                "the tests turned red",
                &format!("the tests: {why}"),
                &errors,
            )?,
            Integrated::Gated(Verdict::Broken(why)) => End::Fatal {
                rescued: rescue("the tests cannot run")?,
                why: format!("the test gate cannot run: {why}"),
            },
            Integrated::Gated(verdict) => {
                let why = match verdict {
                    Verdict::Untested(why) => why,
                    _ => "the test gate did not judge it".to_owned(),
                };
                fail(
                    "its tests could not be read",
                    &format!("its tests could not be read: {why}"),
                )?
            }
            Integrated::Elsewhere(place) => {
                let file = place.file(id);
                let what = match place {
                    Place::Failed => "given up",
                    _ => "done",
                };
                run.say(
                    name,
                    &format!(
                        "`{id}` was {what} elsewhere while this session worked on it \
                         (`{file}` is on `{}`): not landed again, no attempt counted",
                        run.hub.branch
                    ),
                );
                run.journal
                    .log(name, "elsewhere", json!({"task": id, "file": file}));
                End::Rescued {
                    rescued: rescue(&format!("{what} elsewhere"))?,
                }
            }
            Integrated::Refused(refused) => {
                let paths = landing::describe(&refused);
                fail(
                    "it changes what a session may not",
                    &format!("it changes what a session may not: {paths}"),
                )?
            }
            Integrated::Conflict(files) => fail(
                &format!("could not merge ({})", files.join(", ")),
                &format!(
                    "its work conflicts with `{}` in {}",
                    run.hub.branch,
                    files.join(", ")
                ),
            )?,
        },
        Step::Fail { rescue, note } => fail(&rescue, &note)?,
    };
    Ok(end)
}

/// What comes after a session that started, and built on the commit it
/// started from, by how it ended and what its log says.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// The run was stopped: rescue the work, count nothing.
    Stopped,
    /// A usage limit or an API error: rescue the work, count no attempt;
    /// every loop waits (until `reset`, when the CLI said).
    Limited {
        reset: Option<SystemTime>,
        transient: bool,
    },
    /// The agent CLI cannot work (why): rescue the work; the run stops.
    Fatal(String),
    /// The task is done: integrate the work.
    Integrate,
    /// A failed attempt: rescue the work (saying `rescue`), note the attempt
    /// on the board (saying `note`).
    Fail { rescue: String, note: String },
}

/// The table from a session's (outcome, classification) to the next step.
/// A stop asked of the run comes first, whatever the log says; then the
/// agent CLI's own state (limits, API errors, setup); only then the task's.
pub(super) fn next_step(outcome: &Outcome, class: Class) -> Step {
    match (outcome, class) {
        // Also a session farm stopped itself, for refused credentials.
        (_, Class::Fatal(why)) => Step::Fatal(why),
        (Outcome::Interrupted, _) => Step::Stopped,
        (_, Class::Limited { reset }) => Step::Limited {
            reset,
            transient: false,
        },
        (_, Class::Transient) => Step::Limited {
            reset: None,
            transient: true,
        },
        (Outcome::Success, Class::Success) => Step::Integrate,
        (Outcome::Success, _) => Step::Fail {
            rescue: "the session reported an error".into(),
            note: "the session exited 0 but its result says it failed".into(),
        },
        (failed, _) => Step::Fail {
            rescue: format!("session {failed}"),
            note: failed.to_string(),
        },
    }
}

/// What became of an edit of a task file on the hub's branch.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    Pushed,
    /// The file is not pending there any more (moved by hand, or edited
    /// into something invalid, which the board reports): nothing to edit.
    Gone,
    /// The claim was taken away: nothing published.
    Lost,
}

/// The hub's branch as the loop edits it: in the clone, at the branch's tip,
/// under the hub's push lock (if it has one) from the sync to the push, and
/// pushed under the claim — fencing, as for the work: a holder whose claim
/// was taken away leaves the task file to its new holder.
struct Fenced<'a> {
    turn: Turn<'a>,
}

impl board::edit::Branch for Fenced<'_> {
    type Error = Error;
    type Round = Option<std::fs::File>;

    fn checkout(&mut self, round: usize) -> Result<(PathBuf, Self::Round), Error> {
        let Turn { run, clone, .. } = self.turn;
        if round > 0 {
            after_rejection(run, round);
        }
        let lock = run.hub.push_lock()?;
        clone.sync(&run.hub)?;
        Ok((clone.dir().to_path_buf(), lock))
    }

    fn publish(&mut self, lock: Self::Round, message: &str) -> Result<Push, Error> {
        let Turn {
            run, clone, held, ..
        } = self.turn;
        clone.commit_all(message)?;
        Ok(match publish_branch(run, clone, held, lock.as_ref())? {
            Published::Pushed => Push::Pushed,
            Published::Lost(_) => Push::Lost,
            Published::Rejected(_) => Push::Rejected,
        })
    }
}

/// Edit task `id`'s pending file on the hub's branch under `held`: `edit`
/// edits the work tree (`None`: the file is not pending there any more) and
/// says the commit message; true when the task went to `tasks/failed/`.
fn edit_task(
    turn: Turn<'_>,
    edit: &dyn Fn(&Path) -> std::io::Result<Option<Edited>>,
    message: &dyn Fn(&Edited) -> String,
) -> Result<(Recorded, bool), Error> {
    let id = &turn.task.id;
    let tx = board::edit::transact(&mut Fenced { turn }, push_rounds(turn.run), |dir| {
        Ok(match edit(dir).map_err(io_error)? {
            None => Edit::Gone,
            Some(edited) => Edit::Commit {
                message: message(&edited),
                value: edited.failed,
            },
        })
    })?;
    match tx {
        Tx::Pushed(gave_up) => Ok((Recorded::Pushed, gave_up)),
        Tx::Lost(gave_up) => Ok((Recorded::Lost, gave_up)),
        Tx::Gone => Ok((Recorded::Gone, false)),
        Tx::Busy => Err(Error::failure(format!(
            "`{id}`: could not edit its task file; the hub is too busy"
        ))),
    }
}

/// A task out of attempts before any session (`attempts >= max_attempts`
/// in its front matter): to `tasks/failed/` with a note, no attempt added.
pub(super) fn retire(turn: Turn<'_>) -> Result<Recorded, Error> {
    let Turn {
        run, name, task, ..
    } = turn;
    let id = task.id.as_str();
    let note = |t: &Task| {
        format!(
            "\n## Out of attempts\n\n- {} of {} attempts used before it was claimed: \
             moved to tasks/failed/ without a session\n- agent: {name}@{}\n- at: {}\n",
            t.attempts,
            t.max_attempts,
            Here::current().host,
            timestamp(SystemTime::now()),
        )
    };
    let (recorded, _) = edit_task(
        turn,
        &|dir| board::edit::retire(dir, &task.id, note),
        &|Edited { task: t, .. }| {
            format!(
                "farm: `{id}` is out of attempts ({} of {})",
                t.attempts, t.max_attempts
            )
        },
    )?;
    if recorded == Recorded::Pushed {
        run.journal.log(
            name,
            "failed",
            json!({"task": id, "attempts": task.attempts, "why": "out of attempts", "gave_up": true}),
        );
        run.say(
            name,
            &format!(
                "`{id}`: out of attempts ({} of {}); moved to tasks/failed/ without a session",
                task.attempts, task.max_attempts
            ),
        );
    }
    Ok(recorded)
}

/// A failed attempt, as its note on the board tells it.
pub(super) struct Attempted<'a> {
    pub(super) attempt: u32,
    pub(super) why: &'a str,
    /// Lines quoted under the note (`ERROR:` lines of the tests).
    pub(super) detail: &'a [String],
    pub(super) log: &'a Path,
    /// The claim whose rescue branch holds the work, if any.
    pub(super) rescue: Option<&'a Nonce>,
}

/// At most this many detail lines in a note: the first of them tell.
const DETAIL_LINES: usize = 20;

/// Count a failed attempt in the task file on the hub's branch, with a note;
/// move it to `tasks/failed/` when its attempts are used up.
pub(super) fn record_attempt(turn: Turn<'_>, attempted: Attempted<'_>) -> Result<Recorded, Error> {
    let Turn {
        run, name, task, ..
    } = turn;
    let Attempted {
        attempt,
        why,
        detail,
        log,
        rescue,
    } = attempted;
    let id = task.id.as_str();
    let note = || {
        let mut note = format!(
            "\n## Attempt {attempt} — {why}\n\n- agent: {name}@{}\n- at: {}\n- log: {}\n",
            Here::current().host,
            timestamp(SystemTime::now()),
            log.display()
        );
        if let Some(nonce) = rescue {
            note.push_str(&format!("- work: branch `farm/rescue/{id}/{nonce}`\n"));
        }
        if let Some(tail) = last_line(log) {
            note.push_str(&format!("- last output: {tail}\n"));
        }
        if !detail.is_empty() {
            // A fence of its own: no quoted line can close it.
            note.push_str("\n~~~~text\n");
            for line in detail.iter().take(DETAIL_LINES) {
                note.push_str(&line.replace("~~~~", "~ ~ ~ ~"));
                note.push('\n');
            }
            if detail.len() > DETAIL_LINES {
                note.push_str(&format!("… and {} more\n", detail.len() - DETAIL_LINES));
            }
            note.push_str("~~~~\n");
        }
        note
    };
    let (recorded, gave_up) = edit_task(
        turn,
        &|dir| board::edit::record_attempt(dir, &task.id, attempt, &note()),
        &|Edited { task: t, failed }| {
            if *failed {
                format!("farm: `{id}` failed after {} attempts", t.attempts)
            } else {
                format!("farm: attempt {attempt} of `{id}` failed")
            }
        },
    )?;
    if recorded == Recorded::Pushed {
        run.journal.log(
            name,
            "failed",
            json!({"task": id, "attempt": attempt, "why": why, "gave_up": gave_up}),
        );
        let what = if gave_up {
            "moved to tasks/failed/"
        } else {
            "back on the board"
        };
        run.say(
            name,
            &format!("`{id}`: attempt {attempt} failed ({why}); {what}"),
        );
    }
    Ok(recorded)
}

/// The last non-empty line of a session log, shortened, for attempt notes.
pub(super) fn last_line(log: &Path) -> Option<String> {
    let text = crate::run::session::agent_output(&std::fs::read_to_string(log).ok()?);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let cut: String = line.chars().take(200).collect();
    Some(format!("`{}`", cut.replace('`', "'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_session_is_rescued_whatever_its_log_says() {
        for class in [Class::Success, Class::TaskFailed, Class::Transient] {
            assert_eq!(next_step(&Outcome::Interrupted, class), Step::Stopped);
        }
    }

    #[test]
    fn limits_and_api_errors_wait_whatever_the_exit() {
        let reset = Some(SystemTime::UNIX_EPOCH);
        for outcome in [Outcome::Success, Outcome::Failed { code: 1 }] {
            assert_eq!(
                next_step(&outcome, Class::Limited { reset }),
                Step::Limited {
                    reset,
                    transient: false
                }
            );
            assert_eq!(
                next_step(&outcome, Class::Transient),
                Step::Limited {
                    reset: None,
                    transient: true
                }
            );
        }
    }

    #[test]
    fn a_cli_that_cannot_work_stops_the_run() {
        assert_eq!(
            next_step(
                &Outcome::Failed { code: 1 },
                Class::Fatal("no login".into())
            ),
            Step::Fatal("no login".into())
        );
    }

    #[test]
    fn only_a_success_by_exit_and_by_log_is_integrated() {
        assert_eq!(
            next_step(&Outcome::Success, Class::Success),
            Step::Integrate
        );
        assert_eq!(
            next_step(&Outcome::Success, Class::TaskFailed),
            Step::Fail {
                rescue: "the session reported an error".into(),
                note: "the session exited 0 but its result says it failed".into(),
            }
        );
    }

    #[test]
    fn a_failed_exit_is_a_failed_attempt_named_by_its_outcome() {
        for outcome in [
            Outcome::Failed { code: 3 },
            Outcome::TimedOut,
            Outcome::Killed { signal: 9 },
        ] {
            let Step::Fail { rescue, note } = next_step(&outcome, Class::Success) else {
                panic!("{outcome} is no failed attempt");
            };
            assert_eq!(note, outcome.to_string());
            assert_eq!(rescue, format!("session {outcome}"));
        }
    }
}
