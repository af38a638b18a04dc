//! Settling what a session left, decide-then-do: the facts of its end are
//! gathered (what it committed, whether the claim is still ours, whether it
//! started, whether it built on where it started), one pure decision says
//! what comes next ([`decide`], then [`landed`] for what integrating the
//! work came to), and [`Settling`] carries it out: integrate, or rescue the
//! work and note the failed attempt, and say how the task ended.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::board::paths::Place;
use crate::output::Style;
use crate::run::event::Event;

use crate::claims::record::Nonce;
use crate::claims::{Held, StoreError};
use crate::error::Error;
use crate::run::attempts::{Attempted, Recorded, last_line, record_attempt};
use crate::run::classify::Class;
use crate::run::gate::Verdict;
use crate::run::integrate::{Integrated, Work, integrate, push_rounds};
use crate::run::interrupt::{Halt, Interrupt};
use crate::run::landing;
use crate::run::question_file::keep_work;
use crate::run::session::Outcome;
use crate::run::state::{Run, Unstarted};
use crate::run::turn::{Ran, Turn, claim};

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
    /// The change waits for review on its branch: no attempt counted.
    Review,
    /// The claim was taken over by another holder: work rescued (if any),
    /// no attempt counted, not released. (A claim removed with nobody
    /// holding the task after is a failed attempt: see [`claim`].)
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
    if let Err(e) = &result {
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
            run.say_tone(
                name,
                Style::Warn,
                &format!("`{}`: its commits are on `{branch}`", task.id),
            );
            // Journaled as every rescue is, so that `farm rescue list` says why.
            run.journal.record(
                name,
                &Event::Rescue {
                    task: Some(task.id.as_str().into()),
                    branch: branch.as_str().into(),
                    why: format!("settling the session failed: {}", e.message).into(),
                },
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

/// Settle what a session left in `clone`: commit it, gather the facts of
/// its end, decide, and carry the decision out.
pub(super) fn finish(turn: Turn<'_>, ran: Ran) -> Result<End, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        held,
        ..
    } = turn;
    // A session must build on the commit it started from: history rewritten
    // under it (a reset to the root, say) would rebase into a board holding
    // the task twice, or be rejected push after push.
    let descends = clone.descends_from(&ran.base)?;
    // A question asked (`FARM_ASK`): the task is not done, whatever the
    // exit said.
    let asked = crate::run::question_file::read(clone.dir(), &task.id);
    // What the agent left uncommitted is committed: with the move to done
    // when it succeeded (one commit), on its own otherwise (to be rescued).
    // A change that waits for review is kept as the session left it: done
    // only once approved, landed on the branch as it is then.
    let review = task.review && task.approved.is_none();
    if ran.class == Class::Success && !ran.lost && descends && asked.is_none() && !review {
        clone.mark_done(task, name, ran.attempt, &ran.log)?;
    } else {
        clone.commit_leftovers(name, task.id.as_str())?;
    }
    clone.undo_claim_tampering(&ran.base, name)?;
    // Whether the agent can start at all is judged across the run's
    // sessions; a session whose claim was taken away tells nothing of it.
    let unstarted = match ran.lost {
        true => None,
        false if ran.unstarted && !matches!(ran.outcome, Outcome::Interrupted) => {
            Some(run.not_started(&task.id))
        }
        false => {
            run.started();
            None
        }
    };
    let said = last_line(&ran.log).map_or(String::new(), |l| format!(", saying {l}"));
    let step = decide(&Facts {
        id: task.id.as_str(),
        base: &ran.base,
        outcome: &ran.outcome,
        class: ran.class.clone(),
        lost: ran.lost,
        unstarted,
        descends,
        said: &said,
        asked: asked.as_deref(),
        review,
    });
    Settling {
        turn,
        attempt: ran.attempt,
        log: ran.log,
        outcome: ran.outcome,
        said,
        nonce: held.claim().nonce.clone(),
        work_tip: clone.head()?,
        base: ran.base,
    }
    .carry_out(step)
}

/// What settling knows of a session's end before it decides.
pub(super) struct Facts<'a> {
    pub(super) id: &'a str,
    /// The commit the session started from.
    pub(super) base: &'a str,
    pub(super) outcome: &'a Outcome,
    pub(super) class: Class,
    /// The claim was taken away while it ran.
    pub(super) lost: bool,
    /// It did not start (and was not stopped): what that means, given the
    /// run's last session that did not start either.
    pub(super) unstarted: Option<Unstarted>,
    /// Its HEAD descends from the commit it started from.
    pub(super) descends: bool,
    /// `, saying <the log's last line>`, or nothing.
    pub(super) said: &'a str,
    /// The question it asked (`FARM_ASK`), if it asked one.
    pub(super) asked: Option<&'a str>,
    /// Its task lands only once a person approved the change.
    pub(super) review: bool,
}

