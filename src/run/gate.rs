//! The test gate: the project's tests run on the very tree a session's work
//! is about to be pushed as, after the rebase or merge and before the push
//! (under the hub's push lock, when it has one: the tree tested is the tree
//! pushed). A change that turns red a test that passes on the branch, or
//! leaves fewer tests passing, does not land: the attempt fails, its work
//! goes to a rescue branch, and the `ERROR:` lines go into the attempt's
//! note for the next session.
//!
//! What the branch passes is the result kept when its tree was last tested
//! ([`results`]): each gated push keeps its own, so the baseline costs no
//! second run — but for a branch moved by hand, tested once in a work tree
//! of its own. A test that fails and then passes when the same tree is run
//! again at once is flaky: said and journaled, not held against the task.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use crate::error::Error;
use crate::output::Style;
use crate::run::event::Event;
use crate::run::interrupt::{Halt, Heartbeat, Interrupt};
use crate::run::turn::Turn;
use crate::suite::Suite;
use crate::suite::report::{Outcome, Report};
use crate::suite::results::{self, Results, Store};
use crate::suite::run::{Inside, Unrun};

/// What the gate says of a change.
pub(super) enum Verdict {
    /// Nothing that passes on the branch fails with it: push. The tests
    /// with it, when known.
    Pass(Option<Passed>),
    /// It breaks tests (`why`; an `ERROR:` line each).
    Red { why: String, errors: Vec<String> },
    /// Its tests could not be read (a timeout, no report): not pushed.
    Untested(String),
    /// The merge queue gave it up (why), untested: not pushed.
    Unqueued(String),
    /// The test command cannot run at all: the run stops.
    Broken(String),
}

/// The tests of a change the gate let through.
#[derive(Clone)]
pub(super) struct Passed {
    /// Passing tests on the branch, and with the change.
    pub(super) before: usize,
    pub(super) after: usize,
    /// The change's results (a sample's put over the branch's).
    pub(super) report: Report,
}

impl Passed {
    fn unchanged(results: Results) -> Passed {
        let passing = results.passed().len();
        Passed {
            before: passing,
            after: passing,
            report: results.report,
        }
    }
}

/// One run of the suite, as the gate sees it (when it was not cut short).
enum Tested {
    Ran(Report),
    Failed(Unrun),
}

/// Something done once while the change's suite runs, before its verdict
/// (when no suite runs, before the verdict all the same): the merge queue
/// says in line what it tests meanwhile (see `speculate`), rather than
/// before the suite starts.
pub(super) type Meanwhile<'m> = &'m mut dyn FnMut() -> Result<(), Halt>;

/// What the gate asks of the merge queue as it judges a change in line
/// (see [`check_ahead`]).
pub(super) trait Queued {
    /// See [`Meanwhile`].
    fn meanwhile(&mut self) -> Result<(), Halt>;
    /// The results of the commit the change is judged against (the
    /// candidate of the change ahead), once known: `None` when it went
    /// away (the change ahead was evicted).
    fn base(&mut self) -> Result<Option<Result<Results, Verdict>>, Halt>;
}

/// Judge the clone's HEAD, the work on top of `onto` (the branch's commit).
pub(super) fn check(turn: Turn<'_>, onto: &str, meanwhile: Meanwhile<'_>) -> Result<Verdict, Halt> {
    let Some(suite) = &turn.run.config.gate else {
        meanwhile()?;
        return Ok(Verdict::Pass(None));
    };
    let keys = Keys::of(turn, onto)?;
    if keys.here == keys.there {
        meanwhile()?;
        return Ok(keys.unchanged(turn));
    }
    // (A sample is drawn from the branch's tests: those come first.)
    if suite.sample.is_none() && Store::new(&turn.run.state).get(&keys.there).is_none() {
        return side_by_side(turn, suite, onto, &keys, meanwhile);
    }
    let base = match branch_results(turn, onto)? {
        Ok(base) => base,
        Err(verdict) => {
            meanwhile()?;
            return Ok(verdict);
        }
    };
    tested_against(turn, suite, onto, &keys, &base, meanwhile)
}