/// What comes after a session, or after integrating its work.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// The claim was taken away (why): rescue the work; an attempt counts
    /// only when nobody holds the task after (see [`claim`]).
    Lose(String),
    /// The session did not start, the first in a row: rescue, count nothing.
    Unstarted,
    /// The run was stopped: rescue the work (saying why), count nothing.
    Stop(String),
    /// A usage limit or an API error: rescue the work, count no attempt;
    /// every loop waits (until `reset`, when the CLI said).
    Limited {
        reset: Option<SystemTime>,
        transient: bool,
    },
    /// The agent CLI, or the test gate, cannot work (`why`): rescue the work
    /// (saying `rescue`); the run stops.
    Fatal { rescue: String, why: String },
    /// The task is done: integrate the work.
    Integrate,
    /// A failed attempt: rescue the work (saying `rescue`), note the attempt
    /// on the board (saying `note`, with `detail` lines quoted under it).
    Fail {
        rescue: String,
        note: String,
        detail: Vec<String>,
    },
    /// The work landed.
    Done,
    /// The task was settled by someone else meanwhile (it is in `place` on
    /// the branch): rescue the work, count nothing.
    Elsewhere(Place),
    /// The session asked this question: rescue the work, put the question
    /// on the board (the task waits for an answer), count nothing.
    Ask(String),
    /// The work would be integrated, but its task wants a review: push it
    /// to a review branch and put that on the board (the task waits for
    /// `farm approve`), count nothing.
    Review,
}

impl Step {
    fn fail(rescue: impl Into<String>, note: impl Into<String>) -> Step {
        Step::Fail {
            rescue: rescue.into(),
            note: note.into(),
            detail: Vec::new(),
        }
    }
}

/// What comes after a session, by the facts of its end: a claim taken away
/// first, then an agent that did not start, then history rewritten, then
/// the table of (outcome, classification) ([`next_step`]).
pub(super) fn decide(f: &Facts<'_>) -> Step {
    if f.lost {
        return Step::Lose("the claim was taken away while the session ran".into());
    }
    // A question is the session's last word, unless the run stopped it
    // before it could be sure of it.
    if let Some(q) = f.asked
        && !matches!(f.outcome, Outcome::Interrupted)
    {
        return Step::Ask(q.to_owned());
    }
    match &f.unstarted {
        // Maybe this task's own doing (a prompt too long for an argument):
        // try another task before judging the agent.
        Some(Unstarted::First) => return Step::Unstarted,
        // Two tasks in a row: an agent that cannot start, a setup error.
        Some(Unstarted::Elsewhere(other)) => {
            return Step::Fatal {
                rescue: "the session did not start".into(),
                why: format!(
                    "it does not start: {} at once on `{other}`, then on `{}`{}",
                    f.outcome, f.id, f.said
                ),
            };
        }
        // The same task again (no other is ready): this task's failure.
        Some(Unstarted::Again) | None => {}
    }
    if !f.descends {
        return Step::fail(
            "its history does not descend from where it started",
            format!(
                "the session rewrote the history it started on: its HEAD does not descend from {}",
                &f.base[..f.base.len().min(12)]
            ),
        );
    }
    match next_step(f.outcome, f.class.clone()) {
        Step::Integrate if f.review => Step::Review,
        step => step,
    }
}