/// [`check`] with no results kept for the branch's code: the branch's
/// tests (kept) and the change's run side by side, not one after the
/// other. (The first change of a run waited a suite's time for the
/// branch's: 3 s of the 9 before its landing, in the `daemon` bench.)
fn side_by_side(
    turn: Turn<'_>,
    suite: &Suite,
    onto: &str,
    keys: &Keys,
    meanwhile: Meanwhile<'_>,
) -> Result<Verdict, Halt> {
    let clone = turn.clone;
    let dir = baseline_dir(turn);
    clone.tree_at(&dir, onto)?;
    if let Err(e) = clone.files_for_tests() {
        clone.drop_tree(&dir);
        return Err(e.into());
    }
    let tester = Tester::of(turn);
    let (first, base) = std::thread::scope(|scope| {
        // Only this thread beats the claim: two beats of one claim at once
        // could each find the other's record and take the claim for lost.
        let base = scope.spawn(|| tests_unbeaten(&tester, suite, &dir, "baseline"));
        let first = tests_meanwhile(turn, suite, clone.dir(), "gate", None, meanwhile);
        let mut beat = Heartbeat::new(turn.run, turn.held);
        while !base.is_finished() && beat.check().is_ok() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        (first, base.join())
    });
    clone.drop_tree(&dir);
    let first = match first {
        Ok(first) => first,
        Err(halt) => {
            clone.after_tests();
            return Err(halt);
        }
    };
    let base = match base {
        Ok(tested) => as_baseline(turn, onto, tested),
        Err(_) => Err(Interrupt::Stopped.into()),
    };
    let base = match base {
        Ok(Ok(base)) => base,
        other => {
            clone.after_tests();
            first?;
            return other.map(|b| b.err().unwrap_or(Verdict::Pass(None)));
        }
    };
    if !base.commit.is_empty() {
        Store::new(&turn.run.state).put(&keys.there, &base);
    }
    let first = match first {
        Ok(Tested::Ran(report)) => report,
        other => return after_tests(turn, other),
    };
    judged(turn, suite, keys, &base, base.passed(), first, None)
}

/// What the queue asks of the gate: judge HEAD, the work on top of `onto`
/// (a change queued ahead of it, not yet on the branch), running its tests
/// first — beside those of the change ahead — and asking `base` for the
/// results of `onto` only then. `None` when `base` says `onto` went away
/// (the change ahead was evicted): the work is built again.
pub(super) fn check_ahead(
    turn: Turn<'_>,
    onto: &str,
    queued: &mut dyn Queued,
) -> Result<Option<Verdict>, Halt> {
    let Some(suite) = &turn.run.config.gate else {
        queued.meanwhile()?;
        return Ok(Some(Verdict::Pass(None)));
    };
    let keys = Keys::of(turn, onto)?;
    let mut known = None;
    if keys.here == keys.there {
        // Only the board changed: the verdict is that of the change ahead,
        // once known — never before (two changes of the same code: had the
        // one ahead turned red, the one behind, passed on its code, would
        // land it). Results of other code (what a change ahead that did
        // not test alone was built on) judge this code as any other.
        queued.meanwhile()?;
        match queued.base()? {
            None => return Ok(None),
            Some(Err(verdict)) => return Ok(Some(verdict)),
            Some(Ok(results)) if code_key(turn, &results.commit).is_ok_and(|k| k == keys.there) => {
                return Ok(Some(keys.unchanged(turn)));
            }
            Some(Ok(results)) => known = Some(results),
        }
    }
    // A sample is drawn from the base's tests: those come first.
    if suite.sample.is_some() {
        queued.meanwhile()?;
        let base = match known {
            Some(results) => Some(Ok(results)),
            None => queued.base()?,
        };
        return Ok(match base {
            None => None,
            Some(Err(verdict)) => Some(verdict),
            Some(Ok(results)) => Some(tested_against(
                turn,
                suite,
                onto,
                &keys,
                &results,
                &mut || Ok(()),
            )?),
        });
    }
    let clone = turn.clone;
    clone.files_for_tests()?;
    let first = tests_meanwhile(turn, suite, clone.dir(), "gate", None, &mut || {
        queued.meanwhile()
    });
    let first = match first {
        Ok(Ok(Tested::Ran(report))) => report,
        Ok(other) => return after_tests(turn, other).map(Some),
        Err(halt) => {
            clone.after_tests();
            return Err(halt);
        }
    };
    let base = match known {
        Some(results) => Ok(Some(Ok(results))),
        None => queued.base(),
    };
    let results = match base {
        Ok(Some(Ok(results))) => results,
        other => {
            // No base to judge against: the tests' files go back.
            clone.after_tests();
            return other.map(|base| base.and_then(Result::err));
        }
    };
    let base_passed = results.passed();
    judged(turn, suite, &keys, &results, base_passed, first, None).map(Some)
}

/// The code keys of HEAD (`here`) and of the commit it is judged against
/// (`there`): trees that differ only in the board test the same.
struct Keys {
    head: String,
    here: String,
    there: String,
}

impl Keys {
    fn of(turn: Turn<'_>, onto: &str) -> Result<Keys, Error> {
        let head = turn.clone.head()?;
        Ok(Keys {
            here: code_key(turn, &head)?,
            there: code_key(turn, onto)?,
            head,
        })
    }

    /// Only the board changed (or nothing): no test can tell.
    fn unchanged(&self, turn: Turn<'_>) -> Verdict {
        let store = Store::new(&turn.run.state);
        Verdict::Pass(store.get(&self.there).map(Passed::unchanged))
    }
}

/// The code key of `commit` in the clone, as the gate keeps results by it.
pub(super) fn code_key(turn: Turn<'_>, commit: &str) -> Result<String, Error> {
    results::code_key(
        turn.clone.dir(),
        commit,
        turn.run.config.progress.as_deref(),
    )
    .map_err(|e| Error::failure(format!("cannot read the tree of {commit}: {e}")).caused_by(e))
}

/// The branch's results at `onto`: those kept for its code, else tested in
/// a work tree of its own (and kept).
pub(super) fn branch_results(turn: Turn<'_>, onto: &str) -> Result<Result<Results, Verdict>, Halt> {
    let Some(suite) = &turn.run.config.gate else {
        return Ok(Ok(Results::default()));
    };
    let store = Store::new(&turn.run.state);
    let there = code_key(turn, onto)?;
    if let Some(base) = store.get(&there) {
        return Ok(Ok(base));
    }
    Ok(match baseline(turn, suite, onto)? {
        Ok(base) => {
            // (Nothing kept for a branch whose tests cannot be read.)
            if !base.commit.is_empty() {
                store.put(&there, &base);
            }
            Ok(base)
        }
        Err(verdict) => Err(verdict),
    })
}

/// The results kept for `commit`'s code, if any (a change queued ahead
/// keeps its own when the gate lets it through).
pub(super) fn kept_results(turn: Turn<'_>, commit: &str) -> Result<Option<Results>, Error> {
    Ok(Store::new(&turn.run.state).get(&code_key(turn, commit)?))
}

/// Test HEAD (a sample of it, when the gate samples) and judge it against
/// `base`, the results of `onto`.
fn tested_against(
    turn: Turn<'_>,
    suite: &Suite,
    onto: &str,
    keys: &Keys,
    base: &Results,
    meanwhile: Meanwhile<'_>,
) -> Result<Verdict, Halt> {
    let (clone, name) = (turn.clone, turn.name);
    let mut base_passed = base.passed();
    // A sample: its tests, listed in a file of the state directory's, are
    // all the gate runs and judges.
    let chosen = match suite.sample {
        None => None,
        Some(share) => {
            let touched = if base.report.cases.iter().any(|c| c.file.is_some()) {
                clone.changed_since(onto)?
            } else {
                BTreeSet::new()
            };
            let chosen = sample(base, name, turn.task.id.as_str(), share, &touched);
            base_passed.retain(|t| chosen.contains(t));
            Some(write_sample(turn, &chosen)?)
        }
    };
    let chosen = chosen.as_deref();
    clone.files_for_tests()?;
    let first = match tests_meanwhile(turn, suite, clone.dir(), "gate", chosen, meanwhile) {
        Ok(Ok(Tested::Ran(report))) => report,
        Ok(other) => return after_tests(turn, other),
        Err(halt) => {
            clone.after_tests();
            return Err(halt);
        }
    };
    judged(turn, suite, keys, base, base_passed, first, chosen)
}