/// What comes after integrating a session's work, by how it ended; `rounds`
/// is how many pushes it had.
pub(super) fn landed(result: Result<Integrated, Interrupt>, branch: &str, rounds: usize) -> Step {
    let integrated = match result {
        Ok(integrated) => integrated,
        Err(Interrupt::Lost(_)) => {
            return Step::Lose("the claim was taken away before the push".into());
        }
        Err(Interrupt::Stopped) => {
            return Step::Stop("the run was stopped during a merge session".into());
        }
    };
    match integrated {
        Integrated::Pushed => Step::Done,
        Integrated::Busy => Step::fail(
            "could not push: the branch kept moving",
            format!("could not push after {rounds} rounds: `{branch}` kept moving"),
        ),
        Integrated::Gated(Verdict::Red { why, errors }) => Step::Fail {
            rescue: "the tests turned red".into(),
            note: format!("the tests: {why}"),
            detail: errors,
        },
        Integrated::Gated(Verdict::Broken(why)) => Step::Fatal {
            rescue: "the tests cannot run".into(),
            why: format!("the test gate cannot run: {why}"),
        },
        Integrated::Gated(Verdict::Unqueued(why)) => Step::fail(
            "the merge queue gave it up",
            format!("the merge queue gave it up: {why}"),
        ),
        Integrated::Gated(verdict) => {
            let why = match verdict {
                Verdict::Untested(why) => why,
                _ => "the test gate did not judge it".to_owned(),
            };
            Step::fail(
                "its tests could not be read",
                format!("its tests could not be read: {why}"),
            )
        }
        Integrated::Elsewhere(place) => Step::Elsewhere(place),
        Integrated::Refused(refused) => Step::fail(
            "it changes what a session may not",
            format!(
                "it changes what a session may not: {}",
                landing::describe(&refused)
            ),
        ),
        Integrated::Conflict(files) => Step::fail(
            format!("could not merge ({})", files.join(", ")),
            format!("its work conflicts with `{branch}` in {}", files.join(", ")),
        ),
    }
}

/// The table from a session's (outcome, classification) to the next step.
/// A stop asked of the run comes first, whatever the log says; then the
/// agent CLI's own state (limits, API errors, setup); only then the task's.
pub(super) fn next_step(outcome: &Outcome, class: Class) -> Step {
    match (outcome, class) {
        // Also a session farm stopped itself, for refused credentials.
        (_, Class::Fatal(why)) => Step::Fatal {
            rescue: "the agent CLI cannot work".into(),
            why,
        },
        (Outcome::Interrupted, _) => Step::Stop("the run was stopped".into()),
        (_, Class::Limited { reset }) => Step::Limited {
            reset,
            transient: false,
        },
        (_, Class::Transient) => Step::Limited {
            reset: None,
            transient: true,
        },
        (Outcome::Success, Class::Success) => Step::Integrate,
        (Outcome::Success, _) => Step::fail(
            "the session reported an error",
            "the session exited 0 but its result says it failed",
        ),
        (failed, _) => Step::fail(format!("session {failed}"), failed.to_string()),
    }
}

/// A session's end being settled: what carrying out a [`Step`] needs.
struct Settling<'a> {
    turn: Turn<'a>,
    attempt: u32,
    log: PathBuf,
    outcome: Outcome,
    /// `, saying <the log's last line>`, or nothing.
    said: String,
    nonce: Nonce,
    /// The commit the session started from, and its work as committed.
    base: String,
    work_tip: String,
}