/// The first run of HEAD's tests judged against the base's passing tests
/// (run again at once when it looks red: what passes then was flaky); the
/// results kept when it passes.
fn judged(
    turn: Turn<'_>,
    suite: &Suite,
    keys: &Keys,
    base: &Results,
    base_passed: BTreeSet<String>,
    first: Report,
    chosen: Option<&Path>,
) -> Result<Verdict, Halt> {
    let Turn {
        run, clone, name, ..
    } = turn;
    let store = Store::new(&run.state);
    let mut judged = judge(&base_passed, &first, None);
    let mut last = first;
    if !judged.red.is_empty() || judged.fewer {
        // Again, at once, on the same tree: what passes now was flaky.
        let again = match tests(turn, suite, clone.dir(), "rerun", chosen) {
            Ok(Tested::Ran(report)) => report,
            other => return after_tests(turn, other),
        };
        judged = judge(&base_passed, &last, Some(&again));
        last = again;
    }
    clone.after_tests();
    if !judged.flaky.is_empty() {
        run.tell(
            name,
            &Event::Flaky {
                task: turn.task.id.as_str().into(),
                tests: judged.flaky.clone(),
            },
        );
    }
    if judged.red.is_empty() && !judged.fewer {
        // The run that let it through is the one kept (a sample's over the
        // branch's results: what it did not run is taken as it was).
        let kept = match chosen {
            None => last,
            Some(_) => over(&base.report, &last),
        };
        let kept = Results::of(&keys.head, &kept);
        store.put(&keys.here, &kept);
        return Ok(Verdict::Pass(Some(Passed {
            before: base.passed().len(),
            after: kept.passed().len(),
            report: kept.report,
        })));
    }
    let branch = &run.hub.branch;
    let why = if judged.red.is_empty() {
        format!(
            "it leaves {} test(s) passing, {} on `{branch}`",
            judged.passed.len(),
            base_passed.len()
        )
    } else {
        format!(
            "{} test(s) that pass on `{branch}` fail with it",
            judged.red.len()
        )
    };
    Ok(Verdict::Red {
        why,
        errors: judged.errors,
    })
}

/// The branch's results at `onto`, tested in a work tree of its own (the
/// gate had none kept for its code); when its tests cannot be read, none
/// passes there (and nothing is kept: `commit` is empty). What the gate
/// says instead when the run was stopped, the claim lost, or the command
/// cannot run at all.
fn baseline(turn: Turn<'_>, suite: &Suite, onto: &str) -> Result<Result<Results, Verdict>, Halt> {
    let clone = turn.clone;
    let dir = baseline_dir(turn);
    clone.tree_at(&dir, onto)?;
    let tested = tests(turn, suite, &dir, "baseline", None);
    clone.drop_tree(&dir);
    as_baseline(turn, onto, tested)
}

/// The work tree the branch's tests run in, beside the clone's.
fn baseline_dir(turn: Turn<'_>) -> std::path::PathBuf {
    let Turn {
        run, clone, name, ..
    } = turn;
    run.state.join("gate").join(
        clone
            .dir()
            .file_name()
            .unwrap_or_else(|| std::ffi::OsStr::new(name)),
    )
}

/// What a run of the branch's tests at `onto` says (see [`baseline`]).
fn as_baseline(
    turn: Turn<'_>,
    onto: &str,
    tested: Result<Tested, Interrupt>,
) -> Result<Result<Results, Verdict>, Halt> {
    let Turn { run, name, .. } = turn;
    Ok(match tested? {
        Tested::Ran(report) => Ok(Results::of(onto, &report)),
        Tested::Failed(Unrun::CannotStart(e)) => Err(Verdict::Broken(e.to_string())),
        Tested::Failed(Unrun::NoReport(e)) => {
            run.say_tone(
                name,
                Style::Bad,
                &format!(
                    "the tests of `{}` cannot be read ({e}); counting none as passing there",
                    run.hub.branch
                ),
            );
            Ok(Results::default())
        }
    })
}

/// Write the agent's sample, one test a line, for `FARM_TEST_SAMPLE`.
fn write_sample(turn: Turn<'_>, chosen: &BTreeSet<String>) -> Result<std::path::PathBuf, Error> {
    let dir = turn.run.state.join("gate");
    let path = dir.join(format!("{}.sample", turn.name));
    let list: String = chosen.iter().map(|t| format!("{t}\n")).collect();
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, list))
        .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", path.display())))?;
    Ok(path)
}

/// A test run in the clone that ended other than with a report: the clone
/// made clean again, and what that means.
fn after_tests(turn: Turn<'_>, tested: Result<Tested, Interrupt>) -> Result<Verdict, Halt> {
    turn.clone.after_tests();
    Ok(match tested? {
        Tested::Ran(_) => Verdict::Pass(None),
        Tested::Failed(Unrun::CannotStart(e)) => Verdict::Broken(e.to_string()),
        Tested::Failed(Unrun::NoReport(e)) => Verdict::Untested(e.to_string()),
    })
}

/// Run the suite in `dir`, heartbeating the claim, journaled as `kind`;
/// only the tests listed in `sample` when it is given (see [`sample`]).
fn tests(
    turn: Turn<'_>,
    suite: &Suite,
    dir: &Path,
    kind: &str,
    sample: Option<&Path>,
) -> Result<Tested, Interrupt> {
    let mut beat = Heartbeat::new(turn.run, turn.held);
    tests_with(&Tester::of(turn), suite, dir, kind, sample, &mut || {
        beat.check()
    })
}

/// [`tests`], doing `meanwhile` at the first look at the running suite
/// (after it, if the suite ended before any): its failure cuts the suite
/// short and is returned.
fn tests_meanwhile(
    turn: Turn<'_>,
    suite: &Suite,
    dir: &Path,
    kind: &str,
    sample: Option<&Path>,
    meanwhile: Meanwhile<'_>,
) -> Result<Result<Tested, Interrupt>, Halt> {
    let mut beat = Heartbeat::new(turn.run, turn.held);
    let (mut pending, mut failed) = (true, None);
    let tested = tests_with(&Tester::of(turn), suite, dir, kind, sample, &mut || {
        if std::mem::take(&mut pending)
            && let Err(halt) = meanwhile()
        {
            failed = Some(halt);
            return Err(Interrupt::Stopped);
        }
        beat.check()
    });
    if let Some(halt) = failed {
        return Err(halt);
    }
    if pending {
        meanwhile()?;
    }
    Ok(tested)
}

/// Who runs the suite, as [`tests_with`] needs it: what a thread beside
/// the turn's may hold (the clone is not to be shared).
struct Tester<'a> {
    run: &'a crate::run::state::Run,
    name: &'a str,
    task: &'a str,
    /// The object stores the clone borrows (read inside a sandbox).
    objects: Vec<std::path::PathBuf>,
}