impl Settling<'_> {
    /// Carry `step` out; how the task ended.
    fn carry_out(&self, step: Step) -> Result<End, Error> {
        let Turn { run, name, .. } = self.turn;
        let id = self.turn.task.id.as_str();
        Ok(match step {
            Step::Integrate => {
                let result = match integrate(self.turn, &self.base, Work::Session) {
                    Ok(integrated) => Ok(integrated),
                    Err(Halt::Interrupted(cut)) => Err(cut),
                    Err(Halt::Failed(e)) => return Err(e),
                };
                let next = landed(result, &run.hub.branch, push_rounds(run));
                return self.carry_out(next);
            }
            Step::Done => {
                let done = Event::Done { task: id.into() };
                run.say_tone(
                    name,
                    done.tone(),
                    &format!("`{id}` done: integrated into `{}`", run.hub.branch),
                );
                run.journal.record(name, &done);
                End::Done
            }
            Step::Lose(why) => {
                let rescued = self.rescue(&why)?;
                return self.lost_claim(&why, rescued);
            }
            Step::Unstarted => {
                let rescued = self.rescue("the session did not start")?;
                let (outcome, said) = (&self.outcome, &self.said);
                let unstarted = Event::Unstarted {
                    task: id.into(),
                    outcome: outcome.to_string().into(),
                };
                run.say_tone(
                    name,
                    unstarted.tone(),
                    &format!(
                        "`{id}`: the agent did not start ({outcome}{said}); no attempt counted"
                    ),
                );
                run.journal.record(name, &unstarted);
                End::Unstarted { rescued }
            }
            Step::Stop(why) => End::Rescued {
                rescued: self.rescue(&why)?,
            },
            Step::Limited { reset, transient } => End::Limited {
                reset,
                transient,
                rescued: self.rescue(if transient {
                    "the agent CLI's API failed"
                } else {
                    "the agent CLI hit its usage limit"
                })?,
            },
            Step::Fatal { rescue, why } => End::Fatal {
                rescued: self.rescue(&rescue)?,
                why,
            },
            Step::Elsewhere(place) => {
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
                run.journal.record(
                    name,
                    &Event::Elsewhere {
                        task: id.into(),
                        file: file.as_str().into(),
                    },
                );
                End::Rescued {
                    rescued: self.rescue(&format!("{what} elsewhere"))?,
                }
            }
            Step::Ask(question) => return self.ask(&question),
            Step::Review => {
                let Turn { clone, task, .. } = self.turn;
                // The change goes to the hub before the board says it
                // waits: a farm killed in between loses nothing.
                let change = crate::board::task::review_branch(&task.id, self.nonce.as_str());
                clone.push_ref(&clone.head()?, &change)?;
                match crate::run::review::record(self.turn, &change, &self.log)? {
                    Recorded::Pushed => End::Review,
                    // Settled by someone else meanwhile: the change stays
                    // on its branch.
                    Recorded::Gone => End::Rescued { rescued: true },
                    Recorded::Lost => End::Lost { rescued: true },
                }
            }
            Step::Fail {
                rescue,
                note,
                detail,
            } => {
                let rescued = self.rescue(&rescue)?;
                if self.note(self.turn.held, &note, &detail, rescued)? != Recorded::Lost {
                    return Ok(End::Failed { rescued });
                }
                return self.lost_claim(&format!("{note}; the claim was gone"), rescued);
            }
        })
    }

    /// The session asked `question` instead of finishing: its work to a
    /// rescue branch, the question to the board, the task waiting. When
    /// the claim was gone before the board had it, the clone keeps it (the
    /// file `FARM_ASK` named) for the loop to put there: see
    /// [`asking::recover`](crate::run::asking::recover).
    fn ask(&self, question: &str) -> Result<End, Error> {
        let Turn {
            run,
            clone,
            name,
            task,
            ..
        } = self.turn;
        let id = task.id.as_str();
        let rescued = self.rescue("the session asked a question")?;
        let work = format!("farm/rescue/{id}/{}", self.nonce);
        let work = rescued.then_some(work.as_str());
        Ok(
            match crate::run::asking::record(self.turn, question, work, Some(&self.log))? {
                Recorded::Pushed | Recorded::Gone => End::Rescued { rescued },
                Recorded::Lost => {
                    if let Some(work) = work {
                        keep_work(clone.dir(), &task.id, work);
                    }
                    run.say_tone(
                        name,
                        Style::Warn,
                        &format!(
                            "`{id}`: the claim was gone before the board had the question; \
                             the clone keeps it, for the board once the task can be claimed again"
                        ),
                    );
                    End::Lost { rescued }
                }
            },
        )
    }

    /// Push the work to its rescue branch (saying `why`), unless there is
    /// none or the branch has it already; whether it was pushed. It takes
    /// HEAD as it is now: after integration began it holds the work rebased
    /// or merged (with a merge session's commits); a merge in progress is
    /// aborted first, back to the work itself.
    fn rescue(&self, why: &str) -> Result<bool, Error> {
        let Turn {
            run, clone, name, ..
        } = self.turn;
        let id = self.turn.task.id.as_str();
        clone.abort_merge()?;
        let tip = clone.head()?;
        if self.work_tip == self.base && tip == self.base {
            return Ok(false);
        }
        // A push whose answer was lost (the hub cut off mid-reply) may have
        // landed: what the branch has already, by ancestry or patch, needs
        // no rescue branch.
        let upstream = format!("origin/{}", run.hub.branch);
        if clone.fetch_if_moved(&run.hub).is_ok() && !clone.has_own_commits(&upstream, &tip)? {
            run.journal.record(
                name,
                &Event::RescueSkipped {
                    task: id.into(),
                    why: why.into(),
                    because: "its commits are on the branch".into(),
                },
            );
            return Ok(false);
        }
        let branch = format!("farm/rescue/{id}/{}", self.nonce);
        clone.push_ref(&tip, &branch)?;
        run.tell(
            name,
            &Event::Rescue {
                task: Some(id.into()),
                branch: branch.as_str().into(),
                why: why.into(),
            },
        );
        Ok(true)
    }

    /// The attempt noted on the board under `held` (with `detail` lines:
    /// the tests it turned red).
    fn note(
        &self,
        held: &Held,
        why: &str,
        detail: &[String],
        rescued: bool,
    ) -> Result<Recorded, Error> {
        record_attempt(
            Turn { held, ..self.turn },
            Attempted {
                attempt: self.attempt,
                why,
                detail,
                log: &self.log,
                rescue: rescued.then_some(&self.nonce),
            },
        )
    }

    /// The claim is gone. Taken over by another holder, the task is theirs:
    /// nothing to count here. Gone with nobody holding the task, it was
    /// removed, not passed on — by the session itself, as often as not, and
    /// farm cannot tell that from a reaper that left the task free: the
    /// session failed, and the attempt is counted under the claim taken
    /// again (else such a session runs again and again, counting nothing).
    fn lost_claim(&self, why: &str, rescued: bool) -> Result<End, Error> {
        let Turn {
            run, name, task, ..
        } = self.turn;
        // Claimed again, to count the attempt under.
        let Some(again) = claim(run, name, &task.id, self.attempt)? else {
            return Ok(End::Lost { rescued });
        };
        let why = format!("{why}, and nobody held it after: the claim was removed");
        let noted = self.note(&again, &why, &[], rescued);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(outcome: &Outcome) -> Facts<'_> {
        Facts {
            id: "t1",
            base: "0123456789abcdef",
            outcome,
            class: Class::Success,
            lost: false,
            unstarted: None,
            descends: true,
            said: "",
            asked: None,
            review: false,
        }
    }

    #[test]
    fn a_change_for_review_waits_instead_of_landing_and_nothing_else_does() {
        let outcome = Outcome::Success;
        let f = Facts {
            review: true,
            ..facts(&outcome)
        };
        assert_eq!(decide(&f), Step::Review);
        let failed = Outcome::Failed { code: 1 };
        let f = Facts {
            review: true,
            ..facts(&failed)
        };
        assert!(matches!(decide(&f), Step::Fail { .. }));
        let f = Facts {
            review: true,
            asked: Some("Tabs?"),
            ..facts(&outcome)
        };
        assert_eq!(decide(&f), Step::Ask("Tabs?".into()));
    }

    #[test]
    fn a_question_waits_whatever_the_exit_but_not_over_a_lost_claim_or_a_stop() {
        for outcome in [Outcome::Success, Outcome::Failed { code: 1 }] {
            let f = Facts {
                asked: Some("Tabs?"),
                descends: false,
                ..facts(&outcome)
            };
            assert_eq!(decide(&f), Step::Ask("Tabs?".into()));
            let lost = Facts { lost: true, ..f };
            assert!(matches!(decide(&lost), Step::Lose(_)));
        }
        let stopped = Facts {
            asked: Some("Tabs?"),
            ..facts(&Outcome::Interrupted)
        };
        assert!(matches!(decide(&stopped), Step::Stop(_)));
    }

    #[test]
    fn a_stopped_session_is_rescued_whatever_its_log_says() {
        for class in [Class::Success, Class::TaskFailed, Class::Transient] {
            assert_eq!(
                next_step(&Outcome::Interrupted, class),
                Step::Stop("the run was stopped".into())
            );
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
            Step::Fatal {
                rescue: "the agent CLI cannot work".into(),
                why: "no login".into()
            }
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
            Step::fail(
                "the session reported an error",
                "the session exited 0 but its result says it failed",
            )
        );
    }

    #[test]
    fn a_failed_exit_is_a_failed_attempt_named_by_its_outcome() {
        for outcome in [
            Outcome::Failed { code: 3 },
            Outcome::TimedOut,
            Outcome::Killed { signal: 9 },
        ] {
            let Step::Fail { rescue, note, .. } = next_step(&outcome, Class::Success) else {
                panic!("{outcome} is no failed attempt");
            };
            assert_eq!(note, outcome.to_string());
            assert_eq!(rescue, format!("session {outcome}"));
        }
    }

    #[test]
    fn a_lost_claim_comes_before_everything_else() {
        let outcome = Outcome::Success;
        let f = Facts {
            lost: true,
            unstarted: Some(Unstarted::Elsewhere("t0".parse().unwrap())),
            descends: false,
            ..facts(&outcome)
        };
        assert_eq!(
            decide(&f),
            Step::Lose("the claim was taken away while the session ran".into())
        );
    }

    #[test]
    fn an_agent_that_does_not_start_twice_in_a_row_is_a_setup_error() {
        let outcome = Outcome::Failed { code: 127 };
        let first = Facts {
            unstarted: Some(Unstarted::First),
            ..facts(&outcome)
        };
        assert_eq!(decide(&first), Step::Unstarted);
        let elsewhere = Facts {
            unstarted: Some(Unstarted::Elsewhere("t0".parse().unwrap())),
            said: ", saying `nope`",
            ..facts(&outcome)
        };
        assert_eq!(
            decide(&elsewhere),
            Step::Fatal {
                rescue: "the session did not start".into(),
                why: "it does not start: exited 127 at once on `t0`, then on `t1`, saying `nope`"
                    .replace("exited 127", &outcome.to_string()),
            }
        );
        // The same task again: that task's failed attempt, by the table.
        let again = Facts {
            unstarted: Some(Unstarted::Again),
            ..facts(&outcome)
        };
        assert_eq!(decide(&again), next_step(&outcome, Class::Success));
    }

    #[test]
    fn rewritten_history_fails_even_a_successful_session() {
        let outcome = Outcome::Success;
        let f = Facts {
            descends: false,
            ..facts(&outcome)
        };
        assert_eq!(
            decide(&f),
            Step::fail(
                "its history does not descend from where it started",
                "the session rewrote the history it started on: its HEAD does not descend from 0123456789ab",
            )
        );
        assert_eq!(decide(&facts(&outcome)), Step::Integrate);
    }

    #[test]
    fn what_integrating_came_to_decides_what_follows() {
        let land = |r: Result<Integrated, Interrupt>| landed(r, "main", 20);
        assert_eq!(land(Ok(Integrated::Pushed)), Step::Done);
        assert_eq!(
            land(Err(Interrupt::Lost("reaped".into()))),
            Step::Lose("the claim was taken away before the push".into())
        );
        assert_eq!(
            land(Err(Interrupt::Stopped)),
            Step::Stop("the run was stopped during a merge session".into())
        );
        assert_eq!(
            land(Ok(Integrated::Busy)),
            Step::fail(
                "could not push: the branch kept moving",
                "could not push after 20 rounds: `main` kept moving"
            )
        );
        assert_eq!(
            land(Ok(Integrated::Gated(Verdict::Red {
                why: "1 test(s) that pass on `main` fail with it".into(),
                errors: vec!["ERROR: a".into()],
            }))),
            Step::Fail {
                rescue: "the tests turned red".into(),
                note: "the tests: 1 test(s) that pass on `main` fail with it".into(),
                detail: vec!["ERROR: a".into()],
            }
        );
        assert_eq!(
            land(Ok(Integrated::Gated(Verdict::Broken("no sh".into())))),
            Step::Fatal {
                rescue: "the tests cannot run".into(),
                why: "the test gate cannot run: no sh".into()
            }
        );
        assert_eq!(
            land(Ok(Integrated::Gated(Verdict::Untested("timeout".into())))),
            Step::fail(
                "its tests could not be read",
                "its tests could not be read: timeout"
            )
        );
        assert_eq!(
            land(Ok(Integrated::Elsewhere(Place::Done))),
            Step::Elsewhere(Place::Done)
        );
        assert_eq!(
            land(Ok(Integrated::Conflict(vec!["a.rs".into(), "b.rs".into()]))),
            Step::fail(
                "could not merge (a.rs, b.rs)",
                "its work conflicts with `main` in a.rs, b.rs"
            )
        );
    }
}