impl<'a> Tester<'a> {
    fn of(turn: Turn<'a>) -> Tester<'a> {
        Tester {
            run: turn.run,
            name: turn.name,
            task: turn.task.id.as_str(),
            objects: match turn.run.sandbox {
                Some(_) => turn.clone.borrowed_objects(),
                None => Vec::new(),
            },
        }
    }
}

/// [`tests`] without beating the claim (another thread does): cut short
/// only when the run is killed.
fn tests_unbeaten(
    tester: &Tester<'_>,
    suite: &Suite,
    dir: &Path,
    kind: &str,
) -> Result<Tested, Interrupt> {
    let stop = &tester.run.stop;
    tests_with(tester, suite, dir, kind, None, &mut || {
        if stop.killing() {
            Err(Interrupt::Stopped)
        } else {
            Ok(())
        }
    })
}

/// [`tests`], asking `go_on` between looks at the run whether to.
fn tests_with(
    tester: &Tester<'_>,
    suite: &Suite,
    dir: &Path,
    kind: &str,
    sample: Option<&Path>,
    go_on: &mut dyn FnMut() -> Result<(), Interrupt>,
) -> Result<Tested, Interrupt> {
    let Tester { run, name, .. } = *tester;
    let mut env = vec![
        ("FARM_AGENT", name.to_owned()),
        ("FARM_TASK", tester.task.to_owned()),
    ];
    if let Some(path) = sample {
        env.push(("FARM_TEST_SAMPLE", path.display().to_string()));
    }
    let env = env.as_slice();
    let started = Instant::now();
    let mut cut = None;
    let jail = run.sandbox.as_ref().map(|sandbox| {
        let mut read = tester.objects.clone();
        read.extend(sample.map(Path::to_path_buf));
        sandbox.confine(dir, &read, &[])
    });
    let inside = jail.as_ref().map(|(prefix, env)| Inside { prefix, env });
    let ran = crate::suite::run::run_while(suite, dir, env, inside.as_ref(), &mut || {
        cut = go_on().err();
        cut.is_none()
    });
    let secs = started.elapsed().as_secs_f64();
    run.suite_ms.store(
        started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
        std::sync::atomic::Ordering::Relaxed,
    );
    let (counts, error) = match &ran {
        Ok(Some(ran)) => (Some(ran.report.counts()), None),
        Ok(None) => (None, None),
        Err(e) => (None, Some(e.to_string().into())),
    };
    run.journal.record(
        name,
        &Event::Tests {
            task: tester.task.into(),
            kind: kind.into(),
            secs,
            counts,
            error,
        },
    );
    match ran {
        Ok(Some(ran)) => Ok(Tested::Ran(ran.report)),
        Ok(None) => Err(cut.unwrap_or(Interrupt::Stopped)),
        Err(e) => Ok(Tested::Failed(e)),
    }
}

/// The tests a sampled gate runs: each test of the branch's results with a
/// chance of `share` percent, drawn by a hash of the agent, the task and the
/// test (the same agent on the same task draws the same sample; another
/// agent, another one), and every test in a file of `touched`.
fn sample(
    base: &Results,
    agent: &str,
    task: &str,
    share: f64,
    touched: &BTreeSet<String>,
) -> BTreeSet<String> {
    // Out of 1,000,000, so that 0.5 % is a share too.
    let bar = (share * 10_000.0).round() as u64;
    base.report
        .cases
        .iter()
        .filter(|c| {
            c.file.as_ref().is_some_and(|f| touched.contains(f))
                || fnv1a(&[agent, task, &c.id()]) % 1_000_000 < bar
        })
        .map(|c| c.id())
        .collect()
}

/// FNV-1a over `parts`, each followed by a 0 byte: a hash that is the
/// same on every machine and every build (std's is not promised to be).
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// `base` with the cases of `sampled` put over it, by name; cases new in
/// `sampled` added at the end.
fn over(base: &Report, sampled: &Report) -> Report {
    let mut cases = base.cases.clone();
    let mut at: std::collections::HashMap<String, usize> =
        cases.iter().enumerate().map(|(i, c)| (c.id(), i)).collect();
    for case in &sampled.cases {
        match at.get(&case.id()) {
            Some(&i) => cases[i] = case.clone(),
            None => {
                at.insert(case.id(), cases.len());
                cases.push(case.clone());
            }
        }
    }
    Report { cases }
}

/// A change's results set against the branch's.
#[derive(Debug, Default, PartialEq)]
struct Judged {
    /// Tests that pass on the branch and failed in every run of the change.
    red: Vec<String>,
    /// Their `ERROR:` lines.
    errors: Vec<String>,
    /// Tests that failed once and then passed.
    flaky: Vec<String>,
    /// Tests that passed in some run of the change.
    passed: BTreeSet<String>,
    /// Fewer tests pass than on the branch.
    fewer: bool,
}

/// The change's runs (`first`, and `again` if it was run again) against
/// the branch's results.
fn judge(base: &BTreeSet<String>, first: &Report, again: Option<&Report>) -> Judged {
    let runs: Vec<&Report> = std::iter::once(first).chain(again).collect();
    let passed: BTreeSet<String> = runs
        .iter()
        .flat_map(|r| &r.cases)
        .filter(|c| c.outcome == Outcome::Passed)
        .map(|c| c.id())
        .collect();
    let mut judged = Judged {
        fewer: passed.len() < base.len(),
        ..Judged::default()
    };
    let mut seen = BTreeSet::new();
    for case in &first.cases {
        let id = case.id();
        if case.outcome != Outcome::Failed || !base.contains(&id) || !seen.insert(id.clone()) {
            continue;
        }
        if passed.contains(&id) {
            judged.flaky.push(id);
        } else {
            let why = case.failure.as_deref().filter(|w| !w.is_empty());
            judged
                .errors
                .push(format!("ERROR: {id}: {}", why.unwrap_or("failed")));
            judged.red.push(id);
        }
    }
    judged.passed = passed;
    judged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap(text: &str) -> Report {
        crate::suite::tap::parse(text).unwrap()
    }

    fn base(text: &str) -> BTreeSet<String> {
        Results::of("base", &tap(text)).passed()
    }

    #[test]
    fn a_test_green_on_the_branch_and_red_with_the_change_is_red() {
        let base = base("1..3\nok 1 - a\nok 2 - b\nnot ok 3 - c\n");
        // c was red already: not the change's doing; b is.
        let first = tap("1..3\nok 1 - a\nnot ok 2 - b\n# boom\nnot ok 3 - c\n");
        let j = judge(&base, &first, Some(&first));
        assert_eq!(j.red, ["b"]);
        assert_eq!(j.errors.len(), 1);
        assert!(j.errors[0].starts_with("ERROR: b: "), "{:?}", j.errors);
        assert!(j.flaky.is_empty());
    }

    #[test]
    fn a_test_that_passes_when_run_again_is_flaky_not_red() {
        let base = base("1..2\nok 1 - a\nok 2 - b\n");
        let first = tap("1..2\nok 1 - a\nnot ok 2 - b\n");
        let again = tap("1..2\nok 1 - a\nok 2 - b\n");
        let j = judge(&base, &first, Some(&again));
        assert!(j.red.is_empty());
        assert_eq!(j.flaky, ["b"]);
        assert!(!j.fewer);
    }

    #[test]
    fn a_sample_is_about_its_share_and_differs_by_agent() {
        let mut text = String::from("1..1000\n");
        for i in 0..1000 {
            text.push_str(&format!("ok {} - t{i}\n", i + 1));
        }
        let base = Results::of("base", &tap(&text));
        let none = BTreeSet::new();
        let a = sample(&base, "farm-1", "task", 10.0, &none);
        let b = sample(&base, "farm-2", "task", 10.0, &none);
        for s in [&a, &b] {
            assert!((70..=130).contains(&s.len()), "{}", s.len());
        }
        assert_ne!(a, b);
        assert_eq!(a, sample(&base, "farm-1", "task", 10.0, &none));
        assert_ne!(a, sample(&base, "farm-1", "other", 10.0, &none));
        // Tests in a touched file are always in.
        let mut report = tap("1..2\nok 1 - x\nok 2 - y\n");
        report.cases[1].file = Some("src/y.rs".into());
        let base = Results::of("base", &report);
        let touched = BTreeSet::from(["src/y.rs".to_owned()]);
        let s = sample(&base, "farm-1", "task", 0.0001, &touched);
        assert_eq!(s, BTreeSet::from(["y".to_owned()]));
    }

    #[test]
    fn a_sample_is_put_over_the_branch_results() {
        let base = tap("1..3\nok 1 - a\nnot ok 2 - b\nok 3 - c\n");
        let sampled = tap("1..2\nok 1 - b\nok 2 - d\n");
        let ids: Vec<(String, Outcome)> = over(&base, &sampled)
            .cases
            .iter()
            .map(|c| (c.id(), c.outcome))
            .collect();
        assert_eq!(
            ids,
            [
                ("a".into(), Outcome::Passed),
                ("b".into(), Outcome::Passed),
                ("c".into(), Outcome::Passed),
                ("d".into(), Outcome::Passed)
            ]
        );
    }

    #[test]
    fn fewer_passing_tests_is_red_even_with_none_failing() {
        // The change deleted test b.
        let base = base("1..2\nok 1 - a\nok 2 - b\n");
        let j = judge(&base, &tap("1..1\nok 1 - a\n"), None);
        assert!(j.red.is_empty());
        assert!(j.fewer);
        // More passing is fine: the fixed test and a new one.
        let j = judge(
            &base,
            &tap("1..4\nok 1 - a\nok 2 - b\nok 3 - c\nok 4 - d\n"),
            None,
        );
        assert_eq!(
            j,
            Judged {
                passed: ["a", "b", "c", "d"].map(String::from).into(),
                ..Judged::default()
            }
        );
    }
}
